"""Exactly-once ingest: ``append(data, app_id=, app_version=)``.

* A batch commits only if its version is newer than the one recorded for its app id;
  a retried (or older) batch writes nothing and returns the recording commit, skipped.
* The recorded versions live in the log state: they survive manifests (both layouts),
  expiry of the commits that recorded them, and time travel shows them as of a version.
* Real processes: two writers racing with the same batches land each batch exactly once
  (also when one is forced to lose after writing its files); a writer SIGKILLed before
  or after its commit's put, then retried, leaves every batch in the table once.
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

import lakelog
from lakelog import AppVersionCommittedError, InvalidArgumentError
from lakelog.log.actions import AddFile, AppTransaction, Commit, CommitHeader
from lakelog.log.format import writing_manifests
from lakelog.transaction import check_conflicts

SCHEMA = pa.schema([("batch", pa.int64()), ("writer", pa.int64()), ("row", pa.int64())])


def _batch(n: int, writer: int = 0, rows: int = 3) -> pa.Table:
    return pa.table(
        {"batch": [n] * rows, "writer": [writer] * rows, "row": list(range(rows))}, schema=SCHEMA
    )


def _data_files(root: Path) -> set[str]:
    return {p.name for p in root.rglob("*.parquet") if "_lakelog" not in p.parts}


def test_a_batch_lands_once_and_a_retry_returns_the_earlier_commit(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = lakelog.create_table(str(root), SCHEMA)
    first = t.append(_batch(7), app_id="ingest", app_version=7)
    assert not first.skipped and first.version == 1
    files = _data_files(root)
    again = t.append(_batch(7), app_id="ingest", app_version=7)
    assert again.skipped and again.version == 1 and again.attempts == 0
    older = t.append(_batch(3), app_id="ingest", app_version=3)
    assert older.skipped and older.version == 1
    assert _data_files(root) == files  # a skipped batch writes nothing
    assert t.append(_batch(8), app_id="ingest", app_version=8).version == 2
    late = t.append(_batch(7), app_id="ingest", app_version=7)  # behind the recorded 8
    assert late.skipped and late.version == 1  # the commit that holds batch 7
    assert t.append(_batch(1), app_id="other", app_version=1).version == 3  # independent
    assert t.refresh().snapshot().app_versions == {"ingest": 8, "other": 1}
    assert t.snapshot().app_commits == {"ingest": 2, "other": 3}
    assert t.snapshot(1).app_versions == {"ingest": 7}  # as of a version
    assert (
        sorted(t.snapshot().to_arrow().column("batch").to_pylist()) == [1] * 3 + [7] * 3 + [8] * 3
    )
    header = t.history(limit=1)[0]
    assert header.format_version == 2  # app_txn is a version-2 action
    assert header.parameters == {"app_id": "other", "app_version": 1}
    assert t.append(_batch(9)).version == 4  # plain appends are unaffected
    # a stale cached table still sees the recorded version (it refreshes first)
    stale = lakelog.open_table(str(root))
    t.append(_batch(10), app_id="ingest", app_version=10)
    assert stale.append(_batch(10), app_id="ingest", app_version=10).skipped


def test_app_arguments_are_checked(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    bad: list[tuple[dict[str, Any], str]] = [
        ({"app_id": "a"}, "app_id and app_version together"),
        ({"app_version": 1}, "app_id and app_version together"),
        ({"app_id": "", "app_version": 1}, "non-empty string"),
        ({"app_id": "x" * 257, "app_version": 1}, "at most 256"),
        ({"app_id": "a", "app_version": -1}, "integer >= 0"),
        ({"app_id": "a", "app_version": True}, "integer >= 0"),
        ({"app_id": 5, "app_version": 1}, "non-empty string"),
    ]
    for kwargs, match in bad:
        with pytest.raises(InvalidArgumentError, match=match):
            t.append(_batch(1), **kwargs)
    assert t.refresh().version == 0


@pytest.mark.parametrize("layout", [1, 2], ids=["v1-manifests", "v2-roots"])
def test_recorded_versions_survive_manifests_and_expiry(tmp_path: Path, layout: int) -> None:
    with writing_manifests(layout):  # every checkpoint: commits' and the expiry's
        t = lakelog.create_table(
            str(tmp_path / "t"), SCHEMA, properties={"lakelog.manifest_interval": 2}
        )
        for n in range(5):
            t.append(_batch(n), app_id="a", app_version=n)  # versions 1..5
        t.append(_batch(0, writer=1), app_id="b", app_version=0)  # 6
        for n in range(4):
            t.append(_batch(100 + n))  # 7..10: plain appends, manifests at 8 and 10
        report = t.expire_snapshots(older_than=dt.timedelta(0), retain_last=1)
        assert report.oldest_version == 10
        fresh = lakelog.open_table(t.uri)
        with pytest.raises(lakelog.VersionExpiredError):
            fresh.snapshot(5)
        snap = fresh.snapshot()
        assert snap.app_versions == {"a": 4, "b": 0}
        assert snap.app_commits == {"a": 5, "b": 6}  # commits expired, numbers kept
        retried = fresh.append(_batch(4), app_id="a", app_version=4)
        assert retried.skipped and retried.version == 5
        assert fresh.append(_batch(5), app_id="a", app_version=5).version == 12  # 11: the expiry
        counts = Counter(fresh.snapshot().to_arrow().column("batch").to_pylist())
        assert counts[4] == 3 and counts[5] == 3


def test_conflict_rule_for_app_versions() -> None:
    mine = [AddFile(path="x", size_bytes=1, num_rows=1), AppTransaction(app_id="a", app_version=5)]

    def winner(app: str, version: int) -> Commit:
        header = CommitHeader(version=9, timestamp_ms=1, operation="APPEND", txn_id="w")
        return Commit(header, [AppTransaction(app_id=app, app_version=version)])

    for w in (winner("a", 5), winner("a", 6)):
        with pytest.raises(AppVersionCommittedError) as info:
            check_conflicts(kind="append", actions=mine, winners=[w])
        assert info.value.winning_version == 9 and info.value.app_id == "a"
    check_conflicts(kind="append", actions=mine, winners=[winner("a", 4), winner("b", 5)])


# -- real processes ---------------------------------------------------------------------

INGEST = r"""
import json, sys
import pyarrow as pa
import lakelog
uri, opts = sys.argv[1], json.loads(sys.argv[2])
writer, first, last = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
schema = pa.schema([("batch", pa.int64()), ("writer", pa.int64()), ("row", pa.int64())])
t = lakelog.open_table(uri, storage_options=opts)
if len(sys.argv) > 6:
    print("ready", flush=True)
    sys.stdin.readline()
out = []
for n in range(first, last):
    data = pa.table({"batch": [n] * 3, "writer": [writer] * 3, "row": [0, 1, 2]}, schema=schema)
    r = t.append(data, app_id="ingest-7", app_version=n)
    out.append([n, r.version, r.skipped])
print(json.dumps(out), flush=True)
"""


def _spawn(
    *args: str, env: dict[str, str] | None = None, wait: bool = False
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", INGEST, *args, *(["wait"] if wait else [])],
        env={**os.environ, **(env or {})},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _once_each(t: lakelog.Table, batches: range) -> None:
    rows = t.refresh().snapshot().to_arrow().to_pylist()
    per_batch = Counter(r["batch"] for r in rows)
    assert per_batch == dict.fromkeys(batches, 3), per_batch
    writers = {r["batch"]: {x["writer"] for x in rows if x["batch"] == r["batch"]} for r in rows}
    assert all(len(w) == 1 for w in writers.values())  # each batch from one writer only


@pytest.mark.processes
def test_two_processes_racing_with_the_same_batches(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    n = 8
    procs = [_spawn(t.uri, "{}", str(w), "0", str(n), wait=True) for w in (1, 2)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out))
    _once_each(t, range(n))
    history = {h.version: h for h in t.history()}
    for batch in range(n):
        (v1, s1), (v2, s2) = [(r[batch][1], r[batch][2]) for r in results]
        assert v1 == v2 and s1 != s2  # both report the one commit; exactly one wrote it
        assert history[v1].parameters["app_version"] == batch
    assert len(_data_files(tmp_path / "t")) == n  # the skipped writers' files are gone


@pytest.mark.processes
def test_writer_that_loses_after_writing_its_files_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = lakelog.create_table(str(root), SCHEMA)
    gate = tmp_path / "gate"
    paused = _spawn(
        t.uri, "{}", "1", "0", "1", env={"LAKELOG_PAUSE_AT": f"commit:before-put:{gate}"}
    )
    deadline = time.monotonic() + 60
    while not Path(f"{gate}.paused").exists():
        assert paused.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    other = _spawn(t.uri, "{}", "2", "0", "1")
    out, err = other.communicate(timeout=120)
    assert other.returncode == 0, err
    assert json.loads(out) == [[0, 1, False]]
    gate.touch()
    out, err = paused.communicate(timeout=120)
    assert paused.returncode == 0, err
    assert json.loads(out) == [[0, 1, True]]  # it found the batch in the winner: skipped
    _once_each(t, range(1))
    assert t.refresh().version == 1 and len(_data_files(root)) == 1


@pytest.mark.processes
@pytest.mark.parametrize(
    ("where", "point"),
    [
        ("local", "append:before-commit"),
        ("local", "commit:after-put"),
        ("s3", "commit:after-put"),
    ],
)
def test_killed_and_retried_writer_lands_each_batch_once(
    tmp_path: Path, point: str, where: str, request: pytest.FixtureRequest
) -> None:
    backend = request.getfixturevalue(f"{where}_backend")
    opts = json.dumps(backend.storage_options)
    t = lakelog.create_table(backend.uri, SCHEMA, storage_options=backend.storage_options)
    ok = _spawn(backend.uri, opts, "1", "0", "3")
    assert ok.communicate(timeout=120)[0].strip()
    crashed = _spawn(backend.uri, opts, "1", "3", "6", env={"LAKELOG_CRASH_AT": point})
    crashed.communicate(timeout=120)
    assert crashed.returncode == -signal.SIGKILL
    after_put = point == "commit:after-put"
    assert t.refresh().snapshot().app_versions == {"ingest-7": 3 if after_put else 2}
    retry = _spawn(backend.uri, opts, "1", "3", "6")
    out, err = retry.communicate(timeout=120)
    assert retry.returncode == 0, err
    reported = json.loads(out)
    assert [skipped for _, _, skipped in reported] == [after_put, False, False]
    _once_each(t, range(6))
