"""The predicate tree every front end produces, its row semantics, and the typed file
statistics pruning reads.

Invariants:

* A tree means what :func:`to_expression` makes of it: Arrow's three-valued row
  semantics (a comparison with a null is null; NaN compares false, except that it is
  ``!=`` everything); a row is selected where the filter is true.
* Nodes are frozen values; literals are pyarrow scalars already bound to their
  column's type (see :mod:`.bind`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError

CompareOp: TypeAlias = Literal["=", "!=", "<", "<=", ">", ">="]
NullMatching: TypeAlias = Literal["sql", "match", "skip"]


@dataclass(frozen=True)
class Compare:
    """``column op value``; ``literal_first`` only records the written order
    (``3 < x`` is ``Compare("x", ">", 3, literal_first=True)``)."""

    column: str
    op: CompareOp
    value: pa.Scalar
    literal_first: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class In:
    """``column [not] in values``. ``nulls`` says what a null row gives: ``"sql"``
    null (so ``not in`` never selects it; nulls among the values are ignored);
    ``"match"`` Arrow's default, true if the values hold a null, else false (so
    ``not in`` selects null rows, as pyarrow.parquet's DNF does); ``"skip"`` false."""

    column: str
    values: tuple[pa.Scalar, ...]
    negated: bool = False
    nulls: NullMatching = "sql"


@dataclass(frozen=True)
class IsNull:
    """``column is null`` (``nan_is_null``: NaN counts as null), or ``is not null``
    when ``negated`` (Arrow's ``is_valid``: NaN is valid)."""

    column: str
    negated: bool = False
    nan_is_null: bool = False


@dataclass(frozen=True)
class And:
    """All parts (Kleene logic: false wins over null)."""

    parts: tuple[Predicate, ...]


@dataclass(frozen=True)
class Or:
    """Any part (Kleene logic: true wins over null)."""

    parts: tuple[Predicate, ...]


@dataclass(frozen=True)
class Not:
    part: Predicate


@dataclass(frozen=True)
class Const:
    value: bool


@dataclass(frozen=True)
class Unknown:
    """A condition lakelog does not model: pruning keeps every file. ``expression`` is
    the original pyarrow Expression (rows are still filtered by it)."""

    expression: pc.Expression | None = field(default=None, compare=False, repr=False)


Predicate: TypeAlias = Compare | In | IsNull | And | Or | Not | Const | Unknown
NODES = (Compare, In, IsNull, And, Or, Not, Const, Unknown)
"""Every node class (a value of :data:`Predicate` is an instance of one)."""


@dataclass(frozen=True)
class FileStatsColumns:
    """Partition values and statistics of a set of files, one row per file, typed
    with the table's own types (a column absent from a mapping is unknown)."""

    num_rows: pa.Array
    """int64"""
    partition: Mapping[str, pa.Array]
    """partition column -> exact values (null: the null partition value)"""
    min: Mapping[str, pa.Array]
    """column -> lower bounds (null: unknown; a string may be a prefix)"""
    max: Mapping[str, pa.Array]
    """column -> upper bounds (null: unknown)"""
    null_count: Mapping[str, pa.Array]
    """column -> int64 null counts (null: unknown)"""

    def relabel(self, names: Mapping[str, str]) -> FileStatsColumns:
        """These columns under other names (``names``: old to new; a column not in
        ``names`` is left out, so its statistics are unknown)."""

        def keyed(cols: Mapping[str, pa.Array]) -> dict[str, pa.Array]:
            return {names[k]: v for k, v in cols.items() if k in names}

        return FileStatsColumns(
            num_rows=self.num_rows,
            partition=keyed(self.partition),
            min=keyed(self.min),
            max=keyed(self.max),
            null_count=keyed(self.null_count),
        )


def rename_columns(pred: Predicate, names: Mapping[str, str]) -> Predicate:
    """``pred`` over other column names (``names``: old to new; others kept)."""
    if isinstance(pred, (Compare, In, IsNull)):
        new = names.get(pred.column, pred.column)
        return pred if new == pred.column else replace(pred, column=new)
    if isinstance(pred, And):
        return And(tuple(rename_columns(p, names) for p in pred.parts))
    if isinstance(pred, Or):
        return Or(tuple(rename_columns(p, names) for p in pred.parts))
    if isinstance(pred, Not):
        return Not(rename_columns(pred.part, names))
    return pred


def predicate_columns(pred: Predicate) -> frozenset[str]:
    """Columns whose partition values or statistics pruning ``pred`` reads (an
    :class:`Unknown` part reads none: it keeps every file)."""
    if isinstance(pred, (Compare, In, IsNull)):
        return frozenset((pred.column,))
    if isinstance(pred, (And, Or)):
        return frozenset().union(*(predicate_columns(p) for p in pred.parts))
    if isinstance(pred, Not):
        return predicate_columns(pred.part)
    return frozenset()


# -- row semantics ------------------------------------------------------------------------

FUNCS: dict[str, Callable[..., pc.Expression]] = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}
FLIP: dict[str, CompareOp] = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
NEGATE: dict[str, CompareOp] = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def to_expression(pred: Predicate) -> pc.Expression:
    """A pyarrow Expression selecting the same rows as ``pred``."""
    return _expr(pred, True)


def _expr(pred: Predicate, positive: bool) -> pc.Expression:
    # ``positive``: only the rows where this node is true matter (an even number of NOTs
    # above it), else only those where it is false. Only ``In(nulls="sql")`` needs it.
    if isinstance(pred, Compare):
        column, literal = pc.field(pred.column), pc.scalar(pred.value)
        if pred.literal_first:
            return FUNCS[FLIP[pred.op]](literal, column)
        return FUNCS[pred.op](column, literal)
    if isinstance(pred, In):
        return _in_expr(pred, positive)
    if isinstance(pred, IsNull):
        f = pc.field(pred.column)
        return pc.is_valid(f) if pred.negated else pc.is_null(f, nan_is_null=pred.nan_is_null)
    if isinstance(pred, (And, Or)):
        if not pred.parts:
            return pc.scalar(isinstance(pred, And))
        join = pc.and_kleene if isinstance(pred, And) else pc.or_kleene
        out = _expr(pred.parts[0], positive)
        for part in pred.parts[1:]:
            out = join(out, _expr(part, positive))
        return out
    if isinstance(pred, Not):
        return pc.invert(_expr(pred.part, not positive))
    if isinstance(pred, Const):
        return pc.scalar(bool(pred.value))
    if isinstance(pred, Unknown) and pred.expression is not None:
        return pred.expression
    raise InvalidArgumentError(
        f"expected a predicate with a row form, found {pred!r}; an Unknown() made by hand "
        f"has none: keep the Unknown that parse_filter returned (it holds the expression)."
    )


def value_array(values: Sequence[pa.Scalar]) -> pa.Array:
    """``values`` as one array of the first value's type (an empty list: null-typed)."""
    if not values:
        return pa.array([], pa.null())
    return pa.array(list(values), values[0].type)


def _in_expr(pred: In, positive: bool) -> pc.Expression:
    f = pc.field(pred.column)
    if pred.nulls != "sql":
        found = pc.is_in(f, value_set=value_array(pred.values), skip_nulls=pred.nulls == "skip")
        return pc.invert(found) if pred.negated else found
    # SQL: a null row gives null. Arrow's is_in gives false there, which selects the
    # same rows where only truth matters; elsewhere the null rows are told apart.
    listed = [v for v in pred.values if v.is_valid]
    found = pc.is_in(f, value_set=value_array(listed)) if listed else pc.scalar(False)
    if pred.negated:
        return pc.and_kleene(pc.invert(found), pc.is_valid(f)) if positive else pc.invert(found)
    return found if positive else pc.or_kleene(found, pc.is_null(f, nan_is_null=False))
