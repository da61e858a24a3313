"""Compaction beside other OS processes: live appenders, a rival compaction, a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import Backend
from test_compact import make_table, rows_of

import lakelog
from lakelog.log.commits import read_commit

pytestmark = pytest.mark.processes

APPENDER = r"""
import os, sys
import numpy as np, pyarrow as pa
import lakelog
uri, wid, stop, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
table = lakelog.open_table(uri)
schema = table.schema
seq = 0
with open(out, "a") as log:
    while not os.path.exists(stop):
        ids = wid * 10**6 + seq * 100 + np.arange(20)
        data = pa.table({
            "id": ids,
            "kind": pa.array([("a", "b", None)[i % 3] for i in range(20)], pa.string()),
            "v": np.full(20, float(wid)),
            "note": pa.array([f"w{wid}"] * 20, pa.string()),
        }, schema=schema)
        table.append(data)
        log.write(f"{seq}\n")
        log.flush()
        seq += 1
"""

RIVAL = r"""
import json, sys
import lakelog
uri, out = sys.argv[1:3]
report = lakelog.open_table(uri).compact(target_file_size=1 << 20)
with open(out, "w") as f:
    json.dump(report.to_dict(), f)
"""


def _spawn(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _finish(p: subprocess.Popen[bytes], timeout: float = 120) -> int:
    _, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err.decode()[-3000:]
    return p.returncode


def _all_ids(t: lakelog.Table) -> Counter[int]:
    return Counter(t.refresh().snapshot().to_arrow(columns=["id"]).column("id").to_pylist())


def test_compaction_beside_two_live_appenders(local_backend: Backend, tmp_path: Path) -> None:
    t = make_table(local_backend, appends=8, rows=100)
    initial = set(_all_ids(t))
    stop = tmp_path / "stop"
    logs = [tmp_path / f"w{w}.log" for w in (1, 2)]
    procs = [_spawn(APPENDER, t.uri, str(w), str(stop), str(logs[w - 1])) for w in (1, 2)]

    def appended(log: Path) -> int:
        return len(log.read_text().split()) if log.exists() else 0

    def wait_for(counts: list[int]) -> None:
        deadline = time.monotonic() + 120
        while any(appended(log) < n for log, n in zip(logs, counts, strict=True)):
            assert time.monotonic() < deadline, "appenders made no progress"
            assert all(p.poll() is None for p in procs), "an appender died"
            time.sleep(0.02)

    try:
        wait_for([3, 3])  # both appenders are committing
        reports = []
        for _ in range(2):
            total = t.refresh().snapshot().total_bytes
            # paced to about two seconds of reading, so appends land during the rewrite
            reports.append(t.compact(target_file_size=8 << 20, max_bytes_per_second=total / 2))
        wait_for([appended(log) + 2 for log in logs])  # and still are afterwards
    finally:
        stop.touch()
        for p in procs:
            _finish(p)
    for r in reports:
        assert r.version is not None and not r.abandoned_groups
        assert r.version > r.read_version + 1  # other commits landed in between: rebased
        assert read_commit(t.storage, r.version).header.operation == "COMPACT"
    expected = set(initial)
    for w, log in zip((1, 2), logs, strict=True):
        seqs = [int(line) for line in log.read_text().split()]
        assert len(seqs) >= 5 and seqs == list(range(len(seqs)))
        expected |= {w * 10**6 + s * 100 + i for s in seqs for i in range(20)}
    ids = _all_ids(t)
    assert set(ids) == expected  # every committed append is there, and nothing else
    assert max(ids.values()) == 1  # exactly once
    missing = [f.path for f in t.snapshot().files() if not t.storage.exists(f.path)]
    assert not missing


def test_two_compactions_of_the_same_files(local_backend: Backend, tmp_path: Path) -> None:
    # without claims both plan and rewrite the same files and the commit rules pick one;
    # with claims the second skips them (tests/maintenance/test_claims.py)
    t = make_table(local_backend, appends=10, properties={"lakelog.maintenance.claims": "false"})
    v0 = t.version
    before = rows_of(t)
    old = {f.path for f in t.snapshot().files()}
    gates = [tmp_path / "gate-1", tmp_path / "gate-2"]
    outs = [tmp_path / "report-1.json", tmp_path / "report-2.json"]
    # each pauses right before its commit until both got there (lakelog._failpoints)
    procs = [
        _spawn(RIVAL, t.uri, str(out), env={"LAKELOG_PAUSE_AT": f"rewrite:before-commit:{gate}"})
        for gate, out in zip(gates, outs, strict=True)
    ]
    deadline = time.monotonic() + 120
    while not all(Path(f"{g}.paused").exists() for g in gates):
        assert time.monotonic() < deadline, "the compactions never got to their commits"
        assert all(p.poll() is None for p in procs), "a compaction died"
        time.sleep(0.01)
    for g in gates:
        g.touch()
    for p in procs:
        _finish(p)
    reports = [json.loads(o.read_text()) for o in outs]
    for r in reports:
        assert r["read_version"] == v0  # both planned the same files
    winners = [r for r in reports if r["version"] is not None]
    losers = [r for r in reports if r["version"] is None]
    assert len(winners) == 1 and len(losers) == 1
    (win,), (lose,) = winners, losers
    assert win["version"] == v0 + 1 and win["abandoned_groups"] == []
    assert len(lose["abandoned_groups"]) == len(lose["planned_groups"]) == 3
    assert lose["compacted_file_count"] == 0 and lose["commits"] == []
    assert t.refresh().version == v0 + 1
    assert rows_of(t) == before  # no duplicates, nothing lost
    live = {f.path for f in t.snapshot().files()}
    assert all(t.storage.exists(p) for p in live)
    # the loser deleted its outputs: on disk are the live files and the removed sources only
    on_disk = {f.path for f in t.storage.walk("") if f.path.endswith(".parquet")}
    on_disk = {p for p in on_disk if not p.startswith("_lakelog/")}
    assert on_disk == live | old


@pytest.mark.parametrize("crash_at", ["rewrite:group-written", "commit:before-put:COMPACT"])
def test_crash_before_commit_leaves_table_unchanged(local_backend: Backend, crash_at: str) -> None:
    t = make_table(local_backend, appends=5)
    v0 = t.version
    before = rows_of(t)
    code = "import lakelog, sys; lakelog.open_table(sys.argv[1]).compact()"
    p = _spawn(code, t.uri, env={"LAKELOG_CRASH_AT": crash_at})
    p.communicate(timeout=120)
    assert p.returncode == -9  # killed for real at the failpoint
    # only the run's claim landed (v0 + 1); its owner is dead, so its files are eligible
    assert t.refresh().version == v0 + 1 and rows_of(t) == before
    assert t.history(limit=1)[0].operation == "CLAIM"
    assert [p.running for p in t.plans()] == [False]
    # orphaned outputs are not referenced; a new compaction works and keeps every row
    report = t.compact()
    assert report.version == v0 + 3 and rows_of(t) == before and t.plans() == []


@pytest.mark.parametrize("crash_at", ["commit:after-put:COMPACT"])
def test_crash_after_commit_put_keeps_the_compaction(local_backend: Backend, crash_at: str) -> None:
    t = make_table(local_backend, appends=5)
    v0 = t.version
    before = rows_of(t)
    code = "import lakelog, sys; lakelog.open_table(sys.argv[1]).compact()"
    p = _spawn(code, t.uri, env={"LAKELOG_CRASH_AT": crash_at})
    p.communicate(timeout=120)
    assert p.returncode == -9
    # v0 + 1: the claim; v0 + 2: the compaction, landed before the kill (and its release)
    assert t.refresh().version == v0 + 2 and rows_of(t) == before
    assert t.history(limit=1)[0].operation == "COMPACT" and t.plans() == []
    assert all(t.storage.exists(f.path) for f in t.snapshot().files())
