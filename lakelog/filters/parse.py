"""The entry point of the filter language: :func:`parse_filter` turns any accepted
filter into one predicate tree; DNF tuples are read here.

Invariants:

* Every front end gives the same tree for the same condition, with literals bound to
  their column's type by the same rules (:mod:`.bind`); a column the table does not
  have is refused, whatever the form.
* DNF tuples mean what pyarrow.parquet makes of them (``not in`` selects null rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError
from .bind import bind_literal, bind_literals, column_type
from .expressions import decode_expression
from .sql import parse_sql
from .tree import NODES, And, Compare, Const, In, IsNull, Not, Or, Predicate


def parse_filter(filter: object, schema: pa.Schema) -> Predicate | None:
    """``filter`` as a predicate over ``schema`` (None: no filter).

    Accepts a :class:`pyarrow.compute.Expression` (decoded where lakelog understands
    it, :class:`Unknown` where not), DNF tuples as pyarrow.parquet takes them
    (``[("day", "=", d), ("x", "in", [1, 2])]`` or a list of such lists, OR-ed), a
    SQL-like string (``"day = '2026-11-02' and sensor_id between 10 and 20"``), or a
    predicate. Literals of DNF and strings are cast to their column's type.
    """
    if filter is None:
        return None
    if isinstance(filter, NODES):
        _check_columns(filter, schema)
        return filter
    if isinstance(filter, pc.Expression):
        return decode_expression(filter, schema)
    if isinstance(filter, str):
        return parse_sql(filter, schema) if filter.strip() else None
    if isinstance(filter, (list, tuple)):
        return _parse_dnf(filter, schema) if filter else None
    raise InvalidArgumentError(
        f"expected a filter: a pyarrow.compute.Expression, DNF tuples like "
        f"[('col', '>=', 5)], or a string like \"col >= 5 and day = '2026-11-02'\"; "
        f"found {type(filter).__name__}"
    )


def _check_columns(pred: Predicate, schema: pa.Schema) -> None:
    if isinstance(pred, (Compare, In, IsNull)):
        column_type(schema, pred.column, "")
    elif isinstance(pred, (And, Or)):
        for p in pred.parts:
            _check_columns(p, schema)
    elif isinstance(pred, Not):
        _check_columns(pred.part, schema)


# -- DNF tuples ----------------------------------------------------------------------------

_DNF_OPS = {"=": "=", "==": "=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _parse_dnf(filter: Sequence[Any], schema: pa.Schema) -> Predicate:
    def is_term(t: Any) -> bool:
        return isinstance(t, (tuple, list)) and len(t) == 3 and isinstance(t[0], str)

    first = filter[0]
    single = isinstance(first, (tuple, list)) and bool(first) and isinstance(first[0], str)
    groups = [filter] if single else filter
    ors: list[Predicate] = []
    for group in groups:
        if not isinstance(group, (list, tuple)) or not group:
            raise InvalidArgumentError(
                f"expected DNF tuples like [('col', '>=', 5)] or a list of such lists, "
                f"found {group!r} in filter {filter!r}"
            )
        ands: list[Predicate] = []
        for term in group:
            if not is_term(term) or not isinstance(term[1], str):
                raise InvalidArgumentError(
                    f"expected a DNF term (column, op, value) such as ('col', '>=', 5), "
                    f"found {term!r}"
                )
            ands.append(_dnf_term(*term, schema=schema))
        ors.append(ands[0] if len(ands) == 1 else And(tuple(ands)))
    return ors[0] if len(ors) == 1 else Or(tuple(ors))


def _dnf_term(column: str, op: str, value: Any, *, schema: pa.Schema) -> Predicate:
    where = f" in filter term {(column, op, value)!r}"
    t = column_type(schema, column, where)
    key = op.strip().lower()
    if key in ("in", "not in"):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
            raise InvalidArgumentError(
                f"expected a list of values for {op!r}{where}, found {value!r}"
            )
        if not value:  # pyarrow.parquet: nothing is in an empty list, nulls included
            return Const(key == "not in")
        values = bind_literals(column, t, list(value), where)
        return In(column, values, negated=key == "not in", nulls="match")
    if key not in _DNF_OPS:
        raise InvalidArgumentError(
            f"expected a DNF operator (=, ==, !=, <, <=, >, >=, in, not in){where}, found {op!r}"
        )
    return Compare(column, _DNF_OPS[key], bind_literal(column, t, value, where))  # type: ignore[arg-type]
