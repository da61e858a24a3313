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

from ..errors import NoSuchNamespaceError, NoSuchTableError, SqlError
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
    p.DropColumns,
    p.SetProperties,
    p.UnsetProperties,
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
    ``1.0`` is a DECIMAL to SQL), as Delta casts on INSERT and MERGE."""
    fields = [
        schema.field(n) if n in schema.names else rows.schema.field(n) for n in rows.column_names
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
    if isinstance(plan, p.Insert) and plan.columns:
        check_columns(table, plan.columns, f"INSERT INTO {plan.name} (...)")
    elif isinstance(plan, p.Delete):
        check_where(table, plan.where, "DELETE ... WHERE")
    elif isinstance(plan, p.Update):
        check_columns(table, [c for c, _ in plan.set], "UPDATE ... SET")
        check_where(table, plan.where, "UPDATE ... WHERE")
    elif isinstance(plan, p.Merge):
        check_columns(table, plan.keys, "MERGE ... ON")
        if isinstance(plan.when_matched, tuple):
            check_columns(table, [c for c, _ in plan.when_matched], "WHEN MATCHED THEN UPDATE SET")
    elif isinstance(plan, p.Optimize):
        check_where(table, plan.where, "OPTIMIZE ... WHERE")
        check_columns(table, plan.zorder_by, "OPTIMIZE ... ZORDER BY")


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


def partition_filter(table: Table, where: str | None) -> Any:
    """OPTIMIZE's ``WHERE`` as the pyarrow Expression compaction and clustering take
    (checked against the table's columns)."""
    if where is None:
        return None
    from ..filters import parse_filter, to_expression

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
        "partitionColumns": list(snap.partition_by),
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
        older = None if plan.retain_hours is None else dt.timedelta(hours=plan.retain_hours)
        report = table.vacuum(older_than=older, dry_run=plan.dry_run)
        return rows([{"path": f} for f in report.files], pa.schema([("path", pa.string())]))
    if isinstance(plan, p.Restore):
        if plan.timestamp is not None:
            when = timestamp(plan.timestamp, "RESTORE ... TIMESTAMP AS OF")
            return committed(table.restore(as_of=when))
        return committed(table.restore(plan.version))
    if isinstance(plan, p.AddColumns):
        table.add_columns(plan.columns)
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
    else:
        raise TypeError(f"not a catalog plan: {type(plan).__name__}")
    return NONE


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
