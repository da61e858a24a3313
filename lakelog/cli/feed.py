"""``lakelog changes``: the change feed of a range of versions (the rows inserted, deleted
and updated, with their change type, version and time).

``--json`` prints a list of row objects and ``--csv`` a CSV table, both streamed a batch
at a time (a feed may be larger than memory); the plain text table holds every row.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv

from ..inspect import flatten
from .common import add_filter_arg, add_table_args, open_from_args, print_rows, text_columns


def register(sub: Any) -> None:
    p = sub.add_parser(
        "changes",
        help="the rows that changed in a range of versions (the change feed)",
        description=(
            "Prints the rows inserted, deleted and updated by the versions --from..--to "
            "(default: to the latest), with _change_type (insert, delete, "
            "update_preimage, update_postimage), _commit_version and _commit_timestamp. "
            "Appends give their rows as inserts; compaction, clustering and expiry give "
            "nothing. Deletes, updates, merges and overwrites with a predicate are in the "
            "feed when the table property lakelog.change_data_feed was true when they "
            "committed (`lakelog set-properties URI lakelog.change_data_feed=true` turns it on for "
            "the commits after); a range holding one committed without it fails."
        ),
    )
    add_table_args(p)
    p.add_argument(
        "--from",
        dest="start",
        required=True,
        type=_version_or_time,
        metavar="V",
        help="the first version, or an ISO 8601 time (the first version committed at or "
        "after it), e.g. 2024-05-01T12:00:00Z; without a zone: UTC",
    )
    p.add_argument(
        "--to",
        dest="end",
        type=_version_or_time,
        metavar="W",
        help="the last version, or an ISO 8601 time (the last version committed at or "
        "before it); default: the latest version",
    )
    p.add_argument(
        "--columns",
        type=_column_list,
        metavar="A,B",
        help="the table's columns to print, comma-separated (default: all)",
    )
    add_filter_arg(p, where_alias=True, help='only rows matching EXPR, e.g. "customer_id = 42"')
    p.add_argument("--csv", action="store_true", help="print CSV (nested columns flattened)")
    p.set_defaults(func=cmd_changes)


def _version_or_time(text: str) -> int | dt.datetime:
    """argparse type: a version (a whole number >= 0) or an ISO 8601 instant."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a version (a whole number >= 0) or an ISO 8601 time such as "
            f"2024-05-01T12:00:00Z, found {text!r}"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def _column_list(text: str) -> list[str]:
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected column names such as id,day, found {text!r}")
    return names


def cmd_changes(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    feed = table.changes(args.start, args.end, columns=args.columns, filter=args.filter)
    if args.csv:
        _print_csv(feed.schema, feed.to_batches())
    elif args.json:
        _print_json(feed.to_batches())
    else:
        print_rows(feed.to_arrow().to_pylist())
    return 0


def _print_json(batches: Iterator[pa.RecordBatch]) -> None:
    """A JSON list of row objects, written a batch at a time."""
    out = sys.stdout
    first = True
    out.write("[")
    for batch in batches:
        for row in batch.to_pylist():
            out.write("\n  " if first else ",\n  ")
            out.write(json.dumps(row, default=str))
            first = False
    out.write("\n]\n" if not first else "]\n")


def _print_csv(schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> None:
    """A CSV table (header first), written a batch at a time; numbers and instants as
    the text table shows them (:func:`~lakelog.cli.common.text_columns`)."""
    flat = text_columns(flatten(schema.empty_table())).schema
    header = True
    for table in (text_columns(flatten(pa.Table.from_batches([b]))) for b in batches):
        _write_csv(table.cast(flat), header=header)
        header = False
    if header:  # no rows: the header alone
        _write_csv(flat.empty_table(), header=True)


def _write_csv(table: pa.Table, *, header: bool) -> None:
    buf = io.BytesIO()
    pcsv.write_csv(table, buf, write_options=pcsv.WriteOptions(include_header=header))
    sys.stdout.write(buf.getvalue().decode())
