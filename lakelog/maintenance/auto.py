"""Auto-compaction: after a data commit, the writer compacts the small files of the
partitions that commit touched (table property ``lakelog.auto_compact``).

**When.** A commit that adds data files (append, overwrite, the new files of a delete,
update or merge; not a file re-added with a deletion vector) triggers a check of the
partitions its new files are in. Rewrite commits (``COMPACT``, ``OPTIMIZE``, this
module's own ``AUTO COMPACT``/``AUTO OPTIMIZE``), claims, expiries and metadata
changes add no data files with ``data_change``, so they never trigger one: there is
no recursion.

**What.** Within each touched partition, the *small* files (below
``lakelog.compaction.min_file_size_ratio`` of the target size, not under another
run's live claim, not written by clustering) are sorted into *size tiers*: tier ``k``
holds files between ``m / F**(k+1)`` and ``m / F**k`` bytes, where ``m`` is the small-file
bound and ``F`` is ``lakelog.auto_compact.min_files``. A tier that holds ``F`` files
or more is compacted, its files bin-packed into files of the target size. Merging
``F`` files of one tier makes a file of the next tier up, so every byte is rewritten
at most once per tier it climbs (write amplification at most the number of tiers
between a micro-batch and the target, about ``log_F(m / batch size)``), and a
partition keeps fewer than ``F`` small files per tier. Compacting everything small
each time instead would rewrite the same growing file on every run: the cost grows
with the partition, not with the new data (the snowball of merging late rows into
the previous output again and again). A table that declares a clustering is
clustered instead, incrementally (``optimize``'s incremental planner, restricted to
the touched partitions holding ``F`` or more files not clustered yet): late rows are
sorted into place rather than bin-packed.

**How.** Through the one rewrite pipeline (:func:`~.pipeline.run_prepared`): the plan
leaves out files under another run's live claim, the run claims its groups on the
log before rewriting them, and its commit is a rewrite (``data_change=false``) that
rebases over appends and abandons only groups whose sources a concurrent commit
removed. So it never conflicts with a user's ``compact``/``optimize`` (they take
disjoint files), never rewrites a file twice, and never fails or holds up another
writer's commit (an append never conflicts with a rewrite; a row-level change that
removes a file the run removed first conflicts as with any compaction, by the rules of
``docs/format.md``, and is run again). One run
rewrites at most ``lakelog.auto_compact.max_bytes`` source bytes (smallest groups
first), which bounds its time; what is left waits for the next commit to the
partition.

**Never the commit's fate.** The trigger commit has landed and is acknowledged before
any of this runs; the write returns its result with an
:class:`~lakelog.hooks.AutoCompaction` attached (``result.auto_compaction``), which
says what happened, including a lost race or an error (also logged as a warning);
rewrite commits that landed stay in it (``versions``) beside a later failure.
``lakelog.auto_compact.mode=inline`` (default) runs before the write returns;
``async`` runs in the background, one run at a time per table per process, which
coalesces the partitions of the commits that land while it runs: in a low-priority
worker process (:mod:`.auto_worker`; ``lakelog.auto_compact.worker=process``, the
default), whose Python work shares no GIL with the writer's commits, or on a background
thread (``thread``, and stores another process cannot open). A background thread
(:func:`lakelog.threads.spawn`) waits on the worker's pipe.

**Failures back off.** A group whose rewrite raises is reported and the others go on;
its files are left out of the rest of the run and, for :data:`BACKOFF_S` (doubled per
failure, up to :data:`MAX_BACKOFF_S`), of the runs after it in this process, so a
damaged file is not planned again on every round and every commit. A run that fails
releases its claim (a ``RELEASE`` commit); only a killed one leaves it to its lease.
A process killed mid-run leaves at most a claim whose lease dies with it: the next
run's planner takes the files again once the lease is gone, and ``Table.resume``
finishes the plan.

:func:`run_auto_compaction` is the entry point for any writer (the facade's writes
call it; an engine's writer can call it with the result of its commit).

Crash and pause point (:mod:`lakelog._failpoints`): ``auto-compact:start`` (the
trigger commit landed, nothing planned yet).
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from .. import threads
from .._failpoints import failpoint, pausepoint
from ..core import TableCore
from ..errors import CommitConflictError, MaintenanceFailedError
from ..hooks import AutoCompaction
from ..log.actions import AddFile, DataFile, RemoveFile
from ..log.checkpoint import write_checkpoint
from ..log.filelist import FileList
from ..log.snapshot import Snapshot
from ..partitioning import partition_expression, partition_scalar
from ..properties import get_bool, get_float, get_int, get_str
from ..storage import Storage
from ..transaction import CommitResult
from .auto_worker import Worker, shareable
from .claims import claimed_files
from .clustering.planner import ClusterPlan
from .clustering.run import CLUSTERING, prepare_clustering
from .clustering.spec import TAG_SPEC, declared_clustering
from .compaction.planner import CompactionPlan, plan_compaction
from .compaction.run import COMPACTION
from .executor import ProgressCallback
from .groups import FileGroup
from .options import ClusteringOptions, CompactionOptions, ExecutionOptions
from .pipeline import (
    Executed,
    Prepared,
    RewriteExecutor,
    RewriteKind,
    run_in_threads,
    run_prepared,
)
from .report import MaintenanceReport

if TYPE_CHECKING:
    from ..core.handle import TableHandle

__all__ = [
    "AUTO_OPERATIONS",
    "BACKOFF_S",
    "MAX_BACKOFF_S",
    "AutoSettings",
    "Partition",
    "attach_auto_compaction",
    "choose_files",
    "new_files",
    "run_auto_compaction",
    "run_once",
    "size_tier",
    "touched_files",
    "touched_partitions",
]

log = logging.getLogger("lakelog")

COMPACT_OPERATION = "AUTO COMPACT"
CLUSTER_OPERATION = "AUTO OPTIMIZE"
AUTO_OPERATIONS = (COMPACT_OPERATION, CLUSTER_OPERATION)
"""The operations of auto-compaction's rewrite commits."""

Mode = Literal["inline", "async"]
Partition = tuple[tuple[str, str | None], ...]
"""A partition as sorted (column, log string value) pairs; ``()`` for an unpartitioned table."""

R = TypeVar("R", bound=CommitResult)


@dataclass(frozen=True)
class AutoSettings:
    """The ``lakelog.auto_compact.*`` properties of a table, resolved."""

    enabled: bool
    mode: Mode
    min_files: int
    target_file_size: int
    min_file_size: int
    """Files below this many bytes are small."""
    max_bytes: int

    @classmethod
    def of(cls, props: Mapping[str, str]) -> AutoSettings:
        target = get_int(props, "lakelog.auto_compact.target_file_size") or get_int(
            props, "lakelog.target_file_size"
        )
        ratio = get_float(props, "lakelog.compaction.min_file_size_ratio")
        return cls(
            enabled=get_bool(props, "lakelog.auto_compact"),
            mode="async" if get_str(props, "lakelog.auto_compact.mode") == "async" else "inline",
            min_files=get_int(props, "lakelog.auto_compact.min_files"),
            target_file_size=target,
            min_file_size=max(1, int(target * ratio)),
            max_bytes=get_int(props, "lakelog.auto_compact.max_bytes"),
        )


# -- what a commit touched (pure) ----------------------------------------------------


def new_files(actions: Sequence[Any]) -> list[AddFile]:
    """The data files a commit's ``actions`` add with new rows: adds with ``data_change``
    whose path the same commit does not remove (a file re-added with a new deletion
    vector is not new)."""
    removed = {a.path for a in actions if isinstance(a, RemoveFile)}
    return [
        a for a in actions if isinstance(a, AddFile) and a.data_change and a.path not in removed
    ]


def touched_partitions(adds: Sequence[AddFile]) -> dict[Partition, dict[str, str | None]]:
    """The partitions of ``adds``, each once."""
    return {_key(a.partition): dict(a.partition) for a in adds}


def _key(partition: Mapping[str, str | None]) -> Partition:
    return tuple(sorted(partition.items(), key=lambda kv: kv[0]))


def _order(key: Partition) -> tuple[tuple[str, bool, str], ...]:
    """A sort key for partitions with null values (nulls last)."""
    return tuple((c, v is None, v or "") for c, v in key)


def size_tier(size: int, min_file_size: int, fanout: int) -> int:
    """The tier of a small file: ``k`` for sizes in
    ``[min_file_size / fanout**(k+1), min_file_size / fanout**k)``.

    >>> [size_tier(s, 1000, 10) for s in (999, 100, 99, 10, 9, 1)]
    [0, 0, 1, 1, 2, 2]
    """
    ratio = min_file_size / max(1, size)
    if ratio <= 1:
        return 0
    k = math.floor(math.log(ratio, fanout))
    # float error at exact powers: keep the bounds of the doc
    while k > 0 and size * fanout**k >= min_file_size:
        k -= 1
    while size * fanout ** (k + 1) < min_file_size:
        k += 1
    return k


def choose_files(
    files: Sequence[DataFile],
    partitions: Mapping[Partition, Mapping[str, str | None]],
    settings: AutoSettings,
    *,
    exclude: frozenset[str] = frozenset(),
    clustering: bool = False,
) -> tuple[list[str], set[Partition]]:
    """The files to rewrite among ``files`` (those of the touched ``partitions``), and
    the partitions they are in; pure.

    Compaction (``clustering`` False): the small files of every (partition, size tier)
    holding ``min_files`` or more, leaving out ``exclude`` (live claims) and files
    clustering wrote. Clustering: the partitions holding ``min_files`` or more files
    not clustered yet (their fresh files; the planner decides the rest).
    """
    by_tier: dict[tuple[Partition, int], list[DataFile]] = {}
    for f in files:
        key = _key(f.partition)
        if key not in partitions or f.path in exclude:
            continue
        if clustering:
            if TAG_SPEC not in f.tags:
                by_tier.setdefault((key, 0), []).append(f)
            continue
        if f.size_bytes >= settings.min_file_size or TAG_SPEC in f.tags:
            continue
        tier = size_tier(f.size_bytes, settings.min_file_size, settings.min_files)
        by_tier.setdefault((key, tier), []).append(f)
    chosen: list[str] = []
    where: set[Partition] = set()
    for (key, _), group in sorted(by_tier.items(), key=lambda kv: (_order(kv[0][0]), -kv[0][1])):
        if len(group) >= settings.min_files:
            chosen.extend(f.path for f in group)
            where.add(key)
    return chosen, where


def _partition_filter(snapshot: Snapshot, parts: Sequence[Mapping[str, str | None]]) -> Any:
    """A pyarrow Expression selecting exactly ``parts`` (None: unpartitioned)."""
    expr: pc.Expression | None = None
    for p in parts:
        term = partition_expression(snapshot.schema, p)
        if term is None:
            return None
        expr = term if expr is None else expr | term
    return expr


def touched_files(
    snapshot: Snapshot, partitions: Mapping[Partition, Mapping[str, str | None]]
) -> list[DataFile]:
    """The live files of ``partitions``, from the snapshot's typed entries (the table
    the compaction planner reads too, so a run builds it once), compared with the
    partition values as the log writes them."""
    entries = snapshot.entries
    if snapshot.partition_by and entries.num_rows:
        part = entries.column("partition").combine_chunks()
        mask: pa.Array | None = None
        for values in partitions.values():
            term: pa.Array | None = None
            for c, text in values.items():
                col = pc.struct_field(part, c)
                same = (
                    pc.is_null(col)
                    if text is None
                    else pc.fill_null(pc.equal(col, partition_scalar(text, col.type)), False)
                )
                term = same if term is None else pc.and_(term, same)
            if term is not None:
                mask = term if mask is None else pc.or_(mask, term)
        if mask is not None:
            entries = entries.filter(mask)
    return list(FileList.of_entries(entries))


def _within(
    groups: Sequence[Any], budget: int, avoid: frozenset[str] = frozenset()
) -> tuple[Any, ...]:
    """The groups to run: smallest first while their source bytes fit ``budget``,
    leaving out any group with a file in ``avoid`` (a group that failed lately)."""
    out, used = [], 0
    for g in sorted(groups, key=lambda g: (g.total_bytes, g.group_id)):
        if used + g.total_bytes > budget or any(p in avoid for p in g.paths):
            continue
        out.append(g)
        used += g.total_bytes
    return tuple(out)


# -- one run ---------------------------------------------------------------------------


def _prepare(
    table: TableHandle,
    partitions: Mapping[Partition, Mapping[str, str | None]],
    trigger_version: int,
    mode: Mode,
    spent: int,
    avoid: frozenset[str] = frozenset(),
) -> Prepared[Any] | None:
    """A round's plan, on the latest snapshot, within what is left of the run's budget
    after ``spent`` bytes, without the files of ``avoid`` (groups that failed lately);
    None when no tier reached the threshold."""
    snap = table.snapshot()
    settings = AutoSettings.of(snap.properties)
    budget = settings.max_bytes - spent
    files = touched_files(snap, partitions)
    claimed = claimed_files(table.storage, snap) | avoid
    declared = declared_clustering(snap.properties)
    chosen, hit = choose_files(
        files,
        partitions,
        settings,
        exclude=claimed,
        clustering=declared is not None,
    )
    if not chosen:
        return None
    extra = {"trigger_version": trigger_version, "auto": True, "mode": mode}
    execution = ExecutionOptions().resolve(snap.properties)
    if declared is not None:
        hit_filter = (
            _partition_filter(snap, [dict(k) for k in sorted(hit, key=_order)])
            if snap.partition_by
            else None
        )
        prepared = prepare_clustering(
            table, ClusteringOptions(partition_filter=hit_filter, incremental=True)
        )
        cplan: ClusterPlan = msgspec.structs.replace(
            prepared.plan, groups=_within(prepared.plan.groups, budget, avoid)
        )
        if not cplan.groups:
            return None
        kind_c = _auto_kind(CLUSTERING, CLUSTER_OPERATION, extra)
        return dataclasses.replace(prepared, kind=kind_c, plan=cplan, execution=execution)
    plan = plan_compaction(
        snap,
        CompactionOptions(
            target_file_size=settings.target_file_size,
            min_file_size=settings.min_file_size,
            min_input_files=2,
        ),
        exclude=claimed,
        only=chosen,
    )
    plan = msgspec.structs.replace(plan, groups=_within(plan.groups, budget))
    if not plan.groups:
        return None
    kind = _auto_kind(COMPACTION, COMPACT_OPERATION, extra)
    return Prepared(table=table, kind=kind, plan=plan, execution=execution, snapshot=snap)


AutoPlan = TypeVar("AutoPlan", CompactionPlan, ClusterPlan)


def _auto_kind(
    kind: RewriteKind[AutoPlan], operation: str, extra: Mapping[str, Any]
) -> RewriteKind[AutoPlan]:
    """``kind`` as an automatic run commits it: its own operation, ``extra`` (the trigger
    version, the mode) in the commit's parameters."""
    return dataclasses.replace(
        kind, operation=operation, parameters=lambda p: {**kind.parameters(p), **extra}
    )


MAX_ROUNDS = 8
"""Rounds of one run at most: merging a full tier can fill the next one up, which the
same run then merges (a carry), as long as the byte budget lasts."""

BACKOFF_S = 60.0
"""How long the files of a group whose rewrite failed are left out of auto-compaction
in this process after its first failure; doubled on each failure after, up to
:data:`MAX_BACKOFF_S`. A damaged or unreadable file then costs one failed attempt per
backoff, not one per commit to its partition (nor one per round of a run)."""
MAX_BACKOFF_S = 3600.0


class _Backoff:
    """The files of groups that failed, per table, in this process, and until when
    they are left out (:data:`BACKOFF_S`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tables: dict[str, dict[str, tuple[int, float]]] = {}

    def avoided(self, uri: str, now: float | None = None) -> frozenset[str]:
        """The files of ``uri`` to leave out now."""
        at = time.monotonic() if now is None else now
        with self.lock:
            known = self.tables.get(uri, {})
            for path in [p for p, (_, until) in known.items() if until + MAX_BACKOFF_S < at]:
                del known[path]  # long past its backoff: forgotten
            return frozenset(p for p, (_, until) in known.items() if at < until)

    def failed(self, uri: str, paths: Sequence[str], now: float | None = None) -> None:
        """Record a failure of the group of ``paths``."""
        at = time.monotonic() if now is None else now
        with self.lock:
            known = self.tables.setdefault(uri, {})
            for path in paths:
                count = known.get(path, (0, 0.0))[0] + 1
                known[path] = (count, at + min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (count - 1)))


_backoff = _Backoff()


class _KeepGoing:
    """The embedded executor (threads of this process), except that a group whose
    rewrite raises is reported in ``failed_groups`` (and abandoned) while the others
    go on, as a Spark run does: the run then knows which files failed."""

    def idle_extra(self, prepared: Prepared[Any]) -> dict[str, Any]:
        return {}

    def execute(self, prepared: Prepared[Any], progress: ProgressCallback | None) -> Executed:
        failed: dict[str, str] = {}

        def on_failure(group: FileGroup, error: Exception) -> None:
            failed[group.group_id] = f"{type(error).__name__}: {error}"

        outcome = run_in_threads(prepared, progress, on_failure=on_failure)
        outcome.abandoned.extend(failed)
        return Executed(outcome, {"failed_groups": failed})

    def failure_advice(self, report: MaintenanceReport) -> str:
        return "Fix the cause of the first error; the next commit to the partition tries again."


def _manifest(table: TableHandle) -> None:
    """A manifest at the latest version after an async run's rewrites, written by the
    background run rather than by a later commit of the ingest: until the next one every
    cold open (a query on a fresh handle) replays the rewrite's commit, one remove per
    file merged. Never raises."""
    try:
        snap = table.snapshot()
        write_checkpoint(snap, leaf_files=get_int(snap.properties, "lakelog.manifest.leaf_files"))
    except Exception as e:  # noqa: BLE001 - an optimisation for readers; the next interval writes one
        log.warning("auto-compaction: no manifest after its rewrite: %s: %s", type(e).__name__, e)


def run_once(
    table: TableHandle,
    partitions: Mapping[Partition, Mapping[str, str | None]],
    trigger_version: int,
    mode: Mode,
    executor: RewriteExecutor | None = None,
) -> AutoCompaction:
    """Plan and run, in rounds while a round compacts something (:data:`MAX_ROUNDS`);
    never raises an ``Exception`` (the outcome says what happened). ``executor``
    rewrites the groups (default: threads of this process, a failing group reported
    while the others go on).

    A group that fails is left out of the rest of the run and, for a backoff
    (:data:`BACKOFF_S`), of the runs after it in this process; a failure after rewrite
    commits landed keeps them in the outcome (``compacted``, with the ``error``)."""
    started = time.monotonic()
    uri = table.storage.uri
    out = AutoCompaction(
        status="below_threshold", trigger_version=trigger_version, mode=mode,
        partitions=len(partitions),
    )  # fmt: skip
    run_with = _KeepGoing() if executor is None else executor

    def failure(error: str, failed: int = 0) -> None:
        nonlocal out
        landed = out.status == "compacted"
        log.warning(
            "auto-compaction after version %d failed%s (the data commit stays; the next "
            "commit to these partitions tries again): %s",
            trigger_version,
            f" after landing version(s) {list(out.versions)}" if landed else "",
            error,
        )
        out = dataclasses.replace(
            out,
            status="compacted" if landed else "failed",
            failed_groups=out.failed_groups + failed,
            error=error,
        )

    round_paths: list[str] = []  # the files of the round that runs (backed off if it errors)
    try:
        failpoint("auto-compact:start")
        pausepoint("auto-compact:start")
        for _ in range(MAX_ROUNDS):
            avoid = _backoff.avoided(uri)
            prepared = _prepare(
                table, partitions, trigger_version, mode, out.bytes_rewritten, avoid
            )
            if prepared is None:
                break
            by_id = {g.group_id: g for g in prepared.plan.groups}
            round_paths = [p for g in prepared.plan.groups for p in g.paths]
            try:
                report = run_prepared(prepared, run_with)
            except MaintenanceFailedError as e:  # every group of the round failed
                for gid in e.failed_groups:
                    if gid in by_id:
                        _backoff.failed(uri, by_id[gid].paths)
                failure(next(iter(e.failed_groups.values()), str(e)), len(e.failed_groups))
                continue  # the next round plans without them
            for gid in report.failed_groups:
                if gid in by_id:
                    _backoff.failed(uri, by_id[gid].paths)
            if report.failed_groups:
                cause = next(iter(report.failed_groups.values()))
                out = dataclasses.replace(
                    out, failed_groups=out.failed_groups + len(report.failed_groups),
                    error=cause,
                )  # fmt: skip
            abandoned = out.abandoned_groups + len(report.abandoned_groups)
            if not report.commits:
                if out.status == "below_threshold":
                    out = dataclasses.replace(
                        out, status="lost", abandoned_groups=abandoned,
                        error="every group was claimed or changed by a concurrent run or "
                        "commit first",
                    )  # fmt: skip
                break
            out = dataclasses.replace(
                out,
                status="compacted",
                version=report.commits[-1],
                versions=(*out.versions, *report.commits),
                files_removed=out.files_removed + report.compacted_file_count,
                files_added=out.files_added + report.output_file_count,
                bytes_rewritten=out.bytes_rewritten + report.rewritten_bytes,
                abandoned_groups=abandoned,
                error=out.error if out.failed_groups else None,
            )
    except CommitConflictError as e:  # e.g. the metadata changed under the plan
        log.warning(
            "auto-compaction after version %d lost a race (the data commit stays): %s",
            trigger_version,
            e,
        )
        landed = out.status == "compacted"
        out = dataclasses.replace(
            out, status="compacted" if landed else "lost", error=f"{type(e).__name__}: {e}"
        )
    except Exception as e:  # noqa: BLE001 - the data commit landed: report, never raise
        if round_paths:  # the round's groups wait out a backoff, as a failed group does
            _backoff.failed(uri, round_paths)
        failure(f"{type(e).__name__}: {e}")
    if out.status == "compacted" and mode == "async":
        _manifest(table)
    return dataclasses.replace(out, duration_s=time.monotonic() - started)


# -- async: one background run per table and process -----------------------------------


class _Background:
    """The background runs of one table in this process: one at a time; the partitions
    of commits that land while one runs are gathered for the next."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.partitions: dict[Partition, dict[str, str | None]] = {}
        self.waiting: list[tuple[int, Future[AutoCompaction]]] = []
        self.running = False
        self.worker: Worker | None = None
        """The worker process the runs go to (``lakelog.auto_compact.worker=process``)."""

    def submit(
        self,
        table: TableHandle,
        partitions: Mapping[Partition, dict[str, str | None]],
        trigger: int,
        executor: RewriteExecutor | None = None,
    ) -> Future[AutoCompaction]:
        future: Future[AutoCompaction] = Future()
        future.set_running_or_notify_cancel()
        with self.lock:
            self.partitions.update(partitions)
            self.waiting.append((trigger, future))
            start, self.running = not self.running, True
        if start:
            storage = table.storage
            process = (
                executor is None
                and get_str(table.properties, "lakelog.auto_compact.worker") == "process"
                and shareable(storage)
            )
            threads.spawn(
                "lakelog-auto-compact", lambda: self.drain(storage, executor, process=process)
            )
        return future

    def drain(
        self, storage: Storage, executor: RewriteExecutor | None = None, *, process: bool = False
    ) -> None:
        table: TableHandle | None = None
        error: Exception | None = None
        if process:  # the runs go to the worker: this thread only waits on its pipe
            if self.worker is None:
                self.worker = Worker(storage)
                _workers.append(self.worker)
        else:
            try:  # its own handle: the writer's cached snapshot stays the writer's
                table = TableCore.load(storage)
            except Exception as e:  # noqa: BLE001 - reported to every waiter below
                error = e
        while True:
            with self.lock:
                if not self.waiting:
                    self.running = False
                    return
                parts, self.partitions = self.partitions, {}
                waiting, self.waiting = self.waiting, []
            trigger = max(t for t, _ in waiting)
            try:
                if process and self.worker is not None:
                    try:
                        out = self.worker.run(parts, trigger)
                    except OSError as e:  # no process could be started here: a thread
                        log.warning("auto-compaction runs on a thread: no worker: %s", e)
                        process = False
                        try:
                            table = TableCore.load(storage)
                        except Exception as opened:  # noqa: BLE001 - reported below
                            error = opened
                        out = (
                            run_once(table, parts, trigger, "async", executor)
                            if table is not None
                            else AutoCompaction(
                                status="failed", trigger_version=trigger, mode="async",
                                error=f"{type(error).__name__}: {error}",
                            )
                        )  # fmt: skip
                    if out.status == "failed":
                        log.warning(
                            "auto-compaction after version %d failed (the data commit "
                            "stays): %s", trigger, out.error,
                        )  # fmt: skip
                elif table is None:
                    log.warning("auto-compaction could not open %s: %s", storage.uri, error)
                    out = AutoCompaction(
                        status="failed", trigger_version=trigger, mode="async",
                        error=f"{type(error).__name__}: {error}",
                    )  # fmt: skip
                else:
                    out = run_once(table, parts, trigger, "async", executor)
            except BaseException as e:  # an interrupt: no waiter hangs, the next commit restarts
                with self.lock:
                    self.running = False
                    waiting += self.waiting
                    self.waiting = []
                for _, future in waiting:
                    future.set_exception(e)
                raise
            with self.lock:  # idle before the waiters learn the outcome: a commit that
                finished = not self.waiting  # follows a wait() starts a run of its own
                if finished:
                    self.running = False
            for own, future in waiting:
                future.set_result(dataclasses.replace(out, trigger_version=own))
            if finished:
                return


_backgrounds: dict[str, _Background] = {}
_backgrounds_lock = threading.Lock()
_workers: list[Worker] = []


@atexit.register
def _close_workers() -> None:
    """At exit (after the background drains, which threading joins first): end the
    worker processes once their run under way is over."""
    while _workers:
        _workers.pop().close()


def _submit_async(
    table: TableHandle,
    partitions: Mapping[Partition, dict[str, str | None]],
    trigger_version: int,
    executor: RewriteExecutor | None = None,
) -> AutoCompaction:
    with _backgrounds_lock:
        bg = _backgrounds.setdefault(table.storage.uri, _Background())
    future = bg.submit(table, partitions, trigger_version, executor)
    return AutoCompaction.running(trigger_version, future)


# -- the entry point -------------------------------------------------------------------


def run_auto_compaction(
    table: TableHandle,
    landed: CommitResult,
    *,
    mode: Mode | None = None,
    executor: RewriteExecutor | None = None,
) -> AutoCompaction | None:
    """Auto-compact after the commit ``landed`` (a result of a commit to ``table``).

    None when the table's ``lakelog.auto_compact`` is off, or the commit added no data
    files (or was skipped, or is a rewrite). Otherwise what the run did, or, in async
    mode, a ``running`` outcome whose :meth:`~lakelog.hooks.AutoCompaction.wait` gives
    it. Never raises for the run's own failures: the commit landed regardless.
    ``mode``: ``"inline"`` or ``"async"``; default the table's
    ``lakelog.auto_compact.mode``. ``executor``: what rewrites the groups (default:
    threads of this process; :func:`lakelog.spark.write` passes
    :class:`lakelog.spark.maintenance.SparkExecutor`: the same selection, the bytes
    rewritten on Spark's executors).
    """
    if landed.skipped or landed.operation in AUTO_OPERATIONS:
        return None
    if not get_bool(table.properties, "lakelog.auto_compact"):
        return None
    adds = new_files(landed.actions)
    if not adds:
        return None
    partitions = touched_partitions(adds)
    chosen = mode if mode is not None else AutoSettings.of(table.properties).mode
    if chosen == "async":
        return _submit_async(table, partitions, landed.version, executor)
    return run_once(table, partitions, landed.version, "inline", executor)


def attach_auto_compaction(table: TableHandle, result: R) -> R:
    """``result`` with :func:`run_auto_compaction`'s outcome in ``auto_compaction``."""
    outcome = run_auto_compaction(table, result)
    return result if outcome is None else dataclasses.replace(result, auto_compaction=outcome)
