"""Vectorized pruning: which files may hold a row a predicate selects.

Invariants:

* :func:`prune_mask` is sound: it keeps every file that may hold a selected row.
  Whatever it cannot reason about (:class:`~.tree.Unknown`, values that do not
  compare, missing statistics) keeps files.
* Partition columns are evaluated exactly; other columns through min/max bounds and
  null counts. Bounds never show NaN, so a condition that can select NaN rows keeps
  files of floating columns.
* It runs pyarrow compute over one array per column, never Python per file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from .bind import cast_value, is_nan
from .tree import (
    FUNCS,
    NEGATE,
    And,
    Compare,
    Const,
    FileStatsColumns,
    In,
    IsNull,
    Not,
    Or,
    Predicate,
    Unknown,
    value_array,
)

Mask: TypeAlias = "bool | pa.Array"
"""Per file: may hold a selected row. A Python bool stands for the same value everywhere."""

_ARROW_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


def prune_mask(pred: Predicate, files: FileStatsColumns) -> pa.BooleanArray:
    """Which files may hold a row ``pred`` selects (true: keep), without nulls.

    Partition columns are evaluated exactly; other columns through their bounds and
    null counts, keeping a file wherever these cannot decide (see :mod:`lakelog.filters.prune`).
    """
    n = len(files.num_rows)
    mask = _Pruner(files).may(pred, False)
    if isinstance(mask, bool):
        return pa.repeat(pa.scalar(mask), n)
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks()
    return mask


def _and(a: Mask, b: Mask) -> Mask:
    if a is False or b is False:
        return False
    if a is True:
        return b
    return a if b is True else pc.and_(a, b)


def _or(a: Mask, b: Mask) -> Mask:
    if a is True or b is True:
        return True
    if a is False:
        return b
    return a if b is False else pc.or_(a, b)


def _bound(fn: Callable[..., pa.Array], bounds: pa.Array | None, value: pa.Scalar) -> Mask:
    return True if bounds is None else pc.fill_null(fn(bounds, value), True)


class _Pruner:
    """Evaluates "may a row of this file make the node true (or, ``negate``, false)?"

    Pushing NOT down this way is De Morgan for AND/OR (exact in Kleene logic) and a
    complementary leaf otherwise; a leaf whose negation can select NaN rows (NOT x < 5
    holds for NaN) keeps files of floating columns, whose bounds never show NaN.
    """

    def __init__(self, files: FileStatsColumns) -> None:
        self.files = files

    def may(self, pred: Predicate, negate: bool) -> Mask:
        if isinstance(pred, Not):
            return self.may(pred.part, not negate)
        if isinstance(pred, (And, Or)):
            conjunction = isinstance(pred, And) != negate
            out: Mask = conjunction
            parts: Sequence[Predicate] = pred.parts
            if not conjunction:
                parts, out = self.partition_lists(parts, negate)
            for part in parts:
                m = self.may(part, negate)
                out = _and(out, m) if conjunction else _or(out, m)
                if out is (not conjunction):
                    break
            return out
        if isinstance(pred, Const):
            return bool(pred.value) != negate
        if isinstance(pred, Unknown):
            return True
        try:
            if pred.column in self.files.partition:
                return self.partition(pred, negate)
            if isinstance(pred, Compare):
                return self.compare(pred, negate)
            if isinstance(pred, In):
                return self.is_in(pred, negate)
            return self.is_null(pred, negate)
        except _ARROW_ERRORS:  # values that do not compare: keep
            return True

    # -- partition columns: exact --------------------------------------------------------
    def partition_lists(
        self, parts: Sequence[Predicate], negate: bool
    ) -> tuple[list[Predicate], Mask]:
        """Alternatives ``p = v1 or p = v2 or ...`` on a partition column as one hash
        lookup (a DNF list of partitions); returns the other parts and the lookup's mask."""
        equal = "!=" if negate else "="
        listed: dict[str, list[pa.Scalar]] = {}
        rest: list[Predicate] = []
        for part in parts:
            if (
                isinstance(part, Compare)
                and part.op == equal
                and part.column in self.files.partition
                and part.value.is_valid
                and part.value.type == self.files.partition[part.column].type
                and not pa.types.is_floating(part.value.type)  # hashing: -0.0 is not 0.0
            ):
                listed.setdefault(part.column, []).append(part.value)
            else:
                rest.append(part)
        mask: Mask = False
        for column, values in listed.items():
            if len(values) == 1:
                rest.append(Compare(column, equal, values[0]))  # type: ignore[arg-type]
                continue
            found = pc.is_in(self.files.partition[column], value_set=value_array(values))
            mask = _or(mask, found)
        return rest, mask

    def partition(self, pred: Compare | In | IsNull, negate: bool) -> Mask:
        part = self.files.partition[pred.column]
        if isinstance(pred, Compare):
            result = FUNCS[pred.op](part, pred.value)
            return pc.fill_null(pc.invert(result) if negate else result, False)
        if isinstance(pred, IsNull):
            result = (
                pc.is_valid(part)
                if pred.negated
                else pc.is_null(part, nan_is_null=pred.nan_is_null)
            )
            return pc.invert(result) if negate else result
        if pred.nulls == "sql":
            found = pc.is_in(part, value_set=value_array([v for v in pred.values if v.is_valid]))
            not_found = pc.and_(pc.invert(found), pc.is_valid(part))
        else:
            found = pc.is_in(
                part, value_set=value_array(pred.values), skip_nulls=pred.nulls == "skip"
            )
            not_found = pc.invert(found)
        return found if pred.negated == negate else not_found

    # -- statistics ----------------------------------------------------------------------
    def type_of(self, column: str) -> pa.DataType | None:
        bounds = self.files.min.get(column, self.files.max.get(column))
        return None if bounds is None else bounds.type

    def nan_capable(self, column: str) -> bool:
        t = self.type_of(column)
        return t is None or bool(pa.types.is_floating(t))

    def has_values(self, column: str) -> Mask:
        """Files that may hold a non-null value of ``column``."""
        nulls = self.files.null_count.get(column)
        if nulls is None:
            return True
        return pc.fill_null(pc.not_equal(nulls, self.files.num_rows), True)

    def has_nulls(self, column: str) -> Mask:
        nulls = self.files.null_count.get(column)
        return True if nulls is None else pc.fill_null(pc.greater(nulls, 0), True)

    def compare(self, pred: Compare, negate: bool) -> Mask:
        v = pred.value
        if not v.is_valid:
            return False  # null for every row, negated or not
        values = self.has_values(pred.column)  # nulls never compare true, nor false
        if is_nan(v) or (self.nan_capable(pred.column) and (pred.op == "!=") != negate):
            return values  # may select NaN rows, which bounds do not show
        lo, hi = self.files.min.get(pred.column), self.files.max.get(pred.column)
        op = NEGATE[pred.op] if negate else pred.op
        if op == "=":
            m = _and(_bound(pc.less_equal, lo, v), _bound(pc.greater_equal, hi, v))
        elif op == "!=":
            if lo is None or hi is None:
                m = True
            else:  # only a file whose values all equal v cannot match
                same = pc.and_kleene(pc.equal(lo, v), pc.equal(hi, v))
                m = pc.fill_null(pc.invert(same), True)
        elif op in ("<", "<="):
            m = _bound(FUNCS[op], lo, v)
        else:
            m = _bound(FUNCS[op], hi, v)
        return _and(m, values)

    def is_in(self, pred: In, negate: bool) -> Mask:
        column = pred.column
        lo, hi = self.files.min.get(column), self.files.max.get(column)
        t = self.type_of(column)
        values = [v for v in pred.values if v.is_valid]
        has_null_value = len(values) < len(pred.values)
        if pred.negated == negate:  # rows where is_in is true
            nulls: Mask = pred.nulls == "match" and has_null_value and self.has_nulls(column)
            if any(is_nan(v) for v in values):
                return _or(self.has_values(column), nulls)
            if t is not None:
                cast = [cast_value(v, t) for v in values]
                if any(v is None for v in cast):
                    return True  # compared in another type than is_in would: keep
                values = cast
            found: Mask = False
            for v in values:
                found = _or(
                    found, _and(_bound(pc.less_equal, lo, v), _bound(pc.greater_equal, hi, v))
                )
                if found is True:
                    break
            return _or(_and(found, self.has_values(column)), nulls)
        # rows where is_in is false: non-null values outside the list, and maybe nulls
        nulls = (
            pred.nulls == "skip" or (pred.nulls == "match" and not has_null_value)
        ) and self.has_nulls(column)
        others: Mask = True
        if lo is not None and hi is not None and t is not None and not self.nan_capable(column):
            listed = [cast_value(v, t) for v in values]
            if all(v is not None for v in listed):
                constant = pc.and_kleene(
                    pc.equal(lo, hi), pc.is_in(lo, value_set=pa.array(listed, t))
                )
                others = pc.fill_null(pc.invert(constant), True)
        return _or(_and(others, self.has_values(column)), nulls)

    def is_null(self, pred: IsNull, negate: bool) -> Mask:
        if pred.negated != negate:  # is_valid, or NOT is_null: non-null rows
            return self.has_values(pred.column)
        if pred.negated:  # NOT is_valid: null rows
            return self.has_nulls(pred.column)
        if pred.nan_is_null and self.nan_capable(pred.column):
            return True
        return self.has_nulls(pred.column)
