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

__all__ = ["translate_column", "translate_pushed"]

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


# -- a Spark Connect Column --------------------------------------------------------------

_CONNECT_CMP = {"==": "EqualTo", ">": "GreaterThan", ">=": "GreaterThanOrEqual"}
_CONNECT_CMP.update({"<": "LessThan", "<=": "LessThanOrEqual"})
_MIRROR = {"==": "==", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_COMPLEMENT = {"==": "!=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def translate_column(column: Any, schema: pa.Schema) -> tuple[Predicate | None, list[str]]:
    """A Spark Connect Column's filter as a lakelog predicate for pruning, from the
    Column's own unresolved expression tree (``column._expr``; no server round trip),
    and the parts of it left out (each as Spark prints it).

    The common forms are read: comparisons of a column with a literal, ``IN``,
    ``IS [NOT] NULL``, ``<=>`` with null, a boolean column, and ``AND``/``OR``/``NOT``
    over them (a ``NOT`` is pushed down to the leaves, ``NOT (a < 1)`` is ``a >= 1``).
    Each leaf goes through the rules of Spark's pushed filters (:func:`translate_pushed`:
    NaN, zoned timestamps, values that do not bind). A part left out keeps files: under
    ``AND`` it drops out, under ``OR`` the whole ``OR`` does (None: prune nothing)."""
    unused: list[str] = []
    expr = getattr(column, "_expr", None)
    if expr is None:
        return None, [str(column)]
    return _node(expr, schema, False, unused), unused


def _node(e: Any, schema: pa.Schema, negate: bool, unused: list[str]) -> Predicate | None:
    kind = type(e).__name__
    name = str(getattr(e, "_name", "")) if kind == "UnresolvedFunction" else ""
    args = list(getattr(e, "_args", ())) if kind == "UnresolvedFunction" else []
    if name in ("and", "or") and len(args) == 2:
        parts = [_node(a, schema, negate, unused) for a in args]
        conjunction = (name == "and") != negate  # De Morgan under a NOT
        if conjunction:
            kept = [p for p in parts if p is not None]
            if not kept:
                return None
            return kept[0] if len(kept) == 1 else And(tuple(kept))
        if any(p is None for p in parts):
            return None
        return Or(tuple(p for p in parts if p is not None))
    if name == "not" and len(args) == 1:
        return _node(args[0], schema, not negate, unused)
    try:
        found = _leaf(kind, name, args, e, schema, negate)
    except Exception:  # noqa: BLE001 - any surprise in a leaf: it keeps files
        found = None
    if found is None:
        unused.append(("NOT " if negate else "") + _spark_text(e))
    return found


_INFIX = {"==", "<", "<=", ">", ">=", "<=>", "and", "or", "+", "-", "*", "/", "%"}


def _spark_text(e: Any) -> str:
    """A Connect expression as SQL-like text: ``(length(s) > 1)``, ``(NOT (id IN (1, 2)))``."""
    kind = type(e).__name__
    if kind == "ColumnReference":
        return str(e.name())
    if kind == "LiteralExpression":
        ok, value = _literal(e)
        return repr(value) if ok and not isinstance(value, (dt.date, dt.datetime)) else repr(e)
    if kind != "UnresolvedFunction":
        return repr(e)
    name, args = str(e._name), [_spark_text(a) for a in e._args]
    if name in _INFIX and len(args) == 2:
        op = name.upper() if name in ("and", "or") else name
        return f"({args[0]} {op} {args[1]})"
    if name == "not" and len(args) == 1:
        return f"(NOT {args[0]})"
    if name == "in" and args:
        return f"({args[0]} IN ({', '.join(args[1:])}))"
    if name in ("isNull", "isNotNull") and len(args) == 1:
        return f"({args[0]} IS {'NOT ' if name == 'isNotNull' else ''}NULL)"
    return f"{name}({', '.join(args)})"


def _leaf(
    kind: str, name: str, args: list[Any], e: Any, schema: pa.Schema, negate: bool
) -> Predicate | None:
    from pyspark.sql import datasource as ds

    if kind == "ColumnReference":  # a boolean column on its own
        attr = _reference(e, schema)
        if attr is None or not pa.types.is_boolean(schema.field(attr[0]).type):
            return None
        return _one(ds.EqualTo(attr, not negate), schema)
    if name in _CONNECT_CMP and len(args) == 2:
        op, attr, lit = name, _reference(args[0], schema), args[1]
        if attr is None:
            op, attr, lit = _MIRROR[name], _reference(args[1], schema), args[0]
        if attr is None:
            return None
        ok, value = _literal(lit)
        if not ok or value is None:
            return None
        if negate:
            op = _COMPLEMENT[op]
        if op == "!=":
            return _one(ds.Not(ds.EqualTo(attr, value)), schema)
        return _one(getattr(ds, _CONNECT_CMP[op])(attr, value), schema)
    if name == "<=>" and len(args) == 2 and not negate:
        attr, (ok, value) = _reference(args[0], schema), _literal(args[1])
        if attr is None:
            attr, (ok, value) = _reference(args[1], schema), _literal(args[0])
        return None if attr is None or not ok else _one(ds.EqualNullSafe(attr, value), schema)
    if name == "in" and len(args) >= 2:
        attr = _reference(args[0], schema)
        values = [_literal(a) for a in args[1:]]
        if attr is None or not all(ok for ok, _ in values):
            return None
        found = ds.In(attr, tuple(v for _, v in values))
        return _one(ds.Not(found) if negate else found, schema)
    if name in ("isNull", "isNotNull") and len(args) == 1:
        attr = _reference(args[0], schema)
        if attr is None:
            return None
        null = (name == "isNull") != negate
        return _one(ds.IsNull(attr) if null else ds.IsNotNull(attr), schema)
    return None


def _reference(e: Any, schema: pa.Schema) -> tuple[str] | None:
    """The table column a ``ColumnReference`` names (Spark resolves names without regard
    to case unless told otherwise: a unique case-insensitive match counts)."""
    if type(e).__name__ != "ColumnReference":
        return None
    raw = str(e.name())
    if len(raw) >= 2 and raw.startswith("`") and raw.endswith("`"):
        name = raw[1:-1].replace("``", "`")
        if "`" in raw[1:-1].replace("``", ""):
            return None  # several backquoted parts: a struct field
    elif "." in raw or "`" in raw:
        return None  # a struct field or a qualified name
    else:
        name = raw
    if name in schema.names:
        return (name,)
    folded = [n for n in schema.names if n.lower() == name.lower()]
    return (folded[0],) if len(folded) == 1 else None


def _literal(e: Any) -> tuple[bool, Any]:
    """(True, the Python value) of a ``LiteralExpression``; (False, None) otherwise."""
    if type(e).__name__ != "LiteralExpression":
        return False, None
    value, t = e._value, type(e._dataType).__name__
    if value is None:
        return True, None
    if t == "DateType":
        return True, dt.date(1970, 1, 1) + dt.timedelta(days=int(value))
    if t == "TimestampType":  # microseconds since the epoch, an instant
        return True, _EPOCH_UTC + dt.timedelta(microseconds=int(value))
    if t == "TimestampNTZType":
        return True, dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=int(value))
    if t in ("ArrayType", "DayTimeIntervalType", "TimeType", "NullType"):
        return False, None
    return True, value
