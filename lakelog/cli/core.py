"""``lakelog info``, ``history`` and ``files``."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from ..transforms import partition_values
from .common import (
    add_filter_arg,
    add_table_args,
    human_bytes,
    open_from_args,
    print_json,
    print_rows,
    timestamp_ms,
)
from .metadata import add_csv_arg, print_csv


def register(sub: Any) -> None:
    p = sub.add_parser("info", help="version, schema, partitioning, size of a table")
    add_table_args(p)
    p.add_argument(
        "--version", type=int, default=None, help="describe this version (default: the latest)"
    )
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("history", help="commits, newest first")
    add_table_args(p)
    p.add_argument("--limit", type=int, default=None, help="at most this many commits")
    add_csv_arg(p)
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("files", help="live data files of a version")
    add_table_args(p)
    p.add_argument(
        "--version", type=int, default=None, help="files of this version (default: the latest)"
    )
    add_filter_arg(
        p, help="only files that may hold rows matching EXPR, e.g. \"day = '2026-11-01'\""
    )
    add_csv_arg(p)
    p.set_defaults(func=cmd_files)


def _iso(ms: int) -> str:
    """A commit time in JSON (its form there since the first release; text and CSV print
    :func:`~lakelog.cli.common.timestamp_ms`)."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat(
        timespec="milliseconds"
    )


def cmd_info(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    snap = table.snapshot(args.version)
    info = {
        "uri": table.uri,
        "table_id": snap.table_id,
        "version": snap.version,
        "timestamp": _iso(snap.timestamp_ms),
        "num_files": snap.num_files,
        "num_rows": snap.num_rows,
        "total_bytes": snap.total_bytes,
        "partition_by": list(snap.partition_by),
        "schema": [
            {"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in snap.schema
        ],
        "properties": snap.properties,
    }
    if args.json:
        print_json(info)
        return 0
    shown = {**info, "timestamp": timestamp_ms(snap.timestamp_ms)}
    for key in ("uri", "table_id", "version", "timestamp", "num_files", "num_rows"):
        print(f"{key:<13} {shown[key]}")
    print(f"{'total_bytes':<13} {snap.total_bytes} ({human_bytes(snap.total_bytes)})")
    print(f"{'partition_by':<13} {', '.join(snap.partition_by) or '-'}")
    print("schema")
    for f in snap.schema:
        print(f"  {f.name}: {f.type}{'' if f.nullable else ' not null'}")
    if snap.properties:
        print("properties")
        for k, v in sorted(snap.properties.items()):
            print(f"  {k} = {v}")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    if args.csv:  # the metadata table (lakelog.inspect), flattened
        print_csv(table.inspect.history(limit=args.limit))
        return 0
    when = _iso if args.json else timestamp_ms
    rows = [
        {
            "version": h.version,
            "timestamp": when(h.timestamp_ms),
            "operation": h.operation,
            "read_version": h.read_version,
            "parameters": h.parameters,
            "metrics": h.metrics,
        }
        for h in table.history(limit=args.limit)
    ]
    if args.json:
        print_json(rows)
    else:
        print_rows(rows)
    return 0


def cmd_files(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    if args.csv:  # the metadata table (lakelog.inspect), with statistics, flattened
        print_csv(table.inspect.files(version=args.version, filter=args.filter))
        return 0
    files = table.snapshot(args.version).files(args.filter)
    rows = [
        {
            "path": f.path,
            "size_bytes": f.size_bytes,
            "num_rows": f.num_rows,
            "partition": f.partition or partition_values(f.tags) or None,
        }
        for f in files
    ]
    if args.json:
        print_json(rows)
    else:
        print_rows(rows)
        print(f"{len(rows)} files, {human_bytes(sum(f.size_bytes for f in files))}")
    return 0
