"""Renames racing real writer processes: both land, or the loser gets a conflict and
leaves nothing behind; never a table whose files or schema mix the two names.

* Appending processes (which take the column's current name on each attempt) beside a
  process renaming the column back and forth: every rename and every append lands
  once, every row reads its value under the final name.
* A failpoint holds an append after its files are written and before its commit while
  a rename lands: the append fails with CommitConflictError, its files are deleted, and
  its retry (under the new name) lands.
* A failpoint holds a rename before its commit while an append lands: the rename is
  checked again on the new version and lands; the appended rows read under the new name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _processes import race, spawn, wait_paused

import lakelog

pytestmark = pytest.mark.processes

APPENDER = r"""
import json, sys
import pyarrow as pa
import lakelog
from lakelog import CommitConflictError
from lakelog.errors import SchemaMismatchError
uri, wid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = lakelog.open_table(uri)
print("ready", flush=True)
sys.stdin.readline()
landed, conflicts = [], []
for i in range(n):
    while True:
        name = t.refresh().snapshot().schema.names[1]  # the value column, as named now
        data = pa.table({"id": [wid * 1000 + i], name: [wid * 1000 + i]})
        try:
            landed.append(t.append(data).version)
            break
        except (CommitConflictError, SchemaMismatchError) as e:
            conflicts.append(type(e).__name__)
print(json.dumps({"landed": landed, "conflicts": conflicts}), flush=True)
"""

RENAMER = r"""
import json, sys
import lakelog
uri, n = sys.argv[1], int(sys.argv[2])
t = lakelog.open_table(uri)
print("ready", flush=True)
sys.stdin.readline()
landed = []
for i in range(n):
    old, new = ("v", "w") if i % 2 == 0 else ("w", "v")
    landed.append(t.rename_column(old, new).version)
print(json.dumps({"landed": landed, "conflicts": []}), flush=True)
"""

ONE_APPEND = r"""
import json, sys
import pyarrow as pa
import lakelog
from lakelog import CommitConflictError
uri = sys.argv[1]
t = lakelog.open_table(uri)
tries = []
data = pa.table({"id": [7], "v": [7]})
while True:
    try:
        tries.append(t.append(data).version)
        break
    except CommitConflictError as e:
        tries.append(f"conflict at {e.winning_version}")
        t.refresh()
        data = data.rename_columns(["id", t.snapshot().schema.names[1]])
print(json.dumps(tries), flush=True)
"""

ONE_RENAME = r"""
import json, sys
import lakelog
t = lakelog.open_table(sys.argv[1])
print(json.dumps([t.rename_column("v", "w").version]), flush=True)
"""


def _table(tmp_path: Path) -> lakelog.Table:
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    return lakelog.create_table(str(tmp_path / "t"), schema)


def _data_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.parquet") if "_lakelog" not in p.parts]


def _check_files(root: Path, final: lakelog.Snapshot) -> None:
    """Every live file holds the value column under its one physical name; no orphan."""
    files = _data_files(root)
    assert len(files) == final.num_files
    for f in files:
        assert pq.read_schema(f).names == ["id", "v"]


def test_renames_beside_appending_processes(tmp_path: Path) -> None:
    t = _table(tmp_path)
    n = 5
    procs = [spawn(APPENDER, t.uri, str(w), str(n), gated=True) for w in range(2)]
    procs.append(spawn(RENAMER, t.uri, "4", gated=True))
    results = race(procs)
    landed = [v for r in results for v in r["landed"]]
    assert len(landed) == len(set(landed)) == 2 * n + 4  # one version each, none shared
    final = t.refresh().snapshot()
    assert final.schema.names == ["id", "v"]  # renamed four times: back to v
    rows = final.to_arrow().to_pylist()
    assert sorted(r["id"] for r in rows) == sorted(w * 1000 + i for w in range(2) for i in range(n))
    assert all(r["v"] == r["id"] for r in rows)
    # every version between reads one name, with every row's value under it
    for v in range(final.version + 1):
        snap = t.snapshot(version=v)
        name = snap.schema.names[1]
        assert all(r[name] == r["id"] for r in snap.to_arrow().to_pylist())
    _check_files(tmp_path / "t", final)


def test_an_append_held_before_its_commit_loses_to_a_rename(tmp_path: Path) -> None:
    t = _table(tmp_path)
    gate = tmp_path / "go"
    paused = spawn(ONE_APPEND, t.uri, LAKELOG_PAUSE_AT=f"commit:before-put:{gate}")
    wait_paused(gate, paused)  # its file is written, under the name v, at version 0
    assert t.rename_column("v", "w").version == 1
    gate.touch()
    out, err = paused.communicate(timeout=120)
    assert paused.returncode == 0, err
    assert json.loads(out) == ["conflict at 1", 2]
    final = t.refresh().snapshot()
    assert final.schema.names == ["id", "w"]
    assert final.to_arrow().to_pylist() == [{"id": 7, "w": 7}]
    _check_files(tmp_path / "t", final)  # the losing attempt's file was deleted


def test_a_rename_held_before_its_commit_lands_after_an_append(tmp_path: Path) -> None:
    t = _table(tmp_path)
    gate = tmp_path / "go"
    paused = spawn(ONE_RENAME, t.uri, LAKELOG_PAUSE_AT=f"commit:before-put:{gate}")
    wait_paused(gate, paused)
    assert t.append(pa.table({"id": [1], "v": [1]})).version == 1
    gate.touch()
    out, err = paused.communicate(timeout=120)
    assert paused.returncode == 0, err
    assert json.loads(out) == [2]  # checked again on version 1, then landed
    final = t.refresh().snapshot()
    assert final.schema.names == ["id", "w"]
    assert final.to_arrow().to_pylist() == [{"id": 1, "w": 1}]
    _check_files(tmp_path / "t", final)
