"""The batch reader and writer of the ``lakelog`` format (registered by
:mod:`lakelog.spark.datasource`): ``spark.read.format("lakelog")`` without
``readChangeFeed``, and ``df.write.format("lakelog")``.

The reader bins the snapshot's files (pruned by the filters Spark pushes down) into
Spark partitions and reads each file's live rows with pyarrow; the writer's tasks write
their rows with lakelog's own Parquet writer (:func:`write_task_files`, shared with the
streaming sink) and the driver commits every task's files in one commit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

from ..core import WritePlan, write_options_from
from ..errors import SchemaMismatchError, TableNotFoundError
from ..io.guards import IdentityAllocator, refuse_given_identity
from ..io.parquet_settings import check_parquet_properties
from ..io.schema import conform
from ..io.writer import write_files
from ..log.actions import AddFile, DataFile
from ..log.snapshot import Snapshot, load_snapshot
from ..rowlevel.predicate import Where
from ..scan.rows import read_rows
from ..storage import Storage
from ..transaction import skipped_result
from ..transforms import PartitionSpec, partition_layout
from .errors import carry
from .feed import bins, spark_batches
from .modes import (
    as_written,
    auto_compact_here,
    commit_written,
    dataframe_plan,
    numbered_columns,
    outside_rows,
    parse_replace_where,
    refuse_outside,
    same_partitioning,
)
from .options import ReadOptions, WriteOptions, resolve_snapshot
from .pushdown import translate_pushed
from .schema import to_arrow_schema, to_arrow_type, to_spark_schema

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["BatchReader", "BatchWriter", "TaskFiles", "decode_adds", "write_task_files"]

_ADDS = msgspec.json.Decoder(list[AddFile])
_FILES = msgspec.json.Encoder()
_FILES_DEC = msgspec.json.Decoder(list[DataFile])


def decode_adds(data: bytes) -> list[AddFile]:
    """The ``add`` actions a writer task sent (:class:`TaskFiles`)."""
    return _ADDS.decode(data)


@carry
class BatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, options: ReadOptions) -> None:
        self.partition_bytes = options.partition_bytes
        snap = resolve_snapshot(options.storage(), options.version, options.timestamp)
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
        groups = bins(files, self.partition_bytes, lambda f: f.size_bytes)
        # no files (all pruned): one empty partition, as Spark reads None otherwise
        return [InputPartition(_FILES.encode(b)) for b in groups] or [
            InputPartition(_FILES.encode([]))
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The live rows of the partition's files: rows their deletion vectors delete are
        dropped, partition columns filled in from the log, columns added since a file was
        written read as nulls (:func:`lakelog.scan.rows.read_rows`)."""
        storage = Storage(self.uri, self.storage_options)
        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_bytes))
        spark_types = [to_arrow_type(x.dataType) for x in to_spark_schema(schema)]
        for f in _FILES_DEC.decode(partition.value):
            rows = read_rows(storage, f, schema, self.partition_by, version=self.version)
            yield from spark_batches(rows, schema.names, spark_types)


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
    rows into files. The identity columns the batches lack are numbered from the first
    value above ``schema``'s marks, as if the task were the write's only one: the
    driver moves each task's values to its place in the write
    (:func:`~lakelog.spark.modes.numbered_tasks`)."""
    numbers = IdentityAllocator(schema)

    def checked(b: pa.RecordBatch) -> pa.RecordBatch:
        refuse_given_identity(b.schema.names, schema, where="the DataFrame")
        return conform(numbers.fill(b) if numbers else b, schema)

    return write_files(
        storage,
        (checked(b) for b in batches if b.num_rows),
        schema=schema,
        partition_by=partition_by,
        options=write_options_from(properties),
        lease_id=lease_id,
        spec=spec,
    )


class TaskFiles(WriterCommitMessage):  # type: ignore[misc]
    """A writer task's commit message: its files (``add`` actions as JSON, read back
    by :func:`decode_adds`), and the rows it found outside ``replaceWhere``. The
    streaming sink's message extends it."""

    def __init__(self, adds: bytes, outside: int = 0) -> None:
        self.adds = adds
        self.outside = outside  # rows outside replaceWhere (their files were deleted)


@carry
class BatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
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
        # values for a GENERATED ALWAYS identity column: refused before any task runs
        refuse_given_identity(schema.fieldNames(), plan.schema, where="the DataFrame")
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
        return TaskFiles(msgspec.json.encode(adds), outside)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        done = [m for m in messages if isinstance(m, TaskFiles)]
        adds = [a for m in done for a in decode_adds(m.adds)]
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
            numbered=[decode_adds(m.adds) for m in done],
            numbered_from=written,
            numbers=numbered_columns(written, self.spark_schema.fieldNames()),
        )
        auto_compact_here(storage, result, entry="df.write.format('lakelog')")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        adds = [a for m in messages if isinstance(m, TaskFiles) for a in decode_adds(m.adds)]
        Storage(self.uri, self.storage_options).delete([a.path for a in adds])
