"""lakelog.spark.sql: the statements of docs/sql.md the first conformance tests left out
(ALTER COLUMN ... TYPE, RESTORE ... TIMESTAMP AS OF, OPTIMIZE ... WHERE ... ZORDER BY,
VACUUM ... DRY RUN, SHOW NAMESPACES, CTAS with partitions) give what the Python API
gives; bad input is a one-line typed error with nothing written, on Spark too."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _services import find_free_port

import lakelog
from lakelog.errors import (
    CatalogUnavailableError,
    NamespaceExistsError,
    NoSuchTableError,
    SchemaMismatchError,
    SqlError,
    SqlSyntaxError,
    TableAlreadyExistsError,
    UnsupportedStatementError,
)
from lakelog.spark.sql import sql

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema([("id", pa.int32()), ("day", pa.string()), ("amount", pa.float32())])
ROWS = pa.table(
    {"id": [1, 2, 3, 4], "day": ["mon", "mon", "tue", "wed"], "amount": [9.5, 3.0, 7.25, 1.0]},
    schema=SCHEMA,
)


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Any]:
    cat = lakelog.connect_catalog(
        "sqlite:///" + str(tmp_path) + "/c.db", warehouse=str(tmp_path / "wh")
    )
    try:
        yield cat
    finally:
        cat.close()


def rows(table: Any) -> list[tuple[Any, ...]]:
    data = table.refresh().snapshot().to_arrow() if hasattr(table, "snapshot") else table
    return sorted(tuple(r.values()) for r in data.to_pylist())


def twins(catalog: Any) -> tuple[Any, Any]:
    catalog.create_namespace("s", exist_ok=True)
    a = catalog.create_table("s.by_sql", SCHEMA, partition_by=["day"])
    b = catalog.create_table("s.by_api", SCHEMA, partition_by=["day"])
    a.append(ROWS)
    b.append(ROWS)
    return a, b


def test_alter_column_type_is_the_tables_widening(spark: Any, catalog: Any) -> None:
    a, b = twins(catalog)
    assert (
        sql(spark, "ALTER TABLE s.by_sql ALTER COLUMN id TYPE BIGINT", catalog=catalog).count() == 0
    )
    b.widen_column("id", pa.int64())
    sql(spark, "ALTER TABLE s.by_sql CHANGE COLUMN amount amount DOUBLE", catalog=catalog)
    b.widen_column("amount", pa.float64())
    assert a.refresh().schema == b.refresh().schema
    assert rows(a) == rows(b)
    got = sql(spark, "SELECT id, amount FROM s.by_sql WHERE id = 1", catalog=catalog).collect()
    assert [tuple(r) for r in got] == [(1, 9.5)]
    assert dict(sql(spark, "SELECT * FROM s.by_sql", catalog=catalog).dtypes) == {
        "id": "bigint",
        "day": "string",
        "amount": "double",
    }
    version = a.version
    with pytest.raises(SchemaMismatchError) as e:
        sql(spark, "ALTER TABLE s.by_sql ALTER COLUMN id TYPE INT", catalog=catalog)
    assert str(e.value).startswith("ALTER TABLE s.by_sql ALTER COLUMN id TYPE INT: expected")
    assert "\n" not in str(e.value)
    assert a.refresh().version == version


def test_restore_timestamp_optimize_where_zorder_vacuum_dry_run(spark: Any, catalog: Any) -> None:
    a, b = twins(catalog)
    sql(spark, "DELETE FROM s.by_sql WHERE id = 1", catalog=catalog)  # v2
    v1 = next(h for h in a.history() if h.version == 1)
    when = dt.datetime.fromtimestamp(v1.timestamp_ms / 1000, dt.timezone.utc)
    out = sql(
        spark, f"RESTORE TABLE s.by_sql TO TIMESTAMP AS OF '{when.isoformat()}'", catalog=catalog
    ).collect()
    assert [tuple(r) for r in out] == [(3, "RESTORE")]
    assert rows(a) == rows(b)

    for _ in range(2):
        sql(
            spark, "INSERT INTO s.by_sql VALUES (10, 'mon', 2.0), (11, 'tue', 3.0)", catalog=catalog
        )
    tue = {f.path for f in a.refresh().snapshot().files() if "day=tue" in f.path}
    sql(spark, "OPTIMIZE s.by_sql WHERE day = 'mon' ZORDER BY (id, amount)", catalog=catalog)
    files = {f.path for f in a.refresh().snapshot().files()}
    assert {f for f in files if "day=tue" in f} == tue
    assert len([f for f in files if "day=mon" in f]) == 1
    assert a.snapshot().num_rows == 8

    sql(
        spark,
        "ALTER TABLE s.by_sql SET TBLPROPERTIES ('lakelog.vacuum.min_age_seconds' = '0')",
        catalog=catalog,
    )
    root = Path(a.uri.removeprefix("file://"))
    pq.write_table(ROWS, root / "day=wed" / "orphan.parquet")
    listed = sql(spark, "VACUUM s.by_sql RETAIN 0 HOURS DRY RUN", catalog=catalog).collect()
    assert [r["path"] for r in listed] == ["day=wed/orphan.parquet"]
    assert (root / "day=wed" / "orphan.parquet").exists()
    sql(spark, "VACUUM s.by_sql RETAIN 0 HOURS", catalog=catalog)
    assert not (root / "day=wed" / "orphan.parquet").exists()


def test_ctas_with_partitions_and_show_namespaces(spark: Any, catalog: Any) -> None:
    twins(catalog)
    catalog.create_namespace("t")
    sql(
        spark,
        "CREATE TABLE t.big USING lakelog PARTITIONED BY (day) AS "
        "SELECT * FROM s.by_sql WHERE amount > 2",
        catalog=catalog,
    )
    big = catalog.load_table("t.big")
    assert big.partition_by == ("day",) and big.snapshot().num_rows == 3
    shown = sql(spark, "SHOW NAMESPACES", catalog=catalog).collect()
    assert [r["namespace"] for r in shown] == ["s", "t"]
    shown = sql(spark, "SHOW TABLES IN t", catalog=catalog).collect()
    assert [(r["namespace"], r["tableName"]) for r in shown] == [("t", "big")]


@pytest.mark.parametrize(
    ("statement", "error", "words"),
    [
        ("SELECT * FROM s.by_sq", NoSuchTableError, "close names: s.by_sql"),
        ("SELECT * FROM sx.by_sql", SqlError, "`sx`.`by_sql`"),  # not lakelog's: Spark's words
        ("SELECT amout FROM s.by_sql", SqlError, "amout"),
        ("SELEC * FRM s.by_sql", SqlSyntaxError, "expected Spark SQL"),
        ("OPTIMIZE s.by_sql ZORDER (id)", SqlSyntaxError, "OPTIMIZE"),
        ("VACUUM s.by_sql RETAIN 0 HOURS", SqlError, "RETAIN at least 1 HOURS"),
        ("ALTER TABLE s.by_sql ALTER COLUMN amount TYPE INT", SchemaMismatchError, "TYPE INT:"),
        ("ALTER TABLE s.by_sql CHANGE COLUMN id key BIGINT", UnsupportedStatementError, "RENAME"),
        (
            "ALTER TABLE s.by_sql ALTER COLUMN id DROP NOT NULL",
            UnsupportedStatementError,
            "NOT NULL",
        ),
        ("UPDATE s.by_sql SET amount = 'x' WHERE id = 1", SqlError, "UPDATE ... SET, found 'x'"),
        (
            "INSERT INTO s.by_sql REPLACE WHERE dy = 'mon' SELECT 1, 'mon', 1.0",
            SqlError,
            "REPLACE WHERE, found 'dy'; close names: day",
        ),
        ("ALTER TABLE s.by_sql ADD COLUMNS (day STRING)", SqlError, "ALTER COLUMN day TYPE"),
        ("CREATE NAMESPACE s", NamespaceExistsError, "IF NOT EXISTS"),
        (
            "CREATE TABLE s.g (a INT COMMENT 'x') USING lakelog",
            UnsupportedStatementError,
            "COMMENT",
        ),
        ("INSERT INTO s.by_sql BY NAME SELECT 1 AS id", UnsupportedStatementError, "BY NAME"),
        ("CREATE NAMESPACE other LOCATION '/tmp/x'", UnsupportedStatementError, "LOCATION"),
        ("SELECT * FROM s.by_sql@v1", UnsupportedStatementError, "VERSION AS OF"),
        ("OPTIMIZE s.by_sql WHERE id > 1", SqlError, "only partition columns (day)"),
        ("CREATE TABLE s.by_sql (a INT) USING lakelog", TableAlreadyExistsError, "IF NOT EXISTS"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    spark: Any, catalog: Any, statement: str, error: type[Exception], words: str
) -> None:
    a, _ = twins(catalog)
    version = a.version
    with pytest.raises(error) as e:
        sql(spark, statement, catalog=catalog)
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert a.refresh().version == version and a.schema == SCHEMA
    assert catalog.list_tables() == ["s.by_api", "s.by_sql"]
    assert catalog.list_namespaces() == ["s"]
    assert "other" not in [d.name for d in spark.catalog.listDatabases()]


def test_an_unreachable_catalog_is_one_line(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for url in (
        f"postgresql://ana:s3cret@127.0.0.1:{find_free_port()}/lake",
        "sqlite:///" + str(tmp_path / "missing" / "c.db"),
    ):
        monkeypatch.setenv("LAKELOG_CATALOG", url)
        with pytest.raises(CatalogUnavailableError) as e:
            sql(spark, "SELECT * FROM s.t")
        assert "\n" not in str(e.value) and "s3cret" not in str(e.value)
    assert list(tmp_path.iterdir()) == []
