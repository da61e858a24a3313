"""Per-file statistics from Parquet footers, and pruning of files by a filter.

Pruning hands pyarrow one *guarantee* per file (an expression true for every
row of the file: partition equalities and min/max ranges) and lets pyarrow's
own expression simplification decide which files can match. A min/max range
says nothing about nulls or NaN, so a range is only used where it cannot
hide such a row: always for columns without nulls or NaN-capable types; for
other columns only when the filter cannot select a null or NaN row.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .log.actions import DataFile, FileStats
from .partitioning import partition_expression

__all__ = [
    "Filter",
    "StatsPlan",
    "file_guarantee",
    "stats_from_metadata",
    "stats_scalar",
]

Filter: TypeAlias = "pc.Expression | Sequence[Any] | None"

_NULL_SENSITIVE = re.compile(
    r"is_null|is_valid|is_nan|is_finite|is_inf|coalesce|if_else|case_when|fill_null|"
    r"true_unless_null|invert|not_equal|!=|\bnull\b(?!_)"
)
_MAX_STRING_STAT = 256


def _stat_type_ok(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_time(t)
        or pa.types.is_decimal(t)
    )


def _json_value(value: Any, t: pa.DataType) -> Any:
    """JSON form of a footer statistic (see :class:`FileStats`)."""
    return _json_converter(t)(value)


def _float_value(value: Any) -> Any:
    f = float(value)
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def _string_value(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="strict")
    return str(value)


def _plain_value(value: Any) -> Any:
    return value if isinstance(value, (bool, int, str)) else None


@functools.lru_cache(maxsize=256)
def _json_converter(t: pa.DataType) -> Callable[[Any], Any]:
    """The function turning a footer statistic of type ``t`` into its JSON form, decided
    once per type (footers of many small files are read one after another)."""
    if pa.types.is_floating(t):
        return _float_value
    if pa.types.is_decimal(t):
        return str
    if pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t):
        physical = pa.int64() if t.bit_width == 64 else pa.int32()

        def temporal(value: Any) -> Any:
            if isinstance(value, int):
                return value
            return pa.scalar(value, type=t).cast(physical).as_py()

        return temporal
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _string_value
    return _plain_value


_UNITS = {"milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}


def _raw_decoder(column: pq.ColumnSchema, t: pa.DataType) -> Callable[[Any], Any] | None:
    """How to turn a statistic of ``column`` as its physical type (``min_raw`` and
    ``max_raw``: an int, a float or bytes) into its JSON form, the same that
    :func:`_json_converter` gives from ``Statistics.min``; None where that is not
    certain (then the decoded statistic is used). Only for a Parquet column whose
    physical and logical types say exactly the Arrow type ``t`` the bounds are for: a
    timestamp stored in milliseconds but bounded as microseconds, for one, goes the
    decoded way."""
    physical = column.physical_type
    try:
        logical = json.loads(column.logical_type.to_json())
    except (ValueError, AttributeError):
        return None
    kind = logical.get("Type")
    if pa.types.is_integer(t):
        if physical not in ("INT32", "INT64") or (physical == "INT64") != (t.bit_width == 64):
            return None
        plain = kind == "None" and t in (pa.int32(), pa.int64())
        same = (
            kind == "Int"
            and logical.get("bitWidth") == t.bit_width
            and logical.get("isSigned") == pa.types.is_signed_integer(t)
        )
        if not (plain or same):
            return None
        if pa.types.is_signed_integer(t):
            return _same
        mask = (1 << (64 if physical == "INT64" else 32)) - 1  # stored as signed
        return lambda value: value & mask
    if t == pa.float64() and physical == "DOUBLE" and kind == "None":
        return _float_value
    if t == pa.float32() and physical == "FLOAT" and kind == "None":
        return _float_value
    if (pa.types.is_string(t) or pa.types.is_large_string(t)) and (
        physical == "BYTE_ARRAY" and kind == "String"
    ):
        return _string_value
    if pa.types.is_timestamp(t) and physical == "INT64" and kind == "Timestamp":
        unit = _UNITS.get(logical.get("timeUnit", ""))
        utc = bool(logical.get("isAdjustedToUTC"))
        return _same if unit == t.unit and utc == (t.tz is not None) else None
    if t == pa.date32() and physical == "INT32" and kind == "Date":
        return _same
    return None


def _same(value: Any) -> Any:
    return value


class StatsPlan:
    """What :func:`stats_from_metadata` works out once per schema: for each column of
    the schema the footer has, its index, whether it gets bounds, the converter of its
    statistics and, where certain, how to take them as their physical type (several
    times cheaper than pyarrow's decoded ``min``/``max``). Files written alike share
    one (``lakelog.interop.footers``). ``raw=False``: always the decoded statistics."""

    __slots__ = ("columns", "num_columns")

    def __init__(self, metadata: pq.FileMetaData, schema: pa.Schema, *, raw: bool = True) -> None:
        pq_schema = metadata.schema
        self.num_columns = metadata.num_columns
        index = {pq_schema.column(i).path: i for i in range(self.num_columns)}
        self.columns = tuple(
            (
                f.name,
                index[f.name],
                _stat_type_ok(f.type),
                _json_converter(f.type),
                _raw_decoder(pq_schema.column(index[f.name]), f.type) if raw else None,
            )
            for f in schema
            if f.name in index
        )


def stats_from_metadata(
    metadata: pq.FileMetaData, schema: pa.Schema, *, plan: StatsPlan | None = None
) -> FileStats:
    """Combine the row-group statistics of a footer into file statistics.

    Only top-level primitive columns get bounds; a column any row group lacks
    bounds for gets none (unknown), but its null count is kept when known.
    ``plan``: one made for this schema and a footer with the same columns.
    """
    if plan is None or plan.num_columns != metadata.num_columns:
        plan = StatsPlan(metadata, schema)
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    no_bounds: set[str] = set()
    no_nulls: set[str] = set()
    for rg in range(metadata.num_row_groups):
        group = metadata.row_group(rg)
        for name, i, bounded, convert, raw in plan.columns:
            st = group.column(i).statistics
            if st is None:
                no_bounds.add(name)
                no_nulls.add(name)
                continue
            null_count = st.null_count
            if null_count is None:
                no_nulls.add(name)
            else:
                nulls[name] = nulls.get(name, 0) + null_count
            if not bounded or name in no_bounds:
                no_bounds.add(name)
                continue
            if not st.has_min_max:
                if null_count is not None and st.num_values == 0:
                    continue  # all-null row group: no bounds needed
                no_bounds.add(name)
                continue
            try:
                if raw is None:
                    lo, hi = convert(st.min), convert(st.max)
                else:
                    lo, hi = raw(st.min_raw), raw(st.max_raw)
            except (ValueError, TypeError, UnicodeDecodeError, pa.ArrowException):
                no_bounds.add(name)
                continue
            if lo is None or hi is None:
                no_bounds.add(name)
                continue
            have = mins.get(name)
            if have is None or lo < have:
                mins[name] = lo
            have = maxs.get(name)
            if have is None or hi > have:
                maxs[name] = hi
    for name in no_bounds:
        mins.pop(name, None)
        maxs.pop(name, None)
    for name in no_nulls:
        nulls.pop(name, None)
    for name, v in list(maxs.items()):
        if isinstance(v, str) and len(v) > _MAX_STRING_STAT:
            del mins[name], maxs[name]  # a truncated max would be wrong; keep none
    for name, v in list(mins.items()):
        if isinstance(v, str) and len(v) > _MAX_STRING_STAT:
            mins[name] = v[:_MAX_STRING_STAT]  # a prefix is still a lower bound
    return FileStats(min=mins, max=maxs, null_count=nulls)


def stats_scalar(value: Any, t: pa.DataType) -> pa.Scalar:
    """Typed scalar of a JSON statistic for a column of type ``t``."""
    if pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t):
        storage = pa.int32() if t.bit_width == 32 else pa.int64()
        return pa.scalar(int(value), storage).cast(t)
    if pa.types.is_decimal(t):
        return pa.scalar(decimal.Decimal(value), t)
    return pa.scalar(value, t)


def stats_python_value(value: Any, t: pa.DataType) -> Any:
    """Python value (datetime, Decimal, ...) of a JSON statistic."""
    return stats_scalar(value, t).as_py()


def filter_is_null_sensitive(expr: pc.Expression | None) -> bool:
    """True if the filter might select a row because a value is null or NaN."""
    return expr is not None and bool(_NULL_SENSITIVE.search(str(expr)))


def file_guarantee(
    f: DataFile,
    schema: pa.Schema,
    *,
    columns: Iterable[str] | None = None,
    null_safe: bool = True,
) -> pc.Expression | None:
    """An expression true for every row of ``f``.

    ``null_safe=True`` uses a min/max range only where the column has no
    nulls and cannot hold NaN, so it is safe for reading too; ``False`` uses
    every range, which is right only for filters that cannot select null or
    NaN rows (see :func:`filter_is_null_sensitive`).
    """
    expr = partition_expression(schema, f.partition) if f.partition else None
    st = f.stats
    if st is None:
        return expr
    wanted = set(columns) if columns is not None else None
    for name, lo in st.min.items():
        if wanted is not None and name not in wanted:
            continue
        hi = st.max.get(name)
        if hi is None or name not in schema.names:
            continue
        t = schema.field(name).type
        nulls = st.null_count.get(name)
        if null_safe and (nulls is None or nulls > 0 or pa.types.is_floating(t)):
            continue
        try:
            term = (pc.field(name) >= stats_scalar(lo, t)) & (pc.field(name) <= stats_scalar(hi, t))
        except (pa.ArrowException, ValueError, TypeError, decimal.InvalidOperation):
            continue
        expr = term if expr is None else expr & term
    for name, n in st.null_count.items():
        if wanted is not None and name not in wanted:
            continue
        if name in schema.names and name not in st.min and n == f.num_rows and n > 0:
            term = pc.field(name).is_null()
            expr = term if expr is None else expr & term
    return expr


def referenced_columns(expr: pc.Expression, names: Sequence[str]) -> list[str]:
    """Columns a filter may refer to (a superset found by name)."""
    text = str(expr)
    return [n for n in names if n in text]


def utc_ms(value: dt.datetime) -> int:
    """Milliseconds since the epoch of a datetime (naive means UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return int(value.timestamp() * 1000)


def filter_may_select_nan(expr: pc.Expression, schema: pa.Schema) -> bool:
    """Whether ``expr`` may select NaN values of a floating-point column (``is_nan``,
    ``!=``, a negation). Arrow's Parquet row-group statistics leave NaN out, and its
    statistics test trusts them: ``f != 0`` over ``[0.0, NaN]`` given to a scan (or to
    ``ParquetFileFragment.subset(filter=...)``) returns nothing (pyarrow 26). Readers
    filter such reads after the scan instead."""
    text = str(expr)
    if not any(tok in text for tok in ("is_nan", "!=", "invert", "not_equal")):
        return False
    return any(pa.types.is_floating(f.type) and f.name in text for f in schema)
