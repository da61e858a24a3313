"""Every Spark path drops the rows of deletion vectors (format version 5).

On a partitioned table with ``lakelog.deletion_vectors=true`` whose files carry vectors
after a delete, an update and a merge: ``lakelog.spark.read`` (Spark's native Parquet
reader) and ``spark.read.format("lakelog")`` return exactly the snapshot's rows, with and
without a filter and a projection; time travel to before the delete returns the old
rows; Spark compaction and the large-group clustering path (Spark's own reader) write
only live rows. Partition folders need escaping (space, ``%``, ``+``, ``=``, ``#``, a
non-ASCII value read by its own scan, null), and files have several row groups so row
positions run across them. Every test also checks that the deleted rows are still in
the files, so it fails if a vector is ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.log.actions import DataFile
from lakelog.spark.deleted import drop_deleted, scan_layers, spark_xxhash64
from lakelog.spark.read import session_conf

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("p", pa.string())])
PARTS = ["a", "b c%=+#?", "é", None]
"""Folder names with characters Spark quotes in a URL; 'é' is read by a scan of its own
(lakelog percent-encodes it as UTF-8 bytes, Spark would decode it per byte)."""


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["id"], r.get("v") or "", r.get("p") or "")


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=_key)


def _spark_rows(df: Any) -> list[dict[str, Any]]:
    return _sorted([r.asDict() for r in df.collect()])


def _expected(uri: str, version: int | None = None, where: Any = None) -> list[dict[str, Any]]:
    snap = lakelog.open_table(uri).snapshot(version)
    rows = snap.to_arrow().to_pylist()
    return _sorted([r for r in rows if where is None or where(r)])


def _physical_rows(uri: str) -> int:
    """Rows in the live files, deleted ones included."""
    snap = lakelog.open_table(uri).snapshot()
    return sum(pq.ParquetFile(Path(uri) / f.path).metadata.num_rows for f in snap.files())


def _build(uri: str) -> tuple[lakelog.Table, int]:
    """The table with vectors, and the version before its first delete."""
    t = lakelog.create_table(
        uri,
        schema=SCHEMA,
        partition_by=["p"],
        properties={"lakelog.deletion_vectors": "true", "lakelog.row_group_size": "8"},
    )
    for start in (0, 200):
        ids = list(range(start, start + 200))
        t.append(
            pa.table(
                {"id": ids, "v": [f"v{i}" for i in ids], "p": [PARTS[i % 4] for i in ids]},
                schema=SCHEMA,
            )
        )
    before = t.snapshot().version
    t.delete("id < 20 OR id IN (57, 58, 59, 60, 61, 250, 399)")
    t.update("id = 150 OR id = 301", set={"v": "updated"})
    source = pa.table(
        {"id": [33, 34, 1000], "v": ["merged", "merged", "inserted"], "p": ["a", "é", None]},
        schema=SCHEMA,
    )
    t.merge(source, on="id")
    t.delete("id = 120")  # a second vector over a file that already has one
    files = t.snapshot().files()
    assert sum(f.deleted is not None for f in files) >= 4
    assert all(f.deleted is None or f.live_rows < f.num_rows for f in files)
    return t, before


def test_native_read_drops_deleted_rows(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _build(uri)
    want = _expected(uri)
    assert _physical_rows(uri) > len(want)  # the deleted rows are still in the files
    plan = lspark.plan_read(spark, uri)
    assert plan.grouped and plan.direct and plan.vectors
    assert set(plan.vectors) <= set(plan.urls)

    assert _spark_rows(lspark.read(spark, uri)) == want
    assert lspark.read(spark, uri).count() == len(want)

    # a filter (pushed into Spark's Parquet reader: row groups skipped) and a projection
    got = _spark_rows(lspark.read(spark, uri, filter="id < 70 OR id > 390", columns=["id", "p"]))
    assert got == [
        {"id": r["id"], "p": r["p"]}
        for r in _expected(uri, where=lambda r: r["id"] < 70 or r["id"] > 390)
    ]
    got = _spark_rows(lspark.read(spark, uri, filter="p = 'é'", columns=["v", "id"]))
    assert got == [
        {"v": r["v"], "id": r["id"]} for r in _expected(uri, where=lambda r: r["p"] == "é")
    ]


def test_format_read_drops_deleted_rows(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _build(uri)
    lspark.register(spark)
    want = _expected(uri)
    assert _physical_rows(uri) > len(want)

    df = spark.read.format("lakelog").load(uri)
    assert _spark_rows(df) == want
    assert df.count() == len(want)
    got = _spark_rows(
        spark.read.format("lakelog")
        .option("maxPartitionBytes", "1")  # one file per task
        .load(uri)
        .where("id < 70 OR id > 390")
        .select("id", "p")
    )
    assert got == [
        {"id": r["id"], "p": r["p"]}
        for r in _expected(uri, where=lambda r: r["id"] < 70 or r["id"] > 390)
    ]


def test_time_travel_before_the_delete_returns_the_old_rows(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _, before = _build(uri)
    lspark.register(spark)
    old = _expected(uri, before)
    assert len(old) == 400 and {r["id"] for r in old} == set(range(400))

    assert _spark_rows(lspark.read(spark, uri, version=before)) == old
    assert _spark_rows(spark.read.format("lakelog").option("versionAsOf", before).load(uri)) == old
    # and the versions in between drop exactly their own deletions
    for version in range(before + 1, lakelog.open_table(uri).snapshot().version + 1):
        want = _expected(uri, version)
        assert _spark_rows(lspark.read(spark, uri, version=version)) == want, version
        fmt = spark.read.format("lakelog").option("versionAsOf", version).load(uri)
        assert _spark_rows(fmt) == want, version


def test_spark_compaction_writes_only_live_rows(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _build(uri)
    want = _expected(uri)
    assert _physical_rows(uri) > len(want)

    report = lspark.compact(spark, uri, min_input_files=2)

    assert report.version is not None and report.extra["failed_groups"] == {}
    files = lakelog.open_table(uri).snapshot().files()
    assert not any(f.deleted is not None for f in files)
    assert _physical_rows(uri) == len(want)  # the new files hold only live rows
    assert _expected(uri) == want
    assert _spark_rows(lspark.read(spark, uri)) == want


def test_large_clustering_group_drops_deleted_rows(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _build(uri)
    want = _expected(uri)
    assert _physical_rows(uri) > len(want)

    # every partition's group is "too large for one task": Spark reads, sorts and writes it
    report = lspark.optimize(spark, uri, sort_by=["id"], max_group_bytes=1_000)

    assert report.extra["failed_groups"] == {}
    assert report.extra["large_groups"] >= 1
    assert "spark-job" in {r["mode"] for r in report.extra["task_runs"]}
    files = lakelog.open_table(uri).snapshot().files()
    assert not any(f.deleted is not None for f in files)
    assert _physical_rows(uri) == len(want)
    assert _expected(uri) == want


def test_rows_of_an_unmatched_file_fail_the_read(spark: Any, tmp_path: Path) -> None:
    """A row whose file name matches no file with a vector stops the query: it is
    never returned unfiltered."""
    uri = str(tmp_path / "t")
    _build(uri)
    plan = lspark.plan_read(spark, uri)
    url, f = next(iter(plan.vectors.items()))
    scan = spark.read.schema("id bigint, v string").parquet(url)
    assert drop_deleted(spark, scan, [f]).count() == f.live_rows
    elsewhere = DataFile(
        path=f.path.rsplit("/", 1)[0] + "/other.parquet",
        size_bytes=f.size_bytes,
        num_rows=f.num_rows,
        deleted=f.deleted,
    )
    with pytest.raises(Exception, match="name matches no file of the table"):
        drop_deleted(spark, scan, [elsewhere]).collect()


def test_scan_layers_keep_names_apart() -> None:
    files = [
        DataFile(path=p, size_bytes=1, num_rows=1)
        for p in ["x.parquet", "sub/x.parquet", "a/sub/x.parquet", "y.parquet", "b/y2.parquet"]
    ]
    layers = scan_layers(files)
    assert sorted(len(layer) for layer in layers) == [1, 1, 3]
    for layer in layers:
        paths = [f.path for f in layer]
        names = [p.rsplit("/", 1)[-1] for p in paths]
        assert len(set(names)) == len(names)


def test_name_hash_matches_spark(spark: Any) -> None:
    """lakelog keys a file by Spark's ``xxhash64`` of its name, computed in Python."""
    from pyspark.sql import functions as F

    names = [
        "",
        "a",
        "part-00000-6f99e3d993bf4ef0b37ac8ec104d1b64-96ea6d3667b64834.parquet",
        "b c%25=é€😀.parquet",
        "x" * 31,
        "y" * 32,
        "z" * 45,
    ]
    got = spark.createDataFrame([(n,) for n in names], "n string").select(F.xxhash64("n"))
    assert [r[0] for r in got.collect()] == [spark_xxhash64(n) for n in names]


MODEL_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("p", pa.string())])
MODEL_PARTS = ["a b", "x%y", "k=v", "é ü", None]


def _model_table(uri: str) -> lakelog.Table:
    """Appends, deletes and updates with vectors over partitions that need escaping and
    nulls (in the partition and in a column); every version kept."""
    t = lakelog.create_table(
        uri,
        schema=MODEL_SCHEMA,
        partition_by=["p"],
        properties={"lakelog.deletion_vectors": "true", "lakelog.row_group_size": "8"},
    )

    def rows(start: int, n: int) -> pa.Table:
        ids = list(range(start, start + n))
        return pa.table(
            {
                "id": ids,
                "v": [None if i % 6 == 0 else f"v{i}" for i in ids],
                "p": [MODEL_PARTS[i % 5] for i in ids],
            },
            schema=MODEL_SCHEMA,
        )

    t.append(rows(0, 120))
    t.delete("id IN (0, 7, 14, 21, 28, 35, 42, 49, 56, 63, 70, 77, 84, 91, 98, 105, 112)")
    t.append(rows(120, 80))
    t.update("id IN (1, 6, 11, 16, 61, 66, 121, 126, 176)", set={"v": "updated"})
    t.delete("p IS NULL AND id > 50")
    t.delete("v IS NULL OR id IN (3, 4, 150)")
    t.update("p = 'k=v'", set={"v": "again"})
    t.delete("id BETWEEN 100 AND 130")
    assert sum(f.deleted is not None for f in t.snapshot().files()) >= 4
    return t


def test_every_version_matches_the_snapshot(spark: Any, tmp_path: Path) -> None:
    """At every version of the model, both Spark readers return exactly
    ``snapshot.to_arrow()``'s rows, and never a row deleted by then."""
    uri = str(tmp_path / "t")
    t = _model_table(uri)
    lspark.register(spark)
    ever: set[int] = set()
    for version in range(t.snapshot().version + 1):
        want = _expected(uri, version)
        ids = {r["id"] for r in want}
        gone = ever - ids  # rows of earlier versions deleted by this one
        ever |= ids
        native = _spark_rows(lspark.read(spark, uri, version=version))
        assert native == want, version
        fmt = spark.read.format("lakelog").option("versionAsOf", str(version)).load(uri)
        assert _spark_rows(fmt) == want, version
        assert not gone & {r["id"] for r in native}
    # the deleted rows are still in the latest files: the vectors did the dropping
    assert _physical_rows(uri) > len(_expected(uri))


def _plan_text(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_deletion_filter_plans_no_shuffle(spark: Any, tmp_path: Path) -> None:
    """The deleted rows are dropped by a broadcast anti join on the vectorized scan,
    in whole-stage code, with no shuffle; and a join of the read with another table
    is planned as over a plain scan: the scan's size estimate is kept, so the small
    side is broadcast, not shuffled (a left outer join inflated it to the product of
    both sides' sizes, and Spark shuffled both sides of a sort-merge join)."""
    uri = str(tmp_path / "t")
    _model_table(uri)
    size = sum(f.size_bytes for f in lakelog.open_table(uri).snapshot().files())
    # the read may be broadcast (a few times its files' size), a million ids may not
    conf = {
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.autoBroadcastJoinThreshold": str(4 * size),
    }
    with session_conf(spark, conf):
        df = lspark.read(spark, uri)
        text = _plan_text(df)
        assert "Exchange hashpartitioning" not in text and "ShuffleExchange" not in text, text
        assert "BroadcastHashJoin" in text and "LeftAnti" in text, text
        assert "ColumnarToRow" in text  # Spark's vectorized Parquet reader
        assert "*(" in text  # whole-stage code generation
        other = spark.range(1_000_000).withColumnRenamed("id", "k")
        joined = other.join(df, other["k"] == df["id"])
        text = _plan_text(joined)
        assert "SortMergeJoin" not in text and "Exchange hashpartitioning" not in text, text
        assert sorted(r["k"] for r in joined.collect()) == sorted(r["id"] for r in _expected(uri))


def test_file_pruning_still_works_with_vectors(spark: Any, tmp_path: Path) -> None:
    """A filter on the partition column reads only that partition's files, those with
    vectors included, and drops their deleted rows."""
    from pyspark.sql import functions as F

    uri = str(tmp_path / "t")
    _model_table(uri)
    snap = lakelog.open_table(uri).snapshot()
    mine = [f for f in snap.files() if f.partition.get("p") == "x%y"]
    assert any(f.deleted is not None for f in mine)
    plan = lspark.plan_read(spark, uri, filter="p = 'x%y'")
    assert sorted(f.path for f in plan.files) == sorted(f.path for f in mine)
    assert plan.vectors and len(plan.files) < snap.num_files
    df = lspark.read(spark, uri, filter="p = 'x%y'")
    read = {r[0] for r in df.select(F.input_file_name()).distinct().collect()}
    assert 0 < len(read) <= len(mine)
    assert _spark_rows(df) == _expected(uri, where=lambda r: r["p"] == "x%y")
