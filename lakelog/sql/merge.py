"""``MERGE INTO`` -> :class:`~lakelog.sql.plan.Merge`, for the clause combinations the
merge API expresses: keys from an equi-join ON, at most one ``WHEN MATCHED [AND cond]``
(``UPDATE SET *``, ``UPDATE SET ..``, ``DELETE``), one ``WHEN NOT MATCHED`` (``INSERT *`` or every
column from the source's column of that name) and one ``WHEN NOT MATCHED BY SOURCE THEN
DELETE``, these two without ``AND <condition>``. Anything else is an
:class:`~lakelog.errors.UnsupportedStatementError` naming the clause.
"""

from __future__ import annotations

from sqlglot import exp

from ..errors import SqlSyntaxError
from . import plan as p
from .parser import DIALECT, query, table_name, unsupported

SOURCE = "source."
"""How an assignment names a source column (the merge API's ``pc.field("source.x")``)."""


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
    matched: str | tuple[tuple[str, exp.Expression], ...] = "ignore"
    not_matched = "ignore"
    by_source = "ignore"
    condition: exp.Expression | None = None
    seen: set[str] = set()
    whens = tree.args.get("whens")
    for when in whens.expressions if whens is not None else []:
        is_matched = bool(when.args.get("matched"))
        by_src = bool(when.args.get("source"))
        clause = (
            "WHEN MATCHED"
            if is_matched
            else ("WHEN NOT MATCHED BY SOURCE" if by_src else "WHEN NOT MATCHED")
        )
        if is_matched and when.args.get("condition") is not None:
            condition = _sided(when.args["condition"], t_alias, s_alias)
        elif when.args.get("condition") is not None:
            raise unsupported(
                f"{clause} AND {when.args['condition'].sql(DIALECT)}",
                "move the condition into the source query",
            )
        if clause in seen:
            raise unsupported(f"several {clause} clauses")
        seen.add(clause)
        then = when.args.get("then")
        if is_matched:
            matched = _matched(then, t_alias, s_alias)
        elif by_src:
            if not _is_delete(then):
                raise unsupported(f"{clause} THEN {then.sql(DIALECT)[:40]}", "only DELETE")
            by_source = "delete"
        else:
            not_matched = _insert(then, s_alias)
    return p.Merge(name, source, keys, matched, not_matched, by_source, condition)


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
                "write ON as target.key = source.key [AND ...] over columns of one name",
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


def _matched(
    then: exp.Expression | None, t_alias: str, s_alias: str
) -> str | tuple[tuple[str, exp.Expression], ...]:
    if _is_delete(then):
        return "delete"
    if not isinstance(then, exp.Update):
        raise unsupported(f"WHEN MATCHED THEN {then.sql(DIALECT) if then else ''}")
    sets = then.expressions
    if not sets or (len(sets) == 1 and isinstance(sets[0], exp.Star)):
        return "update"
    out: list[tuple[str, exp.Expression]] = []
    for eq in sets:
        if not isinstance(eq, exp.EQ) or not isinstance(eq.this, exp.Column):
            raise SqlSyntaxError(
                f"expected column = value in WHEN MATCHED THEN UPDATE SET, found "
                f"{eq.sql(DIALECT)!r}"
            )
        out.append((eq.this.name, _sided(eq.expression, t_alias, s_alias)))
    return tuple(out)


def _sided(value: exp.Expression, t_alias: str, s_alias: str) -> exp.Expression:
    """Columns of the target bare, columns of the source as ``source.<col>``."""
    value = value.copy()
    for col in list(value.find_all(exp.Column)):
        side = col.table.lower()
        if side == s_alias:
            col.replace(exp.column(SOURCE + col.name, quoted=True))
        elif side in ("", t_alias):
            col.replace(exp.column(col.name, quoted=True))
        else:
            raise SqlSyntaxError(
                f"expected columns of {t_alias!r} or {s_alias!r} in WHEN MATCHED, found "
                f"{col.sql(DIALECT)!r}"
            )
    return value


def _insert(then: exp.Expression | None, s_alias: str) -> str:
    if not isinstance(then, exp.Insert):
        raise unsupported(f"WHEN NOT MATCHED THEN {then.sql(DIALECT) if then else ''}")
    if isinstance(then.this, exp.Star) or then.this is None:
        return "insert"
    columns = [c.name for c in then.this.expressions]
    values = then.expression.expressions if then.expression is not None else []
    same = len(columns) == len(values) and all(
        isinstance(v, exp.Column) and v.name == c and v.table.lower() in ("", s_alias)
        for c, v in zip(columns, values, strict=False)
    )
    if not same:
        raise unsupported(
            f"WHEN NOT MATCHED THEN {then.sql(DIALECT)}",
            "insert every column from the source's column of that name (INSERT *)",
        )
    return "insert:" + ",".join(columns)
