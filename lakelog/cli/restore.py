"""``lakelog restore``: make the latest version read like an earlier one (roll back a bad write)."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from ..errors import InvalidArgumentError
from ..log.actions import AddFile, RemoveFile
from ..log.commits import read_header
from ..table import Table
from ..transaction import CommitResult
from .common import add_table_args, human_bytes, open_from_args, print_json


def register(sub: Any) -> None:
    p = sub.add_parser(
        "restore",
        help="make the latest version read exactly like an earlier one (one commit)",
        description=(
            "Commits the files and metadata (schema, properties) of an earlier version "
            "back as the latest version, removing the files added since; no data file is "
            "rewritten, and the versions in between stay in the history. Fails, changing "
            "nothing, when expire or vacuum already deleted files the version needs. "
            "Exactly-once app versions recorded since are kept."
        ),
    )
    add_table_args(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--version", type=int, metavar="N", help="the version to restore")
    which.add_argument(
        "--as-of",
        metavar="TIME",
        help="restore the version current at this instant (ISO 8601, e.g. "
        "2024-05-01T12:00:00Z; without a zone: UTC)",
    )
    p.set_defaults(func=cmd_restore)


def _instant(text: str) -> dt.datetime:
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgumentError(
            f"expected --as-of as an ISO 8601 instant such as 2024-05-01T12:00:00Z, found {text!r}"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def cmd_restore(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    as_of = _instant(args.as_of) if args.as_of is not None else None
    if args.version is not None and args.version < 0:
        raise InvalidArgumentError(f"expected --version >= 0, found {args.version}")
    result = table.restore(args.version, as_of=as_of)
    restored = _restored_version(table, args.version, result)
    m = _metrics(result)
    if args.json:
        print_json(
            {
                "uri": table.uri,
                "restored_version": restored,
                "version": result.version,
                "committed": not result.skipped,
                **m,
            }
        )
        return 0
    label = 18
    print(f"{'uri':<{label}} {table.uri}")
    print(f"{'restored version':<{label}} {restored if restored is not None else '-'}")
    if result.skipped:
        print(f"{'version':<{label}} {result.version}")
        print("the latest version already reads like it: nothing was committed")
        return 0
    print(f"{'new version':<{label}} {result.version}")
    removed = f"{m['num_removed_files']} ({human_bytes(m['num_removed_bytes'])})"
    back = f"{m['num_restored_files']} ({human_bytes(m['num_restored_bytes'])})"
    print(f"{'files removed':<{label}} {removed}")
    print(f"{'files restored':<{label}} {back}")
    return 0


def _restored_version(table: Table, version: int | None, result: CommitResult) -> int | None:
    if version is not None:
        return version
    if result.skipped:
        return None
    value = read_header(table.storage, result.version).parameters.get("version")
    return value if isinstance(value, int) else None


def _metrics(result: CommitResult) -> dict[str, int]:
    removed = [a for a in result.actions if isinstance(a, RemoveFile)]
    restored = [a for a in result.actions if isinstance(a, AddFile)]
    return {
        "num_removed_files": len(removed),
        "num_removed_bytes": sum(a.size_bytes or 0 for a in removed),
        "num_restored_files": len(restored),
        "num_restored_bytes": sum(a.size_bytes for a in restored),
    }
