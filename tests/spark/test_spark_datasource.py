"""The ``lakelog`` format: ``df.write.format("lakelog")`` and ``spark.read.format("lakelog")``."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

import lakelog
import lakelog.spark as lspark

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]


def test_format_write_and_time_travel_read(spark: Any, tmp_path: Path) -> None:
    lspark.register(spark)
    uri = str(tmp_path / "t")
    schema = "id long, ts timestamp, kind string, day date"
    when = dt.datetime(2024, 1, 1, 12, 30)
    first = spark.createDataFrame(
        [(1, when, "é", dt.date(2024, 1, 1)), (2, None, None, None)], schema
    )
    first.write.format("lakelog").option("partitionBy", "kind,day").mode("append").save(uri)
    table = lakelog.open_table(uri)
    assert table.version == 0 and table.partition_by == ("kind", "day")
    second = spark.createDataFrame([(3, when, "a/b", dt.date(2024, 1, 2))], schema)
    second.write.format("lakelog").mode("append").save(uri)
    second.write.format("lakelog").mode("overwrite").save(uri)

    def ids(reader: Any) -> list[int]:
        return sorted(r.id for r in reader.load(uri).collect())

    fmt = spark.read.format("lakelog")
    assert ids(fmt) == [3]
    assert ids(spark.read.format("lakelog").option("versionAsOf", 0)) == [1, 2]
    assert ids(spark.read.format("lakelog").option("versionAsOf", "1")) == [1, 2, 3]
    ts1 = {h.version: h.timestamp_ms for h in lakelog.open_table(uri).history()}[1]
    at1 = dt.datetime.fromtimestamp(ts1 / 1000, tz=dt.timezone.utc).isoformat()
    assert ids(spark.read.format("lakelog").option("timestampAsOf", at1)) == [1, 2, 3]
    rows = spark.read.format("lakelog").option("versionAsOf", 0).load(uri).collect()
    assert sorted((r.id, r.ts, r.kind, r.day) for r in rows if r.id == 1) == [
        (1, when, "é", dt.date(2024, 1, 1))
    ]
    # the native-reader path sees the same table
    assert sorted(r.id for r in lspark.read(spark, uri, version=1).collect()) == [1, 2, 3]
    ops = [(h.operation, h.parameters.get("mode")) for h in lakelog.open_table(uri).history()]
    assert ops[:2] == [("SPARK WRITE", "overwrite"), ("SPARK WRITE", "append")]


def test_format_write_checks_the_schema_first(spark: Any, tmp_path: Path) -> None:
    lspark.register(spark)
    uri = str(tmp_path / "t")
    lspark.write(spark.createDataFrame([(1, "a")], "id long, name string"), uri)
    bad = spark.createDataFrame([(1, 2)], "id long, name int")
    with pytest.raises(Exception, match="expected a DataFrame matching the table schema"):
        bad.write.format("lakelog").mode("append").save(uri)
    assert lakelog.open_table(uri).version == 0
    assert len([p for p in (tmp_path / "t").rglob("*.parquet") if "_lakelog" not in str(p)]) == 1
