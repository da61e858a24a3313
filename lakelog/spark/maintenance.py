"""Compaction and clustering as Spark jobs: plan on the driver, rewrite on executors, commit once.

:func:`compact` and :func:`optimize` take the options of :meth:`lakelog.Table.compact`
and :meth:`lakelog.Table.optimize` and return the same
:class:`~lakelog.maintenance.report.MaintenanceReport`. The three steps are
the embedded executor's:

1. **plan** on the driver with the same pure planners
   (:func:`~lakelog.maintenance.compaction.planner.plan_compaction`,
   :func:`~lakelog.maintenance.clustering.planner.plan_clustering`);
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
import the driver's lakelog (:mod:`lakelog.spark.environment`). A group whose
task still fails after Spark's retries is abandoned and reported in
``abandoned_groups`` and ``failed_groups``; its outputs are never committed.
If groups failed and none was committed, :class:`~lakelog.errors.MaintenanceFailedError`
is raised instead of returning. Every report has the same Spark fields in
``extra``, whatever happened. See ``docs/spark-maintenance.md``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from ..errors import InvalidArgumentError
from ..leases import Lease
from ..log.actions import encode_schema
from ..log.snapshot import load_snapshot
from ..maintenance.claims import claimed_files
from ..maintenance.clustering import run as clustering
from ..maintenance.compaction.planner import plan_compaction
from ..maintenance.compaction.rewrite import RewriteOptions
from ..maintenance.compaction.run import commit_parameters, compaction_report, dry_run_report
from ..maintenance.options import check_flag, execution_options
from ..maintenance.report import MaintenanceReport, raise_if_all_failed
from ..storage import Storage
from ..table import Table
from .cluster_job import cluster_large_group, is_large, large_path_problem
from .environment import SHIP_ENVIRONMENT, check_executors, import_problem
from .jobs import GroupJob, SparkRunOutcome, run_group_jobs, task_job
from .tasks import GroupTask

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["compact", "optimize"]

log = logging.getLogger("lakelog.spark")


def _open(uri: str, storage_options: Mapping[str, Any] | None) -> Table:
    storage = Storage(uri, storage_options)
    if storage.protocol == "memory":
        raise InvalidArgumentError(
            f"expected a table on storage that Spark executors can reach (local disk shared "
            f"by them, S3, HDFS, ...), found {storage.uri}: fsspec's in-memory filesystem lives "
            f"in one process. Use table.compact() / table.optimize() instead."
        )
    return Table(storage, load_snapshot(storage))


def _default_concurrency(spark: SparkSession) -> int:
    """Groups run at once unless told otherwise: the session's parallelism."""
    return max(1, int(spark.sparkContext.defaultParallelism))


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


def _finish(report: MaintenanceReport) -> MaintenanceReport:
    """Log the report; raise if groups failed and nothing was committed."""
    report.emit()
    causes = list(report.failed_groups.values())
    if causes and import_problem(causes[0]):
        what_to_do = SHIP_ENVIRONMENT
    else:
        what_to_do = (
            "Every group's error is in the error's report.failed_groups and the full "
            "tracebacks in the executors' logs; fix the cause and run again (vacuum removes "
            "the files of crashed attempts)."
        )
    raise_if_all_failed(report, what_to_do=what_to_do)
    return report


def compact(
    spark: SparkSession,
    uri: str,
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
    storage_options: Mapping[str, Any] | None = None,
) -> MaintenanceReport:
    """:meth:`lakelog.Table.compact` with each group rewritten by a Spark task.

    Same options, defaults (from table properties) and report, except that
    ``max_concurrent_groups`` defaults to ``spark.sparkContext.defaultParallelism``.
    ``storage_options`` reach fsspec on the driver and on every executor.
    """
    started = time.monotonic()
    check_flag("dry_run", dry_run)
    table = _open(uri, storage_options)
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
        default_concurrency=_default_concurrency(spark),
    )
    rate = execution.max_bytes_per_second
    if dry_run or not plan.groups:
        report = dry_run_report(plan, duration_s=time.monotonic() - started)
        if not dry_run:
            report.dry_run = False
        report.extra.update(_spark_extra(), bytes_per_second_per_task=None)
        report.emit()
        return report
    sc = spark.sparkContext
    check_executors(sc)
    running = max(1, min(execution.max_concurrent_groups, len(plan.groups)))
    share = None if rate is None else float(rate) / running
    # a writer lease for the run: output names carry its id, the commits check it
    lease = Lease.acquire(table.storage, operation="COMPACT", properties=table.properties)
    options = RewriteOptions.from_compaction(plan.options)
    options = msgspec.structs.replace(options, lease_id=lease.lease_id)
    opts = dict(table.storage.storage_options)
    jobs = []
    for g in plan.groups:
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
        jobs.append(GroupJob(g, functools.partial(task_job, sc, payload, opts)))
    try:
        outcome = run_group_jobs(
            sc,
            table,
            plan,
            jobs,
            read_snapshot=snap,
            max_concurrent_groups=running,
            groups_per_commit=execution.groups_per_commit,
            operation="COMPACT",
            parameters={**commit_parameters(plan), "engine": "spark"},
            lease=lease,
        )
    finally:
        lease.release()
    report = compaction_report(
        plan,
        committed=outcome.committed,
        commits=outcome.commits,
        abandoned=outcome.abandoned + list(outcome.failed),
        started=started,
        paced_seconds=sum(o.paced_seconds for o in outcome.outcomes),
        extra={**_spark_extra(outcome, len(jobs)), "bytes_per_second_per_task": share},
    )
    return _finish(report)


def optimize(
    spark: SparkSession,
    uri: str,
    *,
    zorder_by: Sequence[str] | str | None = None,
    sort_by: Sequence[str] | str | None = None,
    curve: Literal["hilbert", "zorder"] = "hilbert",
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
    storage_options: Mapping[str, Any] | None = None,
) -> MaintenanceReport:
    """:meth:`lakelog.Table.optimize` with each group clustered on the executors.

    Same options, plan and report. A group whose rows would not fit
    ``max_group_bytes`` in memory (about 3x its Parquet bytes) is clustered
    by Spark jobs (range partitioning on the curve key, Spark's sort and
    native writer; see :mod:`lakelog.spark.cluster_job`) when Spark can read
    and write the table itself; otherwise, like every other group, by one
    task that sorts in spilled runs within ``max_group_bytes``.
    ``max_concurrent_groups`` defaults to ``defaultParallelism``;
    ``max_bytes_per_second`` paces the one-task groups (each task its share),
    not the Spark jobs of large groups.
    """
    table = _open(uri, storage_options)
    prep = clustering.prepare_optimize(
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
        default_concurrency=_default_concurrency(spark),
    )
    snap, plan, spec, execution = prep.snapshot, prep.plan, prep.spec, prep.execution
    options = plan.options
    schema, parts = snap.schema, snap.partition_by
    extra: dict[str, Any] = {**_spark_extra(), "large_groups": 0, "bytes_per_second_per_task": None}
    if dry_run or not plan.groups:
        report = clustering.optimize_report(
            plan,
            committed=[],
            commits=[],
            abandoned=[],
            started=prep.started,
            dry_run=dry_run,
            extra=extra,
        )
        report.emit()
        return report
    sc = spark.sparkContext
    check_executors(sc)
    running = max(1, min(execution.max_concurrent_groups, len(plan.groups)))
    rate = execution.max_bytes_per_second
    share = None if rate is None else rate / running
    extra["bytes_per_second_per_task"] = share
    opts = dict(table.storage.storage_options)
    schema_text = encode_schema(schema)
    problem = large_path_problem(table.storage, schema, parts)
    # a writer lease for the run: output names carry its id, the commit checks it
    lease = Lease.acquire(table.storage, operation="OPTIMIZE", properties=snap.properties)
    jobs = []
    for g in plan.groups:
        segments = plan.segments[g.group_id]
        if is_large(g, options) and not problem:
            extra["large_groups"] += 1
            jobs.append(
                GroupJob(
                    g,
                    functools.partial(
                        cluster_large_group,
                        spark,
                        table.storage,
                        schema,
                        parts,
                        g,
                        segments,
                        spec,
                        plan.spec,
                        options,
                        storage_options=opts,
                        lease_id=lease.lease_id,
                    ),
                )
            )
            continue
        if is_large(g, options):
            log.info(
                "optimize: group %s exceeds max_group_bytes but cannot be clustered by a Spark "
                "job (%s); one task sorts it in spilled runs instead",
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
                lease_id=lease.lease_id,
                bytes_per_second=share,
            )
        )
        jobs.append(GroupJob(g, functools.partial(task_job, sc, payload, opts)))
    try:
        outcome = run_group_jobs(
            sc,
            table,
            plan,
            jobs,
            read_snapshot=snap,
            max_concurrent_groups=running,
            groups_per_commit=execution.groups_per_commit,
            operation="OPTIMIZE",
            parameters={**clustering.commit_parameters(plan), "engine": "spark"},
            lease=lease,
        )
    finally:
        lease.release()
    extra.update(_spark_extra(outcome, len(jobs)))
    report = clustering.optimize_report(
        plan,
        committed=outcome.committed,
        commits=outcome.commits,
        abandoned=outcome.abandoned + list(outcome.failed),
        started=prep.started,
        paced_seconds=sum(o.paced_seconds for o in outcome.outcomes),
        extra=extra,
    )
    return _finish(report)
