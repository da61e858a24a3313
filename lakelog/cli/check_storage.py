"""``lakelog check-storage``: does the store refuse a second put-if-absent of a key?"""

from __future__ import annotations

import argparse
from typing import Any

from ..storage import Storage
from ..storage_check import CHECK_PROPERTY, MARKER, check_storage
from .common import add_table_args, print_json, storage_options


def register(sub: Any) -> None:
    p = sub.add_parser(
        "check-storage",
        help="check that the store refuses a second conditional put of the same key",
        description=(
            "Check that the store under URI keeps the put-if-absent promise every commit "
            "rests on: a fresh probe key under _lakelog/ is put twice, the second put must "
            "be refused, and the probe is deleted. Some S3-compatible stores accept the "
            "conditional-put header and ignore it; there two writers could both commit the "
            "same version. On a table the outcome is recorded in "
            f"{MARKER} (removed when the check fails), so writers need not probe again. "
            "Writers run the same check once per store by themselves unless the table "
            f"property {CHECK_PROPERTY} is false. URI may be a location with no table "
            "yet. Exits 1 when the store accepts the second put."
        ),
    )
    add_table_args(p)
    p.set_defaults(func=cmd_check_storage)


def cmd_check_storage(args: argparse.Namespace) -> int:
    from .catalog import table_uri

    storage = Storage(
        table_uri(args), storage_options(args.storage_option), single_writer=args.single_writer
    )
    result = check_storage(storage)
    if args.json:
        print_json(result.to_dict())
    else:
        print(result.summary())
    if not result.refused_second_put:
        raise result.error()
    return 0
