"""Binding literals to column types, shared by the DNF and SQL-like front ends.

Invariants:

* A literal is cast to its column's type only where that keeps its value (a string
  is parsed: ``'2026-11-02'`` for a date column); otherwise it keeps its own type if
  Arrow compares the two (``int_col > 2.5``), else the filter is refused with an
  :class:`~lakelog.errors.InvalidArgumentError` naming the type expected.
* A string is never compared with a non-string column, nor the reverse.
* A comparison (``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``between``, ``in``) is
  bound only where Arrow has the kernel for the column's type and the literal's type
  (:data:`COMPARABLE`); else it is refused here, with the column and its type, rather
  than by Arrow when the rows are read. ``is null`` / ``is not null`` take any column.
* :func:`~.parse.check_predicate` is the one check of a whole tree against the schema,
  whatever front end made it: every leaf as above, and every :class:`~.tree.Unknown`
  part bound to the schema (Arrow's refusal becomes an ``InvalidArgumentError``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError
from .tree import FUNCS

COMPARABLE = (
    "integers, floating-point numbers, decimals, strings, binary, booleans, dates, times, "
    "timestamps and durations"
)
"""The column types comparisons take, in words (what :func:`comparable` accepts for
the usual types; Arrow's kernels decide at the edges)."""

_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


def describe(t: pa.DataType) -> str:
    if pa.types.is_date(t):
        return "a date such as '2026-11-02'"
    if pa.types.is_timestamp(t):
        zone = " (UTC unless it has an offset such as '+01:00')" if t.tz else ""
        return f"a timestamp such as '2026-11-02 10:30:00'{zone}"
    if pa.types.is_integer(t):
        return "an integer"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "a number"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "a string"
    if pa.types.is_boolean(t):
        return "true or false"
    return f"a {t} value"


def _is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _comparable(t: pa.DataType, s: pa.Scalar) -> bool:
    try:
        pc.equal(pa.array([], t), s)
    except (pa.ArrowException, TypeError, ValueError):
        return False
    return True


def cast_value(s: pa.Scalar, t: pa.DataType) -> pa.Scalar | None:
    """``s`` in type ``t`` when that keeps its value (a string is parsed), else None."""
    try:
        out = s.cast(t)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        if not (_is_text(s.type) and pa.types.is_timestamp(t) and t.tz):
            return None
        try:  # no offset in the text: the instant is UTC
            out = s.cast(pa.timestamp(t.unit)).cast(t)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None
    if _is_text(s.type) or not s.is_valid:
        return out
    try:
        back = out.cast(s.type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    if back.equals(s) or (is_nan(s) and is_nan(back)):
        return out
    return None


def bind_literal(
    column: str, t: pa.DataType, value: Any, where: str, *, op: str = "="
) -> pa.Scalar:
    """``value`` as a literal for ``column`` of type ``t``: in ``t`` where that is lossless,
    else in its own type if Arrow compares the two (``int_col > 2.5``). ``op`` is the
    comparison as written (``between``, ``in`` too): a column of a type it cannot
    compare is refused first (:class:`Uncomparable`)."""
    check_comparable(column, t, op, where)
    if value is None:
        return pa.scalar(None, t)

    def refuse() -> InvalidArgumentError:
        return InvalidArgumentError(
            f"expected {describe(t)} for column {column!r}{where}, found {value!r}; "
            f"write the value in the column's type."
        )

    if isinstance(value, pa.Scalar):
        s = value
    elif _is_text(t):
        if not isinstance(value, str):
            raise refuse()
        return pa.scalar(value, t)
    else:
        try:
            s = pa.scalar(value)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
            raise refuse() from e
    if s.type == t:
        return s
    cast = cast_value(s, t)
    if cast is not None:
        return cast
    if not _is_text(s.type) and not _is_text(t) and _comparable(t, s):
        return s
    raise refuse()


def bind_literals(
    column: str, t: pa.DataType, values: Sequence[Any], where: str, *, op: str = "in"
) -> tuple[Any, ...]:
    """``values`` bound as by :func:`bind_literal`, all in one type (for ``in`` lists)."""
    check_comparable(column, t, op, where)
    scalars = [bind_literal(column, t, v, where, op=op) for v in values]
    if len({s.type for s in scalars}) <= 1:
        return tuple(scalars)
    try:  # mixed (5 and 2.5 for an integer column): one type Arrow compares with t
        common = pa.array([s.as_py() for s in scalars])
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        common = None
    if common is None or not _comparable(t, common[0]):
        raise InvalidArgumentError(
            f"expected values of one type ({describe(t)}) for column {column!r}{where}, "
            f"found {list(values)!r}"
        )
    return tuple(common)


def column_type(schema: pa.Schema, name: str, where: str) -> pa.DataType:
    """The type of column ``name``; refuses a name the table does not have."""
    if name not in schema.names:
        raise InvalidArgumentError(
            f"expected a column of the table{where}, found {name!r}; "
            f"the table's columns are {schema.names}"
        )
    return schema.field(name).type


def is_nan(s: pa.Scalar) -> bool:
    """Whether ``s`` is a floating-point NaN."""
    if not (pa.types.is_floating(s.type) and s.is_valid):
        return False
    v = s.as_py()
    return bool(v != v)


# -- which types compare -------------------------------------------------------------------


def probe_ops(op: str) -> tuple[str, ...]:
    """The kernels a comparison written ``op`` runs (``between`` is ``>=`` and ``<=``)."""
    key = op.strip().lower()
    if key in ("in", "not in"):
        return ("in",)
    if key in ("between", "not between"):
        return (">=", "<=")
    return ({"==": "=", "<>": "!="}.get(key, key),)


@functools.lru_cache(maxsize=512)
def kernel(op: str, t: pa.DataType, other: pa.DataType) -> bool:
    """Whether Arrow evaluates ``op`` between a column of type ``t`` and values of
    type ``other`` (``in``: a value set of type ``other``). Types only: cached."""
    try:
        column = pa.array([], t)
        if op == "in":
            pc.is_in(column, value_set=pa.array([], other))
        else:
            FUNCS[op](column, pa.array([], other))
    except (*_ERRORS, KeyError):
        return False
    return True


@functools.lru_cache(maxsize=512)
def comparable(t: pa.DataType, op: str = "=") -> bool:
    """Whether a column of type ``t`` takes the comparison ``op`` (as written: ``<``,
    ``between``, ``in``...): Arrow has equality and the kernel of ``op`` over two values
    of the type (or of its dictionary's values). Lists, structs, maps, unions,
    intervals, ``float16`` and null-typed columns take none."""
    others = (t, t.value_type) if pa.types.is_dictionary(t) else (t,)
    kernels = dict.fromkeys(("=", *probe_ops(op)))
    return all(any(kernel(k, t, o) for o in others) for k in kernels)


class Uncomparable(InvalidArgumentError):
    """A comparison on a column whose type does not compare. :func:`parse_filter
    <lakelog.filters.parse_filter>` re-raises it as a plain ``InvalidArgumentError``
    that also names the argument the filter came in (:meth:`message`)."""

    def __init__(self, column: str, t: pa.DataType, op: str, where: str) -> None:
        self.column, self.type, self.op, self.where = column, t, op, where
        super().__init__(self.message("filter", None))

    def message(self, argument: str, shown: str | None) -> str:
        """The message for a filter passed as ``argument`` (a keyword such as
        ``where``), whose text is ``shown`` (None: the location says enough)."""
        at = location(self.where, argument, shown)
        return (
            f"expected a column of a type that compares ({COMPARABLE}) for {self.op!r}{at}, "
            f"found column {self.column!r} of type {self.type}; a filter can test a column "
            f"of this type only with 'is null' or 'is not null': select the rows by other "
            f"columns, or by this column's values after reading."
        )


def location(where: str, argument: str, shown: str | None) -> str:
    """Where in a filter: ``where`` (" at column 8") of the filter passed as
    ``argument`` whose text is ``shown`` (None: ``where`` alone)."""
    if shown is None:
        return where
    return f"{where} of {argument}={shown}" if where else f" in {argument}={shown}"


def check_comparable(column: str, t: pa.DataType, op: str, where: str) -> None:
    """Refuse (:class:`Uncomparable`) the comparison ``op`` on ``column`` of type ``t``
    where Arrow cannot compare values of the type."""
    if not comparable(t, op):
        raise Uncomparable(column, t, op, where)
