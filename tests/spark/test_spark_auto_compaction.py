"""Auto-compaction after Spark commits (table property ``lakelog.auto_compact``).

``lakelog.spark.write`` runs it after its commit landed, the groups rewritten by Spark tasks
(the commit header says ``engine: spark``) and its outcome on the result
(``result.auto_compaction``); the streaming sink runs it in each micro-batch's commit call,
after the batch's commit. Neither lets it fail the write: a live file removed behind
lakelog's back makes the run fail, the append stays committed and the outcome says so; a
stream's micro-batches commit once each whatever their runs do.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.log.commits import read_commit

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

AUTO = {"lakelog.auto_compact": "true", "lakelog.auto_compact.min_files": "4"}


def _frame(spark: Any, batch: int) -> Any:
    """100 rows over 2 tasks and 2 partitions: 4 small files per plain write."""
    from pyspark.sql import functions as F

    return spark.range(batch * 100, (batch + 1) * 100, numPartitions=2).select(
        F.col("id"), (F.col("id") % 2).alias("part")
    )


def _headers(uri: str) -> list[Any]:
    table = lakelog.open_table(uri)
    return [read_commit(table.storage, v).header for v in range(table.version + 1)]


def _ids(uri: str) -> list[int]:
    return sorted(lakelog.open_table(uri).snapshot().to_arrow().column("id").to_pylist())


def test_repeated_spark_appends_keep_the_file_count_bounded(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    writes = 5
    lspark.write(_frame(spark, 0), uri, partition_by=["part"], properties=AUTO)
    outcomes = []
    for i in range(1, writes):
        result = lspark.write(_frame(spark, i), uri)
        assert result.auto_compaction is not None
        outcomes.append(result.auto_compaction.status)
        assert read_commit(lakelog.open_table(uri).storage, result.version).header.operation == (
            "SPARK WRITE"
        )

    assert _ids(uri) == list(range(writes * 100))
    # without it 4 files a write (20); with it, per partition under min_files per size tier
    files = list(lakelog.open_table(uri).snapshot().files())
    assert len(files) <= 2 * 3 * 2
    assert "compacted" in outcomes and set(outcomes) <= {"compacted", "below_threshold"}
    auto = [h for h in _headers(uri) if h.operation == "AUTO COMPACT"]
    assert auto and all(h.parameters.get("engine") == "spark" for h in auto)
    assert all(h.parameters.get("auto") is True for h in auto)


def test_a_failed_auto_compaction_leaves_the_spark_write_committed(
    spark: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    props = {**AUTO, "lakelog.auto_compact.min_files": "2"}
    lspark.write(_frame(spark, 0), uri, properties=props)  # 2 files, one per task
    live = sorted(lakelog.open_table(uri).snapshot().files(), key=lambda f: f.path)
    os.remove(Path(uri) / live[0].path)  # behind lakelog's back: the rewrite cannot read it

    result = lspark.write(_frame(spark, 1), uri)

    outcome = result.auto_compaction
    assert outcome is not None and outcome.status == "failed", outcome
    assert outcome.trigger_version == result.version and outcome.error
    headers = _headers(uri)
    assert headers[result.version].operation == "SPARK WRITE"
    # after it at most the run's claim and its release: nothing rewritten
    assert {h.operation for h in headers[result.version + 1 :]} <= {"CLAIM", "RELEASE"}
    new = {f.path for f in lakelog.open_table(uri).snapshot().files()} - {f.path for f in live}
    assert len(new) == 2  # the append's files are live


def test_the_streaming_sink_compacts_after_its_micro_batches(spark: Any, tmp_path: Path) -> None:
    src, uri, checkpoint = tmp_path / "src", str(tmp_path / "t"), tmp_path / "checkpoint"
    import pyarrow as pa

    first = pa.table({"id": pa.array([0], pa.int64()), "part": pa.array([0], pa.int64())})
    lakelog.write_table(
        uri,
        first,
        partition_by=["part"],
        properties={**AUTO, "lakelog.auto_compact.min_files": "3"},
    )
    batches = 5
    src.mkdir()
    for i in range(1, batches + 1):  # one JSON file per micro-batch, one partition each
        path = src / f"{i:03d}.json"
        path.write_text(json.dumps({"id": i, "part": 0}) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    lspark.register(spark)
    frame = spark.readStream.schema("id long, part long").option("maxFilesPerTrigger", 1)
    query = (
        frame.json(str(src))
        .writeStream.format("lakelog")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(uri)
    )
    query.awaitTermination()

    assert _ids(uri) == list(range(batches + 1))
    ops = [h.operation for h in _headers(uri)]
    assert ops.count("SPARK STREAMING WRITE") == batches
    assert "AUTO COMPACT" in ops
    # without it: one file per micro-batch and the first; with it, under 3 per size tier
    assert len(list(lakelog.open_table(uri).snapshot().files())) <= 4


def test_async_mode_runs_the_spark_job_after_write_returns(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    props = {**AUTO, "lakelog.auto_compact.min_files": "2", "lakelog.auto_compact.mode": "async"}
    lspark.write(_frame(spark, 0), uri, properties=props)  # 2 files, one per task

    result = lspark.write(_frame(spark, 1), uri)

    running = result.auto_compaction
    assert running is not None and running.status == "running" and running.mode == "async"
    done = running.wait(120)
    assert done.status == "compacted" and done.trigger_version == result.version
    header = read_commit(lakelog.open_table(uri).storage, done.version or 0).header
    assert header.operation == "AUTO COMPACT" and header.parameters.get("engine") == "spark"
    assert header.parameters.get("mode") == "async"
    assert _ids(uri) == list(range(200))
    assert lakelog.open_table(uri).snapshot().num_files == 1


def test_a_failing_run_never_fails_a_micro_batch(spark: Any, tmp_path: Path) -> None:
    import pyarrow as pa

    src, uri, checkpoint = tmp_path / "src", str(tmp_path / "t"), tmp_path / "checkpoint"
    first = pa.table({"id": pa.array([0], pa.int64()), "part": pa.array([0], pa.int64())})
    props = {**AUTO, "lakelog.auto_compact.min_files": "2"}
    lakelog.write_table(uri, first, partition_by=["part"], properties=props)
    (gone,) = lakelog.open_table(uri).snapshot().files()
    os.remove(Path(uri) / gone.path)  # every run over part=0 now fails reading it
    src.mkdir()
    for i in (1, 2):
        path = src / f"{i:03d}.json"
        path.write_text(json.dumps({"id": i, "part": 0}) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    lspark.register(spark)
    query = (
        spark.readStream.schema("id long, part long")
        .option("maxFilesPerTrigger", 1)
        .json(str(src))
        .writeStream.format("lakelog")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(uri)
    )
    query.awaitTermination()

    assert query.exception() is None
    headers = _headers(uri)
    batches = [h for h in headers if h.operation == "SPARK STREAMING WRITE"]
    assert [h.parameters.get("app_version") for h in batches] == [0, 1]  # each once
    # the run after a batch claimed the files, failed reading the removed one, and left the
    # claim to its lease: nothing rewritten, the batch committed once
    ops = [h.operation for h in headers]
    assert ops[:3] == ["CREATE TABLE AS WRITE", "SPARK STREAMING WRITE", "CLAIM"], ops
    assert set(ops[3:]) <= {"SPARK STREAMING WRITE", "CLAIM", "RELEASE"}, ops
    live = list(lakelog.open_table(uri).snapshot().files())
    assert len(live) == 3 and sum(f.num_rows for f in live) == 3
