"""lakelog: a transactional table layer for Parquet files on any fsspec filesystem.

>>> import lakelog, pyarrow as pa, tempfile
>>> uri = tempfile.mkdtemp() + "/events"
>>> lakelog.write_table(uri, pa.table({"id": [1, 2, 3]})).version
0
>>> lakelog.open_table(uri).snapshot().to_arrow().num_rows
3
"""

from .__about__ import __version__
from .changes import ChangeResult, FileChange, MergeReport
from .errors import (
    AdoptedFilesMissingError,
    AppVersionCommittedError,
    ChangeFeedError,
    CleanupRunningError,
    CommitConflictError,
    CorruptLogError,
    DataFileMissingError,
    DeletedRowsError,
    DeltaViewError,
    InvalidArgumentError,
    LakelogError,
    LeaseExpiredError,
    MissingDependencyError,
    SchemaMismatchError,
    StorageConsistencyError,
    StorageNotSupportedError,
    TableExistsError,
    TableNotFoundError,
    UnknownOptionError,
    UnsupportedFormatError,
    VersionExpiredError,
    VersionNotFoundError,
)
from .filters import FilterLike
from .interop.convert import convert
from .interop.delta import (
    delta_view_status,
    disable_delta_view,
    enable_delta_view,
    sync_delta_view,
)
from .log.actions import DataFile, FileStats
from .maintenance.options import ClusteringOptions, CompactionOptions, ExecutionOptions
from .scan import Snapshot
from .table import Table, create_table, open_table, write_table
from .transaction import CommitResult

__all__ = [
    "AdoptedFilesMissingError",
    "AppVersionCommittedError",
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
    "LeaseExpiredError",
    "MergeReport",
    "MissingDependencyError",
    "SchemaMismatchError",
    "Snapshot",
    "StorageConsistencyError",
    "StorageNotSupportedError",
    "Table",
    "TableExistsError",
    "TableNotFoundError",
    "UnknownOptionError",
    "UnsupportedFormatError",
    "VersionExpiredError",
    "VersionNotFoundError",
    "__version__",
    "convert",
    "create_table",
    "delta_view_status",
    "disable_delta_view",
    "enable_delta_view",
    "open_table",
    "sync_delta_view",
    "write_table",
]
