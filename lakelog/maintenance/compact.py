"""The embedded executor: plan -> rewrite groups in a thread pool -> commit -> report.

Groups run in parallel up to ``max_concurrent_groups`` threads (pyarrow
releases the GIL while decoding and encoding), largest first; reads of all
groups share one :class:`~lakelog.maintenance.pacing.TokenBucket` when
``max_bytes_per_second`` is set. Results are committed once at the end, or,
with ``partial_progress``, every ``lakelog.compaction.groups_per_commit``
groups as they finish (so a long run that dies keeps what it committed).

If a group fails, the run stops: running groups are told to stop, every
uncommitted output is deleted, and the error propagates (commits already made
with partial progress stay).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pyarrow as pa

from ..errors import InvalidArgumentError, LakelogError
from ..leases import Lease
from ..log.snapshot import Snapshot
from ..properties import get_int
from ..table import Table
from ..transaction import CommitResult
from .commit import RewritePlan, commit_rewrite, delete_outputs
from .pacing import Pacer, TokenBucket
from .plan import CompactionPlan, FileGroup, plan_compaction, positive_int
from .report import MaintenanceReport, rewrite_report
from .rewrite import BatchOrder, GroupResult, RewriteOptions, rewrite_group

__all__ = [
    "Progress",
    "ProgressCallback",
    "RunOutcome",
    "compact_table",
    "dry_run_report",
    "execute_plan",
    "run_groups",
]


@dataclass(frozen=True)
class Progress:
    """Where a run is: groups finished and source bytes read, of the totals."""

    groups_done: int
    groups_total: int
    bytes_done: int
    bytes_total: int


ProgressCallback = Callable[[Progress], None]


class _Stopped(LakelogError):
    """Internal: a group was told to stop because another one failed."""


class _Tracker:
    """Counts progress across groups and stops them when the run fails."""

    def __init__(
        self, groups: Sequence[FileGroup], callback: ProgressCallback | None, pacer: Pacer | None
    ) -> None:
        self.callback = callback
        self.pacer = pacer
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._groups_total = len(groups)
        self._bytes_total = sum(g.total_bytes for g in groups)
        self._groups_done = 0
        self._bytes_done = 0

    def _report(self) -> None:
        if self.callback is not None:
            self.callback(
                Progress(self._groups_done, self._groups_total, self._bytes_done, self._bytes_total)
            )

    def read(self, nbytes: int) -> None:
        if self.stop.is_set():
            raise _Stopped("stopped because another group failed")
        if self.pacer is not None:
            self.pacer.acquire(nbytes)
        with self._lock:
            self._bytes_done += nbytes
            self._report()

    def group_done(self, group: FileGroup, counted: int) -> None:
        with self._lock:
            self._groups_done += 1
            self._bytes_done += max(0, group.total_bytes - counted)
            self._report()


class _GroupPacer:
    """The pacer one group's reads go through: pacing, progress and stop checks."""

    def __init__(self, tracker: _Tracker) -> None:
        self.tracker = tracker
        self.counted = 0

    def acquire(self, nbytes: int) -> None:
        self.tracker.read(nbytes)
        self.counted += nbytes


@dataclass
class RunOutcome:
    """What :func:`run_groups` committed and abandoned."""

    commits: list[CommitResult] = field(default_factory=list)
    committed: list[GroupResult] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)
    paced_seconds: float = 0.0

    def commit_batch(
        self,
        table: Table,
        plan: RewritePlan,
        batch: list[GroupResult],
        *,
        operation: str,
        parameters: Mapping[str, Any] | None,
        read_snapshot: Snapshot,
        lease: Lease | None = None,
    ) -> None:
        """Commit finished groups and record what landed and what was abandoned."""
        result, abandoned = commit_rewrite(
            table,
            plan,
            batch,
            operation=operation,
            parameters=parameters,
            read_snapshot=read_snapshot,
            lease=lease,
        )
        self.abandoned.extend(abandoned)
        if result is not None:
            self.commits.append(result)
            self.committed.extend(r for r in batch if r.group_id not in abandoned)


def run_groups(
    table: Table,
    plan: RewritePlan,
    *,
    schema: pa.Schema,
    partition_by: Sequence[str],
    options: RewriteOptions,
    read_snapshot: Snapshot,
    max_concurrent_groups: int,
    max_bytes_per_second: float | None = None,
    groups_per_commit: int | None = None,
    progress: ProgressCallback | None = None,
    order: BatchOrder | None = None,
    operation: str = "COMPACT",
    parameters: Mapping[str, Any] | None = None,
    groups: Sequence[FileGroup] | None = None,
    lease: Lease | None = None,
) -> RunOutcome:
    """Rewrite ``groups`` (default: all of the plan's) in threads and commit them.

    ``groups_per_commit=None`` makes one commit at the end; a number commits
    as soon as that many groups have finished (partial progress). ``lease``: the
    run's writer lease (output names carry it; every commit checks it).
    """
    if lease is not None:
        options = msgspec.structs.replace(options, lease_id=lease.lease_id)
    todo = sorted(plan.groups if groups is None else groups, key=lambda g: -g.total_bytes)
    bucket = TokenBucket(max_bytes_per_second) if max_bytes_per_second else None
    tracker = _Tracker(todo, progress, bucket)
    outcome = RunOutcome()
    pending: list[GroupResult] = []
    consumed: set[str] = set()

    def commit_batch(batch: list[GroupResult]) -> None:
        outcome.commit_batch(
            table,
            plan,
            batch,
            operation=operation,
            parameters=parameters,
            read_snapshot=read_snapshot,
            lease=lease,
        )

    def run(group: FileGroup) -> GroupResult:
        pacer = _GroupPacer(tracker)
        result = rewrite_group(
            table.storage, schema, partition_by, group, options, order=order, pacer=pacer
        )
        tracker.group_done(group, pacer.counted)
        return result

    workers = max(1, min(max_concurrent_groups, len(todo)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lakelog-rewrite") as pool:
        futures: list[Future[GroupResult]] = [pool.submit(run, g) for g in todo]
        try:
            remaining = set(futures)
            while remaining:
                done, remaining = wait(remaining, return_when=FIRST_COMPLETED)
                for fut in done:
                    r = fut.result()
                    consumed.add(r.group_id)
                    pending.append(r)
                while groups_per_commit is not None and len(pending) >= groups_per_commit:
                    batch, pending[:] = pending[:groups_per_commit], pending[groups_per_commit:]
                    commit_batch(batch)
            if pending:
                batch, pending[:] = list(pending), []
                commit_batch(batch)
        except BaseException:
            tracker.stop.set()
            for fut in futures:
                fut.cancel()
            wait(futures)
            # a batch whose commit failed is not in ``pending``: commit_rewrite deleted its
            # outputs (conflict) or must keep them (unknown outcome); the rest goes
            leftovers = list(pending)
            for fut in futures:
                if fut.cancelled() or fut.exception() is not None:
                    continue
                r = fut.result()
                if r.group_id not in consumed:
                    leftovers.append(r)
            delete_outputs(table.storage, leftovers)
            raise
    outcome.paced_seconds = bucket.waited_seconds if bucket is not None else 0.0
    return outcome


# -- compaction ---------------------------------------------------------------------


def _execution_options(
    table: Table,
    max_concurrent_groups: int | None,
    max_bytes_per_second: float | None,
    partial_progress: bool,
) -> tuple[int, float | None, int | None]:
    props = table.properties
    if max_concurrent_groups is None:
        max_concurrent_groups = get_int(props, "lakelog.compaction.max_concurrent_groups")
    positive_int("max_concurrent_groups", max_concurrent_groups, unit="groups")
    if max_bytes_per_second is not None and (
        isinstance(max_bytes_per_second, bool)
        or not isinstance(max_bytes_per_second, (int, float))
        or not max_bytes_per_second > 0
    ):
        raise InvalidArgumentError(
            f"expected max_bytes_per_second to be a number > 0 (bytes per second) or None, "
            f"found {max_bytes_per_second!r}"
        )
    if not isinstance(partial_progress, bool):
        raise InvalidArgumentError(
            f"expected partial_progress to be True or False, found {partial_progress!r}"
        )
    per_commit = (
        get_int(props, "lakelog.compaction.groups_per_commit") if partial_progress else None
    )
    return max_concurrent_groups, max_bytes_per_second, per_commit


def _parameters(plan: CompactionPlan) -> dict[str, Any]:
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
    max_concurrent_groups: int | None = None,
    max_bytes_per_second: float | None = None,
    partial_progress: bool = False,
    progress: ProgressCallback | None = None,
    read_snapshot: Snapshot | None = None,
    started: float | None = None,
) -> MaintenanceReport:
    """Execute a compaction plan (made now or loaded from JSON) on ``table``.

    A plan made from an older version first drops the groups whose sources are
    no longer live (reported as abandoned) instead of rewriting them in vain.
    """
    started = time.monotonic() if started is None else started
    workers, rate, per_commit = _execution_options(
        table, max_concurrent_groups, max_bytes_per_second, partial_progress
    )
    if plan.table_id != table.metadata.table_id:
        raise InvalidArgumentError(
            f"expected a plan made for table {table.metadata.table_id} ({table.uri}), found "
            f"one for table {plan.table_id}; plan again on this table."
        )
    stale: list[str] = []
    todo = list(plan.groups)
    if read_snapshot is None:
        latest = table.snapshot()
        read_snapshot = (
            latest if latest.version == plan.read_version else table.snapshot(plan.read_version)
        )
        if latest.version != plan.read_version:
            live = {f.path for f in latest.files()}
            stale = [g.group_id for g in todo if any(f.path not in live for f in g.files)]
            todo = [g for g in todo if g.group_id not in stale]
    outcome = RunOutcome()
    if todo:
        with Lease.acquire(
            table.storage, operation="COMPACT", properties=table.properties
        ) as lease:
            outcome = run_groups(
                table,
                plan,
                schema=plan.arrow_schema(),
                partition_by=plan.partition_by,
                options=RewriteOptions.from_compaction(plan.options),
                read_snapshot=read_snapshot,
                max_concurrent_groups=workers,
                max_bytes_per_second=rate,
                groups_per_commit=per_commit,
                progress=progress,
                parameters=_parameters(plan),
                groups=todo,
                lease=lease,
            )
    report = compaction_report(
        plan,
        committed=outcome.committed,
        commits=outcome.commits,
        abandoned=stale + outcome.abandoned,
        started=started,
        paced_seconds=outcome.paced_seconds,
    )
    report.emit()
    return report


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
    if not isinstance(dry_run, bool):
        raise InvalidArgumentError(f"expected dry_run to be True or False, found {dry_run!r}")
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
    )
    _execution_options(table, max_concurrent_groups, max_bytes_per_second, partial_progress)
    if dry_run:
        report = dry_run_report(plan, duration_s=time.monotonic() - started)
        report.emit()
        return report
    return execute_plan(
        table,
        plan,
        max_concurrent_groups=max_concurrent_groups,
        max_bytes_per_second=max_bytes_per_second,
        partial_progress=partial_progress,
        progress=progress,
        read_snapshot=snap,
        started=started,
    )
