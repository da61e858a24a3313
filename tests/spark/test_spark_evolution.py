"""Spark and schema evolution, and exactly-once Spark writes (one SparkSession).

* ``lakelog.spark.read`` (Spark's own Parquet reader) and ``spark.read.format("lakelog")``
  read an evolved table: old files with nulls for added columns and widened values,
  the dropped column gone, time travel with each version's schema, filters on the new
  and the widened columns.
* ``lakelog.spark.write(..., app_id=, app_version=)`` as in ``foreachBatch``: a retried
  batch id is skipped before Spark runs, the first batch creates the table and records
  its version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
import lakelog.spark as lspark

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]


def test_spark_reads_an_evolved_table(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int32()), ("score", pa.float32()), ("day", pa.int16())])
    t = lakelog.create_table(uri, schema, partition_by=["day"])
    t.append(
        pa.table(
            {"id": [1, 2], "score": [0.5, 1.5], "day": pa.array([1, 2], pa.int16())},
            schema=schema,
        )
    )
    t.append(
        pa.table(
            {
                "id": pa.array([3_000_000_000], pa.int64()),
                "score": pa.array([2.5], pa.float32()),
                "day": pa.array([3], pa.int16()),
                "name": ["c"],
            }
        ),
        schema_mode="merge",
    )
    t.widen_column("score", pa.float64())
    t.widen_column("day", pa.int64())
    t.drop_columns("score")
    want = {(1, 1, None), (2, 2, None), (3_000_000_000, 3, "c")}

    df = lspark.read(spark, uri)
    assert df.columns == ["id", "day", "name"]
    assert {tuple(r) for r in df.collect()} == want
    assert [tuple(r) for r in lspark.read(spark, uri, filter="name = 'c'").collect()] == [
        (3_000_000_000, 3, "c")
    ]
    assert lspark.read(spark, uri, filter="id > 2000000000 or day = 1").count() == 2
    assert lspark.read(spark, uri, filter="name is null").count() == 2
    old = lspark.read(spark, uri, version=1)
    assert old.columns == ["id", "score", "day"] and old.count() == 2

    lspark.register(spark)
    via_source = spark.read.format("lakelog").load(uri)
    assert {tuple(r) for r in via_source.collect()} == want
    at2 = spark.read.format("lakelog").option("versionAsOf", 2).load(uri)
    assert sorted(r["score"] for r in at2.collect()) == [0.5, 1.5, 2.5]


def test_spark_write_exactly_once(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")

    def batch(batch_id: int) -> Any:
        return spark.createDataFrame([(batch_id, i) for i in range(3)], "batch long, row long")

    first = lspark.write(batch(0), uri, app_id="stream-1", app_version=0)  # creates the table
    assert not first.skipped and first.version == 0
    again = lspark.write(batch(0), uri, app_id="stream-1", app_version=0)
    assert again.skipped and again.version == 0
    assert lspark.write(batch(1), uri, app_id="stream-1", app_version=1).version == 1
    assert lspark.write(batch(1), uri, app_id="stream-1", app_version=1).skipped
    snap = lakelog.open_table(uri).snapshot()
    assert snap.app_versions == {"stream-1": 1}
    assert sorted(snap.to_arrow().column("batch").to_pylist()) == [0, 0, 0, 1, 1, 1]
    with pytest.raises(lakelog.InvalidArgumentError, match="together"):
        lspark.write(batch(2), uri, app_id="stream-1")
