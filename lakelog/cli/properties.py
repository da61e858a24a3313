"""``lakelog set-properties URI KEY=VALUE...`` and ``lakelog unset-properties URI KEY...``:
change table properties (:meth:`lakelog.Table.set_properties`,
:meth:`lakelog.Table.unset_properties`) and print what changed."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import InvalidArgumentError
from ..properties import validate_properties
from ..table import Table
from .common import add_table_args, open_from_args, print_json

_SPECIAL = (
    "`lakelog delta-view enable|disable` also writes or deletes the Delta view's log, and "
    "`lakelog clustering` checks the columns it declares"
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "set-properties",
        help="set table properties (one metadata commit)",
        description=(
            "Sets each KEY to VALUE in one metadata commit; the other properties keep their "
            "values. lakelog.* properties are checked (type, range, known name: a typo is "
            "refused with the closest name; the list is in docs/format.md); other names are "
            "your own. Values equal to the stored ones commit nothing. Prints each property "
            f"with its value before and after. For the Delta view and clustering, {_SPECIAL}."
        ),
    )
    add_table_args(p)
    p.add_argument(
        "pairs",
        nargs="+",
        metavar="KEY=VALUE",
        help="e.g. lakelog.change_data_feed=true (repeat for several)",
    )
    p.set_defaults(func=cmd_set_properties)

    p = sub.add_parser(
        "unset-properties",
        help="remove table properties (one metadata commit)",
        description=(
            "Removes each KEY in one metadata commit: a lakelog.* property reads as its "
            "default again (see docs/format.md), one of your own is gone. A key the table "
            "does not set is refused unless --missing-ok; nothing to remove commits nothing. "
            "Prints each property with its value before."
        ),
    )
    add_table_args(p)
    p.add_argument("keys", nargs="+", metavar="KEY", help="e.g. lakelog.change_data_feed")
    p.add_argument("--missing-ok", action="store_true", help="skip keys the table does not set")
    p.set_defaults(func=cmd_unset_properties)


def _pairs(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidArgumentError(
                f"expected KEY=VALUE, e.g. lakelog.change_data_feed=true, found {pair!r}"
            )
        key = key.strip()
        if key in out:
            raise InvalidArgumentError(f"expected each KEY once, found {key!r} twice")
        out[key] = value
    return out


def _changes(
    before: dict[str, str], after: dict[str, str], keys: list[str]
) -> list[dict[str, Any]]:
    return [{"key": k, "before": before.get(k), "after": after.get(k)} for k in keys]


def _report(
    args: argparse.Namespace, table: Table, version: int, committed: bool, rows: list[Any]
) -> None:
    if args.json:
        print_json({"uri": table.uri, "version": version, "committed": committed, "changes": rows})
        return
    width = max(len(r["key"]) for r in rows)
    for r in rows:
        before = "(unset)" if r["before"] is None else r["before"]
        after = "(unset)" if r["after"] is None else r["after"]
        same = " (unchanged)" if r["before"] == r["after"] else ""
        print(f"{r['key']:<{width}}  {before} -> {after}{same}")
    if committed:
        print(f"committed version {version}")
    else:
        print(f"nothing changed: nothing was committed (version {version})")


def cmd_set_properties(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    wanted = validate_properties(_pairs(args.pairs))  # as stored: true, not True
    current = dict(table.snapshot().properties)
    if all(current.get(k) == v for k, v in wanted.items()):
        rows = _changes(current, current, list(wanted))
        _report(args, table, table.version, False, rows)
        return 0
    result = table.set_properties(wanted)
    before = dict(table.snapshot(result.version - 1).properties)
    after = dict(table.snapshot(result.version).properties)
    _report(args, table, result.version, True, _changes(before, after, list(wanted)))
    return 0


def cmd_unset_properties(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    keys = list(dict.fromkeys(args.keys))
    result = table.unset_properties(keys, missing_ok=args.missing_ok)
    if result.skipped:
        current = dict(table.snapshot(result.version).properties)
        _report(args, table, result.version, False, _changes(current, current, keys))
        return 0
    before = dict(table.snapshot(result.version - 1).properties)
    after = dict(table.snapshot(result.version).properties)
    _report(args, table, result.version, True, _changes(before, after, keys))
    return 0
