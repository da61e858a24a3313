"""A table's rules on Spark's native write path (docs/constraints.md): the rows of the
DataFrame pass through :class:`RowGuard` in the executor tasks that write them, before
Spark's Parquet writer sees them, so a violating row fails its task and the write
commits nothing; the error reaches the driver as the same
:class:`~lakelog.errors.ConstraintViolationError` (:func:`~.errors.carry`).

The other Spark writers (the ``lakelog`` data source, merge, update) write through
:func:`lakelog.io.writer.write_files`, which checks every batch itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from ..io.guards import check_rows, guards_of, refuse_given_identity
from ..io.schema import conform
from .errors import carry

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["RowGuard", "filled_columns", "guarded"]


def filled_columns(schema: pa.Schema, given: Sequence[str]) -> list[str]:
    """The generated columns of ``schema`` a DataFrame of columns ``given`` lacks (the
    guard computes them); refuses values given for a GENERATED ALWAYS identity column
    (the write numbers the rows, ``lakelog.spark.modes.numbered_tasks``)."""
    refuse_given_identity(given, schema, where="the DataFrame")
    return [c for c in guards_of(schema).generated if c not in given]


@carry
class RowGuard:
    """The ``mapInArrow`` body: each batch (the table's columns, by name; generated
    columns the DataFrame lacked hold nulls) with those columns computed, checked
    against the rules, and returned in the DataFrame's own types."""

    def __init__(self, schema: pa.Schema, filled: Sequence[str]) -> None:
        self.schema_bytes = schema.serialize().to_pybytes()
        self.filled = tuple(filled)

    def run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_bytes))
        guards = guards_of(schema)
        for batch in batches:
            if not batch.num_rows:
                yield batch
                continue
            given = batch.drop_columns(list(self.filled)) if self.filled else batch
            rows = conform(given, schema)  # computes the generated columns; NOT NULL
            check_rows(rows, guards)
            if not self.filled:
                yield batch
                continue
            arrays = [
                rows.column(f.name).cast(f.type) if f.name in self.filled else batch.column(i)
                for i, f in enumerate(batch.schema)
            ]
            yield pa.RecordBatch.from_arrays(arrays, schema=batch.schema)


def guarded(frame: DataFrame, schema: pa.Schema, filled: Sequence[str]) -> DataFrame:
    """``frame`` (the columns of ``schema``, in order) through :class:`RowGuard`, or
    ``frame`` itself for a table without rules."""
    if not guards_of(schema) and all(f.nullable for f in schema):
        return frame
    return frame.mapInArrow(RowGuard(schema, filled).run, frame.schema)
