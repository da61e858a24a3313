"""The streaming source ``spark.readStream.format("lakelog")``: what each commit gives,
admission control, change commits, expiry, restarts from a checkpoint, and a query whose
driver is SIGKILLed while other processes append, compact and expire.

Queries in this process run with ``Trigger.AvailableNow`` into ``foreachBatch``, which
records each micro-batch's ids; the crash test runs its query in a child process with its
own SparkSession and checks the rows of its lakelog sink.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _processes import child_env, spawn

import lakelog
import lakelog.spark as lspark

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

TESTS = str(Path(__file__).resolve().parents[1])
SCHEMA = pa.schema([("id", pa.int64())])


def _append(uri: str, ids: list[int] | range) -> int:
    """One commit adding one file of ``ids``; its version."""
    rows = pa.table({"id": pa.array(list(ids), pa.int64())}, schema=SCHEMA)
    if not os.path.exists(uri):
        return lakelog.write_table(uri, rows).version  # type: ignore[no-any-return]
    return lakelog.open_table(uri).append(rows).version  # type: ignore[no-any-return]


def _run(spark: Any, uri: str, checkpoint: Path, **options: Any) -> list[list[int]]:
    """Run a query on ``uri`` until it read what is there (``Trigger.AvailableNow``);
    the sorted ids of each micro-batch that read rows, in order."""
    lspark.register(spark)
    reader = spark.readStream.format("lakelog")
    for k, v in options.items():
        reader = reader.option(k, str(v))
    batches: dict[int, list[int]] = {}

    def collect(frame: Any, batch_id: int) -> None:
        batches[batch_id] = sorted(r.id for r in frame.select("id").collect())

    query = (
        reader.load(uri)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return [batches[b] for b in sorted(batches) if batches[b]]


def _flat(batches: list[list[int]]) -> list[int]:
    return sorted(i for b in batches for i in b)


def test_the_snapshot_first_then_each_append_once_across_restarts(
    spark: Any, tmp_path: Path
) -> None:
    uri, checkpoint = str(tmp_path / "t"), tmp_path / "ck"
    _append(uri, range(0, 3))
    _append(uri, range(3, 6))
    assert _flat(_run(spark, uri, checkpoint)) == list(range(6))  # the snapshot's files

    _append(uri, range(6, 9))
    report = lakelog.open_table(uri).compact(min_file_size=1 << 30, target_file_size=1 << 30)
    assert report.commits  # a rewrite without data change: nothing to stream
    _append(uri, range(9, 12))
    assert _run(spark, uri, checkpoint) == [list(range(6, 12))]
    assert _run(spark, uri, checkpoint) == []  # restarted again: nothing new


def test_max_files_and_bytes_per_trigger_bound_every_batch(spark: Any, tmp_path: Path) -> None:
    """Commits of three files each (one per partition), cut inside a commit too."""
    uri = str(tmp_path / "t")

    def rows(ids: list[int]) -> pa.Table:
        return pa.table({"id": pa.array(ids, pa.int64()), "p": [i % 3 for i in ids]})

    lakelog.write_table(uri, rows([0, 1, 2]), partition_by=["p"])
    lakelog.open_table(uri).append(rows([3, 4, 5, 6]))
    files = _run(spark, uri, tmp_path / "a", maxFilesPerTrigger=2)
    # the snapshot's 3 files, then the commit's: 2 + (1 + 1) + 2 files
    assert len(files) == 3 and _flat(files) == list(range(7))
    assert len(files[0]) == 2  # two of the snapshot's files of one row
    # a soft bound on bytes: each batch is the one file that crosses it
    one = _run(spark, uri, tmp_path / "b", startingVersion=1, maxBytesPerTrigger=1)
    assert sorted(one) == [[3, 6], [4], [5]]


def test_starting_version_timestamp_and_latest(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for i in range(3):
        _append(uri, [i])
    assert _flat(_run(spark, uri, tmp_path / "a", startingVersion=1)) == [1, 2]
    ts = {h.version: h.timestamp_ms for h in lakelog.open_table(uri).history()}[2]
    when = dt.datetime.fromtimestamp(ts / 1000, tz=dt.timezone.utc).isoformat()
    assert _flat(_run(spark, uri, tmp_path / "b", startingTimestamp=when)) == [2]
    assert _run(spark, uri, tmp_path / "c", startingVersion="latest") == []
    _append(uri, [3])
    assert _run(spark, uri, tmp_path / "c", startingVersion="latest") == [[3]]
    with pytest.raises(Exception, match="expected startingVersion at most 3"):
        _run(spark, uri, tmp_path / "d", startingVersion=9)


def test_a_delete_stops_the_query_and_skip_change_commits_passes_it(
    spark: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    _append(uri, range(0, 4))
    deleted = lakelog.open_table(uri).delete("id = 1").version
    _append(uri, [7])
    with pytest.raises(Exception, match=f"found 'DELETE' at version {deleted}") as e:
        _run(spark, uri, tmp_path / "a", startingVersion=0)
    assert "skipChangeCommits" in str(e.value) and "readChangeFeed" in str(e.value)
    # the rows before the delete were delivered before the query stopped on it
    got = _run(spark, uri, tmp_path / "b", startingVersion=0, skipChangeCommits="true")
    assert _flat(got) == [0, 1, 2, 3, 7]  # the delete's rewritten file is not streamed


def test_the_next_commit_expired_fails_the_query(spark: Any, tmp_path: Path) -> None:
    uri, checkpoint = str(tmp_path / "t"), tmp_path / "ck"
    _append(uri, [0])
    assert _run(spark, uri, checkpoint, startingVersion=0) == [[0]]
    for i in range(1, 5):
        _append(uri, [i])
    lakelog.open_table(uri).expire_snapshots(older_than=dt.timedelta(0), retain_last=1)
    with pytest.raises(Exception, match="expected the commit of version 1, the next this"):
        _run(spark, uri, checkpoint)


def _feed(spark: Any, uri: str, checkpoint: Path, **options: Any) -> list[tuple[Any, ...]]:
    """The rows a ``readChangeFeed`` query gives until it read what is there, the
    commit time as epoch milliseconds."""
    from pyspark.sql import functions as F

    lspark.register(spark)
    reader = spark.readStream.format("lakelog").option("readChangeFeed", "true")
    for k, v in options.items():
        reader = reader.option(k, str(v))
    frame = reader.load(uri)
    assert frame.columns == ["id", "_change_type", "_commit_version", "_commit_timestamp"]
    got: list[tuple[Any, ...]] = []

    def collect(batch: Any, batch_id: int) -> None:
        ms = batch.withColumn("_commit_timestamp", F.unix_millis("_commit_timestamp"))
        got.extend(tuple(r) for r in ms.collect())

    query = (
        frame.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sorted(got)


def _changes(uri: str, start: int) -> list[tuple[Any, ...]]:
    table = lakelog.open_table(uri).changes(start).to_arrow()
    ms = table.column("_commit_timestamp").cast(pa.int64()).to_pylist()
    rows = [tuple(r.values())[:-1] for r in table.to_pylist()]
    return sorted((*r, t) for r, t in zip(rows, ms, strict=True))


def test_read_change_feed_streams_the_feed(spark: Any, tmp_path: Path) -> None:
    uri, checkpoint = str(tmp_path / "t"), tmp_path / "ck"
    _append(uri, [0, 1])
    first = _append(uri, [2])
    ms = {h.version: h.timestamp_ms for h in lakelog.open_table(uri).history()}
    # without startingVersion: the starting snapshot's rows are inserts at its version
    assert _feed(spark, uri, checkpoint) == [(i, "insert", first, ms[first]) for i in range(3)]

    # a full overwrite: every row deleted, new ones inserted
    lakelog.open_table(uri).overwrite(pa.table({"id": pa.array([5, 6], pa.int64())}))
    _append(uri, [7])
    again = _feed(spark, uri, checkpoint, maxFilesPerTrigger=1)
    assert again == _changes(uri, first + 1)  # restarted: exactly the feed after it
    assert {r[1] for r in again} == {"delete", "insert"}
    assert _feed(spark, uri, tmp_path / "b", startingVersion=1) == _changes(uri, 1)


# -- a query killed while other processes append, compact and expire -------------------------

QUERY = """
import sys
sys.path.insert(0, sys.argv[1])
from _services import build_spark_session
import lakelog.spark as lspark
spark = build_spark_session("source-crash", master="local[1]")
lspark.register(spark)
frame = spark.readStream.format("lakelog").option("maxFilesPerTrigger", "2").load(sys.argv[2])
query = (frame.writeStream.format("lakelog").option("checkpointLocation", sys.argv[4])
         .trigger(processingTime="100 milliseconds").start(sys.argv[3]))
query.awaitTermination()
"""
APPEND = """
import sys, time
import pyarrow as pa
import lakelog
table = lakelog.open_table(sys.argv[1])
for i in range(1, int(sys.argv[2]) + 1):
    table.append(pa.table({"id": pa.array(range(5 * i, 5 * i + 5), pa.int64())}))
    time.sleep(0.15)
"""
MAINTAIN = """
import datetime as dt, json, os, sys, time
import lakelog
from lakelog.errors import LakelogError
uri, checkpoint, stop = sys.argv[1:4]
done = {"compact": 0, "expire": 0}

def streamed():
    # the position after the stream's last recorded batch: expiry stays behind it
    commits = os.path.join(checkpoint, "commits")
    batches = [int(n) for n in os.listdir(commits) if n.isdigit()] if os.path.isdir(commits) else []
    if not batches:
        return None
    with open(os.path.join(checkpoint, "offsets", str(max(batches)))) as f:
        return json.loads(f.read().strip().splitlines()[-1])["version"]

while not os.path.exists(stop):
    table = lakelog.open_table(uri)
    try:
        if table.compact(min_file_size=1 << 30, target_file_size=1 << 30).commits:
            done["compact"] += 1
        version = streamed()
        if version is not None and version <= table.version:
            ts = {h.version: h.timestamp_ms for h in table.history()}[version]
            age = dt.timedelta(milliseconds=time.time() * 1000 - ts + 2000)
            if table.expire_snapshots(older_than=age, retain_last=1).oldest_version > 0:
                done["expire"] += 1
    except LakelogError as e:  # a conflict with an append: try again
        print("retry", type(e).__name__, flush=True)
    time.sleep(0.2)
print(json.dumps(done), flush=True)
"""


def _recorded(checkpoint: Path) -> int:
    folder = checkpoint / "commits"
    return len([p for p in folder.iterdir() if p.name.isdigit()]) if folder.is_dir() else 0


def _start_query(src: str, out: str, checkpoint: Path, log: Path) -> subprocess.Popen[bytes]:
    """The query in a child process leading its own process group (its JVM and Python
    workers in it), so one SIGKILL takes the whole driver down."""
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-c", QUERY, TESTS, src, out, str(checkpoint)],
            env=child_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _until(check: Any, what: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            raise AssertionError(f"the query exited before {what}: {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            _kill(proc)
            raise AssertionError(f"timed out waiting for {what}: {log.read_text()[-3000:]}")
        time.sleep(0.1)


@pytest.mark.processes
def test_every_append_once_across_a_sigkill_of_the_driver(tmp_path: Path) -> None:
    src, out, checkpoint = str(tmp_path / "src"), str(tmp_path / "out"), tmp_path / "ck"
    log, stop, commits = tmp_path / "query.log", tmp_path / "stop", 30
    _append(src, range(5))
    query = _start_query(src, out, checkpoint, log)
    _until(lambda: _recorded(checkpoint) >= 1, "its first batch", query, log, 120)
    appender = spawn(APPEND, src, str(commits))
    maintainer = spawn(MAINTAIN, src, str(checkpoint), str(stop))

    _until(lambda: _recorded(checkpoint) >= 4, "four batches", query, log, 120)
    _kill(query)  # mid-stream
    assert appender.poll() is None  # the appender is still appending
    query = _start_query(src, out, checkpoint, log)
    _, err_a = appender.communicate(timeout=120)
    assert appender.returncode == 0, err_a
    stop.touch()
    out_m, err_m = maintainer.communicate(timeout=120)
    assert maintainer.returncode == 0, err_m
    done = json.loads(out_m.strip().splitlines()[-1])
    assert done["compact"] >= 1 and done["expire"] >= 1, out_m

    expected = Counter(range(5 * (commits + 1)))

    def caught_up() -> bool:
        return os.path.exists(out) and lakelog.open_table(out).snapshot().num_rows >= len(expected)

    _until(caught_up, "every row in the sink", query, log, 180)
    time.sleep(1)  # a batch streamed twice would land now
    _kill(query)
    rows = lakelog.open_table(out).snapshot().to_arrow()["id"].to_pylist()
    assert Counter(rows) == expected


@pytest.mark.parametrize("vectors", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_read_change_feed_streams_deletes_and_updates(
    spark: Any, tmp_path: Path, vectors: bool
) -> None:
    """With the table property on, a delete and an update stream their change rows (the
    plain stream stops at them)."""
    uri = str(tmp_path / "t")
    props = {"lakelog.change_data_feed": "true", "lakelog.deletion_vectors": str(vectors).lower()}
    lakelog.write_table(uri, pa.table({"id": pa.array(range(6), pa.int64())}), properties=props)
    table = lakelog.open_table(uri)
    table.delete("id = 1")
    table.update("id = 2", set={"id": 20})
    _append(uri, [7])
    got = _feed(spark, uri, tmp_path / "ck", startingVersion=0, maxFilesPerTrigger=1)
    assert got == _changes(uri, 0)
    kinds = Counter(r[1] for r in got)
    assert kinds == {"insert": 7, "delete": 1, "update_preimage": 1, "update_postimage": 1}
    with pytest.raises(Exception, match="found 'DELETE' at version 1"):
        _run(spark, uri, tmp_path / "plain", startingVersion=0)
