"""Schema changes racing real writer processes.

* ``add_columns``/``widen_column`` beside processes appending data of the original
  schema with ``schema_mode="merge"``: every change lands (it is rebuilt and retried on
  the latest version), every append lands once (an append that lost to a schema change
  fails with CommitConflictError, deletes its files, and is retried), and the rows read
  through the final schema.
* Two merge appends adding different columns, one forced to lose the race: the loser
  fails cleanly (its files gone), its retry lands, and both columns are in the table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog

pytestmark = pytest.mark.processes

APPENDER = r"""
import json, sys
import pyarrow as pa
import lakelog
from lakelog import CommitConflictError
uri, wid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = lakelog.open_table(uri)
print("ready", flush=True)
sys.stdin.readline()
landed, conflicts = [], 0
for i in range(n):
    data = pa.table({"id": [wid * 1000 + i], "v": pa.array([i % 100], pa.int8())})
    while True:
        try:
            # written for the schema it started with: merge takes it as the table evolves
            landed.append(t.append(data, schema_mode="merge").version)
            break
        except CommitConflictError:
            conflicts += 1
            t.refresh()
print(json.dumps({"landed": landed, "conflicts": conflicts}), flush=True)
"""

EVOLVER = r"""
import json, sys
import pyarrow as pa
import lakelog
uri = sys.argv[1]
t = lakelog.open_table(uri)
print("ready", flush=True)
sys.stdin.readline()
versions = [
    t.add_columns({"note": pa.string()}).version,
    t.widen_column("v", pa.int32()).version,
    t.add_columns([pa.field("score", pa.float64())]).version,
]
print(json.dumps({"landed": versions, "conflicts": 0}), flush=True)
"""

MERGER = r"""
import json, sys
import pyarrow as pa
import lakelog
from lakelog import CommitConflictError
uri, column, ident = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = lakelog.open_table(uri)
data = pa.table({"id": [ident], "v": pa.array([1], pa.int8()), column: [f"{column}-{ident}"]})
tries = []
while True:
    try:
        tries.append(t.append(data, schema_mode="merge").version)
        break
    except CommitConflictError as e:
        tries.append(f"conflict at {e.winning_version}")
        t.refresh()
print(json.dumps(tries), flush=True)
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


def _table(tmp_path: Path) -> lakelog.Table:
    schema = pa.schema([("id", pa.int64()), ("v", pa.int8())])
    return lakelog.create_table(str(tmp_path / "t"), schema)


def _data_files(root: str) -> set[str]:
    return {p.name for p in Path(root).rglob("*.parquet") if "_lakelog" not in p.parts}


def test_schema_changes_beside_appending_processes(tmp_path: Path) -> None:
    t = _table(tmp_path)
    n = 6
    procs = [_spawn(APPENDER, t.uri, str(w), str(n)) for w in range(3)]
    procs.append(_spawn(EVOLVER, t.uri))
    results = _race(procs)
    landed = [v for r in results for v in r["landed"]]
    assert len(landed) == len(set(landed)) == 3 * n + 3  # one version each, none shared
    final = t.refresh().snapshot()
    assert final.schema == pa.schema(
        [("id", pa.int64()), ("v", pa.int32()), ("note", pa.string()), ("score", pa.float64())]
    )
    rows = final.to_arrow().to_pylist()
    assert sorted(r["id"] for r in rows) == sorted(w * 1000 + i for w in range(3) for i in range(n))
    assert all(r["v"] == r["id"] % 1000 and r["note"] is None for r in rows)
    # no orphan left by the appends that lost to a schema change
    assert len(_data_files(str(tmp_path / "t"))) == final.num_files


def test_merge_appends_adding_different_columns(tmp_path: Path) -> None:
    t = _table(tmp_path)
    gate = tmp_path / "go"
    paused = _spawn(MERGER, t.uri, "a", "1", env={"LAKELOG_PAUSE_AT": f"commit:before-put:{gate}"})
    deadline = time.monotonic() + 60
    while not Path(f"{gate}.paused").exists():
        assert paused.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    # the paused writer has written its file and read version 0; another lands first
    other = _spawn(MERGER, t.uri, "b", "2")
    out_b, err_b = other.communicate(timeout=120)
    assert other.returncode == 0, err_b
    assert json.loads(out_b) == [1]
    gate.touch()
    out_a, err_a = paused.communicate(timeout=120)
    assert paused.returncode == 0, err_a
    assert json.loads(out_a) == ["conflict at 1", 2]
    final = t.refresh().snapshot()
    assert final.schema.names == ["id", "v", "b", "a"]
    rows = {r["id"]: r for r in final.to_arrow().to_pylist()}
    assert rows == {
        1: {"id": 1, "v": 1, "b": None, "a": "a-1"},
        2: {"id": 2, "v": 1, "b": "b-2", "a": None},
    }
    assert len(_data_files(str(tmp_path / "t"))) == 2  # the losing attempt's file was deleted
