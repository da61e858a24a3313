"""``Table.compact``: resolve the options once, plan, then the shared flow.

:func:`prepare_compaction` (every entry point's: ``Table.compact``, Spark, the CLI)
resolves the options against the table and plans on the latest snapshot;
:data:`COMPACTION` is what compaction brings to the shared flow
(:func:`lakelog.maintenance.pipeline.run_prepared`): its commit parameters, its
report, and :func:`~lakelog.maintenance.compaction.rewrite.rewrite_group` as the
in-process rewrite of a group. :func:`execute_plan` runs a plan loaded from JSON.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import pyarrow as pa

from ...log.snapshot import Snapshot
from ...storage import Storage
from ..claims import claimed_files
from ..executor import GroupRunner, ProgressCallback
from ..groups import FileGroup, GroupResult
from ..options import CompactionOptions, ExecutionOptions, check_flag
from ..pacing import Pacer
from ..pipeline import Prepared, RewriteKind, prepare_plan, run_prepared
from ..report import MaintenanceReport
from .planner import CompactionPlan, plan_compaction
from .rewrite import RewriteOptions, rewrite_group

if TYPE_CHECKING:
    from ...core.handle import TableHandle

__all__ = [
    "COMPACTION",
    "commit_parameters",
    "compact_table",
    "execute_plan",
    "prepare_compaction",
]


def commit_parameters(plan: CompactionPlan) -> dict[str, Any]:
    """The ``COMPACT`` commit's parameters: the plan's options (set ones) and size."""
    o = plan.options
    params: dict[str, Any] = {
        "target_file_size": o.target_file_size,
        "target_rows": o.target_rows,
        "min_file_size": o.min_file_size,
        "min_input_files": o.min_input_files,
        "compression": o.compression,
        "planned_groups": len(plan.groups),
    }
    if plan.partition_filter is not None:
        params["partition_filter"] = plan.partition_filter
    return {k: v for k, v in params.items() if v is not None}


def _runner(
    table: TableHandle, plan: CompactionPlan, snapshot: Snapshot | None, lease_id: str
) -> GroupRunner:
    options = RewriteOptions.from_compaction(plan.options)
    options = msgspec.structs.replace(options, lease_id=lease_id)
    return functools.partial(
        _rewrite, table.storage, plan.arrow_schema(), plan.partition_by, options=options
    )


def _rewrite(
    storage: Storage,
    schema: pa.Schema,
    partition_by: Sequence[str],
    group: FileGroup,
    pacer: Pacer,
    *,
    options: RewriteOptions,
) -> GroupResult:
    return rewrite_group(storage, schema, partition_by, group, options, pacer=pacer)


COMPACTION: RewriteKind[CompactionPlan] = RewriteKind(
    name="compact",
    operation="COMPACT",
    parameters=commit_parameters,
    report_fields=lambda plan, committed: {},
    runner=_runner,
)
"""Compaction in the shared flow (:mod:`lakelog.maintenance.pipeline`)."""


def prepare_compaction(
    table: TableHandle,
    options: CompactionOptions | None = None,
    execution: ExecutionOptions | None = None,
    *,
    dry_run: bool = False,
    default_concurrency: int | None = None,
) -> Prepared[CompactionPlan]:
    """Resolve ``options`` and ``execution`` against the table (unset fields from its
    properties) and plan on the latest snapshot, leaving out files another run claimed.

    ``default_concurrency``: the executor's default ``max_concurrent_groups`` (Spark:
    the session's parallelism; otherwise the table property).
    """
    started = time.monotonic()
    check_flag("dry_run", dry_run)
    snap = table.snapshot()
    settings = (execution or ExecutionOptions()).resolve(
        snap.properties, default_concurrency=default_concurrency
    )
    plan = plan_compaction(
        snap, options, exclude=() if dry_run else claimed_files(table.storage, snap)
    )
    return Prepared(
        table=table,
        kind=COMPACTION,
        plan=plan,
        execution=settings,
        snapshot=snap,
        dry_run=dry_run,
        started=started,
    )


def compact_table(
    table: TableHandle,
    options: CompactionOptions | None = None,
    execution: ExecutionOptions | None = None,
    *,
    dry_run: bool = False,
    progress: ProgressCallback | None = None,
) -> MaintenanceReport:
    """Plan on the latest snapshot and execute in this process (see
    :meth:`lakelog.Table.compact`)."""
    prepared = prepare_compaction(table, options, execution, dry_run=dry_run)
    return run_prepared(prepared, progress=progress)


def execute_plan(
    table: TableHandle,
    plan: CompactionPlan,
    *,
    execution: ExecutionOptions | None = None,
    progress: ProgressCallback | None = None,
    plan_id: str | None = None,
) -> MaintenanceReport:
    """Execute a compaction plan loaded from JSON on ``table``, in this process.

    Groups whose sources are no longer live (the plan was made from an older version)
    are dropped first and reported as abandoned instead of being rewritten in vain.
    ``plan_id``: the pending plan this one finishes (``Table.resume``).
    """
    prepared = prepare_plan(table, COMPACTION, plan, execution, plan_id=plan_id)
    return run_prepared(prepared, progress=progress)
