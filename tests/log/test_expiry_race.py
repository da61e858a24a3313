"""An acknowledged commit is never lost to a concurrent expiry, and a hole in the
log is damage on every path.

Invariant: a commit that returned version ``v`` is readable at ``v``, or, if ``v``
was expired concurrently, its rows are in every later version. The writer that
checked its base and then published into a range an expiry had just deleted must
notice, withdraw its commit and land again at a fresh version.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
from lakelog.log.commits import commit_path, list_log
from lakelog.log.expiry_marks import EXPIRED_DIR
from lakelog.storage import Storage

REPO = str(Path(__file__).resolve().parents[2])
SCHEMA = pa.schema([("id", pa.int64())])
ZERO = dt.timedelta(0)


def _ids(snap: lakelog.Snapshot) -> list[int]:
    return sorted(snap.to_arrow(columns=["id"]).column("id").to_pylist())


def _row(i: int) -> pa.Table:
    return pa.table({"id": [i]}, schema=SCHEMA)


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": REPO}
    env.pop("LAKELOG_CRASH_AT", None)
    env.pop("LAKELOG_PAUSE_AT", None)
    env.update(extra)
    return env


_STALE_APPEND = """
import json, sys, lakelog, pyarrow as pa
uri, opts = sys.argv[1], json.loads(sys.argv[2])
t = lakelog.open_table(uri, storage_options=opts or None)
print(json.dumps({"read": t.version}), flush=True)
r = t.append(pa.table({"id": [999]}, schema=pa.schema([("id", pa.int64())])))
print(json.dumps({"version": r.version, "attempts": r.attempts}), flush=True)
"""


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"writer exited early: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("writer never reached its pause point")
        time.sleep(0.01)


@pytest.fixture(params=["local", "s3"])
def place(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{request.param}_backend")


@pytest.mark.processes
def test_stale_writer_paused_between_base_check_and_put(place: Any, tmp_path: Path) -> None:
    """The losing interleaving, forced: the writer read v1 and checked its base; two
    appends make v2, v3; an expiry with retain_last=1 deletes v0..v2; then the
    writer's put at v2 succeeds, in the hole. It must not report version 2."""
    opts = place.storage_options
    t = lakelog.create_table(place.uri, SCHEMA, storage_options=opts)
    t.append(_row(1))
    gate = tmp_path / "go"
    writer = subprocess.Popen(
        [sys.executable, "-c", _STALE_APPEND, place.uri, json.dumps(opts)],
        env=_env(LAKELOG_PAUSE_AT=f"commit:before-put:{gate}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(Path(f"{gate}.paused"), writer)
        t.refresh().append(_row(2))
        t.append(_row(3))
        report = t.expire_snapshots(older_than=ZERO, retain_last=1)
        assert report.oldest_version == 3
        assert not t.storage.exists(commit_path(2))  # the writer's version is free again
        gate.touch()
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0, err
    result = json.loads(out.splitlines()[-1])
    latest = t.refresh().snapshot()
    # acknowledged at a readable version, holding its row; the row is there once
    assert result["version"] >= latest.oldest_version
    assert 999 in _ids(t.snapshot(result["version"]))
    assert _ids(latest) == [1, 2, 3, 999]
    assert result["attempts"] >= 2
    # nothing stays in the expired range of the log
    assert all(v >= latest.oldest_version for v in list_log(t.storage).commits)


def test_hole_filled_in_process_on_memory(memory_backend: Any, tmp_path: Path) -> None:
    """The same interleaving on the in-memory filesystem (one process, two threads)."""
    t = lakelog.create_table(memory_backend.uri, SCHEMA)
    t.append(_row(1))
    stale = lakelog.open_table(memory_backend.uri)
    gate = tmp_path / "go"
    os.environ["LAKELOG_PAUSE_AT"] = f"commit:before-put:{gate}"
    results: list[Any] = []

    def write() -> None:
        try:
            results.append(stale.append(_row(999)))
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            results.append(e)

    thread = threading.Thread(target=write)
    try:
        thread.start()
        deadline = time.monotonic() + 30
        while not Path(f"{gate}.paused").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        t.append(_row(2))
        t.append(_row(3))
        t.expire_snapshots(older_than=ZERO, retain_last=1)
        gate.touch()
        thread.join(60)
    finally:
        os.environ.pop("LAKELOG_PAUSE_AT", None)
        gate.touch()
    (result,) = results
    assert isinstance(result, lakelog.CommitResult), result
    latest = t.refresh().snapshot()
    assert result.version >= latest.oldest_version
    assert 999 in _ids(t.snapshot(result.version))
    assert _ids(latest) == [1, 2, 3, 999]


def test_a_commit_expired_right_after_it_landed_is_not_withdrawn(local_backend: Any) -> None:
    """The other side of the mark: an expiry that ran after the put saw this
    transaction at its version, so the commit stands and is not written twice."""
    t = lakelog.create_table(local_backend.uri, SCHEMA)
    r = t.append(_row(1))
    t.append(_row(2))
    t.expire_snapshots(older_than=ZERO, retain_last=1)
    mark = json.loads(t.storage.read_bytes(f"{EXPIRED_DIR}/{2:020d}.json"))
    assert mark["txn_ids"][str(r.version)] == r.txn_id
    assert _ids(t.snapshot()) == [1, 2]


_APPENDER = """
import json, random, sys, time, lakelog, pyarrow as pa
uri, base, n, stale = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
schema = pa.schema([("id", pa.int64())])
t = lakelog.open_table(uri)
for i in range(n):
    if not stale or random.random() < 0.3:
        t.refresh()  # stale writers commit from handles up to a few commits old
    while True:
        try:
            r = t.append(pa.table({"id": [base + i]}, schema=schema))
            break
        except lakelog.CommitConflictError:
            t.refresh()
    print(json.dumps([base + i, r.version]), flush=True)
"""

_EXPIRER = """
import datetime as dt, sys, time, lakelog
uri, stop = sys.argv[1], sys.argv[2]
import os
t = lakelog.open_table(uri)
runs = 0
while not os.path.exists(stop):
    t.expire_snapshots(older_than=dt.timedelta(0), retain_last=1)
    runs += 1
print(runs)
"""


@pytest.mark.processes
@pytest.mark.slow
def test_appenders_beside_an_expiry_loop_lose_nothing(local_backend: Any, tmp_path: Path) -> None:
    """Randomized: three appender processes (two committing from stale handles) beside
    an expiry loop with retain_last=1. Every acknowledged row is in the final table
    once, and every acknowledged version still readable holds its row."""
    uri = local_backend.uri
    t = lakelog.create_table(uri, SCHEMA)
    stop = tmp_path / "stop"
    expirer = subprocess.Popen(
        [sys.executable, "-c", _EXPIRER, uri, str(stop)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    appenders = [
        subprocess.Popen(
            [sys.executable, "-c", _APPENDER, uri, str(1000 * (k + 1)), "40", str(int(k > 0))],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(3)
    ]
    acknowledged: list[tuple[int, int]] = []
    try:
        for p in appenders:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, err
            acknowledged += [tuple(json.loads(line)) for line in out.splitlines()]
    finally:
        stop.touch()
        for p in appenders:
            if p.poll() is None:
                p.kill()
        _, e_err = expirer.communicate(timeout=120)
    assert expirer.returncode == 0, e_err
    assert len(acknowledged) == 120
    latest = t.refresh().snapshot()
    assert _ids(latest) == sorted(row for row, _ in acknowledged)  # each row exactly once
    for row, version in acknowledged:
        if version >= latest.oldest_version:
            assert row in _ids(t.snapshot(version)), (row, version)
    assert all(v >= latest.oldest_version for v in list_log(t.storage).commits)


def _table_with_manifest(uri: str) -> lakelog.Table:
    t = lakelog.create_table(uri, SCHEMA, properties={"lakelog.manifest_interval": 5})
    for i in range(8):  # versions 1..8; a manifest at 5 and the hint naming it
        t.append(_row(i))
    return t


def test_a_hole_after_the_newest_manifest_is_corrupt_everywhere(local_backend: Any) -> None:
    """A commit missing after the hint's manifest: open_table, snapshot(), refresh and
    every version at or above the hole raise CorruptLogError, and no writer fills it."""
    t = _table_with_manifest(local_backend.uri)
    stale = lakelog.Table(t.storage, t.snapshot(5))  # a handle cached just below the hole
    t.storage.delete([commit_path(6)])
    for read in (
        lambda: lakelog.open_table(local_backend.uri),
        lambda: t.snapshot(7),
        lambda: stale.refresh(),
        lambda: t.snapshot(6),
        lambda: stale.snapshot(8),
    ):
        with pytest.raises(lakelog.CorruptLogError, match=r"commit 6 .*missing while commit 7"):
            read()
    assert _ids(t.snapshot(5)) == list(range(5))  # below the hole still reads
    with pytest.raises(lakelog.CorruptLogError, match="hole"):
        stale.append(_row(100))
    assert not t.storage.exists(commit_path(6))  # nobody committed into the hole


def test_a_wide_hole_is_found_by_refresh(local_backend: Any) -> None:
    t = _table_with_manifest(local_backend.uri)
    t.storage.delete([commit_path(v) for v in (6, 7)])
    with pytest.raises(lakelog.CorruptLogError, match=r"commit 6 .*missing while commit 8"):
        lakelog.open_table(local_backend.uri)


class EarlyLook(Storage):
    """Its first read of commit 6 comes too early: the commit is not there yet."""

    looked = False

    def read_many(self, rels: Any) -> list[bytes | None]:
        got = super().read_many(rels)
        if not self.looked and commit_path(6) in rels:
            self.looked = True
            got[list(rels).index(commit_path(6))] = None
        return got


def test_a_commit_created_between_two_reads_is_no_hole(local_backend: Any) -> None:
    """The tail is read one name after the other: commit 6 can be missing when read and
    exist, with 7 after it, by the time 7 is read (racing writers on a loaded machine).
    That is no hole: the reader looks at 6 again and goes on."""
    from lakelog.log.commits import read_tail

    t = _table_with_manifest(local_backend.uri)
    early = EarlyLook(local_backend.uri)
    versions = [v for v, _ in read_tail(early, 5)]
    assert early.looked and versions == list(range(5, versions[-1] + 1)) and 7 in versions
    t.storage.delete([commit_path(6)])  # a real hole is still one
    with pytest.raises(lakelog.CorruptLogError, match=r"commit 6 .*missing while commit 7"):
        list(read_tail(t.storage, 5))


_OPEN = """
import json, sys, lakelog
t = lakelog.open_table(sys.argv[1])
print(json.dumps({"version": t.version}), flush=True)
"""


@pytest.mark.processes
def test_commits_landing_while_a_reader_probes_the_tail_are_no_hole(tmp_path: Path) -> None:
    """Real processes, forced interleaving: a reader finds commit 10 missing (the end of
    the log) and stops before probing the names past its batch; a writer lands 10 to 14
    meanwhile; the probe then finds 14. The reader must read 10 again and go on to the
    end, not report a hole at 10 (``LogGapError``, which kills an appending process)."""
    uri = str(tmp_path / "t")
    t = _table_with_manifest(uri)  # versions 0..8, a manifest at 5
    t.append(_row(8))  # 9: the tail read from 6 has its first missing name at index 4
    gate = tmp_path / "gate"
    reader = subprocess.Popen(
        [sys.executable, "-c", _OPEN, uri],
        env=_env(LAKELOG_PAUSE_AT=f"log:tail-probe:{gate}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(Path(f"{gate}.paused"), reader)
    for i in range(9, 14):
        t.append(_row(i))  # versions 10..14 land while the reader is paused
    gate.touch()
    out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    assert json.loads(out.splitlines()[-1]) == {"version": 14}
    assert _ids(lakelog.open_table(uri).snapshot()) == list(range(14))
