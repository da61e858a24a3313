"""Compaction and clustering run as Spark jobs (``lakelog.spark.compact`` / ``optimize``).

Against the session-wide ``local[2,3]`` SparkSession (every task may be tried 3
times): the same rows and layout as the embedded executor; task failures
(real crashes of the Python worker, injected with ``LAKELOG_CRASH_AT`` in the
executors' environment) retried, or abandoned without touching the table;
compaction beside a Python process that appends; the large-group path
(Spark range partitioning, sort and native writer); pacing and concurrency;
S3 through fsspec on the executors.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.errors import InvalidArgumentError, MaintenanceFailedError
from lakelog.log.commits import read_commit
from lakelog.maintenance.clustering.spec import (
    TAG_KEY_MAX,
    TAG_KEY_MIN,
    TAG_SPEC,
    TAG_TIER,
    load_spec,
)
from lakelog.maintenance.compaction.planner import plan_compaction

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema(
    [
        ("part", pa.string()),
        ("id", pa.int64()),
        ("a", pa.int64()),
        ("x", pa.float64()),
        ("s", pa.string()),
    ]
)


def _batch(i: int, n: int = 400, parts: tuple[str, ...] = ("p0", "p1")) -> pa.Table:
    rng = np.random.default_rng(i)
    a = rng.integers(0, 10_000, n)
    return pa.table(
        {
            "part": pa.array([parts[j % len(parts)] for j in range(n)], pa.string()),
            "id": pa.array(np.arange(i * n, (i + 1) * n), pa.int64()),
            "a": pa.array([None if j % 17 == 0 else int(v) for j, v in enumerate(a)], pa.int64()),
            "x": pa.array(rng.random(n), pa.float64()),
            "s": pa.array([None if j % 11 == 0 else f"s{j % 37}" for j in range(n)], pa.string()),
        },
        schema=SCHEMA,
    )


def _build(
    uri: str, appends: int, *, parts: tuple[str, ...] = ("p0", "p1"), rows: int = 400
) -> lakelog.Table:
    lakelog.write_table(uri, _batch(0, rows, parts), partition_by=["part"])
    table = lakelog.open_table(uri)
    for i in range(1, appends):
        table.append(_batch(i, rows, parts))
    return table


def _rows(uri: str, **kw: Any) -> list[tuple[Any, ...]]:
    t = lakelog.open_table(uri, **kw).snapshot().to_arrow()
    names = SCHEMA.names
    return sorted(zip(*(t.column(n).to_pylist() for n in names), strict=True), key=lambda r: r[1])


def _layout(uri: str) -> list[tuple[Any, ...]]:
    """What a run decided, independent of file names."""
    files = lakelog.open_table(uri).snapshot().files()
    return sorted(
        (
            f.partition.get("part"),
            f.num_rows,
            f.tags.get(TAG_TIER),
            f.tags.get(TAG_KEY_MIN),
            f.tags.get(TAG_KEY_MAX),
        )
        for f in files
    )


def _ever_referenced(uri: str) -> set[str]:
    table = lakelog.open_table(uri)
    return {f.path for v in range(table.version + 1) for f in table.snapshot(v).files()}


def _data_files_on_disk(uri: str) -> set[str]:
    root = Path(uri)
    return {
        str(p.relative_to(root))
        for p in root.rglob("*.parquet")
        if not str(p.relative_to(root)).startswith("_")
    }


def _assert_sorted_by_key(uri: str) -> None:
    """Every clustered file holds its rows in key order, within its tagged key range."""
    table = lakelog.open_table(uri)
    snap = table.snapshot()
    for f in snap.files():
        spec = load_spec(table.storage, f, snap.schema)
        assert spec is not None, f"no clustering spec in the footer of {f.path}"
        assert spec.spec_id == f.tags[TAG_SPEC]
        keys = spec.keys(pq.read_table(str(Path(uri) / f.path)))
        assert bool(np.all(keys[1:] >= keys[:-1])), f.path
        assert int(keys[0]) >= int(f.tags[TAG_KEY_MIN])
        assert int(keys[-1]) <= int(f.tags[TAG_KEY_MAX])


@contextlib.contextmanager
def crash_at(spark: Any, names: str) -> Iterator[None]:
    """Make Spark's Python workers SIGKILL themselves at these failpoints."""
    env = spark.sparkContext.environment
    env["LAKELOG_CRASH_AT"] = names
    try:
        yield
    finally:
        env.pop("LAKELOG_CRASH_AT", None)


# -- same results as the embedded executor -----------------------------------------------


def test_compact_matches_embedded(spark: Any, tmp_path: Path) -> None:
    spark_uri, embedded_uri = str(tmp_path / "spark"), str(tmp_path / "embedded")
    _build(spark_uri, 6)
    shutil.copytree(spark_uri, embedded_uri)
    before = _rows(spark_uri)

    report = lspark.compact(spark, spark_uri, row_group_size=500)
    expected = lakelog.open_table(embedded_uri).compact(row_group_size=500)

    assert _rows(spark_uri) == before == _rows(embedded_uri)
    assert report.compacted_file_count == expected.compacted_file_count == 12
    assert report.after_file_count == expected.after_file_count == 2
    assert report.planned_groups == expected.planned_groups
    assert report.abandoned_groups == [] and report.extra["failed_groups"] == {}
    assert _layout(spark_uri) == _layout(embedded_uri)
    table = lakelog.open_table(spark_uri)
    for f in table.snapshot().files():  # row groups within the bound
        md = pq.read_metadata(str(Path(spark_uri) / f.path))
        assert all(md.row_group(i).num_rows <= 500 for i in range(md.num_row_groups))
    header = table.history(limit=1)[0]
    assert header.operation == "COMPACT" and header.parameters["engine"] == "spark"
    assert header.read_version == report.read_version + 1  # on top of its claim
    commit = read_commit(table.storage, report.version)
    assert all(not a.data_change for a in commit.actions if hasattr(a, "data_change"))
    assert lspark.read(spark, spark_uri).count() == len(before)


def test_optimize_matches_embedded(spark: Any, tmp_path: Path) -> None:
    spark_uri, embedded_uri = str(tmp_path / "spark"), str(tmp_path / "embedded")
    _build(spark_uri, 6)
    shutil.copytree(spark_uri, embedded_uri)
    before = _rows(spark_uri)
    opts: dict[str, Any] = {"zorder_by": ["a", "x"], "target_file_size": 12_000}

    report = lspark.optimize(spark, spark_uri, **opts)
    expected = lakelog.open_table(embedded_uri).optimize(**opts)

    assert _rows(spark_uri) == before == _rows(embedded_uri)
    assert report.extra["spec_id"] == expected.extra["spec_id"]
    assert report.extra["large_groups"] == 0
    assert report.output_file_count == expected.output_file_count > 2
    assert _layout(spark_uri) == _layout(embedded_uri)
    _assert_sorted_by_key(spark_uri)
    ours = lakelog.open_table(spark_uri).clustering_report(["a", "x"]).to_dict()
    theirs = lakelog.open_table(embedded_uri).clustering_report(["a", "x"]).to_dict()
    assert ours["box_fraction"] == pytest.approx(theirs["box_fraction"])
    # a second incremental run finds nothing new to do
    again = lspark.optimize(spark, spark_uri, **opts)
    assert again.version is None and again.compacted_file_count == 0


# -- failures ------------------------------------------------------------------------------


def test_task_that_fails_once_is_retried(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _build(uri, 4)
    before = _rows(uri)
    with crash_at(spark, "spark-task:written:attempt-0"):  # after writing its files
        report = lspark.compact(spark, uri)
    assert report.version is not None and report.abandoned_groups == []
    assert {r["attempt"] for r in report.extra["task_runs"]} == {1}
    assert _rows(uri) == before
    # the crashed first attempts' files are on disk but were never referenced
    orphans = _data_files_on_disk(uri) - _ever_referenced(uri)
    assert orphans
    live = {f.path for f in lakelog.open_table(uri).snapshot().files()}
    assert live <= _data_files_on_disk(uri) and not live & orphans


def test_task_that_always_fails_leaves_the_table_unchanged(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _build(uri, 4)
    before_rows = _rows(uri)
    before = lakelog.open_table(uri)
    groups = [g.group_id for g in plan_compaction(before.snapshot()).groups]
    assert len(groups) == 2

    with (
        crash_at(spark, "spark-task:written"),  # every attempt writes, then dies
        pytest.raises(MaintenanceFailedError, match="none was committed") as failed,
    ):
        lspark.compact(spark, uri)
    report = failed.value.report
    after = lakelog.open_table(uri)
    assert report.version is None and report.commits == []
    assert sorted(report.abandoned_groups) == sorted(groups)
    assert (
        sorted(report.extra["failed_groups"])
        == sorted(groups)
        == sorted(failed.value.failed_groups)
    )
    # the run's claim, then the release of its failed groups: no data changed
    assert after.version == before.version + 2 and after.plans() == []
    assert after.snapshot().files() == before.snapshot().files()
    assert _rows(uri) == before_rows
    assert lspark.read(spark, uri).count() == len(before_rows)
    orphans = _data_files_on_disk(uri) - _ever_referenced(uri)
    assert orphans  # partial outputs of the crashed attempts, left for vacuum
    found = after.vacuum(older_than=dt.timedelta(0), force=True)
    assert orphans <= set(found.files)

    # one bad group does not stop the other
    bad, _ = groups
    with crash_at(spark, f"spark-task:start:{bad}"):
        report = lspark.compact(spark, uri)
    assert report.abandoned_groups == [bad] and list(report.extra["failed_groups"]) == [bad]
    summary = report.summary()
    assert f"1 of 2 groups failed and were not committed, first group {bad}: " in summary
    assert report.failed_groups[bad] in summary and "removed concurrently" not in summary
    assert report.version is not None and report.compacted_file_count == 4
    live = {f.path for f in lakelog.open_table(uri).snapshot().files()}
    bad_sources = next(g for g in plan_compaction(before.snapshot()).groups if g.group_id == bad)
    assert set(bad_sources.paths) <= live
    assert _rows(uri) == before_rows


# -- beside ingest ---------------------------------------------------------------------------

APPENDER = textwrap.dedent(
    """
    import json, os, sys, time
    import pyarrow as pa
    import lakelog

    uri, started, stop = sys.argv[1], sys.argv[2], sys.argv[3]
    table = lakelog.open_table(uri)
    ids, i = [], 0
    deadline = time.monotonic() + 200
    while not os.path.exists(stop) and time.monotonic() < deadline:
        new = list(range(10_000_000 + 10 * i, 10_000_000 + 10 * i + 10))
        table.append(
            pa.table(
                {
                    "part": [("p0", "p1")[i % 2]] * 10,
                    "id": new,
                    "a": [i] * 10,
                    "x": [0.5] * 10,
                    "s": ["appended"] * 10,
                },
                schema=table.schema,
            )
        )
        ids.extend(new)
        i += 1
        if i == 3:
            open(started, "w").close()
    print(json.dumps(ids))
    """
)


def test_compaction_beside_a_python_process_appending(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _build(uri, 6)
    original = [r[1] for r in _rows(uri)]
    started, stop = tmp_path / "started", tmp_path / "stop"
    proc = subprocess.Popen(
        [sys.executable, "-c", APPENDER, uri, str(started), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the appender never started"
            time.sleep(0.02)
        report = lspark.compact(spark, uri)
    finally:
        stop.touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    appended = json.loads(out)
    assert report.version is not None and report.abandoned_groups == []
    assert report.version > report.read_version + 1  # appends landed meanwhile: rebased
    ids = [r[1] for r in _rows(uri)]
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(original + appended)
    live = {f.path for f in lakelog.open_table(uri).snapshot().files()}
    compacted = {p for group in report.planned_groups for p in group}
    assert not live & compacted


# -- a group too large for one task: Spark range partitioning, sort and writer ----------


def test_large_group_is_clustered_by_spark_jobs(spark: Any, tmp_path: Path) -> None:
    uri, embedded_uri = str(tmp_path / "spark"), str(tmp_path / "embedded")
    _build(uri, 6, parts=("p0",), rows=2_000)
    shutil.copytree(uri, embedded_uri)
    before = _rows(uri)
    unclustered = lakelog.open_table(uri).clustering_report(["a", "x"], selectivity=0.05)
    opts: dict[str, Any] = {"zorder_by": ["a", "x"], "target_file_size": 24_000}

    report = lspark.optimize(spark, uri, max_group_bytes=1_000, **opts)
    expected = lakelog.open_table(embedded_uri).optimize(**opts)

    assert report.extra["large_groups"] == 1 and report.extra["failed_groups"] == {}
    assert [r["mode"] for r in report.extra["task_runs"]] == ["spark-job"]
    assert _rows(uri) == before
    _assert_sorted_by_key(uri)  # spec in every footer, keys in order and within the tags
    files = lakelog.open_table(uri).snapshot().files()
    assert all(f.partition == {"part": "p0"} and f.path.startswith("part=p0/") for f in files)
    key_ranges = sorted((int(f.tags[TAG_KEY_MIN]), int(f.tags[TAG_KEY_MAX])) for f in files)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(key_ranges))
    # about as many files, and as good a layout, as the embedded executor's
    assert abs(len(files) - expected.output_file_count) <= max(1, expected.output_file_count // 4)
    ours = lakelog.open_table(uri).clustering_report(["a", "x"], selectivity=0.05)
    theirs = lakelog.open_table(embedded_uri).clustering_report(["a", "x"], selectivity=0.05)
    assert ours.box_fraction <= 1.25 * theirs.box_fraction
    assert ours.box_fraction < 0.5 * unclustered.box_fraction
    assert not (Path(uri) / "_spark_staging").exists() or not any(
        (Path(uri) / "_spark_staging").iterdir()
    )
    # the files are recognized as clustered: an incremental run has nothing to do
    again = lspark.optimize(spark, uri, max_group_bytes=1_000, **opts)
    assert again.version is None and again.compacted_file_count == 0


# -- pacing, concurrency, options -----------------------------------------------------------


def test_one_group_at_a_time_paced_to_the_total_rate(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _build(uri, 3, parts=("p0", "p1", "p2"))
    plan = plan_compaction(lakelog.open_table(uri).snapshot())
    per_group = min(g.total_bytes for g in plan.groups)
    rate = per_group / 2  # every group must wait about a second for its reads

    report = lspark.compact(spark, uri, max_concurrent_groups=1, max_bytes_per_second=rate)
    runs = sorted(report.extra["task_runs"], key=lambda r: r["started"])
    assert len(runs) == 3
    assert all(b["started"] >= a["finished"] for a, b in itertools.pairwise(runs))
    assert report.extra["bytes_per_second_per_task"] == pytest.approx(rate)
    assert report.paced_seconds > 0


def test_optimize_paced_with_partial_progress(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = _build(uri, 4, parts=("p0", "p1", "p2"))
    table.set_properties({"lakelog.compaction.groups_per_commit": 1})
    before, v0 = _rows(uri), lakelog.open_table(uri).version
    rate = lakelog.open_table(uri).snapshot().total_bytes / 4  # every task waits for reads

    report = lspark.optimize(
        spark,
        uri,
        zorder_by=["a", "x"],
        max_concurrent_groups=1,
        max_bytes_per_second=rate,
        partial_progress=True,
    )
    assert report.commits == [v0 + 2, v0 + 3, v0 + 4]  # one commit per group, after the claim
    assert report.summary().startswith("clustered 12 files")
    assert report.extra["bytes_per_second_per_task"] == pytest.approx(rate)
    assert report.paced_seconds > 0
    assert _rows(uri) == before


@pytest.mark.s3
def test_compact_on_s3_through_fsspec_on_executors(spark: Any, s3_backend: Any) -> None:
    uri, opts = s3_backend.uri, s3_backend.storage_options
    lakelog.write_table(uri, _batch(0), partition_by=["part"], storage_options=opts)
    table = lakelog.open_table(uri, storage_options=opts)
    for i in range(1, 4):
        table.append(_batch(i))
    before = _rows(uri, storage_options=opts)
    report = lspark.compact(
        spark, uri, storage_options=opts, max_concurrent_groups=2, max_bytes_per_second=1e9
    )
    assert report.version is not None and report.after_file_count == 2
    assert report.extra["bytes_per_second_per_task"] == pytest.approx(1e9 / 2)
    assert _rows(uri, storage_options=opts) == before


def test_dry_run_and_refusals(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _build(uri, 3)
    on_disk = _data_files_on_disk(uri)
    dry = lspark.compact(spark, uri, dry_run=True)
    assert dry.dry_run and dry.compacted_file_count == 6 and dry.version is None
    dry = lspark.optimize(spark, uri, zorder_by=["a", "x"], dry_run=True)
    assert dry.dry_run and dry.version is None
    assert _data_files_on_disk(uri) == on_disk and lakelog.open_table(uri).version == 2
    with pytest.raises(InvalidArgumentError, match="max_concurrent_groups"):
        lspark.compact(spark, uri, max_concurrent_groups=0)
    with pytest.raises(InvalidArgumentError, match="partition"):
        lspark.optimize(spark, uri, zorder_by=["part"])
    with pytest.raises(InvalidArgumentError, match="in-memory"):
        lspark.compact(spark, "memory://nowhere/t")


def test_partition_values_send_each_file_to_its_own_spark_partition(spark: Any) -> None:
    from pyspark.sql import functions as F

    from lakelog.spark.runner import partition_values, spark_hash_int

    probe = spark.range(-50, 50).selectExpr("cast(id as int) v", "hash(cast(id as int)) h")
    rows = probe.collect()
    ours = spark_hash_int(np.array([r.v for r in rows], dtype=np.int32))
    assert ours.tolist() == [r.h for r in rows]
    for n in (1, 7, 64):
        values = partition_values(n)
        df = spark.createDataFrame([(int(v), i) for i, v in enumerate(values)], "v int, i int")
        placed = df.repartition(n, "v").select("i", F.spark_partition_id().alias("pid"))
        assert {r.i: r.pid for r in placed.collect()} == {i: i for i in range(n)}
