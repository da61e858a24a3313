"""``lakelog sql "<statement>"``: statements without Spark (DuckDB for queries)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
from lakelog.cli import main


def run(capsys: pytest.CaptureFixture[str], url: str, statement: str, *flags: str) -> Any:
    code = main(["sql", statement, "--catalog", url, *flags])
    out, err = capsys.readouterr()
    return code, out, err


def rows(capsys: pytest.CaptureFixture[str], url: str, statement: str) -> Any:
    code, out, err = run(capsys, url, statement, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def url(tmp_path: Path) -> str:
    u = "sqlite:///" + str(tmp_path) + "/c.db"
    lakelog.connect_catalog(u, warehouse=str(tmp_path / "wh")).close()
    return u


def test_a_session_of_statements(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    rows(capsys, url, "CREATE NAMESPACE sales")
    rows(
        capsys,
        url,
        "CREATE TABLE sales.orders (id BIGINT, day STRING, amount DOUBLE) USING lakelog "
        "PARTITIONED BY (day)",
    )
    got = rows(capsys, url, "INSERT INTO sales.orders VALUES (1, 'mon', 9.5), (2, 'tue', 3.0)")
    assert got == [
        {
            "num_affected_rows": 2,
            "num_updated_rows": 0,
            "num_deleted_rows": 0,
            "num_inserted_rows": 2,
        }
    ]
    rows(capsys, url, "UPDATE sales.orders SET amount = amount + 1 WHERE id = 1")
    rows(capsys, url, "DELETE FROM sales.orders WHERE day = 'tue'")
    assert rows(capsys, url, "SELECT id, amount FROM sales.orders") == [{"id": 1, "amount": 10.5}]
    old = rows(capsys, url, "SELECT count(*) AS n FROM sales.orders VERSION AS OF 1")
    assert old == [{"n": 2}]
    rows(
        capsys,
        url,
        "CREATE TABLE sales.src USING lakelog AS SELECT 1 AS id, 'mon' AS day, 0.5 AS amount",
    )
    got = rows(
        capsys,
        url,
        "MERGE INTO sales.orders t USING sales.src s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    )
    assert got[0]["num_updated_rows"] == 1
    assert rows(capsys, url, "SHOW TABLES IN sales") == [
        {"namespace": "sales", "tableName": "orders"},
        {"namespace": "sales", "tableName": "src"},
    ]
    hist = rows(capsys, url, "DESCRIBE HISTORY sales.orders LIMIT 1")
    assert [h["operation"] for h in hist] == ["MERGE"]
    assert rows(capsys, url, "DESCRIBE DETAIL sales.orders")[0]["numRows"] == 1
    rows(capsys, url, "RESTORE TABLE sales.orders TO VERSION AS OF 1")
    assert len(rows(capsys, url, "SELECT * FROM sales.orders")) == 2
    rows(capsys, url, "DELETE FROM sales.orders WHERE id = 2")
    first = rows(capsys, url, "DESCRIBE HISTORY sales.orders")[-2]  # version 1
    assert first["version"] == 1
    rows(capsys, url, f"RESTORE sales.orders TO TIMESTAMP AS OF '{first['timestamp']}'")
    assert len(rows(capsys, url, "SELECT * FROM sales.orders")) == 2
    rows(capsys, url, "OPTIMIZE sales.orders WHERE day = 'mon'")
    rows(capsys, url, "ALTER TABLE sales.orders ADD COLUMNS (note STRING)")
    assert rows(capsys, url, "VACUUM sales.orders RETAIN 200 HOURS DRY RUN") == []
    code, out, _ = run(capsys, url, "SELECT id, note FROM sales.orders ORDER BY id")
    assert code == 0 and "id" in out and "note" in out
    code, out, _ = run(capsys, url, "DROP TABLE sales.src")
    assert (code, out.strip()) == (0, "ok")


@pytest.mark.parametrize(
    ("statement", "words"),
    [
        ("SELEC * FRM sales.orders", "expected Spark SQL"),
        ("SELECT * FROM sales.ordrs", "sales.orders"),
        ("SELECT * FROM sales.orders VERSION AS OF 'x'", "expected an integer in VERSION AS OF"),
        ("DELETE FROM sales.ordrs WHERE id = 1", "sales.orders"),
        (
            "MERGE INTO sales.orders t USING sales.orders s ON t.id = s.id "
            "WHEN NOT MATCHED BY SOURCE THEN UPDATE SET *",
            "WHEN NOT MATCHED BY SOURCE THEN UPDATE SET *",
        ),
        (
            "MERGE INTO sales.orders t USING sales.orders s ON t.id = s.id "
            "WHEN MATCHED THEN DELETE WHEN MATCHED AND s.amount > 0 THEN UPDATE SET *",
            "expected a condition on every WHEN MATCHED clause but the last",
        ),
        (
            "MERGE INTO sales.orders t USING sales.orders s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET amout = s.amount",
            "found 'amout'; close names: amount",
        ),
        (
            "MERGE INTO sales.orders t USING sales.orders s ON t.id = s.id "
            "WHEN MATCHED AND t.amout > 1 THEN DELETE",
            "WHEN MATCHED AND `amout` > 1 THEN DELETE, found 'amout'",
        ),
        (
            "MERGE INTO sales.orders t USING sales.orders s ON t.id = s.id "
            "WHEN NOT MATCHED THEN INSERT (id, amount) VALUES (s.id, s.amout)",
            "found 'source.amout' (did you mean 'source.amount'?)",
        ),
        ("UPDATE sales.orders SET amount = sqrt(amount)", "SQRT(amount)"),
        ("UPDATE sales.orders SET amout = 1", "UPDATE ... SET, found 'amout'; close names: amount"),
        ("DELETE FROM sales.orders WHERE amout > 1", "DELETE ... WHERE"),
        ("INSERT INTO sales.orders VALUES ('x', 1.0)", "expected values of the table's types"),
        ("ALTER TABLE sales.orders DROP COLUMN amout", "DROP COLUMN, found 'amout'"),
        ("CREATE TABLE nons.t (a INT) USING lakelog", "CREATE NAMESPACE nons"),
        ("DROP TABLE sales.ordrs", "close names: sales.orders"),
    ],
)
def test_errors_are_one_line_and_write_nothing(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], statement: str, words: str
) -> None:
    cat = lakelog.connect_catalog(url)
    cat.create_namespace("sales")
    t = cat.create_table("sales.orders", pa.schema([("id", pa.int64()), ("amount", pa.float64())]))
    t.append(pa.table({"id": [1], "amount": [1.0]}))
    code, out, err = run(capsys, url, statement)
    assert code == 1 and out == ""
    assert err.startswith("lakelog: error: ") and words in err and err.count("\n") == 1, err
    assert t.refresh().version == 1
    cat.close()


def test_partitioned_by_transforms(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    rows(capsys, url, "CREATE NAMESPACE ev")
    rows(
        capsys,
        url,
        "CREATE TABLE ev.e (ts TIMESTAMP, id BIGINT, name STRING) USING lakelog "
        "PARTITIONED BY (day(ts), bucket(16, id), truncate(4, name))",
    )
    rows(
        capsys,
        url,
        "INSERT INTO ev.e VALUES (TIMESTAMP '2024-01-01 05:00:00', 1, 'alpha'), "
        "(TIMESTAMP '2024-01-02 05:00:00', 2, 'beta')",
    )
    table = lakelog.connect_catalog(url).load_table("ev.e")
    assert table.partitioning == ["day(ts)", "bucket(16, id)", "truncate(4, name)"]
    assert len(table.snapshot().files()) == 2
    assert len(table.snapshot().files("ts >= '2024-01-02'")) == 1
    got = rows(capsys, url, "SELECT id FROM ev.e WHERE ts >= TIMESTAMP '2024-01-02 00:00:00'")
    assert got == [{"id": 2}]
    code, _, err = run(
        capsys,
        url,
        "CREATE TABLE ev.bad (v DOUBLE, n BIGINT) USING lakelog PARTITIONED BY (bucket(4, v))",
    )
    assert code != 0 and "found column 'v' of type double" in err
    assert err.strip().count("\n") == 0


def test_alter_table_partition_fields(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    rows(capsys, url, "CREATE NAMESPACE ev")
    rows(
        capsys,
        url,
        "CREATE TABLE ev.e (ts TIMESTAMP, id BIGINT) USING lakelog PARTITIONED BY (day(ts))",
    )
    rows(capsys, url, "INSERT INTO ev.e VALUES (TIMESTAMP '2024-01-01 05:00:00', 1)")
    rows(capsys, url, "ALTER TABLE ev.e ADD PARTITION FIELD bucket(4, id)")
    rows(capsys, url, "ALTER TABLE ev.e REPLACE PARTITION FIELD ts_day WITH hour(ts)")
    table = lakelog.connect_catalog(url).load_table("ev.e")
    assert table.partitioning == ["hour(ts)", "bucket(4, id)"]
    rows(capsys, url, "ALTER TABLE ev.e DROP PARTITION FIELD bucket(4, id)")
    rows(capsys, url, "INSERT INTO ev.e VALUES (TIMESTAMP '2024-01-02 07:00:00', 2)")
    table = lakelog.connect_catalog(url).load_table("ev.e")
    assert table.metadata.partition_specs == (
        ("day(ts)",),
        ("day(ts)", "bucket(4, id)"),
        ("hour(ts)", "bucket(4, id)"),
        ("hour(ts)",),
    )
    tags = sorted(f.tags["partition.spec"] for f in table.snapshot().files())
    assert tags == ["0", "3"]
    assert rows(capsys, url, "SELECT id FROM ev.e ORDER BY id") == [{"id": 1}, {"id": 2}]
    code, _, err = run(capsys, url, "ALTER TABLE ev.e DROP PARTITION FIELD id_bucket_4")
    assert code != 0 and "expected a partition field of the table ['hour(ts)']" in err
    code, _, err = run(capsys, url, "ALTER TABLE ev.e ADD PARTITION FIELD day(id)")
    assert code != 0 and "expected a date or timestamp column" in err
