"""``Table.compact``: resolve the options once, plan, execute, commit, report.

:func:`compact_table` plans on the latest snapshot; :func:`execute_plan` runs
a plan made now or loaded from JSON (a saved plan made from an older version
first drops the groups whose sources are gone). Both run the groups on the
shared executor (:func:`lakelog.maintenance.executor.run_groups`) with
:func:`~lakelog.maintenance.compaction.rewrite.rewrite_group` as the runner.
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
from ...transaction import CommitResult
from ..claims import claimed_files
from ..executor import GroupRunner, ProgressCallback, execute_groups
from ..groups import FileGroup, GroupResult
from ..options import ExecutionOptions, check_flag, execution_options
from ..pacing import Pacer
from ..report import MaintenanceReport, rewrite_report
from .planner import CompactionPlan, plan_compaction
from .rewrite import RewriteOptions, rewrite_group

if TYPE_CHECKING:
    from ...table import Table

__all__ = [
    "commit_parameters",
    "compact_table",
    "compaction_report",
    "dry_run_report",
    "execute_plan",
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


def dry_run_report(plan: CompactionPlan, *, duration_s: float = 0.0) -> MaintenanceReport:
    """The report of a plan that is not executed (nothing written)."""
    return rewrite_report(
        "compact", plan, committed=[], commits=[], abandoned=[], duration_s=duration_s, dry_run=True
    )


def execute_plan(
    table: Table,
    plan: CompactionPlan,
    *,
    execution: ExecutionOptions | None = None,
    progress: ProgressCallback | None = None,
    read_snapshot: Snapshot | None = None,
    started: float | None = None,
    plan_id: str | None = None,
) -> MaintenanceReport:
    """Execute a compaction plan (made now or loaded from JSON) on ``table``.

    ``execution`` defaults to :func:`~lakelog.maintenance.options.execution_options`
    of the table's properties. A plan made from an older version first drops the
    groups whose sources are no longer live (reported as abandoned) instead of
    rewriting them in vain.
    """
    started = time.monotonic() if started is None else started
    options = RewriteOptions.from_compaction(plan.options)
    schema = plan.arrow_schema()

    def make_runner(lease_id: str) -> GroupRunner:
        opts = msgspec.structs.replace(options, lease_id=lease_id)
        return functools.partial(_rewrite, table.storage, schema, plan.partition_by, options=opts)

    outcome = execute_groups(
        table,
        plan,
        make_runner,
        execution=execution_options(table.properties) if execution is None else execution,
        operation="COMPACT",
        parameters=commit_parameters(plan),
        progress=progress,
        read_snapshot=read_snapshot,
        plan_id=plan_id,
    )
    report = compaction_report(
        plan,
        committed=outcome.committed,
        commits=outcome.commits,
        abandoned=outcome.abandoned,
        started=started,
        paced_seconds=outcome.paced_seconds,
    )
    report.emit()
    return report


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


def compaction_report(
    plan: CompactionPlan,
    *,
    committed: Sequence[GroupResult],
    commits: Sequence[CommitResult],
    abandoned: Sequence[str],
    started: float,
    paced_seconds: float,
    extra: dict[str, Any] | None = None,
) -> MaintenanceReport:
    """The report of an executed compaction plan, whatever engine ran its groups."""
    return rewrite_report(
        "compact",
        plan,
        committed=committed,
        commits=commits,
        abandoned=abandoned,
        duration_s=time.monotonic() - started,
        paced_seconds=paced_seconds,
        extra=extra,
    )


def compact_table(
    table: Table,
    *,
    target_file_size: int | None = None,
    target_rows: int | None = None,
    min_file_size: int | None = None,
    min_input_files: int | None = None,
    partition_filter: Any = None,
    compression: str | None = None,
    row_group_size: int | None = None,
    max_concurrent_groups: int | None = None,
    max_bytes_per_second: float | None = None,
    partial_progress: bool = False,
    dry_run: bool = False,
    progress: ProgressCallback | None = None,
) -> MaintenanceReport:
    """Plan on the latest snapshot and execute (see :meth:`lakelog.Table.compact`)."""
    started = time.monotonic()
    check_flag("dry_run", dry_run)
    snap = table.snapshot()
    plan = plan_compaction(
        snap,
        target_file_size=target_file_size,
        target_rows=target_rows,
        min_file_size=min_file_size,
        min_input_files=min_input_files,
        partition_filter=partition_filter,
        compression=compression,
        row_group_size=row_group_size,
        exclude=() if dry_run else claimed_files(table.storage, snap),
    )
    execution = execution_options(
        snap.properties,
        max_concurrent_groups=max_concurrent_groups,
        max_bytes_per_second=max_bytes_per_second,
        partial_progress=partial_progress,
    )
    if dry_run:
        report = dry_run_report(plan, duration_s=time.monotonic() - started)
        report.emit()
        return report
    return execute_plan(
        table,
        plan,
        execution=execution,
        progress=progress,
        read_snapshot=snap,
        started=started,
    )
