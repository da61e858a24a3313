"""``lakelog plans`` and ``lakelog resume``: pending maintenance plans on the log."""

from __future__ import annotations

import argparse
from typing import Any

from ..maintenance.claims import PlanStatus
from ..maintenance.resume import resume_plan
from .common import (
    add_execution_args,
    add_table_args,
    open_from_args,
    print_json,
    print_rows,
    timestamp_ms,
)
from .maintenance import execution_of, progress_bar


def register(sub: Any) -> None:
    p = sub.add_parser(
        "plans",
        help="list pending maintenance plans (claims on the log)",
        description=(
            "List the maintenance runs (compact, optimize) that claimed files on the log and "
            "have not landed or released all their groups: their id, operation, owner, "
            "state (running: the lease is live; stopped: it crashed or failed, and "
            "`lakelog resume URI PLAN_ID` finishes it), groups and files left."
        ),
    )
    add_table_args(p)
    p.set_defaults(func=cmd_plans)

    p = sub.add_parser(
        "resume",
        help="finish a pending plan whose run stopped",
        description=(
            "Finish a pending maintenance plan whose run crashed or failed: claim its "
            "pending groups again and rewrite only those (groups it already committed are "
            "not redone). Refused while the run's lease is live."
        ),
    )
    add_table_args(p)
    p.add_argument("plan_id", metavar="PLAN_ID", help="the plan's id, from `lakelog plans URI`")
    add_execution_args(p, verb="rewritten")
    p.set_defaults(func=cmd_resume)


def _row(s: PlanStatus) -> dict[str, Any]:
    return {
        "plan_id": s.plan_id,
        "operation": s.operation,
        "state": "running" if s.running else "stopped",
        "owner": s.owner,
        "claimed": timestamp_ms(s.claimed_ms),
        "version": s.claim_version,
        "groups": s.groups,
        "files": s.files,
    }


def cmd_plans(args: argparse.Namespace) -> int:
    statuses = open_from_args(args).plans()
    if args.json:
        print_json([s.to_dict() for s in statuses])
    else:
        print_rows([_row(s) for s in statuses])
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    bar = progress_bar()
    try:
        report = resume_plan(table, args.plan_id, execution_of(args), progress=bar)
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        print_json(report.to_dict())
    else:
        print(report)
    return 0
