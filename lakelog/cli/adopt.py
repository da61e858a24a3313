"""``lakelog convert URI`` and ``lakelog add-files URI PATH...``: adopt Parquet files
written by other tools (see :mod:`lakelog.interop.convert`)."""

from __future__ import annotations

import argparse
from typing import Any

import pyarrow as pa

from ..errors import InvalidArgumentError
from ..interop.convert import add_files, convert
from ..log.actions import AddFile
from .common import (
    add_storage_option_arg,
    add_table_args,
    human_bytes,
    open_from_args,
    print_json,
    storage_options,
)

_TYPES = {
    "int": pa.int64(),
    "bigint": pa.int64(),
    "string": pa.string(),
    "date": pa.date32(),
    "bool": pa.bool_(),
    "boolean": pa.bool_(),
}


def register(sub: Any) -> None:
    p = sub.add_parser(
        "convert",
        help="turn a folder of Parquet files into a table in place",
        description=(
            "Adopt every Parquet file under URI (hidden names skipped) as version 0 of a "
            "new table, with statistics from the footers; Hive folders (day=2026-11-02/) "
            "become partition columns. Files are neither moved nor rewritten. Files whose "
            "schemas cannot be unified are listed and nothing is committed. Like every new "
            "table it gets lakelog.deletion_vectors=true unless --property sets it or "
            "lakelog.delta_view=true."
        ),
    )
    p.add_argument("uri", help="the folder: a path, file://, s3://, memory://")
    add_storage_option_arg(p)
    p.add_argument(
        "--partition-by",
        metavar="COL[:TYPE],...",
        help="partition folders, in order, optionally typed (int, string, date, bool); "
        "default: inferred from the folders",
    )
    p.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="table property (repeatable), e.g. --property lakelog.delta_view=true",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead of text (a failure too: one JSON object on stderr)",
    )
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser(
        "add-files",
        help="adopt Parquet files another tool wrote under the table's folder",
        description=(
            "Add files (or every Parquet file below folders) already under the table's "
            "root in one commit, after checking their schema and partition folders. Files "
            "already in the table are refused."
        ),
    )
    add_table_args(p)
    p.add_argument(
        "paths", nargs="+", metavar="PATH", help="files or folders, relative to the table root"
    )
    p.set_defaults(func=cmd_add_files)


def _partition_by(text: str | None) -> list[str] | pa.Schema | None:
    if text is None:
        return None
    names: list[str] = []
    fields: list[pa.Field] = []
    typed = False
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        name, _, kind = item.partition(":")
        if kind:
            typed = True
            if kind.lower() not in _TYPES:
                raise InvalidArgumentError(
                    f"expected a partition type among {sorted(set(_TYPES))} in "
                    f"--partition-by, found {kind!r} for {name!r}"
                )
        names.append(name)
        fields.append(pa.field(name, _TYPES[kind.lower()] if kind else pa.string()))
    if typed and any(":" not in item for item in text.split(",") if item.strip()):
        raise InvalidArgumentError(
            f"expected a type for every column of --partition-by or for none, found {text!r}"
        )
    return pa.schema(fields) if typed else names


def _properties(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidArgumentError(f"expected KEY=VALUE for --property, found {pair!r}")
        out[key.strip()] = value.strip()
    return out


def cmd_convert(args: argparse.Namespace) -> int:
    table = convert(
        args.uri,
        partition_by=_partition_by(args.partition_by),
        properties=_properties(args.property),
        storage_options=storage_options(args.storage_option),
    )
    snap = table.snapshot()
    info = {
        "uri": table.uri,
        "version": snap.version,
        "num_files": snap.num_files,
        "num_rows": snap.num_rows,
        "total_bytes": snap.total_bytes,
        "partition_by": list(snap.partition_by),
        "schema": [{"name": f.name, "type": str(f.type)} for f in snap.schema],
    }
    if args.json:
        print_json(info)
        return 0
    print(f"{'uri':<13} {table.uri}")
    print(f"{'version':<13} {snap.version} (CONVERT)")
    print(f"{'num_files':<13} {snap.num_files}")
    print(f"{'num_rows':<13} {snap.num_rows}")
    print(f"{'total_bytes':<13} {snap.total_bytes} ({human_bytes(snap.total_bytes)})")
    print(f"{'partition_by':<13} {', '.join(snap.partition_by) or '-'}")
    print("schema")
    for f in snap.schema:
        print(f"  {f.name}: {f.type}{'' if f.nullable else ' not null'}")
    return 0


def cmd_add_files(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    result = add_files(table, list(args.paths))
    added = [a for a in result.actions if isinstance(a, AddFile)]
    rows = sum(a.num_rows for a in added)
    size = sum(a.size_bytes for a in added)
    if args.json:
        print_json(
            {
                "uri": table.uri,
                "version": result.version,
                "files_added": len(added),
                "rows_added": rows,
                "bytes_added": size,
                "paths": [a.path for a in added],
            }
        )
        return 0
    print(f"{'uri':<13} {table.uri}")
    print(f"{'version':<13} {result.version} (ADD FILES)")
    print(f"{'files added':<13} {len(added)}")
    print(f"{'rows added':<13} {rows}")
    print(f"{'bytes added':<13} {size} ({human_bytes(size)})")
    return 0
