"""Compaction and clustering as Spark jobs: plan on the driver, rewrite on executors, commit once.

:func:`compact` and :func:`optimize` take the options of :meth:`lakelog.Table.compact`
and :meth:`lakelog.Table.optimize` (the same objects, or keyword arguments) and return
the same :class:`~lakelog.maintenance.report.MaintenanceReport`: they prepare the run
as the embedded API does and run it through the same flow
(:func:`lakelog.maintenance.pipeline.run_prepared`) with :class:`SparkExecutor`
plugged in. The steps:

1. **plan** on the driver with the same preparation
   (:func:`~lakelog.maintenance.compaction.run.prepare_compaction`,
   :func:`~lakelog.maintenance.clustering.run.prepare_clustering`);
2. **rewrite** each group in a Spark task that gets only its plan entry (JSON)
   and the storage options and reads and writes through fsspec
   (:mod:`lakelog.spark.tasks`), or, for a clustering group too large for
   one task's memory, as Spark jobs (:mod:`lakelog.spark.cluster_job`);
3. **commit** on the driver with :func:`~lakelog.maintenance.commit.commit_rewrite`
   (:mod:`lakelog.spark.jobs`).

``max_concurrent_groups`` (default: the session's ``defaultParallelism``) is
the number of groups whose tasks run at once; ``max_bytes_per_second`` is the
total read rate of the run: each of those tasks paces its reads to its share.
Before any work is shipped, one tiny Spark job checks that the executors
import the driver's lakelog (:mod:`lakelog.spark.environment`; on a classic session,
while on Spark Connect a group's first task reports it). Every Spark job goes through
the DataFrame API (:mod:`lakelog.spark.runner`), so the same code runs on both. A group whose
task still fails after Spark's retries is abandoned and reported in
``abandoned_groups`` and ``failed_groups``; its outputs are never committed.
If groups failed and none was committed, :class:`~lakelog.errors.MaintenanceFailedError`
is raised instead of returning. Every report has the same Spark fields in
``extra``, whatever happened. See ``docs/spark-maintenance.md``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from ..core import TableCore
from ..errors import InvalidArgumentError
from ..leases import Lease
from ..log.actions import encode_schema
from ..log.snapshot import Snapshot
from ..maintenance.clustering.planner import ClusterPlan
from ..maintenance.clustering.run import prepare_clustering
from ..maintenance.compaction.planner import CompactionPlan
from ..maintenance.compaction.rewrite import RewriteOptions
from ..maintenance.compaction.run import prepare_compaction
from ..maintenance.executor import ProgressCallback, RunOutcome, live_groups
from ..maintenance.groups import FileGroup
from ..maintenance.options import (
    ClusteringOptions,
    CompactionOptions,
    ExecutionOptions,
    from_arguments,
)
from ..maintenance.pipeline import Executed, Prepared, run_prepared
from ..maintenance.report import MaintenanceReport
from ..storage import Storage
from .cluster_job import cluster_large_group, is_large, large_path_problem
from .environment import SHIP_ENVIRONMENT, check_executors, import_problem
from .jobs import GroupJob, SparkRunOutcome, run_group_jobs, task_job
from .runner import default_parallelism
from .tasks import GroupTask

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..core.handle import TableHandle
    from ..filters import PartitionFilterLike

__all__ = ["SparkExecutor", "compact", "default_concurrency", "optimize", "run_rewrite"]

log = logging.getLogger("lakelog.spark")


def _open(uri: str, storage_options: Mapping[str, Any] | None) -> TableHandle:
    storage = Storage(uri, storage_options)
    if storage.protocol == "memory":
        raise InvalidArgumentError(
            f"expected a table on storage that Spark executors can reach (local disk shared "
            f"by them, S3, HDFS, ...), found {storage.uri}: fsspec's in-memory filesystem lives "
            f"in one process. Use table.compact() / table.optimize() instead."
        )
    return TableCore.load(storage)


def default_concurrency(spark: SparkSession) -> int:
    """Groups run at once unless told otherwise: the session's parallelism."""
    return default_parallelism(spark)


def _check_executors(spark: SparkSession) -> None:
    """The executors' environment check (:mod:`lakelog.spark.environment`), on classic
    sessions and on Spark Connect alike."""
    check_executors(spark)


def _spark_extra(outcome: SparkRunOutcome | None = None, jobs: int = 0) -> dict[str, Any]:
    """The Spark fields of a report; the same keys whether groups ran or not."""
    outcome = SparkRunOutcome() if outcome is None else outcome
    return {
        "engine": "spark",
        "failed_groups": dict(outcome.failed),
        "spark_groups": jobs,
        "task_retries": sum(o.attempt for o in outcome.outcomes),
        "task_runs": [
            {
                "group_id": o.result.group_id,
                "attempt": o.attempt,
                "host": o.host,
                "mode": o.mode,
                "started": o.started,
                "finished": o.finished,
            }
            for o in outcome.outcomes
        ],
    }


class SparkExecutor:
    """Runs a prepared plan's groups as Spark jobs (:func:`lakelog.spark.jobs.run_group_jobs`):
    one task per group, each reading at its share of ``max_bytes_per_second``, or, for a
    clustering group too large for one task's memory, Spark jobs
    (:mod:`lakelog.spark.cluster_job`). A group that still fails after Spark's retries is
    reported in ``failed_groups`` and ``abandoned_groups``; the others go on."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def idle_extra(self, prepared: Prepared[Any]) -> dict[str, Any]:
        extra = {**_spark_extra(), "bytes_per_second_per_task": None}
        if isinstance(prepared.plan, ClusterPlan):
            extra["large_groups"] = 0
        return extra

    def execute(self, prepared: Prepared[Any], progress: ProgressCallback | None) -> Executed:
        table, plan, execution = prepared.table, prepared.plan, prepared.execution
        if prepared.snapshot is None:  # a saved plan: drop the groups gone stale since
            snap, groups, stale = live_groups(table, plan)
        else:
            snap, groups, stale = prepared.snapshot, list(plan.groups), []
        _check_executors(self.spark)
        running = max(1, min(execution.max_concurrent_groups, len(groups)))
        rate = execution.max_bytes_per_second
        share = None if rate is None else rate / running
        extra: dict[str, Any] = {"bytes_per_second_per_task": share}
        operation = prepared.kind.operation
        # a writer lease for the run: output names carry its id, the commits check it
        lease = Lease.acquire(table.storage, operation=operation, properties=snap.properties)
        try:
            if isinstance(plan, ClusterPlan):
                jobs = self._cluster_jobs(table, plan, groups, snap, lease.lease_id, share, extra)
            else:
                jobs = self._compact_jobs(table, plan, groups, lease.lease_id, share)
            outcome = run_group_jobs(
                self.spark,
                table,
                plan,
                jobs,
                read_snapshot=snap,
                max_concurrent_groups=running,
                groups_per_commit=execution.groups_per_commit,
                operation=operation,
                parameters={**prepared.kind.parameters(plan), "engine": "spark"},
                lease=lease,
            )
        finally:
            lease.release()
        extra.update(_spark_extra(outcome, len(jobs)))
        done = RunOutcome(
            commits=outcome.commits,
            committed=outcome.committed,
            abandoned=stale + outcome.abandoned + list(outcome.failed),
            paced_seconds=sum(o.paced_seconds for o in outcome.outcomes),
        )
        return Executed(done, extra)

    def failure_advice(self, report: MaintenanceReport) -> str:
        causes = list(report.failed_groups.values())
        if causes and import_problem(causes[0]):
            return SHIP_ENVIRONMENT
        return (
            "Every group's error is in the error's report.failed_groups and the full "
            "tracebacks in the executors' logs; fix the cause and run again (vacuum removes "
            "the files of crashed attempts)."
        )

    def _compact_jobs(
        self,
        table: TableHandle,
        plan: CompactionPlan,
        groups: Sequence[FileGroup],
        lease_id: str,
        share: float | None,
    ) -> list[GroupJob]:
        options = RewriteOptions.from_compaction(plan.options)
        options = msgspec.structs.replace(options, lease_id=lease_id)
        opts = dict(table.storage.storage_options)
        jobs = []
        for g in groups:
            payload = msgspec.json.encode(
                GroupTask(
                    kind="compact",
                    uri=table.storage.uri,
                    schema=plan.schema,
                    partition_by=plan.partition_by,
                    group=g,
                    rewrite=options,
                    bytes_per_second=share,
                )
            )
            jobs.append(GroupJob(g, functools.partial(task_job, self.spark, payload, opts)))
        return jobs

    def _cluster_jobs(
        self,
        table: TableHandle,
        plan: ClusterPlan,
        groups: Sequence[FileGroup],
        snap: Snapshot,
        lease_id: str,
        share: float | None,
        extra: dict[str, Any],
    ) -> list[GroupJob]:
        options = plan.options
        schema, parts = snap.schema, plan.partition_by
        spec = plan.cluster_spec(schema)
        opts = dict(table.storage.storage_options)
        schema_text = encode_schema(schema)
        problem = large_path_problem(table.storage, schema, parts)
        extra["large_groups"] = 0
        jobs = []
        for g in groups:
            segments = plan.segments[g.group_id]
            if is_large(g, options) and not problem:
                extra["large_groups"] += 1
                jobs.append(
                    GroupJob(
                        g,
                        functools.partial(
                            cluster_large_group,
                            self.spark,
                            table.storage,
                            schema,
                            parts,
                            g,
                            segments,
                            spec,
                            plan.spec,
                            options,
                            storage_options=opts,
                            lease_id=lease_id,
                        ),
                    )
                )
                continue
            if is_large(g, options):
                log.info(
                    "optimize: group %s exceeds max_group_bytes but cannot be clustered by a "
                    "Spark job (%s); one task sorts it in spilled runs instead",
                    g.group_id,
                    problem,
                )
            payload = msgspec.json.encode(
                GroupTask(
                    kind="cluster",
                    uri=table.storage.uri,
                    schema=schema_text,
                    partition_by=parts,
                    group=g,
                    spec=plan.spec,
                    segments=tuple(segments),
                    cluster=options,
                    lease_id=lease_id,
                    bytes_per_second=share,
                )
            )
            jobs.append(GroupJob(g, functools.partial(task_job, self.spark, payload, opts)))
        return jobs


def compact(
    spark: SparkSession,
    uri: str,
    *,
    options: CompactionOptions | None = None,
    execution: ExecutionOptions | None = None,
    target_file_size: int | None = None,
    target_rows: int | None = None,
    min_file_size: int | None = None,
    min_input_files: int | None = None,
    partition_filter: PartitionFilterLike = None,
    compression: str | None = None,
    row_group_size: int | None = None,
    max_concurrent_groups: int | None = None,
    max_bytes_per_second: float | None = None,
    partial_progress: bool = False,
    dry_run: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> MaintenanceReport:
    """:meth:`lakelog.Table.compact` with each group rewritten by a Spark task.

    Same options, defaults (from table properties) and report, except that
    ``max_concurrent_groups`` defaults to Spark's parallelism.

    Every other argument is :meth:`lakelog.Table.compact`'s.

    Args:
        spark: the session whose tasks rewrite the groups.
        uri: the table's URI.
        storage_options: fsspec options, used on the driver and on every executor; default
            none.

    Returns:
        The run's report (the plan's figures when ``dry_run``).
    """
    request, run = from_arguments(CompactionOptions, options, execution, locals())
    return run_rewrite(spark, uri, request, run, dry_run=dry_run, storage_options=storage_options)


def optimize(
    spark: SparkSession,
    uri: str,
    *,
    options: ClusteringOptions | None = None,
    execution: ExecutionOptions | None = None,
    zorder_by: Sequence[str] | str | None = None,
    sort_by: Sequence[str] | str | None = None,
    curve: Literal["hilbert", "zorder"] = "hilbert",
    target_file_size: int | None = None,
    partition_filter: PartitionFilterLike = None,
    incremental: bool = True,
    max_group_bytes: int | None = None,
    compression: str | None = None,
    row_group_size: int | None = None,
    max_concurrent_groups: int | None = None,
    max_bytes_per_second: float | None = None,
    partial_progress: bool = False,
    dry_run: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> MaintenanceReport:
    """:meth:`lakelog.Table.optimize` with each group clustered on the executors.

    Same options, plan and report. A group whose rows would not fit
    ``max_group_bytes`` in memory (about 3x its Parquet bytes) is clustered
    by Spark jobs (range partitioning on the curve key, Spark's sort and
    native writer; see :mod:`lakelog.spark.cluster_job`) when Spark can read
    and write the table itself; otherwise, like every other group, by one
    task that sorts in spilled runs within ``max_group_bytes``.
    ``max_bytes_per_second`` paces the one-task groups (each task its share), not the
    Spark jobs of large groups.

    Every other argument is :meth:`lakelog.Table.optimize`'s.

    Args:
        spark: the session whose tasks (or jobs) cluster the groups.
        uri: the table's URI.
        storage_options: fsspec options, used on the driver and on every executor; default
            none.

    Returns:
        The run's report (the plan's figures when ``dry_run``).
    """
    request, run = from_arguments(ClusteringOptions, options, execution, locals())
    return run_rewrite(spark, uri, request, run, dry_run=dry_run, storage_options=storage_options)


def run_rewrite(
    spark: SparkSession,
    uri: str,
    options: CompactionOptions | ClusteringOptions,
    execution: ExecutionOptions,
    *,
    dry_run: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> MaintenanceReport:
    """The run behind :func:`compact` and :func:`optimize`, from the options objects alone:
    plan with the embedded planner (compaction for :class:`~lakelog.CompactionOptions`,
    clustering for :class:`~lakelog.ClusteringOptions`), execute the groups as Spark
    jobs (:class:`SparkExecutor`), commit as the embedded run does."""
    table = _open(uri, storage_options)
    concurrency = default_concurrency(spark)
    if isinstance(options, CompactionOptions):
        return run_prepared(
            prepare_compaction(
                table, options, execution, dry_run=dry_run, default_concurrency=concurrency
            ),
            SparkExecutor(spark),
        )
    return run_prepared(
        prepare_clustering(
            table, options, execution, dry_run=dry_run, default_concurrency=concurrency
        ),
        SparkExecutor(spark),
    )
