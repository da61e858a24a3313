"""The statements every engine runs the same way, on the catalog and the tables' own
operations: namespaces, CREATE/DROP/RENAME TABLE, SHOW, DESCRIBE, VACUUM, RESTORE and
ALTER TABLE. Each returns its rows as an Arrow table (no columns for a statement that
returns none); the engines (:mod:`lakelog.spark.sql`, :mod:`lakelog.sql.embedded`) run
the rest (queries, writes, row-level changes, OPTIMIZE).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import pyarrow as pa

from ..errors import (
    InvalidArgumentError,
    LakelogError,
    NamespaceExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    SchemaMismatchError,
    SqlError,
    TableAlreadyExistsError,
    TableLocationEmptyError,
)
from ..rowlevel.clauses import MergeClause
from ..transforms import parse_field
from . import plan as p

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..table import Table

NONE = pa.table({})
"""The rows of a statement that returns none."""

DML = pa.schema(
    [
        ("num_affected_rows", pa.int64()),
        ("num_updated_rows", pa.int64()),
        ("num_deleted_rows", pa.int64()),
        ("num_inserted_rows", pa.int64()),
    ]
)
"""The row of a DML statement (INSERT, DELETE, UPDATE, MERGE), on every engine."""


def dml(affected: int, updated: int = 0, deleted: int = 0, inserted: int = 0) -> pa.Table:
    """A DML statement's row of counts (:data:`DML`)."""
    return pa.Table.from_pylist(
        [
            {
                "num_affected_rows": affected,
                "num_updated_rows": updated,
                "num_deleted_rows": deleted,
                "num_inserted_rows": inserted,
            }
        ],
        schema=DML,
    )


def create_table(catalog: Catalog, plan: p.CreateTable, schema: pa.Schema) -> Table:
    """CREATE TABLE in ``catalog`` with ``schema``: the query's, for CREATE TABLE AS (the
    engine then writes the query's rows), the statement's own otherwise."""
    return catalog.create_table(
        plan.name,
        schema,
        partition_by=plan.partition_by,
        properties=dict(plan.properties),
        location=plan.location,
        **plan.rules(),
    )


def create_without_rows(catalog: Catalog, plan: p.CreateTable) -> None:
    """CREATE TABLE without AS: the table of the statement's schema, or without one the
    registration of the table already at its ``LOCATION``."""
    if plan.schema is None:
        catalog.register_table(plan.name, plan.location or "")
    else:
        create_table(catalog, plan, plan.schema)


def optimize_call(table: Table, plan: p.Optimize) -> tuple[str, dict[str, Any]]:
    """The maintenance call OPTIMIZE maps onto: ``("optimize", keywords)`` with ZORDER BY
    (a full recluster), ``("compact", keywords)`` without; the engine runs it."""
    where = partition_filter(table, plan.where)
    if plan.zorder_by:
        return "optimize", {
            "zorder_by": list(plan.zorder_by),
            "incremental": False,
            "partition_filter": where,
        }
    return "compact", {"partition_filter": where}


CATALOG_PLANS = (
    p.CreateNamespace,
    p.DropNamespace,
    p.ShowTables,
    p.ShowNamespaces,
    p.DropTable,
    p.RenameTable,
    p.DescribeHistory,
    p.DescribeDetail,
    p.Vacuum,
    p.Restore,
    p.AddColumns,
    p.RenameColumn,
    p.AlterColumnType,
    p.DropColumns,
    p.SetProperties,
    p.UnsetProperties,
    p.ChangePartitionField,
    p.AddConstraint,
    p.DropConstraint,
    p.SetNotNull,
)
"""The plans :func:`run_catalog` runs."""


def load(catalog: Catalog, name: str) -> Table:
    """The table of a name, or :class:`~lakelog.errors.NoSuchTableError` naming close
    names (the catalog's own error)."""
    return catalog.load_table(name)


def timestamp(text: str, clause: str) -> dt.datetime:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise SqlError(
            f"expected an ISO 8601 timestamp such as '2026-11-02 10:00:00' in {clause}, "
            f"found {text!r}"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def rows(records: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(records, schema=schema)


def _json(value: Any) -> str:
    return json.dumps(msgspec.to_builtins(value), sort_keys=True, default=str)


def committed(result: Any) -> pa.Table:
    """One row of a commit: ``version`` and ``operation`` (RESTORE)."""
    return rows(
        [{"version": result.version, "operation": result.operation}],
        pa.schema([("version", pa.int64()), ("operation", pa.string())]),
    )


def conform(rows: pa.Table, schema: pa.Schema, clause: str = "INSERT") -> pa.Table:
    """A query's rows with the table's types where a column has another (a literal
    ``1.0`` is a DECIMAL to SQL), as Delta casts on INSERT and MERGE. Nullability is
    the write's to check (a typed error naming the NOT NULL column), not the cast's."""
    fields = [
        schema.field(n).with_nullable(True) if n in schema.names else rows.schema.field(n)
        for n in rows.column_names
    ]
    try:
        return rows.cast(pa.schema(fields))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        want = ", ".join(f"{f.name} {f.type}" for f in schema)
        got = ", ".join(f"{f.name} {f.type}" for f in rows.schema)
        raise SqlError(
            f"expected values of the table's types in {clause} ({want}), found {got} "
            f"({str(e).splitlines()[0]})"
        ) from None


def check_columns(table: Table, names: Sequence[str], clause: str) -> None:
    """Each name a column of the table, else an error naming the clause and close names."""
    columns = table.schema.names
    for name in names:
        if name not in columns:
            close = difflib.get_close_matches(name, columns, n=3)
            also = f"; close names: {', '.join(close)}" if close else ""
            raise SqlError(
                f"expected a column of the table in {clause}, found {name!r}{also} (its "
                f"columns: {', '.join(columns)})"
            )


def set_values(table: Table, sets: Sequence[tuple[str, Any]], clause: str) -> dict[str, Any]:
    """``SET col = value, ...`` as the row-level API takes it (a literal or a pyarrow
    Expression per column); a literal the column's type cannot hold is an error naming
    the clause (Spark's ANSI cast refuses it too), before anything is read."""
    import pyarrow.compute as pc

    from .values import set_value

    check_columns(table, [c for c, _ in sets], clause)
    values = {c: set_value(v, clause) for c, v in sets}
    for column, value in values.items():
        if value is None or isinstance(value, pc.Expression):
            continue
        kind = table.schema.field(column).type
        try:
            values[column] = pa.array([value]).cast(kind)[0].as_py()  # as SQL casts
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            raise SqlError(
                f"expected a value of type {kind} for column {column!r} in {clause}, found "
                f"{value!r}; write a value of the column's type, or CAST it"
            ) from None
    return values


def check_where(table: Table, where: str | None, clause: str) -> None:
    """The columns a WHERE names are the table's (the filter checks the rest)."""
    if where is None:
        return
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(where, dialect="spark")
    check_columns(table, [c.name for c in tree.find_all(exp.Column)], clause)


def check_plan(plan: p.Plan, table: Table) -> None:
    """The names a writing statement uses are the table's columns, checked before
    anything is read or written (the error names the clause)."""
    if isinstance(plan, p.Insert):
        if plan.columns:
            check_columns(table, plan.columns, f"INSERT INTO {plan.name} (...)")
        check_where(table, plan.where, f"INSERT INTO {plan.name} REPLACE WHERE")
    elif isinstance(plan, p.Delete):
        check_where(table, plan.where, "DELETE ... WHERE")
    elif isinstance(plan, p.Update):
        check_columns(table, [c for c, _ in plan.set], "UPDATE ... SET")
        check_where(table, plan.where, "UPDATE ... WHERE")
    elif isinstance(plan, p.Merge):
        import sqlglot
        from sqlglot import exp

        check_columns(table, plan.keys, "MERGE ... ON")
        for c in plan.clauses():
            clause = _clause_name(c)
            if c.values is not None:
                check_columns(table, list(c.values), f"{clause} ({', '.join(c.values)})")
            texts = [c.condition, *(c.values or {}).values()]
            for text in texts:
                if isinstance(text, str) and c.when != "not_matched":
                    tree = sqlglot.parse_one(text, dialect="spark")
                    target = [col.name for col in tree.find_all(exp.Column) if not col.table]
                    check_columns(table, target, clause)
    elif isinstance(plan, p.Optimize):
        check_where(table, plan.where, "OPTIMIZE ... WHERE")
        check_columns(table, plan.zorder_by, "OPTIMIZE ... ZORDER BY")


def _clause_name(c: MergeClause) -> str:
    """A merge clause as the statement wrote it (``WHEN MATCHED ... THEN UPDATE``)."""
    when = {
        "matched": "WHEN MATCHED",
        "not_matched": "WHEN NOT MATCHED",
        "not_matched_by_source": "WHEN NOT MATCHED BY SOURCE",
    }[c.when]
    cond = f" AND {c.condition}" if c.condition is not None else ""
    return f"{when}{cond} THEN {c.action.upper()}"


def merge_error(e: InvalidArgumentError | SchemaMismatchError, plan: p.Merge) -> LakelogError:
    """A merge clause refused by the merge API, in the statement's words (the same type
    of error)."""
    text = str(e)
    for kind, clause in (
        ("when_not_matched_by_source", "WHEN NOT MATCHED BY SOURCE"),
        ("when_not_matched", "WHEN NOT MATCHED"),
        ("when_matched", "WHEN MATCHED"),
    ):
        text = text.replace(f"{kind} clause", f"{clause} clause").replace(f"{kind}=", clause)
    return type(e)(f"{text} (in MERGE INTO {plan.name})")


@contextlib.contextmanager
def sql_words() -> Iterator[None]:
    """The catalog's errors in a SQL user's words (statements, not Python calls)."""
    try:
        yield
    except NoSuchTableError as e:
        also = f"; close names: {', '.join(e.close)}" if e.close else ""
        namespace = e.name.split(".", 1)[0]
        raise NoSuchTableError(
            f"expected a table of the lakelog catalog, found {e.name!r}{also}; SHOW TABLES "
            f"IN {namespace} lists its tables",
            name=e.name,
            close=e.close,
        ) from None
    except NoSuchNamespaceError as e:
        also = f"; close names: {', '.join(e.close)}" if e.close else ""
        raise NoSuchNamespaceError(
            f"expected a namespace of the lakelog catalog, found {e.namespace!r}{also}; "
            f"create it with CREATE NAMESPACE {e.namespace}",
            namespace=e.namespace,
            close=e.close,
        ) from None
    except NamespaceExistsError as e:
        raise NamespaceExistsError(
            _sql_call(str(e), "pass exist_ok=True to accept an existing one", "write IF NOT EXISTS")
        ) from None
    except NamespaceNotEmptyError as e:
        raise NamespaceNotEmptyError(
            _sql_call(str(e), "pass cascade=True", "write CASCADE")
        ) from None
    except TableAlreadyExistsError as e:
        import re

        text = re.sub(
            r"load_table\('([^']*)'\) opens it",
            r"CREATE TABLE IF NOT EXISTS \1 keeps it",
            str(e),
        )
        raise TableAlreadyExistsError(text) from None
    except TableLocationEmptyError as e:
        raise TableLocationEmptyError(
            _sql_call(
                str(e),
                "create one with create_table instead",
                "create one with CREATE TABLE ... (columns) USING lakelog LOCATION",
            )
        ) from None


def _sql_call(message: str, python: str, sql: str) -> str:
    """A catalog message with its Python advice (``pass exist_ok=True``) in SQL's words
    (``write IF NOT EXISTS``); the message unchanged if it has none."""
    return message.replace(python, sql) if python in message else message


def partition_filter(table: Table, where: str | None) -> Any:
    """OPTIMIZE's ``WHERE`` as the pyarrow Expression compaction and clustering take
    (checked against the table's columns)."""
    if where is None:
        return None
    from ..filters import parse_filter, to_expression

    if not table.partition_by:
        raise SqlError(
            f"expected a partitioned table for OPTIMIZE ... WHERE {where}, found an "
            f"unpartitioned one; drop the WHERE to optimize the whole table"
        )
    import sqlglot
    from sqlglot import exp

    named = [c.name for c in sqlglot.parse_one(where, dialect="spark").find_all(exp.Column)]
    check_columns(table, named, "OPTIMIZE ... WHERE")
    others = [c for c in dict.fromkeys(named) if c not in table.partition_by]
    if others:
        raise SqlError(
            f"expected only partition columns ({', '.join(table.partition_by)}) in OPTIMIZE "
            f"... WHERE, found {', '.join(others)}: a condition on other columns cannot "
            f"select whole files, as in Delta"
        )
    pred = parse_filter(where, table.schema, argument="OPTIMIZE ... WHERE")
    return None if pred is None else to_expression(pred)


def metrics(report: Any) -> pa.Table:
    """One row ``metrics`` (JSON) of an operation's report."""
    return rows([{"metrics": _json(report)}], pa.schema([("metrics", pa.string())]))


HISTORY = pa.schema(
    [
        ("version", pa.int64()),
        ("timestamp", pa.timestamp("ms", tz="UTC")),
        ("operation", pa.string()),
        ("parameters", pa.string()),
        ("metrics", pa.string()),
        ("read_version", pa.int64()),
        ("engine", pa.string()),
    ]
)


def history(table: Table, limit: int | None) -> pa.Table:
    return rows(
        [
            {
                "version": h.version,
                "timestamp": dt.datetime.fromtimestamp(h.timestamp_ms / 1000, dt.timezone.utc),
                "operation": h.operation,
                "parameters": _json(h.parameters),
                "metrics": _json(h.metrics),
                "read_version": h.read_version,
                "engine": h.engine,
            }
            for h in table.history(limit)
        ],
        HISTORY,
    )


DETAIL = pa.schema(
    [
        ("format", pa.string()),
        ("name", pa.string()),
        ("location", pa.string()),
        ("version", pa.int64()),
        ("partitionColumns", pa.list_(pa.string())),
        ("numFiles", pa.int64()),
        ("numRows", pa.int64()),
        ("sizeInBytes", pa.int64()),
        ("properties", pa.string()),
    ]
)


def detail(name: str, table: Table) -> pa.Table:
    snap = table.snapshot()
    record = {
        "format": "lakelog",
        "name": name,
        "location": table.uri,
        "version": snap.version,
        "partitionColumns": snap.partitioning,
        "numFiles": snap.num_files,
        "numRows": snap.num_rows,
        "sizeInBytes": snap.total_bytes,
        "properties": _json(snap.properties),
    }
    return rows([record], DETAIL)


def run_catalog(plan: p.Plan, catalog: Catalog) -> pa.Table:
    """Run a plan of :data:`CATALOG_PLANS` on the catalog; its rows."""
    if isinstance(plan, p.CreateNamespace):
        catalog.create_namespace(plan.namespace, exist_ok=plan.if_not_exists)
        return NONE
    if isinstance(plan, p.DropNamespace):
        if plan.if_exists and not catalog.namespace_exists(plan.namespace):
            return NONE
        catalog.drop_namespace(plan.namespace, cascade=plan.cascade)
        return NONE
    if isinstance(plan, p.ShowNamespaces):
        names = catalog.list_namespaces()
        return rows([{"namespace": n} for n in names], pa.schema([("namespace", pa.string())]))
    if isinstance(plan, p.ShowTables):
        if plan.namespace is not None:
            check_namespace(catalog, plan.namespace)
        names = catalog.list_tables(plan.namespace)
        schema = pa.schema([("namespace", pa.string()), ("tableName", pa.string())])
        return rows(
            [dict(zip(("namespace", "tableName"), n.split(".", 1), strict=True)) for n in names],
            schema,
        )
    if isinstance(plan, p.DropTable):
        if plan.if_exists and not catalog.table_exists(plan.name):
            return NONE
        catalog.drop_table(plan.name, purge=plan.purge)
        return NONE
    if isinstance(plan, p.RenameTable):
        catalog.rename_table(plan.name, plan.new)
        return NONE
    table = load(catalog, plan.name)  # type: ignore[union-attr]
    if isinstance(plan, p.DescribeHistory):
        return history(table, plan.limit)
    if isinstance(plan, p.DescribeDetail):
        return detail(plan.name, table)
    if isinstance(plan, p.Vacuum):
        check_retention(table, plan)
        older = None if plan.retain_hours is None else dt.timedelta(hours=plan.retain_hours)
        report = table.vacuum(older_than=older, dry_run=plan.dry_run)
        return rows([{"path": f} for f in report.files], pa.schema([("path", pa.string())]))
    if isinstance(plan, p.Restore):
        if plan.timestamp is not None:
            when = timestamp(plan.timestamp, "RESTORE ... TIMESTAMP AS OF")
            return committed(table.restore(as_of=when))
        return committed(table.restore(plan.version))
    if isinstance(plan, p.AddColumns):
        _check_new_columns(table, plan)
        table.add_columns(plan.columns)
    elif isinstance(plan, p.AlterColumnType):
        alter_column_type(table, plan)
    elif isinstance(plan, p.RenameColumn):
        check_columns(table, [plan.old], "ALTER TABLE ... RENAME COLUMN")
        table.rename_column(plan.old, plan.new)
    elif isinstance(plan, p.DropColumns):
        check_columns(table, plan.columns, "ALTER TABLE ... DROP COLUMN")
        table.drop_columns(list(plan.columns))
    elif isinstance(plan, p.SetProperties):
        table.set_properties(dict(plan.properties))
    elif isinstance(plan, p.UnsetProperties):
        table.unset_properties(list(plan.keys), missing_ok=plan.if_exists)
    elif isinstance(plan, p.ChangePartitionField):
        table.set_partitioning(changed_partitioning(table.partitioning, plan))
    elif isinstance(plan, p.AddConstraint):
        table.add_constraint(plan.constraint, plan.expr)
    elif isinstance(plan, p.DropConstraint):
        table.drop_constraint(plan.constraint, missing_ok=plan.if_exists)
    elif isinstance(plan, p.SetNotNull):
        check_columns(table, [plan.column.split(".")[0]], "ALTER TABLE ... SET NOT NULL")
        table.set_not_null(plan.column)
    else:
        raise TypeError(f"not a catalog plan: {type(plan).__name__}")
    return NONE


def check_retention(table: Table, plan: p.Vacuum) -> None:
    """``RETAIN n HOURS`` no shorter than the table's ``lakelog.vacuum.min_age_seconds``
    (files that young may belong to a writer that has not committed yet)."""
    from ..properties import get_float

    if plan.retain_hours is None:
        return
    least = get_float(table.properties, "lakelog.vacuum.min_age_seconds")
    if plan.retain_hours * 3600 < least:
        raise SqlError(
            f"expected RETAIN at least {least / 3600:g} HOURS in VACUUM {plan.name} (the "
            f"table's lakelog.vacuum.min_age_seconds), found {plan.retain_hours:g} HOURS: "
            f"files that young may belong to a writer that has not committed yet; retain "
            f"more, or, when no writer runs, lower it with ALTER TABLE {plan.name} SET "
            f"TBLPROPERTIES ('lakelog.vacuum.min_age_seconds' = '0')"
        )


def _check_new_columns(table: Table, plan: p.AddColumns) -> None:
    taken = [n for n in plan.columns.names if n in table.schema.names]
    if taken:
        raise SqlError(
            f"expected new column names in ALTER TABLE {plan.name} ADD COLUMNS, found "
            f"{', '.join(taken)} already in the table (its columns: "
            f"{', '.join(table.schema.names)}); choose other names, or change a column's "
            f"type with ALTER TABLE {plan.name} ALTER COLUMN {taken[0]} TYPE <type>"
        )


def alter_column_type(table: Table, plan: p.AlterColumnType) -> None:
    """The table's own widening (``Table.widen_column``); the column's type already: no
    change, as in Delta. A narrowing or a change that is not a widening is the table's
    :class:`~lakelog.errors.SchemaMismatchError`, naming the clause."""
    check_columns(table, [plan.column], plan.clause)
    if table.schema.field(plan.column).type == plan.type:
        return
    try:
        table.widen_column(plan.column, plan.type)
    except (SchemaMismatchError, InvalidArgumentError) as e:
        text = str(e).replace("Add a new column", "Add a new column (ADD COLUMNS)")
        raise SchemaMismatchError(f"{plan.clause}: {text}") from None


def _close_names(given: str, known: Sequence[str]) -> tuple[tuple[str, ...], str]:
    """The names of ``known`` close to ``given``, and the end of an error naming them."""
    close = tuple(difflib.get_close_matches(given, known, n=3))
    return close, f"; close names: {', '.join(close)}" if close else ""


def check_namespace(catalog: Catalog, namespace: str) -> None:
    if not catalog.namespace_exists(namespace):
        close, also = _close_names(namespace, catalog.list_namespaces())
        raise NoSuchNamespaceError(
            f"expected a namespace of the lakelog catalog, found {namespace!r}{also}",
            namespace=namespace,
            close=close,
        )


def resolve(catalog: Catalog, names: list[str]) -> set[str]:
    """Which of the two-part names of a query are lakelog tables. A name in a lakelog
    namespace that has no such table is an error naming close names; a name in a
    namespace the catalog does not have is left to the engine."""
    found: set[str] = set()
    namespaces = set(catalog.list_namespaces())
    for name in dict.fromkeys(names):
        namespace = name.split(".", 1)[0]
        if namespace not in namespaces:
            continue
        if catalog.table_exists(name):
            found.add(name)
            continue
        close, also = _close_names(name, catalog.list_tables())
        raise NoSuchTableError(
            f"expected a table of the lakelog catalog, found {name!r}{also}",
            name=name,
            close=close,
        )
    return found


def changed_partitioning(current: list[str], plan: p.ChangePartitionField) -> list[str]:
    """The fields after ``ALTER TABLE ... ADD|DROP|REPLACE PARTITION FIELD``: a field is
    named by its spelling (``day(ts)``) or its name (``ts_day``); ADD appends."""
    clause = f"ALTER TABLE ... {plan.action.upper()} PARTITION FIELD"
    fields = [parse_field(f) for f in current]
    if plan.action == "add":
        return [*current, plan.field]
    try:
        named = parse_field(plan.field)
    except LakelogError:
        named = None
    at = [
        i
        for i, f in enumerate(fields)
        if f == named or f.name == plan.field.strip("`") or f.text == plan.field
    ]
    if not at:
        raise SqlError(
            f"expected a partition field of the table {current} in {clause}, found "
            f"{plan.field!r}; name it as written (day(ts)) or by its name (ts_day)."
        )
    out = list(current)
    if plan.action == "drop":
        del out[at[0]]
    else:
        out[at[0]] = plan.new or ""
    return out
