"""``lakelog partitions`` and ``snapshots``, and ``--csv`` for ``files`` and ``history``:
the metadata tables of :mod:`lakelog.inspect` in the shell.

``--json`` prints the rows as a list of objects (nested where the table nests:
``partition``, ``stats``); ``--csv`` prints one flat CSV table (nested columns as
``stats.x.min``), ready for a spreadsheet or ``duckdb -c "... read_csv('/dev/stdin')"``.
"""

from __future__ import annotations

import argparse
import io
import sys
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv

from ..inspect import flatten
from .common import (
    add_filter_arg,
    add_table_args,
    format_timestamp,
    human_bytes,
    open_from_args,
    print_json,
    print_rows,
    text_columns,
)


def add_csv_arg(p: argparse.ArgumentParser) -> None:
    """``--csv`` beside the ``--json`` every table command has."""
    p.add_argument("--csv", action="store_true", help="print CSV (nested columns flattened)")


def print_csv(table: pa.Table) -> None:
    """A metadata table as CSV on stdout (header line first), numbers and instants as
    the text tables show them (:func:`~lakelog.cli.common.format_value`)."""
    buf = io.BytesIO()
    pcsv.write_csv(text_columns(flatten(table)), buf)
    sys.stdout.write(buf.getvalue().decode())


def register(sub: Any) -> None:
    p = sub.add_parser(
        "partitions",
        help="partitions of a version: files, rows, bytes and column bounds per partition",
    )
    add_table_args(p)
    add_csv_arg(p)
    p.add_argument(
        "--version", type=int, default=None, help="partitions of this version (default: the latest)"
    )
    add_filter_arg(
        p, help="only files that may hold rows matching EXPR, e.g. \"day >= '2026-11-01'\""
    )
    p.set_defaults(func=cmd_partitions)

    p = sub.add_parser(
        "snapshots",
        help="readable versions: files, rows and bytes of each, and what its commit changed",
    )
    add_table_args(p)
    add_csv_arg(p)
    p.set_defaults(func=cmd_snapshots)


def _output(args: argparse.Namespace, table: pa.Table) -> bool:
    """Print ``table`` as JSON or CSV when asked; False: the caller prints text."""
    if args.csv:
        print_csv(table)
        return True
    if args.json:
        print_json(table.to_pylist())
        return True
    return False


def cmd_partitions(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    parts = table.inspect.partitions(version=args.version, filter=args.filter)
    if _output(args, parts):
        return 0
    rows = []
    for r in parts.to_pylist():
        row: dict[str, Any] = dict(r.get("partition") or {})
        row["files"] = r["file_count"]
        row["rows"] = r["num_rows"]
        row["size"] = human_bytes(r["total_bytes"])
        rows.append(row)
    print_rows(rows)
    return 0


def cmd_snapshots(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    snaps = table.inspect.snapshots()
    if _output(args, snaps):
        return 0
    rows = [
        {
            "version": r["version"],
            "timestamp": format_timestamp(r["timestamp"]),
            "operation": r["operation"],
            "files": r["num_files"],
            "rows": r["num_rows"],
            "size": human_bytes(r["total_bytes"]),
            "+files": r["files_added"],
            "-files": r["files_removed"],
            "manifest": "yes" if r["manifest"] else "",
        }
        for r in snaps.to_pylist()
    ]
    print_rows(rows)
    return 0
