"""``spark.read.format("lakelog")`` / ``df.write.format("lakelog")``: a Python data source.

Convenience for code that expects a format name. Both directions move data
through Python workers as Arrow batches, so they are slower than
:func:`lakelog.spark.read` (Spark's native vectorized Parquet reader) and
:func:`lakelog.spark.write` (Spark's native Parquet writer):

* reads: the filters Spark pushes down prune files through lakelog's pruning
  (``spark.sql.python.filterPushdown.enabled``, which :func:`register` turns on;
  Spark still applies every filter to the rows); each Spark task reads a bin of
  files (``maxPartitionBytes``, default 128 MiB, each file counting 4 MiB more for
  opening it, as Spark's own reader does) with pyarrow through fsspec, so it needs
  no Hadoop filesystem: ``s3://`` tables work with ``storageOptions``;
  ``versionAsOf`` / ``timestampAsOf`` select a version; rows that a file's deletion
  vector deletes (format version 5) are dropped as each file is read;
* writes: each task writes its rows with lakelog's own Parquet writer; the
  driver commits every task's files in one commit, or deletes them on abort;
* ``readChangeFeed``: the change feed of a range of versions
  (:mod:`lakelog.spark.feed`, :func:`lakelog.spark.read_changes`);
* ``spark.readStream.format("lakelog")``: the streaming source
  (:mod:`lakelog.spark.source`), with its own options (``startingVersion``,
  ``maxFilesPerTrigger``, ``skipChangeCommits``, ``readChangeFeed``, ...).

Options: one registry per entry point (:mod:`lakelog.spark.options`), checked by name
before anything is read or written (an unknown name is
:class:`~lakelog.errors.UnknownOptionError`): ``versionAsOf``, ``timestampAsOf``,
``maxPartitionBytes``, ``storageOptions`` (JSON object for fsspec); for writes, the write
modes of :func:`lakelog.spark.write` (``replaceWhere``, ``partitionOverwriteMode``,
``mergeSchema`` / ``schema_mode``, ``txnAppId`` with ``txnVersion``), ``partitionBy``
(comma-separated, when a write creates the table) and table properties (``lakelog.*``,
for a table the write creates). Spark refuses ``df.write.partitionBy(...)`` for a Python
data source and hands it no session settings, so those are options here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

from ..changes.predicate import Where
from ..core import WritePlan, write_options_from
from ..errors import InvalidArgumentError, SchemaMismatchError, TableNotFoundError
from ..io.parquet_settings import check_parquet_properties
from ..io.schema import conform
from ..io.writer import write_files
from ..log.actions import AddFile, DataFile
from ..log.snapshot import Snapshot, load_snapshot
from ..scan.rows import read_rows
from ..storage import Storage
from ..transaction import skipped_result
from ..transforms import PartitionSpec, partition_layout
from .environment import check_executors
from .errors import carry
from .modes import (
    as_written,
    auto_compact_here,
    commit_written,
    dataframe_plan,
    outside_rows,
    parse_replace_where,
    refuse_outside,
    same_partitioning,
)
from .options import (
    ReadOptions,
    WriteOptions,
    load_options,
    read_options,
    stream_read_options,
    write_options,
)
from .pushdown import translate_pushed
from .read import _resolve
from .schema import to_arrow_schema, to_arrow_type, to_spark_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["LakelogDataSource", "register"]

_ADDS = msgspec.json.Decoder(list[AddFile])
_FILES = msgspec.json.Encoder()
_FILES_DEC = msgspec.json.Decoder(list[DataFile])


_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
_OPEN_COST = 4 << 20


def register(spark: SparkSession) -> None:
    """Register the ``lakelog`` format with a session, and turn on Spark's filter
    pushdown for Python data sources (without it, Spark refuses a source that prunes).
    The session's workers are checked first: the source keeps the interpreter it was
    registered with (:mod:`lakelog.spark.environment`)."""
    check_executors(spark)
    spark.conf.set(_PUSHDOWN_CONF, "true")
    spark.dataSource.register(LakelogDataSource)


def _snapshot(opts: ReadOptions) -> Snapshot:
    return _resolve(opts.storage(), opts.version, opts.timestamp)


@carry
class LakelogDataSource(DataSource):
    """The ``lakelog`` format."""

    @classmethod
    def name(cls) -> str:
        return "lakelog"

    # Spark builds the source on the driver and asks it for the schema (at load()), then
    # for a reader or writer (before any task runs): each checks the options by name first.

    def schema(self) -> StructType:
        opts = load_options(self.options)
        if opts.change_feed:
            from .feed import options_schema

            return to_spark_schema(options_schema(opts.storage(), opts))
        return to_spark_schema(_snapshot(opts).schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = read_options(self.options)
        if opts.change_feed:
            from .feed import FeedReader

            return FeedReader(opts)
        return _Reader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The streaming source (:mod:`lakelog.spark.source`)."""
        from .source import stream_reader

        return stream_reader(stream_read_options(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return _Writer(write_options(self.options, overwrite=overwrite), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """The streaming sink (:mod:`lakelog.spark.streaming`): ``overwrite`` is Spark's
        ``complete`` output mode."""
        try:
            from .streaming import StreamWriter
        except ImportError as e:  # Arrow stream writers came with pyspark 4.1
            import pyspark

            raise InvalidArgumentError(
                f"expected pyspark 4.1 or later for writeStream.format('lakelog'), found "
                f"{pyspark.__version__}; upgrade pyspark, or write each micro-batch with "
                f"foreachBatch and lakelog.spark.write(app_id=..., app_version=batch_id)."
            ) from e
        return StreamWriter(dict(self.options), schema, overwrite)


@carry
class _Reader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, options: ReadOptions) -> None:
        self.partition_bytes = options.partition_bytes
        snap = _snapshot(options)
        self.uri = snap.storage.uri
        self.storage_options = snap.storage.storage_options
        self.schema_bytes = snap.schema.serialize().to_pybytes()
        self.partition_by = snap.partition_by
        self.version = snap.version

    def pushFilters(self, filters: list[Any]) -> list[Any]:
        """Keep the filters lakelog can prune files with; give every filter back, so
        Spark still applies it to the rows read (pruning is by whole files)."""
        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_bytes))
        self.pruning = translate_pushed(filters, schema)
        return list(filters)

    def partitions(self) -> Sequence[InputPartition]:
        storage = Storage(self.uri, self.storage_options)
        snap = load_snapshot(storage, self.version)
        files = snap.files(getattr(self, "pruning", None))
        limit = self.partition_bytes
        bins: list[list[DataFile]] = []
        size = limit
        for f in files:  # consecutive files, as Spark bins its own file splits
            cost = f.size_bytes + _OPEN_COST
            if size + cost > limit and (not bins or bins[-1]):
                bins.append([])
                size = 0
            bins[-1].append(f)
            size += cost
        # no files (all pruned): one empty partition, as Spark reads None otherwise
        return [InputPartition(_FILES.encode(b)) for b in bins if b] or [
            InputPartition(_FILES.encode([]))
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The live rows of the partition's files: rows their deletion vectors delete are
        dropped, partition columns filled in from the log, columns added since a file was
        written read as nulls (:func:`lakelog.scan.rows.read_rows`)."""
        storage = Storage(self.uri, self.storage_options)
        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_bytes))
        spark_types = [to_arrow_type(t) for t in (x.dataType for x in to_spark_schema(schema))]
        for f in _FILES_DEC.decode(partition.value):
            for batch in read_rows(storage, f, schema, self.partition_by, version=self.version):
                arrays = [
                    col.cast(t) if col.type != t else col
                    for col, t in zip(batch.columns, spark_types, strict=True)
                ]
                yield pa.RecordBatch.from_arrays(arrays, names=schema.names)


def write_task_files(
    storage: Storage,
    batches: Iterator[pa.RecordBatch],
    *,
    schema: pa.Schema,
    partition_by: Sequence[str],
    properties: Mapping[str, str],
    lease_id: str | None = None,
    spec: PartitionSpec | None = None,
) -> list[AddFile]:
    """One writer task's rows as data files: Spark's Arrow batches conformed to ``schema``
    by column name (:func:`~lakelog.io.schema.conform`: converted types, nulls for a
    column they lack), written with lakelog's writer, names carrying ``lease_id``. Shared
    by the batch writer and the streaming sink (:mod:`lakelog.spark.streaming`). ``spec``:
    the table's current spec of transforms (format version 8), whose values split the
    rows into files."""
    return write_files(
        storage,
        (conform(b, schema) for b in batches if b.num_rows),
        schema=schema,
        partition_by=partition_by,
        options=write_options_from(properties),
        lease_id=lease_id,
        spec=spec,
    )


class _Commit(WriterCommitMessage):  # type: ignore[misc]
    def __init__(self, adds: bytes, outside: int = 0) -> None:
        self.adds = adds
        self.outside = outside  # rows outside replaceWhere (their files were deleted)


@carry
class _Writer(DataSourceArrowWriter):  # type: ignore[misc]
    """The batch writer: the options of :func:`lakelog.spark.options.write_options`,
    checked when Spark plans the write; each task writes its rows with lakelog's writer
    (and counts those outside ``replaceWhere``, writing nothing once it finds one); the
    driver commits every task's files in one commit (:func:`commit_written`)."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        self.spec = spec = options.spec
        storage = options.storage()
        self.uri = storage.uri
        self.storage_options = storage.storage_options
        try:
            snap: Snapshot | None = load_snapshot(storage)
        except TableNotFoundError:
            snap = None
        self.skip = False  # the app version is already in the table: write nothing
        if snap is not None:
            self.skip = skipped_result(snap, spec.app) is not None
            if spec.partition_by and not same_partitioning(snap, spec.partition_by):
                raise SchemaMismatchError(
                    f"expected option partitionBy {','.join(snap.partitioning)!r} of the "
                    f"existing table, found {','.join(spec.partition_by)!r}; omit partitionBy "
                    f"when writing to an existing table."
                )
            plan = dataframe_plan(schema, snap, spec.schema_mode)
            parts = snap.partition_by
            self.partition_spec = snap.partition_spec
            self.read_version: int | None = snap.version
            self.props = dict(snap.properties)
        else:
            table_schema = to_arrow_schema(schema)
            parts, specs = partition_layout(table_schema, spec.partition_by)
            # a spec of transforms: the tasks split rows by it, the table is created with it
            self.partition_spec = PartitionSpec.of(0, specs[0]) if specs else None
            plan = WritePlan(table_schema)
            self.read_version = None
            # the table properties given as options (lakelog.*), checked by name already
            self.props = dict(spec.properties or {})
            check_parquet_properties(self.props, table_schema, parts)
        parse_replace_where(spec, plan.schema)  # a bad filter fails before any task runs
        self.spark_schema = schema
        self.schema_bytes = plan.schema.serialize().to_pybytes()
        self.partition_by = tuple(parts)
        self.replace_where = spec.replace_where

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        storage = Storage(self.uri, self.storage_options)
        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_bytes))
        where = None
        if self.replace_where is not None:
            where = Where(self.replace_where, schema, operation="OVERWRITE").expression
        outside = 0

        def conformed() -> Iterator[pa.RecordBatch]:
            nonlocal outside
            for batch in iterator:
                if not batch.num_rows or self.skip:
                    continue
                if where is not None:
                    outside += outside_rows(batch, where, schema)
                    if outside:  # the write is refused: count the rest, write nothing
                        continue
                yield batch

        adds = write_task_files(
            storage,
            conformed(),
            schema=schema,
            partition_by=self.partition_by,
            properties=self.props,
            spec=self.partition_spec,
        )
        if outside:
            storage.delete([a.path for a in adds])
            adds = []
        return _Commit(msgspec.json.encode(adds), outside)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        done = [m for m in messages if isinstance(m, _Commit)]
        adds = [a for m in done for a in _ADDS.decode(m.adds)]
        storage = Storage(self.uri, self.storage_options)
        if self.skip:
            storage.delete([a.path for a in adds])
            return
        spec = self.spec
        snap = None if self.read_version is None else load_snapshot(storage, self.read_version)
        written = pa.ipc.read_schema(pa.py_buffer(self.schema_bytes))
        if snap is None:
            plan = WritePlan(written)
        else:
            # the tasks wrote with the plan made before them: its physical names stand
            plan = as_written(
                dataframe_plan(self.spark_schema, snap, spec.schema_mode), written, snap
            )
        where = parse_replace_where(spec, plan.schema)
        outside = sum(m.outside for m in done)
        if where is not None and outside:
            storage.delete([a.path for a in adds])
            refuse_outside(where, outside)
        result = commit_written(
            storage,
            snap,
            adds,
            spec,
            plan=plan,
            partition_by=self.partition_by
            if self.partition_spec is None or snap is not None
            else self.partition_spec.texts,
            properties=self.props if snap is None else {},
            where=where,
            parameters={"format": "lakelog"},
        )
        auto_compact_here(storage, result, entry="df.write.format('lakelog')")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        adds = [a for m in messages if isinstance(m, _Commit) for a in _ADDS.decode(m.adds)]
        Storage(self.uri, self.storage_options).delete([a.path for a in adds])
