"""Writer leases: vacuum never deletes the files of a writer that holds a live lease,
whatever ``older_than`` or ``force`` say, and a writer whose lease expired and whose
files vacuum removed fails its commit instead of landing on missing files.

Real processes: a writer paused between writing its data files and committing
(``LAKELOG_PAUSE_AT``) while this process vacuums; a writer SIGKILLed holding a
lease. In process: the before-put check of an expired lease, and the leases of
compaction, clustering and Spark writes (paused at the same point in a thread).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pytest

import lakelog
from lakelog import leases
from lakelog.cli import main
from lakelog.errors import LeaseExpiredError
from lakelog.io.writer import write_files
from lakelog.leases import Lease, LeaseRecord, lease_path, read_leases
from lakelog.log.actions import AddFile
from lakelog.log.commits import list_log

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
ZERO = dt.timedelta(0)
PAUSE_AT = "lease:before-check"  # every leased commit passes here once its files are written

WRITER = """
import json, sys
import pyarrow as pa
import lakelog, lakelog.leases

args = json.loads(sys.argv[1])
t = lakelog.open_table(args["uri"], storage_options=args["opts"])
ids = list(range(args["start"], args["start"] + args["n"]))
try:
    r = t.append(pa.table({"id": ids, "p": ["a" if i % 2 else "b" for i in ids]}))
except lakelog.LakelogError as e:
    print("failed", type(e).__name__, json.dumps(list(getattr(e, "missing_files", ()))))
    print(e, file=sys.stderr)
    sys.exit(3)
print("committed", r.version)
"""


def _rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "p": ["a" if i % 2 else "b" for i in ids]}, schema=SCHEMA)


def _table(backend: Any, **props: Any) -> lakelog.Table:
    t = lakelog.create_table(
        backend.uri,
        SCHEMA,
        partition_by=["p"],
        properties=props or None,
        storage_options=backend.storage_options,
    )
    t.append(_rows(0, 4))
    return t


def _ids(t: lakelog.Table) -> list[int]:
    return sorted(t.refresh().snapshot().to_arrow(columns=["id"]).column("id").to_pylist())


def _files_of(t: lakelog.Table, lease_id: str) -> list[str]:
    """Data files (and Spark staging files) whose path carries ``lease_id``."""
    return sorted(
        f.path for f in t.storage.walk() if lease_id in f.path and not f.path.startswith("_lakelog")
    )


def _wait_for(what: Callable[[], bool], proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + 120
    while not what():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the writer ended early: {proc.communicate()}")
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def _start_writer(
    backend: Any, go: Path, *, start: int, n: int, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    arg = json.dumps(
        {
            "uri": backend.uri,
            "opts": backend.storage_options,
            "start": start,
            "n": n,
        }
    )
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, arg],
        env={
            **os.environ,
            "LAKELOG_PAUSE_AT": f"{PAUSE_AT}:{go}",
            leases.RECHECK_ENV: "0.05",  # the writer's settling wait after a lapse, short
            **(env or {}),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _only_lease(t: lakelog.Table) -> LeaseRecord:
    found = read_leases(t.storage)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.processes
@pytest.mark.parametrize("name", ["local", "s3"])
def test_vacuum_keeps_the_files_of_a_paused_writer_whatever_force_says(
    request: pytest.FixtureRequest, name: str, tmp_path: Path
) -> None:
    backend = request.getfixturevalue(f"{name}_backend")
    t = _table(backend)
    go = tmp_path / "go"
    writer = _start_writer(backend, go, start=100, n=10)
    try:
        _wait_for(Path(f"{go}.paused").exists, writer)
        lease = _only_lease(t)
        assert lease.operation == "APPEND" and lease.live(time.time() * 1000)
        pending = _files_of(t, lease.lease_id)
        assert len(pending) == 2  # one per partition, not committed yet
        dry = t.vacuum(older_than=ZERO, force=True)
        assert dry.files == () and dry.files_leased == 2 and dry.live_leases == 1
        report = t.vacuum(older_than=ZERO, force=True, dry_run=False)
        assert report.files == () and report.files_leased == 2
        assert "2 under writer leases" in report.summary()
        assert all(t.storage.exists(p) for p in pending)
        go.touch()
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.communicate()
    assert writer.returncode == 0, err
    assert out.split()[:2] == ["committed", "2"]
    assert _ids(t) == list(range(4)) + list(range(100, 110))
    assert read_leases(t.storage) == []  # released after the commit


@pytest.mark.processes
def test_a_writer_whose_lease_expired_and_lost_its_files_commits_nothing(
    local_backend: Any, tmp_path: Path
) -> None:
    t = _table(local_backend, **{"lakelog.lease.ttl_seconds": "1"})
    go = tmp_path / "go"
    writer = _start_writer(local_backend, go, start=100, n=10, env={leases.NO_HEARTBEAT_ENV: "1"})
    try:
        _wait_for(Path(f"{go}.paused").exists, writer)
        lease = _only_lease(t)
        pending = _files_of(t, lease.lease_id)
        assert len(pending) == 2
        # no heartbeat: the lease expires and, one TTL of grace later, vacuum ignores it
        _wait_for(lambda: not _only_lease(t).live(time.time() * 1000), writer)
        report = t.vacuum(older_than=ZERO, force=True, dry_run=False)
        assert sorted(report.files) == pending and report.files_leased == 0
        assert report.expired_leases == (lease_path(lease.lease_id),)
        assert read_leases(t.storage) == []
        go.touch()
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.communicate()
    assert writer.returncode == 3, (out, err)
    kind, missing = out.split(maxsplit=2)[1:]
    assert kind == "LeaseExpiredError" and sorted(json.loads(missing)) == pending
    assert "lakelog.lease.ttl_seconds" in err and "Nothing was committed" in err
    assert t.refresh().version == 1 and list_log(t.storage).commits == (0, 1)
    assert _ids(t) == list(range(4))
    assert t.vacuum(older_than=ZERO, force=True).files == ()  # nothing left behind


KILLED_AT = "append:before-commit"  # its data files are written, its commit is not


def _killed_writer(t: lakelog.Table, *, start: int) -> tuple[LeaseRecord, list[str]]:
    """Run an append SIGKILLed after writing its files: its lease and its files."""
    arg = json.dumps({"uri": t.uri, "opts": {}, "start": start, "n": 10})
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, arg],
        env={**os.environ, "LAKELOG_CRASH_AT": KILLED_AT},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=120)  # reaped: no process has its pid now
    assert proc.returncode == -signal.SIGKILL, (out, err)
    (lease,) = [r for r in read_leases(t.storage) if r.pid == proc.pid]  # never released
    orphans = _files_of(t, lease.lease_id)
    assert len(orphans) == 2  # one per partition
    return lease, orphans


def _vacuum_now(t: lakelog.Table, how: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """Vacuum deleting every unreferenced file whatever its age, as the docs name it."""
    if how == "api":
        return t.vacuum(older_than=ZERO, force=True, dry_run=False).to_dict()
    capsys.readouterr()
    args = ["vacuum", t.uri, "--older-than", "0s", "--force", "--no-dry-run", "--json", "--paths"]
    assert main(args) == 0
    return dict(json.loads(capsys.readouterr().out))


@pytest.mark.processes
@pytest.mark.parametrize("how", ["api", "cli"])
def test_a_writer_killed_on_this_machine_loses_its_files_at_once_a_live_one_keeps_them(
    local_backend: Any, tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its holder is known dead (docs/format.md, "Dead holders"): no TTL to wait out."""
    t = _table(local_backend)
    go = tmp_path / "go"
    writer = _start_writer(local_backend, go, start=100, n=10)
    try:
        _wait_for(Path(f"{go}.paused").exists, writer)
        (live,) = read_leases(t.storage)
        pending = _files_of(t, live.lease_id)
        dead, orphans = _killed_writer(t, start=200)
        assert dead.live(time.time() * 1000)  # not expired: only its holder is gone
        report = _vacuum_now(t, how, capsys)
        assert sorted(report["files"]) == orphans
        assert report["files_leased"] == 2 and report["live_leases"] == 2  # its own too
        assert report["expired_leases"] == [lease_path(dead.lease_id)]
        assert not any(t.storage.exists(p) for p in orphans)
        assert all(t.storage.exists(p) for p in pending)
        assert read_leases(t.storage) == [live]
        go.touch()
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.communicate()
    assert writer.returncode == 0, err
    assert out.split()[:2] == ["committed", "2"]
    assert _ids(t) == list(range(4)) + list(range(100, 110))


def _unjudged(lease: LeaseRecord, where: str) -> LeaseRecord:
    """``lease`` as written by a holder vacuum cannot judge dead or alive."""
    if where == "another host":
        return msgspec.structs.replace(lease, host="elsewhere")
    if where == "an older lakelog":
        return msgspec.structs.replace(lease, process=None)
    boot, ns, start = (lease.process or "").split("/")
    return msgspec.structs.replace(lease, process=f"{boot}/{int(ns) + 1}/{start}")


@pytest.mark.processes
@pytest.mark.parametrize("where", ["another host", "an older lakelog", "another container"])
def test_a_killed_writer_that_cannot_be_judged_keeps_its_files_until_its_lease_expires(
    local_backend: Any, where: str
) -> None:
    if where == "another container" and not Path("/proc/self/ns/pid").exists():
        pytest.skip("needs Linux /proc")
    t = _table(local_backend)
    lease, orphans = _killed_writer(t, start=100)
    lease = _unjudged(lease, where)
    t.storage.write_bytes(lease_path(lease.lease_id), msgspec.json.encode(lease))
    report = t.vacuum(older_than=ZERO, force=True, dry_run=False)
    assert report.files == () and report.files_leased == 2 and report.expired_leases == ()
    assert all(t.storage.exists(p) for p in orphans)
    # time passes: the lease's expiry (plus its grace) is behind us
    past = msgspec.structs.replace(lease, expires_ms=int(time.time() * 1000) - 2 * lease.ttl_ms)
    t.storage.write_bytes(lease_path(lease.lease_id), msgspec.json.encode(past))
    report = t.vacuum(older_than=ZERO, force=True, dry_run=False)
    assert sorted(report.files) == orphans and report.files_leased == 0
    assert report.expired_leases == (lease_path(lease.lease_id),)
    assert read_leases(t.storage) == [] and _files_of(t, lease.lease_id) == []
    assert _ids(t) == list(range(4))


# -- the before-put check, in process -------------------------------------------------------


@pytest.fixture
def expiring(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leases without heartbeats and a short settling wait."""
    monkeypatch.setenv(leases.NO_HEARTBEAT_ENV, "1")
    monkeypatch.setenv(leases.RECHECK_ENV, "0.02")


def _leased_files(t: lakelog.Table, lease: Lease) -> list[AddFile]:
    return write_files(
        t.storage,
        _rows(100, 10).to_batches(),
        schema=t.schema,
        partition_by=t.partition_by,
        options=t.write_options(),
        lease_id=lease.lease_id,
    )


def _lapse(lease: Lease) -> None:
    _wait_for(lambda: time.time() * 1000 > lease.expires_ms)


def test_before_put_refuses_a_commit_whose_files_vacuum_removed(
    local_backend: Any, expiring: None
) -> None:
    t = _table(local_backend, **{"lakelog.lease.ttl_seconds": "1"})
    with Lease.acquire(t.storage, operation="APPEND", properties=t.properties) as lease:
        adds = _leased_files(t, lease)
        assert all(lease.lease_id in a.path for a in adds)
        _lapse(lease)
        t.storage.delete([adds[0].path])  # what a vacuum that saw the lease expired does
        with pytest.raises(LeaseExpiredError) as err:
            t.commit(adds, operation="APPEND", kind="append", lease=lease)
    assert err.value.missing_files == (adds[0].path,) and err.value.expired_s > 0
    assert adds[0].path in str(err.value) and "run the write again" in str(err.value).lower()
    assert list_log(t.storage).commits == (0, 1) and _ids(t) == list(range(4))
    assert read_leases(t.storage) == []


def test_before_put_lets_a_lapsed_lease_commit_when_its_files_are_all_there(
    local_backend: Any, expiring: None
) -> None:
    t = _table(local_backend, **{"lakelog.lease.ttl_seconds": "1"})
    with Lease.acquire(t.storage, operation="APPEND", properties=t.properties) as lease:
        adds = _leased_files(t, lease)
        first_expiry = lease.expires_ms
        _lapse(lease)
        assert t.commit(adds, operation="APPEND", kind="append", lease=lease).version == 2
        assert lease.expires_ms > first_expiry  # renewed before the put
        assert _only_lease(t).expires_ms == lease.expires_ms
    assert _ids(t) == list(range(4)) + list(range(100, 110))
    assert read_leases(t.storage) == []


def test_before_put_costs_nothing_while_the_lease_is_fresh(local_backend: Any) -> None:
    t = _table(local_backend)
    with Lease.acquire(t.storage, operation="APPEND", properties=t.properties) as lease:
        adds = _leased_files(t, lease)
        t.storage.delete([adds[0].path])  # not the lease's business while it is live
        renewed = lease.expires_ms
        lease.check([a.path for a in adds])
        assert lease.expires_ms == renewed


# -- every writer holds a lease: compaction, clustering, Spark -------------------------------


@pytest.fixture
def paused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[[], Path]]:
    """Arms a pause: the next leased commit of this process waits at PAUSE_AT until the
    returned path exists."""
    go = tmp_path / "go"

    def arm() -> Path:
        monkeypatch.setenv("LAKELOG_PAUSE_AT", f"{PAUSE_AT}:{go}")
        return go

    yield arm
    go.touch()  # never leave a thread waiting


def _while_paused(
    t: lakelog.Table, arm: Callable[[], Path], operation: str, run: Callable[[], Any]
) -> tuple[Any, list[str]]:
    """Run ``run`` in a thread up to its paused commit; check its lease and that a
    forced vacuum keeps its files; let it commit. Returns its result and its files."""
    out: dict[str, Any] = {}
    go = arm()

    def target() -> None:
        try:
            out["result"] = run()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            out["error"] = e

    worker = threading.Thread(target=target)
    worker.start()
    try:
        _wait_for(lambda: Path(f"{go}.paused").exists() or not worker.is_alive())
        assert "error" not in out, out
        lease = _only_lease(t)
        assert lease.operation == operation and lease.live(time.time() * 1000)
        pending = _files_of(t, lease.lease_id)
        assert pending
        report = t.vacuum(older_than=ZERO, force=True, dry_run=False)
        assert report.files_leased == len(pending) and report.files == ()
        assert all(t.storage.exists(p) for p in pending)
    finally:
        go.touch()
        worker.join(timeout=300)
    if "error" in out:
        raise out["error"]
    assert read_leases(t.storage) == []
    return out["result"], pending


def _small_files(backend: Any) -> lakelog.Table:
    t = _table(backend)
    for i in range(3):
        t.append(_rows(10 * (i + 1), 4))
    return t


def test_compaction_holds_a_lease_over_its_outputs(
    local_backend: Any, paused: Callable[[], Path]
) -> None:
    t = _small_files(local_backend)
    before = _ids(t)
    report, pending = _while_paused(t, paused, "COMPACT", lambda: t.compact(min_input_files=2))
    assert report.output_file_count == len(pending) > 0
    assert {f.path for f in t.refresh().snapshot().files()} >= set(pending)
    assert _ids(t) == before


def test_clustering_holds_a_lease_over_its_outputs(
    local_backend: Any, paused: Callable[[], Path]
) -> None:
    t = _small_files(local_backend)
    before = _ids(t)
    _, pending = _while_paused(t, paused, "OPTIMIZE", lambda: t.optimize(sort_by=["id"]))
    assert {f.path for f in t.refresh().snapshot().files()} >= set(pending)
    assert _ids(t) == before


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_a_spark_write_holds_a_lease_over_staged_and_published_files(
    spark: Any, local_backend: Any, paused: Callable[[], Path]
) -> None:
    import lakelog.spark as lspark

    t = _table(local_backend)
    df = spark.createDataFrame([(100 + i, "ab"[i % 2]) for i in range(6)], ["id", "p"])
    result, pending = _while_paused(
        t, paused, "SPARK WRITE", lambda: lspark.write(df, t.uri, mode="append")
    )
    staged = [p for p in pending if p.startswith("_spark_staging/")]
    published = [p for p in pending if p not in staged]
    assert result.version == 2 and staged and len(published) >= 2
    assert {f.path for f in t.refresh().snapshot().files()} == set(published) | {
        f.path for f in t.snapshot(1).files()
    }
    assert not any(t.storage.exists(p) for p in staged)  # the staging folder is gone
    assert _ids(t) == list(range(4)) + list(range(100, 106))


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
@pytest.mark.parametrize("how", ["compact", "cluster-task", "cluster-spark-job"])
def test_spark_maintenance_holds_a_lease_over_its_outputs(
    spark: Any, local_backend: Any, paused: Callable[[], Path], how: str
) -> None:
    import lakelog.spark as lspark

    t = _small_files(local_backend)
    before = _ids(t)
    run: dict[str, Callable[[], Any]] = {
        "compact": lambda: lspark.compact(spark, t.uri, min_input_files=2),
        "cluster-task": lambda: lspark.optimize(spark, t.uri, sort_by=["id"]),
        "cluster-spark-job": lambda: lspark.optimize(
            spark, t.uri, sort_by=["id"], max_group_bytes=1
        ),
    }
    operation = "COMPACT" if how == "compact" else "OPTIMIZE"
    report, pending = _while_paused(t, paused, operation, run[how])
    if how == "cluster-spark-job":  # staged by Spark's writer, finalized by tasks
        assert report.extra["large_groups"] > 0
    assert {f.path for f in t.refresh().snapshot().files()} >= set(pending)
    assert _ids(t) == before


# -- dead holders (docs/format.md, "Dead holders") ------------------------------------------


def _record(**over: Any) -> LeaseRecord:
    now = int(time.time() * 1000)
    base: dict[str, Any] = {
        "lease_id": "b" * 32,
        "operation": "VACUUM",
        "host": leases.socket.gethostname(),
        "pid": os.getpid(),
        "created_ms": now,
        "expires_ms": now + 60_000,
        "ttl_ms": 60_000,
        "process": leases.process_identity(),
    }
    return LeaseRecord(**{**base, **over})


def _dead_pid() -> int:
    p = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    return int(p.stdout)


def test_a_lease_names_its_process_and_a_live_holder_is_not_gone(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), schema=SCHEMA)
    with Lease.acquire(t.storage, operation="VACUUM", properties={}) as lease:
        (record,) = read_leases(t.storage)
        assert record.lease_id == lease.lease_id
        assert record.process == leases.process_identity()
        assert not leases.holder_gone(record)
    if Path("/proc/self/ns/pid").exists():
        boot, ns, start = leases.process_identity().split("/")
        assert len(boot) == 36 and ns.isdigit() and start.isdigit()


def test_a_dead_holder_on_this_machine_is_gone() -> None:
    assert leases.holder_gone(_record(pid=_dead_pid()))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_reused_pid_is_told_apart_by_its_start_time() -> None:
    """The pid runs, but not the process that took the lease: it started at another time."""
    boot_ns, _, start = leases.process_identity().rpartition("/")
    assert leases.holder_gone(_record(process=f"{boot_ns}/{int(start) - 1}"))
    assert not leases.holder_gone(_record(process=f"{boot_ns}/{start}"))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_holders_that_cannot_be_judged_count_until_their_lease_expires() -> None:
    """Another pid namespace or boot with this host name, another host, or a lease from
    a lakelog that did not name its process: never taken for dead, though no process
    with that pid runs here."""
    dead = _dead_pid()
    boot, ns, start = leases.process_identity().split("/")
    assert not leases.holder_gone(_record(pid=dead, process=f"{boot}/{int(ns) + 1}/{start}"))
    other_boot = "00000000-0000-0000-0000-000000000000"
    assert not leases.holder_gone(_record(pid=dead, process=f"{other_boot}/{ns}/{start}"))
    assert not leases.holder_gone(_record(pid=dead, host="elsewhere"))
    assert not leases.holder_gone(_record(pid=dead, process=None))
    assert not leases.holder_gone(_record(pid=dead, process=""))  # a system without /proc
    assert not leases.holder_gone(_record(pid=dead, process="garbage"))


def test_a_lease_file_without_process_still_decodes() -> None:
    old = {k: v for k, v in msgspec.structs.asdict(_record()).items() if k != "process"}
    assert msgspec.json.decode(msgspec.json.encode(old), type=LeaseRecord).process is None
