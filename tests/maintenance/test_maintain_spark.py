"""``lakelog.spark.maintain``: the embedded decision, with its rewrites run as Spark tasks
(the commit says ``engine: spark`` and why ``maintain`` ran it)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import lakelog
import lakelog.spark as lspark
from lakelog.errors import InvalidArgumentError

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema([("p", pa.string()), ("id", pa.int64())])


def test_spark_maintain_decides_as_the_table_does_and_rewrites_on_executors(
    spark: SparkSession, tmp_path: Path
) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["p"])
    for i in range(5):
        t.append(pa.table({"p": ["x", "y"], "id": [i, 10 + i]}, schema=SCHEMA))
    version = t.version
    plan = lspark.maintain(spark, t.uri)
    assert [a.candidate for a in plan.actions] == [a.candidate for a in t.maintain().actions]
    assert t.refresh().version == version  # a dry run by default
    budget = plan.actions[0].candidate.rewrite_bytes
    report = lspark.maintain(spark, t, budget_bytes=budget, dry_run=False)
    assert [a.status for a in report.actions] == ["done"]
    assert len(report.left) == 1
    header = t.history(limit=1)[0]
    assert header.operation == "COMPACT"
    assert header.parameters["engine"] == "spark"
    assert header.parameters["maintain"]["kind"] == "compact"
    assert sorted(t.refresh().snapshot().to_arrow().column("id").to_pylist()) == sorted(
        [*range(5), *range(10, 15)]
    )


def test_spark_maintain_refuses_an_in_memory_table(spark: SparkSession) -> None:
    with pytest.raises(InvalidArgumentError, match=r"table\.maintain\(\)"):
        lspark.maintain(spark, "memory://maintain-spark/t")
