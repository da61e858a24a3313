"""Binding literals to column types, shared by the DNF and SQL-like front ends.

Invariants:

* A literal is cast to its column's type only where that keeps its value (a string
  is parsed: ``'2026-11-02'`` for a date column); otherwise it keeps its own type if
  Arrow compares the two (``int_col > 2.5``), else the filter is refused with an
  :class:`~lakelog.errors.InvalidArgumentError` naming the type expected.
* A string is never compared with a non-string column, nor the reverse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError


def _describe(t: pa.DataType) -> str:
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


def bind_literal(column: str, t: pa.DataType, value: Any, where: str) -> pa.Scalar:
    """``value`` as a literal for ``column`` of type ``t``: in ``t`` where that is lossless,
    else in its own type if Arrow compares the two (``int_col > 2.5``)."""
    if value is None:
        return pa.scalar(None, t)

    def refuse() -> InvalidArgumentError:
        return InvalidArgumentError(
            f"expected {_describe(t)} for column {column!r}{where}, found {value!r}; "
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
    column: str, t: pa.DataType, values: Sequence[Any], where: str
) -> tuple[Any, ...]:
    """``values`` bound as by :func:`bind_literal`, all in one type (for ``in`` lists)."""
    scalars = [bind_literal(column, t, v, where) for v in values]
    if len({s.type for s in scalars}) <= 1:
        return tuple(scalars)
    try:  # mixed (5 and 2.5 for an integer column): one type Arrow compares with t
        common = pa.array([s.as_py() for s in scalars])
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        common = None
    if common is None or not _comparable(t, common[0]):
        raise InvalidArgumentError(
            f"expected values of one type ({_describe(t)}) for column {column!r}{where}, "
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
