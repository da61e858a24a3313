"""The entry point of the filter language: :func:`parse_filter` turns any accepted
filter into one predicate tree; DNF tuples are read here.

Invariants:

* Every front end gives the same tree for the same condition, with literals bound to
  their column's type by the same rules (:mod:`.bind`); a column the table does not
  have is refused, whatever the form.
* DNF tuples mean what pyarrow.parquet makes of them (``not in`` selects null rows).
* Whatever the form, the tree is checked against the schema here, once
  (:func:`check_predicate`): a filter Arrow could not evaluate over the table (a
  comparison on a list, struct or map column, a literal of a type its column does not
  compare with, an unmodelled part that does not bind) is an
  :class:`~lakelog.errors.InvalidArgumentError` naming the column and its type, never
  an Arrow error when the rows are read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..errors import InvalidArgumentError
from .bind import (
    COMPARABLE,
    Uncomparable,
    bind_literal,
    bind_literals,
    check_comparable,
    column_type,
    comparable,
    describe,
    kernel,
    location,
    probe_ops,
)
from .expressions import decode_expression, expression_columns
from .sql import parse_sql
from .tree import NODES, And, Compare, Const, In, IsNull, Not, Or, Predicate, Unknown, to_expression

_ARROW_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)

DNFTerm: TypeAlias = tuple[str, str, Any]
"""One DNF term as pyarrow.parquet takes it: ``(column, operator, value)``."""

DNF: TypeAlias = Sequence[DNFTerm] | Sequence[Sequence[DNFTerm]]
"""DNF tuples: a list of terms (AND-ed), or a list of such lists (OR-ed)."""

FilterLike: TypeAlias = pc.Expression | str | DNF | Predicate | None
"""Every form of filter lakelog takes (:func:`parse_filter`): a pyarrow Expression, a
SQL-like string (``"day = '2026-11-02' and n > 5"``), :data:`DNF` tuples, a parsed
:data:`Predicate`, or None (no filter)."""

PartitionFilterLike: TypeAlias = pc.Expression | DNF | None
"""What a maintenance ``partition_filter`` takes: a pyarrow Expression or :data:`DNF`
tuples over partition columns only, or None (the whole table)."""


def parse_filter(
    filter: object, schema: pa.Schema, *, argument: str = "filter"
) -> Predicate | None:
    """``filter`` as a predicate over ``schema`` (None: no filter).

    Accepts a :class:`pyarrow.compute.Expression` (decoded where lakelog understands
    it, :class:`Unknown` where not), DNF tuples as pyarrow.parquet takes them
    (``[("day", "=", d), ("x", "in", [1, 2])]`` or a list of such lists, OR-ed), a
    SQL-like string (``"day = '2026-11-02' and sensor_id between 10 and 20"``), or a
    predicate. Literals of DNF and strings are cast to their column's type. The tree
    is checked against ``schema`` (:func:`check_predicate`); ``argument`` is the
    caller's name for the filter in messages (``where``: ``where='tags > 1'``).
    """
    if filter is None:
        return None
    shown: str | None = None
    try:
        if isinstance(filter, NODES):
            pred: Predicate | None = filter
        elif isinstance(filter, pc.Expression):
            shown = str(filter)
            pred = decode_expression(filter, schema)
        elif isinstance(filter, str):
            shown = repr(filter)
            pred = parse_sql(filter, schema) if filter.strip() else None
        elif isinstance(filter, (list, tuple)):
            pred = _parse_dnf(filter, schema) if filter else None
        else:
            raise InvalidArgumentError(
                f"expected a filter: a pyarrow.compute.Expression, DNF tuples like "
                f"[('col', '>=', 5)], or a string like \"col >= 5 and day = '2026-11-02'\"; "
                f"found {type(filter).__name__}"
            )
        if pred is not None:
            check_predicate(pred, schema, argument=argument, shown=shown)
    except Uncomparable as e:
        raise InvalidArgumentError(e.message(argument, shown)) from None
    return pred


class ReadFilter(NamedTuple):
    """A filter parsed once for one read (:func:`read_filter`): lakelog's predicate, which
    prunes files and row groups, and the row expression that filters rows. Both None:
    no filter. Every step of a read takes this, so a filter is parsed once per read."""

    predicate: Predicate | None
    expression: pc.Expression | None


def read_filter(filter: FilterLike | ReadFilter, schema: pa.Schema) -> ReadFilter:
    """``filter`` parsed for a read over ``schema`` (:func:`parse_filter`), or ``filter``
    itself when it is a :class:`ReadFilter` already. A pyarrow Expression is kept as the
    row expression (pyarrow evaluates what lakelog does not model)."""
    if isinstance(filter, ReadFilter):
        return filter
    pred = parse_filter(filter, schema)
    if pred is None:
        return ReadFilter(None, None)
    return ReadFilter(pred, filter if isinstance(filter, pc.Expression) else to_expression(pred))


def check_predicate(
    pred: Predicate, schema: pa.Schema, *, argument: str = "filter", shown: str | None = None
) -> None:
    """Refuse a tree Arrow could not evaluate over ``schema``, whatever front end made
    it: a column the table lacks, a comparison on a column whose type does not compare
    (:class:`~.bind.Uncomparable`), a literal of a type Arrow does not compare with its
    column, :class:`Unknown` parts Arrow does not bind to the schema. ``argument`` and
    ``shown`` name the filter in messages (``where='id > 5'``)."""
    unknown: list[Unknown] = []
    _check_leaves(pred, schema, argument, shown, unknown)
    if unknown and all(u.expression is not None for u in unknown):
        _check_unknown(pred, unknown, schema, argument, shown)


def _check_leaves(
    pred: Predicate, schema: pa.Schema, argument: str, shown: str | None, unknown: list[Unknown]
) -> None:
    if isinstance(pred, (And, Or)):
        for p in pred.parts:
            _check_leaves(p, schema, argument, shown, unknown)
    elif isinstance(pred, Not):
        _check_leaves(pred.part, schema, argument, shown, unknown)
    elif isinstance(pred, IsNull):
        column_type(schema, pred.column, "")
    elif isinstance(pred, (Compare, In)):
        _check_comparison(pred, schema, argument, shown)
    elif isinstance(pred, Unknown):
        unknown.append(pred)


def _check_comparison(
    pred: Compare | In, schema: pa.Schema, argument: str, shown: str | None
) -> None:
    t = column_type(schema, pred.column, "")
    op = pred.op if isinstance(pred, Compare) else "in"
    check_comparable(pred.column, t, op, "")
    values = [pred.value] if isinstance(pred, Compare) else [v for v in pred.values if v.is_valid]
    if not values:
        return
    v = values[0]  # an In's values are one array: one type
    if not all(kernel(k, t, v.type) for k in probe_ops(op)):
        raise InvalidArgumentError(
            f"expected {describe(t)} for column {pred.column!r}"
            f"{location('', argument, shown)}, found {_value(v)} of type {v.type}, which Arrow "
            f"does not compare with {t}; write the value in the column's type."
        )


def _value(s: pa.Scalar) -> str:
    try:
        return repr(s.as_py())
    except _ARROW_ERRORS:
        return str(s)


def _check_unknown(
    pred: Predicate, unknown: list[Unknown], schema: pa.Schema, argument: str, shown: str | None
) -> None:
    """Bind the row expression of ``pred``, whose ``unknown`` parts lakelog does not
    model, to ``schema`` now: Arrow's refusal is an ``InvalidArgumentError`` here, naming
    the part it refuses, not an Arrow error when the rows are read."""
    empty = schema.empty_table()
    try:
        empty.filter(to_expression(pred))
        return
    except _ARROW_ERRORS as e:
        refused: Exception = e
        culprit = to_expression(pred)
    for u in unknown:  # the part Arrow refuses, if one is refused on its own
        if u.expression is None:
            continue
        try:
            ds.dataset(empty).to_table(columns={"v": u.expression})
        except _ARROW_ERRORS as e:
            refused, culprit = e, u.expression
            break
    names = [n for n in expression_columns(culprit) if n in schema.names]
    odd = [n for n in names if not comparable(schema.field(n).type)]
    typed = ", ".join(f"{n!r} of type {schema.field(n).type}" for n in (odd or names))
    if odd:
        advice = (
            f"{'column' if len(odd) == 1 else 'columns'} {typed} "
            f"{'compares' if len(odd) == 1 else 'compare'} with nothing: comparisons work on "
            f"columns of {COMPARABLE}; test a column of another type only with 'is null' or "
            f"'is not null', with a function of its values (such as "
            f"pyarrow.compute.list_value_length), or by its values after reading."
        )
    else:
        noun = "column" if len(names) == 1 else "columns"
        advice = f"it uses {f'{noun} {typed}' if typed else 'no column of the table'}."
    part = str(culprit)
    found = f"{argument}={part}" if part == shown else f"{part}{location('', argument, shown)}"
    raise InvalidArgumentError(
        f"expected a filter Arrow can evaluate over the table's columns, found {found}, "
        f"which Arrow refuses ({' '.join(str(refused).split())}); {advice}"
    ) from refused


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
        values = bind_literals(column, t, list(value), where, op=key)
        return In(column, values, negated=key == "not in", nulls="match")
    if key not in _DNF_OPS:
        raise InvalidArgumentError(
            f"expected a DNF operator (=, ==, !=, <, <=, >, >=, in, not in){where}, found {op!r}"
        )
    bound = bind_literal(column, t, value, where, op=key)
    return Compare(column, _DNF_OPS[key], bound)  # type: ignore[arg-type]
