"""lakelog: a transactional table layer for Parquet files on any fsspec filesystem.

>>> import lakelog, pyarrow as pa, tempfile
>>> uri = tempfile.mkdtemp() + "/events"
>>> lakelog.write_table(uri, pa.table({"id": [1, 2, 3]})).version
0
>>> lakelog.open_table(uri).snapshot().to_arrow().num_rows
3
"""

from .__about__ import __version__
from .errors import (
    CommitConflictError,
    CorruptLogError,
    DataFileMissingError,
    InvalidArgumentError,
    LakelogError,
    LeaseExpiredError,
    SchemaMismatchError,
    StorageNotSupportedError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedFormatError,
    VersionExpiredError,
    VersionNotFoundError,
)
from .log.actions import DataFile, FileStats
from .log.snapshot import Snapshot
from .table import Table, create_table, open_table, write_table
from .transaction import CommitResult

__all__ = [
    "CommitConflictError",
    "CommitResult",
    "CorruptLogError",
    "DataFile",
    "DataFileMissingError",
    "FileStats",
    "InvalidArgumentError",
    "LakelogError",
    "LeaseExpiredError",
    "SchemaMismatchError",
    "Snapshot",
    "StorageNotSupportedError",
    "Table",
    "TableExistsError",
    "TableNotFoundError",
    "UnsupportedFormatError",
    "VersionExpiredError",
    "VersionNotFoundError",
    "__version__",
    "create_table",
    "open_table",
    "write_table",
]
