"""The one error hierarchy of lakelog.

Every error says what was expected, what was found and what to do.
"""

from __future__ import annotations

__all__ = [
    "AdoptedFilesMissingError",
    "AppVersionCommittedError",
    "CatalogError",
    "CatalogUnavailableError",
    "CatalogVersionError",
    "ChangeFeedError",
    "CleanupRunningError",
    "DeletedRowsError",
    "CommitConflictError",
    "CorruptLogError",
    "DataFileMissingError",
    "DeltaViewError",
    "InvalidArgumentError",
    "InvalidNameError",
    "LogGapError",
    "LakelogError",
    "LeaseExpiredError",
    "MaintenanceFailedError",
    "MissingDependencyError",
    "ManifestLeafError",
    "NamespaceExistsError",
    "NamespaceNotEmptyError",
    "NoSuchNamespaceError",
    "NoSuchTableError",
    "SchemaMismatchError",
    "ConstraintViolationError",
    "SparkEnvironmentError",
    "SqlError",
    "SqlSyntaxError",
    "StorageConsistencyError",
    "StorageNotSupportedError",
    "TableAlreadyExistsError",
    "TableExistsError",
    "TableNotFoundError",
    "TableLocationEmptyError",
    "UnknownOptionError",
    "UnsupportedFormatError",
    "UnsupportedStatementError",
    "VersionExpiredError",
    "VersionNotFoundError",
]


class LakelogError(Exception):
    """Base class of every error lakelog raises on purpose."""


class InvalidArgumentError(LakelogError, ValueError):
    """An option or argument is out of range or of the wrong kind."""


class UnknownOptionError(InvalidArgumentError):
    """An option name that the entry point does not know (a typo, or an option of another
    entry point): refused before anything is read or written, never ignored.

    ``option`` is the name as given, ``entry_point`` what it was given to (such as
    ``df.write.format('lakelog')``), ``valid`` the names that entry point takes and
    ``closest`` the valid name nearest to ``option`` (None when none is near).
    """

    def __init__(
        self,
        message: str,
        *,
        option: str,
        entry_point: str,
        valid: tuple[str, ...],
        closest: str | None,
    ) -> None:
        super().__init__(message)
        self.option = option
        self.entry_point = entry_point
        self.valid = valid
        self.closest = closest


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


class AppVersionCommittedError(CommitConflictError):
    """Another commit recorded ``app_version`` (or a later one) of ``app_id`` first:
    this transaction's batch is already in the table, so it did not commit.

    ``winning_version`` is the commit that recorded ``recorded_version``. Writers that
    take ``app_id``/``app_version`` catch it and report that commit as skipped."""

    def __init__(
        self,
        message: str,
        *,
        app_id: str,
        app_version: int,
        recorded_version: int,
        winning_version: int,
    ) -> None:
        super().__init__(message, winning_version=winning_version)
        self.app_id = app_id
        self.app_version = app_version
        self.recorded_version = recorded_version


class SchemaMismatchError(LakelogError):
    """Data does not match the table schema."""


class ConstraintViolationError(SchemaMismatchError, InvalidArgumentError):
    """Rows break one of the table's rules (docs/constraints.md): a NOT NULL field, a
    CHECK constraint, a generated column's expression or an identity column's. Nothing
    of the write that met them was committed.

    Attributes:
        constraint: the rule's name (a CHECK constraint's own name; ``"NOT NULL"``,
            ``"GENERATED"`` or ``"IDENTITY"`` for the others).
        column: the column (a nested field as ``a.b``) it is about.
        row: one offending row, as text.
    """

    def __init__(self, message: str, *, constraint: str, column: str, row: str) -> None:
        super().__init__(message)
        self.constraint = constraint
        self.column = column
        self.row = row


class VersionNotFoundError(LakelogError):
    """The requested version or instant is not in the log."""


class VersionExpiredError(VersionNotFoundError):
    """The requested version was expired by ``expire_snapshots``.

    ``oldest_version`` is the oldest version still readable.
    """

    def __init__(self, message: str, *, oldest_version: int) -> None:
        super().__init__(message)
        self.oldest_version = oldest_version


class ChangeFeedError(LakelogError):
    """The change feed of a range cannot be given: a commit in it changed rows inside
    files (a delete, update, merge or overwrite with a ``where``) without recording
    them in change files (``docs/format.md``, "Change data feed"). ``version`` is that
    commit (None: not one commit); the feed is complete from the commit after the table
    property ``lakelog.change_data_feed`` was set to true."""

    def __init__(self, message: str, *, version: int | None = None) -> None:
        super().__init__(message)
        self.version = version


class UnsupportedFormatError(LakelogError):
    """The log was written in a format version newer than this reader knows."""


class CorruptLogError(LakelogError):
    """A commit file cannot be decoded, or the log is not a gapless run of versions."""


class LogGapError(CorruptLogError):
    """Commit ``missing`` is gone while the later commit ``found`` exists.

    Inside the readable range this is damage (a commit deleted outside lakelog):
    readers refuse the table and writers never commit into the hole. Below the
    oldest readable version it is an expiry at work, which callers resolve.
    """

    def __init__(self, message: str, *, missing: int, found: int) -> None:
        super().__init__(message)
        self.missing = missing
        self.found = found


class ManifestLeafError(CorruptLogError):
    """A leaf of a version-2 manifest is missing or damaged. Readers then resolve the
    version without that manifest (from an older one or by replay)."""

    def __init__(self, message: str, *, leaf: str) -> None:
        super().__init__(message)
        self.leaf = leaf


class StorageNotSupportedError(LakelogError):
    """The filesystem cannot be used: its driver is missing, or it cannot create a
    file only if absent (so commits would not be safe)."""


class StorageConsistencyError(StorageNotSupportedError):
    """The store accepted a second put-if-absent of the same key (it ignores the
    condition, as some S3-compatible stores do), so two writers could both create
    the same version and one commit would silently replace the other; nothing was
    committed. The table property ``lakelog.storage.check_put_if_absent`` skips the
    check."""


class DataFileMissingError(LakelogError, FileNotFoundError):
    """A data file the read version references is gone (deleted outside lakelog).

    ``path`` is the file (relative to the table root), ``version`` the version read.
    """

    def __init__(self, message: str, *, path: str, version: int) -> None:
        super().__init__(message)
        self.path = path
        self.version = version


class MaintenanceFailedError(LakelogError):
    """A maintenance run (compaction, clustering) failed in every group it ran: nothing
    was committed.

    ``report`` is the run's :class:`~lakelog.maintenance.report.MaintenanceReport`;
    ``failed_groups`` maps each failed group's id to its error.
    """

    def __init__(self, message: str, *, report: object, failed_groups: dict[str, str]) -> None:
        super().__init__(message)
        self.report = report
        self.failed_groups = failed_groups


class SparkEnvironmentError(LakelogError):
    """Spark's executors cannot run lakelog's tasks: their Python cannot import lakelog,
    or imports another version of it than the driver's."""


class LeaseExpiredError(LakelogError):
    """A writer's lease expired before its commit and vacuum deleted some of its data
    files; nothing was committed.

    ``missing_files`` are the deleted files (root-relative), ``expired_s`` how long the
    lease was expired.
    """

    def __init__(self, message: str, *, missing_files: tuple[str, ...], expired_s: float) -> None:
        super().__init__(message)
        self.missing_files = missing_files
        self.expired_s = expired_s


class AdoptedFilesMissingError(LakelogError, FileNotFoundError):
    """Files ``add_files`` was adopting disappeared before its commit (a vacuum that
    started before its writer lease deleted them as orphans); nothing was committed.

    ``missing_files`` are the files (root-relative).
    """

    def __init__(self, message: str, *, missing_files: tuple[str, ...]) -> None:
        super().__init__(message)
        self.missing_files = missing_files


class CleanupRunningError(LakelogError):
    """Another expiry or vacuum is deleting from the table (its cleanup lease is live),
    or this one's lease lapsed while it ran, so another may have started; one cleanup
    runs at a time. Nothing was deleted after the conflict was found: run it again
    once the other finished.

    ``operation`` and ``owner`` (``host:pid``) name the other cleanup when known.
    """

    def __init__(self, message: str, *, operation: str | None, owner: str | None) -> None:
        super().__init__(message)
        self.operation = operation
        self.owner = owner


class DeltaViewError(LakelogError):
    """The Delta-compatible view (``lakelog.delta_view``) cannot be written: the table
    has a type Delta cannot express, or ``_delta_log/`` holds commits lakelog did not
    write (see ``docs/delta-view.md``). The lakelog table itself is unaffected."""


class DeletedRowsError(LakelogError):
    """A plain pyarrow Dataset was asked for files whose deletion vectors mark rows as
    deleted (``docs/format.md``, "Deletion vectors"): it would return those rows. Read
    through ``Snapshot.to_arrow``/``to_batches``/``scanner`` or the engine readers."""


class MissingDependencyError(LakelogError, ImportError):
    """An optional package a call needs (DuckDB, polars, pandas) is not installed;
    the message names the ``pip install`` that fixes it."""


class CatalogError(LakelogError):
    """A catalog (``lakelog.connect_catalog``) refused an operation on a name; the tables
    themselves are unaffected."""


class InvalidNameError(CatalogError, InvalidArgumentError):
    """A namespace or table name is not a safe identifier (letters, digits, ``_`` and
    ``-``; at most 128 characters; never a path): names become folders under the
    warehouse and must never leave it."""


class NoSuchNamespaceError(CatalogError):
    """The catalog has no namespace of that name. ``namespace`` is the name asked for,
    ``close`` the existing names that resemble it."""

    def __init__(self, message: str, *, namespace: str, close: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.namespace = namespace
        self.close = close


class NoSuchTableError(CatalogError):
    """The catalog has no table of that name. ``name`` is the ``namespace.table`` asked
    for, ``close`` the registered names that resemble it."""

    def __init__(self, message: str, *, name: str, close: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.name = name
        self.close = close


class TableAlreadyExistsError(CatalogError, TableExistsError):
    """The name (or the location) is already registered in the catalog: of two creates of
    one name, exactly one wins and the other gets this, with nothing written."""


class NamespaceExistsError(CatalogError):
    """The namespace already exists."""


class NamespaceNotEmptyError(CatalogError):
    """A namespace still holding tables was to be dropped without ``cascade=True``."""


class TableLocationEmptyError(CatalogError, TableNotFoundError):
    """A catalog name points at a location that holds no lakelog table (deleted outside
    the catalog), or ``register_table`` was given such a location."""


class CatalogUnavailableError(CatalogError):
    """The catalog database cannot be reached or opened; the message names its URL (with
    any password hidden) and what to check."""


class CatalogVersionError(CatalogError, UnsupportedFormatError):
    """The catalog database was set up by a newer lakelog (its schema version is higher
    than this one knows): upgrade lakelog rather than write to it."""


class SqlError(LakelogError):
    """A SQL statement (``lakelog.spark.sql``, ``lakelog sql``) that could not run: the
    message names the clause or the name and says what to write instead."""


class SqlSyntaxError(SqlError, InvalidArgumentError):
    """The statement does not parse as Spark SQL; the message gives the line, the column
    and the text around it."""


class UnsupportedStatementError(SqlError):
    """The statement, or one of its clauses, parses but lakelog cannot run it yet; the
    message names the clause (``docs/sql.md``, "From Delta SQL")."""
