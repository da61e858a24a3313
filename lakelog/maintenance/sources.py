"""Reading the source files of a group: streamed, paced, checked against the table schema.

Shared by every rewrite (compaction, clustering, the Spark tasks): memory holds
about one row group of a source at a time, never a whole file or group.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ..io.schema import conform, file_columns
from ..log import mapping
from ..log.actions import DataFile
from ..log.deletion_vectors import keep_mask
from ..storage import Storage
from .pacing import Pacer

__all__ = [
    "dataset_of",
    "dictionary_columns",
    "file_schema_of",
    "read_ahead",
    "read_group",
    "scan_batches",
]

_RELEASE_EVERY = 64 * 1024 * 1024


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
    """Stream the live rows of ``files`` one row group at a time, as ``file_schema``
    batches (rows a file's deletion vector marks are dropped).

    Batches hold at most ``batch_size`` rows and about ``batch_bytes`` (sized
    from each row group's footer), so wide rows do not make huge batches.
    Decoding is single-threaded per group (groups run in parallel, and
    :func:`read_ahead` overlaps it with encoding), and freed memory is handed
    back to the allocator every ``_RELEASE_EVERY`` bytes, which keeps the
    resident set near what is live rather than what was ever allocated.
    """
    fs = storage.arrow_filesystem()
    physical = mapping.physical_schema(file_schema)  # what files hold (format.md, "Column ids")
    names = physical.names
    since_release = 0
    for f in files:
        with fs.open_input_file(storage.full(f.path)) as source:
            pf = pq.ParquetFile(source, pre_buffer=False)
            _check_source(pf.schema_arrow, physical, f.path)
            md = pf.metadata
            chunks = [_compressed_size(md.row_group(rg)) for rg in range(md.num_row_groups)]
            if pacer is not None:  # the footer and headers, read on opening
                pacer.acquire(max(0, f.size_bytes - sum(chunks)))
            keep = keep_mask(f.deleted, f.num_rows, path=f.path)  # rows that are gone
            start = 0
            for rg in range(md.num_row_groups):
                meta = md.row_group(rg)
                if pacer is not None:
                    pacer.acquire(chunks[rg])
                row_bytes = max(1, meta.total_byte_size // max(1, meta.num_rows))
                rows = max(1024, min(batch_size, batch_bytes // row_bytes))
                for batch in pf.iter_batches(
                    batch_size=rows, row_groups=[rg], columns=names, use_threads=False
                ):
                    n = batch.num_rows
                    if keep is not None and n:
                        live = keep[start : start + n]
                        start += n
                        if not live.all():
                            batch = batch.filter(pa.array(live))
                    if batch.num_rows:
                        yield mapping.to_logical(conform(batch, physical), file_schema)
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
    # columns added after the file was written read as nulls, narrower types widen
    # (docs/format.md, "Schema evolution"); anything else is a foreign file
    file_columns(found, expected, path=path)


def dataset_of(storage: Storage, files: Sequence[DataFile], schema: pa.Schema) -> ds.Dataset:
    """An Arrow dataset of exactly ``files`` (no listing; sizes from the log), for threaded
    scans of a group or a sample, in the *physical* schema of ``schema`` (the names the
    files store columns by; :func:`scan_batches` reads it under the table's names). It
    returns every physical row: rows deletion vectors mark included, so only samples
    read it when a file has one."""
    fs = storage.arrow_filesystem()
    fmt = ds.ParquetFileFormat()
    frags = [
        fmt.make_fragment(storage.full(f.path), filesystem=fs, file_size=f.size_bytes)
        for f in files
    ]
    return ds.FileSystemDataset(frags, mapping.physical_schema(schema), fmt, fs)


def scan_batches(
    storage: Storage,
    files: Sequence[DataFile],
    schema: pa.Schema,
    *,
    columns: Sequence[str] | None = None,
    **options: Any,
) -> Iterator[pa.RecordBatch]:
    """Every physical row of ``files`` as batches of ``columns`` of ``schema`` (default
    all), a threaded scan of :func:`dataset_of` (``options`` go to its ``to_batches``),
    under the table's column names."""
    names = list(schema.names if columns is None else columns)
    sub = pa.schema([schema.field(n) for n in names])
    physical = [mapping.physical_name(f) for f in sub]
    for batch in dataset_of(storage, files, schema).to_batches(columns=physical, **options):
        yield mapping.to_logical(batch, sub)
