"""Spark's pushed filters (``pyspark.sql.datasource.Filter``) -> a lakelog predicate.

``spark.read.format("lakelog")`` receives the conjuncts of a query's filter that Spark
can express as data source filters. They prune files through lakelog's own
vectorized pruning; Spark still evaluates every one of them on the rows read, so a
translation only has to *keep every file that holds a row Spark would select*:

* a filter that cannot be translated (an unknown column, a value that does not bind
  to the column's type, a column of a type Arrow does not compare such as an array or
  a struct, a shape lakelog does not model) is left out, which keeps files;
* floating-point columns follow Spark's NaN rules, where NaN is equal to itself and
  greater than every number while lakelog's statistics never count NaN as a bound:
  ``>``, ``>=`` and ``!=`` on them are left out (``=``, ``<``, ``<=``, ``in`` are
  safe);
* a timestamp with a time zone arrives as a naive Python ``datetime`` in the
  session's time zone, which the reader cannot see: its bounds are widened by 14
  hours (the largest UTC offset) on each side.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from ..errors import InvalidArgumentError
from ..filters import And, Compare, In, IsNull, Or, Predicate
from ..filters.bind import bind_literal

__all__ = ["translate_pushed"]

_SLACK = dt.timedelta(hours=14)
_CMP = {
    "EqualTo": "=",
    "GreaterThan": ">",
    "GreaterThanOrEqual": ">=",
    "LessThan": "<",
    "LessThanOrEqual": "<=",
}
_UNSAFE_FOR_FLOATS = {">", ">=", "!="}


def translate_pushed(filters: Iterable[Any], schema: pa.Schema) -> Predicate | None:
    """The AND of the filters lakelog can use for pruning (None: none can)."""
    parts = [p for f in filters if (p := _one(f, schema)) is not None]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def _column(f: Any, schema: pa.Schema) -> tuple[str, pa.DataType] | None:
    path = getattr(f, "attribute", None)
    if not isinstance(path, tuple) or len(path) != 1 or path[0] not in schema.names:
        return None  # a nested field or an unknown column: keep files
    name = path[0]
    return name, schema.field(name).type


def _one(f: Any, schema: pa.Schema) -> Predicate | None:
    kind = type(f).__name__
    if kind == "Not":
        inner = f.child
        inner_kind = type(inner).__name__
        if inner_kind == "EqualTo":
            return _compare(inner, "!=", schema)
        if inner_kind == "In":
            return _in(inner, schema, negated=True)
        if inner_kind in ("IsNull", "IsNotNull"):
            return _one(_flip_null(inner), schema)
        return None
    if kind in _CMP:
        return _compare(f, _CMP[kind], schema)
    if kind == "EqualNullSafe":
        if f.value is None:
            col = _column(f, schema)
            return None if col is None else IsNull(col[0])
        return _compare(f, "=", schema)
    if kind == "In":
        return _in(f, schema, negated=False)
    if kind in ("IsNull", "IsNotNull"):
        col = _column(f, schema)
        if col is None:
            return None
        # Spark's isnull(NaN) is false, and so is lakelog's IsNull without nan_is_null
        return IsNull(col[0], negated=kind == "IsNotNull")
    if kind == "StringStartsWith":
        col = _column(f, schema)
        if col is None or not isinstance(f.value, str) or not f.value:
            return None
        return _compare(f, ">=", schema)
    return None


def _flip_null(f: Any) -> Any:
    from pyspark.sql.datasource import IsNotNull as SparkIsNotNull
    from pyspark.sql.datasource import IsNull as SparkIsNull

    if type(f).__name__ == "IsNull":
        return SparkIsNotNull(f.attribute)
    return SparkIsNull(f.attribute)


def _bind(name: str, t: pa.DataType, value: Any, op: str) -> pa.Scalar | None:
    if value is None:
        return None  # a comparison with null selects nothing in Spark: keep files anyway
    try:
        # also refuses columns Arrow cannot compare (lists, structs, maps), which Spark
        # can: left out, Spark alone evaluates them
        return bind_literal(name, t, value, " (Spark filter pushdown)", op=op)
    except InvalidArgumentError:
        return None


def _zoned(t: pa.DataType, value: Any) -> bool:
    return (
        pa.types.is_timestamp(t)
        and t.tz is not None
        and isinstance(value, dt.datetime)
        and value.tzinfo is None
    )


def _compare(f: Any, op: str, schema: pa.Schema) -> Predicate | None:
    col = _column(f, schema)
    if col is None:
        return None
    name, t = col
    if pa.types.is_floating(t) and op in _UNSAFE_FOR_FLOATS:
        return None
    value = f.value
    if _zoned(t, value):
        lo = _bind(name, t, (value - _SLACK).replace(tzinfo=dt.timezone.utc), ">=")
        hi = _bind(name, t, (value + _SLACK).replace(tzinfo=dt.timezone.utc), "<=")
        if lo is None or hi is None:
            return None
        if op == "=":
            return And((Compare(name, ">=", lo), Compare(name, "<=", hi)))
        if op in (">", ">="):
            return Compare(name, ">=", lo)
        if op in ("<", "<="):
            return Compare(name, "<=", hi)
        return None  # != on a shifted instant says nothing safe
    bound = _bind(name, t, value, op)
    if bound is None:
        return None
    return Compare(name, op, bound)  # type: ignore[arg-type]


def _in(f: Any, schema: pa.Schema, *, negated: bool) -> Predicate | None:
    col = _column(f, schema)
    if col is None:
        return None
    name, t = col
    values: Sequence[Any] = tuple(f.value)
    if any(_zoned(t, v) for v in values):
        if negated:
            return None
        parts = [_compare(_Eq(f.attribute, v), "=", schema) for v in values]
        if any(p is None for p in parts):
            return None
        return Or(tuple(p for p in parts if p is not None))
    if negated and (pa.types.is_floating(t) or any(v is None for v in values)):
        return None  # NaN rules; NOT IN (..., NULL) is never true in Spark: keep files
    bound = [_bind(name, t, v, "in") for v in values if v is not None]
    if not bound or any(b is None for b in bound):
        return None
    return In(name, tuple(b for b in bound if b is not None), negated=negated, nulls="sql")


class _Eq:
    """An ``EqualTo``-shaped value for the translation of one ``IN`` element."""

    def __init__(self, attribute: tuple[str, ...], value: Any) -> None:
        self.attribute = attribute
        self.value = value
