"""``lakelog rename-column``: rename a column without rewriting a file (column ids,
format version 7; ``docs/schema-evolution.md``)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import add_table_args, open_from_args, print_json


def register(sub: Any) -> None:
    p = sub.add_parser(
        "rename-column",
        help="rename a column (one commit; no data file is rewritten)",
        description=(
            "Gives column OLD the name NEW. The column keeps its id and the name its data "
            "files store it under, so files written before read under the new name and "
            "their statistics keep pruning. The first rename turns column ids on (table "
            "format version 7: older lakelog releases refuse the table). Properties that "
            "name the column (clustering, bloom filters) follow it. Partition columns keep "
            "their names."
        ),
    )
    add_table_args(p)
    p.add_argument("old", help="the column's current name")
    p.add_argument("new", help="its new name (no column may have it)")
    p.set_defaults(func=cmd_rename_column)


def cmd_rename_column(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    result = table.rename_column(args.old, args.new)
    if args.json:
        print_json({"version": result.version, "column": args.old, "to": args.new})
        return 0
    print(f"renamed {args.old!r} to {args.new!r} in version {result.version}")
    return 0
