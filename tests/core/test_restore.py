"""``table.restore`` and ``lakelog restore``: roll the latest version back in one commit.

* The restored version reads exactly like the given one: rows, schema, properties,
  file entries; later versions stay in the history; recorded app versions stay.
* Nothing to change commits nothing; a version whose files expiry and vacuum deleted is
  refused, naming the files, and the table is unchanged; an expired version is refused.
* A restore racing a writer process: the restore conflicts or lands on a consistent table.
* The ``lakelog restore`` command, run as a real process: output, exit codes, messages.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import lakelog
from lakelog import CommitConflictError, DataFileMissingError, VersionExpiredError
from lakelog.log.actions import ExpireVersions
from lakelog.log.commits import read_commit

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
COW = {"lakelog.deletion_vectors": "false"}


def _rows(ids: range, v: str = "x") -> pa.Table:
    return pa.table({"id": list(ids), "v": [v] * len(ids)}, schema=SCHEMA)


def _read(snap: lakelog.Snapshot) -> list[dict[str, object]]:
    return sorted(snap.to_arrow().to_pylist(), key=lambda r: (r["id"], str(r)))


def _history(tmp_path: Path) -> lakelog.Table:
    """v0 create; v1, v2 appends; v3 delete; v4 add column; v5 property; v6 append.

    Copy-on-write: the delete rewrites a file (vectors: test_deletion_vectors.py)."""
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, properties=COW | {"team": "a"})
    t.append(_rows(range(0, 5)))
    t.append(_rows(range(5, 10), "y"))
    t.delete("id = 3")
    t.add_columns({"extra": pa.int32()})
    t.set_properties({"team": "b"})
    t.append(pa.table({"id": [10], "v": ["z"], "extra": pa.array([1], pa.int32())}))
    return t


def test_restore_reads_exactly_like_the_version(tmp_path: Path) -> None:
    t = _history(tmp_path)
    at3 = t.snapshot(3)
    r = t.restore(3)
    assert not r.skipped and r.version == 7 and r.operation == "RESTORE"
    now = t.snapshot()
    assert _read(now) == _read(at3)
    assert now.schema == at3.schema and now.properties == COW | {"team": "a"}
    assert now.metadata.table_id == at3.metadata.table_id
    assert sorted(f.path for f in now.files()) == sorted(f.path for f in at3.files())
    assert {f.path: f for f in now.files()} == {f.path: f for f in at3.files()}  # same entries
    header = t.history(limit=1)[0]
    assert header.parameters == {"version": 3}
    assert header.metrics["num_restored_files"] == 0 and header.metrics["num_removed_files"] == 1
    # later versions stay readable, and one can restore forward again
    assert _read(t.snapshot(6))[-1]["id"] == 10
    assert not t.restore(6).skipped
    assert _read(t.snapshot()) == _read(t.snapshot(6))
    assert t.schema.names == ["id", "v", "extra"]


def test_restore_brings_back_removed_files_and_by_instant(tmp_path: Path) -> None:
    t = _history(tmp_path)
    when = t.snapshot(2).timestamp + dt.timedelta(microseconds=500)
    r = t.restore(as_of=when)
    assert r.version == 7
    now = t.snapshot()
    assert _read(now) == _read(t.snapshot(2)) and now.num_rows == 10
    h = t.history(limit=1)[0]
    assert h.parameters["version"] == 2 and h.parameters["as_of"] == when.isoformat()
    assert h.metrics["num_restored_files"] == 1  # the file the delete rewrote


def test_nothing_to_restore_commits_nothing(tmp_path: Path) -> None:
    t = _history(tmp_path)
    r = t.restore(6)
    assert r.skipped and r.version == 6 and t.refresh().version == 6
    with pytest.raises(lakelog.InvalidArgumentError, match="version=N or as_of"):
        t.restore()
    with pytest.raises(lakelog.VersionNotFoundError):
        t.restore(99)


def test_restore_keeps_recorded_app_versions(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(_rows(range(3)), app_id="job", app_version=1)
    t.append(_rows(range(3, 6)), app_id="job", app_version=2)
    t.restore(0)
    assert t.snapshot().num_rows == 0
    assert t.snapshot().app_versions == {"job": 2}
    assert t.append(_rows(range(3, 6)), app_id="job", app_version=2).skipped


def test_restore_refuses_when_files_were_deleted(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(_rows(range(3)))
    t.append(_rows(range(3, 6)))
    t.overwrite(_rows(range(100, 101)))  # version 3: removes both files
    gone = sorted(f.path for f in t.snapshot(2).files())
    for path in gone:  # as a vacuum run with --force would
        os.remove(tmp_path / "t" / path)
    with pytest.raises(DataFileMissingError) as info:
        t.restore(2)
    message = str(info.value)
    assert all(p in message for p in gone) and "2 of 2 deleted" in message
    assert "Nothing was committed" in message
    assert t.refresh().version == 3 and _read(t.snapshot()) == [{"id": 100, "v": "x"}]


def test_restore_of_an_expired_version_is_refused(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    for i in range(4):
        t.append(_rows(range(i, i + 1)))
    t.expire_snapshots(older_than=dt.timedelta(0), retain_last=2)
    with pytest.raises(VersionExpiredError):
        t.restore(1)
    assert t.restore(3).version == 6  # 5: the expiry


def test_restore_conflicts_with_an_expiry_of_its_version() -> None:
    from lakelog.core.restore import _KeepReadable

    class Target:
        version = 4

    keep = _KeepReadable(Target())  # type: ignore[arg-type]
    header = lakelog.log.actions.CommitHeader(
        version=9, timestamp_ms=1, operation="EXPIRE SNAPSHOTS", txn_id="e"
    )
    ok = lakelog.log.actions.Commit(header, [ExpireVersions(oldest_version=4)])
    assert keep([ok], []) == []
    bad = lakelog.log.actions.Commit(header, [ExpireVersions(oldest_version=5)])
    with pytest.raises(CommitConflictError, match="expired by version 9"):
        keep([bad], [])


APPENDER = r"""
import sys
import pyarrow as pa
import lakelog
from lakelog import CommitConflictError
t = lakelog.open_table(sys.argv[1])
schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
print("ready", flush=True)
sys.stdin.readline()
for i in range(int(sys.argv[2])):
    while True:
        try:
            t.append(pa.table({"id": [1000 + i], "v": ["w"]}, schema=schema))
            break
        except CommitConflictError:
            t.refresh()
print("done", flush=True)
"""


@pytest.mark.processes
def test_restore_racing_an_appending_process(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(_rows(range(5)))  # version 1: the one to restore
    t.append(_rows(range(5, 10)))
    proc = subprocess.Popen(
        [sys.executable, "-c", APPENDER, t.uri, "15"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    landed, conflicts = None, 0
    while landed is None:
        try:
            landed = t.restore(1).version
        except CommitConflictError:
            conflicts += 1
            time.sleep(0.01)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    restored = t.snapshot(landed)
    ids = sorted(r["id"] for r in restored.to_arrow().to_pylist())
    assert ids == list(range(5))  # exactly version 1's rows, whatever landed before
    assert read_commit(t.storage, landed).header.operation == "RESTORE"
    final = sorted(r["id"] for r in t.refresh().snapshot().to_arrow().to_pylist())
    after = [h for h in t.history() if h.version > landed and h.operation == "APPEND"]
    assert final == list(range(5)) + sorted(1015 - len(after) + i for i in range(len(after)))


# -- the command ------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lakelog.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LAKELOG_DEBUG": ""},
    )


def test_cli_restore(tmp_path: Path) -> None:
    t = _history(tmp_path)
    uri = str(tmp_path / "t")
    ok = _cli("restore", uri, "--version", "2")
    assert ok.returncode == 0, ok.stderr
    assert "restored version   2" in ok.stdout and "new version        7" in ok.stdout
    assert "files restored     1" in ok.stdout and "files removed      2" in ok.stdout
    assert _read(t.snapshot()) == _read(t.snapshot(2))
    same = _cli("restore", uri, "--version", "7", "--json")
    assert same.returncode == 0, same.stderr
    assert json.loads(same.stdout)["committed"] is False
    when = t.snapshot(6).timestamp.isoformat()
    by_time = _cli("restore", uri, "--as-of", when, "--json")
    assert by_time.returncode == 0, by_time.stderr
    got = json.loads(by_time.stdout)
    assert (got["restored_version"], got["version"], got["committed"]) == (6, 8, True)

    missing = _cli("restore", uri, "--version", "42")
    assert missing.returncode == 1 and missing.stderr.startswith(
        "lakelog: error: expected a version"
    )
    assert "Traceback" not in missing.stderr
    bad_time = _cli("restore", uri, "--as-of", "yesterday")
    assert bad_time.returncode == 1 and "--as-of as an ISO 8601" in bad_time.stderr
    neither = _cli("restore", uri)
    assert neither.returncode == 2 and "one of the arguments --version --as-of" in neither.stderr
    both = _cli("restore", uri, "--version", "1", "--as-of", when)
    assert both.returncode == 2
    assert t.refresh().version == 8


def test_cli_restore_names_deleted_files(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(_rows(range(3)))
    t.overwrite(_rows(range(9, 10)))
    (path,) = [f.path for f in t.snapshot(1).files()]
    os.remove(tmp_path / "t" / path)
    out = _cli("restore", str(tmp_path / "t"), "--version", "1")
    assert out.returncode == 1
    assert (
        out.stderr.count("\n") == 1 and path in out.stderr and "Nothing was committed" in out.stderr
    )
    assert t.refresh().version == 2


EXPIRER = r"""
import datetime as dt, sys
import lakelog
t = lakelog.open_table(sys.argv[1])
r = t.expire_snapshots(older_than=dt.timedelta(0), retain_last=1)
print(r.oldest_version, flush=True)
"""


@pytest.mark.processes
def test_restore_landing_while_an_expiry_commits_keeps_its_files(tmp_path: Path) -> None:
    """The expiry read the table before the restore landed and commits after it: the
    files the restore added back are live, so the expiry must not delete them."""
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(_rows(range(3)))  # version 1: the one restored
    t.overwrite(_rows(range(7, 8)))  # version 2 removes its file
    gate = tmp_path / "gate"
    proc = subprocess.Popen(
        [sys.executable, "-c", EXPIRER, t.uri],
        env={**os.environ, "LAKELOG_PAUSE_AT": f"commit:before-put:{gate}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not Path(f"{gate}.paused").exists():  # manifest and mark at 2 written
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
        time.sleep(0.02)
    assert t.restore(1).version == 3  # lands first
    gate.touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.strip() == "2"
    fresh = lakelog.open_table(t.uri)
    assert fresh.version == 4 and _read(fresh.snapshot()) == _read(t.snapshot(3))
    assert sorted(r["id"] for r in _read(fresh.snapshot())) == [0, 1, 2]
