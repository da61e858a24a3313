"""SQL without Spark (``lakelog sql``): queries run on DuckDB over each lakelog table's
snapshot (``snapshot.to_duckdb``, time travel included), the statement transpiled from
Spark's dialect to DuckDB's by sqlglot; writes and row-level changes go through the
tables' own operations (``append``, ``overwrite``, ``delete``, ``update``, ``merge``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import InvalidArgumentError, SchemaMismatchError, SqlError
from . import plan as p
from .parser import parse, unsupported
from .run import (
    CATALOG_PLANS,
    NONE,
    check_namespace,
    check_plan,
    conform,
    create_table,
    create_without_rows,
    dml,
    merge_error,
    metrics,
    optimize_call,
    resolve,
    run_catalog,
    set_values,
    sql_words,
    timestamp,
)

if TYPE_CHECKING:
    from ..catalog import Catalog

__all__ = ["execute"]


def execute(statement: str, catalog: Catalog, *, con: Any = None) -> pa.Table:
    """Run one statement on DuckDB and the catalog's tables; its rows as Arrow (a DML
    statement's ``num_affected_rows``... as :func:`lakelog.spark.sql` gives them).

    Args:
        statement: one statement (Spark's dialect; ``docs/sql.md``).
        catalog: the catalog whose names it uses.
        con: a DuckDB connection; default None, a new in-memory one.
    """
    from ..scan.engines import require

    duckdb = require("duckdb", purpose="lakelog sql")
    plan = parse(statement)
    if isinstance(plan, CATALOG_PLANS):
        with sql_words():
            return run_catalog(plan, catalog)
    own = con is None
    con = duckdb.connect() if own else con
    try:
        with sql_words():
            return _run(plan, catalog, con)
    finally:
        if own:
            con.close()


def query(q: p.Query, catalog: Catalog, con: Any) -> pa.Table:
    """A query's rows, each lakelog table read from a DuckDB view of its snapshot."""
    import duckdb

    found = resolve(catalog, [r.name for r in q.tables] + [c.name for c in q.changes])
    views: dict[p.TableRef | p.ChangesRef, str] = {}
    for ref in q.tables:
        if ref.name not in found:
            continue
        table = catalog.load_table(ref.name)
        as_of = None
        if ref.timestamp is not None:
            as_of = timestamp(ref.timestamp, f"{ref.name} TIMESTAMP AS OF")
        snap = table.snapshot(ref.version, as_of=as_of)
        views[ref] = _name()
        snap.to_duckdb(con, name=views[ref])
    for c in q.changes:
        table = catalog.load_table(c.name)
        start = c.start if isinstance(c.start, int) else timestamp(c.start, "table_changes")
        end = c.end if not isinstance(c.end, str) else timestamp(c.end, "table_changes")
        views[c] = _name()
        con.register(views[c], table.changes(start, end).to_arrow())
    text = q.rewrite(views, dialect="duckdb")
    try:
        return con.sql(text).to_arrow_table()
    except duckdb.CatalogException as e:
        unknown(catalog, q, found)
        first = str(e).strip().splitlines()[0]
        raise SqlError(f"expected a query DuckDB runs, found DuckDB's error: {first}") from None
    except duckdb.Error as e:
        first = str(e).strip().splitlines()[0]
        raise SqlError(f"expected a query DuckDB runs, found DuckDB's error: {first}") from None


def unknown(catalog: Catalog, q: p.Query, found: set[str]) -> None:
    """A name DuckDB does not know either, in a namespace the catalog does not have: the
    catalog's error (close namespaces named), not DuckDB's."""
    for ref in q.tables:
        if ref.name not in found:
            check_namespace(catalog, ref.name.split(".", 1)[0])


def _name() -> str:
    return f"lakelog_sql_{uuid.uuid4().hex[:12]}"


def positional(rows: pa.Table, names: tuple[str, ...] | list[str], table: str) -> pa.Table:
    """INSERT's rows by position, named as the table's columns."""
    if rows.num_columns != len(names):
        raise SqlError(
            f"expected {len(names)} values per row for INSERT INTO {table} "
            f"({', '.join(names)}), found {rows.num_columns}"
        )
    return rows.rename_columns(list(names))


def _run(plan: p.Plan, catalog: Catalog, con: Any) -> pa.Table:
    if isinstance(plan, p.Select):
        return query(plan.query, catalog, con)
    if isinstance(plan, p.Insert | p.Delete | p.Update | p.Merge | p.Optimize):
        check_plan(plan, catalog.load_table(plan.name))
    if isinstance(plan, p.CreateTable):
        if plan.if_not_exists and catalog.table_exists(plan.name):
            return NONE
        if plan.query is not None:
            rows = query(plan.query, catalog, con)
            create_table(catalog, plan, rows.schema).append(rows)
        else:
            create_without_rows(catalog, plan)
        return NONE
    if isinstance(plan, p.Insert):
        table = catalog.load_table(plan.name)
        rows = positional(
            query(plan.query, catalog, con), plan.columns or table.schema.names, plan.name
        )
        if plan.columns:
            rows = _complete(rows, table.schema, table.computed_columns)
        rows = conform(rows, table.schema, f"INSERT INTO {plan.name}")
        if plan.mode == "replace_where":
            table.overwrite(rows, where=plan.where)
        elif plan.mode == "overwrite":
            table.overwrite(rows)
        else:
            table.append(rows)
        return dml(rows.num_rows, inserted=rows.num_rows)
    if isinstance(plan, p.Delete):
        r = catalog.load_table(plan.name).delete(plan.where or "true")
        return dml(r.deleted_rows, deleted=r.deleted_rows)
    if isinstance(plan, p.Update):
        table = catalog.load_table(plan.name)
        values = set_values(table, plan.set, "UPDATE ... SET")
        r = table.update(plan.where or "true", set=values)
        return dml(r.updated_rows, updated=r.updated_rows)
    if isinstance(plan, p.Merge):
        table = catalog.load_table(plan.name)
        source = conform(query(plan.source, catalog, con), table.schema, "MERGE ... USING")
        try:
            m = table.merge(
                source,
                list(plan.keys),
                when_matched=list(plan.matched),
                when_not_matched=list(plan.not_matched),
                when_not_matched_by_source=list(plan.by_source),
            )
        except (InvalidArgumentError, SchemaMismatchError) as e:
            raise merge_error(e, plan) from None
        affected = m.updated_rows + m.deleted_rows + m.inserted_rows
        return dml(affected, m.updated_rows, m.deleted_rows, m.inserted_rows)
    if isinstance(plan, p.Optimize):
        table = catalog.load_table(plan.name)
        name, keywords = optimize_call(table, plan)
        report = table.optimize(**keywords) if name == "optimize" else table.compact(**keywords)
        return metrics(report)
    raise unsupported(f"the statement {type(plan).__name__}")


def _complete(rows: pa.Table, schema: pa.Schema, computed: Sequence[str] = ()) -> pa.Table:
    """Columns an INSERT did not list, as nulls (the table's generated and identity
    columns, ``computed``, are left out: the write computes them)."""
    for f in schema:
        if f.name not in rows.column_names and f.name not in computed:
            rows = rows.append_column(f.name, pa.nulls(rows.num_rows, f.type))
    return rows.select([n for n in schema.names if n in rows.column_names])
