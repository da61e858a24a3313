"""Spark over tables partitioned by transforms (format version 8): pushed filters on the
source column prune by the recorded values, every version of an evolved table reads the
same rows as lakelog, and Spark's writes split rows by the current spec."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.transforms import SPEC_TAG, parse_field

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema(
    [("ts", pa.timestamp("us", tz="UTC")), ("id", pa.int64()), ("name", pa.string())]
)
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def _rows(first: int, n: int) -> pa.Table:
    ids = list(range(first, first + n))
    return pa.table(
        {
            "ts": [T0 + dt.timedelta(hours=5 * i) for i in ids],
            "id": ids,
            "name": [f"n{i % 5}x{i}" for i in ids],
        },
        schema=SCHEMA,
    )


def _key(r: Any) -> tuple[Any, ...]:
    return (r["ts"].astimezone(dt.timezone.utc).replace(tzinfo=None), r["id"], r["name"])


def test_pushed_equality_prunes_bucket_files(spark: Any, tmp_path: Path) -> None:
    lspark.register(spark)
    uri = str(tmp_path / "t")
    table = lakelog.create_table(uri, SCHEMA, partition_by=["bucket(4, id)"])
    table.append(_rows(0, 200))
    files = list(table.snapshot().files())
    assert len(files) == 4
    bucket = parse_field("bucket(4, id)")
    wanted = str(bucket.apply(pa.array([77])).to_pylist()[0])
    # every other file is spoiled: a query that opens one of them fails
    for f in files:
        if f.tags["partition.id_bucket_4"] != wanted:
            Path(table.storage.full(f.path)).write_bytes(b"not parquet")
    got = spark.read.format("lakelog").load(uri).filter("id = 77").collect()
    assert [r["id"] for r in got] == [77]


def test_every_version_of_three_specs_reads_the_same_in_spark(spark: Any, tmp_path: Path) -> None:
    lspark.register(spark)
    uri = str(tmp_path / "t")
    table = lakelog.create_table(uri, SCHEMA, partition_by=["month(ts)"])
    table.append(_rows(0, 30))
    table.set_partitioning(["day(ts)", "bucket(2, id)"])
    table.append(_rows(30, 30))
    table.set_partitioning(["truncate(2, name)"])
    # Spark's own append writes in the current spec
    df = spark.createDataFrame(_rows(60, 20).to_pandas())
    df.write.format("lakelog").mode("append").save(uri)
    snap = table.snapshot()
    assert {f.tags[SPEC_TAG] for f in snap.files()} == {"0", "1", "2"}
    trunc = parse_field("truncate(2, name)")
    for f in snap.files():
        if f.tags[SPEC_TAG] == "2":
            data = pa.parquet.read_table(table.storage.full(f.path))
            assert set(trunc.apply(data["name"]).to_pylist()) == {f.tags["partition.name_trunc_2"]}
    for version in range(snap.version + 1):
        want = sorted(_key(r) for r in table.snapshot(version).to_arrow().to_pylist())
        got = spark.read.format("lakelog").option("versionAsOf", version).load(uri).collect()
        assert sorted(_key(r.asDict()) for r in got) == want, version
    one_day = "ts >= '2024-01-03' and ts < '2024-01-04'"
    got = (
        spark.read.format("lakelog")
        .load(uri)
        .filter("ts >= timestamp'2024-01-03 00:00:00' and ts < timestamp'2024-01-04 00:00:00'")
    )
    assert got.count() == table.snapshot().to_arrow(filter=one_day).num_rows


def test_spark_compaction_writes_into_the_current_spec(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = lakelog.create_table(uri, SCHEMA, partition_by=["month(ts)"])
    table.append(_rows(0, 20))
    table.append(_rows(20, 20))
    table.set_partitioning(["bucket(3, id)"])
    want = sorted(_key(r) for r in table.snapshot().to_arrow().to_pylist())
    lspark.compact(spark, uri)
    snap = table.refresh().snapshot()
    assert {f.tags[SPEC_TAG] for f in snap.files()} == {"1"}
    bucket = parse_field("bucket(3, id)")
    for f in snap.files():
        data = pa.parquet.read_table(table.storage.full(f.path))
        assert {str(b) for b in bucket.apply(data["id"]).to_pylist()} == {
            f.tags["partition.id_bucket_3"]
        }
    assert sorted(_key(r) for r in snap.to_arrow().to_pylist()) == want


def _check_recorded_values(table: lakelog.Table, fields: list[str]) -> None:
    """Every live file records the current spec and the one value of each field its
    rows have."""
    parsed = [parse_field(t) for t in fields]
    for f in table.snapshot().files():
        assert SPEC_TAG in f.tags, f.path
        data = pa.parquet.read_table(table.storage.full(f.path))
        for p in parsed:
            found = {p.to_string(v) for v in p.apply(data[p.column]).to_pylist()}
            assert found == {f.tags[f"partition.{p.name}"]}, (f.path, p.name)


@pytest.mark.parametrize("vectors", ["false", "true"])
def test_spark_row_level_changes_record_transform_values(
    spark: Any, tmp_path: Path, vectors: str
) -> None:
    fields = ["day(ts)", "bucket(4, id)"]
    props = {"lakelog.deletion_vectors": vectors}
    uri = str(tmp_path / "spark")
    table = lakelog.create_table(uri, SCHEMA, partition_by=fields, properties=props)
    twin = lakelog.create_table(
        str(tmp_path / "twin"), SCHEMA, partition_by=fields, properties=props
    )
    for t in (table, twin):
        t.append(_rows(0, 60))
    sevens = f"id in ({', '.join(str(i) for i in range(0, 60, 7))})"
    elevens = f"id in ({', '.join(str(i) for i in range(0, 60, 11))})"
    lspark.update(spark, uri, sevens, set={"name": "'u'"})
    twin.update(sevens, set={"name": "u"})
    lspark.delete(spark, uri, elevens)
    twin.delete(elevens)
    source = _rows(50, 30)
    lspark.merge(spark, uri, spark.createDataFrame(source.to_pandas()), on="id")
    twin.merge(source, on="id")
    table.refresh()
    _check_recorded_values(table, fields)
    got = sorted(_key(r) for r in table.snapshot().to_arrow().to_pylist())
    assert got == sorted(_key(r) for r in twin.snapshot().to_arrow().to_pylist())
    snap = table.snapshot()
    bucket = parse_field("bucket(4, id)")
    day = parse_field("day(ts)")
    for probe in (7, 55, 70):  # an updated row, a merged one, an inserted one
        want = str(bucket.apply(pa.array([probe])).to_pylist()[0])
        kept = list(snap.files(f"id = {probe}"))
        assert kept and {f.tags["partition.id_bucket_4"] for f in kept} == {want}, probe
        ts = T0 + dt.timedelta(hours=5 * probe)
        one_day = pc_day_filter(ts)
        kept = list(snap.files(one_day))
        want_day = day.to_string(day.apply(pa.array([ts], SCHEMA.field("ts").type))[0].as_py())
        assert kept and {f.tags["partition.ts_day"] for f in kept} == {want_day}, probe


def pc_day_filter(ts: dt.datetime) -> Any:
    import pyarrow.compute as pc

    start = ts.replace(hour=0, minute=0, second=0, microsecond=0)
    return (pc.field("ts") >= pa.scalar(start, SCHEMA.field("ts").type)) & (
        pc.field("ts") < pa.scalar(start + dt.timedelta(days=1), SCHEMA.field("ts").type)
    )


def test_a_spark_write_creates_a_table_with_transforms(spark: Any, tmp_path: Path) -> None:
    lspark.register(spark)
    uri = str(tmp_path / "t")
    data = _rows(0, 60)
    df = spark.createDataFrame(data.to_pandas())
    df.write.format("lakelog").mode("append").option("partitionBy", "day(ts), bucket(4,id)").save(
        uri
    )
    table = lakelog.open_table(uri)
    snap = table.snapshot()
    assert snap.partitioning == ["day(ts)", "bucket(4, id)"] and snap.partition_by == ()
    _check_recorded_values(table, ["day(ts)", "bucket(4, id)"])
    assert sorted(_key(r) for r in snap.to_arrow().to_pylist()) == sorted(
        _key(r) for r in data.to_pylist()
    )
    probe = 17
    want = str(parse_field("bucket(4, id)").apply(pa.array([probe])).to_pylist()[0])
    assert {f.tags["partition.id_bucket_4"] for f in snap.files(f"id = {probe}")} == {want}
    # appending with the same partitioning in another spelling is the same table
    df.write.format("lakelog").mode("append").option("partitionBy", "days(ts),bucket(4, id)").save(
        uri
    )
    # Spark wraps the data source's error; its message is lakelog's
    with pytest.raises(Exception, match=r"SchemaMismatchError.*found 'month\(ts\)'"):
        df.write.format("lakelog").mode("append").option("partitionBy", "month(ts)").save(uri)
    assert table.refresh().snapshot().to_arrow().num_rows == 120


def test_lakelog_spark_write_creates_and_appends_in_transforms(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    fields = ["day(ts)", "bucket(4, id)"]
    first, second = _rows(0, 60), _rows(60, 30)
    lspark.write(spark.createDataFrame(first.to_pandas()), uri, partition_by=fields)
    lspark.write(spark.createDataFrame(second.to_pandas()), uri, mode="append")
    table = lakelog.open_table(uri)
    snap = table.snapshot()
    assert snap.partitioning == fields and snap.partition_by == ()
    _check_recorded_values(table, fields)
    want = sorted(_key(r) for r in [*first.to_pylist(), *second.to_pylist()])
    assert sorted(_key(r) for r in snap.to_arrow().to_pylist()) == want
    probe = 70
    bucket = str(parse_field("bucket(4, id)").apply(pa.array([probe])).to_pylist()[0])
    assert {f.tags["partition.id_bucket_4"] for f in snap.files(f"id = {probe}")} == {bucket}
    # replace_where on a transform table: rows outside it refuse the write, nothing lands
    with pytest.raises(lakelog.LakelogError):
        lspark.write(
            spark.createDataFrame(first.to_pandas()),
            uri,
            mode="overwrite",
            replace_where="id < 10",
        )
    assert table.refresh().snapshot().version == snap.version
