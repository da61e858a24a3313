"""One cleanup at a time: an expiry or vacuum that finds another one's cleanup lease
stops before deleting anything, and one whose own lease lapsed stops deleting.

Why it matters: a checkpoint that reused a leaf a deleter removes is repaired by
replaying commits from an older whole manifest (``tests/log/test_leaves_race.py``);
a second deleter running beside the first could delete those commits first.
Every case runs real processes, paused at named points.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
from _cleanup_helpers import ZERO, ids, make_table, rows
from _processes import child_env, spawn, wait_paused

import lakelog
from lakelog.leases import LEASE_DIR, LeaseRecord, lease_path, read_leases
from lakelog.log.commits import list_log

pytestmark = pytest.mark.processes

_EXPIRE = """
import datetime as dt, json, sys, lakelog
t = lakelog.open_table(sys.argv[1])
try:
    r = t.expire_snapshots(older_than=dt.timedelta(0), retain_last=1)
except lakelog.CleanupRunningError as e:
    print(json.dumps({"refused": str(e)}), flush=True)
else:
    print(json.dumps({"oldest": r.oldest_version, "log_files": len(r.log_files)}), flush=True)
"""

_VACUUM = """
import datetime as dt, json, sys, lakelog
t = lakelog.open_table(sys.argv[1])
try:
    r = t.vacuum(older_than=dt.timedelta(0), dry_run=False, force=True)
except lakelog.CleanupRunningError as e:
    print(json.dumps({"refused": str(e)}), flush=True)
else:
    print(json.dumps({"files": len(r.files)}), flush=True)
"""


def _result(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    got: dict[str, object] = json.loads(out.splitlines()[-1])
    return got


def _history(tmp_path: Path, **props: object) -> lakelog.Table:
    t = make_table(str(tmp_path / "t"), properties={"lakelog.manifest_interval": 2, **props})
    for i in range(6):
        t.append(rows(3 * i))
    return t


def test_a_cleanup_refuses_while_an_expiry_deletes(tmp_path: Path) -> None:
    """An expiry paused between choosing the leaves and deleting them holds its lease:
    a vacuum and a second expiry (API and CLI) refuse, saying who runs and what to do,
    and delete nothing; dry runs still work. Once the expiry is done both run."""
    t = _history(tmp_path)
    gate = tmp_path / "gate"
    first = spawn(_EXPIRE, t.uri, LAKELOG_PAUSE_AT=f"expire:before-leaves:{gate}")
    wait_paused(gate, first)
    log_before = list_log(t.storage)
    with pytest.raises(lakelog.CleanupRunningError, match="an expiry by process") as e:
        t.vacuum(older_than=ZERO, dry_run=False, force=True)
    assert e.value.operation == "EXPIRE SNAPSHOTS"
    assert e.value.owner == f"{socket.gethostname()}:{first.pid}"
    with pytest.raises(lakelog.CleanupRunningError, match="Run this one again once it finished"):
        t.expire_snapshots(older_than=ZERO, retain_last=1)
    cli = subprocess.run(
        [sys.executable, "-m", "lakelog.cli", "expire", t.uri, "--older-than", "0s"],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )
    assert cli.returncode != 0 and "Traceback" not in cli.stderr
    assert cli.stderr.startswith("lakelog: error: expected no other expiry or vacuum running")
    assert t.vacuum(older_than=ZERO, dry_run=True, force=True).dry_run
    assert t.expire_snapshots(older_than=ZERO, retain_last=1, dry_run=True).dry_run
    assert list_log(t.storage) == log_before  # the refused runs deleted nothing
    gate.touch()
    assert _result(first)["oldest"] == 6
    assert t.expire_snapshots(older_than=ZERO, retain_last=1).oldest_version == 7  # its commit
    t.vacuum(older_than=ZERO, dry_run=False, force=True)
    assert ids(t.refresh().snapshot()) == list(range(18))
    assert read_leases(t.storage) == []  # every cleanup released its lease


def test_of_two_cleanups_starting_together_one_sees_the_other(tmp_path: Path) -> None:
    """A vacuum paused after writing its lease and before reading the others: an
    expiry that starts then sees it and refuses; the vacuum, released, goes on (the
    refused expiry's lease is gone by then)."""
    t = _history(tmp_path)
    gate = tmp_path / "gate"
    vac = spawn(_VACUUM, t.uri, LAKELOG_PAUSE_AT=f"cleanup:before-read:{gate}")
    wait_paused(gate, vac)
    expiry = spawn(_EXPIRE, t.uri)
    assert "a vacuum by process" in str(_result(expiry)["refused"])
    gate.touch()
    assert "files" in _result(vac)


def test_a_killed_cleanup_on_this_host_does_not_block_the_next(tmp_path: Path) -> None:
    """SIGKILL right after the expiry committed: the lease file stays, but its process is
    gone, so a rerun on the same host goes on at once and finishes the job."""
    t = _history(tmp_path)
    killed = spawn(_EXPIRE, t.uri, LAKELOG_CRASH_AT="expire:after-commit")
    killed.communicate(timeout=120)
    assert killed.returncode == -9
    assert [r.operation for r in read_leases(t.storage)] == ["EXPIRE SNAPSHOTS"]
    report = t.expire_snapshots(older_than=ZERO, retain_last=1)
    assert report.oldest_version == 7 and report.log_files  # 7: the killed run's commit
    assert all(v >= 7 for v in list_log(t.storage).commits)
    assert ids(t.refresh().snapshot()) == list(range(18))


_IN_NAMESPACE = "echo 399990 > /proc/sys/kernel/ns_last_pid"
"""Run first in the new pid namespace: its next process gets pid 399991."""


def _namespaces_available() -> bool:
    try:
        probe = ["unshare", "-Urpf", "--mount-proc", "sh", "-c", _IN_NAMESPACE]
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.skipif(
    not _namespaces_available(), reason="needs unprivileged user and pid namespaces (unshare)"
)
def test_a_cleanup_in_another_container_with_this_host_name_blocks(tmp_path: Path) -> None:
    """An expiry in its own pid namespace (as in a container sharing this host name) with
    a pid no process has here: it is running, not dead, so a vacuum here refuses, and
    both finish the job afterwards. Judged by host name and pid alone, the vacuum would
    have taken it for dead and run beside it."""
    t = _history(tmp_path)
    gate = tmp_path / "gate"
    # the expiry gets pid 399991 in its namespace, above any pid of this one (pid_max)
    script = f'{_IN_NAMESPACE} && "$0" -c "$1" "$2"'
    holder = subprocess.Popen(
        ["unshare", "-Urpf", "--mount-proc", "sh", "-c", script, sys.executable, _EXPIRE, t.uri],
        env=child_env(LAKELOG_PAUSE_AT=f"expire:before-leaves:{gate}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_paused(gate, holder)
    (record,) = read_leases(t.storage)
    assert record.host == socket.gethostname() and record.pid == 399991
    with pytest.raises(ProcessLookupError):
        os.kill(record.pid, 0)  # no such process here
    with pytest.raises(lakelog.CleanupRunningError, match="an expiry by process 399991"):
        t.vacuum(older_than=ZERO, dry_run=False, force=True)
    gate.touch()
    assert _result(holder)["oldest"] == 6
    t.vacuum(older_than=ZERO, dry_run=False, force=True)
    assert ids(t.refresh().snapshot()) == list(range(18))


def test_a_live_cleanup_lease_of_another_host_blocks_until_it_lapses(tmp_path: Path) -> None:
    t = _history(tmp_path)
    now = int(time.time() * 1000)
    other = LeaseRecord(
        lease_id="a" * 32,
        operation="VACUUM",
        host="elsewhere",
        pid=4242,
        created_ms=now - 1000,
        expires_ms=now + 60_000,
        ttl_ms=60_000,
    )
    t.storage.write_bytes(lease_path(other.lease_id), msgspec.json.encode(other))
    with pytest.raises(lakelog.CleanupRunningError, match="a vacuum by process 4242 on elsewhere"):
        t.expire_snapshots(older_than=ZERO, retain_last=1)
    lapsed = msgspec.structs.replace(other, expires_ms=now - 130_000)  # past its grace too
    t.storage.write_bytes(lease_path(other.lease_id), msgspec.json.encode(lapsed))
    assert t.expire_snapshots(older_than=ZERO, retain_last=1).oldest_version == 6


def test_a_cleanup_whose_lease_lapsed_stops_deleting(tmp_path: Path) -> None:
    """No heartbeat and a 1 s TTL: an expiry paused for 2 s before the leaves finds its
    lease lapsed and stops with nothing more deleted; a rerun finishes the job."""
    t = _history(tmp_path, **{"lakelog.lease.ttl_seconds": 1})
    gate = tmp_path / "gate"
    proc = spawn(
        _EXPIRE,
        t.uri,
        LAKELOG_PAUSE_AT=f"expire:before-leaves:{gate}",
        LAKELOG_TEST_NO_LEASE_HEARTBEAT="1",
    )
    wait_paused(gate, proc)
    before = list_log(t.storage)
    time.sleep(2)
    gate.touch()
    assert "lapsed" in str(_result(proc)["refused"])
    assert list_log(t.storage) == before
    assert t.storage.list_names(LEASE_DIR) == []  # released on the way out
    report = t.expire_snapshots(older_than=ZERO, retain_last=1)
    assert report.oldest_version == 7 and all(v >= 7 for v in list_log(t.storage).commits)
    assert ids(t.refresh().snapshot()) == list(range(18))
