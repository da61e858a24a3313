"""Optimistic transactions: read version, actions, conflict rules, the one retry rule.

A commit is data: a header plus actions. It is created as version
``read_version + 1`` put-if-absent. When another writer got there first, the
winning commits are read and the transaction goes on after them in one of two ways:

* it *rebases*: the winners are checked against this transaction's conflict rules
  (after an optional ``rebase`` callback adjusted the actions); if none conflicts, the
  same actions go to the next version;
* or, given a ``rebuild`` step (pyiceberg's ``_rebuild_snapshot_updates`` is the
  model), it *re-plans*: the winners are applied to its base and the step plans the
  actions again on that snapshot (a schema change built on the new schema, an expiry
  planned on the new settings, a rewrite without the groups a winner took), which then
  commit on it. The step is the operation's own planner: its checks are the conflict
  rules. Nothing left to commit ends the transaction as skipped.

Either way the retry waits first (:func:`backoff`: exponential, with full jitter, the one
backoff of the code base), and the attempts and total time are bounded by the table's
``lakelog.commit.max_attempts`` and ``lakelog.commit.timeout_seconds``. No operation
wraps a transaction in a retry loop of its own.

Every transaction has a unique id in its header. After an error whose outcome
is unknown (a timeout after the put), the retry looks for a commit carrying
its own id before committing again, so a commit never lands twice.

Restarts and rebases happen in one loop (:meth:`Transaction.commit`). Once the
commit landed, the post-commit hooks of :mod:`lakelog.hooks` run (a manifest when
due, the Delta view): they never change whether it landed.

The conflict rules (which winner a transaction cannot rebase over) are in
:mod:`lakelog.conflict_rules`.

No acknowledged commit is lost to an expiry: a put that lands in a range an
expiry deleted meanwhile is found by the expiry marks, withdrawn and made again
at the latest version (``Transaction._readable``, :mod:`lakelog.log.expiry_marks`);
a transaction whose base was expired goes on from the latest version where the
outcome is the same (appends, rewrites of still-live files) and fails otherwise
(``Transaction._restart``). A hole in the log is never filled: a writer does not
put ``v`` while ``v + 1`` exists.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

from . import __about__
from ._failpoints import failpoint, pausepoint
from .app_transactions import app_commit, app_transaction, check_app_versions
from .conflict_rules import Kind, check_conflicts, data_append, same_shape
from .errors import (
    CommitConflictError,
    InvalidArgumentError,
    LakelogError,
    LogGapError,
)
from .hooks import HOOKS, LARGE_COMMIT_BYTES, AutoCompaction, Landed, PostCommitHook, run_hooks
from .io.guards import declares_guards, marks_of, with_marks
from .log import mapping
from .log.actions import (
    Action,
    AddFile,
    AppTransaction,
    Commit,
    CommitHeader,
    Metadata,
    PlanClaim,
    PlanRelease,
    RemoveFile,
    encode_schema,
)
from .log.commits import (
    commit_path,
    commits_between,
    encode_commit,
    read_commit,
)
from .log.expiry_marks import marks_above, read_mark
from .log.files import replay
from .log.format import DELETION_VECTORS, commit_version, metadata_version
from .log.snapshot import Snapshot, advance, load_snapshot, oldest_readable_version
from .properties import get_bool, get_float, get_int
from .storage import Storage

__all__ = [
    "LARGE_COMMIT_BYTES",
    "CommitResult",
    "Kind",
    "Rebuild",
    "Replan",
    "Transaction",
    "app_commit",
    "app_transaction",
    "backoff",
    "check_app_versions",
    "check_conflicts",
    "same_shape",
    "skipped_result",
]

log = logging.getLogger("lakelog")

Rebase = Callable[[Sequence[Commit], list[Action]], list[Action]]
"""Called with the winning commits and the current actions before a retry;
returns the actions to commit instead (e.g. without abandoned groups) or
raises :class:`CommitConflictError`. A callback object with a ``metrics``
mapping updates the header's metrics with it (see ``Transaction._metrics``)."""


class Replan(NamedTuple):
    """What a rebuild step planned on the latest snapshot.

    Attributes:
        actions: the actions to commit on it; none: nothing is left to commit (the
            transaction ends, its result ``skipped``).
        parameters: the header's parameters when they changed (None: as before).
        metrics: the header's metrics when they changed (None: as before).
    """

    actions: Sequence[Action]
    parameters: Mapping[str, Any] | None = None
    metrics: Mapping[str, Any] | None = None


Rebuild = Callable[[Snapshot, Sequence[Commit] | None], Replan]
"""Called after a lost race with the snapshot the winners made (this transaction's base
with them applied) and the winners (None when they can no longer be read: the base was
expired, the snapshot is then the latest); returns the operation planned again on that
snapshot, or raises (a :class:`CommitConflictError` when the winners made the operation
impossible). The transaction commits the replan on that snapshot without checking the
winners again."""


def backoff(attempt: int, *, deadline: float | None = None) -> None:
    """Wait before retry ``attempt`` (1 for the first): exponential backoff with full
    jitter (a uniform pause up to 5 ms * 2^attempt, capped at 1 s), never past
    ``deadline`` (on :func:`time.monotonic`). The one backoff every retry takes."""
    cap = min(1.0, 0.005 * 2 ** min(max(attempt, 0), 10))
    pause = random.uniform(0, cap)
    if deadline is not None:
        pause = min(pause, deadline - time.monotonic())
    if pause > 0:
        time.sleep(pause)


@dataclass(frozen=True)
class CommitResult:
    """Outcome of a commit: the version it landed at and how many tries it took.

    Attributes:
        version: the version the commit landed at.
        attempts: puts tried, 1 unless concurrent commits made it rebase.
        txn_id: the transaction's id, recorded in the commit header.
        operation: the operation recorded in the header (``WRITE``, ``DELETE``, ...).
        actions: the actions committed.
        skipped: nothing was committed: the work was already in the table (an app
            version recorded before: ``version`` is then the commit that recorded it) or
            there was nothing to change (``version`` is the latest).
        auto_compaction: what the auto-compaction after this commit did (tables with
            ``lakelog.auto_compact`` on; None otherwise, and for commits that added no
            data files). It never changes whether this commit landed.
    """

    version: int
    attempts: int
    txn_id: str = ""
    operation: str = ""
    actions: tuple[Action, ...] = field(default=(), repr=False)
    skipped: bool = False
    auto_compaction: AutoCompaction | None = None


def skipped_result(
    snapshot: Snapshot | None, app: AppTransaction | None, *, operation: str = ""
) -> CommitResult | None:
    """The result of a write whose app version ``snapshot`` already records (None: the
    write is new): the commit that holds it, flagged ``skipped``."""
    if snapshot is None or app is None:
        return None
    recorded = snapshot.app_versions.get(app.app_id)
    if recorded is None or recorded < app.app_version:
        return None
    at = snapshot.app_commits.get(app.app_id, snapshot.version)
    return CommitResult(
        version=app_commit(
            snapshot.storage, app.app_id, app.app_version, recorded=recorded, recorded_at=at
        ),
        attempts=0,
        operation=operation,
        skipped=True,
    )


class _Restart(Exception):
    """This transaction's base (or the winners since) was expired: go on from the latest
    version if the outcome is the same (:meth:`Transaction._restart`)."""


@dataclass
class _Base:
    """Where the next put goes: the snapshot the winners apply to, the winners read
    since (the landed snapshot is built from both), the version to put and the
    timestamp of its parent."""

    snapshot: Snapshot | None
    winners: list[Commit]
    version: int
    parent_ms: int

    @classmethod
    def on(cls, snapshot: Snapshot | None) -> _Base:
        if snapshot is None:
            return cls(None, [], 0, 0)
        return cls(snapshot, [], snapshot.version + 1, snapshot.timestamp_ms)

    def on_top(self, snapshot: Snapshot) -> None:
        """Put after ``snapshot``, the base with the winners applied (a replan)."""
        self.snapshot, self.winners = snapshot, []
        self.version, self.parent_ms = snapshot.version + 1, snapshot.timestamp_ms

    def after(self, winners: Sequence[Commit]) -> None:
        """Put after ``winners`` (read from :attr:`version` on, in order)."""
        self.winners.extend(winners)
        if winners:
            self.version = winners[-1].header.version + 1
            self.parent_ms = winners[-1].header.timestamp_ms


def _maintenance_only(commit: Commit) -> bool:
    """Whether ``commit`` changes no data: claims, releases and rewrites
    (``data_change=false`` adds and removes) only."""
    return all(
        isinstance(a, (PlanClaim, PlanRelease))
        or (isinstance(a, (AddFile, RemoveFile)) and not a.data_change)
        for a in commit.actions
    )


@dataclass(frozen=True)
class _Budget:
    """The attempts and time a commit may take (``lakelog.commit.*`` properties)."""

    max_attempts: int
    deadline: float
    """On ``time.monotonic()``."""

    def spent(self, attempt: int) -> bool:
        return attempt >= self.max_attempts or time.monotonic() > self.deadline

    def pause(self, attempt: int) -> None:
        """:func:`backoff`, never past the deadline."""
        backoff(attempt, deadline=self.deadline)


class Transaction:
    """One optimistic commit attempt sequence against a table.

    ``rebase``: adjusts the actions to the winners before the conflict rules check them
    (:data:`Rebase`); ``rebuild``: instead, plans the operation again on the snapshot the
    winners made (:data:`Rebuild`; needs ``read_snapshot``). ``hooks``: the post-commit
    hooks to run once the commit landed (default: every registered one,
    :data:`lakelog.hooks.HOOKS`). ``clock``: the wall clock in seconds that commit
    timestamps come from (default ``time.time``)."""

    def __init__(
        self,
        storage: Storage,
        read_snapshot: Snapshot | None,
        *,
        operation: str,
        kind: Kind,
        actions: Sequence[Action],
        parameters: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
        replaced_partitions: Sequence[Mapping[str, str | None]] | None = None,
        rebase: Rebase | None = None,
        rebuild: Rebuild | None = None,
        engine: str | None = None,
        txn_id: str | None = None,
        before_put: Callable[[], None] | None = None,
        hooks: Sequence[PostCommitHook] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.storage = storage
        self.read_snapshot = read_snapshot
        self.operation = operation
        self.kind: Kind = kind
        self.actions = _declare_vectors(actions, read_snapshot)
        self.parameters = dict(parameters or {})
        self.metrics = dict(metrics or {})
        self.replaced_partitions = replaced_partitions
        if rebuild is not None and (rebase is not None or read_snapshot is None):
            raise InvalidArgumentError(
                "expected a rebuild step on a read snapshot and without a rebase callback, "
                f"found {'a rebase callback too' if rebase is not None else 'no snapshot'}; "
                "pass one of rebase and rebuild, and the snapshot the actions were planned on."
            )
        self.rebase = rebase
        self.rebuild = rebuild
        self.engine = engine or f"lakelog/{__about__.__version__}"
        self.txn_id = txn_id or uuid.uuid4().hex
        self.before_put = before_put
        """Called right before every put attempt (a writer's lease check); may raise."""
        self.hooks: tuple[PostCommitHook, ...] = HOOKS if hooks is None else tuple(hooks)
        self.clock = clock
        self._encoded_bytes = 0
        """Size of the commit file last encoded (the one that landed, once it did)."""
        self.landed_snapshot: Snapshot | None = None
        """The table as of the landed commit, once it landed (None if it could not be built)."""

    def _header(self, version: int, parent_ts: int) -> CommitHeader:
        now = int(self.clock() * 1000)
        return CommitHeader(
            format_version=commit_version(self.actions),
            version=version,
            timestamp_ms=max(now, parent_ts + 1),
            operation=self.operation,
            parameters=self.parameters,
            read_version=self.read_snapshot.version if self.read_snapshot else None,
            txn_id=self.txn_id,
            engine=self.engine,
            metrics=self._metrics(),
        )

    def _metrics(self) -> dict[str, Any]:
        """The header's metrics; a rebase callback that changed the work (a row-level
        change rewriting rows appended meanwhile) says how with a ``metrics`` mapping."""
        extra = getattr(self.rebase, "metrics", None)
        return {**self.metrics, **extra} if isinstance(extra, Mapping) else self.metrics

    def commit(self) -> CommitResult:
        """Commit with rebases and retries; returns where it landed, after the
        post-commit hooks ran (they never change the outcome).

        Each attempt puts the commit at the next version. A lost race reads the
        winners and rebases over them (:meth:`_catch_up`); a base or winners expired
        meanwhile, or a put an expiry made unreadable, restarts from the latest
        version (:meth:`_restart`); a put whose outcome is unknown is looked for first.
        A rebuild step that leaves nothing to commit ends it (the result ``skipped``).
        """
        _check_views(self.actions, self.read_snapshot)
        props = self.read_snapshot.properties if self.read_snapshot is not None else {}
        budget = _Budget(
            max_attempts=get_int(props, "lakelog.commit.max_attempts"),
            deadline=time.monotonic() + get_float(props, "lakelog.commit.timeout_seconds"),
        )
        at = _Base.on(self.read_snapshot)
        attempt = 0
        unknown: int | None = None  # the version of a put whose outcome is unknown
        while True:
            attempt += 1
            self._check_budget(attempt, budget, at.version)
            try:
                mine = None if unknown is None else self._find_own(unknown)
                unknown = None
                if mine is None:
                    put = self._put(at, attempt, budget)
                    if isinstance(put, int):
                        unknown = put
                        budget.pause(attempt)
                        continue
                    mine = put
                if mine is None:
                    # lost the race: read the winners. To a data writer: back off, then
                    # read every winner so far and rebase, so the next put targets the
                    # version after the newest winner (backing off after reading would let
                    # a busy writer take that version during the pause). To maintenance
                    # only (claims, releases, rewrites that change no data: a compaction
                    # beside this writer, which commits a few times per run), there is no
                    # contention to back off from: rebase over them and put at once.
                    seen = self._winners(at.version)
                    quiet = all(_maintenance_only(c) for c in seen)
                    if not quiet:
                        budget.pause(attempt)
                    mine = self._catch_up(at, seen if quiet else None)
                if mine is None:
                    if not self.actions:
                        return self._nothing_left(at, attempt)
                    continue
                if self._readable(mine):
                    return self._landed(mine, at, attempt)
                # the put filled a hole an expiry had just made below the oldest readable
                # version: no reader would ever see it. Withdraw, go again.
                self._withdraw(mine.header.version)
                raise _Restart
            except _Restart:
                at = _Base.on(self._restart())
                if not self.actions:
                    return self._nothing_left(at, attempt)

    def _put(self, at: _Base, attempt: int, budget: _Budget) -> Commit | int | None:
        """Put the commit at ``at.version``: the commit if it landed, None if the version
        was taken (or a newer one exists), the version if the outcome is unknown (an
        error that may have come after the put; out of attempts, the error is raised
        unless the commit is found). Raises :class:`_Restart` if the base was expired."""
        if not self._base_exists(at.version):
            # the base was expired (and its commit deleted) while this transaction ran:
            # continue from the latest version where the outcome is the same
            raise _Restart
        # a newer commit exists: this version exists too (a lost race: read the winners)
        # or it is a hole, which reading the winners reports as damage rather than this
        # put filling it
        stale = self.storage.exists(commit_path(at.version + 1))
        if self.before_put is not None and not stale:
            self.before_put()
        header = self._header(at.version, at.parent_ms)
        data = encode_commit(header, self.actions)
        self._encoded_bytes = len(data)
        if stale:
            return None
        try:
            failpoint("commit:before-put", self.operation)
            pausepoint("commit:before-put")
            pausepoint(f"commit:before-put:{self.operation}")
            self.storage.put_if_absent(commit_path(at.version), data)
            failpoint("commit:after-put", self.operation)
        except FileExistsError:
            return None
        except LakelogError:
            raise
        except Exception as e:
            if budget.spent(attempt):
                # out of attempts: if the put landed after all, that is success
                mine = self._find_own_quietly(at.version)
                if mine is not None and self._readable(mine):
                    return mine
                raise
            log.warning("commit of version %d failed with %r; checking and retrying", at.version, e)
            return at.version
        return Commit(header, list(self.actions))

    def _winners(self, first: int) -> list[Commit]:
        """The commits from ``first`` on; :class:`_Restart` if they were expired."""
        try:
            return self._read_winners(first)
        except LogGapError as e:
            if e.missing >= oldest_readable_version(self.storage):
                raise
            raise _Restart from None  # winners were expired meanwhile

    def _catch_up(self, at: _Base, winners: list[Commit] | None = None) -> Commit | None:
        """After a lost race: read the winners since ``at.version`` (or take ``winners``,
        just read from there), then rebase over them (the rebase callback, then the
        conflict rules) and move ``at`` after them. Returns this transaction's own commit
        if an earlier put whose outcome was unknown is among them. Raises
        :class:`CommitConflictError`, or :class:`_Restart` if winners were expired
        meanwhile."""
        new = self._winners(at.version) if winners is None else winners
        mine = next((c for c in new if c.header.txn_id == self.txn_id), None)
        if mine is not None:
            at.winners.extend(c for c in new if c.header.version < mine.header.version)
            return mine
        if self.rebuild is not None:
            assert at.snapshot is not None  # a rebuild has a read snapshot
            fresh = advance(at.snapshot, [*at.winners, *new])
            self._replan(fresh, new)
            at.on_top(fresh)
            return None
        # the rebase callback first (it may drop actions, e.g. abandoned groups),
        # then the conflict rules on what is left
        before = {id(a) for a in self.actions}
        if self.rebase is not None:
            self.actions = self.rebase(new, self.actions)
        if self.read_snapshot is not None:
            self.actions = _carry_marks(self.actions, new, self.read_snapshot.metadata, self.rebase)
        check_conflicts(
            kind=self.kind,
            actions=self.actions,
            winners=new,
            # removes the callback added are of files these winners added, which it
            # checked against the winners after them; a winner that gave a file a new
            # deletion vector both removed and added its path, and the remove added here
            # is of the file it added
            rebased_removes=frozenset(
                a.path for a in self.actions if isinstance(a, RemoveFile) and id(a) not in before
            ),
            replaced_partitions=self.replaced_partitions,
            read_metadata=None if self.read_snapshot is None else self.read_snapshot.metadata,
        )
        at.after(new)
        return None

    def _replan(self, fresh: Snapshot, winners: Sequence[Commit] | None) -> None:
        """Plan the operation again on ``fresh`` (the rebuild step) and commit that on it."""
        assert self.rebuild is not None
        replan = self.rebuild(fresh, winners)
        self.actions = _declare_vectors(replan.actions, fresh)
        _check_views(self.actions, fresh)
        if replan.parameters is not None:
            self.parameters = dict(replan.parameters)
        if replan.metrics is not None:
            self.metrics = dict(replan.metrics)
        self.read_snapshot = fresh

    def _nothing_left(self, at: _Base, attempt: int) -> CommitResult:
        """The result of a transaction whose rebuild step left nothing to commit."""
        return CommitResult(
            version=at.version - 1,
            attempts=attempt,
            txn_id=self.txn_id,
            operation=self.operation,
            skipped=True,
        )

    def _check_budget(self, attempt: int, budget: _Budget, version: int) -> None:
        if attempt > 1 and (attempt > budget.max_attempts or time.monotonic() > budget.deadline):
            raise CommitConflictError(
                f"expected to commit {self.operation} within {budget.max_attempts} attempts "
                f"and the commit timeout, found the table changing faster (last tried "
                f"version {version - 1}). Retry later or raise lakelog.commit.max_attempts.",
                winning_version=version - 1,
            )

    def _base_exists(self, version: int) -> bool:
        """Whether the base ``version - 1`` of a put at ``version`` is still in the log.

        ``expire_snapshots`` deletes the commit files of expired versions, oldest
        first; a put above a deleted base would land below the oldest readable
        version. This check makes that rare; :meth:`_readable` makes it harmless.
        """
        return version == 0 or self.storage.exists(commit_path(version - 1))

    def _readable(self, commit: Commit) -> bool:
        """Whether this transaction's landed ``commit`` is part of the table's history.

        False only when the put filled a hole that an expiry made (see
        :mod:`lakelog.log.expiry_marks`): the mark covering the version names
        another transaction there.
        """
        v = commit.header.version
        above = marks_above(self.storage, v)
        if not above:
            return True
        for m in above:
            mark = read_mark(self.storage, m)
            if mark is not None and mark.previous_oldest_version <= v:
                return mark.txn_ids.get(v) == self.txn_id
        # no mark says what the expiry saw at v (pruned after a very long stall)
        if v >= oldest_readable_version(self.storage):
            return True
        added = [a.path for a in commit.actions if isinstance(a, AddFile)]
        if not added:
            return True
        live = set(load_snapshot(self.storage).paths())
        return any(p in live for p in added)

    def _withdraw(self, version: int) -> None:
        """Delete this transaction's commit at ``version`` (below the oldest readable
        version, so no reader resolves it)."""
        mine = self._find_own_quietly(version)
        if mine is not None:
            self.storage.delete([commit_path(version)])
        log.warning(
            "%s landed at version %d below the oldest readable version (an expiry ran "
            "meanwhile); withdrawn, committing again at the latest version",
            self.operation,
            version,
        )

    def _restart(self) -> Snapshot:
        """The latest snapshot to commit on after this transaction's base was expired.

        The winners since the base can no longer be read, so only transactions whose
        rules can be checked against the latest state go on: appends (unless the
        metadata changed) and rewrites whose removed files are all still live.
        """
        read = self.read_snapshot
        if self.rebuild is not None:
            # the step plans again on the latest state; the winners cannot be read
            fresh = load_snapshot(self.storage)
            self._replan(fresh, None)
            return fresh
        hint = "Read the table again (table.refresh()) and retry."
        if read is None or self.kind not in ("append", "rewrite"):
            raise CommitConflictError(
                f"expected version {read.version if read else 0}, the base of this "
                f"{self.operation}, to stay in the log of {self.storage.uri}, found it "
                f"expired by expire_snapshots while the {self.kind} ran, so the changes "
                f"since cannot be checked. {hint}"
            )
        fresh = load_snapshot(self.storage)
        check_app_versions(self.actions, fresh.app_versions, fresh.app_commits)
        if fresh.metadata != read.metadata and not (
            data_append(self.kind, self.actions) and same_shape(fresh.metadata, read.metadata)
        ):
            raise CommitConflictError(
                f"expected no concurrent table change, found the metadata (schema, "
                f"partitioning or properties) changed between version {read.version} and "
                f"{fresh.version}, and the versions between expired. {hint}",
                winning_version=fresh.version,
            )
        if self.kind == "rewrite":
            live = set(fresh.paths())
            lost = sorted(
                a.path for a in self.actions if isinstance(a, RemoveFile) and a.path not in live
            )
            if not lost and DELETION_VECTORS.declared_by(fresh.metadata.format_version):
                lost = _vector_changed(self.actions, read, fresh)
            if lost:
                raise CommitConflictError(
                    f"expected files {lost[:5]}{' ...' if len(lost) > 5 else ''} to still be "
                    f"live, found them removed by version {fresh.version} or earlier. {hint}",
                    winning_version=fresh.version,
                    conflicting_files=tuple(lost),
                )
        return fresh

    def _read_winners(self, first: int) -> list[Commit]:
        return list(commits_between(self.storage, first))

    def _find_own_quietly(self, version: int) -> Commit | None:
        """:meth:`_find_own`, or None when the log cannot be read either."""
        try:
            return self._find_own(version)
        except Exception:  # noqa: BLE001 - the caller re-raises the original error
            return None

    def _find_own(self, version: int) -> Commit | None:
        try:
            c = read_commit(self.storage, version)
        except FileNotFoundError:
            return None
        return c if c.header.txn_id == self.txn_id else None

    def _landed(self, commit: Commit, at: _Base, attempt: int) -> CommitResult:
        """The result of ``commit``, which landed, once the post-commit hooks ran on it."""
        landed = Landed(
            storage=self.storage,
            commit=commit,
            snapshot=self._snapshot_at(commit, at),
            read_snapshot=self.read_snapshot,
            encoded_bytes=self._encoded_bytes,
        )
        run_hooks(landed, self.hooks)
        self.landed_snapshot = landed.snapshot
        return CommitResult(
            version=commit.header.version,
            attempts=attempt,
            txn_id=self.txn_id,
            operation=self.operation,
            actions=tuple(commit.actions),
        )

    def _snapshot_at(self, commit: Commit, at: _Base) -> Snapshot | None:
        """The table as of the landed ``commit``: the base with the winners before it and
        the commit applied, no read needed. None if that fails (logged): it is a cache."""
        try:
            if at.snapshot is None:
                st = replay(None, None, -1, 0, [commit])
                assert st.metadata is not None
                return Snapshot(
                    self.storage,
                    version=st.version,
                    timestamp_ms=st.timestamp_ms,
                    metadata=st.metadata,
                    state=st,  # the whole replayed state (app versions too), not only files
                )
            known = [w for w in at.winners if w.header.version < commit.header.version]
            snap = advance(at.snapshot, [*known, commit])
        except Exception as e:  # noqa: BLE001 - the commit landed; the snapshot is a cache
            log.warning(
                "commit %d landed but its snapshot could not be built: %r",
                commit.header.version,
                e,
            )
            return None
        return snap if snap.version == commit.header.version else None


def _vector_changed(actions: Sequence[Action], read: Snapshot, fresh: Snapshot) -> list[str]:
    """Files a rewrite removes whose deletion vector changed between ``read`` and
    ``fresh``: its outputs hold rows deleted since (format.md, "Deletion vectors")."""
    removed = {a.path for a in actions if isinstance(a, RemoveFile)}
    before = {f.path: f.deleted for f in read.files() if f.path in removed}
    return sorted(
        f.path for f in fresh.files() if f.path in removed and f.deleted != before.get(f.path)
    )


def _declare_vectors(actions: Sequence[Action], read: Snapshot | None) -> list[Action]:
    """``actions``, with a ``metadata`` action declaring the version the registry gives it
    (:func:`~.log.format.metadata_version`: 5 once deletion vectors are turned on, 6 once
    the change data feed is, so older readers refuse the table; format.md, "Deletion
    vectors", "Change data feed"). Vectors and the Delta view go together: the view
    writes them as Delta deletion vectors (docs/delta-view.md)."""
    out: list[Action] = []
    for a in actions:
        if not isinstance(a, Metadata):
            out.append(a)
            continue
        vectors = get_bool(a.properties, "lakelog.deletion_vectors")
        a = _declare_mapping(a, read)
        declared = metadata_version(
            a.format_version,
            deletion_vectors=vectors,
            change_data_feed=get_bool(a.properties, "lakelog.change_data_feed"),
            column_mapping=get_bool(a.properties, "lakelog.column_mapping"),
            partition_specs=bool(a.partition_specs),
            constraints=declares_guards(a.arrow_schema()),
        )
        out.append(
            a
            if declared == a.format_version
            else msgspec.structs.replace(a, format_version=declared)
        )
    return out


def _declare_mapping(md: Metadata, read: Snapshot | None) -> Metadata:
    """``md`` with column ids on its schema when it turns ``lakelog.column_mapping`` on
    (format.md, "Column ids, renames and nested fields"); refused when it would turn
    mapping off on a table that has it."""
    on = get_bool(md.properties, "lakelog.column_mapping")
    was = read is not None and get_bool(read.metadata.properties, "lakelog.column_mapping")
    # (a restore of a version from before the ids brings back a schema without them,
    # with that version's files, which store every column under its name: allowed)
    if was and not on and mapping.is_mapped(md.arrow_schema()):
        raise InvalidArgumentError(
            "expected lakelog.column_mapping to stay true, found it set to false: a table "
            "with column ids keeps them (its files and statistics are keyed by physical "
            "names). Leave the property as it is."
        )
    if not on:
        return md
    schema = md.arrow_schema()
    mapped = mapping.enable(schema)
    if mapped.equals(schema, check_metadata=True):
        return md
    return msgspec.structs.replace(md, schema=encode_schema(mapped))


def _check_views(actions: Sequence[Action], read: Snapshot | None) -> None:
    """Before any put: refuse a metadata change that turns on (or keeps on) the Delta
    view with a schema it cannot express, so the table stays unchanged."""
    if any(
        isinstance(a, Metadata) and get_bool(a.properties, "lakelog.delta_view") for a in actions
    ):
        from .interop.delta.view import check_view_metadata

        check_view_metadata(list(actions), None if read is None else read.schema)


def _carry_marks(
    actions: list[Action], winners: Sequence[Commit], read: Metadata, rebase: Rebase | None
) -> list[Action]:
    """``actions`` with identity high-water marks that winners advanced carried into
    their ``metadata`` action, so no mark ever goes back. A transaction that gave out
    identity values itself must have moved them past the winners' marks in its rebase
    callback (which then says the marks it is based on in ``identity_base``); if it did
    not, its values may repeat a winner's: a conflict, never a duplicate."""
    latest = None
    for commit in winners:
        for a in commit.actions:
            if isinstance(a, Metadata):
                latest = a
    if latest is None or not any(isinstance(a, Metadata) for a in actions):
        return actions
    won = marks_of(latest.arrow_schema())
    base = {**marks_of(read.arrow_schema()), **dict(getattr(rebase, "identity_base", {}))}
    out: list[Action] = []
    for a in actions:
        if not isinstance(a, Metadata):
            out.append(a)
            continue
        schema = a.arrow_schema()
        mine = marks_of(schema)
        carried: dict[str, int] = {}
        for column, w in won.items():
            if column not in mine or w is None or w == base.get(column):
                continue
            if mine[column] == base.get(column):
                carried[column] = w
                continue
            raise CommitConflictError(
                f"expected identity column {column!r} to be given out from mark "
                f"{base.get(column)}, found it moved to {w} by a concurrent write; write "
                f"again (the values are given out anew).",
            )
        if carried:
            a = msgspec.structs.replace(a, schema=encode_schema(with_marks(schema, carried)))
        out.append(a)
    return out
