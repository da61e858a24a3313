"""lakelog: a transactional table layer for Parquet files on any fsspec filesystem.

>>> import lakelog, pyarrow as pa, tempfile
>>> uri = tempfile.mkdtemp() + "/events"
>>> lakelog.write_table(uri, pa.table({"id": [1, 2, 3]})).version
0
>>> lakelog.open_table(uri).snapshot().to_arrow().num_rows
3
"""

from .__about__ import __version__
from .catalog import connect_catalog
from .errors import (
    AdoptedFilesMissingError,
    AppVersionCommittedError,
    CatalogError,
    CatalogUnavailableError,
    ChangeFeedError,
    CleanupRunningError,
    CommitConflictError,
    ConstraintViolationError,
    CorruptLogError,
    DataFileMissingError,
    DeletedRowsError,
    DeltaViewError,
    InvalidArgumentError,
    LakelogError,
    LeaseExpiredError,
    MissingDependencyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    SchemaMismatchError,
    StorageConsistencyError,
    StorageNotSupportedError,
    TableAlreadyExistsError,
    TableExistsError,
    TableNotFoundError,
    UnknownOptionError,
    UnsupportedFormatError,
    VersionExpiredError,
    VersionNotFoundError,
)
from .filters import FilterLike
from .hooks import AutoCompaction
from .interop.delta import (
    delta_view_status,
    disable_delta_view,
    enable_delta_view,
    sync_delta_view,
)
from .log.actions import DataFile, FileStats
from .maintenance.maintain import MaintainReport, maintain_catalog
from .maintenance.options import ClusteringOptions, CompactionOptions, ExecutionOptions
from .rowlevel import (
    ChangeResult,
    FileChange,
    MergeClause,
    MergeReport,
    when_matched_delete,
    when_matched_update,
    when_not_matched_by_source_delete,
    when_not_matched_by_source_update,
    when_not_matched_insert,
)
from .scan import Snapshot
from .table import Table
from .tables import convert, create_table, open_table, write_table
from .transaction import CommitResult

__all__ = [
    "AdoptedFilesMissingError",
    "AppVersionCommittedError",
    "AutoCompaction",
    "CatalogError",
    "CatalogUnavailableError",
    "CleanupRunningError",
    "DeletedRowsError",
    "ChangeFeedError",
    "ChangeResult",
    "ClusteringOptions",
    "CommitConflictError",
    "CommitResult",
    "CompactionOptions",
    "CorruptLogError",
    "DataFile",
    "DataFileMissingError",
    "DeltaViewError",
    "ExecutionOptions",
    "FileChange",
    "FileStats",
    "FilterLike",
    "InvalidArgumentError",
    "LakelogError",
    "MaintainReport",
    "LeaseExpiredError",
    "MergeClause",
    "MergeReport",
    "MissingDependencyError",
    "NoSuchNamespaceError",
    "NoSuchTableError",
    "SchemaMismatchError",
    "ConstraintViolationError",
    "Snapshot",
    "StorageConsistencyError",
    "StorageNotSupportedError",
    "Table",
    "TableAlreadyExistsError",
    "TableExistsError",
    "TableNotFoundError",
    "UnknownOptionError",
    "UnsupportedFormatError",
    "VersionExpiredError",
    "VersionNotFoundError",
    "__version__",
    "connect_catalog",
    "maintain_catalog",
    "convert",
    "create_table",
    "delta_view_status",
    "disable_delta_view",
    "enable_delta_view",
    "open_table",
    "sync_delta_view",
    "when_matched_delete",
    "when_matched_update",
    "when_not_matched_by_source_delete",
    "when_not_matched_by_source_update",
    "when_not_matched_insert",
    "write_table",
]
