"""``lakelog upgrade``: declare format version 3 and write a version-2 manifest now."""

from __future__ import annotations

import argparse
from typing import Any

from .common import add_table_args, open_from_args, print_json


def register(sub: Any) -> None:
    p = sub.add_parser(
        "upgrade",
        help="declare format version 3 and write a version-2 manifest now (older tables)",
        description=(
            "Move an older table to the format new tables start with: declare format "
            "version 3 in a metadata commit when it declares an older one, so maintenance "
            "runs claim their files on the log and concurrent runs pick disjoint files; and "
            "write a version-2 manifest (a root and its leaves) at the latest version, in "
            "place of a version-1 manifest there. Later format versions come with the "
            "features that need them (5: deletion vectors, 6: the change data feed, 7: "
            "column ids), declared when those are turned on, not by this command. Running "
            "it again does nothing. Readers of older lakelog versions refuse the table "
            "afterwards; upgrade them first."
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
