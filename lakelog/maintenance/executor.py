"""The one executor: rewrite a plan's groups in a thread pool, then commit them.

Groups run in parallel up to ``max_concurrent_groups`` threads (pyarrow
releases the GIL while decoding and encoding), largest first; reads of all
groups share one :class:`~lakelog.maintenance.pacing.TokenBucket` when
``max_bytes_per_second`` is set, and report progress through it. Results are
committed once at the end, or, with partial progress, every
``groups_per_commit`` groups as they finish (so a long run that dies keeps
what it committed).

What rewriting a group means is the caller's: a :data:`GroupRunner`
(compaction's bin-packed rewrite, clustering's sort). If a group fails, the
run stops: running groups are told to stop (their next read raises), every
uncommitted output is deleted, the run's claim is released (an error; a kill leaves
it to expire with the lease, resumable) and the error propagates (commits already made
with partial progress stay).

:func:`execute_groups` is the whole step for a plan made now or loaded from
JSON: it drops the groups whose sources are gone since the plan's read version,
takes the run's writer lease and calls :func:`run_groups`.

Crash and pause points (:mod:`lakelog._failpoints`) for tests:
``rewrite:claimed`` (the run's claim landed, nothing rewritten yet),
``rewrite:group-written`` (a group's files are written, not committed),
``rewrite:before-commit`` (a batch of groups is about to commit) and
``rewrite:committed`` (a batch's commit returned).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import threads
from .._failpoints import failpoint, pausepoint
from ..errors import DataFileMissingError, InvalidArgumentError, LakelogError, VersionExpiredError
from ..leases import Lease
from ..log.snapshot import Snapshot, load_snapshot
from ..scan.rows import missing_file
from ..storage import Storage
from ..transaction import CommitResult
from .claims import Claim, claim_groups, claims_enabled, release_rest
from .commit import commit_rewrite, delete_outputs
from .groups import FileGroup, GroupResult, RewritePlan, changed_sources, stale_groups
from .options import ExecutionSettings
from .pacing import Pacer, TokenBucket

if TYPE_CHECKING:
    from ..core.handle import TableHandle

__all__ = [
    "GroupRunner",
    "Progress",
    "ProgressCallback",
    "RunOutcome",
    "check_plan_table",
    "execute_groups",
    "live_groups",
    "plan_read_snapshot",
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


GroupRunner = Callable[[FileGroup, Pacer], GroupResult]
"""Rewrites one group, reading its sources through the given pacer (which paces the
run's reads, counts progress and raises once the run is stopping)."""


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


class _SourcesGone(LakelogError):
    """Internal: a group's source was removed concurrently and deleted before it was read."""

    def __init__(self, group_id: str) -> None:
        super().__init__(f"a source of group {group_id} was removed and deleted concurrently")
        self.group_id = group_id


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
    plan_id: str | None = None
    """The id of the run's claim on the log (None: the table takes no claims)."""

    def commit_batch(
        self,
        table: TableHandle,
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
            plan_id=self.plan_id,
        )
        self.abandoned.extend(abandoned)
        if result is not None:
            self.commits.append(result)
            self.committed.extend(r for r in batch if r.group_id not in abandoned)


def run_groups(
    table: TableHandle,
    plan: RewritePlan,
    run_group: GroupRunner,
    *,
    execution: ExecutionSettings,
    read_snapshot: Snapshot,
    progress: ProgressCallback | None = None,
    operation: str = "COMPACT",
    parameters: Mapping[str, Any] | None = None,
    groups: Sequence[FileGroup] | None = None,
    lease: Lease | None = None,
    on_failure: Callable[[FileGroup, Exception], None] | None = None,
    on_abort: Callable[[], None] | None = None,
    plan_id: str | None = None,
) -> RunOutcome:
    """Rewrite ``groups`` (default: all of the plan's) with ``run_group`` in threads and
    commit them (see the module doc).

    ``execution.groups_per_commit=None`` makes one commit at the end; a number
    commits as soon as that many groups have finished (partial progress).
    ``lease``: the run's writer lease (output names carry it; every commit checks it).
    ``on_failure``: when given, a group whose runner raises is handed to it and the
    run goes on without it (the Spark executor: a group that failed after Spark's
    retries); otherwise the run stops and the error propagates. ``on_abort`` is
    called when the run stops on an error (the Spark executor cancels its jobs).

    With a ``lease``, on a table that takes claims (:func:`.claims.claims_enabled`), the
    run first claims its groups on the log (:func:`.claims.claim_groups`; groups another
    live claim holds are dropped and reported as abandoned), its commits release the
    groups they land, and it releases the rest at the end. ``plan_id``: resume that
    pending plan instead of claiming a new one.
    """
    rate = execution.max_bytes_per_second
    todo = sorted(plan.groups if groups is None else groups, key=lambda g: -g.total_bytes)
    bucket = TokenBucket(rate) if rate else None
    outcome = RunOutcome()
    claim: Claim | None = None
    if lease is not None and todo and claims_enabled(read_snapshot):
        claim = claim_groups(
            table,
            plan,
            todo,
            read_snapshot=read_snapshot,
            lease=lease,
            operation=operation,
            plan_id=plan_id,
        )
        outcome.plan_id = claim.plan_id
        outcome.abandoned.extend(claim.dropped)
        claimed = {g.group_id for g in claim.groups}
        todo = [g for g in todo if g.group_id in claimed]
        if claim.snapshot is not None:  # checked up to the claim: commit on top of it
            read_snapshot = claim.snapshot
        failpoint("rewrite:claimed")
        pausepoint("rewrite:claimed")
    tracker = _Tracker(todo, progress, bucket)

    def commit_batch(batch: list[GroupResult]) -> None:
        pausepoint("rewrite:before-commit")
        outcome.commit_batch(
            table,
            plan,
            batch,
            operation=operation,
            parameters=parameters,
            read_snapshot=read_snapshot,
            lease=lease,
        )
        failpoint("rewrite:committed")

    def run(group: FileGroup) -> GroupResult:
        pacer = _GroupPacer(tracker)
        try:
            result = run_group(group, pacer)
        except (FileNotFoundError, DataFileMissingError) as e:
            # a source a concurrent commit removed, deleted since by an expiry: the group
            # could not land anyway. A source still live and missing is damage: report it.
            latest = load_snapshot(table.storage)
            if changed_sources(latest, group.files):
                raise _SourcesGone(group.group_id) from e
            if isinstance(e, DataFileMissingError):
                raise
            gone = next((f.path for f in group.files if not table.storage.exists(f.path)), None)
            raise missing_file(table.storage, gone or str(e.filename), latest.version) from e
        failpoint("rewrite:group-written")
        tracker.group_done(group, pacer.counted)
        return result

    try:
        _run_and_commit(
            todo,
            run,
            commit_batch,
            outcome,
            tracker,
            storage=table.storage,
            workers=max(1, min(execution.max_concurrent_groups, len(todo))),
            groups_per_commit=execution.groups_per_commit,
            on_failure=on_failure,
            on_abort=on_abort,
        )
    except Exception:
        if claim is not None:
            # an error, not a kill or an interrupt: end the claim now, as a Spark run
            # does, instead of leaving it pending until the lease expires
            landed = [r.group_id for r in outcome.committed]
            try:
                release_rest(table, claim, landed, operation=operation)
            except Exception:  # noqa: BLE001 - the run's own error is the one to raise
                pass  # the claim expires with the lease instead
        raise
    outcome.paced_seconds = bucket.waited_seconds if bucket is not None else 0.0
    if claim is not None:
        release_rest(table, claim, [r.group_id for r in outcome.committed], operation=operation)
    return outcome


def _run_and_commit(
    todo: Sequence[FileGroup],
    run: Callable[[FileGroup], GroupResult],
    commit_batch: Callable[[list[GroupResult]], None],
    outcome: RunOutcome,
    tracker: _Tracker,
    *,
    storage: Storage,
    workers: int,
    groups_per_commit: int | None,
    on_failure: Callable[[FileGroup, Exception], None] | None,
    on_abort: Callable[[], None] | None,
) -> None:
    """Run ``todo`` in ``workers`` threads and commit the results as they come (every
    ``groups_per_commit``, or once at the end). On any error the other groups are
    cancelled, the outputs no commit took are deleted, and the error propagates."""
    pending: list[GroupResult] = []
    consumed: set[str] = set()
    with threads.pool("lakelog-rewrite", workers) as pool:
        futures: dict[Future[GroupResult], FileGroup] = {pool.submit(run, g): g for g in todo}
        try:
            remaining = set(futures)
            while remaining:
                done, remaining = wait(remaining, return_when=FIRST_COMPLETED)
                for fut in done:
                    error = fut.exception()
                    if isinstance(error, _SourcesGone):
                        consumed.add(error.group_id)
                        outcome.abandoned.append(error.group_id)
                        continue
                    if error is not None and on_failure is not None:
                        if not isinstance(error, Exception):
                            raise error
                        consumed.add(futures[fut].group_id)
                        on_failure(futures[fut], error)
                        continue
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
            if on_abort is not None:
                on_abort()
            wait(list(futures))
            _delete_uncommitted(storage, futures, pending, consumed)
            raise


def _delete_uncommitted(
    storage: Storage,
    futures: Iterable[Future[GroupResult]],
    pending: Sequence[GroupResult],
    consumed: set[str],
) -> None:
    """Delete the outputs of a stopped run that no commit took: those waiting for a
    commit, and those of groups that finished after the run stopped. A batch whose
    commit failed is not among them: ``commit_rewrite`` deleted its outputs (conflict)
    or must keep them (unknown outcome)."""
    leftovers = list(pending)
    for fut in futures:
        if fut.cancelled() or fut.exception() is not None:
            continue
        r = fut.result()
        if r.group_id not in consumed:
            leftovers.append(r)
    delete_outputs(storage, leftovers)


# -- a whole plan ------------------------------------------------------------------------


def check_plan_table(table: TableHandle, plan: RewritePlan) -> None:
    """Refuse a (saved) plan made for another table."""
    if plan.table_id != table.cached.metadata.table_id:
        raise InvalidArgumentError(
            f"expected a plan made for table {table.cached.metadata.table_id} "
            f"({table.storage.uri}), found "
            f"one for table {plan.table_id}; plan again on this table."
        )


def live_groups(
    table: TableHandle, plan: RewritePlan
) -> tuple[Snapshot, list[FileGroup], list[str]]:
    """The snapshot at the plan's read version, the groups whose sources are all still
    live in the latest version, and the ids of the others (*stale*: a saved plan made
    from an older version, whose sources a later commit removed).

    A group is live only if each source is live with the deletion vector the plan read
    (:func:`.groups.changed_sources`): rewriting it with an older vector would write rows
    deleted since back. So when the read version was expired since the plan was made,
    the latest version can be the read snapshot: the live groups' sources are the same
    files, with the same vectors, there, and their rewrites then conflict only with what
    commits after it."""
    latest = table.snapshot()
    if latest.version == plan.read_version:
        return latest, list(plan.groups), []
    stale = stale_groups(latest, plan.groups)
    todo = [g for g in plan.groups if g.group_id not in stale]
    return plan_read_snapshot(table, plan, latest), todo, stale


def plan_read_snapshot(
    table: TableHandle, plan: RewritePlan, latest: Snapshot | None = None
) -> Snapshot:
    """The snapshot a stored plan was made from, or the latest one if expiry removed it
    since (the sources of its still-live groups are the same files there; files are read
    and written with the latest schema, which reads every older file)."""
    try:
        return table.snapshot(plan.read_version)
    except VersionExpiredError:
        return latest if latest is not None else table.snapshot()


def execute_groups(
    table: TableHandle,
    plan: RewritePlan,
    make_runner: Callable[[str], GroupRunner],
    *,
    execution: ExecutionSettings,
    operation: str,
    parameters: Mapping[str, Any] | None = None,
    progress: ProgressCallback | None = None,
    read_snapshot: Snapshot | None = None,
    plan_id: str | None = None,
    on_failure: Callable[[FileGroup, Exception], None] | None = None,
) -> RunOutcome:
    """Execute ``plan`` on ``table``: its live groups, under one writer lease (claimed on
    the log first where the table takes claims; ``plan_id`` resumes that pending plan).

    ``make_runner`` receives the lease id (output names carry it) and returns the
    group runner. ``read_snapshot`` (the snapshot the plan was just made from)
    skips the staleness check; without it, stale groups are reported as abandoned
    instead of being rewritten in vain. ``on_failure``: as for :func:`run_groups` (a
    group that raises is handed to it and the others go on).
    """
    check_plan_table(table, plan)
    stale: list[str] = []
    if read_snapshot is None:
        read_snapshot, todo, stale = live_groups(table, plan)
    else:
        todo = list(plan.groups)
    outcome = RunOutcome()
    if todo:
        with Lease.acquire(
            table.storage, operation=operation, properties=table.properties
        ) as lease:
            outcome = run_groups(
                table,
                plan,
                make_runner(lease.lease_id),
                execution=execution,
                read_snapshot=read_snapshot,
                progress=progress,
                operation=operation,
                parameters=parameters,
                groups=todo,
                lease=lease,
                plan_id=plan_id,
                on_failure=on_failure,
            )
    outcome.abandoned[:0] = stale
    return outcome
