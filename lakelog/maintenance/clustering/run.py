"""``Table.optimize``: resolve the options once, choose the spec, plan, execute, commit, report.

:func:`prepare_optimize` (shared with the Spark executor) checks every argument
before any work, resolves the clustering spec
(:func:`~lakelog.maintenance.clustering.sampling.resolve_spec`) and plans each
partition (:func:`~lakelog.maintenance.clustering.planner.plan_clustering`).
:func:`execute_cluster_plan` runs a plan made now or loaded from JSON on the
shared executor (:func:`lakelog.maintenance.executor.execute_groups`) with
:func:`~lakelog.maintenance.clustering.rewrite.cluster_group` as the runner, so
optimize has what compaction has: progress, paced reads, partial progress,
partition filters, dry runs and saved plans. The report is a
:class:`MaintenanceReport` with clustering fields in ``extra``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from ...errors import InvalidArgumentError
from ...log.snapshot import Snapshot
from ...storage import Storage
from ...transaction import CommitResult
from ..claims import claimed_files
from ..executor import GroupRunner, ProgressCallback, execute_groups, plan_read_snapshot
from ..groups import FileGroup, GroupResult
from ..options import ExecutionOptions, check_flag, execution_options
from ..pacing import Pacer
from ..partition_filter import partition_matcher
from ..report import MaintenanceReport, rewrite_report
from ..sources import file_schema_of
from .planner import ClusterPlan, cluster_options, plan_clustering
from .rewrite import cluster_group
from .sampling import fresh_keys_reader, resolve_spec
from .spec import ClusterSpec, declared_clustering, validate_clustering

if TYPE_CHECKING:
    from ...table import Table

__all__ = [
    "PreparedOptimize",
    "commit_parameters",
    "execute_cluster_plan",
    "optimize_report",
    "optimize_table",
    "prepare_optimize",
    "report_extra",
]


@dataclass(frozen=True)
class PreparedOptimize:
    """Everything an executor needs to run an optimize: checked, resolved and planned."""

    snapshot: Snapshot
    spec: ClusterSpec
    plan: ClusterPlan
    execution: ExecutionOptions
    """How to run the groups, resolved with the rest (never part of the plan)."""
    dry_run: bool
    started: float
    """``time.monotonic()`` when preparation began (the report's duration counts it)."""


def report_extra(plan: ClusterPlan) -> dict[str, Any]:
    """The clustering fields of an optimize report (from the plan alone)."""
    columns, curve = list(plan.columns), plan.curve
    return {
        "zorder_columns": columns if curve != "linear" else [],
        "sort_columns": columns if curve == "linear" else [],
        "curve": curve,
        "incremental": plan.incremental,
        "spec_id": plan.spec_id,
        "new_bytes": plan.fresh_bytes,
        "full_groups": len(plan.full_groups),
        "spilled_runs": 0,
    }


def commit_parameters(plan: ClusterPlan) -> dict[str, Any]:
    """The ``OPTIMIZE`` commit's parameters."""
    params: dict[str, Any] = {
        "columns": list(plan.columns),
        "curve": plan.curve,
        "incremental": plan.incremental,
        "spec_id": plan.spec_id,
        "target_file_size": plan.options.target_file_size,
        "planned_groups": len(plan.groups),
    }
    if plan.partition_filter is not None:
        params["partition_filter"] = plan.partition_filter
    return params


def prepare_optimize(
    table: Table,
    *,
    zorder_by: Sequence[str] | str | None,
    sort_by: Sequence[str] | str | None,
    curve: str,
    target_file_size: int | None,
    partition_filter: Any,
    incremental: bool,
    max_group_bytes: int | None,
    compression: str | None,
    row_group_size: int | None,
    max_concurrent_groups: int | None = None,
    max_bytes_per_second: float | None = None,
    partial_progress: bool = False,
    dry_run: bool = False,
    default_concurrency: int | None = None,
) -> PreparedOptimize:
    """Check every argument (clear errors before any work), resolve the spec, plan.

    ``default_concurrency``: the executor's default ``max_concurrent_groups`` (Spark:
    the session's parallelism; otherwise the table property).
    """
    started = time.monotonic()
    check_flag("dry_run", dry_run)
    check_flag("incremental", incremental)
    snap = table.snapshot()
    if zorder_by is None and sort_by is None:  # keep the layout the table declares
        declared = declared_clustering(snap.properties)
        if declared is None:
            raise InvalidArgumentError(
                "expected zorder_by=[...] (a space-filling curve over several columns) or "
                "sort_by=[...] (a linear sort), or a clustering declared on the table, found "
                "neither; pass one, or declare it once with set_clustering(...) (lakelog "
                "clustering URI --zorder-by ...)."
            )
        args = declared.optimize_arguments()
        zorder_by, sort_by, curve = args["zorder_by"], args["sort_by"], args["curve"]
    columns, curve_name = validate_clustering(
        snap.schema, snap.partition_by, zorder_by=zorder_by, sort_by=sort_by, curve=curve
    )
    options = cluster_options(
        snap,
        target_file_size=target_file_size,
        row_group_size=row_group_size,
        compression=compression,
        max_group_bytes=max_group_bytes,
    )
    execution = execution_options(
        snap.properties,
        max_concurrent_groups=max_concurrent_groups,
        max_bytes_per_second=max_bytes_per_second,
        partial_progress=partial_progress,
        default_concurrency=default_concurrency,
    )
    if isinstance(partition_filter, (list, tuple)) and not partition_filter:
        partition_filter = None
    files = snap.files()
    claimed = () if dry_run else claimed_files(table.storage, snap)
    if claimed:  # under another run's live claim: that run rewrites them
        files = [f for f in files if f.path not in claimed]
    if partition_filter is not None:
        match = partition_matcher(snap.schema, snap.partition_by, partition_filter)
        mask = match([f.partition for f in files])
        files = [f for f, keep in zip(files, mask, strict=True) if keep]
    spec = resolve_spec(
        table.storage,
        files,
        snap.schema,
        snap.partition_by,
        columns,
        curve_name,
        incremental=incremental,
        options=options,
    )
    fresh_keys = fresh_keys_reader(
        table.storage, file_schema_of(snap.schema, snap.partition_by), spec
    )
    plan = plan_clustering(
        snap, spec, options, incremental=incremental, fresh_keys=fresh_keys, files=files
    )
    if partition_filter is not None:
        plan = msgspec.structs.replace(plan, partition_filter=str(partition_filter))
    return PreparedOptimize(
        snapshot=snap,
        spec=spec,
        plan=plan,
        execution=execution,
        dry_run=dry_run,
        started=started,
    )


def optimize_report(
    plan: ClusterPlan,
    *,
    committed: Sequence[GroupResult],
    commits: Sequence[CommitResult],
    abandoned: Sequence[str],
    started: float,
    paced_seconds: float = 0.0,
    dry_run: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> MaintenanceReport:
    """The report of an optimize plan, whatever engine ran its groups: ``committed`` are
    the results that landed in ``commits``; a dry run reports what the plan would do.
    ``extra`` adds to (or overrides) :func:`report_extra`."""
    fields = report_extra(plan)
    fields["spilled_runs"] = sum(r.spilled_runs for r in committed)
    fields.update(extra or {})
    return rewrite_report(
        "optimize",
        plan,
        committed=committed,
        commits=commits,
        abandoned=abandoned,
        duration_s=time.monotonic() - started,
        dry_run=dry_run,
        paced_seconds=paced_seconds,
        extra=fields,
    )


def _cluster(
    storage: Storage,
    schema: Any,
    plan: ClusterPlan,
    spec: ClusterSpec,
    lease_id: str,
    group: FileGroup,
    pacer: Pacer,
) -> GroupResult:
    return cluster_group(
        storage,
        schema,
        plan.partition_by,
        group,
        plan.segments[group.group_id],
        spec,
        plan.options,
        lease_id=lease_id,
        pacer=pacer,
    )


def execute_cluster_plan(
    table: Table,
    plan: ClusterPlan,
    *,
    execution: ExecutionOptions | None = None,
    progress: ProgressCallback | None = None,
    read_snapshot: Snapshot | None = None,
    started: float | None = None,
    plan_id: str | None = None,
) -> MaintenanceReport:
    """Execute a clustering plan (made now or loaded from JSON) on ``table``.

    ``execution`` defaults to the table's properties. A plan made from an older
    version first drops the groups whose sources are no longer live (reported as
    abandoned); the spec is decoded against the schema at the plan's read version (the
    latest version's if that one was expired since).
    """
    started = time.monotonic() if started is None else started
    if read_snapshot is None:
        read_snapshot = plan_read_snapshot(table, plan)
        given = None
    else:
        given = read_snapshot
    schema = read_snapshot.schema
    spec = plan.cluster_spec(schema)

    def make_runner(lease_id: str) -> GroupRunner:
        def run(group: FileGroup, pacer: Pacer) -> GroupResult:
            return _cluster(table.storage, schema, plan, spec, lease_id, group, pacer)

        return run

    outcome = execute_groups(
        table,
        plan,
        make_runner,
        execution=execution_options(table.properties) if execution is None else execution,
        operation="OPTIMIZE",
        parameters=commit_parameters(plan),
        progress=progress,
        read_snapshot=given,
        plan_id=plan_id,
    )
    report = optimize_report(
        plan,
        committed=outcome.committed,
        commits=outcome.commits,
        abandoned=outcome.abandoned,
        started=started,
        paced_seconds=outcome.paced_seconds,
    )
    report.emit()
    return report


def optimize_table(
    table: Table,
    *,
    zorder_by: Sequence[str] | str | None = None,
    sort_by: Sequence[str] | str | None = None,
    curve: str = "hilbert",
    target_file_size: int | None = None,
    partition_filter: Any = None,
    incremental: bool = True,
    max_group_bytes: int | None = None,
    compression: str | None = None,
    row_group_size: int | None = None,
    max_concurrent_groups: int | None = None,
    max_bytes_per_second: float | None = None,
    partial_progress: bool = False,
    dry_run: bool = False,
    progress: ProgressCallback | None = None,
) -> MaintenanceReport:
    """Cluster the table (see :meth:`lakelog.Table.optimize`)."""
    prep = prepare_optimize(
        table,
        zorder_by=zorder_by,
        sort_by=sort_by,
        curve=curve,
        target_file_size=target_file_size,
        partition_filter=partition_filter,
        incremental=incremental,
        max_group_bytes=max_group_bytes,
        compression=compression,
        row_group_size=row_group_size,
        max_concurrent_groups=max_concurrent_groups,
        max_bytes_per_second=max_bytes_per_second,
        partial_progress=partial_progress,
        dry_run=dry_run,
    )
    if dry_run or not prep.plan.groups:
        report = optimize_report(
            prep.plan, committed=[], commits=[], abandoned=[], started=prep.started, dry_run=dry_run
        )
        report.emit()
        return report
    return execute_cluster_plan(
        table,
        prep.plan,
        execution=prep.execution,
        progress=progress,
        read_snapshot=prep.snapshot,
        started=prep.started,
    )
