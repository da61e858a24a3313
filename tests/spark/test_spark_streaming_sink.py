"""The streaming sink ``df.writeStream.format("lakelog")``: one commit per micro-batch,
exactly once across a crash.

Queries read a file-source folder of small JSON files, one file per micro-batch
(``maxFilesPerTrigger=1``), and stop when the folder is done (``availableNow``). The
crash test runs its queries in real child processes, each with its own SparkSession,
killed by a failpoint right after a micro-batch's commit landed (before Spark recorded
the batch in its checkpoint) and right before another's put, then restarted from the
checkpoint. The lease and abort tests drive the sink's writer without Spark.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pytest
from _processes import spawn

import lakelog
import lakelog.spark as lspark
from lakelog.leases import LeaseRecord, lease_path
from lakelog.log.commits import read_commit
from lakelog.transforms import parse_field

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

TESTS = str(Path(__file__).resolve().parents[1])
SCHEMA = "id long, part long"
WRITE = "SPARK STREAMING WRITE"
CREATE = "SPARK STREAMING CREATE TABLE"


def _batches(folder: Path, batches: list[list[dict[str, Any]]], start: int = 0) -> None:
    """One JSON file per micro-batch, in the order of their modification times (the
    order the file source takes them in)."""
    folder.mkdir(exist_ok=True)
    for i, rows in enumerate(batches, start):
        path = folder / f"{i:03d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def _rows(uri: str, version: int | None = None) -> list[tuple[Any, ...]]:
    snap = lakelog.open_table(uri).snapshot(version)
    return sorted(tuple(r.values()) for r in snap.to_arrow().to_pylist())


def _commits(uri: str) -> list[tuple[str, Any, Any]]:
    """(operation, app_id, app_version) of every commit, oldest first."""
    table = lakelog.open_table(uri)
    headers = [read_commit(table.storage, v).header for v in range(table.version + 1)]
    return [
        (h.operation, h.parameters.get("app_id"), h.parameters.get("app_version")) for h in headers
    ]


def _run(spark: Any, frame: Any, uri: str, checkpoint: Path, **options: str) -> Any:
    """Run a query into ``uri`` until its source is done; the finished query."""
    lspark.register(spark)
    writer = frame.writeStream.format("lakelog").option("checkpointLocation", str(checkpoint))
    mode = options.pop("outputMode", "append")
    for k, v in options.items():
        writer = writer.option(k, v)
    query = writer.outputMode(mode).trigger(availableNow=True).start(uri)
    query.awaitTermination()
    return query


def _source(spark: Any, folder: Path, schema: str = SCHEMA) -> Any:
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(folder))


def test_each_micro_batch_is_one_commit_with_the_query_id_and_batch_id(
    spark: Any, tmp_path: Path
) -> None:
    src, uri, checkpoint = tmp_path / "src", str(tmp_path / "t"), tmp_path / "checkpoint"
    first = [{"id": 1, "part": 0}, {"id": 2, "part": 1}, {"id": 3, "part": 1}]
    _batches(src, [first, [], [{"id": 4, "part": 0}, {"id": 5, "part": 2}]])
    query = _run(spark, _source(spark, src), uri, checkpoint, partitionBy="part")
    # a restart from the same checkpoint is the same query: its next batch, its id
    _batches(src, [[{"id": 6, "part": 1}]], start=3)
    again = _run(spark, _source(spark, src), uri, checkpoint)

    assert again.id == query.id
    qid = str(query.id)
    assert _rows(uri) == [(1, 0), (2, 1), (3, 1), (4, 0), (5, 2), (6, 1)]
    # batch 1 read an empty file: no commit
    assert _commits(uri) == [(CREATE, qid, 0), (WRITE, qid, 2), (WRITE, qid, 3)]
    table = lakelog.open_table(uri)
    assert table.partition_by == ("part",)
    assert table.snapshot().app_versions == {qid: 3}
    assert _rows(uri, 0) == [(1, 0), (2, 1), (3, 1)]
    leases = Path(uri) / "_lakelog" / "_leases"
    assert not leases.exists() or not list(leases.iterdir())  # released after each commit


def test_complete_mode_overwrites_the_table_each_batch(spark: Any, tmp_path: Path) -> None:
    src, uri = tmp_path / "src", str(tmp_path / "t")
    _batches(src, [[{"id": 1, "part": 0}, {"id": 2, "part": 0}, {"id": 3, "part": 1}]])
    _batches(src, [[{"id": 4, "part": 1}, {"id": 5, "part": 2}]], start=1)
    counts = _source(spark, src).groupBy("part").count()
    _run(spark, counts, uri, tmp_path / "cp", outputMode="complete", txnAppId="counts")

    assert _rows(uri, 0) == [(0, 2), (1, 1)]
    assert _rows(uri) == [(0, 2), (1, 2), (2, 1)]
    assert _commits(uri) == [(CREATE, "counts", 0), (WRITE, "counts", 1)]
    header = read_commit(lakelog.open_table(uri).storage, 1).header
    assert header.parameters["output_mode"] == "complete"
    assert header.parameters["mode"] == "overwrite"
    assert header.metrics["num_removed_files"] >= 1


def test_merge_schema_adds_the_stream_columns(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, pa.table({"id": pa.array([0], pa.int64())}))
    src = tmp_path / "src"
    _batches(src, [[{"id": 1, "note": "x"}]])
    frame = _source(spark, src, "id long, note string")
    with pytest.raises(Exception, match="expected a DataFrame matching the table schema"):
        _run(spark, frame, uri, tmp_path / "strict")
    with pytest.raises(Exception, match="expected no option 'replaceWhere'"):
        _run(spark, frame, uri, tmp_path / "refused", replaceWhere="id = 1")
    assert lakelog.open_table(uri).version == 0

    _run(spark, frame, uri, tmp_path / "merge", mergeSchema="true")
    table = lakelog.open_table(uri)
    assert table.schema.names == ["id", "note"]
    assert _rows(uri) == [(0, None), (1, "x")]


# -- the writer without Spark: leases, replays, aborts -----------------------------------


def _writer(uri: str, **options: str) -> Any:
    from pyspark.sql.types import LongType, StructField, StructType

    from lakelog.spark.streaming import StreamWriter

    schema = StructType([StructField("id", LongType())])
    return StreamWriter({"path": uri, "txnAppId": "ingest", **options}, schema, False)


def _task(writer: Any, ids: list[int]) -> Any:
    """What one Spark task of the micro-batch does: write, return its message."""
    return writer.write(iter([pa.record_batch({"id": pa.array(ids, pa.int64())})]))


def _paths(message: Any) -> list[str]:
    return [a["path"] for a in json.loads(message.adds)]


def test_files_stay_leased_from_the_task_until_the_commit(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, pa.table({"id": pa.array([0], pa.int64())}))
    table = lakelog.open_table(uri)
    message = _task(_writer(uri), [1, 2])
    lease = Path(uri) / lease_path(message.lease_id)
    record = msgspec.json.decode(lease.read_bytes(), type=LeaseRecord)
    # the task is gone once the driver commits: the lease names no process to outlive it
    assert record.process is None and record.operation == WRITE
    report = table.vacuum(older_than=dt.timedelta(0), force=True, dry_run=False)
    assert report.files_leased == len(_paths(message)) == 1
    assert (Path(uri) / _paths(message)[0]).exists()

    _writer(uri).commit([message], 7)  # the commit process builds its own writer
    assert not lease.exists()
    assert _rows(uri) == [(0,), (1,), (2,)]
    assert table.refresh().snapshot().app_versions == {"ingest": 7}

    # the same micro-batch again (a replay after a crash): its new files are deleted
    replay = _task(_writer(uri), [1, 2])
    _writer(uri).commit([replay], 7)
    assert table.refresh().version == 1
    assert not (Path(uri) / _paths(replay)[0]).exists()
    assert _rows(uri) == [(0,), (1,), (2,)]


def test_a_lease_that_lapsed_after_the_task_is_checked_before_the_put(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKELOG_TEST_LEASE_RECHECK_SECONDS", "0.01")
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, pa.table({"id": pa.array([0], pa.int64())}))
    message = _task(_writer(uri), [1])
    # the task's last renewal expired long before the commit, and vacuum took its file
    message.expires_ms = 1
    (Path(uri) / _paths(message)[0]).unlink()
    with pytest.raises(lakelog.LeaseExpiredError, match="missing"):
        _writer(uri).commit([message], 1)
    assert lakelog.open_table(uri).version == 0


def test_abort_deletes_files_only_when_a_task_failed(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, pa.table({"id": pa.array([0], pa.int64())}))
    failed = _task(_writer(uri), [1])
    _writer(uri).abort([failed, None], 3)  # a task failed: Spark never committed the batch
    assert not (Path(uri) / _paths(failed)[0]).exists()
    assert not (Path(uri) / lease_path(failed.lease_id)).exists()

    # every task succeeded, so the commit failed: it may have landed, nothing is deleted
    done = _task(_writer(uri), [2])
    _writer(uri).abort([done], 3)
    assert (Path(uri) / _paths(done)[0]).exists()
    assert _rows(uri) == [(0,)]


# -- a crash in the exactly-once window -----------------------------------------------------

QUERY = """
import sys
sys.path.insert(0, sys.argv[1])
from _services import build_spark_session
import lakelog.spark as lspark
spark = build_spark_session("stream-crash", master="local[1]")
lspark.register(spark)
source = spark.readStream.schema("id long, part long").option("maxFilesPerTrigger", 1)
frame = source.json(sys.argv[2])
query = (frame.writeStream.format("lakelog").option("checkpointLocation", sys.argv[4])
         .trigger(availableNow=True).start(sys.argv[3]))
try:
    query.awaitTermination()
except Exception as e:
    print("QUERY FAILED", str(e)[:2000], flush=True)
    sys.exit(3)
print("QUERY DONE", query.id, flush=True)
"""


def _child(src: Path, uri: str, checkpoint: Path, crash: str | None) -> tuple[int, str]:
    env = {} if crash is None else {"LAKELOG_CRASH_AT": f"{crash}:{WRITE}"}
    proc = spawn(QUERY, TESTS, str(src), uri, str(checkpoint), **env)
    out, err = proc.communicate(timeout=240)
    return proc.returncode, out + err[-3000:]


def _recorded(checkpoint: Path) -> list[str]:
    """The micro-batches Spark recorded as done in its checkpoint."""
    return sorted(p.name for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


def test_a_batch_killed_around_its_commit_lands_exactly_once(tmp_path: Path) -> None:
    src, uri, checkpoint = tmp_path / "src", str(tmp_path / "t"), tmp_path / "checkpoint"
    rows = [[{"id": 10 * b + i, "part": b} for i in range(4)] for b in range(3)]
    _batches(src, rows)

    # batch 1's commit lands and its committing process is SIGKILLed right after the put:
    # Spark aborts the batch and the query dies, batch 1 not in its checkpoint
    code, out = _child(src, uri, checkpoint, "commit:after-put")
    assert code == 3, out
    assert _recorded(checkpoint) == ["0"]
    [(app_id, recorded)] = lakelog.open_table(uri).snapshot().app_versions.items()
    assert recorded == 1  # yet the batch is in the table: the window a replay must skip

    # restarted: batch 1 runs again and is skipped; batch 2 is killed before its put
    code, out = _child(src, uri, checkpoint, "commit:before-put")
    assert code == 3, out
    assert _recorded(checkpoint) == ["0", "1"]
    assert lakelog.open_table(uri).version == 1

    code, out = _child(src, uri, checkpoint, None)
    assert code == 0, out
    assert _recorded(checkpoint) == ["0", "1", "2"]
    expected = Counter((r["id"], r["part"]) for batch in rows for r in batch)
    assert Counter(_rows(uri)) == expected  # every row once, every committed file there
    assert _commits(uri) == [(CREATE, app_id, 0), (WRITE, app_id, 1), (WRITE, app_id, 2)]


def test_a_stream_creates_a_table_partitioned_by_transforms(spark: Any, tmp_path: Path) -> None:
    src, uri, checkpoint = tmp_path / "src", str(tmp_path / "t"), tmp_path / "checkpoint"
    _batches(src, [[{"id": i, "part": i % 3} for i in range(20)], [{"id": 40, "part": 1}]])
    _run(spark, _source(spark, src), uri, checkpoint, partitionBy="bucket(4, id),part")
    snap = lakelog.open_table(uri).snapshot()
    assert snap.partitioning == ["bucket(4, id)", "identity(part)"] and snap.partition_by == ()
    assert all(f.tags["partition.spec"] == "0" for f in snap.files())
    bucket = parse_field("bucket(4, id)")
    want = str(bucket.apply(pa.array([40], pa.int64())).to_pylist()[0])
    kept = snap.files("id = 40")
    assert kept and {f.tags["partition.id_bucket_4"] for f in kept} == {want}
    assert sorted(_rows(uri)) == sorted([(i, i % 3) for i in range(20)] + [(40, 1)])
