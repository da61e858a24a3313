"""``MERGE INTO`` -> :class:`~lakelog.sql.plan.Merge`: keys from an equi-join ON, and
any number of ``WHEN MATCHED [AND cond] THEN UPDATE SET *|col = expr, .. | DELETE``,
``WHEN NOT MATCHED [BY TARGET] [AND cond] THEN INSERT *|(cols) VALUES (exprs)`` and
``WHEN NOT MATCHED BY SOURCE [AND cond] THEN UPDATE SET col = expr, .. | DELETE``, each
as a merge clause (:mod:`lakelog.rowlevel.clauses`) whose condition and values are Spark
SQL text over the target's columns (bare) and the source's (``source.<col>``), read by
the executor (lakelog's reader embedded, Spark's analysis on Spark). Anything else is an
:class:`~lakelog.errors.UnsupportedStatementError` naming the clause.
"""

from __future__ import annotations

from sqlglot import exp

from ..errors import SqlSyntaxError
from ..rowlevel.clauses import (
    MergeClause,
    when_matched_delete,
    when_matched_update,
    when_not_matched_by_source_delete,
    when_not_matched_by_source_update,
    when_not_matched_insert,
)
from . import plan as p
from .parser import DIALECT, query, table_name, unsupported

SOURCE = "source"
"""How a clause names the source row (``source.<col>``, the merge API's name)."""


def merge_plan(tree: exp.Merge) -> p.Merge:
    target = tree.this
    name = table_name(target, "MERGE INTO")
    t_alias = (target.alias or target.name).lower()
    using = tree.args["using"]
    if isinstance(using, exp.Subquery):
        s_alias = (using.alias or "").lower()
        source = query(using.this)
    elif isinstance(using, exp.Table):
        s_alias = (using.alias or using.name).lower()
        plain = using.copy()
        plain.set("alias", None)
        source = query(exp.select("*").from_(plain))
    else:
        raise unsupported(f"MERGE ... USING {using.sql(DIALECT)[:40]}")
    keys = _keys(tree.args["on"], t_alias, s_alias)
    sides = _Sides(t_alias, s_alias)
    matched: list[MergeClause] = []
    not_matched: list[MergeClause] = []
    by_source: list[MergeClause] = []
    whens = tree.args.get("whens")
    for when in whens.expressions if whens is not None else []:
        if bool(when.args.get("matched")):
            matched.append(_matched(when, sides, keys))
        elif bool(when.args.get("source")):
            by_source.append(_by_source(when, sides))
        else:
            not_matched.append(_not_matched(when, sides))
    return p.Merge(name, source, keys, tuple(matched), tuple(not_matched), tuple(by_source))


def _is_delete(then: exp.Expression | None) -> bool:
    return isinstance(then, exp.Var) and then.name.upper() == "DELETE"


def _keys(on: exp.Expression, t_alias: str, s_alias: str) -> tuple[str, ...]:
    terms = list(on.flatten()) if isinstance(on, exp.And) else [on]
    keys: list[str] = []
    for term in terms:
        if isinstance(term, exp.Paren):
            term = term.this
        if not (
            isinstance(term, exp.EQ)
            and isinstance(term.this, exp.Column)
            and isinstance(term.expression, exp.Column)
        ):
            raise unsupported(
                f"the ON condition {term.sql(DIALECT)!r}",
                "write ON as target.key = source.key [AND ...] over columns of one name; "
                "move other conditions into WHEN ... AND",
            )
        left, right = term.this, term.expression
        sides = {left.table.lower(), right.table.lower()}
        if left.name.lower() != right.name.lower() or sides != {t_alias, s_alias}:
            raise unsupported(
                f"the ON condition {term.sql(DIALECT)!r}",
                "write ON as target.key = source.key [AND ...] over columns of one name, "
                "each qualified by the target's and the source's name or alias",
            )
        keys.append(left.name)
    return tuple(keys)


class _Sides:
    """Columns of a clause as the merge API names them: the target's bare, the source's
    as ``source.<col>``."""

    def __init__(self, t_alias: str, s_alias: str) -> None:
        self.t_alias = t_alias
        self.s_alias = s_alias

    def text(self, value: exp.Expression, clause: str, *, bare: str = "target") -> str:
        """``value`` as Spark SQL text; a column without a qualifier is the ``bare``
        side's (Delta: the source's in INSERT, the target's elsewhere)."""
        value = value.copy()
        for col in list(value.find_all(exp.Column)):
            side = col.table.lower()
            if side == self.s_alias or (side == "" and bare == "source"):
                new = exp.column(col.name, table=SOURCE, quoted=True)
            elif side == self.t_alias or side == "":
                new = exp.column(col.name, quoted=True)
            else:
                raise SqlSyntaxError(
                    f"expected columns of {self.t_alias!r} or {self.s_alias!r} in {clause}, "
                    f"found {col.sql(DIALECT)!r}"
                )
            if col is value:
                value = new
            else:
                col.replace(new)
        return value.sql(DIALECT)

    def condition(self, when: exp.When, clause: str, *, bare: str = "target") -> str | None:
        cond = when.args.get("condition")
        return None if cond is None else self.text(cond, f"{clause} AND", bare=bare)


def _assignments(
    sets: list[exp.Expression], sides: _Sides, clause: str
) -> list[tuple[str, exp.Expression]]:
    out: list[tuple[str, exp.Expression]] = []
    for eq in sets:
        if not isinstance(eq, exp.EQ) or not isinstance(eq.this, exp.Column):
            raise SqlSyntaxError(
                f"expected column = value in {clause} SET, found {eq.sql(DIALECT)!r}"
            )
        if eq.this.table and eq.this.table.lower() != sides.t_alias:
            raise SqlSyntaxError(
                f"expected columns of the target {sides.t_alias!r} to the left of = in "
                f"{clause} SET, found {eq.this.sql(DIALECT)!r}"
            )
        out.append((eq.this.name, eq.expression))
    return out


def _matched(when: exp.When, sides: _Sides, keys: tuple[str, ...]) -> MergeClause:
    clause = "WHEN MATCHED"
    then = when.args.get("then")
    condition = sides.condition(when, clause)
    if _is_delete(then):
        return when_matched_delete(condition=condition)
    if not isinstance(then, exp.Update):
        raise unsupported(f"{clause} THEN {then.sql(DIALECT) if then else ''}")
    sets = then.expressions
    if not sets or (len(sets) == 1 and isinstance(sets[0], exp.Star)):
        return when_matched_update(condition=condition)
    values: dict[str, str] = {}
    for column, value in _assignments(sets, sides, f"{clause} THEN UPDATE"):
        text = sides.text(value, f"{clause} THEN UPDATE SET")
        if column in keys and text == f"{SOURCE}.{column}":
            continue  # a matched row's key is the source's already
        values[column] = text
    if not values:
        return when_matched_update(condition=condition)
    return when_matched_update(set=values, condition=condition)


def _by_source(when: exp.When, sides: _Sides) -> MergeClause:
    clause = "WHEN NOT MATCHED BY SOURCE"
    then = when.args.get("then")
    condition = sides.condition(when, clause)
    if _is_delete(then):
        return when_not_matched_by_source_delete(condition=condition)
    if not isinstance(then, exp.Update):
        raise unsupported(f"{clause} THEN {then.sql(DIALECT) if then else ''}")
    sets = then.expressions
    if not sets or isinstance(sets[0], exp.Star):
        raise unsupported(
            f"{clause} THEN UPDATE SET *", "name the columns to set (there is no source row)"
        )
    values = {
        column: sides.text(value, f"{clause} THEN UPDATE SET")
        for column, value in _assignments(sets, sides, f"{clause} THEN UPDATE")
    }
    return when_not_matched_by_source_update(values, condition=condition)


def _not_matched(when: exp.When, sides: _Sides) -> MergeClause:
    clause = "WHEN NOT MATCHED"
    then = when.args.get("then")
    condition = sides.condition(when, clause, bare="source")
    if not isinstance(then, exp.Insert):
        raise unsupported(f"{clause} THEN {then.sql(DIALECT) if then else ''}")
    if isinstance(then.this, exp.Star) or then.this is None:
        return when_not_matched_insert(condition=condition)
    columns = [c.name for c in then.this.expressions]
    values = then.expression.expressions if then.expression is not None else []
    if len(columns) != len(values):
        raise SqlSyntaxError(
            f"expected as many values as columns in {clause} THEN INSERT, found "
            f"{len(columns)} columns and {len(values)} values"
        )
    texts = {
        c: sides.text(v, f"{clause} THEN INSERT VALUES", bare="source")
        for c, v in zip(columns, values, strict=True)
    }
    return when_not_matched_insert(texts, condition=condition)
