"""expire_snapshots: what expires, what is deleted, what stays readable; crash
safety with real SIGKILLs; concurrent writers; a randomized sequence of
appends, compactions, expiries and vacuums (Hypothesis)."""

from __future__ import annotations

import datetime as dt
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from _cleanup_helpers import (
    ZERO,
    Model,
    assert_killed,
    check_table,
    ids,
    make_table,
    referenced_by_any,
    rewrite,
    rewrite_actions,
    rows,
    run_child,
    write_adds,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakelog
from lakelog.log.actions import ExpireVersions
from lakelog.log.commits import list_log
from lakelog.log.manifests import read_manifest_header
from lakelog.log.snapshot import load_snapshot, oldest_readable_version, version_as_of


@pytest.fixture(params=["local", "s3"])
def place(request: pytest.FixtureRequest) -> Any:
    """Local disk and the S3 endpoint of the test session."""
    return request.getfixturevalue(f"{request.param}_backend")


def _history(uri: str, opts: Any = None, *, appends: int = 6) -> tuple[lakelog.Table, Model]:
    t = make_table(uri, opts, partition_by=("p",), properties={"lakelog.manifest_interval": 4})
    model = Model(t)
    for i in range(appends):
        model.append(10 * i, p="ab"[i % 2])
    return t, model


def test_compaction_then_expiry(place: Any) -> None:
    t, model = _history(place.uri, place.storage_options)
    small = {f.path for f in t.snapshot().files()}
    compacted = rewrite(t)
    assert compacted is not None
    model.record()
    model.append(100, p="a")
    model.append(110, p="b")
    latest = t.version
    before = referenced_by_any(t, range(0, latest + 1))

    report = t.expire_snapshots(older_than=ZERO, retain_last=2)
    model.record()

    assert report.oldest_version == latest - 1 == t.snapshot().oldest_version
    assert report.versions_expired == latest - 1
    assert report.expire_commit_version == latest + 1 == t.version
    # the old small files are gone, and only they
    assert set(report.data_files) == small
    assert not any(t.storage.exists(p) for p in small)
    retained = referenced_by_any(t, range(report.oldest_version, t.version + 1))
    assert all(t.storage.exists(p) for p in retained)
    assert set(report.data_files) == before - retained
    assert report.data_bytes > 0
    # the log below the oldest version is gone; a manifest keeps it readable
    listing = list_log(t.storage)
    assert listing.commits[0] == report.oldest_version
    assert min(listing.manifests) == report.oldest_version
    header = read_manifest_header(t.storage, report.oldest_version)
    assert header is not None
    assert header.num_files == t.snapshot(report.oldest_version).num_files
    assert check_table(t, model) == report.oldest_version
    # expired versions: a typed error naming the oldest readable version
    for v in (0, 3, latest - 2):
        with pytest.raises(lakelog.VersionExpiredError) as info:
            t.snapshot(v)
        assert info.value.oldest_version == report.oldest_version
        assert str(report.oldest_version) in str(info.value)
        assert isinstance(info.value, lakelog.LakelogError)
    with pytest.raises(lakelog.VersionExpiredError):
        t.snapshot(as_of=dt.datetime(2001, 1, 1, tzinfo=dt.timezone.utc))
    # the current snapshot reads everything
    assert (
        ids(lakelog.open_table(place.uri, storage_options=place.storage_options).snapshot())
        == (model.versions[t.version])
    )


def test_removed_but_retained_files_stay(local_backend: Any) -> None:
    t, model = _history(local_backend.uri)
    small = {f.path for f in t.snapshot().files()}
    pre = t.version
    rewrite(t)
    model.record()
    model.append(200)
    # the pre-compaction version is retained, so its removed files stay
    report = t.expire_snapshots(older_than=ZERO, retain_last=3)
    model.record()
    assert report.oldest_version == pre
    assert all(t.storage.exists(p) for p in small)
    assert not set(report.data_files) & small
    check_table(t, model)
    # once it expires too, they go
    report = t.expire_snapshots(older_than=ZERO, retain_last=2)
    model.record()
    assert report.oldest_version > pre
    assert set(report.data_files) == small
    assert not any(t.storage.exists(p) for p in small)
    check_table(t, model)


def test_a_file_added_again_after_the_oldest_version_stays(local_backend: Any) -> None:
    """A removed file that a later commit adds back (a restore) is retained."""
    t, model = _history(local_backend.uri)
    old = t.snapshot().files()
    rewrite(t)
    model.record()
    model.append(300)
    restored = old[0]
    t.commit([restored.to_add()], operation="RESTORE", kind="append")
    model.record()
    rewrite(t)  # removed again: only the retained restore version references it
    model.record()
    report = t.expire_snapshots(older_than=ZERO, retain_last=3)
    model.record()
    assert report.oldest_version == t.version - 3
    assert restored.path not in report.data_files
    assert set(report.data_files) == {f.path for f in old[1:]}
    assert t.storage.exists(restored.path)
    check_table(t, model)


def test_dry_run_changes_nothing_and_agrees(local_backend: Any) -> None:
    t, model = _history(local_backend.uri)
    rewrite(t)
    model.record()
    root = Path(t.storage.root)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    dry = t.expire_snapshots(older_than=ZERO, retain_last=1, dry_run=True)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    assert dry.dry_run and dry.expire_commit_version is None
    assert t.snapshot().oldest_version == 0
    check_table(t, model)
    real = t.expire_snapshots(older_than=ZERO, retain_last=1)
    assert (real.oldest_version, real.data_files, real.log_files, real.data_bytes) == (
        dry.oldest_version,
        dry.data_files,
        dry.log_files,
        dry.data_bytes,
    )


def test_age_and_count_both_must_allow_expiry(local_backend: Any) -> None:
    t, model = _history(local_backend.uri)
    # defaults: 7 days and 10 versions; nothing here is that old
    report = t.expire_snapshots()
    assert report.versions_expired == 0 and report.expire_commit_version is None
    assert report.data_files == () and report.log_files == ()
    # old enough by count, not by age
    assert t.expire_snapshots(older_than=dt.timedelta(hours=1), retain_last=1).versions_expired == 0
    # by age: versions committed after the cutoff stay, even beyond retain_last
    time.sleep(0.6)
    first_young = model.append(500)
    model.append(510)
    ts = {h.version: h.timestamp_ms for h in t.history()}
    mid_s = (ts[first_young - 1] + ts[first_young]) / 2000
    older = dt.timedelta(seconds=time.time() - mid_s)
    report = t.expire_snapshots(older_than=older, retain_last=1)
    model.record()
    assert report.oldest_version == first_young
    check_table(t, model)
    assert t.history()[-1].version == report.oldest_version


def test_rerun_is_a_no_op(local_backend: Any) -> None:
    t, model = _history(local_backend.uri)
    rewrite(t)
    model.record()
    first = t.expire_snapshots(older_than=ZERO, retain_last=1)
    model.record()
    version = t.version
    again = t.expire_snapshots(older_than=ZERO, retain_last=3)
    assert again.versions_expired == 0 and again.expire_commit_version is None
    assert again.data_files == () and again.log_files == ()
    assert t.refresh().version == version
    assert first.num_data_files > 0
    check_table(t, model)


def test_invalid_arguments(local_backend: Any) -> None:
    t, _ = _history(local_backend.uri, appends=1)
    for kwargs in (
        {"retain_last": 0},
        {"retain_last": -1},
        {"retain_last": True},
        {"older_than": dt.timedelta(seconds=-1)},
        {"older_than": 3600},
    ):
        with pytest.raises(lakelog.InvalidArgumentError):
            t.expire_snapshots(**kwargs)


def test_expiry_never_conflicts_with_appends_or_rewrites(local_backend: Any) -> None:
    t, model = _history(local_backend.uri)
    stale = t.snapshot()
    other = lakelog.open_table(local_backend.uri)
    model.append(300)
    rewrite(other)
    # an expiry prepared on the stale snapshot rebases over both
    r = t.commit(
        [ExpireVersions(oldest_version=2)],
        operation="EXPIRE SNAPSHOTS",
        kind="append",
        read_snapshot=stale,
    )
    assert r.attempts == 2 and r.version == stale.version + 3
    # an append and a rewrite prepared before an expiry both land after it
    stale = other.snapshot()
    adds = write_adds(other, rows(400))
    swap = rewrite_actions(other, stale)
    t.expire_snapshots(older_than=ZERO, retain_last=3)
    landed = other.commit(adds, operation="APPEND", kind="append", read_snapshot=stale)
    assert landed.attempts == 2
    landed = other.commit(swap, operation="COMPACT", kind="rewrite", read_snapshot=stale)
    assert landed.attempts == 2  # one lost race: read the expiry and the append, land
    model = Model(other)
    assert sorted(model.versions[other.version]) == sorted(
        [*range(0, 60, 10), *range(1, 60, 10), *range(2, 60, 10), 300, 301, 302, 400, 401, 402]
    )
    check_table(other, model)


def test_stale_writer_below_the_oldest_version_commits_at_the_latest(
    local_backend: Any,
) -> None:
    """A writer whose base was expired meanwhile never lands in the gap: an append
    goes on from the latest version (same outcome as running after the expiry)."""
    t, model = _history(local_backend.uri)
    stale = lakelog.open_table(local_backend.uri)  # caches the current version
    for i in range(4):
        model.append(600 + 10 * i)
    t.expire_snapshots(older_than=ZERO, retain_last=1)
    model.record()
    assert not t.storage.exists(f"_lakelog/{stale.version + 1:020d}.json")
    result = stale.append(rows(900))
    assert result.version == t.refresh().version  # at the latest, not in the gap
    assert not t.storage.exists(f"_lakelog/{stale.version + 1:020d}.json")
    model.record()
    assert 900 in ids(t.snapshot())
    check_table(t, model)
    oldest = t.snapshot().oldest_version
    assert list_log(t.storage).commits == tuple(range(oldest, t.version + 1))


def test_stale_overwrite_below_the_oldest_version_fails(local_backend: Any) -> None:
    """An overwrite cannot check the winners that were expired: it fails, and the
    log below the oldest version stays empty."""
    t, model = _history(local_backend.uri)
    stale = t.snapshot()
    for i in range(4):
        model.append(600 + 10 * i)
    t.expire_snapshots(older_than=ZERO, retain_last=1)
    now = 0
    removes = [f.to_remove(deletion_ms=now) for f in stale.files()]
    with pytest.raises(lakelog.CommitConflictError, match="expire_snapshots"):
        t.commit(removes, operation="DELETE", kind="delete", read_snapshot=stale)
    assert not t.storage.exists(f"_lakelog/{stale.version + 1:020d}.json")
    model.record()
    check_table(t, model)


_APPENDER = """
import sys, lakelog, pyarrow as pa
uri, n = sys.argv[1], int(sys.argv[2])
t = lakelog.open_table(uri)
retries = 0
for i in range(n):
    data = pa.table({"id": [1000 + i], "p": ["a"]})
    while True:
        try:
            t.append(data)
            break
        except lakelog.CommitConflictError:
            retries += 1
            t.refresh()
print("retries", retries)
"""


@pytest.mark.processes
def test_expiry_beside_a_writer_process(local_backend: Any) -> None:
    t, _ = _history(local_backend.uri)
    child = subprocess.Popen(
        [sys.executable, "-c", _APPENDER, local_backend.uri, "25"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    runs = 0
    while child.poll() is None or runs < 2:
        t.expire_snapshots(older_than=ZERO, retain_last=3)
        rewrite(t)
        runs += 1
        time.sleep(0.02)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0 and out.startswith("retries"), err
    got = ids(t.snapshot())
    assert [i for i in got if i >= 1000] == list(range(1000, 1025))
    oldest = t.snapshot().oldest_version
    for v in range(oldest, t.version + 1):
        snap = t.snapshot(v)
        assert all(t.storage.exists(f.path) for f in snap.files())
        snap.to_arrow()


def test_table_compact_then_expiry(local_backend: Any) -> None:
    t, model = _history(local_backend.uri, appends=8)
    small = {f.path for f in t.snapshot().files()}
    report = t.compact()
    model.record()
    t.expire_snapshots(older_than=ZERO, retain_last=1)
    model.record()
    gone = [p for p in small if not t.storage.exists(p)]
    live = {f.path for f in t.snapshot().files()}
    assert set(gone) == small - live and gone, report
    check_table(t, model)


# -- crashes (real SIGKILL at precise points, and at a random moment) ---------------

_EXPIRE = """
import sys, datetime as dt, lakelog
import lakelog.maintenance.cleanup.expire as ex
ex._DELETE_BATCH = int(sys.argv[3])
t = lakelog.open_table(sys.argv[1])
open(sys.argv[4], "w").close()
r = t.expire_snapshots(older_than=dt.timedelta(0), retain_last=int(sys.argv[2]))
print(r.summary())
"""


def _crash_table(uri: str, opts: Any = None) -> tuple[lakelog.Table, Model]:
    t, model = _history(uri, opts, appends=6)
    rewrite(t)
    model.record()
    for i in range(3):
        model.append(700 + 10 * i, p="ab"[i % 2])
    return t, model


@pytest.mark.processes
@pytest.mark.parametrize(
    "point",
    [
        "expire:after-manifest",
        "expire:after-commit",
        "expire:mid-data",
        "expire:after-data",
        "expire:mid-log",
    ],
)
def test_killed_expiry_leaves_a_readable_table_and_a_rerun_finishes(
    local_backend: Any, tmp_path: Path, point: str
) -> None:
    t, model = _crash_table(local_backend.uri)
    small = {f.path for f in t.snapshot(6).files()}
    proc = run_child(_EXPIRE, t.uri, "2", "2", str(tmp_path / "ready"), crash_at=point)
    assert_killed(proc)
    model.record()
    oldest = check_table(t, model)
    assert oldest == (0 if point == "expire:after-manifest" else t.version - 2)
    if point in ("expire:after-manifest", "expire:after-commit"):
        assert all(t.storage.exists(p) for p in small)
    if point == "expire:mid-data":
        assert 0 < sum(t.storage.exists(p) for p in small) < len(small)

    report = lakelog.open_table(t.uri).expire_snapshots(older_than=ZERO, retain_last=2)
    model.record()
    final = check_table(t, model)
    assert final == report.oldest_version >= t.version - 3
    assert not any(t.storage.exists(p) for p in small)
    listing = list_log(t.storage)
    assert listing.commits[0] == final and min(listing.manifests) == final


_EXPIRE_S3 = """
import sys, json, datetime as dt, lakelog
import lakelog.maintenance.cleanup.expire as ex
ex._DELETE_BATCH = 2
t = lakelog.open_table(sys.argv[1], storage_options=json.loads(sys.argv[2]))
t.expire_snapshots(older_than=dt.timedelta(0), retain_last=2)
"""


@pytest.mark.processes
def test_killed_expiry_on_s3(s3_backend: Any) -> None:
    opts = s3_backend.storage_options
    t, model = _crash_table(s3_backend.uri, opts)
    small = {f.path for f in t.snapshot(6).files()}
    assert_killed(run_child(_EXPIRE_S3, t.uri, json.dumps(opts), crash_at="expire:mid-data"))
    model.record()
    assert check_table(t, model) == t.version - 2
    proc = run_child(_EXPIRE_S3, t.uri, json.dumps(opts))
    assert proc.returncode == 0, proc.stderr
    model.record()
    final = check_table(t, model)
    assert not any(t.storage.exists(p) for p in small)
    assert list_log(t.storage).commits[0] == final


@pytest.mark.processes
def test_killed_at_a_random_moment(local_backend: Any, tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    t, model = _crash_table(local_backend.uri)
    for round_ in range(3):
        for i in range(8):
            model.append(1000 * (round_ + 1) + 10 * i, p="ab"[i % 2])
            if i % 4 == 3:
                rewrite(t)
                model.record()
        ready = tmp_path / f"ready-{round_}"
        argv = [sys.executable, "-c", _EXPIRE, t.uri, "2", "1", str(ready)]
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while not ready.exists() and child.poll() is None:
            time.sleep(0.001)
        time.sleep(rng.uniform(0, 0.2))
        child.kill()
        child.communicate(timeout=60)
        model.record()
        try:
            check_table(t, model)  # whatever the moment
        except AssertionError as e:
            raise AssertionError(f"random kill, seed {seed}: {e}") from e
    lakelog.open_table(t.uri).expire_snapshots(older_than=ZERO, retain_last=2)
    model.record()
    oldest = check_table(t, model)
    assert list_log(t.storage).commits[0] == oldest, seed
    retained = referenced_by_any(t, range(oldest, t.version + 1))
    on_disk = {
        str(p.relative_to(t.storage.root))
        for p in Path(t.storage.root).rglob("*.parquet")
        if "_lakelog" not in p.parts
    }
    assert on_disk == retained, seed


# -- reading expired versions ----------------------------------------------------------


def test_expired_versions_raise_while_old_commits_remain(local_backend: Any) -> None:
    """Between the expiry commit and the log deletion (a killed run), the old
    commits are still there; asking for them must still raise."""
    t, model = _history(local_backend.uri)
    t.commit([ExpireVersions(oldest_version=4)], operation="EXPIRE SNAPSHOTS", kind="append")
    model.record()
    assert oldest_readable_version(t.storage) == 4
    for v in range(4):
        with pytest.raises(lakelog.VersionExpiredError) as info:
            load_snapshot(t.storage, v)
        assert info.value.oldest_version == 4
    assert ids(load_snapshot(t.storage, 4)) == model.versions[4]
    first_ts = t.history()[-1].timestamp_ms
    with pytest.raises(lakelog.VersionExpiredError):
        version_as_of(t.storage, first_ts)
    v4 = next(h for h in t.history() if h.version == 4)
    assert version_as_of(t.storage, v4.timestamp_ms) == 4


def test_version_not_found_stays_distinct(local_backend: Any) -> None:
    t, _ = _history(local_backend.uri, appends=2)
    with pytest.raises(lakelog.VersionNotFoundError) as info:
        t.snapshot(99)
    assert not isinstance(info.value, lakelog.VersionExpiredError)
    with pytest.raises(lakelog.VersionNotFoundError) as info2:
        t.snapshot(as_of=dt.datetime(2001, 1, 1, tzinfo=dt.timezone.utc))
    assert not isinstance(info2.value, lakelog.VersionExpiredError)


# -- property: no operation ever deletes a file a retained version references ----------

_OPS = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4)),
    st.tuples(st.just("compact"), st.just(0)),
    st.tuples(st.just("overwrite"), st.integers(1, 3)),
    st.tuples(st.just("expire"), st.integers(1, 4)),
    st.tuples(st.just("vacuum"), st.just(0)),
    st.tuples(st.just("orphan"), st.just(0)),
    st.tuples(st.just("restore"), st.just(0)),
)


def _restore(t: lakelog.Table) -> bool:
    """Add back the oldest file a retained version removed (if still live on disk)."""
    snap = t.snapshot()
    live = {f.path for f in snap.files()}
    for v in range(snap.oldest_version, snap.version):
        for f in t.snapshot(v).files():
            if f.path not in live:
                t.commit([f.to_add()], operation="RESTORE", kind="append")
                return True
    return False


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(ops=st.lists(_OPS, min_size=3, max_size=10))
def test_random_sequences_never_delete_a_retained_file(ops: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory(prefix="lakelog-expire-") as tmp:
        t = make_table(f"{tmp}/t", partition_by=("p",), properties={"lakelog.manifest_interval": 3})
        model = Model(t)
        next_id = 0
        for op, arg in ops:
            if op == "append":
                for _ in range(arg):
                    model.append(next_id, 2, p="ab"[next_id % 2])
                    next_id += 2
            elif op == "compact":
                if rewrite(t) is not None:
                    model.record()
            elif op == "overwrite":
                t.overwrite(rows(next_id, arg, "a"))
                next_id += arg
                model.record()
            elif op == "expire":
                t.expire_snapshots(older_than=ZERO, retain_last=arg)
                model.record()
            elif op == "vacuum":
                t.vacuum(older_than=ZERO, force=True, dry_run=False)
            elif op == "restore":
                if _restore(t):
                    model.record()
            else:
                Path(t.storage.full(f"p=a/orphan-{next_id}.parquet")).parent.mkdir(
                    parents=True, exist_ok=True
                )
                Path(t.storage.full(f"p=a/orphan-{next_id}.parquet")).write_bytes(b"x")
                next_id += 1
            check_table(t, model)
