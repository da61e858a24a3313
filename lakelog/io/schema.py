"""Checking incoming data against the table schema before anything is written."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, TypeAlias

import pyarrow as pa

from ..errors import InvalidArgumentError, SchemaMismatchError

__all__ = [
    "Data",
    "check_data_columns",
    "check_schema",
    "conform",
    "duplicate_columns",
    "to_reader",
]

Data: TypeAlias = "pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch]"


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    if a == b:
        return True
    strings = (pa.string(), pa.large_string(), pa.string_view())
    if a in strings and b in strings:
        return True
    binaries = (pa.binary(), pa.large_binary(), pa.binary_view())
    if a in binaries and b in binaries:
        return True
    if pa.types.is_dictionary(a):
        return _same_type(a.value_type, b)
    return False


def check_schema(data_schema: pa.Schema, table_schema: pa.Schema) -> None:
    """Raise :class:`SchemaMismatchError` unless the data fits the table.

    Column order may differ and string/binary widths and dictionary encoding
    are converted; names and types must otherwise match exactly.
    """
    check_data_columns(data_schema)
    problems: list[str] = []
    data_names = set(data_schema.names)
    for field in table_schema:
        if field.name not in data_names:
            problems.append(f"missing column {field.name!r} ({field.type})")
            continue
        got = data_schema.field(field.name).type
        if not _same_type(got, field.type):
            problems.append(f"column {field.name!r}: expected {field.type}, found {got}")
    extra = [n for n in data_schema.names if n not in table_schema.names]
    if extra:
        problems.append(f"unexpected columns {extra}")
    if problems:
        raise SchemaMismatchError(
            "expected data matching the table schema, found: "
            + "; ".join(problems)
            + f". Table schema: {_describe(table_schema)}. Cast or select the columns "
            "to match before writing."
        )


def duplicate_columns(schema: pa.Schema) -> list[str]:
    """Column names that occur more than once in ``schema``."""
    return sorted(n for n, count in Counter(schema.names).items() if count > 1)


def check_data_columns(data_schema: pa.Schema) -> None:
    """Raise :class:`SchemaMismatchError` if incoming data repeats a column name
    (no column could be told apart from its namesake)."""
    dups = duplicate_columns(data_schema)
    if dups:
        raise SchemaMismatchError(
            f"expected distinct column names in the data, found {dups} more than once "
            f"(columns {data_schema.names}); rename or drop the duplicates before writing."
        )


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Reorder and convert a checked batch to exactly ``schema``.

    Nulls in a column that the table's schema or the batch's own schema declares
    non-nullable are a :class:`SchemaMismatchError` (Parquet refuses to write them).
    """
    _check_nulls(batch, schema)
    if batch.schema.equals(schema, check_metadata=False):
        return batch
    arrays = []
    for field in schema:
        col = batch.column(field.name)
        if col.type != field.type:
            col = col.cast(field.type)
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _check_nulls(batch: pa.RecordBatch, schema: pa.Schema) -> None:
    for field in schema:
        own = batch.schema.field(field.name)
        if field.nullable and own.nullable:
            continue
        nulls = batch.column(field.name).null_count
        if nulls:
            whose = "the data's own" if not own.nullable else "the table's"
            raise SchemaMismatchError(
                f"expected no nulls in column {field.name!r}, which {whose} schema declares "
                f"non-nullable, found {nulls} null(s); fill or drop them (or declare the "
                f"column nullable) before writing. Nothing was written."
            )


def to_reader(data: Any) -> pa.RecordBatchReader:
    """A RecordBatchReader over any supported input (streams; no copy)."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return data.to_reader()
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data)
    if isinstance(data, Iterable):
        it: Iterator[Any] = iter(data)
        try:
            first = next(it)
        except StopIteration:
            raise InvalidArgumentError(
                "expected data (a pyarrow Table, RecordBatch, RecordBatchReader or batches), "
                "found an empty iterable; pass a Table with zero rows to write nothing."
            ) from None
        if not isinstance(first, pa.RecordBatch):
            raise InvalidArgumentError(
                f"expected an iterable of pyarrow RecordBatch, found {type(first).__name__}"
            )

        def chain() -> Iterator[pa.RecordBatch]:
            yield first
            yield from it

        return pa.RecordBatchReader.from_batches(first.schema, chain())
    raise InvalidArgumentError(
        f"expected a pyarrow Table, RecordBatch, RecordBatchReader or iterable of batches, "
        f"found {type(data).__name__}"
    )
