"""A checkpoint that reuses a leaf an expiry deletes meanwhile: forced interleavings of
real processes (``docs/format.md``, "Leaves in expiry and vacuum").

The setup makes the race possible: a writer builds version 8's root on the root of
version 1 (the newest it saw), reusing its one-file leaf; meanwhile roots at 2, 4 and 5
are written and the one at 5 merges that leaf away; an expiry to version 6 then spares
only the leaves of the root at 5 and of the roots at or above 6, so it deletes the
leaf the writer is about to publish in version 8's root.

Either the writer publishes after the expiry's last look at the roots and before it
deletes (the expiry must repair the root it damaged), or after the expiry finished
(the writer must find its leaf gone and rebuild). Without those checks the root at 8
lists a missing leaf, and the next expiry, building its root on that one, leaves the
latest version unreadable once it deletes the older log.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _processes import spawn, wait_paused

import lakelog
from lakelog.log.actions import AddFile, RemoveFile
from lakelog.log.checkpoint import write_checkpoint
from lakelog.log.commits import list_log
from lakelog.log.leaves import CACHE, LEAF_DIR
from lakelog.log.manifests import root_leaves
from lakelog.log.snapshot import load_snapshot
from lakelog.storage import Storage

pytestmark = pytest.mark.processes

SCHEMA = pa.schema([("cid", pa.int64())])
ZERO = dt.timedelta(0)

_CHECKPOINT_LATEST = """
import json, sys
from lakelog.log.checkpoint import write_checkpoint
from lakelog.log.snapshot import load_snapshot
from lakelog.storage import Storage
snap = load_snapshot(Storage(sys.argv[1], json.loads(sys.argv[2]) or None))
print(snap.version, flush=True)
write_checkpoint(snap, leaf_files=8)
"""

_EXPIRE = """
import datetime as dt, json, sys, lakelog
t = lakelog.open_table(sys.argv[1], storage_options=json.loads(sys.argv[2]) or None)
r = t.expire_snapshots(older_than=dt.timedelta(0), retain_last=3)
print(r.oldest_version, flush=True)
"""


def _start(script: str, place: Any, pause: str, gate: Path) -> subprocess.Popen[str]:
    opts = json.dumps(place.storage_options)
    return spawn(script, place.uri, opts, LAKELOG_PAUSE_AT=f"{pause}:{gate}")


def _finish(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out


def _add(i: int) -> AddFile:
    return AddFile(path=f"f{i:03d}.parquet", size_bytes=100, num_rows=1)


def _whole(storage: Storage, oldest: int) -> None:
    on_disk = {f"{LEAF_DIR}/{n}" for n in storage.list_names(LEAF_DIR)}
    retained = [m for m in list_log(storage).manifests if m >= oldest]
    for m, leaves in root_leaves(storage, retained).items():
        assert set(leaves) <= on_disk, f"the root of version {m} lists a deleted leaf"


def _writer_reusing_a_merged_leaf(
    place: Any, tmp_path: Path, **env: str
) -> tuple[Storage, subprocess.Popen[str], Path, str]:
    """Versions 1..8 (one file each) and the root of 1 (leaf [f001]); a writer paused at
    ``checkpoint:before-root`` with version 8's root planned on the root of 1 ([f001]
    reused; ``env``: more of its environment); then the roots of 2, 4 and 5, the last
    merging four small leaves, [f001] among them. Returns the storage, the writer, its
    gate and the path of that leaf."""
    opts = place.storage_options or None
    props = {"lakelog.manifest.leaf_files": 8, "lakelog.manifest_interval": 1000}
    t = lakelog.create_table(place.uri, SCHEMA, properties=props, storage_options=opts)
    storage = Storage(place.uri, opts)
    for i in range(1, 9):
        t.commit([_add(i)], operation="WRITE", kind="append")
    write_checkpoint(load_snapshot(storage, 1), leaf_files=8)
    gate_w = tmp_path / "writer"
    writer = spawn(
        _CHECKPOINT_LATEST,
        place.uri,
        json.dumps(place.storage_options),
        LAKELOG_PAUSE_AT=f"checkpoint:before-root:{gate_w}",
        **env,
    )
    wait_paused(gate_w, writer)
    for v in (2, 4, 5):
        write_checkpoint(load_snapshot(storage, v), leaf_files=8)
    (leaf_1,) = root_leaves(storage, [1])[1]
    return storage, writer, gate_w, leaf_1


@pytest.fixture(params=["local", "s3"])
def place(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{request.param}_backend")


@pytest.mark.parametrize("writer_publishes", ["between-listing-and-delete", "after-expiry"])
def test_a_root_reusing_a_leaf_an_expiry_deletes_is_repaired(
    place: Any, tmp_path: Path, writer_publishes: str
) -> None:
    opts = place.storage_options or None
    storage, writer, gate_w, leaf_1 = _writer_reusing_a_merged_leaf(place, tmp_path)
    assert leaf_1 not in root_leaves(storage, [5])[5]

    gate_e = tmp_path / "expiry"
    if writer_publishes == "between-listing-and-delete":
        expiry = _start(_EXPIRE, place, "expire:before-leaves", gate_e)
        wait_paused(gate_e, expiry)  # the leaves to delete are chosen, none deleted yet
        gate_w.touch()
        _finish(writer)  # the root of 8 is published (and checked) before the delete
        gate_e.touch()
        assert _finish(expiry).split() == ["6"]
    else:
        expiry = _start(_EXPIRE, place, "never", gate_e)
        assert _finish(expiry).split() == ["6"]
        gate_w.touch()
        _finish(writer)  # publishes the root of 8 after the leaf is gone
    assert not storage.exists(leaf_1)  # the race happened: the expiry deleted the leaf

    _whole(storage, 6)
    for v in range(6, 10):  # 9: the expiry's commit
        CACHE.clear()
        want = {f"f{i:03d}.parquet" for i in range(1, min(v, 8) + 1)}
        assert set(load_snapshot(storage, v).paths()) == want, v
    expected = {f"f{i:03d}.parquet" for i in range(1, 9)}
    # the next expiry builds its root on the newest one, then deletes the older log
    t = lakelog.open_table(place.uri, storage_options=opts)
    t.commit([_add(9)], operation="WRITE", kind="append")
    report = t.expire_snapshots(older_than=ZERO, retain_last=1)
    _whole(storage, report.oldest_version)
    CACHE.clear()
    assert set(
        lakelog.open_table(place.uri, storage_options=opts).snapshot().paths()
    ) == expected | {"f009.parquet"}


def test_a_root_left_listing_a_deleted_leaf_is_not_built_on(place: Any, tmp_path: Path) -> None:
    """The writer publishes the root of 8 after the expiry deleted its reused leaf and is
    killed before its check (``checkpoint:after-root``): the root stays damaged. Readers
    resolve around it; the next expiry's root at its oldest version, which would build
    on it, builds on an older root instead (it used to fail with ManifestLeafError:
    CI saw the unrepaired window of a live writer do the same), and the latest version
    stays whole once the older log is gone."""
    opts = place.storage_options or None
    storage, writer, gate_w, leaf_1 = _writer_reusing_a_merged_leaf(
        place, tmp_path, LAKELOG_CRASH_AT="checkpoint:after-root"
    )
    expiry = _start(_EXPIRE, place, "never", tmp_path / "expiry")
    assert _finish(expiry).split() == ["6"]
    gate_w.touch()
    writer.communicate(timeout=120)
    assert writer.returncode == -9  # killed right after publishing, before its check
    assert leaf_1 in root_leaves(storage, [8])[8] and not storage.exists(leaf_1)

    for v in range(6, 10):  # readers skip the damaged root
        CACHE.clear()
        want = {f"f{i:03d}.parquet" for i in range(1, min(v, 8) + 1)}
        assert set(load_snapshot(storage, v).paths()) == want, v
    t = lakelog.open_table(place.uri, storage_options=opts)
    # a rewrite of f001, whose entry is in the deleted leaf: the next root must find it
    gone = RemoveFile(path="f001.parquet", deletion_ms=0, size_bytes=100)
    t.commit([gone, _add(9)], operation="WRITE", kind="rewrite")
    CACHE.clear()
    report = t.expire_snapshots(older_than=ZERO, retain_last=1)
    assert report.oldest_version == 10
    _whole(storage, report.oldest_version)
    CACHE.clear()
    expected = {f"f{i:03d}.parquet" for i in range(2, 10)}
    assert set(lakelog.open_table(place.uri, storage_options=opts).snapshot().paths()) == expected
