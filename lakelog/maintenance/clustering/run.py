"""``Table.optimize``: resolve the options once, choose the spec, plan, then the shared flow.

:func:`prepare_clustering` (every entry point's: ``Table.optimize``, Spark, the CLI)
checks every option before any work, resolves the clustering spec
(:func:`~lakelog.maintenance.clustering.sampling.resolve_spec`) and plans each
partition (:func:`~lakelog.maintenance.clustering.planner.plan_clustering`).
:data:`CLUSTERING` is what clustering brings to the shared flow
(:func:`lakelog.maintenance.pipeline.run_prepared`): its commit parameters, its
report (a :class:`MaintenanceReport` with clustering fields in ``extra``) and
:func:`~lakelog.maintenance.clustering.rewrite.cluster_group` as the in-process
rewrite of a group, so optimize has what compaction has: progress, paced reads,
partial progress, partition filters, dry runs and saved plans
(:func:`execute_cluster_plan`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ...errors import InvalidArgumentError
from ...log.actions import DataFile
from ...log.snapshot import Snapshot
from ..claims import claimed_files
from ..executor import GroupRunner, ProgressCallback, plan_read_snapshot
from ..groups import FileGroup, GroupResult
from ..options import ClusteringOptions, ExecutionOptions, check_flag
from ..pacing import Pacer
from ..partition_filter import partition_matcher
from ..pipeline import Prepared, RewriteKind, prepare_plan, run_prepared
from ..report import MaintenanceReport
from ..sources import file_schema_of
from .planner import ClusterPlan, cluster_options, plan_clustering
from .rewrite import cluster_group
from .sampling import fresh_keys_reader, resolve_spec
from .spec import declared_clustering, validate_clustering

if TYPE_CHECKING:
    from ...core.handle import TableHandle

__all__ = [
    "CLUSTERING",
    "commit_parameters",
    "execute_cluster_plan",
    "optimize_table",
    "prepare_clustering",
    "report_extra",
]


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


def _report_fields(plan: ClusterPlan, committed: Sequence[GroupResult]) -> dict[str, Any]:
    fields = report_extra(plan)
    fields["spilled_runs"] = sum(r.spilled_runs for r in committed)
    return fields


def _runner(
    table: TableHandle, plan: ClusterPlan, snapshot: Snapshot | None, lease_id: str
) -> GroupRunner:
    # a saved plan's spec decodes against the schema at its read version (the latest
    # version's if that one was expired since)
    schema = (snapshot if snapshot is not None else plan_read_snapshot(table, plan)).schema
    spec = plan.cluster_spec(schema)

    def run(group: FileGroup, pacer: Pacer) -> GroupResult:
        return cluster_group(
            table.storage,
            schema,
            plan.partition_by,
            group,
            plan.segments[group.group_id],
            spec,
            plan.options,
            lease_id=lease_id,
            pacer=pacer,
        )

    return run


CLUSTERING: RewriteKind[ClusterPlan] = RewriteKind(
    name="optimize",
    operation="OPTIMIZE",
    parameters=commit_parameters,
    report_fields=_report_fields,
    runner=_runner,
)
"""Clustering in the shared flow (:mod:`lakelog.maintenance.pipeline`)."""


def prepare_clustering(
    table: TableHandle,
    options: ClusteringOptions | None = None,
    execution: ExecutionOptions | None = None,
    *,
    dry_run: bool = False,
    default_concurrency: int | None = None,
) -> Prepared[ClusterPlan]:
    """Check every option (clear errors before any work), resolve the spec, plan.

    With neither ``zorder_by`` nor ``sort_by`` the table's declared clustering is
    kept. ``default_concurrency``: the executor's default ``max_concurrent_groups``
    (Spark: the session's parallelism; otherwise the table property).
    """
    started = time.monotonic()
    check_flag("dry_run", dry_run)
    options = options or ClusteringOptions()
    snap = table.snapshot()
    zorder_by, sort_by, curve = options.zorder_by, options.sort_by, options.curve
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
    settings = cluster_options(snap, options)
    execution_settings = (execution or ExecutionOptions()).resolve(
        snap.properties, default_concurrency=default_concurrency
    )
    partition_filter = options.partition_filter
    files: Sequence[DataFile] = list(snap.files())
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
        incremental=options.incremental,
        options=settings,
    )
    fresh_keys = fresh_keys_reader(
        table.storage, file_schema_of(snap.schema, snap.partition_by), spec
    )
    plan = plan_clustering(
        snap, spec, settings, incremental=options.incremental, fresh_keys=fresh_keys, files=files
    )
    if partition_filter is not None:
        plan = msgspec.structs.replace(plan, partition_filter=str(partition_filter))
    return Prepared(
        table=table,
        kind=CLUSTERING,
        plan=plan,
        execution=execution_settings,
        snapshot=snap,
        dry_run=dry_run,
        started=started,
    )


def optimize_table(
    table: TableHandle,
    options: ClusteringOptions | None = None,
    execution: ExecutionOptions | None = None,
    *,
    dry_run: bool = False,
    progress: ProgressCallback | None = None,
) -> MaintenanceReport:
    """Cluster the table in this process (see :meth:`lakelog.Table.optimize`)."""
    prepared = prepare_clustering(table, options, execution, dry_run=dry_run)
    return run_prepared(prepared, progress=progress)


def execute_cluster_plan(
    table: TableHandle,
    plan: ClusterPlan,
    *,
    execution: ExecutionOptions | None = None,
    progress: ProgressCallback | None = None,
    plan_id: str | None = None,
) -> MaintenanceReport:
    """Execute a clustering plan loaded from JSON on ``table``, in this process.

    Groups whose sources are no longer live (the plan was made from an older version)
    are dropped first and reported as abandoned. ``plan_id``: the pending plan this one
    finishes (``Table.resume``).
    """
    prepared = prepare_plan(table, CLUSTERING, plan, execution, plan_id=plan_id)
    return run_prepared(prepared, progress=progress)
