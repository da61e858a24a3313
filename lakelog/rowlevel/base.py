"""The interface every row-level change implements, and its row counts.

A change is a value that knows, for a batch of full table rows, which rows it
changes (:meth:`RowChange.probe`), what the batch becomes
(:meth:`RowChange.apply`: unchanged rows row for row in their order, updated
rows in place, deleted rows gone), and which files can hold a row it changes
(:meth:`RowChange.candidates` over a snapshot, :meth:`RowChange.prune` over
typed file statistics). The executor and the conflict check only talk to this
interface, so delete, update, merge and overwrite share one pipeline.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..filters import FileStatsColumns
from ..log.actions import AddFile, DataFile
from ..log.snapshot import Snapshot
from ..storage import Storage

if TYPE_CHECKING:
    from ..core.identity import IdentityWrite
    from .change_files import ChangeWriter

__all__ = ["Counts", "RowChange", "Written"]


@dataclass
class Counts:
    """Rows of the target a change deletes, updates and keeps as they are."""

    deleted: int = 0
    updated: int = 0
    kept: int = 0

    @property
    def changed(self) -> int:
        return self.deleted + self.updated

    def add(self, other: Counts) -> None:
        self.deleted += other.deleted
        self.updated += other.updated
        self.kept += other.kept


@dataclass(frozen=True)
class Written:
    """New data files a change adds beside its rewrites (inserted rows)."""

    adds: tuple[AddFile, ...] = ()
    rows: int = 0


class RowChange(ABC):
    """What one row-level change does to the rows of the table."""

    operation: str
    """The commit's operation name (``DELETE``, ``UPDATE``, ``MERGE``, ``OVERWRITE``)."""
    probe_columns: tuple[str, ...] | None
    """Columns :meth:`probe` and :meth:`conflicts` read (None: every column)."""
    conflict_columns: tuple[str, ...] | None = None
    """Columns :meth:`conflicts` reads (None: those of :attr:`probe_columns`)."""
    rebase_rewrites: bool = False
    """Whether rows a concurrent commit added that this change would touch are
    rewritten while rebasing (True) or a conflict (False); see :mod:`.conflicts`."""
    numbers: tuple[str, ...] = ()
    """Identity columns the new rows of :meth:`after` get values of from the write
    (``run_change`` then sets :attr:`identity` before calling it)."""
    identity: IdentityWrite | None = None
    """Gives out the identity values of :attr:`numbers` (set by ``run_change``)."""

    def for_file(self, file: DataFile) -> RowChange:
        """This change specialized to the rows of one file (default: itself)."""
        return self

    @abstractmethod
    def parameters(self) -> dict[str, Any]:
        """What was asked, for the commit header (JSON values)."""

    @abstractmethod
    def candidates(self, snapshot: Snapshot) -> Sequence[DataFile]:
        """The files of ``snapshot`` that may hold a row this change touches (its read set)."""

    @abstractmethod
    def prune(self, files: FileStatsColumns) -> np.ndarray:
        """Per file: whether it may hold a row this change would touch (conservative)."""

    @abstractmethod
    def probe(self, batch: pa.RecordBatch) -> Counts:
        """The rows of ``batch`` (at least :attr:`probe_columns`) this change would
        delete or update; nothing is written."""

    @abstractmethod
    def apply(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, Counts]:
        """``batch`` (every column) after the change, and what happened to its rows."""

    @abstractmethod
    def conflicts(self, batch: pa.RecordBatch) -> bool:
        """Whether rows like these, added by a concurrent commit, would have been
        touched had this change run after it (see ``docs/format.md``)."""

    split_columns: tuple[str, ...] | None = None
    """Columns :meth:`split` reads (None: every column)."""

    @abstractmethod
    def split(self, batch: pa.RecordBatch) -> tuple[np.ndarray, pa.RecordBatch | None, Counts]:
        """The change as deletion vectors see it (format.md, "Deletion vectors"): per row
        of ``batch`` (at least :attr:`split_columns`), whether it leaves its place
        (deleted or updated), the updated rows with their new values (every column, or
        None when there are none), and what happened to the rows."""

    def split_changes(
        self, batch: pa.RecordBatch
    ) -> tuple[np.ndarray, np.ndarray, pa.RecordBatch | None, Counts]:
        """:meth:`split` for the change data feed: also, per row of ``batch``, whether
        it leaves its place because it is updated (its pre-image; the new values are
        the rows :meth:`split` gives, in order) rather than deleted. This default serves
        a change that only deletes or only updates; one that does both overrides it."""
        leaving, new, counts = self.split(batch)
        if counts.updated and counts.deleted:
            raise TypeError(
                f"expected {type(self).__name__} to say which rows it updates and which it "
                f"deletes (split_changes), found a batch where it does both"
            )
        return leaving, leaving if counts.updated else np.zeros_like(leaving), new, counts

    def before(
        self, storage: Storage, lease_id: str, *, feed: ChangeWriter | None = None
    ) -> Written:
        """New rows written before the rewrites (``overwrite``: the new data), also
        recorded in ``feed`` as inserts when the change data feed is on."""
        return Written()

    def after(
        self, storage: Storage, lease_id: str, *, feed: ChangeWriter | None = None
    ) -> Written:
        """New rows written after the rewrites (``merge``: the inserts), also recorded
        in ``feed`` as inserts when the change data feed is on."""
        return Written()

    def metrics(self) -> dict[str, Any]:
        """Operation-specific figures for the commit header."""
        return {}


def as_mask(values: Sequence[bool] | pa.Array | np.ndarray) -> np.ndarray:
    """A numpy boolean mask (nulls: True, i.e. keep the file)."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return np.asarray(values.fill_null(True).to_numpy(zero_copy_only=False), dtype=bool)
    return np.asarray(values, dtype=bool)
