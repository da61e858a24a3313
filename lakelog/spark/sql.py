"""SQL on Spark over the catalog's names: :func:`sql` (``docs/sql.md``).

A statement becomes a plan (:mod:`lakelog.sql`), then runs on the existing operations:
each lakelog table a query reads is a temporary view of :func:`lakelog.spark.read` (the
snapshot's file list, pruned), the statement's names are rewritten to those views and
Spark runs the query; writes go through :func:`lakelog.spark.write`, row-level changes
through :func:`lakelog.spark.delete`, :func:`~lakelog.spark.update` and
:func:`~lakelog.spark.merge`; the catalog's and the tables' own statements run as
:mod:`lakelog.sql.run` runs them. A statement naming no lakelog table goes to Spark
unchanged.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import InvalidArgumentError, SchemaMismatchError, SqlError, UnsupportedStatementError
from ..sql import default_catalog, parse
from .errors import lakelog_error

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..catalog import Catalog
    from ..sql import plan as p

__all__ = ["sql"]


def sql(spark: SparkSession, statement: str, *, catalog: Catalog | None = None) -> DataFrame:
    """Run one SQL statement (Spark's dialect, Delta's syntax for Delta's statements) over
    the lakelog catalog's tables and return its rows: a query's rows, a DML statement's
    ``num_affected_rows``, ``num_updated_rows``, ``num_deleted_rows``,
    ``num_inserted_rows``, the rows of SHOW and DESCRIBE, none for DDL.

    Args:
        spark: the session that runs the statement.
        statement: one statement; see ``docs/sql.md`` for what lakelog runs.
        catalog: the catalog whose names the statement uses; default None,
            :func:`lakelog.connect_catalog` with its defaults.

    Raises:
        SqlSyntaxError: the statement does not parse.
        UnsupportedStatementError: a clause lakelog does not run yet (named).
        NoSuchTableError: a name in a lakelog namespace without such a table (close
            names in the message).
    """
    from pyspark.errors import PySparkException

    from ..sql.run import sql_words

    cat = default_catalog(catalog)
    try:
        with sql_words():
            return _statement(spark, statement, cat)
    except PySparkException as e:  # a job of the statement failed (e.g. a bad CAST)
        carried = lakelog_error(e)  # a lakelog error raised in a task (a constraint)
        if carried is not None:
            raise carried from None
        raise SqlError(
            f"expected a statement Spark runs, found Spark's error: {_first(e)}"
        ) from None
    finally:
        if catalog is None:  # opened for this statement; a returned query needs it no more
            cat.close()


def _first(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _statement(spark: SparkSession, statement: str, cat: Catalog) -> DataFrame:
    from ..sql import plan as p
    from ..sql.run import CATALOG_PLANS, run_catalog

    try:
        plan = parse(statement)
    except UnsupportedStatementError as e:
        return _passthrough(spark, statement, cat, e)
    target = getattr(plan, "name", None)
    if (
        target is not None
        and not isinstance(plan, p.CreateTable)
        and not cat.namespace_exists(target.split(".", 1)[0])
    ):
        return _passthrough(spark, statement, cat, None)
    with _Views(spark, cat) as views:
        if isinstance(plan, CATALOG_PLANS):
            return _frame(spark, run_catalog(plan, cat))
        if isinstance(plan, p.Select):
            return views.query(plan.query, keep=True)
        return _frame(spark, _run(spark, cat, views, plan))


def _passthrough(
    spark: SparkSession, statement: str, cat: Catalog, error: UnsupportedStatementError | None
) -> DataFrame:
    """A statement lakelog does not run: to Spark, with the lakelog tables it reads as
    views. One that would change a lakelog table raises ``error`` (the clause lakelog
    does not run yet)."""
    import sqlglot
    from sqlglot import exp

    from ..sql.parser import DIALECT, query, quiet
    from ..sql.run import resolve

    try:
        with quiet():
            tree = sqlglot.parse_one(statement, dialect=DIALECT)
    except sqlglot.errors.ParseError:
        tree = None
    if tree is None or isinstance(tree, exp.Command):
        if error is not None and statement.split(None, 1)[0].upper() in _LAKELOG_WORDS:
            raise error
        return _spark_sql(spark, statement)
    q = query(tree)
    if error is not None and not isinstance(tree, exp.Query):
        # a statement lakelog does not run yet, changing a name in a lakelog namespace
        target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
        if (
            isinstance(target, exp.Table)
            and target.args.get("db")
            and cat.namespace_exists(str(target.db).lower())
        ):
            raise error
        if isinstance(tree, exp.Create) and str(tree.args.get("kind", "")).upper() in (
            "NAMESPACE",
            "SCHEMA",
            "DATABASE",
        ):
            raise error  # namespaces are the lakelog catalog's: never made in Spark's instead
    if not resolve(cat, [r.name for r in q.tables]) and not q.changes:
        return _spark_sql(spark, statement)
    with _Views(spark, cat) as views:
        views.persist = isinstance(tree, exp.Create) and str(tree.args.get("kind")) == "VIEW"
        return views.query(q, keep=True)


_LAKELOG_WORDS = {"OPTIMIZE", "VACUUM", "RESTORE", "DESCRIBE", "DESC"}
"""Delta's statements that sqlglot keeps as commands: lakelog's error, never Spark's."""


def _spark_sql(spark: SparkSession, statement: str) -> DataFrame:
    from pyspark.errors import PySparkException

    try:
        return spark.sql(statement)
    except PySparkException as e:
        raise SqlError(
            f"expected a statement Spark runs, found Spark's error: {_first(e)}"
        ) from None


class _Views:
    """Temporary views of the lakelog tables a statement reads, dropped when the statement
    is done: a classic session resolves them when ``spark.sql`` returns, so the returned
    DataFrame keeps its plan. On Spark Connect the server resolves a DataFrame each time
    it runs, so the views of a returned query stay for the session, as do those of a
    statement Spark runs that stores a plan naming them (``CREATE VIEW``)."""

    def __init__(self, spark: SparkSession, cat: Catalog) -> None:
        self.spark = spark
        self.cat = cat
        self.made: list[str] = []
        self.kept = False
        self.persist = False
        """The statement stores a plan naming the views (``CREATE VIEW``): keep them."""

    def __enter__(self) -> _Views:
        return self

    def __exit__(self, *exc: Any) -> None:
        lazy = type(self.spark).__module__.startswith("pyspark.sql.connect")
        if not self.persist and not (self.kept and lazy):
            for v in self.made:
                self.spark.catalog.dropTempView(v)

    def query(self, q: p.Query, *, keep: bool = False) -> DataFrame:
        from ..sql.run import resolve, timestamp
        from .read import read, read_changes

        found = resolve(self.cat, [r.name for r in q.tables] + [c.name for c in q.changes])
        views: dict[p.TableRef | p.ChangesRef, str] = {}
        for ref in q.tables:
            if ref.name not in found:
                continue
            uri = self.cat.load_table(ref.name).uri
            as_of = None
            if ref.timestamp is not None:
                as_of = timestamp(ref.timestamp, f"{ref.name} TIMESTAMP AS OF")
            df = read(self.spark, uri, version=ref.version, as_of=as_of)
            views[ref] = self._view(df)
        for c in q.changes:
            uri = self.cat.load_table(c.name).uri
            start = c.start if isinstance(c.start, int) else timestamp(c.start, "table_changes")
            end = timestamp(c.end, "table_changes") if isinstance(c.end, str) else c.end
            views[c] = self._view(read_changes(self.spark, uri, start, end))
        self.kept = self.kept or keep
        text = q.rewrite(views)
        return _spark_sql(self.spark, text)

    def _view(self, df: DataFrame) -> str:
        name = f"lakelog_sql_{uuid.uuid4().hex[:12]}"
        df.createOrReplaceTempView(name)
        self.made.append(name)
        return name


def _frame(spark: SparkSession, rows: pa.Table) -> DataFrame:
    from pyspark.sql.types import StructType

    from ..sql.run import DML

    if rows.num_columns == 0:
        return spark.createDataFrame([], StructType([]))
    if rows.schema.equals(DML) and rows.num_rows == 1:
        # a literal row: Spark answers collect() on the driver, without a job (a frame
        # made by createDataFrame costs one, as long as a small MERGE's own work)
        values = rows.to_pylist()[0]
        return spark.sql(
            "SELECT " + ", ".join(f"CAST({int(values[n])} AS BIGINT) AS {n}" for n in DML.names)
        )
    from .schema import to_spark_schema

    return spark.createDataFrame(rows.to_pylist(), to_spark_schema(rows.schema))


def _run(spark: SparkSession, cat: Catalog, views: _Views, plan: p.Plan) -> pa.Table:
    from ..sql import plan as p
    from ..sql.run import (
        NONE,
        check_plan,
        create_table,
        create_without_rows,
        dml,
        merge_error,
        metrics,
        optimize_call,
        set_values,
    )
    from .maintenance import compact, optimize
    from .rowlevel import delete, merge, update
    from .schema import to_arrow_schema
    from .write import write

    if isinstance(plan, p.Insert | p.Delete | p.Update | p.Merge | p.Optimize):
        check_plan(plan, cat.load_table(plan.name))
    if isinstance(plan, p.CreateTable):
        if plan.if_not_exists and cat.table_exists(plan.name):
            return NONE
        if plan.query is not None:
            df = views.query(plan.query)
            write(df, create_table(cat, plan, to_arrow_schema(df.schema)).uri)
        else:
            create_without_rows(cat, plan)
        return NONE
    if isinstance(plan, p.Insert):
        table = cat.load_table(plan.name)
        uri = table.uri
        df = _positional(views.query(plan.query), plan.columns or table.schema.names, plan.name)
        df = _conform(df, table.schema, computed=table.computed_columns)
        if plan.mode == "replace_where":
            result: Any = write(df, uri, mode="overwrite", replace_where=plan.where)
        else:
            result = write(df, uri, mode="overwrite" if plan.mode == "overwrite" else "append")
        n = _inserted(result)
        return dml(n, inserted=n)
    if isinstance(plan, p.Delete):
        uri = cat.load_table(plan.name).uri
        r = delete(spark, uri, plan.where or "true")
        return dml(r.deleted_rows, deleted=r.deleted_rows)
    if isinstance(plan, p.Update):
        table = cat.load_table(plan.name)
        values = set_values(table, plan.set, "UPDATE ... SET")
        r = update(spark, table.uri, plan.where or "true", set=values)
        return dml(r.updated_rows, updated=r.updated_rows)
    if isinstance(plan, p.Merge):
        table = cat.load_table(plan.name)
        source = _conform(views.query(plan.source), table.schema, complete=False)
        try:
            r = merge(
                spark,
                table.uri,
                source,
                list(plan.keys),
                when_matched=list(plan.matched),
                when_not_matched=list(plan.not_matched),
                when_not_matched_by_source=list(plan.by_source),
            )
        except (InvalidArgumentError, SchemaMismatchError) as e:
            raise merge_error(e, plan) from None
        affected = r.updated_rows + r.deleted_rows + r.inserted_rows
        return dml(affected, r.updated_rows, r.deleted_rows, r.inserted_rows)
    if isinstance(plan, p.Optimize):
        table = cat.load_table(plan.name)
        name, keywords = optimize_call(table, plan)
        run = optimize if name == "optimize" else compact
        report = run(spark, table.uri, **keywords)
        return metrics(report)
    raise UnsupportedStatementError(f"expected a statement docs/sql.md lists, found {plan!r}")


def _positional(df: DataFrame, names: tuple[str, ...] | list[str], table: str) -> DataFrame:
    """INSERT's rows by position, named as the table's columns."""
    if len(df.columns) != len(names):
        raise SqlError(
            f"expected {len(names)} values per row for INSERT INTO {table} "
            f"({', '.join(names)}), found {len(df.columns)}"
        )
    return df.toDF(*names)


def _conform(
    df: DataFrame, schema: pa.Schema, *, complete: bool = True, computed: Sequence[str] = ()
) -> DataFrame:
    """The rows with the table's types (Delta casts on INSERT and MERGE: a literal ``1.0``
    is a DECIMAL to Spark); with ``complete``, the table's columns the rows lack as
    nulls, in the table's order, but for the generated and identity columns
    ``computed``, which the write fills."""
    from pyspark.sql import functions as F

    from .schema import to_spark_type

    given = dict(zip(df.columns, (f.dataType for f in df.schema.fields), strict=True))
    if (not complete or df.columns == schema.names) and all(
        given.get(f.name) in (None, to_spark_type(f.type)) for f in schema
    ):
        return df  # the table's types already: no projection for every job to carry
    cols = []
    for f in schema:
        if f.name in df.columns:
            cols.append(F.col(f"`{f.name}`").cast(to_spark_type(f.type)).alias(f.name))
        elif complete and f.name not in computed:
            cols.append(F.lit(None).cast(to_spark_type(f.type)).alias(f.name))
    extra = [F.col(f"`{c}`") for c in df.columns if c not in schema.names]
    return df.select(*cols, *extra)


def _inserted(result: Any) -> int:
    """Rows a write added, from its commit (the query is not run a second time to count
    them): a row-level overwrite says it, an append or overwrite adds new files only."""
    if hasattr(result, "inserted_rows"):
        return int(result.inserted_rows)
    from ..log.actions import AddFile

    return sum(a.num_rows for a in result.actions if isinstance(a, AddFile) and a.data_change)
