"""The value of a ``SET col = <expr>`` as the row-level API takes it: a Python literal or
a pyarrow Expression over the row's columns (arithmetic, comparisons, AND/OR/NOT,
IS NULL, CAST, COALESCE, string concatenation); a MERGE's ``WHEN MATCHED AND`` condition
likewise. Anything else is an :class:`~lakelog.errors.UnsupportedStatementError`
naming the expression.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from .parser import DIALECT, arrow_type, unsupported

_ARITH = {
    exp.Add: "add_checked",
    exp.Sub: "subtract_checked",
    exp.Mul: "multiply_checked",
    exp.EQ: "equal",
    exp.NEQ: "not_equal",
    exp.GT: "greater",
    exp.GTE: "greater_equal",
    exp.LT: "less",
    exp.LTE: "less_equal",
    exp.And: "and_kleene",
    exp.Or: "or_kleene",
}


def literal(value: exp.Expression) -> tuple[bool, Any]:
    """(True, the Python value) when ``value`` is a constant."""
    if isinstance(value, exp.Literal):
        if value.is_string:
            return True, str(value.this)
        text = str(value.this)
        return True, float(text) if any(c in text for c in ".eE") else int(text)
    if isinstance(value, exp.Boolean):
        return True, bool(value.this)
    if isinstance(value, exp.Null):
        return True, None
    if isinstance(value, exp.Neg):
        ok, inner = literal(value.this)
        if ok and isinstance(inner, int | float):
            return True, -inner
    return False, None


def set_value(value: exp.Expression, clause: str) -> Any:
    """A literal, or a pyarrow Expression."""
    ok, v = literal(value)
    return v if ok else expression(value, clause)


def expression(value: exp.Expression, clause: str) -> pc.Expression:
    ok, v = literal(value)
    if ok:
        return pc.scalar(v)
    if isinstance(value, exp.Paren):
        return expression(value.this, clause)
    if isinstance(value, exp.Column):
        return pc.field(value.name)
    for kind, fn in _ARITH.items():
        if isinstance(value, kind):
            return pc.Expression._call(
                fn, [expression(value.this, clause), expression(value.expression, clause)]
            )
    if isinstance(value, exp.Div):
        left = expression(value.this, clause).cast(pa.float64())
        return pc.Expression._call("divide", [left, expression(value.expression, clause)])
    if isinstance(value, exp.Neg):
        return pc.Expression._call("negate_checked", [expression(value.this, clause)])
    if isinstance(value, exp.Not):
        return pc.Expression._call("invert", [expression(value.this, clause)])
    if isinstance(value, exp.In) and not value.args.get("query"):
        options = [expression(v, clause) for v in value.expressions]
        target = expression(value.this, clause)
        out = pc.Expression._call("equal", [target, options[0]])
        for o in options[1:]:
            out = pc.Expression._call("or_kleene", [out, pc.Expression._call("equal", [target, o])])
        return out
    if isinstance(value, exp.Between):
        target = expression(value.this, clause)
        low = pc.Expression._call("greater_equal", [target, expression(value.args["low"], clause)])
        high = pc.Expression._call("less_equal", [target, expression(value.args["high"], clause)])
        return pc.Expression._call("and_kleene", [low, high])
    if isinstance(value, exp.Is) and isinstance(value.expression, exp.Null):
        return pc.Expression._call("is_null", [expression(value.this, clause)])
    if isinstance(value, exp.Cast):
        return expression(value.this, clause).cast(arrow_type(value.to, value.sql(DIALECT)))
    if isinstance(value, exp.Coalesce):
        args = [value.this, *value.expressions]
        return pc.Expression._call("coalesce", [expression(a, clause) for a in args])
    if isinstance(value, exp.DPipe | exp.Concat):
        args = [value.this, value.expression] if isinstance(value, exp.DPipe) else value.expressions
        parts = [expression(a, clause) for a in args]
        return pc.Expression._call("binary_join_element_wise", [*parts, pc.scalar("")])
    raise unsupported(
        f"the expression {value.sql(DIALECT)!r} in {clause}",
        "lakelog computes literals, columns, + - * /, comparisons, IN, BETWEEN, AND, OR, NOT, "
        "IS NULL, CAST, COALESCE and || there",
    )


def _parse_text(text: str, parameter: str) -> exp.Expr:
    """``text`` parsed as a Spark SQL expression; one that does not parse is an
    :class:`~lakelog.errors.InvalidArgumentError` naming ``parameter``."""
    from sqlglot import ParseError, parse_one

    from ..errors import InvalidArgumentError

    try:
        return parse_one(text, read=DIALECT)
    except ParseError as e:
        raise InvalidArgumentError(
            f"expected {parameter} to be a Spark SQL expression, found {text!r}: "
            f"{str(e).splitlines()[0]}"
        ) from None


def from_text(text: str, parameter: str, columns: list[str]) -> Any:
    """A Spark SQL expression given as text (``"v * 2"``, ``"'closed'"``) as
    :func:`set_value` gives it, for callers that cannot have Spark analyse it (Spark
    Connect: a client sees no plan); ``parameter`` names it in errors, ``columns`` are
    the table's (an unknown one is refused with the closest)."""
    import difflib

    from ..errors import InvalidArgumentError

    tree = _parse_text(text, parameter)
    for column in tree.find_all(exp.Column):
        if column.name not in columns:
            close = difflib.get_close_matches(column.name, columns, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidArgumentError(
                f"expected {parameter} to name columns of the table {columns}, found "
                f"{column.name!r}{hint} in {text!r}; a text value is SQL: write \"'{text}'\" "
                f"for the string itself"
            )
    return set_value(tree, parameter)  # type: ignore[arg-type]


def merge_text(text: str, parameter: str, schema: pa.Schema) -> Any:
    """A merge clause's condition or value given as Spark SQL text, as :func:`set_value`
    gives it: columns of the target bare (or ``target.<col>``), the source's as
    ``source.<col>``; ``schema`` holds the columns the clause may use (the source's named
    ``source.<col>``). An unknown column or a text that does not parse is an
    :class:`~lakelog.errors.InvalidArgumentError` naming ``parameter``."""
    import difflib

    from ..errors import InvalidArgumentError

    tree = _parse_text(text, parameter)
    names = schema.names
    for column in list(tree.find_all(exp.Column)):
        side = column.table.lower()
        name = column.name if side in ("", "target") else f"{side}.{column.name}"
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidArgumentError(
                f"expected {parameter} to use the columns {names}, found {name!r}{hint} in "
                f"{text!r}; a text value is SQL: write \"'{text}'\" for the string itself"
            )
        new = exp.column(name, quoted=True)
        if column is tree:
            tree = new
        else:
            column.replace(new)
    return set_value(tree, parameter)  # type: ignore[arg-type]
