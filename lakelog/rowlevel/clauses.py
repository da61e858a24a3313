"""A merge's WHEN clauses: what happens to matched target rows, to source rows no target
row matched (inserts) and to target rows no source row matched, each clause with an
optional condition, as Delta Lake's ``MERGE`` has them.

Clauses of one kind are tried in order and the first whose condition holds applies (a
null condition does not hold); only the last clause of a kind may lack a condition. A
row no clause applies to is left alone (a target row) or not inserted (a source row).

Conditions and values are over the target row's columns (their names) and the source
row's (``source.<col>``): a pyarrow Expression (``pc.field("source.amount")``), a Spark
SQL string (``"source.amount > amount"``, read by a text reader the caller gives: the
facade passes :mod:`lakelog.sql.values`), a Python literal for a value, or DNF tuples /
lakelog's filter text for a condition when no text reader is given. Insert clauses see
only the source row; ``WHEN NOT MATCHED BY SOURCE`` clauses only the target row.

:class:`Clauses` checks a merge's clauses against the table before anything is read and
evaluates them over a batch of rows; the embedded merge and the Spark merge's tasks use
the same code.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..errors import InvalidArgumentError, SchemaMismatchError
from ..io.guards import regenerate, stale_generated
from ..io.schema import conform
from .predicate import Where, check_assignments
from .read import evaluate, matched

__all__ = [
    "Clauses",
    "MergeClause",
    "TextReader",
    "When",
    "legacy",
    "when_matched_delete",
    "when_matched_update",
    "when_not_matched_by_source_delete",
    "when_not_matched_by_source_update",
    "when_not_matched_insert",
]

SOURCE = "source."
"""How conditions and values name the source row's columns (``source.amount``)."""

When = Literal["matched", "not_matched", "not_matched_by_source"]
Action = Literal["update", "delete", "insert"]

TextReader = Callable[[str, str, pa.Schema], Any]
"""Reads a Spark SQL string (the text, the parameter it came from, the columns it may
use) into a Python literal or a pyarrow Expression."""

_OPTION = {
    "matched": "when_matched",
    "not_matched": "when_not_matched",
    "not_matched_by_source": "when_not_matched_by_source",
}

KEEP, UPDATE, DELETE = 0, 1, 2
"""What happens to a target row (:meth:`Clauses.decide`)."""


@dataclasses.dataclass(frozen=True, eq=False)
class MergeClause:
    """One ``WHEN`` clause of a merge (made by :func:`when_matched_update` and its kin).

    Attributes:
        when: ``"matched"``, ``"not_matched"`` or ``"not_matched_by_source"``.
        action: ``"update"``, ``"delete"`` or ``"insert"``.
        values: the columns to set and their new values; None for every column from the
            source row (``UPDATE SET *``, ``INSERT *``).
        condition: the clause applies only to rows where it holds; None: to every row.
    """

    when: When
    action: Action
    values: Mapping[str, Any] | None = None
    condition: Any = None

    def describe(self) -> dict[str, Any]:
        """The clause as the commit header records it (JSON values)."""
        out: dict[str, Any] = {"action": self.action}
        if self.values is not None:
            out["values"] = {k: _text(v) for k, v in self.values.items()}
        if self.condition is not None:
            out["condition"] = _text(self.condition)
        return out


def _text(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def when_matched_update(
    set: Mapping[str, Any] | None = None, *, condition: Any = None
) -> MergeClause:
    """``WHEN MATCHED [AND condition] THEN UPDATE SET ...``: matched target rows get the
    values of ``set`` (a mapping of columns to values over the target row and
    ``source.<col>``), or with ``set=None`` every column of the source row."""
    return MergeClause("matched", "update", _mapping(set, "when_matched_update(set=)"), condition)


def when_matched_delete(*, condition: Any = None) -> MergeClause:
    """``WHEN MATCHED [AND condition] THEN DELETE``."""
    return MergeClause("matched", "delete", None, condition)


def when_not_matched_insert(
    values: Mapping[str, Any] | None = None, *, condition: Any = None
) -> MergeClause:
    """``WHEN NOT MATCHED [AND condition] THEN INSERT ...``: a source row no target row
    matched is inserted with ``values`` (columns to values over ``source.<col>``; the
    columns it leaves out are null), or with ``values=None`` as it is."""
    return MergeClause(
        "not_matched", "insert", _mapping(values, "when_not_matched_insert(values=)"), condition
    )


def when_not_matched_by_source_update(
    set: Mapping[str, Any], *, condition: Any = None
) -> MergeClause:
    """``WHEN NOT MATCHED BY SOURCE [AND condition] THEN UPDATE SET ...``: target rows no
    source row matched get the values of ``set`` (over the target row's columns)."""
    mapped = _mapping(set, "when_not_matched_by_source_update(set=)")
    if mapped is None:
        raise InvalidArgumentError(
            "expected when_not_matched_by_source_update(set=) to map columns to new values "
            "(there is no source row to take them from), found None"
        )
    return MergeClause("not_matched_by_source", "update", mapped, condition)


def when_not_matched_by_source_delete(*, condition: Any = None) -> MergeClause:
    """``WHEN NOT MATCHED BY SOURCE [AND condition] THEN DELETE``."""
    return MergeClause("not_matched_by_source", "delete", None, condition)


def _mapping(value: Any, parameter: str) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not value:
        raise InvalidArgumentError(
            f"expected {parameter} to map column names to new values, such as "
            f"{{'status': \"'closed'\"}}, or None, found {value!r}"
        )
    return dict(value)


def legacy(when: When, value: Any) -> list[MergeClause]:
    """A merge option's string form (``when_matched="update"``...) as clauses."""
    allowed = {
        "matched": {"update": [when_matched_update()], "delete": [when_matched_delete()]},
        "not_matched": {"insert": [when_not_matched_insert()]},
        "not_matched_by_source": {"delete": [when_not_matched_by_source_delete()]},
    }[when]
    if value is None or value == "ignore":
        return []
    if isinstance(value, str) and value in allowed:
        return list(allowed[value])
    if isinstance(value, MergeClause):
        value = [value]
    if isinstance(value, (list, tuple)):
        return list(value)
    listed = ", ".join(repr(a) for a in (*allowed, "ignore"))
    raise InvalidArgumentError(
        f"expected {_OPTION[when]} to be one of {listed} or a list of clauses such as "
        f"[lakelog.{_OPTION[when]}_...(...)], found {value!r}"
    )


@dataclasses.dataclass
class _Compiled:
    clause: MergeClause
    condition: pc.Expression | None
    values: dict[str, pa.Scalar | pc.Expression] | None


class Clauses:
    """A merge's clauses checked against the table: the conditions and values bound to
    the target's columns and the source's (``source.<col>``), refused before anything is
    read when a clause is out of place, names an unknown column or has the wrong type.

    ``extra`` are source columns beyond the table's (Spark computes Column values into
    them); ``text`` reads SQL strings (None: conditions use lakelog's filter text and a
    string value is a literal)."""

    def __init__(
        self,
        schema: pa.Schema,
        keys: Sequence[str],
        matched: Sequence[Any],
        not_matched: Sequence[Any],
        by_source: Sequence[Any],
        *,
        extra: pa.Schema | None = None,
        missing: Sequence[str] = (),
        kept: Sequence[str] = (),
        text: TextReader | None = None,
    ) -> None:
        self.schema = schema
        self.keys = tuple(keys)
        self.text = text
        self.missing = tuple(missing)
        """Columns of the table the source lacks (no ``*`` clause may then be given)."""
        self.kept = tuple(kept)
        """Columns of the table the source lacks that ``*`` clauses take elsewhere (an
        identity column: ``UPDATE SET *`` keeps the target's value, ``INSERT *`` leaves it
        null for the write to number)."""
        source = [*(f for f in schema if f.name not in self.missing), *(extra or [])]
        src = [pa.field(SOURCE + f.name, f.type) for f in source]
        self.source_schema = pa.schema(source)
        self.both = pa.schema([*schema, *src])
        self._schemas = {
            "matched": self.both,
            "not_matched": pa.schema(src),
            "not_matched_by_source": schema,
        }
        self.matched = self._compile("matched", matched)
        self.not_matched = self._compile("not_matched", not_matched)
        self.by_source = self._compile("not_matched_by_source", by_source)

    # -- checks --------------------------------------------------------------------------

    def _compile(self, when: When, clauses: Sequence[Any]) -> list[_Compiled]:
        option = _OPTION[when]
        out: list[_Compiled] = []
        for i, c in enumerate(clauses):
            if not isinstance(c, MergeClause) or c.when != when:
                kind = c.when if isinstance(c, MergeClause) else type(c).__name__
                raise InvalidArgumentError(
                    f"expected {option}= to hold {option}_... clauses (such as "
                    f"lakelog.{option}_{'insert' if when == 'not_matched' else 'delete'}()), "
                    f"found {c!r} ({kind}) at position {i}"
                )
            if c.condition is None and i < len(clauses) - 1:
                raise InvalidArgumentError(
                    f"expected a condition on every {option} clause but the last (a clause "
                    f"without one applies to every row, so the clauses after it never "
                    f"would), found clause {i + 1} of {len(clauses)} ({c.action}) without "
                    f"a condition; add condition= or move it last"
                )
            where = f"{option} clause {i + 1} ({c.action})"
            lacking = [m for m in self.missing if m not in self.kept]
            if c.values is None and c.action != "delete" and lacking:
                raise InvalidArgumentError(
                    f"expected the source to hold every column of the table for the {where}, "
                    f"which takes every column from the source row (UPDATE SET * / INSERT *), "
                    f"found it lacks {lacking}; name the columns to set instead"
                )
            cond = None if c.condition is None else self._condition(when, c.condition, where)
            values = None if c.values is None else self._values(when, c, where)
            out.append(_Compiled(c, cond, values))
        return out

    def _names(self, when: When) -> str:
        if when == "not_matched":
            return "the source row's columns as source.<col>"
        if when == "not_matched_by_source":
            return "the target row's columns"
        return "the target row's columns and the source row's as source.<col>"

    def _read(self, value: str, parameter: str, when: When) -> Any:
        assert self.text is not None
        return self.text(value, parameter, self._schemas[when])

    def _condition(self, when: When, value: Any, where: str) -> pc.Expression:
        schema = self._schemas[when]
        parameter = f"the condition of the {where}"
        if isinstance(value, str) and self.text is not None:
            value = self._read(value, parameter, when)
            if not isinstance(value, pc.Expression):
                value = pc.scalar(value)
        if isinstance(value, pc.Expression):
            got = self._type(value, when, parameter)
            if not (pa.types.is_boolean(got) or pa.types.is_null(got)):
                raise InvalidArgumentError(
                    f"expected {parameter} to be true or false per row, found a value of "
                    f"type {got} ({value})"
                )
            return value
        try:
            return Where(value, schema, operation="MERGE").expression
        except InvalidArgumentError as e:
            raise InvalidArgumentError(
                f"expected {parameter} over {self._names(when)}: {e}"
            ) from None

    def _type(self, value: pc.Expression, when: When, parameter: str) -> pa.DataType:
        schema = self._schemas[when]
        try:
            return ds.dataset(schema.empty_table()).to_table(columns={"v": value}).schema[0].type
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            first = str(e).splitlines()[0]
            hint = ""
            if "No match for FieldRef" in first:
                other = [n for n in self.both.names if n not in schema.names and n in str(value)]
                close = difflib.get_close_matches(first.split("(")[-1].rstrip(")"), schema.names)
                hint = (
                    f"; it may use only {self._names(when)}"
                    + (f" (not {other})" if other else "")
                    + (f"; close names: {close}" if close else "")
                )
            raise InvalidArgumentError(
                f"expected {parameter} to be an expression over {schema.names}, found "
                f"{value}: {first}{hint}"
            ) from None

    def _values(
        self, when: When, c: MergeClause, where: str
    ) -> dict[str, pa.Scalar | pc.Expression]:
        assert c.values is not None
        schema = self._schemas[when]
        plain: dict[str, Any] = {}
        for name, value in c.values.items():
            if not isinstance(name, str) or name not in self.schema.names:
                close = difflib.get_close_matches(str(name), self.schema.names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise InvalidArgumentError(
                    f"expected columns of the table in the values of the {where}, found "
                    f"{name!r}{hint}; the table's columns are {self.schema.names}"
                )
            if c.action == "update" and name in self.keys:
                raise InvalidArgumentError(
                    f"expected the {where} to leave the key columns {list(self.keys)} alone "
                    f"(a matched row keeps its key), found {name!r}"
                )
            parameter = f"the value of {name!r} in the {where}"
            if isinstance(value, str) and self.text is not None:
                value = self._read(value, parameter, when)
            if isinstance(value, pc.Expression):
                self._type(value, when, parameter)
            plain[name] = value
        # the values' types against the columns', each expression over ``schema``
        typed = pa.schema(
            [*(self.schema.field(n) for n in plain), *(f for f in schema if f.name not in plain)]
        )
        values, _ = check_assignments(typed, plain, argument=where)
        return values

    # -- the clauses as the merge uses them -----------------------------------------------

    @property
    def noop(self) -> bool:
        return not (self.matched or self.not_matched or self.by_source)

    @property
    def plain_update(self) -> bool:
        """Whether matched rows can only be updated with the source row as it is (or
        deleted): new rows are then source rows, and no target value is needed."""
        return all(c.values is None for c in self.matched) and not any(
            c.clause.action == "update" for c in self.by_source
        )

    @property
    def plain_insert(self) -> bool:
        """Whether every unmatched source row is inserted as it is."""
        return len(self.not_matched) == 1 and (
            self.not_matched[0].condition is None and self.not_matched[0].values is None
        )

    def target_columns(self) -> tuple[str, ...]:
        """The target columns the matched clauses' conditions read (with the keys, what a
        probe of matched rows needs)."""
        text = " ".join(str(c.condition) for c in self.matched if c.condition is not None)
        return tuple(n for n in self.schema.names if n in text.replace(SOURCE, "\x00"))

    def describe(self, when: When) -> list[dict[str, Any]]:
        kind = {"matched": self.matched, "not_matched": self.not_matched}.get(when, self.by_source)
        return [c.clause.describe() for c in kind]

    def decide(
        self, target: pa.RecordBatch, source: pa.Table, idx: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per row of ``target`` (matched to source row ``idx``, -1: none): KEEP, UPDATE
        or DELETE, and which clause decided (-1: none; matched clauses count from 0,
        ``not_matched_by_source`` ones after them)."""
        n = target.num_rows
        action = np.full(n, KEEP, dtype=np.int8)
        which = np.full(n, -1, dtype=np.int64)
        hit = idx >= 0
        for offset, clauses, rows in (
            (0, self.matched, np.flatnonzero(hit)),
            (len(self.matched), self.by_source, np.flatnonzero(~hit)),
        ):
            if not clauses or not len(rows):
                continue
            needs = any(c.condition is not None for c in clauses)
            both = self.combined(target.take(pa.array(rows)), source, idx[rows]) if needs else None
            pending = np.ones(len(rows), dtype=bool)
            for i, c in enumerate(clauses):
                take = pending.copy()
                if c.condition is not None:
                    assert both is not None
                    mask = matched(evaluate(both, {"c": c.condition})["c"])
                    take &= np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
                pending &= ~take
                action[rows[take]] = DELETE if c.clause.action == "delete" else UPDATE
                which[rows[take]] = offset + i
                if not pending.any():
                    break
        return action, which

    def combined(self, target: pa.RecordBatch, source: pa.Table, idx: np.ndarray) -> pa.RecordBatch:
        """Target rows beside their source rows (``source.<col>``; null where idx < 0)."""
        missing = idx < 0
        take = pa.array(np.maximum(idx, 0), mask=missing if missing.any() else None)
        src = source.take(take)
        arrays = list(target.columns)
        names = list(target.schema.names)
        for f in self.source_schema:
            arrays.append(src.column(f.name).combine_chunks())
            names.append(SOURCE + f.name)
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def new_rows(
        self,
        target: pa.RecordBatch,
        source: pa.Table,
        idx: np.ndarray,
        which: np.ndarray,
        rows: np.ndarray,
    ) -> pa.RecordBatch:
        """The new values of the target ``rows`` (positions in ``target``, in order) that
        their clause (``which``) updates: every column of the table."""
        every = [*self.matched, *self.by_source]
        parts: list[pa.Table] = []
        order: list[np.ndarray] = []
        for i in np.unique(which[rows]).tolist():
            sel = rows[which[rows] == i]
            c = every[i]
            if c.values is None:
                part = source.take(pa.array(idx[sel])).select(self.schema.names)
                for name in self.kept:  # the target's own value
                    i = self.schema.get_field_index(name)
                    part = part.set_column(
                        i, self.schema.field(i), target.column(name).take(pa.array(sel))
                    )
            else:
                rows_i = target.take(pa.array(sel))
                both = self.combined(rows_i, source, idx[sel])
                new = self._assigned(rows_i, both, c.values)
                stale = stale_generated(self.schema, c.values)
                if stale:  # computed again from the new values, as Delta does
                    new = regenerate(conform(new, self.schema), self.schema, stale)
                part = pa.Table.from_batches([new])
            parts.append(part.cast(self.schema) if part.schema != self.schema else part)
            order.append(sel)
        if not parts:
            return _empty(self.schema)
        out = pa.concat_tables(parts)
        perm = np.argsort(np.concatenate(order), kind="stable")
        taken = out.take(pa.array(perm)).combine_chunks().to_batches()
        return taken[0] if taken else _empty(self.schema)

    def _assigned(
        self,
        rows: pa.RecordBatch,
        both: pa.RecordBatch,
        values: Mapping[str, pa.Scalar | pc.Expression],
    ) -> pa.RecordBatch:
        """``rows`` (the table's columns, or none for an insert) with ``values`` computed
        over ``both``; a column neither gives is null."""
        exprs = {c: v for c, v in values.items() if isinstance(v, pc.Expression)}
        computed = evaluate(both, exprs) if exprs else {}
        arrays = []
        for f in self.schema:
            if f.name in values:
                v = values[f.name]
                col = computed[f.name] if isinstance(v, pc.Expression) else pa.repeat(v, len(both))
            elif f.name in rows.schema.names:
                col = rows.column(f.name)
            else:
                col = pa.nulls(len(both), f.type)
            arrays.append(_cast(col, f))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def inserts(self, rows: pa.Table) -> Iterator[pa.RecordBatch]:
        """The rows the ``not_matched`` clauses insert for the unmatched source ``rows``
        (the source's columns), in order, in batches."""
        if self.plain_insert:
            yield from (b for b in rows.select(self.schema.names).to_batches() if b.num_rows)
            return
        for batch in rows.to_batches():
            if not batch.num_rows:
                continue
            both = pa.RecordBatch.from_arrays(
                list(batch.columns), names=[SOURCE + n for n in batch.schema.names]
            )
            pending = np.ones(batch.num_rows, dtype=bool)
            chosen = np.full(batch.num_rows, -1, dtype=np.int64)
            for i, c in enumerate(self.not_matched):
                take = pending.copy()
                if c.condition is not None:
                    mask = matched(evaluate(both, {"c": c.condition})["c"])
                    take &= np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
                chosen[take] = i
                pending &= ~take
            for i, c in enumerate(self.not_matched):
                sel = np.flatnonzero(chosen == i)
                if not len(sel):
                    continue
                if c.values is None:
                    part = batch.take(pa.array(sel)).select(self.schema.names)
                    yield _conformed(part, self.schema)
                    continue
                sub = both.take(pa.array(sel))
                empty = pa.RecordBatch.from_pylist([], schema=pa.schema([]))
                yield self._assigned(empty, sub, c.values)
            # clause order per batch: rows of one clause, then the next (as Delta, no order)

    def count_inserts(self, rows: pa.Table) -> int:
        return sum(b.num_rows for b in self.inserts(rows))


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def _cast(col: pa.Array | pa.ChunkedArray, f: pa.Field) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if col.type == f.type:
        return col
    try:
        return col.cast(f.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise SchemaMismatchError(
            f"expected the new values of column {f.name!r} to fit its type {f.type}, found "
            f"values of type {col.type} that do not: {str(e).splitlines()[0]}"
        ) from None


def _conformed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if batch.schema.equals(schema, check_metadata=False):
        return batch
    return pa.RecordBatch.from_arrays(
        [_cast(batch.column(f.name), f) for f in schema], schema=schema
    )


def has_sql_text(clauses: Any) -> bool:
    """Whether a merge option's clauses hold SQL text (conditions or values)."""
    if isinstance(clauses, MergeClause):
        clauses = [clauses]
    if isinstance(clauses, str) or not isinstance(clauses, (list, tuple)):
        return False
    for c in clauses:
        if isinstance(c, MergeClause) and (
            isinstance(c.condition, str)
            or any(isinstance(v, str) for v in (c.values or {}).values())
        ):
            return True
    return False
