"""The one error hierarchy of lakelog.

Every error says what was expected, what was found and what to do.
"""

from __future__ import annotations

__all__ = [
    "CommitConflictError",
    "CorruptLogError",
    "InvalidArgumentError",
    "LakelogError",
    "SchemaMismatchError",
    "StorageNotSupportedError",
    "TableExistsError",
    "TableNotFoundError",
    "UnsupportedFormatError",
    "VersionExpiredError",
    "VersionNotFoundError",
]


class LakelogError(Exception):
    """Base class of every error lakelog raises on purpose."""


class InvalidArgumentError(LakelogError, ValueError):
    """An option or argument is out of range or of the wrong kind."""


class TableNotFoundError(LakelogError, FileNotFoundError):
    """No lakelog table at the given location."""


class TableExistsError(LakelogError, FileExistsError):
    """A table already exists where a new one was to be created."""


class CommitConflictError(LakelogError):
    """A concurrent commit changed what this transaction depends on.

    ``winning_version`` is the commit that won; ``conflicting_files`` the paths
    (or partitions) in conflict.
    """

    def __init__(
        self,
        message: str,
        *,
        winning_version: int | None = None,
        conflicting_files: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.winning_version = winning_version
        self.conflicting_files = conflicting_files


class SchemaMismatchError(LakelogError):
    """Data does not match the table schema."""


class VersionNotFoundError(LakelogError):
    """The requested version or instant is not in the log."""


class VersionExpiredError(VersionNotFoundError):
    """The requested version was expired by ``expire_snapshots``.

    ``oldest_version`` is the oldest version still readable.
    """

    def __init__(self, message: str, *, oldest_version: int) -> None:
        super().__init__(message)
        self.oldest_version = oldest_version


class UnsupportedFormatError(LakelogError):
    """The log was written in a format version newer than this reader knows."""


class CorruptLogError(LakelogError):
    """A commit file cannot be decoded."""


class StorageNotSupportedError(LakelogError):
    """The filesystem cannot create a file only if absent, so commits are not safe."""
