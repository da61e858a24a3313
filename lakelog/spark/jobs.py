"""The driver side of maintenance on Spark: one Spark job per group, commits on the driver.

This is the embedded executor (:func:`lakelog.maintenance.executor.run_groups`)
with a group runner that submits Spark jobs: each group of a plan runs as its
own Spark job (a one-task job, or several jobs for a large clustering group),
submitted from a pool of ``max_concurrent_groups`` driver threads, so:

* at most ``max_concurrent_groups`` groups' tasks run at once;
* Spark retries a failed task (``spark.task.maxFailures``, or ``local[N,F]``);
  a group whose job still fails is *failed*: reported, never committed, and
  the other groups go on. Its task deleted what it wrote if it could; files
  of a crashed attempt stay unreferenced until ``vacuum``;
* results are committed on the driver through
  :func:`lakelog.maintenance.commit.commit_rewrite` (rebase over appends,
  abandonment of groups whose sources a concurrent commit removed), once at
  the end or every ``groups_per_commit`` groups (partial progress).

If a commit fails, the remaining jobs are cancelled, uncommitted outputs are
deleted and the error propagates (commits already made stay).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from ..leases import Lease
from ..log.snapshot import Snapshot
from ..maintenance.executor import RunOutcome, run_groups
from ..maintenance.groups import FileGroup, GroupResult, RewritePlan
from ..maintenance.options import ExecutionSettings
from ..maintenance.pacing import Pacer
from .runner import cancel_job_group, job_group, run_payloads
from .tasks import TaskOutcome, run_group_task

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..core.handle import TableHandle

__all__ = ["GroupJob", "SparkRunOutcome", "run_group_jobs", "short_error", "task_job"]

log = logging.getLogger("lakelog.spark")


@dataclass(frozen=True)
class GroupJob:
    """A group and the function that runs its Spark job(s) from a driver thread."""

    group: FileGroup
    run: Callable[[], TaskOutcome]


@dataclass
class SparkRunOutcome(RunOutcome):
    """What :func:`run_group_jobs` committed, abandoned (sources removed concurrently,
    outputs deleted) and saw fail."""

    failed: dict[str, str] = field(default_factory=dict)
    """Groups whose job failed after Spark's retries: group id -> error."""
    outcomes: list[TaskOutcome] = field(default_factory=list)


_LOST_TASK = re.compile(r"^.*most recent failure: Lost task .*?\)\s*\([^)]*\):\s*")


def short_error(error: BaseException, limit: int = 400) -> str:
    """The line of a (Spark-wrapped) error that says what went wrong."""
    text = str(error).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(error).__name__
    if "Traceback (most recent call last)" in text:
        # Spark Connect puts the SQL state on a line of its own after the error
        tail = [ln for ln in lines if not ln.startswith(("at ", "File ", "^", "~", "SQLSTATE:"))]
        line = tail[-1] if tail else lines[-1]
    else:
        # a JVM error through Py4J: "An error occurred while calling ...", then Spark's
        # "Job aborted ... most recent failure: Lost task ... (executor ...): <cause>"
        found = next((ln for ln in lines if "most recent failure: " in ln), None)
        if found is None:
            wrapped = lines[0].startswith("An error occurred while calling") and len(lines) > 1
            found = lines[1] if wrapped else lines[0]
        line = _LOST_TASK.sub("", found.lstrip(": "))
    line = line.replace(" SQLSTATE: 38000", "")
    return line[:limit]


def task_job(
    spark: SparkSession, payload: bytes, storage_options: Mapping[str, Any] | None
) -> TaskOutcome:
    """Run one :class:`~lakelog.spark.tasks.GroupTask` payload as a one-task Spark job."""
    fn = functools.partial(run_group_task, storage_options=dict(storage_options or {}))
    out = run_payloads(spark, [payload], fn, description="lakelog: rewrite a group")
    return msgspec.json.decode(out[0], type=TaskOutcome)


def run_group_jobs(
    spark: SparkSession,
    table: TableHandle,
    plan: RewritePlan,
    jobs: Sequence[GroupJob],
    *,
    read_snapshot: Snapshot,
    max_concurrent_groups: int,
    groups_per_commit: int | None = None,
    operation: str = "COMPACT",
    parameters: Mapping[str, Any] | None = None,
    lease: Lease | None = None,
) -> SparkRunOutcome:
    """Run every job (largest group first) on the shared executor
    (:func:`lakelog.maintenance.executor.run_groups`) and commit the results; see the
    module doc. ``lease``: the run's writer lease, checked by every commit."""
    by_group = {j.group.group_id: j for j in jobs}
    group_tag = f"lakelog-{operation.lower()}-{uuid.uuid4().hex[:12]}"
    failed: dict[str, str] = {}
    outcomes: list[TaskOutcome] = []
    lock = threading.Lock()

    def run(group: FileGroup, pacer: Pacer) -> GroupResult:
        # pacing is each task's (its share of the rate); the pacer counts progress only
        with job_group(spark, group_tag, f"lakelog {operation.lower()} group {group.group_id}"):
            done = by_group[group.group_id].run()
        with lock:
            outcomes.append(done)
        return done.result

    def on_failure(group: FileGroup, error: Exception) -> None:
        failed[group.group_id] = short_error(error)
        log.warning(
            "%s: group %s failed after Spark's retries and is abandoned: %s",
            operation,
            group.group_id,
            failed[group.group_id],
        )

    base = run_groups(
        table,
        plan,
        run,
        execution=ExecutionSettings(
            max_concurrent_groups=max_concurrent_groups, groups_per_commit=groups_per_commit
        ),
        read_snapshot=read_snapshot,
        operation=operation,
        parameters=parameters,
        groups=[j.group for j in jobs],
        lease=lease,
        on_failure=on_failure,
        on_abort=lambda: cancel_job_group(spark, group_tag),
    )
    return SparkRunOutcome(
        commits=base.commits,
        committed=base.committed,
        abandoned=base.abandoned,
        failed=failed,
        outcomes=outcomes,
    )
