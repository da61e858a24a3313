"""Reading one data file of a table as full rows, a batch at a time.

Partition columns are not stored in data files: they are added to every batch as
constants from the log's partition values, so predicates and updates see whole
rows. Memory holds one batch (at most ``BATCH_ROWS`` rows of the columns asked
for), never a whole file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ..errors import DataFileMissingError, InvalidArgumentError
from ..io.schema import conform, file_columns
from ..log.actions import AddFile, DataFile
from ..partitioning import partition_scalar
from ..storage import Storage

__all__ = ["BATCH_ROWS", "evaluate", "read_rows"]

BATCH_ROWS = 65536


def read_rows(
    storage: Storage,
    file: DataFile | AddFile,
    schema: pa.Schema,
    partition_by: Sequence[str],
    *,
    columns: Sequence[str] | None = None,
    version: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``file`` as batches of ``columns`` (default: every column of
    ``schema``, in its order), partition columns filled in from the log.

    A file deleted outside lakelog is a :class:`DataFileMissingError`.
    """
    names = list(schema.names if columns is None else columns)
    out = pa.schema([schema.field(n) for n in names])
    stored = [n for n in names if n not in partition_by]
    stored_schema = pa.schema([schema.field(n) for n in stored])
    constants = {
        n: partition_scalar(file.partition.get(n), schema.field(n).type)
        for n in names
        if n in partition_by
    }
    fs = storage.arrow_filesystem()
    try:
        source = fs.open_input_file(storage.full(file.path))
    except FileNotFoundError as e:
        raise missing_file(storage, file.path, version) from e
    with source:
        pf = pq.ParquetFile(source, pre_buffer=False)
        # columns added after the file was written read as nulls (conform), narrower
        # types widen (docs/format.md, "Schema evolution")
        present = file_columns(pf.schema_arrow, stored_schema, path=file.path)
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=present, use_threads=False):
            if not batch.num_rows:
                continue
            rows = conform(batch, stored_schema) if stored else batch
            yield _with_constants(rows, out, constants)


def _with_constants(
    batch: pa.RecordBatch, schema: pa.Schema, constants: Mapping[str, pa.Scalar]
) -> pa.RecordBatch:
    if not constants:
        return batch
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


def evaluate(
    batch: pa.RecordBatch, expressions: Mapping[str, pc.Expression]
) -> dict[str, pa.Array]:
    """Each expression evaluated over the rows of ``batch`` (Arrow's row semantics)."""
    try:
        table = ds.dataset(pa.Table.from_batches([batch])).to_table(
            columns=dict(expressions), use_threads=False
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise InvalidArgumentError(
            f"expected expressions Arrow can compute over the table's rows, found an error "
            f"computing {', '.join(f'{k}: {v}' for k, v in expressions.items())}: {e}"
        ) from e
    return {name: table.column(name).combine_chunks() for name in expressions}


def matched(mask: pa.Array) -> pa.BooleanArray:
    """A filter result as a plain mask: rows where it is null do not match."""
    out = pc.fill_null(mask, False)
    assert isinstance(out, pa.BooleanArray)
    return out
