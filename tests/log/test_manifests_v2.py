"""Version-2 manifests: a root of shared, immutable leaves, written incrementally.

What a checkpoint writes (only what changed), when leaves merge, which leaves a plan
reads, the round trip of typed entries, a version-1 reader meeting a version-2 table
(the real code of an older lakelog, in its own process), ``lakelog upgrade``, damage
(a leaf missing), crashes at the checkpoint's failpoints, leaves in expiry and vacuum,
and processes racing appends, rewrites and expiries on one table.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
from lakelog.log.actions import AddFile, DataFile, FileStats
from lakelog.log.commits import list_log
from lakelog.log.leaves import CACHE, LEAF_DIR
from lakelog.log.manifests import Root, read_manifest, read_manifest_header
from lakelog.log.snapshot import load_snapshot
from lakelog.scan import readable
from lakelog.storage import Storage

REPO = str(Path(__file__).resolve().parents[2])
OLD_COMMIT = "51de7e9"
"""The last commit before format version 2: its lakelog knows version 1 only."""

SCHEMA = pa.schema([("day", pa.date32()), ("cid", pa.int64()), ("name", pa.string())])
COW = {"lakelog.deletion_vectors": "false"}
"""Without deletion vectors, a root declares the version of its layout and content (with
them, 5: new tables have them unless created with this)."""
DAYS = [dt.date(2026, 11, d) for d in range(1, 11)]


def _add(day: dt.date, i: int, lo: int = 0) -> AddFile:
    return AddFile(
        path=f"day={day}/f{i:05d}.parquet",
        size_bytes=100 + i,
        num_rows=10,
        partition={"day": day.isoformat()},
        stats=FileStats(min={"cid": lo}, max={"cid": lo + 9}, null_count={"cid": 0}),
    )


def _table(uri: str, *, leaf_files: int = 4, interval: int = 1) -> lakelog.Table:
    props = {
        "lakelog.manifest.leaf_files": leaf_files,
        "lakelog.manifest_interval": interval,
        **COW,
    }
    return lakelog.create_table(uri, SCHEMA, partition_by=["day"], properties=props)


def _root(t: lakelog.Table, version: int | None = None) -> Root:
    got = read_manifest(t.storage, t.version if version is None else version)
    assert isinstance(got, Root)
    return got


def _leaves_on_disk(t: lakelog.Table) -> set[str]:
    return {f"{LEAF_DIR}/{n}" for n in t.storage.list_names(LEAF_DIR)}


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": REPO}
    env.pop("LAKELOG_CRASH_AT", None)
    env.update(extra)
    return env


def test_a_checkpoint_writes_only_what_changed(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    t.commit(
        [_add(DAYS[0], i) for i in range(4)] + [_add(DAYS[1], i) for i in range(4, 8)],
        operation="APPEND",
        kind="append",
    )
    first = _root(t)
    assert len(first) == 2 and first.header.num_files == 8
    assert first.header.format_version == 2
    t.commit([_add(DAYS[2], 8)], operation="APPEND", kind="append")
    second = _root(t)
    assert set(first.leaves) < set(second.leaves) and len(second) == 3  # reused + one new
    gone = t.snapshot().files([("day", "=", DAYS[0])])[0]
    before = _leaves_on_disk(t)
    t.commit([gone.to_remove(deletion_ms=0)], operation="DELETE", kind="delete")
    third = _root(t)
    assert _leaves_on_disk(t) == before  # a remove rewrites no leaf
    assert third.leaves == second.leaves
    i = third.leaves.index(first.leaves[0])
    assert len(third.removed(i)) == 1 and third.header.num_files == 8
    assert gone.path not in {f.path for f in load_snapshot(t.storage).files()}


def test_fragmented_and_small_leaves_are_merged(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"), leaf_files=8)
    t.commit([_add(DAYS[0], i) for i in range(8)], operation="APPEND", kind="append")
    full = _root(t).leaves[0]
    victims = t.snapshot().files()[:2]  # a quarter: not yet fragmented
    t.commit([f.to_remove(deletion_ms=0) for f in victims], operation="DELETE", kind="delete")
    assert full in _root(t).leaves
    third = t.snapshot().files()[0]  # more than a quarter removed: rewritten
    t.commit([third.to_remove(deletion_ms=0)], operation="DELETE", kind="delete")
    root = _root(t)
    assert full not in root.leaves and root.header.num_files == 5
    assert all(len(root.removed(i)) == 0 for i in range(len(root)))
    # four small leaves of one size tier (one file each) merge into one
    for k in range(4):
        t.commit([_add(DAYS[1], 100 + k)], operation="APPEND", kind="append")
        if k < 3:
            assert len(_root(t)) == 2 + k
    root = _root(t)
    assert sorted(root.entries.column("live_files").to_pylist()) == [4, 5]
    CACHE.clear()
    assert load_snapshot(t.storage).num_files == 9


def test_a_one_partition_plan_reads_only_its_leaf(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"), leaf_files=8, interval=10)
    t.commit(
        [_add(d, 8 * k + i, lo=100 * k) for k, d in enumerate(DAYS) for i in range(8)],
        operation="APPEND",
        kind="append",
    )
    for _ in range(9):
        t.commit([], operation="NOTHING", kind="append")
    assert len(_root(t)) == 10  # one leaf per day
    CACHE.clear()
    snap = load_snapshot(Storage(t.uri))
    assert len(snap.files([("day", "=", DAYS[3])])) == 8
    assert CACHE.nbytes and len(CACHE._items) == 1  # the root and one leaf were read
    assert len(snap.files("cid between 400 and 405")) == 8  # by the leaves' cid ranges
    assert len(CACHE._items) == 2
    assert snap.num_files == 80 and len(CACHE._items) == 2  # counts from the root


def test_typed_entries_round_trip(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            ("k", pa.int32()),
            ("s", pa.string()),
            ("b", pa.bool_()),
            ("i8", pa.int8()),
            ("f32", pa.float32()),
            ("ts", pa.timestamp("ns", tz="UTC")),
            ("t", pa.time64("us")),
            ("d", pa.date32()),
            ("dec", pa.decimal128(9, 2)),
            ("txt", pa.string()),
            ("lst", pa.list_(pa.int64())),
        ]
    )
    uri = str(tmp_path / "t")
    props = {"lakelog.manifest.leaf_files": 2, "lakelog.manifest_interval": 1, **COW}
    t = lakelog.create_table(uri, schema, partition_by=["k", "s", "b"], properties=props)
    stats = FileStats(
        min={
            "i8": -3,
            "f32": 0.10000000149011612,
            "ts": 1_700_000_000_123_456_789,
            "t": 5,
            "d": 19000,
            "dec": "-1.50",
            "txt": 'a"\\é',
        },
        max={
            "i8": 7,
            "f32": 2.5,
            "ts": 1_700_000_000_999_999_999,
            "t": 86_399_999_999,
            "d": 19999,
            "dec": "12.25",
            "txt": "zz",
        },
        null_count={"i8": 0, "f32": 1, "txt": 2, "lst": 3},
    )
    adds = [
        AddFile(
            path="a.parquet",
            size_bytes=1,
            num_rows=5,
            partition={"k": "7", "s": "x/y", "b": "true"},
            stats=stats,
            tags={"t": "1"},
        ),
        AddFile(
            path="b.parquet", size_bytes=2, num_rows=0, partition={"k": None, "s": None, "b": None}
        ),
        AddFile(
            path="c.parquet",
            size_bytes=3,
            num_rows=4,  # not the canonical form: kept
            partition={"k": "007", "s": "", "b": "false"},
            modification_ms=12,
        ),
    ]
    t.commit(adds, operation="APPEND", kind="append")
    assert read_manifest_header(t.storage, 1).format_version == 2  # type: ignore[union-attr]
    CACHE.clear()
    got = {f.path: f for f in load_snapshot(Storage(uri)).files()}
    assert got == {a.path: DataFile.from_add(a) for a in adds}
    snap = load_snapshot(Storage(uri))
    assert sorted(f.path for f in snap.files("k = 7")) == ["a.parquet", "c.parquet"]
    assert [f.path for f in snap.files("k is null")] == ["b.parquet"]
    after = "ts > '2023-11-14 22:13:21+00:00'"  # after a's nanosecond maximum
    assert sorted(f.path for f in snap.files(after)) == ["b.parquet", "c.parquet"]


# -- an older reader, the upgrade command ---------------------------------------------


@pytest.fixture(scope="module")
def old_lakelog(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The lakelog package of the last version-1 commit, exported from git."""
    out = tmp_path_factory.mktemp("old")
    archive = out / "old.tar"
    subprocess.run(
        ["git", "-C", REPO, "archive", "-o", str(archive), OLD_COMMIT, "lakelog"], check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(out, filter="data")
    return str(out)


_OLD = """
import json, sys, lakelog, pyarrow as pa
from lakelog.log.snapshot import load_snapshot
from lakelog.storage import Storage
assert lakelog.log.actions.FORMAT_VERSION == 1
uri, what = sys.argv[1], sys.argv[2]
if what == "create":
    t = lakelog.create_table(uri, pa.schema([("id", pa.int64())]))
    for i in range(12):
        t.append(pa.table({"id": [i]}))
    print(t.version)
else:
    try:
        snap = load_snapshot(Storage(uri), None if what == "latest" else int(what))
        print(json.dumps({"rows": sorted(snap.to_arrow().column("id").to_pylist())}))
    except lakelog.LakelogError as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))
"""


def _old(old_lakelog: str, uri: str, what: str) -> Any:
    proc = subprocess.run(
        [sys.executable, "-c", _OLD, uri, what],
        env=_env(PYTHONPATH=old_lakelog),
        cwd=old_lakelog,  # not this checkout: "-c" puts the working directory first
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lakelog.cli", *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_an_old_reader_refuses_an_upgraded_table(old_lakelog: str, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    assert _old(old_lakelog, uri, "create") == 12  # version-1 manifests at 0 and 10
    t = lakelog.open_table(uri)
    t.append(pa.table({"id": [12]}))  # version 13, plain: a version-1 reader reads it
    assert _old(old_lakelog, uri, "latest") == {"rows": list(range(13))}
    proc = _cli("upgrade", uri)
    assert proc.returncode == 0, proc.stderr
    # version 14 declares format version 3 (a metadata commit), then gets a root
    assert "declared format version 3 (was 1)" in proc.stdout
    assert "version 14: wrote a format version 2 manifest" in proc.stdout
    assert "in place of no manifest" in proc.stdout
    again = _cli("upgrade", uri, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["written"] is False
    refused = _old(old_lakelog, uri, "latest")
    assert refused["error"] == "UnsupportedFormatError"
    assert "expected manifest format version <= 1, found 2" in refused["message"]
    assert "upgrade lakelog" in refused["message"]
    assert _old(old_lakelog, uri, "11") == {"rows": list(range(11))}  # from version 1
    for v in (5, 11, 13):  # this version reads every version, from either layout
        CACHE.clear()
        ids = readable(load_snapshot(Storage(uri), v)).to_arrow().column("id").to_pylist()
        assert sorted(ids) == list(range(v))


def test_upgrade_replaces_a_version_1_manifest_at_the_latest_version(tmp_path: Path) -> None:
    from lakelog.log.format import writing_manifests

    uri = str(tmp_path / "t")
    with writing_manifests(1):
        t = _table(uri, interval=2)
        for k in range(4):
            t.commit([_add(DAYS[k], k)], operation="APPEND", kind="append")
    assert read_manifest_header(t.storage, 4).format_version == 1  # type: ignore[union-attr]
    report = t.upgrade()
    assert report.written and report.previous_format == 1 and report.files == 4
    assert read_manifest_header(t.storage, 4).format_version == 2  # type: ignore[union-attr]
    assert {f.path for f in load_snapshot(Storage(uri)).files()} == {
        _add(DAYS[k], k).path for k in range(4)
    }
    assert not t.upgrade().written


def test_upgrade_of_no_table_fails_with_one_line(tmp_path: Path) -> None:
    proc = _cli("upgrade", str(tmp_path / "nothing"))
    assert proc.returncode == 1
    assert proc.stderr.startswith("lakelog: error: expected a lakelog table at")
    assert "Traceback" not in proc.stderr


# -- damage and crashes ------------------------------------------------------------------


def test_a_missing_leaf_makes_its_manifest_unusable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t = _table(str(tmp_path / "t"), interval=2)
    for k in range(4):
        t.commit([_add(DAYS[k], 2 * k), _add(DAYS[k], 2 * k + 1)], operation="A", kind="append")
    want = {f.path for f in t.snapshot().files()}
    warm = load_snapshot(Storage(t.uri))  # its root is read, its leaves not yet
    newest = _root(t, 4)
    only_newest = set(newest.leaves) - set(_root(t, 2).leaves)
    t.storage.delete(sorted(only_newest))
    CACHE.clear()
    assert {f.path for f in load_snapshot(Storage(t.uri)).files()} == want  # cold
    with caplog.at_level(logging.WARNING, logger="lakelog"):
        assert {f.path for f in warm.files()} == want  # found after the root was read
        assert warm.num_files == 4 * 2
    assert "manifest of version 4" in caplog.text and "unusable" in caplog.text


_APPEND_VIRTUAL = """
import json, sys, datetime as dt, lakelog
from lakelog.log.actions import AddFile
uri, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = lakelog.open_table(uri)
for i in range(first, first + n):
    day = dt.date(2026, 11, 1 + i % 10)
    add = AddFile(path=f"day={day}/f{i:05d}.parquet", size_bytes=1, num_rows=1,
                  partition={"day": day.isoformat()})
    r = t.commit([add], operation="APPEND", kind="append")
    print(json.dumps([add.path, r.version]), flush=True)
"""


@pytest.mark.processes
def test_a_checkpoint_killed_before_its_root_leaves_orphans_vacuum_removes(
    tmp_path: Path,
) -> None:
    t = _table(str(tmp_path / "t"), interval=5)
    proc = subprocess.run(
        [sys.executable, "-c", _APPEND_VIRTUAL, t.uri, "0", "10"],
        env=_env(LAKELOG_CRASH_AT="checkpoint:before-root"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr  # SIGKILL at version 5, leaves written
    landed = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [v for _, v in landed] == [1, 2, 3, 4]  # version 5 landed, unacknowledged
    assert list_log(t.storage).manifests == (0,)
    orphans = _leaves_on_disk(t)
    assert orphans and all("/00000000000000000005-" in p for p in orphans)
    snap = load_snapshot(Storage(t.uri))
    assert snap.version == 5 and snap.num_files == 5
    kept = t.vacuum(older_than=dt.timedelta(0), dry_run=False, force=True)
    assert not set(kept.files) & orphans  # newer than every root: maybe in progress
    t.refresh()
    for i in range(10, 15):  # the next checkpoint, at version 10
        t.commit([_add(DAYS[0], i)], operation="APPEND", kind="append")
    report = t.vacuum(older_than=dt.timedelta(0), dry_run=False, force=True)
    assert set(report.files) == orphans
    CACHE.clear()
    assert load_snapshot(Storage(t.uri)).num_files == 10


def test_expiry_deletes_the_leaves_only_expired_manifests_list(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"), leaf_files=2, interval=1)
    for k in range(12):
        live = t.snapshot().files()
        drop = [live[0].to_remove(deletion_ms=0)] if k % 3 == 2 else []
        t.commit([*drop, _add(DAYS[k % 10], k)], operation="A", kind="overwrite")
    before = _leaves_on_disk(t)
    roots = {m: set(_root(t, m).leaves) for m in list_log(t.storage).manifests}
    report = t.expire_snapshots(older_than=dt.timedelta(0), retain_last=3)
    oldest = report.oldest_version
    retained = {p for m in list_log(t.storage).manifests for p in _root(t, m).leaves}
    after = _leaves_on_disk(t)
    assert retained <= after  # every retained root's leaves stay
    deleted = before - after
    assert deleted and set(report.log_files) >= deleted and not deleted & retained
    below = max(m for m in roots if m < oldest)  # its leaves are spared, for vacuum
    assert after - retained == roots[below] - retained
    for v in range(oldest + 1, t.refresh().version + 1):  # each root agrees with the one before
        CACHE.clear()
        assert load_snapshot(Storage(t.uri), v).num_files == len(
            load_snapshot(Storage(t.uri), v, avoid=frozenset({v})).paths()
        )


# -- racing processes ----------------------------------------------------------------------

_REWRITER = """
import json, random, sys, lakelog
from lakelog.log.actions import AddFile
uri, n = sys.argv[1], int(sys.argv[2])
t = lakelog.open_table(uri)
done = 0
while done < n:
    live = t.refresh().snapshot().files()
    if not live:
        continue
    old = random.choice(live)
    new = AddFile(path=old.path.replace(".parquet", f"-r{done}.parquet"), size_bytes=1,
                  num_rows=1, partition=old.partition)
    try:
        r = t.commit([old.to_remove(deletion_ms=0, data_change=False), new],
                     operation="REWRITE", kind="rewrite")
    except lakelog.CommitConflictError:
        continue
    print(json.dumps([old.path, new.path, r.version]), flush=True)
    done += 1
"""

_EXPIRER = """
import datetime as dt, os, sys, lakelog
uri, stop = sys.argv[1], sys.argv[2]
t = lakelog.open_table(uri)
while not os.path.exists(stop):
    t.expire_snapshots(older_than=dt.timedelta(0), retain_last=2)
"""


@pytest.mark.processes
def test_appends_rewrites_and_expiries_racing_keep_every_manifest_whole(
    tmp_path: Path,
) -> None:
    """Three appender processes, one rewriter and an expiry loop (retain_last=2) race on
    a table with a manifest every 2 versions and 3-file leaves: checkpoints build on
    roots other processes wrote, reuse and merge leaves, while expiries write roots and
    delete leaves. Afterwards every acknowledged file is live unless a rewrite replaced
    it, and every retained manifest is whole and agrees with the one before it."""
    t = _table(str(tmp_path / "t"), leaf_files=3, interval=2)
    stop = tmp_path / "stop"
    expirer = subprocess.Popen(
        [sys.executable, "-c", _EXPIRER, t.uri, str(stop)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _APPEND_VIRTUAL, t.uri, str(1000 * (k + 1)), "25"],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(3)
    ]
    workers.append(
        subprocess.Popen(
            [sys.executable, "-c", _REWRITER, t.uri, "15"],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    )
    outputs = []
    try:
        for p in workers:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
            outputs.append([json.loads(line) for line in out.splitlines()])
    finally:
        stop.touch()
        for p in workers:
            if p.poll() is None:
                p.kill()
        _, e_err = expirer.communicate(timeout=120)
    assert expirer.returncode == 0, e_err
    added = {path for out in outputs[:3] for path, _ in out}
    rewrites = outputs[3]
    assert len(added) == 75 and len(rewrites) == 15
    live = added | {new for _, new, _ in rewrites}
    live -= {old for old, _, _ in rewrites}
    CACHE.clear()
    latest = load_snapshot(Storage(t.uri))
    assert set(latest.paths()) == live
    storage = Storage(t.uri)
    manifests = [m for m in list_log(storage).manifests if m >= latest.oldest_version]
    on_disk = _leaves_on_disk(t)
    for i, m in enumerate(manifests):
        root = _root(t, m)
        assert set(root.leaves) <= on_disk, m  # no retained root lost a leaf
        if i == 0:
            continue  # the oldest: nothing older to compare with
        CACHE.clear()
        via_root = load_snapshot(storage, m).paths()
        CACHE.clear()
        without = load_snapshot(storage, m, avoid=frozenset({m})).paths()
        assert sorted(via_root) == sorted(without), m


_EXPIRE_BATCHES_OF_ONE = """
import sys, datetime as dt, lakelog
import lakelog.maintenance.cleanup.expire as ex
ex._DELETE_BATCH = 1
lakelog.open_table(sys.argv[1]).expire_snapshots(older_than=dt.timedelta(0), retain_last=2)
"""


@pytest.mark.processes
def test_an_expiry_killed_among_the_leaves_is_finished_by_a_rerun(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"), leaf_files=2, interval=1)
    for k in range(10):
        live = t.snapshot().files()
        drop = [live[0].to_remove(deletion_ms=0)] if k % 2 else []
        t.commit([*drop, _add(DAYS[k], k)], operation="A", kind="overwrite")
    want = {v: set(t.snapshot(v).paths()) for v in range(8, 11)}
    proc = subprocess.run(
        [sys.executable, "-c", _EXPIRE_BATCHES_OF_ONE, t.uri],
        env=_env(LAKELOG_CRASH_AT="expire:mid-leaves"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr
    assert list_log(t.storage).manifests[0] < 9  # killed before the manifests below 9 went
    for v, paths in want.items():
        if v >= 9:
            CACHE.clear()
            assert set(load_snapshot(Storage(t.uri), v).paths()) == paths
    report = lakelog.open_table(t.uri).expire_snapshots(  # same oldest: the expiry
        older_than=dt.timedelta(0),
        retain_last=3,  # committed version 11
    )
    assert report.oldest_version == 9
    listing = list_log(t.storage)
    assert listing.manifests[0] == 9 and listing.commits[0] == 9
    retained = {p for m in listing.manifests for p in _root(t, m).leaves}
    assert retained <= _leaves_on_disk(t)
    for v in (9, 10):
        CACHE.clear()
        assert set(load_snapshot(Storage(t.uri), v).paths()) == want[v]


def test_manifests_on_s3(s3_backend: Any) -> None:
    """Roots put-if-absent (a conditional PUT), leaves read concurrently, expiry and
    vacuum of leaves, on the moto S3 server."""
    opts = s3_backend.storage_options
    props = {"lakelog.manifest.leaf_files": 2, "lakelog.manifest_interval": 1}
    t = lakelog.create_table(
        s3_backend.uri, SCHEMA, partition_by=["day"], properties=props, storage_options=opts
    )
    for k in range(6):
        live = t.snapshot().files()
        drop = [live[0].to_remove(deletion_ms=0)] if k % 3 == 2 else []
        t.commit(
            [*drop, _add(DAYS[k], 2 * k), _add(DAYS[k], 2 * k + 1)], operation="A", kind="overwrite"
        )
    want = set(t.snapshot().paths())
    storage = Storage(s3_backend.uri, opts)
    root = read_manifest(storage, t.version)
    assert isinstance(root, Root) and len(root) > 1
    CACHE.clear()
    assert set(load_snapshot(storage).paths()) == want
    # a second root at the same version loses and leaves nothing behind
    from lakelog.log.manifests import write_root

    assert write_root(storage, root) is False
    t.expire_snapshots(older_than=dt.timedelta(0), retain_last=2)
    listing = list_log(storage)
    on_disk = {f"{LEAF_DIR}/{n}" for n in storage.list_names(LEAF_DIR)}
    for m in listing.manifests:
        got = read_manifest(storage, m)
        assert isinstance(got, Root) and set(got.leaves) <= on_disk
    CACHE.clear()
    assert set(load_snapshot(storage).paths()) == want


@pytest.mark.parametrize("width", [1, 2, 3, 7])
def test_leaf_bounds_become_dicts_of_the_known_values(width: int) -> None:
    """A leaf's typed bound columns become one dict per file holding exactly its non-null
    values, for any number of columns (the dict builder is generated per width)."""
    from lakelog.log.leaves import _dicts

    names = [f"c{i}" for i in range(width)]
    values = [
        [None if (row + col) % 3 == 0 else row * 10 + col for row in range(5)]
        for col in range(width)
    ]
    fields = {n: pa.array(v, pa.int64()) for n, v in zip(names, values, strict=True)}
    want = [
        {n: v[row] for n, v in zip(names, values, strict=True) if v[row] is not None}
        for row in range(5)
    ]
    assert _dicts(fields, 5) == want
    assert _dicts({}, 3) == [{}, {}, {}]


def test_pending_plans_in_a_root_are_decoded_only_when_asked(tmp_path: Path) -> None:
    """A root keeps the pending plans in its key-value header only (the stored Arrow
    schema's copy has none: a large plan lists every file it claims); a reader opening
    the table decodes them only when asked, applying the commits since the root, and gets
    what a replay of the whole log gives."""
    import pyarrow.parquet as pq

    from lakelog.log.actions import ClaimGroup, PlanClaim, PlanRelease, RemoveFile
    from lakelog.log.manifests import manifest_path

    uri = str(tmp_path / "t")
    t = _table(uri, interval=4)
    adds = [_add(DAYS[i % 3], i) for i in range(6)]
    t.commit(adds, operation="APPEND", kind="append")  # 1
    groups = {"g1": adds[0:2], "g2": adds[2:4], "g3": adds[4:6]}
    claim = PlanClaim(
        plan_id="p" * 32,
        operation="COMPACT",
        owner="h:1",
        lease_id="l" * 32,
        claimed_ms=1,
        groups=[ClaimGroup(group_id=g, paths=[a.path for a in fs]) for g, fs in groups.items()],
    )
    t.commit([claim], operation="CLAIM", kind="append")  # 2
    for i in (6, 7):  # 3, 4: a root at 4 holds the plan
        t.commit([_add(DAYS[0], i)], operation="APPEND", kind="append")
    root = pq.ParquetFile(os.path.join(uri, manifest_path(4)))
    kv = json.loads(root.metadata.metadata[b"lakelog"])
    assert kv["format_version"] == 3 and set(kv["plans"]["p" * 32]["groups"]) == {"g1", "g2", "g3"}
    assert json.loads(root.schema_arrow.metadata[b"lakelog"])["plans"] == {}
    t.commit([PlanRelease(plan_id="p" * 32, group_ids=["g1"])], operation="X", kind="append")
    gone = RemoveFile(path=adds[2].path, deletion_ms=1, partition=dict(adds[2].partition))
    t.commit([gone], operation="DELETE", kind="overwrite")  # 6: drops g2

    fresh = lakelog.open_table(uri)
    state = fresh.snapshot()._state
    assert state.plans_json is not None and len(state.plans_todo) == 2  # not decoded yet
    plans = fresh.snapshot().plans
    assert state.plans_json is None
    assert {g: sorted(p) for g, p in plans["p" * 32].groups.items()} == {
        "g3": sorted(a.path for a in adds[4:6])
    }
    t.commit([_add(DAYS[1], 8)], operation="APPEND", kind="append")  # 7
    t.commit([_add(DAYS[1], 9)], operation="APPEND", kind="append")  # 8: a root again
    assert json.loads(
        pq.ParquetFile(os.path.join(uri, manifest_path(8))).metadata.metadata[b"lakelog"]
    )["plans"]["p" * 32]["groups"] == {"g3": [a.path for a in adds[4:6]]}
    for v in range(9):  # every version, from roots or replay, as a full replay says
        assert lakelog.open_table(uri).snapshot(v).plans == _replayed_plans(t, v)


def _replayed_plans(t: lakelog.Table, version: int) -> dict[str, Any]:
    from lakelog.log.commits import read_commit
    from lakelog.log.plans import apply_plan_actions

    plans: dict[str, Any] = {}
    for v in range(version + 1):
        apply_plan_actions(plans, read_commit(t.storage, v))
    return plans


def test_a_long_lived_reader_decodes_deferred_plans_after_a_bounded_number_of_commits(
    tmp_path: Path,
) -> None:
    """A reader that keeps advancing its snapshot past many rewrites while a plan is
    pending holds at most a bounded number of undecoded commits, and the plans it then
    reports are a full replay's."""
    from lakelog.log.actions import ClaimGroup, PlanClaim, RemoveFile
    from lakelog.log.files import MAX_DEFERRED_PLAN_COMMITS as bound

    rounds = bound + 5  # past the bound: the deferred commits must have been decoded
    uri = str(tmp_path / "t")
    t = _table(uri, interval=3)
    adds = [_add(DAYS[0], i) for i in range(80)]
    t.commit(adds, operation="APPEND", kind="append")
    claim = PlanClaim(
        plan_id="q" * 32,
        operation="COMPACT",
        owner="h:1",
        lease_id="l" * 32,
        claimed_ms=1,
        groups=[ClaimGroup(group_id=f"g{i}", paths=[adds[i].path]) for i in range(80)],
    )
    t.commit([claim], operation="CLAIM", kind="append")
    t.commit([_add(DAYS[1], 99)], operation="APPEND", kind="append")  # 3: a root
    reader = lakelog.open_table(uri)
    assert reader.snapshot()._state.plans_json is not None
    for i in range(rounds):
        gone = RemoveFile(path=adds[i].path, deletion_ms=1, partition=dict(adds[i].partition))
        t.commit([gone], operation="DELETE", kind="overwrite", read_snapshot=t.refresh().snapshot())
        reader.refresh()
        assert len(reader.snapshot()._state.plans_todo) < bound
    assert reader.snapshot().plans == _replayed_plans(t, t.version)
    assert len(reader.snapshot().plans["q" * 32].groups) == 80 - rounds


@pytest.mark.slow
def test_a_large_commit_gets_a_manifest_at_its_version(tmp_path: Path) -> None:
    """A commit file of LARGE_COMMIT_BYTES or more is followed by a manifest at its own
    version (cold opens would replay it until the next one); a small one is not."""
    from lakelog.log.commits import commit_path
    from lakelog.log.manifests import read_hint
    from lakelog.transaction import LARGE_COMMIT_BYTES

    t = _table(str(tmp_path / "t"), interval=100)
    t.commit([_add(DAYS[0], 0)], operation="A", kind="append")  # version 1: small
    assert list_log(t.storage).manifests == (0,)  # the creation's
    adds = [_add(DAYS[i % 10], i) for i in range(1, 9000)]
    v = t.commit(adds, operation="A", kind="append").version  # version 2: large
    assert len(t.storage.read_bytes(commit_path(v))) >= LARGE_COMMIT_BYTES
    assert list_log(t.storage).manifests == (0, v) and read_hint(t.storage) == v
    CACHE.clear()
    assert load_snapshot(Storage(t.uri)).num_files == 9000
