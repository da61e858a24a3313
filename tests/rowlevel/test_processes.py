"""Row-level changes racing in real OS processes, and killed mid-change.

* Two processes merging into disjoint key ranges both land every merge.
* Two processes merging the same keys: each merge lands or fails with
  CommitConflictError (then is retried); no key is lost or doubled, and every key
  holds the value of the last merge that landed with it.
* A delete beside a live appender of matching rows: at the version the delete
  landed, no matching row is left, and every other appended row is there once.
* SIGKILL before the commit leaves the table as it was; after the put, the change is in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog

pytestmark = pytest.mark.processes

SCHEMA = pa.schema([("id", pa.int64()), ("writer", pa.int64()), ("seq", pa.int64())])

MERGER = r"""
import json, sys
import pyarrow as pa
import lakelog
from lakelog import CommitConflictError
uri, wid, keys, rounds = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
schema = pa.schema([("id", pa.int64()), ("writer", pa.int64()), ("seq", pa.int64())])
t = lakelog.open_table(uri)
print("ready", flush=True)
sys.stdin.readline()
landed, conflicts = [], 0
for seq in range(rounds):
    ids = [k + seq * 7 % 3 for k in keys]  # some existing keys, some new ones
    src = pa.table({"id": ids, "writer": [wid] * len(ids), "seq": [seq] * len(ids)}, schema=schema)
    while True:
        try:
            r = t.merge(src, on="id")
            landed.append([r.version, seq, ids, r.attempts])
            break
        except CommitConflictError:
            conflicts += 1
            t.refresh()
print(json.dumps({"landed": landed, "conflicts": conflicts}), flush=True)
"""


def _spawn(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env={**os.environ, **(env or {})},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _race(procs: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=240)
        assert p.returncode == 0, stderr[-3000:]
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def _table(tmp_path: Path, blocks: list[range]) -> lakelog.Table:
    """One file per block of ids, so merges into different blocks touch different files.
    Copy-on-write (vectors are on by default): the same races with deletion vectors are in
    test_deletion_vectors_processes.py."""
    cow = {"lakelog.deletion_vectors": "false"}
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, properties=cow)
    for b in blocks:
        ids = list(b)
        t.append(
            pa.table({"id": ids, "writer": [-1] * len(ids), "seq": [-1] * len(ids)}, schema=SCHEMA)
        )
    return t


def _state(t: lakelog.Table) -> dict[int, tuple[int, int]]:
    rows = t.refresh().snapshot().to_arrow().to_pylist()
    counts = Counter(r["id"] for r in rows)
    doubled = [k for k, n in counts.items() if n > 1]
    assert not doubled, f"keys doubled: {doubled[:10]}"
    return {r["id"]: (r["writer"], r["seq"]) for r in rows}


def _expected(initial: set[int], results: list[dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """The value of every key after applying the landed merges in version order."""
    state = {k: (-1, -1) for k in initial}
    merges = sorted(
        (version, wid, seq, ids)
        for wid, res in enumerate(results)
        for version, seq, ids, _ in res["landed"]
    )
    for _, wid, seq, ids in merges:
        for k in ids:
            state[k] = (wid, seq)
    return state


def test_merges_into_disjoint_key_ranges_both_land(tmp_path: Path) -> None:
    t = _table(tmp_path, [range(0, 50), range(1000, 1050)])
    rounds = 4
    keys = [[5, 10, 20, 60], [1005, 1010, 1020, 1060]]  # 60 and 1060 are new keys
    procs = [_spawn(MERGER, t.uri, str(w), json.dumps(keys[w]), str(rounds)) for w in (0, 1)]
    results = _race(procs)
    for res in results:
        assert res["conflicts"] == 0 and len(res["landed"]) == rounds
    versions = sorted(v for res in results for v, *_ in res["landed"])
    assert versions == list(range(t.version + 1, t.version + 1 + 2 * rounds))
    assert _state(t) == _expected(set(range(50)) | set(range(1000, 1050)), results)


def test_merges_of_the_same_keys_fail_or_rebase_and_lose_nothing(tmp_path: Path) -> None:
    t = _table(tmp_path, [range(0, 30)])
    rounds = 4
    keys = [5, 10, 20, 40]
    procs = [_spawn(MERGER, t.uri, str(w), json.dumps(keys), str(rounds)) for w in (0, 1)]
    results = _race(procs)
    assert all(len(res["landed"]) == rounds for res in results)
    assert _state(t) == _expected(set(range(30)), results)
    # every landed merge saw the table as of the version before it: each is in the log once
    versions = [v for res in results for v, *_ in res["landed"]]
    assert len(set(versions)) == len(versions) == 2 * rounds


APPENDER = r"""
import os, sys, time
import pyarrow as pa
import lakelog
uri, stop, out = sys.argv[1:4]
schema = pa.schema([("id", pa.int64()), ("writer", pa.int64()), ("seq", pa.int64())])
t = lakelog.open_table(uri)
seq = 0
with open(out, "a") as log:
    while not os.path.exists(stop):
        # writer 42 rows are what the deleter deletes; writer 7 rows must all survive
        batch = pa.table({"id": [seq * 2, seq * 2 + 1], "writer": [42, 7], "seq": [seq, seq]},
                         schema=schema)
        r = t.append(batch)
        log.write(f"{seq} {r.version}\n")
        log.flush()
        seq += 1
        time.sleep(0.2)  # live, yet slow enough for a delete on a loaded machine to land
"""


def _lines(path: Path) -> int:
    return len(path.read_text().split()) // 2 if path.exists() else 0


def test_delete_beside_a_live_appender_of_matching_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _table(tmp_path, [range(100000, 100010)])
    stop, log, gate = tmp_path / "stop", tmp_path / "appended.log", tmp_path / "gate"
    appender = _spawn(APPENDER, t.uri, str(stop), str(log))

    def release_after_appends() -> None:
        # the first delete waits right before its put until 3 more appends landed
        deadline = time.monotonic() + 60
        while not Path(f"{gate}.paused").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        target = _lines(log) + 3
        while _lines(log) < target and time.monotonic() < deadline:
            time.sleep(0.01)
        gate.touch()

    monkeypatch.setenv("LAKELOG_PAUSE_AT", f"commit:before-put:{gate}")
    helper = threading.Thread(target=release_after_appends)
    results = []
    try:
        deadline = time.monotonic() + 120
        while _lines(log) < 2:  # the appender is committing
            assert time.monotonic() < deadline and appender.poll() is None
            time.sleep(0.01)
        helper.start()
        while len(results) < 2:
            assert time.monotonic() < deadline, "the delete never landed"
            assert appender.poll() is None, appender.communicate()[1][-3000:]
            try:
                r = t.refresh().delete("writer = 42")
            except lakelog.CommitConflictError:
                continue  # out of attempts beside the live appender (a slow machine): the
                # caller runs it again, as the error says; nothing was committed
            if r.committed:
                results.append(r)
    finally:
        stop.touch()
        gate.touch()
        _, err = appender.communicate(timeout=120)
        if helper.is_alive():
            helper.join()
    assert appender.returncode == 0, err[-3000:]
    first = results[0]
    assert first.attempts >= 2  # appends landed while it waited: rebased over them
    rewritten_later = [f for f in first.files if f.path not in _live(t, first.read_version)]
    assert rewritten_later  # ... rewriting the files they appended, in the same commit
    for r in results:
        # as of the version the delete landed, no matching row is left
        landed = t.snapshot(r.version).to_arrow()
        assert 42 not in landed.column("writer").to_pylist(), (r.version, r.attempts)
        assert read_operation(t, r.version) == "DELETE"
    appended = [int(line.split()[0]) for line in log.read_text().split("\n") if line]
    assert appended == list(range(len(appended)))
    rows = t.refresh().snapshot().to_arrow().to_pylist()
    sevens = Counter(r["seq"] for r in rows if r["writer"] == 7)
    assert sevens == Counter(appended)  # every other appended row, exactly once
    fortytwos = Counter(r["seq"] for r in rows if r["writer"] == 42)
    assert max(fortytwos.values(), default=1) == 1


def _live(t: lakelog.Table, version: int) -> set[str]:
    return {f.path for f in t.snapshot(version).files()}


def read_operation(t: lakelog.Table, version: int) -> str:
    from lakelog.log.commits import read_commit

    return read_commit(t.storage, version).header.operation


DELETER = r"""
import sys
import lakelog
t = lakelog.open_table(sys.argv[1])
t.delete("id < 5")
"""


@pytest.mark.parametrize("point", ["change:before-commit", "commit:after-put"])
def test_killed_delete(tmp_path: Path, point: str) -> None:
    t = _table(tmp_path, [range(0, 10), range(10, 20)])
    v = t.version
    p = _spawn(DELETER, t.uri, env={"LAKELOG_CRASH_AT": point})
    p.communicate(timeout=120)
    assert p.returncode == -9  # SIGKILL: no cleanup ran
    ids = sorted(r["id"] for r in t.refresh().snapshot().to_arrow().to_pylist())
    if point == "change:before-commit":
        assert t.version == v and ids == list(range(20))
        # its rewritten file is an orphan under a lease that expires; vacuum takes it later
        on_disk = [p for p in (tmp_path / "t").glob("*.parquet")]
        assert len(on_disk) == 3
        assert len(list((tmp_path / "t" / "_lakelog" / "_leases").iterdir())) == 1
    else:
        assert t.version == v + 1 and ids == list(range(5, 20))
