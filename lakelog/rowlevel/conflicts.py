"""The rebase of a row-level change: may it land after these winners, and how?

Implements ``docs/format.md``, "Conflict rules for row-level changes". The pure
rules (a metadata change; a winner removed a file this change removes) come from
:func:`lakelog.conflict_rules.check_conflicts` with kind ``rowlevel``. This module
adds the rule that reads data: rows a winner added (``data_change=true``) that
this change would have touched, had it run after the winner. Only the added
files whose partition values and statistics the change's condition cannot rule
out are read, and only the columns it needs.

A predicate change (delete, update, overwrite with ``where``) then rewrites those
files too, in the same commit, so it lands as if it had run after the winner: a
delete beside a live ingest of matching rows still lands, with none of them left.
A merge fails instead (its inserts were decided without those rows).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..conflict_rules import check_conflicts
from ..errors import CommitConflictError, DataFileMissingError, SchemaMismatchError
from ..log.actions import Action, AddFile, Commit, DataFile, Metadata, RemoveFile
from ..log.file_index import stats_columns
from ..log.files import files_from_adds
from .base import RowChange
from .change_files import ChangeWriter
from .execute import Context, FileOutcome, run_files
from .read import read_rows

if TYPE_CHECKING:
    from ..core.identity import IdentityWrite

__all__ = ["RowLevelRebase", "added_conflicts"]


def added_conflicts(ctx: Context, change: RowChange, adds: Sequence[AddFile]) -> list[AddFile]:
    """The added files holding a row ``change`` would touch (a file that cannot be
    read counts: the safe side)."""
    hits = []
    columns = change.conflict_columns or change.probe_columns
    for a in _may_match(ctx, change, adds):
        view = change.for_file(DataFile.from_add(a))
        try:
            found = any(
                view.conflicts(b)
                for b in read_rows(ctx.storage, a, ctx.schema, ctx.partition_by, columns=columns)
            )
        except (FileNotFoundError, DataFileMissingError, SchemaMismatchError, OSError):
            found = True
        if found:
            hits.append(a)
    return hits


class RowLevelRebase:
    """The ``rebase`` callback of a change's transaction (see the module docstring).

    ``extra`` holds the outcomes of the files it rewrote while rebasing, ``metrics``
    the header's metrics counting them (the transaction reads it for every put).
    """

    def __init__(
        self,
        ctx: Context,
        change: RowChange,
        metrics_of: Callable[[Sequence[FileOutcome]], Mapping[str, Any]],
    ) -> None:
        # each rewritten file's outcome holds its own new files: one may be dropped below
        self.ctx = dataclasses.replace(ctx, sink=None)
        self.change = change
        self.extra: list[FileOutcome] = []
        self._metrics_of = metrics_of
        self._feeds: list[ChangeWriter] = []
        """The change files of each rebase (with the change data feed on)."""
        self.read_metadata: Metadata | None = None
        """The metadata the change read: given, a winner that moved only identity
        high-water marks is no conflict (its marks are carried)."""
        self.identity: IdentityWrite | None = None
        """The identity values the change's inserts gave out: after the rows are
        rebased, a lost race moves them past the winners' marks (``core.identity``)."""

    @property
    def identity_base(self) -> Mapping[str, int | None]:
        """The marks the change's identity values are given out from (read by the
        transaction's check that no mark goes back)."""
        return {} if self.identity is None else self.identity.identity_base

    @property
    def metrics(self) -> Mapping[str, Any]:
        return self._metrics_of(self.extra)

    def written(self) -> list[str]:
        return [p for o in self.extra for p in o.written] + [
            p for feed in self._feeds for p in feed.written()
        ]

    def __call__(self, winners: Sequence[Commit], actions: list[Action]) -> list[Action]:
        out = self._rebase(winners, actions)
        return out if self.identity is None else self.identity(winners, out)

    def _rebase(self, winners: Sequence[Commit], actions: list[Action]) -> list[Action]:
        check_conflicts(
            kind="rowlevel", actions=actions, winners=winners, read_metadata=self.read_metadata
        )
        # files a later winner removed again: by a rewrite (compaction, clustering), whose
        # outputs are not read here, or by a change, whose outputs are (they are adds; a
        # new deletion vector re-adds the same path in the winner that removes it)
        removed_by: dict[str, list[tuple[int, bool]]] = {}
        for i, w in enumerate(winners):
            for a in w.actions:
                if isinstance(a, RemoveFile):
                    removed_by.setdefault(a.path, []).append((i, a.data_change))
        found: list[tuple[int, AddFile]] = []
        for i, w in enumerate(winners):
            added = [a for a in w.actions if isinstance(a, AddFile)]
            if self.change.rebase_rewrites:
                found += [(i, a) for a in _may_match(self.ctx, self.change, added)]
            else:
                found += [(i, a) for a in self.conflicting(added)]
        if not found:
            return actions
        if not self.change.rebase_rewrites:
            first = found[0][0]
            raise self._conflict(winners[first], [a.path for i, a in found if i == first])

        def later(i: int, path: str, data_change: bool) -> bool:
            return any(j > i and dc == data_change for j, dc in removed_by.get(path, ()))

        feed = self.ctx.feed.sibling() if self.ctx.feed is not None else None
        if feed is not None:
            self._feeds.append(feed)
        try:
            outcomes = self._run(found, feed, lambda i, path: later(i, path, True))
        except (DataFileMissingError, SchemaMismatchError) as e:
            raise self._conflict(winners[found[0][0]], [a.path for _, a in found]) from e

        hits = [(i, o) for (i, _), o in zip(found, outcomes, strict=True) if o.rewritten]
        gone = [(i, o) for i, o in hits if later(i, o.file.path, False)]
        if gone:
            self.ctx.storage.delete([p for o in outcomes for p in o.written])
            if feed is not None:
                feed.discard()
            raise self._conflict(winners[gone[0][0]], [o.file.path for _, o in gone], again=True)
        # their rows live on in a later winner's adds, checked there
        dropped = [o for i, o in hits if later(i, o.file.path, True)]
        self.ctx.storage.delete([p for o in dropped for p in o.written])
        kept = [o for i, o in hits if not later(i, o.file.path, True)]
        self.extra.extend(kept)
        now = int(time.time() * 1000)
        out = list(actions)
        for o in kept:
            out.append(o.file.to_remove(deletion_ms=now))
            out.extend(o.adds)
        if feed is not None:
            out.extend(feed.flush())
        return out

    def _run(
        self,
        found: Sequence[tuple[int, AddFile]],
        feed: ChangeWriter | None,
        replaced_later: Callable[[int, str], bool],
    ) -> list[FileOutcome]:
        """The rewrites of the ``found`` files, in their order. With the change data
        feed, ``feed`` records the changed rows of every file whose rows do not live on
        in a later winner's adds (``replaced_later``): the rewrites of the others are
        dropped, and so must their changes be."""
        files = [DataFile.from_add(a) for _, a in found]
        if feed is None:
            return run_files(self.ctx, self.change, files, write=True)
        keep = [not replaced_later(i, a.path) for i, a in found]
        recorded = run_files(
            dataclasses.replace(self.ctx, feed=feed),
            self.change,
            [f for f, k in zip(files, keep, strict=True) if k],
            write=True,
        )
        try:
            rest = run_files(
                dataclasses.replace(self.ctx, feed=None),
                self.change,
                [f for f, k in zip(files, keep, strict=True) if not k],
                write=True,
            )
        except BaseException:
            self.ctx.storage.delete([p for o in recorded for p in o.written])
            feed.discard()
            raise
        mine, others = iter(recorded), iter(rest)
        return [next(mine) if k else next(others) for k in keep]

    def conflicting(self, added: Sequence[AddFile]) -> list[AddFile]:
        """The files of one winner's ``added`` holding a row this change would touch
        (a merge: a row with a source key). A subclass may answer from elsewhere: the
        Spark merge asks a Spark job, its source being on the executors."""
        return added_conflicts(self.ctx, self.change, added)

    def _conflict(
        self, w: Commit, paths: Sequence[str], *, again: bool = False
    ) -> CommitConflictError:
        op = self.change.operation
        if op == "MERGE":
            what = (
                "rows with keys of the merge source (or, with "
                "when_not_matched_by_source='delete', any rows)"
            )
        else:
            what = "rows matching its predicate"
        v = w.header.version
        return CommitConflictError(
            f"expected no {what} in the files committed concurrently, found them in "
            f"{list(paths)[:5]}{' ...' if len(paths) > 5 else ''} added by version {v} "
            f"({w.header.operation}){' and changed again since' if again else ''}: this "
            f"{op} run after that commit would change them too. Run the {op} again: it "
            f"re-reads the table, those rows included. Nothing was committed.",
            winning_version=v,
            conflicting_files=tuple(paths),
        )


def _may_match(ctx: Context, change: RowChange, adds: Sequence[AddFile]) -> list[AddFile]:
    """The added files (with rows, ``data_change=true``) whose partition values and
    statistics do not rule ``change`` out."""
    adds = [a for a in adds if a.data_change and a.num_rows > 0]
    if not adds:
        return []
    keep = change.prune(stats_columns(files_from_adds(adds), ctx.schema, ctx.partition_by))
    return [a for a, k in zip(adds, keep.tolist(), strict=True) if k]
