"""``lakelog upgrade``: move a table to format version 2 now."""

from __future__ import annotations

import argparse
from typing import Any

from .common import add_table_args, open_from_args, print_json


def register(sub: Any) -> None:
    p = sub.add_parser(
        "upgrade",
        help="write a format version 2 manifest at the latest version now",
        description=(
            "Move a table to format version 2 now: write a version-2 manifest (a root and "
            "its leaves) at the latest version, in place of a version-1 manifest there. "
            "Commits nothing, so running writers are not disturbed; running it again does "
            "nothing. Tables also move by themselves at their next manifest. Readers of "
            "lakelog versions that only know format version 1 refuse the table afterwards."
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
