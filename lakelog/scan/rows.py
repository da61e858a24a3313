"""Reading one data file of a table as full rows, a batch at a time.

Partition columns are not stored in data files: they are added to every batch as
constants from the log's partition values, so predicates and updates see whole
rows. Columns added after the file was written read as nulls and narrower types
widen (``docs/format.md``, "Schema evolution"). Rows the file's deletion vector
marks are dropped (format.md, "Deletion vectors"): every reader of rows goes
through here or applies :func:`~lakelog.log.deletion_vectors.keep_mask` itself.
Memory holds one batch (at most ``batch_size`` rows of the columns asked for),
never a whole file.
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import threads
from ..errors import DataFileMissingError
from ..io.schema import conform, file_columns
from ..log import mapping
from ..log.actions import AddFile, DataFile
from ..log.deletion_vectors import keep_mask
from ..partitioning import partition_scalar
from ..stats import referenced_columns
from ..storage import Storage

__all__ = ["BATCH_ROWS", "live_batches", "missing_file", "read_positions", "read_rows"]

BATCH_ROWS = 65536
READ_WORKERS = max(1, min(4, os.cpu_count() or 1))
"""Files :func:`live_batches` reads at once."""


def read_rows(
    storage: Storage,
    file: DataFile | AddFile,
    schema: pa.Schema,
    partition_by: Sequence[str],
    *,
    columns: Sequence[str] | None = None,
    version: int | None = None,
    batch_size: int = BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """The live rows of ``file`` as batches of ``columns`` (default: every column of
    ``schema``, in its order), partition columns filled in from the log.

    A file deleted outside lakelog is a :class:`DataFileMissingError`.
    """
    rows = read_positions(
        storage, file, schema, partition_by, columns=columns, version=version, batch_size=batch_size
    )
    yield from (batch for batch, _ in rows)


def read_positions(
    storage: Storage,
    file: DataFile | AddFile,
    schema: pa.Schema,
    partition_by: Sequence[str],
    *,
    columns: Sequence[str] | None = None,
    version: int | None = None,
    batch_size: int = BATCH_ROWS,
) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
    """As :func:`read_rows`, each batch with the physical positions of its rows in the
    file (int64; what a deletion vector records)."""
    names = list(schema.names if columns is None else columns)
    out = mapping.strip(pa.schema([schema.field(n) for n in names]))
    stored = [n for n in names if n not in partition_by]
    stored_schema = pa.schema([schema.field(n) for n in stored])
    # files store columns under their physical names (format.md, "Column ids")
    physical = mapping.physical_schema(stored_schema)
    constants = {
        n: partition_scalar(file.partition.get(n), schema.field(n).type)
        for n in names
        if n in partition_by
    }
    keep = keep_mask(file.deleted, file.num_rows, path=file.path)
    fs = storage.arrow_filesystem()
    try:
        source = fs.open_input_file(storage.full(file.path))
    except FileNotFoundError as e:
        raise missing_file(storage, file.path, version) from e
    start = 0
    with source:
        pf = pq.ParquetFile(source, pre_buffer=False)
        present = file_columns(pf.schema_arrow, physical, path=file.path)
        for batch in pf.iter_batches(batch_size=batch_size, columns=present, use_threads=False):
            n = batch.num_rows
            if not n:
                continue
            positions = np.arange(start, start + n, dtype=np.int64)
            start += n
            if keep is not None:
                live = keep[start - n : start]
                if not live.all():
                    if not live.any():
                        continue
                    batch = batch.filter(pa.array(live))
                    positions = positions[live]
            rows = mapping.to_logical(conform(batch, physical), stored_schema) if stored else batch
            yield _with_constants(rows, out, constants), positions


def live_batches(
    storage: Storage,
    files: Sequence[DataFile],
    schema: pa.Schema,
    partition_by: Sequence[str],
    *,
    columns: Sequence[str] | None,
    filter: pc.Expression | None,
    version: int | None = None,
    batch_size: int = BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """The live rows of ``files`` that match ``filter``, as batches of ``columns``, in
    the order of ``files``. Files are read by up to :data:`READ_WORKERS` threads, at most
    twice that many ahead of the consumer (memory: that many files' matching rows)."""
    names = list(schema.names if columns is None else columns)
    wide = names
    if filter is not None:
        wanted = referenced_columns(filter, schema.names)
        wide = [*names, *(c for c in wanted if c not in names)]

    def one(f: DataFile) -> list[pa.RecordBatch]:
        out: list[pa.RecordBatch] = []
        for batch in read_rows(
            storage, f, schema, partition_by, columns=wide, version=version, batch_size=batch_size
        ):
            if filter is not None:
                got = pa.Table.from_batches([batch]).filter(filter).select(names)
                out.extend(b for b in got.to_batches() if b.num_rows)
            elif batch.num_rows:
                out.append(batch)
        return out

    if not files:
        return
    workers = min(READ_WORKERS, len(files))
    with threads.pool("lakelog-read", workers) as pool:
        pending: deque[Future[list[pa.RecordBatch]]] = deque()
        todo = iter(files)
        try:
            for f in itertools.islice(todo, 2 * workers):
                pending.append(pool.submit(one, f))
            while pending:
                got = pending.popleft().result()
                nxt = next(todo, None)
                if nxt is not None:
                    pending.append(pool.submit(one, nxt))
                yield from got
        finally:
            for fu in pending:
                fu.cancel()


def _with_constants(
    batch: pa.RecordBatch, schema: pa.Schema, constants: Mapping[str, pa.Scalar]
) -> pa.RecordBatch:
    if not constants:
        if not batch.num_columns or batch.schema.equals(schema, check_metadata=True):
            return batch  # (a batch of no columns keeps its row count)
        return pa.RecordBatch.from_arrays(batch.columns, schema=schema)
    n = batch.num_rows
    arrays = [
        pa.repeat(constants[f.name], n) if f.name in constants else batch.column(f.name)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def missing_file(storage: Storage, path: str, version: int | None) -> DataFileMissingError:
    which = "" if version is None else f"which version {version} of {storage.uri} references, "
    return DataFileMissingError(
        f"expected data file {path!r}, {which}found it missing: it was deleted outside "
        f"lakelog. Restore it from a backup, or overwrite the rows or partition it held.",
        path=path,
        version=-1 if version is None else version,
    )
