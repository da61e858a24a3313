"""Spark reads and writes of lakelog tables against the session-wide SparkSession.

Round trips in both directions with partitions (dates, strings that need
escaping, ints, nulls) and timestamps; time travel; schema checks before
anything is written; write modes; empty snapshots; a job that fails mid-write.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog import SchemaMismatchError, TableExistsError, VersionNotFoundError

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

UTC = dt.timezone.utc
STRINGS = ["a/b", "x y", "é", "50%", "k=v", None, "plain"]


def _rows_of(table: pa.Table, names: list[str]) -> list[tuple[Any, ...]]:
    cols = [table.column(n).to_pylist() for n in names]
    return sorted(zip(*cols, strict=True), key=repr)


def _spark_rows(df: Any, names: list[str]) -> list[tuple[Any, ...]]:
    out = []
    for r in df.select(*names).collect():
        vals = []
        for v in r:
            if isinstance(v, dt.datetime) and v.tzinfo is None:
                v = v.replace(tzinfo=UTC)  # session time zone is UTC
            vals.append(v)
        out.append(tuple(vals))
    return sorted(out, key=repr)


def _arrow_data(n: int = 14) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "day": pa.array(
                [None if i % 5 == 4 else dt.date(2024, 1, 1 + i % 3) for i in range(n)],
                pa.date32(),
            ),
            "kind": pa.array([STRINGS[i % len(STRINGS)] for i in range(n)], pa.string()),
            "bucket": pa.array([None if i % 6 == 5 else i % 2 for i in range(n)], pa.int32()),
            "ts": pa.array(
                [None if i % 4 == 3 else dt.datetime(2024, 1, 1, i, tzinfo=UTC) for i in range(n)],
                pa.timestamp("us", tz="UTC"),
            ),
            "x": pa.array([None if i % 7 == 6 else i / 3 for i in range(n)], pa.float64()),
        }
    )


def _spark_df(spark: Any, table: pa.Table) -> Any:
    schema = "id long, day date, kind string, bucket int, ts timestamp, x double"
    return spark.createDataFrame(table.to_pylist(), schema)


def _data_files(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*.parquet")
        if "_lakelog" not in p.relative_to(root).parts
    }


def test_importing_lakelog_does_not_import_pyspark() -> None:
    code = "import sys, lakelog; assert 'pyspark' not in sys.modules, 'pyspark imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_spark_write_then_arrow_read_with_partitions(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    data = _arrow_data()
    result = lspark.write(_spark_df(spark, data), uri, partition_by=["day", "kind", "bucket"])
    assert result.version == 0
    table = lakelog.open_table(uri)
    assert table.partition_by == ("day", "kind", "bucket")
    assert table.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("day").type == pa.date32()
    snap = table.snapshot()
    back = snap.to_arrow()
    names = data.column_names
    assert _rows_of(back, names) == _rows_of(data, names)
    # partition values logged as Spark folders spell them; stats from the footers
    logged = {tuple(sorted(f.partition.items(), key=repr)) for f in snap.files()}
    assert (("bucket", "0"), ("day", "2024-01-01"), ("kind", "a/b")) in logged
    assert any(f.partition["day"] is None for f in snap.files())
    assert all(f.stats is not None and "id" in f.stats.min for f in snap.files())
    # every file sits in its partition folder; staging is cleaned up
    assert _data_files(tmp_path / "t") == {f.path for f in snap.files()}
    assert not any((tmp_path / "t" / lspark.STAGING_DIR).rglob("*"))


def test_arrow_write_then_spark_read_with_partitions(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    data = _arrow_data()
    lakelog.write_table(uri, data, partition_by=["day", "kind", "bucket"])
    plan = lspark.plan_read(spark, uri)
    # ASCII values are parsed by Spark from the folders; 'é' (UTF-8 percent-encoded by
    # lakelog, decoded per byte by Spark) goes through the literal-column path
    assert plan.direct and plan.grouped
    assert all(dict(values)["kind"] == "é" for values, _ in plan.grouped)
    df = plan.to_dataframe(spark)
    assert df.columns == data.column_names
    assert _spark_rows(df, data.column_names) == _rows_of(data, data.column_names)
    types = dict(df.dtypes)
    assert types["day"] == "date" and types["bucket"] == "int" and types["ts"] == "timestamp"


def test_round_trip_unpartitioned_and_column_selection(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    data = _arrow_data()
    lspark.write(_spark_df(spark, data), uri)
    df = lspark.read(spark, uri, columns=["kind", "id"], filter="id >= 10")
    assert df.columns == ["kind", "id"]
    kinds = data["kind"].to_pylist()
    want = [(kinds[i], i) for i in range(10, 14)]
    assert sorted((tuple(r) for r in df.collect()), key=repr) == sorted(want, key=repr)


def test_time_travel_by_version_and_timestamp(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = "id long, day date"
    v0 = lspark.write(spark.createDataFrame([(1, dt.date(2024, 1, 1))], schema), uri)
    v1 = lspark.write(spark.createDataFrame([(2, dt.date(2024, 1, 2))], schema), uri)
    v2 = lspark.write(
        spark.createDataFrame([(3, dt.date(2024, 1, 3))], schema), uri, mode="overwrite"
    )
    assert (v0.version, v1.version, v2.version) == (0, 1, 2)

    def ids(**kw: Any) -> list[int]:
        return sorted(r.id for r in lspark.read(spark, uri, **kw).collect())

    assert ids(version=0) == [1]
    assert ids(version=1) == [1, 2]
    assert ids(version=2) == [3]
    assert ids() == [3]
    headers = {h.version: h.timestamp_ms for h in lakelog.open_table(uri).history()}
    at1 = dt.datetime.fromtimestamp(headers[1] / 1000, tz=UTC)
    assert ids(as_of=at1) == [1, 2]
    assert ids(as_of=at1.isoformat()) == [1, 2]
    just_before_v2 = dt.datetime.fromtimestamp((headers[2] - 1) / 1000, tz=UTC)
    assert ids(as_of=just_before_v2) == [1, 2]
    assert ids(as_of=dt.datetime.fromtimestamp(headers[2] / 1000, tz=UTC)) == [3]
    with pytest.raises(VersionNotFoundError):
        lspark.read(spark, uri, version=7)
    with pytest.raises(VersionNotFoundError):
        lspark.read(spark, uri, as_of=dt.datetime(2000, 1, 1, tzinfo=UTC))


def test_empty_snapshot_gives_empty_dataframe_with_schema(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.date32())])
    lakelog.create_table(uri, schema, partition_by=["day"])
    df = lspark.read(spark, uri)
    assert df.count() == 0
    assert df.dtypes == [("id", "bigint"), ("name", "string"), ("day", "date")]
    assert lspark.plan_read(spark, uri).urls == []
    # a filter that prunes every file gives the same
    lakelog.open_table(uri).append(
        pa.table({"id": [1], "name": ["a"], "day": [dt.date(2024, 1, 1)]}, schema=schema)
    )
    plan = lspark.plan_read(spark, uri, filter="day > '2030-01-01'")
    assert plan.urls == [] and plan.skipped_files == 1
    df = plan.to_dataframe(spark)
    assert df.count() == 0 and df.dtypes[2] == ("day", "date")


def test_schema_mismatch_raises_before_anything_is_written(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lspark.write(spark.createDataFrame([(1, "a")], "id long, name string"), uri)
    before = _data_files(tmp_path / "t")
    bad = [
        spark.createDataFrame([(1, 2)], "id long, name int"),  # wrong type
        spark.createDataFrame([(1,)], "id long"),  # missing column
        spark.createDataFrame([(1, "a", 2)], "id long, name string, extra int"),
        spark.createDataFrame([(1, "a")], "ID long, name string"),  # case differs
    ]
    for df in bad:
        with pytest.raises(SchemaMismatchError, match="expected a DataFrame matching"):
            lspark.write(df, uri)
    with pytest.raises(SchemaMismatchError, match="partition_by"):
        lspark.write(
            spark.createDataFrame([(1, "a")], "id long, name string"), uri, partition_by=["name"]
        )
    assert lakelog.open_table(uri).version == 0
    assert _data_files(tmp_path / "t") == before
    assert not (tmp_path / "t" / lspark.STAGING_DIR).exists() or not any(
        (tmp_path / "t" / lspark.STAGING_DIR).iterdir()
    )
    # column order may differ: the writer selects the table's order
    lspark.write(spark.createDataFrame([("b", 2)], "name string, id long"), uri)
    assert sorted(r.id for r in lspark.read(spark, uri).collect()) == [1, 2]


def test_write_modes(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = "id long, part string"
    first = spark.createDataFrame([(1, "a"), (2, "b")], schema)
    assert lspark.write(first, uri, mode="error", partition_by=["part"]).version == 0
    with pytest.raises(TableExistsError):
        lspark.write(first, uri, mode="error")
    assert lakelog.open_table(uri).version == 0
    lspark.write(spark.createDataFrame([(3, "a")], schema), uri, mode="append")
    r = lspark.write(spark.createDataFrame([(9, "z")], schema), uri, mode="overwrite")
    assert r.version == 2 and r.operation == "SPARK WRITE"
    assert [tuple(x) for x in lspark.read(spark, uri).collect()] == [(9, "z")]
    # overwritten files are removed from the table, still on disk for time travel
    assert sorted(x.id for x in lspark.read(spark, uri, version=1).collect()) == [1, 2, 3]
    with pytest.raises(lakelog.InvalidArgumentError):
        lspark.write(first, uri, mode="ignore")  # type: ignore[arg-type]


def test_timestamp_units_follow_the_table(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("ms", tz="UTC"))])
    lakelog.create_table(uri, schema)
    when = dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    lspark.write(spark.createDataFrame([(1, when)], "id long, ts timestamp"), uri)
    snap = lakelog.open_table(uri).snapshot()
    (f,) = snap.files()
    import pyarrow.parquet as pq

    assert pq.read_schema(tmp_path / "t" / f.path).field("ts").type == pa.timestamp("ms", tz="UTC")
    assert snap.to_arrow().column("ts").to_pylist() == [when]
    # nanoseconds: Spark cannot read them, said up front
    ns_uri = str(tmp_path / "ns")
    lakelog.write_table(ns_uri, pa.table({"id": [1], "t": pa.array([1], pa.timestamp("ns"))}))
    with pytest.raises(SchemaMismatchError, match="NANOS"):
        lspark.read(spark, ns_uri)
    assert [r.id for r in lspark.read(spark, ns_uri, columns=["id"]).collect()] == [1]
    with pytest.raises(SchemaMismatchError):
        lspark.write(spark.createDataFrame([(2, 1)], "id long, t long"), ns_uri)


def test_failed_job_leaves_table_unchanged(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    uri = str(tmp_path / "t")
    lspark.write(
        spark.createDataFrame([(1, "a")], "id long, part string"), uri, partition_by=["part"]
    )
    before = lakelog.open_table(uri).snapshot()

    def fail_on_13(i: int) -> int:
        if i == 13:
            raise ValueError("boom on row 13")
        return i

    explode_on_13 = F.udf(fail_on_13, returnType=T.LongType(), useArrow=False)

    df = spark.range(0, 40, numPartitions=4).select(
        explode_on_13("id").alias("id"), (F.col("id") % 3).cast("string").alias("part")
    )
    with pytest.raises(Exception, match="boom on row 13"):
        lspark.write(df, uri)
    after = lakelog.open_table(uri)
    assert after.version == before.version
    assert [f.path for f in after.snapshot().files()] == [f.path for f in before.files()]
    # the other tasks' files were never referenced and the staging folder is gone
    assert _data_files(tmp_path / "t") == {f.path for f in before.files()}
    assert [r.id for r in lspark.read(spark, uri).collect()] == [1]


def test_memory_tables_are_refused_for_spark(spark: Any) -> None:
    with pytest.raises(lakelog.InvalidArgumentError, match="in-memory"):
        lspark.write(spark.createDataFrame([(1,)], "id long"), "memory://nowhere/t")


def test_spark_written_files_are_in_partition_folders(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    df = spark.createDataFrame([(1, "é"), (2, "a/b"), (3, None)], "id long, part string")
    lspark.write(df, uri, partition_by=["part"])
    plan = lspark.plan_read(spark, uri)
    # Spark's own folder spelling ('é' unescaped, '/' as %2F) reads back in one scan
    assert not plan.grouped and len(plan.direct) == 3
    assert sorted((r.id, r.part) for r in plan.to_dataframe(spark).collect()) == [
        (1, "é"),
        (2, "a/b"),
        (3, None),
    ]
    assert os.path.isdir(tmp_path / "t" / "part=a%2Fb")


def test_files_spark_would_skip_are_refused(spark: Any, tmp_path: Path) -> None:
    """Spark silently drops explicit files named _* or .*: refuse instead of losing rows."""
    import pyarrow.parquet as pq

    from lakelog.log.actions import AddFile

    uri = str(tmp_path / "t")
    table = lakelog.write_table(uri, pa.table({"id": [1]})) and lakelog.open_table(uri)
    pq.write_table(pa.table({"id": [2]}), tmp_path / "t" / "_hidden.parquet")
    size = (tmp_path / "t" / "_hidden.parquet").stat().st_size
    table.commit(
        [AddFile(path="_hidden.parquet", size_bytes=size, num_rows=1)],
        operation="APPEND",
        kind="append",
    )
    with pytest.raises(lakelog.LakelogError, match="silently"):
        lspark.read(spark, uri)


def test_spark_urls_and_folder_parsing() -> None:
    from lakelog.spark.read import spark_unescape, spark_url
    from lakelog.storage import Storage

    s3 = Storage("s3://bucket/t", {"anon": True})
    assert spark_url(s3, "day=2024-01-02/a.parquet") == "s3a://bucket/t/day=2024-01-02/a.parquet"
    assert spark_url(Storage("/data/t")) == "file:///data/t"
    # Spark decodes %XX per character: ASCII escapes round-trip, UTF-8 bytes do not
    assert spark_unescape("a%2Fb%25") == "a/b%"
    assert spark_unescape("%C3%A9") != "é"
    assert spark_unescape("50%") == "50%" and spark_unescape("%zz") == "%zz"


def test_column_names_with_dots_and_spaces(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    df = spark.createDataFrame([(1, "x", "p"), (2, "y", "q")], "`a.b` long, `c d` string, p string")
    lspark.write(df, uri, partition_by=["p"])
    assert lakelog.open_table(uri).schema.names == ["a.b", "c d", "p"]
    plan = lspark.plan_read(spark, uri, filter="`a.b` > 1", columns=["c d", "a.b"])
    assert len(plan.urls) == 1
    assert [tuple(r) for r in plan.to_dataframe(spark).collect()] == [("y", 2)]
