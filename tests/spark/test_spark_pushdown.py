"""``spark.read.format("lakelog")``: Spark's pushed filters prune files, never rows wrongly,
and ``s3://`` tables read through fsspec without Hadoop's S3A."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.spark.pushdown import translate_pushed

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("x", pa.float64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("name", pa.string()),
    ]
)
T0 = dt.datetime(2026, 11, 2, tzinfo=dt.timezone.utc)


def _build(uri: str, storage_options: dict[str, Any] | None = None) -> lakelog.Table:
    """Four files: ids 0-9, 10-19, 20-29, 30-39; ``x`` NaN in the first file; ``ts`` one
    hour per id."""
    table = lakelog.create_table(uri, SCHEMA, storage_options=storage_options)
    for f in range(4):
        ids = list(range(f * 10, f * 10 + 10))
        table.append(
            pa.table(
                {
                    "id": ids,
                    "x": [math.nan if (f == 0 and i % 2) else float(i) for i in ids],
                    "ts": [T0 + dt.timedelta(hours=i) for i in ids],
                    "name": [f"n{i:02d}" for i in ids],
                },
                schema=SCHEMA,
            )
        )
    return table


def _spoil(table: lakelog.Table, keep: set[int]) -> None:
    """Overwrite every data file except those holding the ids in ``keep`` with garbage:
    a query that opens one of them fails."""
    for f in table.snapshot().files():
        assert f.stats is not None
        lo, hi = f.stats.min["id"], f.stats.max["id"]
        if not any(lo <= i <= hi for i in keep):
            Path(table.storage.full(f.path)).write_bytes(b"not parquet")


def test_pushed_filters_prune_files(spark: Any, tmp_path: Path) -> None:
    lspark.register(spark)
    uri = str(tmp_path / "t")
    table = _build(uri)
    _spoil(table, keep={25})
    df = spark.read.format("lakelog").load(uri)
    assert sorted(r.id for r in df.where("id >= 22 and id < 27").collect()) == list(range(22, 27))
    assert [r.id for r in df.where("name = 'n25'").collect()] == [25]
    assert [r.id for r in df.where("id in (21, 28)").collect()] == [21, 28]
    with pytest.raises(Exception, match=r"(?i)parquet|magic"):  # the spoiled files are real
        df.where("id >= 0").count()


def test_pushdown_keeps_what_spark_selects(spark: Any, tmp_path: Path) -> None:
    """NaN is greater than every number in Spark (lakelog's stats never count it), and a
    timestamp literal arrives in the session's time zone: rows Spark selects are kept."""
    lspark.register(spark)
    uri = str(tmp_path / "t")
    _build(uri)
    df = spark.read.format("lakelog").load(uri)
    rows = df.collect()  # everything, no pushdown
    everything = spark.createDataFrame(rows, df.schema)
    for where in [
        "x > 100",
        "x >= 9",
        "x != 3",
        "not (x = 4)",
        "x < 3",
        "x is null",
        "ts = timestamp'2026-11-02 05:00:00'",
        "ts > timestamp'2026-11-03 10:00:00'",
        "ts < timestamp'2026-11-02 03:00:00'",
        "ts in (timestamp'2026-11-02 12:00:00', timestamp'2026-11-03 01:00:00')",
        "name like 'n3%'",
        "id not in (1, 2, 3)",
        "id <=> 7",
    ]:
        for tz in ("UTC", "America/Los_Angeles", "Asia/Kolkata"):
            before = spark.conf.get("spark.sql.session.timeZone")
            spark.conf.set("spark.sql.session.timeZone", tz)
            try:
                got = sorted(r.id for r in df.where(where).collect())
                want = sorted(r.id for r in everything.where(where).collect())
            finally:
                spark.conf.set("spark.sql.session.timeZone", before)
            assert got == want, (where, tz)
    assert sum(1 for r in df.where("x > 100").collect()) == 5  # the NaN rows


def test_translation_prunes_only_what_it_understands() -> None:
    from pyspark.sql.datasource import (
        EqualTo,
        GreaterThan,
        In,
        IsNotNull,
        Not,
        StringContains,
    )

    assert translate_pushed([StringContains(("name",), "x")], SCHEMA) is None
    assert translate_pushed([GreaterThan(("x",), 1.0)], SCHEMA) is None  # NaN rule
    assert translate_pushed([EqualTo(("nope",), 1)], SCHEMA) is None
    assert translate_pushed([EqualTo(("id",), "not a number")], SCHEMA) is None
    assert translate_pushed([Not(In(("id",), (1, None)))], SCHEMA) is None
    pred = translate_pushed([GreaterThan(("id",), 3), IsNotNull(("name",))], SCHEMA)
    assert pred is not None and "id" in repr(pred) and "name" in repr(pred)


@pytest.mark.s3
def test_format_reads_s3_through_fsspec(spark: Any, moto_server: Any, s3_bucket: str) -> None:
    """No S3A jars here: the data source reads ``s3://`` with fsspec in the workers."""
    lspark.register(spark)
    uri = f"s3://{s3_bucket}/pushdown"
    options = moto_server.storage_options()
    _build(uri, options)
    df = spark.read.format("lakelog").option("storageOptions", json.dumps(options)).load(uri)
    assert df.count() == 40
    assert sorted(r.id for r in df.where("id between 8 and 11").collect()) == [8, 9, 10, 11]


def test_history_as_a_dataframe(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _build(uri)
    df = lspark.history(spark, uri)
    rows = df.collect()
    assert [r.version for r in rows] == [4, 3, 2, 1, 0]
    assert rows[0].operation == "APPEND" and json.loads(rows[0].metrics["num_rows"]) == 10
    assert [r.version for r in lspark.history(spark, uri, limit=2).collect()] == [4, 3]
    assert df.where("operation = 'CREATE TABLE'").count() == 1


def test_connect_pruning_uses_only_terms_that_mean_the_same_in_spark() -> None:
    """A Spark Connect client cannot reach Spark's plan: lakelog parses the string
    itself, keeps the AND terms whose meaning Spark shares, and refuses to prune
    nothing silently."""
    from lakelog.errors import InvalidArgumentError
    from lakelog.spark.filters import connect_pruning

    expr = connect_pruning("id > 3 and x > 1.5 and name = 'n05'", SCHEMA)
    assert "id" in str(expr) and "name" in str(expr) and "x" not in str(expr)
    assert "x" in str(connect_pruning("x <= 1.5", SCHEMA))
    with pytest.raises(InvalidArgumentError, match="at least one term"):
        connect_pruning("x > 1.5 or id = 3", SCHEMA)
    with pytest.raises(InvalidArgumentError, match="at least one term"):
        connect_pruning("ts > '2026-11-02 00:00:00'", SCHEMA)
    with pytest.raises(InvalidArgumentError, match="SQL-like parser"):
        connect_pruning("upper(name) = 'N05'", SCHEMA)
    with pytest.raises(InvalidArgumentError, match="could not use"):
        connect_pruning(object(), SCHEMA)  # type: ignore[arg-type]  # not a Column either
