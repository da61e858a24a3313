"""A table's rules on the Spark write paths (docs/constraints.md): ``lakelog.spark.write``,
``df.write.format("lakelog")``, the streaming sink, Spark's update and merge. Each checks
the rows in the executor tasks that write them; a violation reaches the driver as
:class:`~lakelog.ConstraintViolationError` and nothing is committed."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog import ConstraintViolationError

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema(
    [("id", pa.int64()), ("amount", pa.float64()), ("ts", pa.timestamp("us", tz="UTC")),
     ("day", pa.date32())]
)  # fmt: skip
TS = dt.datetime(2026, 3, 4, 23, 0, tzinfo=dt.timezone.utc)


def _table(tmp_path: Path) -> lakelog.Table:
    t = lakelog.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        constraints={"positive": "amount > 0"},
        generated={"day": "CAST(ts AS DATE)"},
    )
    t.append(pa.table({"id": [1], "amount": [1.0], "ts": [TS]}))
    return t


def _frame(spark: Any, amounts: list[float]) -> Any:
    rows = [(i + 10, a, TS) for i, a in enumerate(amounts)]
    return spark.createDataFrame(rows, "id long, amount double, ts timestamp")


def test_spark_write_checks_rows_in_its_tasks_and_computes_generated_columns(
    spark: Any, tmp_path: Path
) -> None:
    t = _table(tmp_path)
    v = t.version
    with pytest.raises(ConstraintViolationError, match="'positive'") as info:
        lspark.write(_frame(spark, [2.0, -1.0]), t.uri)
    assert info.value.constraint == "positive" and "-1.0" in info.value.row
    assert t.refresh().version == v
    lspark.write(_frame(spark, [2.0, 3.0]), t.uri)
    rows = t.refresh().snapshot().to_arrow()
    assert rows.num_rows == 3
    assert set(rows["day"].to_pylist()) == {dt.date(2026, 3, 4)}


def test_the_data_source_and_the_streaming_sink_refuse_violating_rows(
    spark: Any, tmp_path: Path
) -> None:
    t = _table(tmp_path)
    v = t.version
    lspark.register(spark)
    frame = spark.createDataFrame(
        [(7, -5.0, TS, dt.date(2026, 3, 4))], "id long, amount double, ts timestamp, day date"
    )
    with pytest.raises(ConstraintViolationError, match="'positive'"), lspark.typed_errors():
        frame.write.format("lakelog").mode("append").save(t.uri)
    assert t.refresh().version == v
    src = tmp_path / "src"
    src.mkdir()
    (src / "0.json").write_text(
        json.dumps({"id": 8, "amount": -2.0, "ts": TS.isoformat(), "day": "2026-03-04"}) + "\n"
    )
    stream = spark.readStream.schema("id long, amount double, ts timestamp, day date").json(
        str(src)
    )
    query = (
        stream.writeStream.format("lakelog")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start(t.uri)
    )
    with pytest.raises(ConstraintViolationError, match="'positive'"), lspark.typed_errors():
        query.awaitTermination()
    assert t.refresh().version == v


def test_spark_update_and_merge_refuse_violating_rows(spark: Any, tmp_path: Path) -> None:
    t = _table(tmp_path)
    v = t.version
    with pytest.raises(ConstraintViolationError, match="'positive'"):
        lspark.update(spark, t.uri, "id = 1", set={"amount": "amount - 10"})
    source = spark.createDataFrame(
        [(1, -3.0, TS, dt.date(2026, 3, 4))], "id long, amount double, ts timestamp, day date"
    )
    with pytest.raises(ConstraintViolationError, match="'positive'"):
        lspark.merge(spark, t.uri, source, on="id")
    assert t.refresh().version == v


def test_spark_sql_insert_computes_a_generated_column_and_refuses_a_violation(
    spark: Any, tmp_path: Path
) -> None:
    from lakelog.spark import sql as spark_sql

    catalog = lakelog.connect_catalog(f"sqlite:///{tmp_path}/c.db", warehouse=str(tmp_path / "wh"))
    spark_sql(spark, "CREATE NAMESPACE shop", catalog=catalog)
    spark_sql(
        spark,
        "CREATE TABLE shop.pay (ts TIMESTAMP, day DATE GENERATED ALWAYS AS (CAST(ts AS DATE)),"
        " amount DOUBLE, CONSTRAINT positive CHECK (amount > 0)) USING lakelog",
        catalog=catalog,
    )
    spark_sql(
        spark,
        "INSERT INTO shop.pay (ts, amount) VALUES (TIMESTAMP '2026-03-04 10:00:00', 5.0D)",
        catalog=catalog,
    )
    rows = catalog.load_table("shop.pay").snapshot().to_arrow()
    assert rows["day"].to_pylist() == [dt.date(2026, 3, 4)]
    with pytest.raises(ConstraintViolationError, match="'positive'"):
        spark_sql(
            spark,
            "INSERT INTO shop.pay (ts, amount) VALUES (TIMESTAMP '2026-03-04 10:00:00', -5.0D)",
            catalog=catalog,
        )
    assert catalog.load_table("shop.pay").version == 1
