"""Run one group of a rewrite plan: stream its files into new bounded files.

:func:`rewrite_group` needs only the group, the table schema and a
:class:`~lakelog.storage.Storage`, so any worker can run it: a thread of the
embedded executor, a Spark task. It reads the sources one row group at a time
(paced by an optional :class:`~lakelog.maintenance.pacing.Pacer`) and streams
the batches into a :class:`~lakelog.io.writer.RollingWriter`, so memory holds
about one input row group and one output row group, never a whole file or
group. It writes files only; committing them is
:func:`lakelog.maintenance.commit.commit_rewrite`'s job.

Clustering passes ``order``: a function that receives the group's batch
stream and yields the same rows in the order they should be written.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import CorruptLogError, SchemaMismatchError
from ..io.schema import check_schema, conform
from ..io.writer import RollingWriter, WriteOptions, check_codec
from ..log.actions import AddFile, DataFile
from ..storage import Storage
from .pacing import Pacer
from .plan import CompactionOptions, FileGroup

__all__ = [
    "BatchOrder",
    "GroupResult",
    "RewriteOptions",
    "dictionary_columns",
    "file_schema_of",
    "read_ahead",
    "read_group",
    "rewrite_group",
]

BatchOrder = Callable[[Iterator[pa.RecordBatch]], Iterable[pa.RecordBatch]]
"""Receives a group's batches (file schema, no partition columns) and yields
every row exactly once, in the order to write them."""

_UNBOUNDED = 1 << 62
"""File-size bound used when only ``target_rows`` cuts files."""

_RELEASE_EVERY = 64 * 1024 * 1024


class RewriteOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How a group's output files are cut and encoded."""

    target_file_size: int | None = None
    target_rows: int | None = None
    row_group_size: int
    compression: str
    tags: dict[str, str] = {}
    batch_size: int = 65536
    batch_bytes: int = 2 * 1024 * 1024
    prefix: str = "part"
    lease_id: str | None = None
    """The writer lease of the run: output file names carry it (see lakelog.leases)."""
    auto_dictionary: bool = True
    """Dictionary-encode only columns whose values repeat (judged on a sample of
    the group's first batch): near-unique columns gain nothing from a dictionary
    and cost a hash of every value until the writer falls back."""

    @classmethod
    def from_compaction(cls, options: CompactionOptions) -> RewriteOptions:
        return cls(
            target_file_size=options.target_file_size,
            target_rows=options.target_rows,
            row_group_size=options.row_group_size,
            compression=options.compression,
        )

    def write_options(self, *, use_dictionary: bool | tuple[str, ...] = True) -> WriteOptions:
        return WriteOptions(
            target_file_size=self.target_file_size or _UNBOUNDED,
            target_rows=self.target_rows,
            row_group_size=self.row_group_size,
            compression=check_codec(self.compression),
            tags=dict(self.tags),
            use_dictionary=use_dictionary,
        )


class GroupResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one group's rewrite produced: files written but not yet committed."""

    group_id: str
    added: tuple[AddFile, ...]
    bytes_read: int
    bytes_written: int
    num_rows: int
    duration_s: float = 0.0


def file_schema_of(schema: pa.Schema, partition_by: Sequence[str]) -> pa.Schema:
    """The schema of data files: the table schema without partition columns."""
    return pa.schema([f for f in schema if f.name not in partition_by])


def read_group(
    storage: Storage,
    file_schema: pa.Schema,
    files: Sequence[DataFile],
    *,
    batch_size: int = 65536,
    batch_bytes: int = 2 * 1024 * 1024,
    pacer: Pacer | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream the rows of ``files`` one row group at a time, as ``file_schema`` batches.

    Batches hold at most ``batch_size`` rows and about ``batch_bytes`` (sized
    from each row group's footer), so wide rows do not make huge batches.
    Decoding is single-threaded per group (groups run in parallel, and
    :func:`read_ahead` overlaps it with encoding), and freed memory is handed
    back to the allocator every ``_RELEASE_EVERY`` bytes, which keeps the
    resident set near what is live rather than what was ever allocated.
    """
    fs = storage.arrow_filesystem()
    names = file_schema.names
    since_release = 0
    for f in files:
        with fs.open_input_file(storage.full(f.path)) as source:
            pf = pq.ParquetFile(source, pre_buffer=False)
            _check_source(pf.schema_arrow, file_schema, f.path)
            md = pf.metadata
            chunks = [_compressed_size(md.row_group(rg)) for rg in range(md.num_row_groups)]
            if pacer is not None:  # the footer and headers, read on opening
                pacer.acquire(max(0, f.size_bytes - sum(chunks)))
            for rg in range(md.num_row_groups):
                meta = md.row_group(rg)
                if pacer is not None:
                    pacer.acquire(chunks[rg])
                row_bytes = max(1, meta.total_byte_size // max(1, meta.num_rows))
                rows = max(1024, min(batch_size, batch_bytes // row_bytes))
                for batch in pf.iter_batches(
                    batch_size=rows, row_groups=[rg], columns=names, use_threads=False
                ):
                    if batch.num_rows:
                        yield conform(batch, file_schema)
                since_release += meta.total_byte_size
                if since_release >= _RELEASE_EVERY:
                    pa.default_memory_pool().release_unused()
                    since_release = 0


def _compressed_size(meta: pq.RowGroupMetaData) -> int:
    return sum(meta.column(c).total_compressed_size for c in range(meta.num_columns))


def dictionary_columns(
    sample: pa.RecordBatch | None, *, max_distinct_ratio: float = 0.5, min_rows: int = 1000
) -> bool | tuple[str, ...]:
    """Columns worth a dictionary: distinct values <= ``max_distinct_ratio`` of the sample.

    True (all columns, the writer's default) when the sample is too small to
    judge or holds a column whose distinct values cannot be counted.
    """
    if sample is None or sample.num_rows < min_rows:
        return True
    keep: list[str] = []
    for name, col in zip(sample.schema.names, sample.columns, strict=True):
        t = col.type
        if pa.types.is_nested(t) or pa.types.is_dictionary(t):
            return True
        try:
            distinct = pc.count_distinct(col, mode="all").as_py()
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            return True
        if distinct <= max_distinct_ratio * sample.num_rows:
            keep.append(name)
    if len(keep) == sample.num_columns:
        return True
    return tuple(keep) if keep else False


_END = object()


def read_ahead(source: Iterator[pa.RecordBatch], *, depth: int = 2) -> Iterator[pa.RecordBatch]:
    """Iterate ``source`` in a helper thread, at most ``depth`` batches ahead.

    Decoding the next row group then overlaps encoding the current one (pyarrow
    releases the GIL in both). Errors of the source are raised here; stopping
    early stops and closes the source.
    """
    slots: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                slots.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for batch in source:
                if not put((True, batch)):
                    return
            put((True, _END))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            put((False, e))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="lakelog-read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            ok, item = slots.get()
            if not ok:
                raise item
            if item is _END:
                return
            yield item
    finally:
        stop.set()
        worker.join()


def _check_source(found: pa.Schema, expected: pa.Schema, path: str) -> None:
    try:
        check_schema(
            pa.schema([found.field(n) for n in expected.names if n in found.names]), expected
        )
    except SchemaMismatchError as e:
        raise SchemaMismatchError(
            f"expected data file {path} to hold the table's columns, found otherwise: {e}"
        ) from e


def rewrite_group(
    storage: Storage,
    schema: pa.Schema,
    partition_by: Sequence[str],
    group: FileGroup,
    options: RewriteOptions,
    *,
    order: BatchOrder | None = None,
    pacer: Pacer | None = None,
) -> GroupResult:
    """Rewrite one group's files into new files; returns them (``data_change=False``).

    Output files keep the table's schema and the group's partition. The rows
    written are checked against the row counts the log records for the
    sources. On any failure every file written so far is deleted before the
    error propagates.
    """
    started = time.monotonic()
    file_schema = file_schema_of(schema, partition_by)
    writer: RollingWriter | None = None
    try:
        stream = read_ahead(
            read_group(
                storage,
                file_schema,
                group.files,
                batch_size=options.batch_size,
                batch_bytes=options.batch_bytes,
                pacer=pacer,
            )
        )
        first = next(stream, None)
        writer = RollingWriter(
            storage,
            file_schema=file_schema,
            partition=group.partition,
            partition_by=partition_by,
            options=options.write_options(
                use_dictionary=dictionary_columns(first) if options.auto_dictionary else True
            ),
            prefix=options.prefix,
            lease_id=options.lease_id,
        )
        batches: Iterable[pa.RecordBatch] = (
            itertools.chain([first], stream) if first is not None else stream
        )
        if order is not None:
            batches = order(iter(batches))
        for batch in batches:
            writer.write(batch)
        written = writer.close()
        expected = group.num_rows
        got = sum(a.num_rows for a in written)
        if got != expected:
            raise CorruptLogError(
                f"expected {expected} rows from the {len(group.files)} files of group "
                f"{group.group_id} (as the log records), found {got}; a data file does not "
                f"match the log. Nothing was committed; check the files with `lakelog files`."
            )
    except BaseException:
        if writer is not None:
            try:
                storage.delete(writer.abort())
            except Exception:  # noqa: BLE001 - vacuum removes what this cannot
                pass
        raise
    added = tuple(msgspec.structs.replace(a, data_change=False) for a in written)
    return GroupResult(
        group_id=group.group_id,
        added=added,
        bytes_read=group.total_bytes,
        bytes_written=sum(a.size_bytes for a in added),
        num_rows=got,
        duration_s=time.monotonic() - started,
    )
