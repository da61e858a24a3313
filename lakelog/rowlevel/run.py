"""Plan -> rewrite -> commit for one row-level change.

1. **Plan (pure).** The latest snapshot and the change's condition give the
   candidate files (:meth:`RowChange.candidates`, lakelog's pruning).
2. **Rewrite.** Under a writer lease: new rows first where the change has some
   (``overwrite``), then every candidate is probed and, if it holds a row to
   change, rewritten (:mod:`.execute`), then inserts (``merge``).
3. **Commit.** One ``rowlevel`` commit of ``data_change=true`` removes of the
   rewritten files and adds of their replacements and new rows, on the read
   version, with :class:`~.conflicts.RowLevelRebase` deciding every rebase. A
   change that changes nothing commits nothing.

A failure before the commit is known not to have landed deletes every file
written; the table is unchanged.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from .._failpoints import failpoint
from ..core import staged, write_options_from
from ..core.identity import IdentityWrite
from ..leases import Lease
from ..log.actions import Action, AddFile, ChangeFile
from .base import RowChange, Written
from .change_files import change_writer
from .conflicts import RowLevelRebase
from .execute import Context, FileOutcome, RowSink, run_files
from .merge import MergeChange
from .result import ChangeResult, FileChange, MergeReport

if TYPE_CHECKING:
    from ..core.handle import TableHandle
    from ..log.snapshot import Snapshot
    from ..transaction import CommitResult

__all__ = ["commit_outcomes", "run_change"]


def run_change(
    table: TableHandle,
    change: RowChange,
    snapshot: Snapshot,
    *,
    dry_run: bool = False,
    lease: Lease | None = None,
    extra_actions: Sequence[Action] = (),
) -> ChangeResult:
    """Run ``change`` on ``snapshot`` (the latest) of ``table``; see the module docstring.

    ``lease``: a writer lease the caller holds (its files, e.g. the new rows an engine
    wrote before, carry its id), used instead of a new one. ``extra_actions``: actions committed
    with the change (an ``app_txn``); given, the change commits even if no row changes.
    """
    start = time.monotonic()
    candidates = change.candidates(snapshot)
    ctx = Context(
        storage=table.storage,
        schema=snapshot.schema,
        partition_by=snapshot.partition_by,
        spec=snapshot.partition_spec,
        version=snapshot.version,
        options=write_options_from(snapshot.properties),
        lease_id=None,
        **Context.vector_settings(snapshot.properties),
    )
    if dry_run:
        outcomes = run_files(ctx, change, candidates, write=False)
        extra = change.planned_inserts() if isinstance(change, MergeChange) else 0
        return _result(
            change,
            snapshot,
            outcomes,
            Written(rows=extra),
            None,
            start,
            dry=True,
            vectors=ctx.vectors,
        )
    storage = table.storage
    held = (
        nullcontext(lease)
        if lease is not None
        else Lease.acquire(storage, operation=change.operation, properties=snapshot.properties)
    )
    with held as lease, staged(storage) as files:
        ctx = dataclasses.replace(ctx, lease_id=lease.lease_id)
        if ctx.vectors:  # updated rows of marked files, written together
            sink = RowSink(ctx)
            ctx = dataclasses.replace(ctx, sink=sink)
            files.track(sink.written)
        feed = change_writer(ctx, snapshot.properties)
        if feed is not None:  # the change data feed: its files go with the data files
            ctx = dataclasses.replace(ctx, feed=feed)
            files.track(feed.written)
        identity = None
        if change.numbers:  # the inserts' identity values, given out by this write
            identity = IdentityWrite(
                storage,
                snapshot.schema,
                partition_by=snapshot.partition_by,
                options=ctx.options,
                lease_id=lease.lease_id,
                files=files,
            )
            change.identity = identity
        with files.before_commit():
            before = change.before(storage, lease.lease_id, feed=feed)
            files.add(before.adds)
            outcomes = run_files(ctx, change, candidates, write=True)
            files.add_paths(p for o in outcomes for p in o.written)
            updated = ctx.sink.flush() if ctx.sink is not None else []
            after = change.after(storage, lease.lease_id, feed=feed)
            files.add(after.adds)
            new = Written((*before.adds, *updated, *after.adds), before.rows + after.rows)
            rewritten = [o for o in outcomes if o.rewritten]
            if not rewritten and not new.adds and not extra_actions:
                return _result(change, snapshot, outcomes, new, None, start, dry=False)
            cdc = feed.flush() if feed is not None else []
            metrics = _metrics_of(change, snapshot, outcomes, new, start)
            rebase = RowLevelRebase(ctx, change, metrics)
            rebase.read_metadata = snapshot.metadata
            files.track(rebase.written)  # rewrites of files a rebase found changed
            marks: list[Action] = []
            if identity is not None and (numbered := identity.metadata(snapshot.metadata)):
                identity.only = {a.path for a in after.adds}
                identity.recorded = feed is not None
                rebase.identity = identity
                marks.append(numbered)
            failpoint("change:before-commit")
        committed = _commit(
            table,
            change,
            snapshot,
            [*marks, *_actions(rewritten, new, extra_actions, cdc)],
            metrics,
            rebase,
            lease,
        )
        return _result(
            change, snapshot, [*outcomes, *rebase.extra], new, committed, start, dry=False
        )


RebaseFactory = Callable[
    [Context, RowChange, Callable[[Sequence[FileOutcome]], Mapping[str, Any]]], RowLevelRebase
]


def commit_outcomes(
    table: TableHandle,
    change: RowChange,
    snapshot: Snapshot,
    ctx: Context,
    outcomes: list[FileOutcome],
    new: Written,
    *,
    lease: Lease,
    start: float,
    rebase: RebaseFactory = RowLevelRebase,
    changes: Sequence[ChangeFile] = (),
    marks: Mapping[str, int] | None = None,
    numbered: Sequence[str] = (),
) -> ChangeResult:
    """Step 3 of :func:`run_change` for outcomes computed elsewhere (the Spark tasks of
    :mod:`lakelog.spark.rowlevel`): the same actions, the same ``rowlevel`` commit, and
    ``rebase`` (a :class:`RowLevelRebase`, or a subclass that checks winners its own
    way) deciding every rebase. ``ctx`` is what the rebase reads and writes with (with
    the change data feed on, its ``feed`` gives the settings of the change files a rebase
    writes); ``changes``: the change files the tasks wrote, committed with the change.
    ``marks``: the last identity value the tasks gave out per column, in the files
    ``numbered`` (the inserts), recorded by the commit and moved past a winner's.

    When the commit certainly did not land (a lakelog error: a conflict, an expired
    lease), every file of ``outcomes``, ``new``, ``changes`` and the rebase is deleted before the
    error propagates; after any other error (which may follow a landed put) they stay
    for vacuum.
    """
    rewritten = [o for o in outcomes if o.rewritten]
    if not rewritten and not new.adds:
        if changes:  # nothing changed after all: a change file of no change
            table.storage.delete([c.path for c in changes])
        return _result(change, snapshot, outcomes, new, None, start, dry=False)
    metrics = _metrics_of(change, snapshot, outcomes, new, start)
    ctx = dataclasses.replace(ctx, lease_id=lease.lease_id)
    ctx = dataclasses.replace(ctx, feed=change_writer(ctx, snapshot.properties))
    checker = rebase(ctx, change, metrics)
    checker.read_metadata = snapshot.metadata
    with staged(table.storage) as files:
        files.add_paths(p for o in outcomes for p in o.written)
        files.add(new.adds)
        files.add_paths(c.path for c in changes)
        files.track(checker.written)
        given: list[Action] = []
        if marks:
            identity = IdentityWrite(
                table.storage,
                snapshot.schema,
                partition_by=snapshot.partition_by,
                options=ctx.options,
                lease_id=lease.lease_id,
                files=files,
            )
            identity.allocator.marks.update(marks)
            identity.only = set(numbered)
            identity.recorded = bool(changes)
            checker.identity = identity
            given += [m for m in [identity.metadata(snapshot.metadata)] if m is not None]
        committed = _commit(
            table,
            change,
            snapshot,
            [*given, *_actions(rewritten, new, (), changes)],
            metrics,
            checker,
            lease,
        )
    return _result(change, snapshot, [*outcomes, *checker.extra], new, committed, start, dry=False)


def _actions(
    rewritten: Sequence[FileOutcome],
    new: Written,
    extra: Sequence[Action],
    changes: Sequence[ChangeFile] = (),
) -> list[Action]:
    """A change's actions: each rewritten file removed, what replaces it, the new files
    (inserts, updated rows), ``extra`` (an app transaction) and the change files."""
    now = int(time.time() * 1000)
    actions: list[Action] = [o.file.to_remove(deletion_ms=now) for o in rewritten]
    actions += [a for o in rewritten for a in o.adds]
    return [*actions, *new.adds, *extra, *changes]


def _metrics_of(
    change: RowChange,
    snapshot: Snapshot,
    outcomes: Sequence[FileOutcome],
    new: Written,
    start: float,
) -> Callable[[Sequence[FileOutcome]], dict[str, Any]]:
    """The header's metrics given the files a rebase rewrote besides ``outcomes``."""

    def metrics(extra: Sequence[FileOutcome]) -> dict[str, Any]:
        done = _result(change, snapshot, [*outcomes, *extra], new, None, start, dry=False)
        return _metrics(change, done)

    return metrics


def _commit(
    table: TableHandle,
    change: RowChange,
    snapshot: Snapshot,
    actions: list[Action],
    metrics: Callable[[Sequence[FileOutcome]], dict[str, Any]],
    rebase: RowLevelRebase,
    lease: Lease,
) -> CommitResult:
    """The one ``rowlevel`` commit of a change, on ``snapshot``, rebased by ``rebase``."""
    return table.commit(
        actions,
        operation=change.operation,
        kind="rowlevel",
        read_snapshot=snapshot,
        parameters=change.parameters(),
        metrics=metrics([]),
        rebase=rebase,
        lease=lease,
    )


def _metrics(change: RowChange, r: ChangeResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "num_files_scanned": r.files_scanned,
        "num_removed_files": r.files_removed,
        "num_removed_bytes": r.bytes_removed,
        "num_added_files": r.files_added,
        "num_added_bytes": r.bytes_added,
        "num_copied_rows": r.copied_rows,
    }
    if r.files_marked:
        out["num_deletion_vectors"] = r.files_marked
    if change.operation in ("DELETE", "OVERWRITE", "MERGE"):
        out["num_deleted_rows"] = r.deleted_rows
    if change.operation in ("UPDATE", "MERGE"):
        out["num_updated_rows"] = r.updated_rows
    if change.operation == "OVERWRITE":
        out["num_inserted_rows"] = r.inserted_rows
    out.update(change.metrics())
    out["execution_ms"] = int(r.duration_s * 1000)
    return out


def _result(
    change: RowChange,
    snapshot: Snapshot,
    outcomes: list[FileOutcome],
    new: Written,
    committed: CommitResult | None,
    start: float,
    *,
    dry: bool,
    vectors: bool = False,
) -> ChangeResult:
    rewritten = [o for o in outcomes if o.rewritten]

    def marked(o: FileOutcome) -> bool:
        # with deletion vectors a file keeps its place while any of its rows stays
        return o.marked or (dry and vectors and o.counts.kept > 0)

    copies = [o for o in rewritten if not marked(o)]  # the rest get a deletion vector
    adds: list[AddFile] = [a for o in rewritten for a in o.adds if a.path != o.file.path] + list(
        new.adds
    )
    fields: dict[str, Any] = {
        "version": snapshot.version if committed is None else committed.version,
        "attempts": 0 if committed is None else committed.attempts,
        "txn_id": "" if committed is None else committed.txn_id,
        "operation": change.operation,
        "actions": () if committed is None else committed.actions,
        "committed": committed is not None,
        "dry_run": dry,
        "read_version": snapshot.version,
        "deleted_rows": sum(o.counts.deleted for o in rewritten),
        "updated_rows": sum(o.counts.updated for o in rewritten),
        "inserted_rows": new.rows,
        "copied_rows": sum(o.counts.kept for o in copies),
        "files_scanned": len(outcomes),
        "files_removed": len(copies),
        "files_marked": len(rewritten) - len(copies),
        "files_added": len(adds),
        "bytes_removed": sum(o.file.size_bytes for o in copies),
        "bytes_added": sum(a.size_bytes for a in adds),
        "duration_s": time.monotonic() - start,
        "files": tuple(
            FileChange(
                path=o.file.path,
                num_rows=o.file.num_rows,
                deleted_rows=o.counts.deleted,
                updated_rows=o.counts.updated,
            )
            for o in rewritten
        ),
    }
    if isinstance(change, MergeChange):
        return MergeReport(
            **fields, source_rows=change.source.given, source_duplicates=change.source.dropped
        )
    return ChangeResult(**fields)
