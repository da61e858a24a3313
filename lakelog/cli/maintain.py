"""``lakelog maintain``: what a table (or every table of a catalog) needs, ranked by a
cost model; with ``--no-dry-run`` the best actions run within ``--budget-bytes``, and
with ``--every`` again after each interval until interrupted."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from ..catalog import CATALOG_ENV, connect_catalog
from ..errors import InvalidArgumentError
from ..maintenance.maintain import DEFAULT_BUDGET_BYTES, MaintainReport
from ..maintenance.maintain import maintain_catalog as run_catalog
from .catalog import table_uri
from .common import add_table_args, open_from_args, parse_duration, parse_size, print_json


def _budget(text: str) -> int | None:
    """``--budget-bytes``: a size (``1GiB``, ``1073741824``), or ``none`` for no bound."""
    if text.strip().lower() in ("none", "unlimited"):
        return None
    return parse_size(text)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "maintain",
        help="rank what a table needs (compact, cluster, purge, expire, vacuum) and do it",
        description=(
            "Reads what the table records (file sizes per partition, deleted rows, the "
            "declared clustering's expected bytes read, commits since the newest manifest, "
            "versions past retention, unreferenced files) and ranks the actions it needs by "
            "expected benefit per byte rewritten. A dry run (the default) prints the ranked "
            "actions; --no-dry-run runs the best within --budget-bytes. With --catalog and "
            "no table, every table of the catalog is ranked together. See "
            "docs/maintenance.md, 'maintain: what a table needs'."
        ),
    )
    add_table_args(
        p,
        optional=True,
        uri_help="table location or catalog name; omit it with --catalog to rank every table",
        json_help="print JSON instead of text (with --every, one JSON object per line per round)",
    )
    p.add_argument(
        "--budget-bytes",
        type=_budget,
        default=DEFAULT_BUDGET_BYTES,
        metavar="N",
        help="the most bytes one round may rewrite, e.g. 10GiB, or 'none' (default 1GiB)",
    )
    p.add_argument(
        "--dry-run",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="only rank and print (default); --no-dry-run runs the chosen actions",
    )
    p.add_argument(
        "--every",
        type=parse_duration,
        default=None,
        metavar="INTERVAL",
        help="run a round every INTERVAL (e.g. 10m) until interrupted",
    )
    p.set_defaults(func=cmd_maintain)


def _round(args: argparse.Namespace) -> MaintainReport:
    if args.uri is None:
        url = args.catalog or os.environ.get(CATALOG_ENV, "").strip()
        if not url:
            raise InvalidArgumentError(
                "expected a table (URI or catalog name) or --catalog URL, found neither; "
                "pass the table, or --catalog to rank every table of a catalog."
            )
        with connect_catalog(url) as catalog:
            return run_catalog(catalog, budget_bytes=args.budget_bytes, dry_run=args.dry_run)
    args.uri = table_uri(args)
    return open_from_args(args).maintain(budget_bytes=args.budget_bytes, dry_run=args.dry_run)


def _print(args: argparse.Namespace, report: MaintainReport) -> None:
    if args.json and args.every is not None:
        print(json.dumps(report.to_dict(), default=str))
    elif args.json:
        print_json(report.to_dict())
    else:
        print(report)
        if report.dry_run and report.actions:
            print("dry run: nothing was changed; pass --no-dry-run to run these actions")
    sys.stdout.flush()


def cmd_maintain(args: argparse.Namespace) -> int:
    if args.every is None:
        _print(args, _round(args))
        return 0
    interval = args.every.total_seconds()
    if interval <= 0:
        raise InvalidArgumentError(f"expected --every above 0s, found {interval:g}s")
    while True:  # until interrupted: Ctrl-C ends it (exit status 130)
        started = time.monotonic()
        _print(args, _round(args))
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
