"""Typed columns of a file set: partition values and statistics in the table's own types.

The file set keeps partition values and statistics as JSON text per file (the
version-1 manifest and commit form). Pruning needs them as typed Arrow arrays, one
row per file, so a filter is a handful of vectorized comparisons instead of one
expression per file. This module builds those arrays from the JSON columns in one
pass of Arrow's JSON reader (C++, multi-threaded): no Python per file.

Conversions follow ``docs/format.md`` ("Statistics"): numbers as numbers, strings
as strings, dates, times and timestamps as their integer physical value, decimals as
strings. A value that does not convert leaves that column's bounds unknown (null),
which keeps files: pruning stays conservative whatever the log holds.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ..filters import FileStatsColumns
from . import mapping

__all__ = [
    "bounded_columns",
    "bounds_type",
    "cast_lenient",
    "concat_stats_columns",
    "filter_stats_columns",
    "parse_json_column",
    "stats_columns",
    "to_type",
    "typed_partitions",
    "typed_stats",
]

log = logging.getLogger("lakelog")

_BLOCK = 1 << 24
_THREADS_FROM = 1 << 20
"""JSON shorter than this is parsed in the calling thread."""


def bounds_type(t: pa.DataType) -> pa.DataType | None:
    """The JSON-side type of a column's bounds (None: the column has no bounds)."""
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return t
    if pa.types.is_floating(t):
        return pa.float64()
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_decimal(t):
        return pa.string()
    if pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t):
        return pa.int64()
    return None


def to_type(values: pa.Array, t: pa.DataType, *, physical: bool = True) -> pa.Array | None:
    """Values in the column's type, or None when they do not convert. ``physical``:
    temporal values are integers (statistics), else their string form (partitions)."""
    try:
        if physical and (pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t)):
            storage = pa.int32() if t.bit_width == 32 else pa.int64()
            return values.cast(storage).cast(t)
        return values.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        log.debug("statistics of a %s column do not convert (%s); treated as unknown", t, e)
        return None


def parse_json_column(column: pa.ChunkedArray | pa.Array, schema: pa.Schema) -> pa.Table:
    """Parse a column of JSON objects (null = ``{}``) into a table of ``schema``."""
    text = pc.fill_null(column.cast(pa.large_string()), "{}")
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    empty, newline = pa.scalar("", pa.large_string()), pa.scalar("\n", pa.large_string())
    lines = pc.binary_join_element_wise(text, empty, newline)
    offsets = np.frombuffer(
        lines.buffers()[1], dtype=np.int64, count=len(lines) + 1, offset=lines.offset * 8
    )
    data = lines.buffers()[2][int(offsets[0]) : int(offsets[-1])]
    return pj.read_json(
        pa.BufferReader(data),
        # threads only for large inputs: a small tail is parsed in the calling thread, so
        # reading a table starts no pool thread that could outlive the interpreter
        read_options=pj.ReadOptions(block_size=_BLOCK, use_threads=len(data) > _THREADS_FROM),
        parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
    )


def bounded_columns(schema: pa.Schema, partition_by: tuple[str, ...]) -> dict[str, pa.DataType]:
    """Columns that can have bounds, with the JSON-side type of their bounds."""
    return {
        f.name: bt
        for f in schema
        if f.name not in partition_by and (bt := bounds_type(f.type)) is not None
    }


def _field(table: pa.Table, struct: str, name: str) -> pa.Array:
    return pc.struct_field(table.column(struct).combine_chunks(), name)


def _safe_parse(column: pa.ChunkedArray | pa.Array, schema: pa.Schema) -> pa.Table:
    """:func:`parse_json_column`, or, when some value does not parse as its field's type
    (a log written by hand or by another tool), the same with every such field null."""
    try:
        return parse_json_column(column, schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        log.debug("log JSON does not parse as %s (%s); parsing value by value", schema, e)
    values = [
        msgspec.json.decode(raw) if raw else {}
        for raw in pc.fill_null(column.cast(pa.large_string()), "{}").to_pylist()
    ]
    return pa.table({f.name: _lenient([_get(v, f.name) for v in values], f.type) for f in schema})


def _get(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else None


def _lenient(values: list[Any], t: pa.DataType) -> pa.Array:
    """Values as an array of ``t``; one that does not convert becomes null."""
    if pa.types.is_struct(t):
        fields = [_lenient([_get(v, f.name) for v in values], f.type) for f in t]
        return pa.StructArray.from_arrays(fields, fields=list(t))
    try:
        return pa.array(values, t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        out = []
        for v in values:
            try:
                out.append(pa.scalar(v, t).as_py())
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                out.append(None)
        return pa.array(out, t)


def cast_lenient(values: pa.Array, t: pa.DataType) -> pa.Array:
    """``values`` cast to ``t``; values that do not convert become null."""
    try:
        return values.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        out = []
        for v in values:
            try:
                out.append(pa.array([v.as_py()], values.type).cast(t)[0].as_py())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                out.append(None)
        return pa.array(out, t)


def typed_partitions(
    column: pa.ChunkedArray | pa.Array, schema: pa.Schema, partition_by: Collection[str]
) -> tuple[dict[str, pa.Array], dict[str, pa.Array]]:
    """Partition values of a column of JSON objects, as strings and in the columns' types
    (a value that does not convert is null in the typed array)."""
    text = pa.schema([pa.field(c, pa.string()) for c in partition_by])
    parsed = _safe_parse(column, text)
    strings = {c: parsed.column(c).combine_chunks() for c in partition_by}
    typed = {c: cast_lenient(strings[c], schema.field(c).type) for c in partition_by}
    return strings, typed


def typed_stats(
    column: pa.ChunkedArray | pa.Array, schema: pa.Schema, partition_by: tuple[str, ...]
) -> tuple[dict[str, pa.Array], dict[str, pa.Array], dict[str, pa.Array]]:
    """Bounds (in the columns' types) and null counts of a column of ``stats`` JSON, for
    the non-partition columns of ``schema``. A column whose bounds do not convert is
    left out of both bound dicts (unknown)."""
    bounds = bounded_columns(schema, partition_by)
    counted = [f.name for f in schema if f.name not in partition_by]
    mins: dict[str, pa.Array] = {}
    maxs: dict[str, pa.Array] = {}
    nulls: dict[str, pa.Array] = {}
    if not bounds and not counted:
        return mins, maxs, nulls
    struct_of = pa.struct([pa.field(name, bt) for name, bt in bounds.items()])
    stats_schema = pa.schema(
        [
            pa.field("min", struct_of),
            pa.field("max", struct_of),
            pa.field("null_count", pa.struct([pa.field(c, pa.int64()) for c in counted])),
        ]
    )
    parsed = _safe_parse(column, stats_schema)
    for name in bounds:
        t = schema.field(name).type
        lo = to_type(_field(parsed, "min", name), t)
        hi = to_type(_field(parsed, "max", name), t)
        if lo is not None and hi is not None:
            mins[name], maxs[name] = lo, hi
    for name in counted:
        nulls[name] = _field(parsed, "null_count", name)
    return mins, maxs, nulls


def stats_columns(
    files: pa.Table,
    schema: pa.Schema,
    partition_by: tuple[str, ...],
    *,
    columns: Collection[str] | None = None,
) -> FileStatsColumns:
    """Typed partition values, bounds and null counts of every file of ``files``
    (a file table, :func:`~lakelog.log.files.files_from_adds`), one row per file; only of
    ``columns`` when given (a filter on partition columns parses no statistics).

    Keyed by the names of ``schema``: with column mapping, the log keys statistics by
    physical name, which are read and then relabelled."""
    if mapping.relabelled(schema):
        to_physical = mapping.physical_names(schema)
        got = stats_columns(
            files,
            mapping.physical_schema(schema),
            partition_by,
            columns=None if columns is None else [to_physical.get(c, c) for c in columns],
        )
        return got.relabel(mapping.logical_names(schema))
    if columns is not None:
        wanted = set(columns)
        partition_by = tuple(c for c in partition_by if c in wanted)
        schema = pa.schema([f for f in schema if f.name in wanted])
    n = files.num_rows
    if not n:  # typed empty columns, so that concatenating keeps every column
        none = pa.array([], pa.int64())
        return FileStatsColumns(
            num_rows=none,
            partition={c: pa.array([], schema.field(c).type) for c in partition_by},
            min={
                c: pa.array([], schema.field(c).type) for c in bounded_columns(schema, partition_by)
            },
            max={
                c: pa.array([], schema.field(c).type) for c in bounded_columns(schema, partition_by)
            },
            null_count={f.name: none for f in schema if f.name not in partition_by},
        )
    partition: dict[str, pa.Array] = {}
    if partition_by:
        _, partition = typed_partitions(files.column("partition"), schema, partition_by)
    mins, maxs, nulls = typed_stats(files.column("stats"), schema, partition_by)
    return FileStatsColumns(
        num_rows=files.column("num_rows").combine_chunks(),
        partition=partition,
        min=mins,
        max=maxs,
        null_count=nulls,
    )


def filter_stats_columns(columns: FileStatsColumns, keep: pa.BooleanArray) -> FileStatsColumns:
    """The rows of ``columns`` where ``keep`` is true."""

    def sub(arrays: Mapping[str, pa.Array]) -> dict[str, pa.Array]:
        return {name: a.filter(keep) for name, a in arrays.items()}

    return FileStatsColumns(
        num_rows=columns.num_rows.filter(keep),
        partition=sub(columns.partition),
        min=sub(columns.min),
        max=sub(columns.max),
        null_count=sub(columns.null_count),
    )


def concat_stats_columns(
    first: FileStatsColumns, second: FileStatsColumns | None
) -> FileStatsColumns:
    """The rows of ``first`` then those of ``second``; a column either side lacks
    (its bounds did not convert) is unknown for all rows."""
    if second is None:
        return first

    def both(a: Mapping[str, pa.Array], b: Mapping[str, pa.Array]) -> dict[str, pa.Array]:
        return {name: pa.concat_arrays([a[name], b[name]]) for name in a.keys() & b.keys()}

    return FileStatsColumns(
        num_rows=pa.concat_arrays([first.num_rows, second.num_rows]),
        partition=both(first.partition, second.partition),
        min=both(first.min, second.min),
        max=both(first.max, second.max),
        null_count=both(first.null_count, second.null_count),
    )
