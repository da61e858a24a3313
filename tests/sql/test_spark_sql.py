"""lakelog.spark.sql: each statement gives the table and rows the Python API gives on the
same inputs; bad statements are one-line typed errors with nothing written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakelog
import lakelog.spark
from lakelog.errors import (
    NoSuchTableError,
    SqlError,
    SqlSyntaxError,
    UnsupportedStatementError,
)
from lakelog.spark.sql import sql


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Any]:
    """A fresh SQLite catalog per test, in the test's folder (this module's own: the
    suite's ``catalog`` fixture runs on both catalog backends)."""
    cat = lakelog.connect_catalog(
        "sqlite:///" + str(tmp_path) + "/c.db", warehouse=str(tmp_path / "wh")
    )
    try:
        yield cat
    finally:
        cat.close()


pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("amount", pa.float64())])
ROWS = pa.table(
    {"id": [1, 2, 3, 4], "day": ["mon", "mon", "tue", "wed"], "amount": [9.5, 3.0, 7.25, 1.0]},
    schema=SCHEMA,
)


def rows(table: Any) -> list[tuple[Any, ...]]:
    """A table's rows, sorted by id."""
    data = table.snapshot().to_arrow() if hasattr(table, "snapshot") else table
    return sorted(tuple(r.values()) for r in data.to_pylist())


def df_rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def twins(catalog: Any) -> tuple[Any, Any]:
    """Two tables with the same rows: one changed by SQL, one by the Python API."""
    catalog.create_namespace("s", exist_ok=True)
    a = catalog.create_table("s.by_sql", SCHEMA, partition_by=["day"])
    b = catalog.create_table("s.by_api", SCHEMA, partition_by=["day"])
    a.append(ROWS)
    b.append(ROWS)
    return a, b


def test_ddl_and_show(spark: Any, catalog: Any, tmp_path: Any) -> None:
    sql(spark, "CREATE NAMESPACE sales", catalog=catalog)
    sql(spark, "CREATE NAMESPACE IF NOT EXISTS sales", catalog=catalog)
    sql(
        spark,
        "CREATE TABLE sales.orders (id BIGINT, day STRING, amount DOUBLE) USING lakelog "
        "PARTITIONED BY (day) TBLPROPERTIES ('lakelog.change_data_feed' = 'true')",
        catalog=catalog,
    )
    t = catalog.load_table("sales.orders")
    assert t.schema == SCHEMA and t.partition_by == ("day",)
    assert t.properties["lakelog.change_data_feed"] == "true"
    sql(spark, "CREATE TABLE IF NOT EXISTS sales.orders (x INT) USING lakelog", catalog=catalog)
    assert catalog.load_table("sales.orders").schema == SCHEMA

    lakelog.write_table(str(tmp_path / "ext"), ROWS)
    sql(
        spark,
        f"CREATE TABLE sales.ext USING lakelog LOCATION '{tmp_path / 'ext'}'",
        catalog=catalog,
    )
    assert rows(catalog.load_table("sales.ext")) == rows(ROWS)
    sql(spark, "ALTER TABLE sales.ext RENAME TO sales.ext2", catalog=catalog)
    shown = sql(spark, "SHOW TABLES IN sales", catalog=catalog)
    assert df_rows(shown) == [("sales", "ext2"), ("sales", "orders")]
    sql(spark, "DROP TABLE sales.ext2", catalog=catalog)
    sql(spark, "DROP TABLE IF EXISTS sales.ext2", catalog=catalog)
    assert catalog.list_tables("sales") == ["sales.orders"]
    assert lakelog.open_table(str(tmp_path / "ext")).snapshot().num_rows == 4  # data kept
    sql(spark, "DROP NAMESPACE sales CASCADE", catalog=catalog)
    assert catalog.list_namespaces() == []


def test_ctas_and_select_with_joins_ctes_and_time_travel(spark: Any, catalog: Any) -> None:
    a, _ = twins(catalog)
    a.append(pa.table({"id": [5], "day": ["thu"], "amount": [2.0]}, schema=SCHEMA))  # v2
    sql(
        spark,
        "CREATE TABLE s.days USING lakelog AS SELECT DISTINCT day, upper(day) AS name "
        "FROM s.by_sql VERSION AS OF 1",
        catalog=catalog,
    )
    assert sorted(
        catalog.load_table("s.days").snapshot().to_arrow().to_pylist(), key=str
    ) == sorted([{"day": d, "name": d.upper()} for d in ["mon", "tue", "wed"]], key=str)
    got = sql(
        spark,
        "WITH old AS (SELECT * FROM s.by_sql VERSION AS OF 1) "
        "SELECT n.id, d.name FROM s.by_sql n JOIN s.days d ON n.day = d.day "
        "WHERE n.id NOT IN (SELECT id FROM old WHERE amount > 5) ORDER BY n.id",
        catalog=catalog,
    )
    assert [tuple(r) for r in got.collect()] == [(2, "MON"), (4, "WED")]
    # a name outside the lakelog catalog goes to Spark unchanged
    spark.createDataFrame([(1,), (3,)], "id BIGINT").createOrReplaceTempView("wanted")
    got = sql(spark, "SELECT t.id FROM s.by_sql t JOIN wanted w ON t.id = w.id", catalog=catalog)
    assert df_rows(got) == [(1,), (3,)]
    assert df_rows(sql(spark, "SELECT 1 + 1", catalog=catalog)) == [(2,)]
    ts = next(h.timestamp_ms for h in a.history() if h.version == 1)
    import datetime as dt

    when = dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    got = sql(spark, f"SELECT count(*) FROM s.by_sql TIMESTAMP AS OF '{when}'", catalog=catalog)
    assert df_rows(got) == [(4,)]


def test_inserts_match_the_python_api(spark: Any, catalog: Any) -> None:
    a, b = twins(catalog)
    new = pa.table({"id": [7, 8], "day": ["mon", "fri"], "amount": [1.5, 2.5]}, schema=SCHEMA)
    out = sql(
        spark, "INSERT INTO s.by_sql VALUES (7, 'mon', 1.5), (8, 'fri', 2.5)", catalog=catalog
    )
    b.append(new)
    assert out.collect()[0].asDict() == {
        "num_affected_rows": 2,
        "num_updated_rows": 0,
        "num_deleted_rows": 0,
        "num_inserted_rows": 2,
    }
    assert rows(a) == rows(b)
    sql(spark, "INSERT INTO s.by_sql (id, day) VALUES (9, 'sat')", catalog=catalog)
    b.append(pa.table({"id": [9], "day": ["sat"], "amount": [None]}, schema=SCHEMA))
    assert rows(a) == rows(b)
    out = sql(
        spark,
        "INSERT INTO s.by_sql REPLACE WHERE day = 'mon' SELECT id + 100, day, amount "
        "FROM s.by_api VERSION AS OF 1 WHERE day = 'mon'",
        catalog=catalog,
    )
    assert out.collect()[0]["num_inserted_rows"] == 2
    mon = b.snapshot(1).to_arrow(filter="day = 'mon'")
    b.overwrite(mon.set_column(0, "id", pa.compute.add(mon["id"], 100)), where="day = 'mon'")
    assert rows(a) == rows(b)
    sql(spark, "INSERT OVERWRITE s.by_sql SELECT * FROM s.by_api VERSION AS OF 1", catalog=catalog)
    b.overwrite(b.snapshot(1).to_arrow())
    assert rows(a) == rows(b)


def test_delete_and_update_match_the_python_api(spark: Any, catalog: Any) -> None:
    a, b = twins(catalog)
    out = sql(spark, "DELETE FROM s.by_sql WHERE amount > 5 AND day = 'mon'", catalog=catalog)
    b.delete("amount > 5 AND day = 'mon'")
    assert out.collect()[0]["num_deleted_rows"] == 1
    assert rows(a) == rows(b)
    out = sql(
        spark, "UPDATE s.by_sql SET amount = amount * 2 + 1 WHERE day <> 'wed'", catalog=catalog
    )
    b.update(
        "day <> 'wed'",
        set={
            "amount": pc.Expression._call(
                "add",
                [pc.Expression._call("multiply", [pc.field("amount"), pc.scalar(2)]), pc.scalar(1)],
            )
        },
    )
    assert out.collect()[0]["num_updated_rows"] == 2
    assert rows(a) == rows(b)


def test_merge_matches_the_python_api(spark: Any, catalog: Any) -> None:
    a, b = twins(catalog)
    src = pa.table(
        {"id": [2, 3, 10], "day": ["mon", "tue", "sun"], "amount": [0.5, 0.25, 4.0]}, schema=SCHEMA
    )
    catalog.create_table("s.src", SCHEMA).append(src)
    out = sql(
        spark,
        "MERGE INTO s.by_sql AS t USING s.src AS s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
        catalog=catalog,
    )
    b.merge(src, "id")
    assert out.collect()[0].asDict() == {
        "num_affected_rows": 3,
        "num_updated_rows": 2,
        "num_deleted_rows": 0,
        "num_inserted_rows": 1,
    }
    assert rows(a) == rows(b)
    sql(
        spark,
        "MERGE INTO s.by_sql t USING (SELECT * FROM s.src WHERE id < 10) s ON t.id = s.id "
        "WHEN MATCHED THEN DELETE WHEN NOT MATCHED BY SOURCE THEN DELETE",
        catalog=catalog,
    )
    b.merge(
        src.filter(pa.compute.less(src["id"], 10)),
        "id",
        when_matched="delete",
        when_not_matched="ignore",
        when_not_matched_by_source="delete",
    )
    assert rows(a) == rows(b) == []


def test_merge_with_set_expressions(spark: Any, catalog: Any) -> None:
    a, _ = twins(catalog)
    catalog.create_table("s.src", SCHEMA).append(
        pa.table({"id": [1, 4], "day": ["mon", "wed"], "amount": [0.5, 10.0]}, schema=SCHEMA)
    )
    sql(
        spark,
        "MERGE INTO s.by_sql t USING s.src s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET amount = t.amount + s.amount",
        catalog=catalog,
    )
    assert dict((r[0], r[2]) for r in rows(a)) == {1: 10.0, 2: 3.0, 3: 7.25, 4: 11.0}


def test_conditional_merge_matches_the_merge_api(spark: Any, catalog: Any) -> None:
    a, b = twins(catalog)
    src = pa.table(
        {"id": [1, 2, 10], "day": ["mon", "mon", "sun"], "amount": [20.0, 1.0, 4.0]},
        schema=SCHEMA,
    )
    catalog.create_table("s.src", SCHEMA).append(src)
    sql(
        spark,
        "MERGE INTO s.by_sql t USING s.src s ON t.id = s.id "
        "WHEN MATCHED AND s.amount > t.amount THEN UPDATE SET * "
        "WHEN NOT MATCHED THEN INSERT *",
        catalog=catalog,
    )
    lakelog.spark.merge(
        spark,
        b.uri,
        spark.createDataFrame(src.to_pylist(), "id BIGINT, day STRING, amount DOUBLE"),
        "id",
        matched_condition=pc.field("source.amount") > pc.field("amount"),
    )
    assert rows(a) == rows(b)
    assert dict((r[0], r[2]) for r in rows(a))[1] == 20.0  # 20 > 9.5: updated
    assert dict((r[0], r[2]) for r in rows(a))[2] == 3.0  # 1 < 3: kept, not inserted


def test_table_statements(spark: Any, catalog: Any) -> None:
    a, _ = twins(catalog)
    sql(spark, "DELETE FROM s.by_sql WHERE id = 1", catalog=catalog)  # v2
    hist = sql(spark, "DESCRIBE HISTORY s.by_sql LIMIT 1", catalog=catalog).collect()
    assert [(h["version"], h["operation"]) for h in hist] == [(2, "DELETE")]
    detail = sql(spark, "DESCRIBE DETAIL s.by_sql", catalog=catalog).collect()[0]
    assert (detail["format"], detail["numRows"], detail["partitionColumns"]) == (
        "lakelog",
        3,
        ["day"],
    )
    sql(spark, "RESTORE TABLE s.by_sql TO VERSION AS OF 1", catalog=catalog)
    assert rows(a) == rows(ROWS)
    for _ in range(2):
        sql(spark, "INSERT INTO s.by_sql VALUES (11, 'mon', 1.0)", catalog=catalog)
    v = a.refresh().version
    sql(spark, "OPTIMIZE s.by_sql ZORDER BY (id, amount)", catalog=catalog)
    new = [h for h in a.history() if h.version > v]
    assert new, "OPTIMIZE ZORDER BY committed nothing"  # reclustered, as Delta's does
    assert any("id" in str(h.parameters) and "amount" in str(h.parameters) for h in new), new
    for _ in range(2):
        sql(spark, "INSERT INTO s.by_sql VALUES (12, 'tue', 1.0)", catalog=catalog)
    before = a.refresh().snapshot().num_files
    sql(spark, "OPTIMIZE s.by_sql WHERE day = 'tue'", catalog=catalog)
    assert a.refresh().snapshot().num_files == before - 2
    assert sql(spark, "VACUUM s.by_sql DRY RUN", catalog=catalog).count() == 0
    sql(spark, "ALTER TABLE s.by_sql ADD COLUMNS (note STRING)", catalog=catalog)
    sql(spark, "ALTER TABLE s.by_sql RENAME COLUMN note TO remark", catalog=catalog)
    sql(
        spark,
        "ALTER TABLE s.by_sql SET TBLPROPERTIES ('lakelog.change_data_feed' = 'true')",
        catalog=catalog,
    )
    assert a.refresh().schema.names == ["id", "day", "amount", "remark"]
    sql(spark, "ALTER TABLE s.by_sql DROP COLUMN remark", catalog=catalog)
    assert a.refresh().schema == SCHEMA
    v = a.version
    sql(spark, "UPDATE s.by_sql SET amount = 0.0 WHERE id = 2", catalog=catalog)
    changes = sql(
        spark,
        f"SELECT id, _change_type FROM table_changes('s.by_sql', {v + 1}) ORDER BY _change_type",
        catalog=catalog,
    )
    assert [tuple(r) for r in changes.collect()] == [
        (2, "update_postimage"),
        (2, "update_preimage"),
    ]


def test_views_do_not_outlive_the_statement(spark: Any, catalog: Any) -> None:
    twins(catalog)
    df = sql(spark, "SELECT * FROM s.by_sql VERSION AS OF 1 WHERE day = 'mon'", catalog=catalog)
    left = [t.name for t in spark.catalog.listTables() if t.name.startswith("lakelog_sql_")]
    assert left == []
    assert df.count() == 2  # the DataFrame kept its plan


def test_spark_statements_pass_through_with_lakelog_names_resolved(
    spark: Any, catalog: Any
) -> None:
    a, _ = twins(catalog)
    sql(
        spark,
        "CREATE OR REPLACE TEMPORARY VIEW monday AS SELECT * FROM s.by_sql WHERE day = 'mon'",
        catalog=catalog,
    )
    assert df_rows(spark.sql("SELECT id FROM monday")) == [(1,), (2,)]
    version = a.version
    # a statement lakelog does not run yet that would change a lakelog table is refused
    with pytest.raises(UnsupportedStatementError, match="CREATE OR REPLACE TABLE"):
        sql(spark, "CREATE OR REPLACE TABLE s.by_sql (x INT) USING lakelog", catalog=catalog)
    with pytest.raises(UnsupportedStatementError, match="USING parquet"):
        sql(spark, "CREATE TABLE s.other (x INT) USING parquet", catalog=catalog)
    assert a.refresh().version == version
    assert catalog.load_table("s.by_sql").schema == SCHEMA
    assert catalog.list_tables("s") == ["s.by_api", "s.by_sql"]


@pytest.mark.parametrize(
    ("statement", "error", "words"),
    [
        ("SELEC * FRM s.by_sql", SqlSyntaxError, "expected Spark SQL"),
        ("SELECT * FROM s.by_sq", NoSuchTableError, "s.by_sql"),
        ("DELETE FROM s.by_sq WHERE id = 1", NoSuchTableError, "s.by_sql"),
        (
            "MERGE INTO s.by_sql t USING s.by_api s ON t.id = s.id "
            "WHEN NOT MATCHED BY SOURCE THEN UPDATE SET *",
            UnsupportedStatementError,
            "WHEN NOT MATCHED BY SOURCE THEN UPDATE SET *",
        ),
        (
            "MERGE INTO s.by_sql t USING s.by_api s ON t.id = s.id "
            "WHEN MATCHED THEN DELETE WHEN MATCHED AND s.amount > 1 THEN UPDATE SET *",
            lakelog.InvalidArgumentError,
            "expected a condition on every WHEN MATCHED clause but the last",
        ),
        (
            "MERGE INTO s.by_sql t USING s.by_api s ON t.id = s.id "
            "WHEN MATCHED AND s.amout > 1 THEN DELETE",
            lakelog.InvalidArgumentError,
            "amout",
        ),
        ("UPDATE s.by_sql SET amount = sqrt(amount)", UnsupportedStatementError, "SQRT"),
        ("OPTIMIZE s.by_sql WHERE", SqlSyntaxError, "OPTIMIZE"),
        ("SELECT nope FROM s.by_sql", SqlError, "nope"),
        ("UPDATE s.by_sql SET amout = 1 WHERE id = 1", SqlError, "SET, found 'amout'; close"),
        ("DELETE FROM s.by_sql WHERE amout > 1", SqlError, "DELETE ... WHERE"),
        ("INSERT INTO s.by_sql VALUES ('x', 'mon', 1.0)", SqlError, "Spark's error"),
        ("CREATE TABLE nons.t (a INT) USING lakelog", lakelog.LakelogError, "CREATE NAMESPACE"),
    ],
)
def test_bad_statements_are_one_line_and_write_nothing(
    spark: Any, catalog: Any, statement: str, error: type[Exception], words: str
) -> None:
    a, _ = twins(catalog)
    version = a.version
    with pytest.raises(error) as e:
        sql(spark, statement, catalog=catalog)
    assert words in str(e.value) and "\n" not in str(e.value)
    assert a.refresh().version == version
