"""What a row-level change did: :class:`ChangeResult` and :class:`MergeReport`.

Both are :class:`~lakelog.transaction.CommitResult` values, so code that reads
``result.version`` after an append reads it after a delete too. A change that
matched nothing (or a dry run) committed nothing: ``committed`` is False and
``version`` is the version it read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..transaction import CommitResult

__all__ = ["ChangeResult", "FileChange", "MergeReport"]


@dataclass(frozen=True)
class FileChange:
    """One data file a change rewrites (or, in a dry run, would rewrite).

    Attributes:
        path: the file's path, relative to the table root.
        num_rows: rows in the file before the change.
        deleted_rows: rows of the file the change deletes.
        updated_rows: rows of the file the change updates.
    """

    path: str
    num_rows: int
    deleted_rows: int = 0
    updated_rows: int = 0


@dataclass(frozen=True)
class ChangeResult(CommitResult):
    """Outcome of ``delete``, ``update`` or ``overwrite(data, where=...)``; the fields of
    :class:`~lakelog.CommitResult` plus:

    Attributes:
        committed: whether a commit landed (False for a dry run or when no row matched).
        dry_run: the change was only planned.
        read_version: the version the change read.
        deleted_rows: rows that left the table.
        updated_rows: rows that got new values.
        inserted_rows: new rows (``overwrite``, ``merge``).
        copied_rows: rows written again unchanged beside the changed ones.
        files_scanned: files read (those pruning kept).
        files_removed: files rewritten or dropped.
        files_marked: files kept with a deletion vector (``lakelog.deletion_vectors``).
        files_added: files written.
        bytes_removed: bytes of the files removed.
        bytes_added: bytes of the files written.
        duration_s: wall time of the change, in seconds.
        files: the files rewritten (or that would be, in a dry run), in table order.
    """

    committed: bool = False
    dry_run: bool = False
    read_version: int = -1
    deleted_rows: int = 0
    updated_rows: int = 0
    inserted_rows: int = 0
    copied_rows: int = 0
    files_scanned: int = 0
    files_removed: int = 0
    files_marked: int = 0
    files_added: int = 0
    bytes_removed: int = 0
    bytes_added: int = 0
    duration_s: float = 0.0
    files: tuple[FileChange, ...] = ()

    def to_dict(self, *, files: bool = False) -> dict[str, Any]:
        """A JSON-ready dict; the per-file list only with ``files=True``."""
        out = asdict(self)
        out.pop("actions", None)
        if not files:
            out.pop("files", None)
        return out

    def summary(self) -> str:
        """One line for people: what changed, or that nothing did."""
        counts = (
            (self.deleted_rows, "deleted"),
            (self.updated_rows, "updated"),
            (self.inserted_rows, "inserted"),
        )
        rows = ", ".join(f"{n} {what}" for n, what in counts if n) or "no rows"
        files = (
            f"{self.files_removed} of {self.files_scanned} scanned files rewritten, "
            + (f"{self.files_marked} marked with deleted rows, " if self.files_marked else "")
            + f"{self.files_added} written"
        )
        if self.dry_run:
            return (
                f"dry run: would change rows ({rows}); {files.replace('rewritten', 'to rewrite')}"
            )
        if not self.committed:
            return f"no rows matched ({self.files_scanned} files scanned); nothing committed"
        return f"{self.operation} at version {self.version}: {rows}; {files}"


@dataclass(frozen=True)
class MergeReport(ChangeResult):
    """Outcome of ``merge``: a :class:`ChangeResult` plus the source's figures
    (``deleted_rows`` counts target rows deleted by ``when_matched="delete"`` and by
    ``when_not_matched_by_source="delete"``).

    Attributes:
        source_rows: rows of the source given.
        source_duplicates: source rows dropped by ``duplicates="first"``/``"last"``.
    """

    source_rows: int = 0
    source_duplicates: int = 0
