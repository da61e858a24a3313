"""``lakelog.sql.execute`` (no Spark): each statement of docs/sql.md gives the table and
rows the Python API gives on the same inputs, statement by statement."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog.errors import SchemaMismatchError, SqlError, UnsupportedStatementError
from lakelog.sql import execute

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("amount", pa.float64())])
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


def twins(catalog: Any, *, partition_by: tuple[str, ...] = ("day",)) -> tuple[Any, Any]:
    """Two tables with the same rows: one changed by SQL, one by the Python API."""
    catalog.create_namespace("s", exist_ok=True)
    a = catalog.create_table("s.by_sql", SCHEMA, partition_by=list(partition_by))
    b = catalog.create_table("s.by_api", SCHEMA, partition_by=list(partition_by))
    a.append(ROWS)
    b.append(ROWS)
    return a, b


def run(catalog: Any, statement: str) -> list[dict[str, Any]]:
    return list(execute(statement, catalog=catalog).to_pylist())


def test_alter_column_type_widens_as_widen_column_does(catalog: Any) -> None:
    catalog.create_namespace("s")
    schema = pa.schema([("id", pa.int32()), ("price", pa.float32()), ("n", pa.int16())])
    a = catalog.create_table("s.by_sql", schema)
    b = catalog.create_table("s.by_api", schema)
    data = pa.table({"id": [1, 2], "price": [1.5, 2.5], "n": [3, 4]}, schema=schema)
    a.append(data)
    b.append(data)
    assert run(catalog, "ALTER TABLE s.by_sql ALTER COLUMN id TYPE BIGINT") == []
    b.widen_column("id", pa.int64())
    run(catalog, "ALTER TABLE s.by_sql CHANGE COLUMN price price DOUBLE")  # Delta's form
    b.widen_column("price", pa.float64())
    run(catalog, "ALTER TABLE s.by_sql CHANGE n n INT")
    b.widen_column("n", pa.int32())
    assert a.refresh().schema == b.refresh().schema
    assert a.schema.field("id").type == pa.int64() and a.schema.field("n").type == pa.int32()
    assert rows(a) == rows(b)
    assert [h.operation for h in a.history()] == [h.operation for h in b.history()]
    version = a.version
    run(catalog, "ALTER TABLE s.by_sql ALTER COLUMN id TYPE BIGINT")  # already: no change
    assert a.refresh().version == version


@pytest.mark.parametrize(
    ("statement", "error", "words"),
    [
        (
            "ALTER TABLE s.by_sql ALTER COLUMN amount TYPE INT",
            SchemaMismatchError,
            "ALTER TABLE s.by_sql ALTER COLUMN amount TYPE INT: expected a widening",
        ),
        (
            "ALTER TABLE s.by_sql CHANGE COLUMN id id STRING",
            SchemaMismatchError,
            "CHANGE COLUMN id id STRING: expected a widening",
        ),
        (
            "ALTER TABLE s.by_sql ALTER COLUMN day TYPE BIGINT",
            SchemaMismatchError,
            "ALTER COLUMN day TYPE BIGINT",
        ),
        (
            "ALTER TABLE s.by_sql ALTER COLUMN amout TYPE DOUBLE",
            SqlError,
            "ALTER COLUMN amout TYPE DOUBLE, found 'amout'; close names: amount",
        ),
        (
            "ALTER TABLE s.by_sql CHANGE COLUMN id key BIGINT",
            UnsupportedStatementError,
            "RENAME COLUMN id TO key",
        ),
        (
            "ALTER TABLE s.by_sql ALTER COLUMN id COMMENT 'the key'",
            UnsupportedStatementError,
            "ALTER COLUMN id COMMENT",
        ),
        (
            "ALTER TABLE s.by_sql ALTER COLUMN id TYPE ARRAY<INT>",
            UnsupportedStatementError,
            "ARRAY<INT>",
        ),
    ],
)
def test_a_narrowing_or_impossible_type_change_names_the_clause(
    catalog: Any, statement: str, error: type[Exception], words: str
) -> None:
    a, _ = twins(catalog)
    version = a.version
    with pytest.raises(error) as e:
        run(catalog, statement)
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert a.refresh().version == version and a.schema == SCHEMA


def test_insert_overwrite_and_replace_where_match_the_python_api(catalog: Any) -> None:
    a, b = twins(catalog)
    out = run(
        catalog,
        "INSERT INTO s.by_sql REPLACE WHERE day = 'mon' "
        "SELECT id + 100, day, amount FROM s.by_api WHERE day = 'mon'",
    )
    assert out[0]["num_inserted_rows"] == 2
    mon = b.snapshot().to_arrow(filter="day = 'mon'")
    b.overwrite(mon.set_column(0, "id", pc.add(mon["id"], 100)), where="day = 'mon'")
    assert rows(a) == rows(b)
    run(catalog, "INSERT OVERWRITE s.by_sql SELECT * FROM s.by_api VERSION AS OF 1")
    b.overwrite(b.snapshot(1).to_arrow())
    assert rows(a) == rows(b) == rows(ROWS)


def test_ctas_with_partitions_and_show(catalog: Any) -> None:
    twins(catalog)
    run(
        catalog,
        "CREATE TABLE s.big USING lakelog PARTITIONED BY (day) AS "
        "SELECT * FROM s.by_sql WHERE amount > 2",
    )
    big = catalog.load_table("s.big")
    assert big.partition_by == ("day",)
    assert rows(big) == rows(ROWS.filter(pc.greater(ROWS["amount"], 2)))
    catalog.create_namespace("t")
    assert run(catalog, "SHOW TABLES IN s") == [
        {"namespace": "s", "tableName": n} for n in ["big", "by_api", "by_sql"]
    ]
    assert run(catalog, "SHOW NAMESPACES") == [{"namespace": "s"}, {"namespace": "t"}]


def test_describe_detail_restore_timestamp_and_table_changes(catalog: Any) -> None:
    a, b = twins(catalog)
    a.set_properties({"lakelog.change_data_feed": "true"})  # v2
    b.set_properties({"lakelog.change_data_feed": "true"})
    detail = run(catalog, "DESCRIBE DETAIL s.by_sql")[0]
    snap = a.snapshot()
    assert (detail["version"], detail["numFiles"], detail["numRows"], detail["location"]) == (
        snap.version,
        snap.num_files,
        snap.num_rows,
        a.uri,
    )
    run(catalog, "UPDATE s.by_sql SET amount = 0.0 WHERE id = 2")  # v3
    b.update("id = 2", set={"amount": 0.0})
    got = execute(
        "SELECT id, amount, _change_type, _commit_version FROM table_changes('s.by_sql', 3)",
        catalog=catalog,
    )
    want = b.changes(3).to_arrow().select(["id", "amount", "_change_type", "_commit_version"])
    assert rows(got) == rows(want) and len(rows(got)) == 2
    v2 = next(h for h in a.history() if h.version == 2)
    when = dt.datetime.fromtimestamp(v2.timestamp_ms / 1000, dt.timezone.utc)
    out = run(catalog, f"RESTORE TABLE s.by_sql TO TIMESTAMP AS OF '{when.isoformat()}'")
    b.restore(as_of=when)
    assert out == [{"version": 4, "operation": "RESTORE"}]
    assert rows(a) == rows(b) == rows(ROWS)
    assert run(
        catalog, f"SELECT count(*) AS n FROM s.by_sql TIMESTAMP AS OF '{when.isoformat()}'"
    ) == [{"n": 4}]


def test_vacuum_dry_run_lists_what_vacuum_deletes(catalog: Any) -> None:
    a, _ = twins(catalog)
    run(
        catalog,
        "ALTER TABLE s.by_sql SET TBLPROPERTIES ('lakelog.vacuum.min_age_seconds' = '0')",
    )
    root = Path(a.uri.removeprefix("file://"))
    pq.write_table(ROWS, root / "day=mon" / "orphan.parquet")  # a writer that never committed
    version = a.refresh().version
    listed = run(catalog, "VACUUM s.by_sql RETAIN 0 HOURS DRY RUN")
    assert listed == [{"path": p} for p in a.vacuum(older_than=dt.timedelta(0)).files]
    assert listed == [{"path": "day=mon/orphan.parquet"}]
    assert (root / "day=mon" / "orphan.parquet").exists()
    run(catalog, "VACUUM s.by_sql RETAIN 0 HOURS")
    assert not (root / "day=mon" / "orphan.parquet").exists()
    assert a.refresh().version == version and rows(a) == rows(ROWS)


def test_optimize_where_zorder_by_reclusters_only_the_matched_partition(catalog: Any) -> None:
    a, _ = twins(catalog)
    for _ in range(2):
        run(catalog, "INSERT INTO s.by_sql VALUES (10, 'mon', 2.0), (11, 'tue', 3.0)")
    tue = {f.path for f in a.refresh().snapshot().files() if "day=tue" in f.path}
    run(catalog, "OPTIMIZE s.by_sql WHERE day = 'mon' ZORDER BY (id, amount)")
    files = {f.path for f in a.refresh().snapshot().files()}
    assert {f for f in files if "day=tue" in f} == tue  # untouched
    assert len([f for f in files if "day=mon" in f]) == 1  # three files reclustered into one
    params = a.history(1)[0].parameters
    assert "id" in str(params) and "amount" in str(params), params
    assert a.snapshot().num_rows == 8


def test_drop_columns_takes_a_list_and_optimize_where_only_partition_columns(
    catalog: Any,
) -> None:
    a, _ = twins(catalog)
    a.add_columns(pa.schema([("x", pa.int64()), ("y", pa.int64())]))
    run(catalog, "ALTER TABLE s.by_sql DROP COLUMNS (x, y)")
    assert a.refresh().schema == SCHEMA
    version = a.version
    with pytest.raises(SqlError, match=r"only partition columns \(day\) in OPTIMIZE"):
        run(catalog, "OPTIMIZE s.by_sql WHERE day = 'mon' AND id > 1")
    assert a.refresh().version == version


def test_lakelog_sql_widens_a_column(catalog: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from lakelog.cli import main

    catalog.create_namespace("s")
    table = catalog.create_table("s.t", pa.schema([("id", pa.int32())]))
    table.append(pa.table({"id": pa.array([7], pa.int32())}))
    url = catalog.url
    assert main(["sql", "ALTER TABLE s.t ALTER COLUMN id TYPE BIGINT", "--catalog", url]) == 0
    assert capsys.readouterr().out.strip() == "ok"
    assert table.refresh().schema.field("id").type == pa.int64()
    assert main(["sql", "ALTER TABLE s.t CHANGE COLUMN id id INT", "--catalog", url]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lakelog: error: ALTER TABLE s.t CHANGE COLUMN id id INT: expected")
    assert err.count("\n") == 1 and table.refresh().schema.field("id").type == pa.int64()
