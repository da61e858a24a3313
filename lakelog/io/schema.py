"""Checking incoming data against the table schema before anything is written, and the
rules of schema evolution: which type changes widen safely, how a ``merge`` write
evolves the schema, and how rows of a file written under an older schema are read
(``docs/format.md``, "Schema evolution")."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeAlias

import pyarrow as pa

from ..errors import InvalidArgumentError, SchemaMismatchError

__all__ = [
    "DROPPED_KEY",
    "Data",
    "check_data_columns",
    "check_schema",
    "conform",
    "dropped_columns",
    "duplicate_columns",
    "file_columns",
    "merge_schema",
    "readable_as",
    "to_reader",
    "widens",
    "with_dropped",
]

DROPPED_KEY = b"lakelog.dropped_columns"
"""Schema metadata key: JSON list of dropped names whose values live files may hold."""

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


_SIGNED = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}
_UNSIGNED = {pa.uint8(): 8, pa.uint16(): 16, pa.uint32(): 32, pa.uint64(): 64}
_FLOATS = {pa.float16(): 16, pa.float32(): 32, pa.float64(): 64}


def widens(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether changing a column from ``source`` to ``target`` is a safe widening: every
    value, and every statistic recorded for files written before (JSON numbers, decimal
    strings), is exactly the same value in ``target`` (format.md, "Schema evolution")."""
    if source == target:
        return False
    if source in _SIGNED:
        w = _SIGNED[source]
        return _SIGNED.get(target, 0) > w or (target == pa.float64() and w <= 32)
    if source in _UNSIGNED:
        w = _UNSIGNED[source]
        return (
            _UNSIGNED.get(target, 0) > w
            or _SIGNED.get(target, 0) > w
            or (target == pa.float64() and w <= 32)
        )
    if source in _FLOATS:
        return _FLOATS.get(target, 0) > _FLOATS[source]
    if pa.types.is_decimal128(source) or pa.types.is_decimal256(source):
        if not (pa.types.is_decimal256(target) or pa.types.is_decimal128(target)):
            return False
        if pa.types.is_decimal256(source) and pa.types.is_decimal128(target):
            return False
        p, sc = source.precision, source.scale  # type: ignore[attr-defined]
        p2, sc2 = target.precision, target.scale  # type: ignore[attr-defined]
        return bool(sc2 >= sc and p2 - sc2 >= p - sc)
    return _same_type(source, target) and not bool(pa.types.is_dictionary(source))


def readable_as(stored: pa.DataType, target: pa.DataType) -> bool:
    """Whether values stored as ``stored`` read as ``target`` without loss: the same type
    (up to string/binary width and dictionary encoding) or a widening of it."""
    return _same_type(stored, target) or widens(stored, target)


def _fits(got: pa.DataType, want: pa.DataType) -> bool:
    """Incoming data of type ``got`` converts to a column of type ``want`` exactly."""
    return readable_as(got, want) or got == pa.null()


def check_schema(data_schema: pa.Schema, table_schema: pa.Schema) -> None:
    """Raise :class:`SchemaMismatchError` unless the data fits the table.

    Column order may differ; string/binary widths, dictionary encoding and types that
    widen to the table's (``int32`` data in an ``int64`` column, a column of nulls) are
    converted; names must otherwise match exactly (see :func:`merge_schema` to evolve).
    """
    check_data_columns(data_schema)
    problems: list[str] = []
    data_names = set(data_schema.names)
    for field in table_schema:
        if field.name not in data_names:
            problems.append(f"missing column {field.name!r} ({field.type})")
            continue
        got = data_schema.field(field.name).type
        if not _fits(got, field.type):
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


def merge_schema(
    table_schema: pa.Schema, data_schema: pa.Schema, *, partition_by: Sequence[str] = ()
) -> pa.Schema:
    """The table schema evolved to take ``data_schema`` (``schema_mode="merge"``).

    Columns the data lacks must be nullable (they are written as nulls); a column whose
    data type widens the table's is widened (a partition column only between integer
    types); a narrower one is converted; the data's new columns are added, nullable,
    after the table's, in the data's order. Anything else is a
    :class:`SchemaMismatchError`. Returns ``table_schema`` itself when nothing changes.
    """
    check_data_columns(data_schema)
    problems: list[str] = []
    fields: list[pa.Field] = []
    changed = False
    for field in table_schema:
        if field.name not in data_schema.names:
            if not field.nullable:
                problems.append(
                    f"missing column {field.name!r}, which is non-nullable ({field.type})"
                )
            fields.append(field)
            continue
        got = data_schema.field(field.name).type
        if _fits(got, field.type):
            fields.append(field)
        elif widens(field.type, got) and _partition_widening_ok(field, got, partition_by):
            fields.append(field.with_type(got))
            changed = True
        else:
            problems.append(
                f"column {field.name!r}: the table has {field.type}, the data {got}, and "
                f"neither widens safely to the other"
            )
    for field in data_schema:
        if field.name in table_schema.names:
            continue
        if field.type == pa.null():
            problems.append(
                f"new column {field.name!r} has type null (no values); cast it to the type "
                f"it should have"
            )
            continue
        fields.append(field.with_nullable(True).remove_metadata())
        changed = True
    if problems:
        raise SchemaMismatchError(
            "expected data that the table schema can take by adding nullable columns or "
            "widening types (schema_mode='merge'), found: "
            + "; ".join(problems)
            + f". Table schema: {_describe(table_schema)}. Cast or select the columns before "
            "writing."
        )
    if not changed:
        return table_schema
    return pa.schema(fields, metadata=table_schema.metadata)


def _partition_widening_ok(
    field: pa.Field, target: pa.DataType, partition_by: Sequence[str]
) -> bool:
    """Partition values are strings in the log: only integer widenings keep their form."""
    if field.name not in partition_by:
        return True
    return bool(pa.types.is_integer(field.type) and pa.types.is_integer(target))


def dropped_columns(schema: pa.Schema) -> list[str]:
    """Names dropped from the table whose values live files may still hold."""
    raw = (schema.metadata or {}).get(DROPPED_KEY)
    if not raw:
        return []
    try:
        names = json.loads(raw)
    except ValueError:
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def with_dropped(schema: pa.Schema, names: Iterable[str]) -> pa.Schema:
    """``schema`` with its dropped-names list set to ``names`` (removed when empty)."""
    meta = dict(schema.metadata or {})
    listed = sorted(set(names))
    if listed:
        meta[DROPPED_KEY] = json.dumps(listed).encode()
    else:
        meta.pop(DROPPED_KEY, None)
    return schema.with_metadata(meta) if meta else schema.remove_metadata()


def file_columns(stored: pa.Schema, expected: pa.Schema, *, path: str) -> list[str]:
    """The columns of ``expected`` that a data file (``stored``: its Arrow schema) holds,
    to read; the others read as nulls (added after the file was written).

    A stored type that does not read as the expected one, or a missing non-nullable
    column, means the file was not written by lakelog for this table:
    :class:`SchemaMismatchError`.
    """
    present: list[str] = []
    problems: list[str] = []
    for field in expected:
        if field.name not in stored.names:
            if not field.nullable:
                problems.append(f"missing non-nullable column {field.name!r}")
            continue
        got = stored.field(field.name).type
        if not readable_as(got, field.type):
            problems.append(f"column {field.name!r}: expected {field.type}, found {got}")
            continue
        present.append(field.name)
    if problems:
        raise SchemaMismatchError(
            f"expected data file {path} to hold the table's columns (or older, narrower "
            f"versions of them), found " + "; ".join(problems) + "; the file was not "
            "written by lakelog for this table."
        )
    return present


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
    names = set(batch.schema.names)
    for field in schema:
        if field.name not in names:  # a nullable column the batch lacks: nulls
            arrays.append(pa.nulls(batch.num_rows, field.type))
            continue
        col = batch.column(field.name)
        if col.type != field.type:
            col = col.cast(field.type)
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _check_nulls(batch: pa.RecordBatch, schema: pa.Schema) -> None:
    names = set(batch.schema.names)
    for field in schema:
        if field.name not in names:
            if not field.nullable:
                raise SchemaMismatchError(
                    f"expected column {field.name!r}, which the table's schema declares "
                    f"non-nullable, found it missing; add it to the data before writing. "
                    f"Nothing was written."
                )
            continue
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
