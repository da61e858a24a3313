"""Reading a snapshot in Spark through its explicit, pruned file list.

The snapshot comes from the log; its files are pruned by partition values
and min/max stats; the remaining files go to Spark's own Parquet reader
(vectorized, with predicate pushdown), never a directory listing. Spark gets
them as a file-sink log written to a local temporary folder (its
``MetadataLogFileIndex``), with their sizes and times from the log, so it
makes no status call per file; where that cannot be used (Spark Connect, a
table root named like a partition folder) it gets their URLs and checks each.
Files laid out as ``<root>/<col>=<value>/...`` (everything lakelog and
:func:`lakelog.spark.write` produce) are read in ONE scan in which Spark
parses partition values from the folder names with the logged types. A file
whose folders do not spell its logged partition values the way Spark parses
them (for example a non-ASCII string, which lakelog percent-encodes as UTF-8
bytes and Spark decodes per byte) is read in a separate scan per partition
with the values added as literals, and unioned.

Files with a deletion vector (format version 5) are read by scans of their own
whose deleted rows are dropped by their ``_metadata.row_index`` in one broadcast
hash anti join, without a shuffle (:mod:`lakelog.spark.deleted`); the other
files' scans are unchanged.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ..core import commit_history
from ..errors import InvalidArgumentError, LakelogError
from ..io.writer import SINGLE_PAGE_TAG
from ..log.actions import DataFile
from ..log.snapshot import Snapshot, load_snapshot
from ..partitioning import NULL_PARTITION, hidden_name
from ..storage import Storage
from .columns import logical_columns, spark_physical_schema
from .datasource import register
from .deleted import check_row_index, drop_deleted, scan_layers
from .feed import open_range
from .filters import check_filter, translate_filter
from .options import read_options, resolve_snapshot
from .runner import default_parallelism
from .schema import check_spark_readable, to_spark_schema, to_spark_type

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "ReadPlan",
    "SparkFile",
    "history",
    "plan_read",
    "read",
    "read_changes",
    "session_conf",
    "spark_url",
]

_LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
_LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
_SEQUENTIAL_FILES = 32
"""Spark's own default listing threshold (see :func:`listing_conf`)."""


def listing_conf(spark: SparkSession, n_files: int, base_url: str) -> dict[str, str]:
    """Settings for Spark's file index over an explicit list of ``n_files`` URLs (the
    fallback of :meth:`ReadPlan.to_dataframe`, and clustering's group reads).

    Spark asks the filesystem for the status of every path it is given, on the driver
    one by one, or in a Spark job when there are more than the listing threshold. On
    local disk a status call costs microseconds and the job's overhead dominates, so
    the driver does it; on every other filesystem (an object store: a request of
    10-50 ms per file; HDFS: a name node call) above :data:`_SEQUENTIAL_FILES` files
    one Spark job does it in the executors, in one wave of tasks (4 per core of the
    application rather than Spark's default of up to 10,000 tiny tasks), as wide as
    the cluster (``benchmarks/bench_spark_files.py``).
    """
    sequential = {_LISTING_THRESHOLD: str(2**31 - 1)}
    if n_files <= _SEQUENTIAL_FILES or base_url.startswith("file:"):
        return sequential
    cores = default_parallelism(spark)
    tasks = max(1, min(n_files // _SEQUENTIAL_FILES, 4 * cores, 10_000))
    return {_LISTING_THRESHOLD: str(_SEQUENTIAL_FILES), _LISTING_PARALLELISM: str(tasks)}


def spark_url(storage: Storage, rel: str = "") -> str:
    """URL of a root-relative path as Spark's Hadoop filesystems spell it.

    ``s3://`` becomes ``s3a://`` (Spark needs its own S3A configuration).
    """
    url = storage.url(rel)
    scheme = url.split("://", 1)[0]
    if scheme == "memory":
        raise InvalidArgumentError(
            f"expected a table on a filesystem Spark can read (local disk, s3a, hdfs, ...), "
            f"found {storage.uri}; Spark cannot see fsspec's in-memory filesystem."
        )
    if scheme == "s3":
        return "s3a://" + url.split("://", 1)[1]
    return url


# -- temporary session settings ------------------------------------------------------

_conf_lock = threading.Condition()
_conf_active: dict[tuple[int, str], list[Any]] = {}  # (session, key) -> [value, count, old]


@contextlib.contextmanager
def session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Set SQL settings for the duration of a block, restoring them after.

    Concurrent blocks in this process that need the same value share it; a
    block that needs a different value for a key waits until the other ends.
    """
    held: list[tuple[int, str]] = []
    try:
        for key, value in settings.items():
            slot = (id(spark), key)
            with _conf_lock:
                while slot in _conf_active and _conf_active[slot][0] != value:
                    _conf_lock.wait()
                if slot in _conf_active:
                    _conf_active[slot][1] += 1
                else:
                    old = spark.conf.get(key, None)
                    spark.conf.set(key, value)
                    _conf_active[slot] = [value, 1, old]
                held.append(slot)
        yield
    finally:
        for slot in held:
            with _conf_lock:
                entry = _conf_active[slot]
                entry[1] -= 1
                if entry[1] == 0:
                    del _conf_active[slot]
                    if entry[2] is None:
                        spark.conf.unset(slot[1])
                    else:
                        spark.conf.set(slot[1], entry[2])
                    _conf_lock.notify_all()


# -- how Spark parses a partition folder --------------------------------------------


def spark_unescape(text: str) -> str:
    """Spark's ``unescapePathName``: each ``%XX`` becomes the character XX (not a byte)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "%" and i + 2 < len(text):
            try:
                out.append(chr(int(text[i + 1 : i + 3], 16)))
                i += 3
                continue
            except ValueError:
                pass
        out.append(c)
        i += 1
    return "".join(out)


def columns_of(names: Sequence[str]) -> list[Column]:
    """Columns by exact name (backquoted: a dot in a name is not a struct field)."""
    from pyspark.sql import functions as F

    return [F.col("`" + n.replace("`", "``") + "`") for n in names]


def _spark_parses(f: DataFile, partition_by: Sequence[str], string_cols: set[str]) -> bool:
    """True if Spark, with basePath at the root, reads ``f``'s partition values right."""
    dirs = f.path.split("/")[:-1]
    if len(dirs) != len(partition_by):
        return False
    for seg, col in zip(dirs, partition_by, strict=True):
        key, eq, raw = seg.partition("=")
        if not eq or spark_unescape(key) != col:
            return False
        want = f.partition.get(col)
        if want is None:
            if raw != NULL_PARTITION:
                return False
        elif raw == NULL_PARTITION or want == "":
            return False
        elif col in string_cols:
            if spark_unescape(raw) != want:
                return False
        elif raw != want:
            return False
    return True


# -- the files Spark gets -----------------------------------------------------------


class SparkFile(NamedTuple):
    """A data file as :func:`read` hands it to Spark: URL, and size and time from the log."""

    url: str
    size_bytes: int
    modification_ms: int
    single_page: bool = False
    """Every column chunk is one data page (the writer's tag): the column index holds
    nothing the row-group statistics do not."""


# -- a file index built from the log, without a status call per file ----------------


class _SinkEntry(msgspec.Struct):
    """One line of a Spark file-sink log (Spark's ``SinkFileStatus``; its field names)."""

    path: str
    size: int
    isDir: bool
    modificationTime: int
    blockReplication: int
    blockSize: int
    action: str


_SINK_ENCODER = msgspec.json.Encoder()
_SINK_LOG_HEADER = b"v1"
_SINK_IGNORED = "spark.sql.streaming.fileStreamSink.ignoreMetadata"
_COLUMN_INDEX = "parquet.filter.columnindex.enabled"
"""parquet-mr's page-level filtering by the column index (on by default)."""
_BLOCK_SIZE = 32 << 20
"""What Hadoop's local and S3A filesystems report; Spark cuts splits by its own size."""


def _uri(url: str) -> str:
    """A URL as a URI (percent-encoded, as Spark's file-sink log holds paths)."""
    return urllib.parse.quote(url, safe="/:=")


@contextlib.contextmanager
def _file_log(files: Sequence[SparkFile]) -> Iterator[str]:
    """A local temporary folder holding a Spark file-sink log of exactly ``files``.

    Spark reads a folder with a ``_spark_metadata`` log through its
    ``MetadataLogFileIndex``: the files, sizes and times come from the log, so Spark
    makes no status call per file and never lists a folder. The log is read once,
    when the DataFrame is built; the folder is deleted when the block ends.
    """
    folder = tempfile.mkdtemp(prefix="lakelog-read-")
    try:
        os.mkdir(os.path.join(folder, "_spark_metadata"))
        with open(os.path.join(folder, "_spark_metadata", "0"), "wb") as out:
            out.write(_SINK_LOG_HEADER)
            for f in files:
                entry = _SinkEntry(
                    _uri(f.url), f.size_bytes, False, f.modification_ms, 1, _BLOCK_SIZE, "add"
                )
                out.write(b"\n" + _SINK_ENCODER.encode(entry))
        yield Path(folder).as_uri()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _logged_scan(
    spark: SparkSession,
    schema: Any,
    files: Sequence[SparkFile],
    *,
    partitioned: bool,
    options: Mapping[str, str],
) -> DataFrame | None:
    """``files`` as one Parquet scan whose file index comes from a file-sink log.

    ``partitioned``: Spark parses partition values from the folder names (the files'
    folders are ``col=value`` up to the table root, whose own name has no ``=``);
    otherwise it parses none. None when Spark would not take the log as the whole
    file list (a Spark without this index, or a setting that ignores the log): the
    caller then hands Spark the URLs.
    """
    if getattr(spark, "_jsparkSession", None) is None:  # Spark Connect: no driver JVM here
        return None
    expected = sum(1 for f in files if f.size_bytes > 0)
    try:
        with _file_log(files) as folder, session_conf(spark, {_SINK_IGNORED: "false"}):
            reader = spark.read.schema(schema).options(**options)
            if not partitioned:
                reader = reader.option("recursiveFileLookup", "true")
            df = reader.parquet(folder)
            index = df._jdf.queryExecution().analyzed().relation().location()  # type: ignore[attr-defined]
            if (
                index.getClass().getSimpleName() != "MetadataLogFileIndex"
                or index.allFiles().size() != expected
            ):
                return None
    except Exception:  # noqa: BLE001 - any surprise: the URL list is the safe way
        return None
    return df


def _root_is_partition_like(base_url: str) -> bool:
    """True if Spark would take the table root's own folder name as a partition."""
    return "=" in base_url.rstrip("/").rsplit("/", 1)[-1]


# -- plan ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadPlan:
    """What :func:`read` hands to Spark: the snapshot, the pruning and the files."""

    snapshot: Snapshot
    """The version read."""
    files: tuple[DataFile, ...]
    """Live files that may hold matching rows (after pruning)."""
    pruning: pc.Expression | None
    """The part of the filter used to prune files (None: nothing pruned)."""
    filter: str | Column | None = field(repr=False)
    """The caller's filter, applied by Spark to the rows (None: every row)."""
    columns: tuple[str, ...] | None
    """The columns selected (None: all of them)."""
    base_url: str
    """The table root as Spark addresses it."""
    direct: tuple[SparkFile, ...] = field(repr=False)
    """Files read in one scan (partition values parsed by Spark from folder names)."""
    grouped: tuple[tuple[tuple[tuple[str, str | None], ...], tuple[SparkFile, ...]], ...] = field(
        repr=False
    )
    """(partition values, files) read one scan per partition with literal values."""
    vectors: Mapping[str, DataFile] = field(default_factory=dict, repr=False)
    """The files (by URL, as in ``direct`` and ``grouped``) that carry a deletion vector:
    their deleted rows are dropped (:mod:`lakelog.spark.deleted`)."""

    @property
    def urls(self) -> list[str]:
        """Exactly the file URLs handed to Spark."""
        return [f.url for f in self.direct] + [f.url for _, fs in self.grouped for f in fs]

    @property
    def skipped_files(self) -> int:
        """Live files of the snapshot that pruning left out."""
        return self.snapshot.num_files - len(self.files)

    def _scan(
        self, spark: SparkSession, schema: Any, files: Sequence[SparkFile], *, direct: bool
    ) -> DataFrame:
        """One Parquet scan of ``files``: from a file-sink log when Spark takes it (no
        status call per file), else from their URLs (Spark checks each one)."""
        partitioned = direct and bool(self.snapshot.partition_by)
        # files whose chunks are single pages: parquet-mr would read their column index
        # for every row group it keeps and learn nothing the statistics did not say
        options = {_COLUMN_INDEX: "false"} if all(f.single_page for f in files) else {}
        df = None
        if not (partitioned and _root_is_partition_like(self.base_url)):
            df = _logged_scan(spark, schema, files, partitioned=partitioned, options=options)
        if df is None:
            with session_conf(spark, listing_conf(spark, len(files), self.base_url)):
                reader = spark.read.schema(schema).options(**options)
                reader = reader.option("__globPaths__", "false")
                if partitioned:
                    reader = reader.option("basePath", self.base_url)
                df = reader.parquet(*(f.url for f in files))
        return df

    def _read(
        self, spark: SparkSession, schema: Any, files: Sequence[SparkFile], *, direct: bool
    ) -> DataFrame:
        """The live rows of ``files``: one scan of those without a deletion vector, and
        for those with one, scans whose deleted rows are dropped (unioned)."""
        plain = [f for f in files if f.url not in self.vectors]
        marked = [self.vectors[f.url] for f in files if f.url in self.vectors]
        by_path = {self.vectors[f.url].path: f for f in files if f.url in self.vectors}
        frames = [self._scan(spark, schema, plain, direct=direct)] if plain else []
        for layer in scan_layers(marked):
            scan = self._scan(spark, schema, [by_path[f.path] for f in layer], direct=direct)
            frames.append(drop_deleted(spark, scan, layer))
        out = frames[0]
        for other in frames[1:]:
            out = out.unionByName(other)
        return out

    def to_dataframe(self, spark: SparkSession) -> DataFrame:
        """The DataFrame of this plan (lazy: Spark reads when an action runs)."""
        from pyspark.sql import functions as F

        schema = self.snapshot.schema
        parts = self.snapshot.partition_by
        full = to_spark_schema(schema)
        # files store columns under their physical names (format.md, "Column ids"):
        # read those, select them under the table's names
        stored = spark_physical_schema(schema, keep=parts)
        logical = logical_columns(schema, keep=parts)
        frames: list[DataFrame] = []
        if self.direct:
            df = self._read(spark, stored, self.direct, direct=True)
            frames.append(df.select(*logical))
        file_schema = spark_physical_schema(self.snapshot.file_schema)
        for values, files in self.grouped:
            df = self._read(spark, file_schema, files, direct=False)
            for col, text in values:
                t = to_spark_type(schema.field(col).type)
                df = df.withColumn(col, F.lit(text).cast(t))
            frames.append(df.select(*logical))
        if not frames:
            out = spark.createDataFrame([], full)
        else:
            out = frames[0]
            for other in frames[1:]:
                out = out.unionByName(other)
        if self.filter is not None:
            out = out.where(self.filter)
        if self.columns is not None:
            out = out.select(*columns_of(self.columns))
        return out


def read_changes(
    spark: SparkSession,
    uri: str,
    starting_version: int | dt.datetime,
    ending_version: int | dt.datetime | None = None,
    *,
    columns: Sequence[str] | None = None,
    filter: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> DataFrame:
    """The change feed of versions ``starting_version..ending_version`` as a DataFrame,
    read in Spark tasks: the rows of :meth:`lakelog.Table.changes` on the same versions,
    with ``_change_type``, ``_commit_version`` and ``_commit_timestamp``.

    Args:
        spark: the session.
        uri: the table's location.
        starting_version: the first version, or a datetime: the first version committed
            at or after it.
        ending_version: the last version, or a datetime: the last version committed at
            or before it; default None, the latest.
        columns: the table's columns to return, in this order; default None, all.
        filter: a lakelog filter string (``"day = '2026-11-02' and id > 10"``): files
            whose statistics cannot match are skipped, rows that do not match dropped.
        storage_options: fsspec options of the table's filesystem.

    Raises:
        ChangeFeedError: a commit in the range changed rows without change files.
        VersionExpiredError: ``starting_version`` is not after the oldest readable one.
    """
    register(spark)
    options = {"readChangeFeed": "true"}
    for name, value in (("starting", starting_version), ("ending", ending_version)):
        if isinstance(value, dt.datetime):
            options[f"{name}Timestamp"] = value.isoformat()
        elif value is not None:
            options[f"{name}Version"] = str(value)
    if columns is not None:
        options["columns"] = json.dumps(list(columns))
    if filter is not None:
        options["filter"] = filter
    if storage_options:
        options["storageOptions"] = json.dumps(dict(storage_options))
    # the range is checked here, so its errors are raised by this call (Spark opens the
    # source's reader only when the DataFrame is first run)
    open_range(Storage(uri, storage_options), read_options({**options, "path": uri}))
    return spark.read.format("lakelog").options(**options).load(uri)


def plan_read(
    spark: SparkSession,
    uri: str,
    *,
    version: int | None = None,
    as_of: dt.datetime | str | None = None,
    filter: str | Column | None = None,
    columns: Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> ReadPlan:
    """Resolve the snapshot and prune its files; nothing is read from the data files.

    Args:
        spark: the session that reads.
        uri: the table's URI.
        version: the version to read; default None, the latest.
        as_of: read the latest version committed at or before this datetime or ISO 8601
            string; default None. Not with ``version``.
        filter: a Spark SQL string or Column; the part lakelog understands
            (comparisons, IN, IS NULL, AND/OR/NOT over columns and constants) prunes
            files by partition values and statistics; default None, every row.
        columns: the columns to return; default None, all of them.
        storage_options: fsspec options for lakelog's access to the log; Spark reaches
            the data files through its own Hadoop settings. Default none.

    Returns:
        The plan; :meth:`ReadPlan.to_dataframe` turns it into the DataFrame of :func:`read`.
    """
    check_filter(filter)
    storage = Storage(uri, storage_options)
    snap = resolve_snapshot(storage, version, as_of)
    schema = snap.schema
    cols: tuple[str, ...] | None = None
    if columns is not None:
        cols = (columns,) if isinstance(columns, str) else tuple(columns)
        missing = [c for c in cols if c not in schema.names]
        if missing:
            raise InvalidArgumentError(
                f"expected columns of the table {schema.names}, found unknown {missing}"
            )
    check_spark_readable(snap.file_schema, list(cols) if cols is not None else schema.names)
    pruning = None
    if filter is not None:
        pruning = translate_filter(spark, to_spark_schema(schema), schema, filter)
    files = snap.files(pruning) if pruning is not None else snap.files()
    string_cols = {
        c
        for c in snap.partition_by
        if pa.types.is_string(schema.field(c).type)
        or pa.types.is_large_string(schema.field(c).type)
    }
    direct: list[SparkFile] = []
    vectors: dict[str, DataFile] = {}
    groups: dict[tuple[tuple[str, str | None], ...], list[SparkFile]] = {}
    for f in files:
        name = f.path.rsplit("/", 1)[-1]
        if hidden_name(name):  # Spark's file index skips these, even when listed
            raise LakelogError(
                f"expected data file names Spark reads, found {f.path!r}: Spark silently "
                f"skips files whose names start with '_' or '.'. Rewrite (compact) the "
                f"files of this table before reading it in Spark."
            )
        one = SparkFile(
            spark_url(storage, f.path),
            f.size_bytes,
            f.modification_ms,
            f.tags.get(SINGLE_PAGE_TAG) == "true",
        )
        if f.deleted is not None:
            vectors[one.url] = f
        if not snap.partition_by or _spark_parses(f, snap.partition_by, string_cols):
            direct.append(one)
        else:
            key = tuple((c, f.partition.get(c)) for c in snap.partition_by)
            groups.setdefault(key, []).append(one)
    check_row_index(spark, list(vectors.values()))
    return ReadPlan(
        snapshot=snap,
        files=tuple(files),
        pruning=pruning,
        filter=filter,
        columns=cols,
        base_url=spark_url(storage),
        direct=tuple(direct),
        grouped=tuple((k, tuple(v)) for k, v in groups.items()),
        vectors=vectors,
    )


def read(
    spark: SparkSession,
    uri: str,
    *,
    version: int | None = None,
    as_of: dt.datetime | str | None = None,
    filter: str | Column | None = None,
    columns: Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> DataFrame:
    """A table (or one of its versions) as a Spark DataFrame (lazy: Spark reads the
    files the log lists, never a folder listing, when an action runs):
    ``plan_read(...).to_dataframe()``, with the arguments of :func:`plan_read`."""
    plan = plan_read(
        spark,
        uri,
        version=version,
        as_of=as_of,
        filter=filter,
        columns=columns,
        storage_options=storage_options,
    )
    return plan.to_dataframe(spark)


def history(
    spark: SparkSession,
    uri: str,
    *,
    limit: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> DataFrame:
    """The table's commit history as a DataFrame, newest first (as ``Table.history``):
    ``version``, ``timestamp``, ``operation``, ``parameters`` and ``metrics`` (maps of
    JSON text), ``read_version``, ``txn_id``, ``engine``. Works on Spark Connect: the
    rows are built on the client from the log.

    Args:
        spark: the session that builds the DataFrame.
        uri: the table's URI.
        limit: at most this many commits, the newest; default None, all of them.
        storage_options: fsspec options for reading the log; default none.
    """
    import json

    from pyspark.sql.types import (
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    storage = Storage(uri, storage_options)
    load_snapshot(storage)  # refuses a location without a table
    headers = commit_history(storage, limit)
    text = MapType(StringType(), StringType())
    schema = StructType(
        [
            StructField("version", LongType(), False),
            StructField("timestamp", TimestampType(), False),
            StructField("operation", StringType(), False),
            StructField("parameters", text, False),
            StructField("metrics", text, False),
            StructField("read_version", LongType(), True),
            StructField("txn_id", StringType(), False),
            StructField("engine", StringType(), False),
        ]
    )
    rows = [
        (
            h.version,
            dt.datetime.fromtimestamp(h.timestamp_ms / 1000, tz=dt.timezone.utc),
            h.operation,
            {k: json.dumps(v) for k, v in h.parameters.items()},
            {k: json.dumps(v) for k, v in h.metrics.items()},
            h.read_version,
            h.txn_id,
            h.engine,
        )
        for h in headers
    ]
    return spark.createDataFrame(rows, schema)
