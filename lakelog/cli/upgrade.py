"""``lakelog upgrade``: move a table to format version 2 now."""

from __future__ import annotations

import argparse
from typing import Any

from .common import add_table_args, open_from_args, print_json


def register(sub: Any) -> None:
    p = sub.add_parser(
        "upgrade",
        help="move a table to the newest format version now",
        description=(
            "Move a table to the newest format version now: declare format version 3, the "
            "newest a table declares (version 4 changes only manifests), in a metadata "
            "commit, so maintenance runs claim their files on the log and concurrent runs "
            "pick disjoint files; and write a version-2 manifest (a root "
            "and its leaves) at the latest version, in place of a version-1 manifest there. "
            "Running it again does nothing. Readers of older lakelog versions refuse the "
            "table afterwards; upgrade them first."
        ),
    )
    add_table_args(p)
    p.set_defaults(func=cmd_upgrade)


def cmd_upgrade(args: argparse.Namespace) -> int:
    report = open_from_args(args).upgrade()
    if args.json:
        print_json(report.to_dict())
    else:
        print(report.summary())
    return 0
