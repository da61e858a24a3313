"""Finish a pending plan whose run stopped (``Table.resume``, ``lakelog resume``).

The plan file holds the plan as its run made it; the log holds which of its groups
are still pending (:mod:`lakelog.log.plans`). Resuming claims those groups again under
a new lease, with the same plan id, and rewrites only them: groups whose rewrite
commit landed were released by it and are never redone. Groups whose sources were
rewritten or removed meanwhile are dropped (reported as abandoned).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import msgspec

from ..errors import CorruptLogError
from ..log.plans import PendingPlan
from .claims import pending_plan, plan_path
from .clustering.planner import ClusterPlan
from .clustering.run import CLUSTERING
from .compaction.planner import CompactionPlan
from .compaction.run import COMPACTION
from .executor import ProgressCallback
from .options import ExecutionOptions
from .pipeline import RewriteKind, prepare_plan, run_prepared
from .report import MaintenanceReport

if TYPE_CHECKING:
    from ..core.handle import TableHandle

__all__ = ["resume_plan"]


def resume_plan(
    table: TableHandle,
    plan_id: str,
    execution: ExecutionOptions | None = None,
    *,
    progress: ProgressCallback | None = None,
) -> MaintenanceReport:
    """Rewrite the pending groups of plan ``plan_id`` (see the module doc)."""
    snap = table.snapshot()
    pending = pending_plan(table.storage, snap, plan_id)
    try:
        raw = table.storage.read_bytes(plan_path(plan_id))
    except FileNotFoundError as e:
        raise CorruptLogError(
            f"expected the plan file {plan_path(plan_id)} of pending plan {plan_id} in "
            f"{table.storage.uri}, found none; it cannot be resumed. Run the maintenance "
            f"again: its planner takes the plan's files over once the plan's lease has expired."
        ) from e
    if pending.operation in ("OPTIMIZE", "AUTO OPTIMIZE"):
        cluster = ClusterPlan.from_json(raw)
        return _run_pending(table, CLUSTERING, cluster, pending, execution, progress)
    compact = CompactionPlan.from_json(raw)
    return _run_pending(table, COMPACTION, compact, pending, execution, progress)


Plan = TypeVar("Plan", CompactionPlan, ClusterPlan)


def _run_pending(
    table: TableHandle,
    kind: RewriteKind[Plan],
    plan: Plan,
    pending: PendingPlan,
    execution: ExecutionOptions | None,
    progress: ProgressCallback | None,
) -> MaintenanceReport:
    """Run the groups of ``plan`` that ``pending`` still lists, under its claim."""
    left = msgspec.structs.replace(
        plan, groups=tuple(g for g in plan.groups if g.group_id in pending.groups)
    )
    prepared = prepare_plan(table, kind, left, execution, plan_id=pending.plan_id)
    return run_prepared(prepared, progress=progress)
