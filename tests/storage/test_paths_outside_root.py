"""A log entry whose path leaves the table root is damage, and cleanup never deletes
outside the root.

Commits are crafted by hand (the JSON a faulty tool or anyone with write access to
``_lakelog/`` could put there), naming a real Parquet file beside the table folder:
every reader and writer refuses them with ``CorruptLogError``, and neither a rewrite,
an expiry nor a vacuum touches that file. Below the log's checks, the one deletion
primitive refuses such paths too, and nothing lakelog writes (commits, manifests,
leaves, adopted files) can carry one.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog.errors import CorruptLogError, InvalidArgumentError
from lakelog.log import commits
from lakelog.log import leaves as leaves_module
from lakelog.log.actions import AddFile, RemoveFile
from lakelog.log.commits import commit_path, list_log
from lakelog.log.files import files_from_adds
from lakelog.log.leaves import Leaf, entries_from_files
from lakelog.log.manifests import ManifestHeader, encode_manifest
from lakelog.log.snapshot import load_snapshot
from lakelog.maintenance.cleanup import logscan
from lakelog.paths import bad_data_path, bad_data_paths, leaves_root

SCHEMA = pa.schema([("id", pa.int64())])
ZERO = dt.timedelta(0)
VICTIM_IDS = [666, 667]


def _victim(tmp_path: Path) -> Path:
    """A Parquet file of the table's schema beside the table folder (not in it)."""
    path = tmp_path / "victim.parquet"
    pq.write_table(pa.table({"id": VICTIM_IDS}, schema=SCHEMA), path)
    return path


def _table(tmp_path: Path) -> lakelog.Table:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(pa.table({"id": [0, 1]}, schema=SCHEMA))
    t.append(pa.table({"id": [2, 3]}, schema=SCHEMA))
    return t


def _spelled(how: str, victim: Path) -> str:
    return {
        "parent": "../victim.parquet",
        "absolute": str(victim),
        "file-uri": f"file://{victim}",
    }[how]


SPELLINGS = ["parent", "absolute", "file-uri"]


def _put_commit(t: lakelog.Table, actions: list[dict[str, Any]]) -> int:
    """Write the next commit file by hand, as JSON (docs/format.md, "Commits")."""
    v = list_log(t.storage).commits[-1] + 1
    header = {
        "version": v,
        "timestamp_ms": int(time.time() * 1000),
        "operation": "APPEND",
        "read_version": v - 1,
        "txn_id": uuid.uuid4().hex,
    }
    data = json.dumps({"header": header, "actions": actions}).encode()
    t.storage.put_if_absent(commit_path(v), data)
    return v


def _add(path: str, victim: Path) -> dict[str, Any]:
    return {
        "type": "add",
        "path": path,
        "size_bytes": victim.stat().st_size,
        "num_rows": len(VICTIM_IDS),
    }


def _remove(path: str) -> dict[str, Any]:
    return {"type": "remove", "path": path, "deletion_ms": int(time.time() * 1000)}


def _refused(run: Callable[[], object]) -> bool:
    """Whether ``run`` refused the log with CorruptLogError (any other outcome: False)."""
    try:
        run()
    except CorruptLogError:
        return True
    except Exception:  # noqa: BLE001 - the test reports what did not refuse
        return False
    return False


@pytest.mark.parametrize("how", SPELLINGS)
def test_every_reader_and_writer_refuses_a_commit_naming_a_file_outside_the_root(
    tmp_path: Path, how: str
) -> None:
    victim = _victim(tmp_path)
    t = _table(tmp_path)
    stale = lakelog.open_table(t.uri)
    v = _put_commit(t, [_add(_spelled(how, victim), victim)])
    readers: dict[str, Callable[[], object]] = {
        "open_table": lambda: lakelog.open_table(t.uri),
        "load_snapshot": lambda: load_snapshot(t.storage),
        "refresh + files": lambda: t.refresh().snapshot().files(),
        "snapshot(v) + to_arrow": lambda: t.snapshot(v).to_arrow(),
        "stale append": lambda: stale.append(pa.table({"id": [9]}, schema=SCHEMA)),
        "vacuum dry run": lambda: stale.vacuum(older_than=ZERO, force=True),
    }
    accepted = [name for name, run in readers.items() if not _refused(run)]
    assert accepted == []
    assert list_log(t.storage).commits[-1] == v  # the stale writer committed nothing
    assert victim.exists()


@pytest.mark.parametrize("how", SPELLINGS)
def test_rewrites_and_cleanup_never_delete_a_file_outside_the_root(
    tmp_path: Path, how: str
) -> None:
    """A rewrite would remove the entry and expiry then delete the file it names."""
    victim = _victim(tmp_path)
    t = _table(tmp_path)
    stale = lakelog.open_table(t.uri)
    path = _spelled(how, victim)
    _put_commit(t, [_add(path, victim)])
    steps: dict[str, Callable[[], object]] = {
        "compact": lambda: stale.compact(min_input_files=2),
        "expire": lambda: stale.expire_snapshots(older_than=ZERO, retain_last=1),
        "vacuum": lambda: stale.vacuum(older_than=ZERO, force=True, dry_run=False),
    }
    accepted = [name for name, run in steps.items() if not _refused(run)]
    _put_commit(t, [_remove(path)])  # as if the rewrite had landed
    accepted += [f"{name} after a remove" for name, run in steps.items() if not _refused(run)]
    assert victim.exists()
    assert accepted == []


def test_expiry_deletes_nothing_outside_the_root_even_past_the_log_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the log says: with the decoders' checks out of the way, the deletion
    primitive itself refuses."""
    monkeypatch.setattr(commits, "_bad_path", lambda actions: None, raising=False)
    monkeypatch.setattr(logscan, "first_bad_data_path", lambda paths: None, raising=False)
    victim = _victim(tmp_path)
    t = _table(tmp_path)
    _put_commit(t, [_add("../victim.parquet", victim)])
    _put_commit(t, [_remove("../victim.parquet")])
    with pytest.raises(InvalidArgumentError, match="nothing was deleted"):
        t.refresh().expire_snapshots(older_than=ZERO, retain_last=1)
    assert victim.exists()


@pytest.mark.parametrize(
    "path", ["../victim.parquet", "a/../../victim.parquet", "/victim.parquet", "", "./", "."]
)
def test_storage_delete_refuses_paths_that_may_leave_the_root(tmp_path: Path, path: str) -> None:
    victim = _victim(tmp_path)
    t = _table(tmp_path)
    t.storage.write_bytes("keep.bin", b"x")
    with pytest.raises(InvalidArgumentError, match="nothing was deleted"):
        t.storage.delete(["keep.bin", path])
    assert victim.exists() and t.storage.exists("keep.bin")  # the batch is refused whole
    assert Path(t.storage.root).is_dir()


@pytest.mark.parametrize("path", ["../victim.parquet", "/tmp/victim.parquet", "_lakelog/x.json"])
def test_nothing_lakelog_writes_can_name_a_file_outside_the_root(tmp_path: Path, path: str) -> None:
    t = _table(tmp_path)
    before = list_log(t.storage).commits
    add = AddFile(path=path, size_bytes=10, num_rows=2)
    for actions in ([add], [RemoveFile(path=path, deletion_ms=1)]):
        with pytest.raises(InvalidArgumentError, match="root-relative"):
            t.commit(actions, operation="APPEND", kind="append")
    assert list_log(t.storage).commits == before
    files = files_from_adds([add])
    with pytest.raises(CorruptLogError, match="outside the table"):
        Leaf(entries_from_files(files, SCHEMA, ())).encode()
    header = ManifestHeader(version=9, timestamp_ms=0, metadata=t.snapshot().metadata, num_files=1)
    with pytest.raises(CorruptLogError, match="outside the table"):
        encode_manifest(header, files)


def test_add_files_refuses_a_file_outside_the_root_by_the_same_rule(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    t = _table(tmp_path)
    for given in ("../victim.parquet", str(victim), f"file://{victim}", "_lakelog", "."):
        with pytest.raises(InvalidArgumentError, match="under the table root"):
            t.add_files([given])
    assert t.refresh().version == 2 and victim.exists()


def test_the_rule() -> None:
    inside = [
        "p=a/part-00000.parquet",
        "./p=a/x.parquet",  # other spellings of a file inside stay readable
        "p=a//x.parquet",
        "a..b.parquet",
        "p=a/..hidden.parquet",
        ".hidden/x.parquet",
        "_col=1/x.parquet",
        "p=a/_lakelog/x.parquet",
        "_lakelogs/x.parquet",
        "._lakelog/x.parquet",
    ]
    outside = [
        "",
        ".",
        "./",
        "/x.parquet",
        "../x.parquet",
        "a/../../x.parquet",
        "a/..",
        "file:///x.parquet",
        "s3://other/x.parquet",
        "p=a/s3://other/x",
    ]
    in_log = ["_lakelog", "_lakelog/00000000000000000001.json", "./_lakelog/x"]
    assert [p for p in inside if bad_data_path(p)] == []
    assert [p for p in outside if not (leaves_root(p) and bad_data_path(p))] == []
    assert [p for p in in_log if leaves_root(p) or not bad_data_path(p)] == []
    column = pa.array([*inside, *outside, *in_log, None], pa.string())
    assert bad_data_paths(column) == [*outside, *in_log, ""]
    assert bad_data_paths(pa.chunked_array([pa.array(inside, pa.string())])) == []


@pytest.mark.parametrize("how", SPELLINGS)
def test_a_manifest_leaf_naming_a_file_outside_the_root_is_never_read(
    tmp_path: Path, how: str
) -> None:
    """A leaf rewritten by hand to name a file outside the table is damaged like any
    other leaf: the version resolves without its manifest (from the commits), so no
    reader returns the outside file's rows and no cleanup touches it."""
    victim = _victim(tmp_path)
    t = lakelog.create_table(
        str(tmp_path / "t"), SCHEMA, properties={"lakelog.manifest_interval": "2"}
    )
    for i in range(3):
        t.append(pa.table({"id": [i]}, schema=SCHEMA))
    leaves = sorted((tmp_path / "t" / "_lakelog" / "_leaves").glob("*.parquet"))
    assert leaves, "expected the table to have manifest leaves"
    for leaf in leaves:
        table = pq.read_table(leaf)
        paths = table.column("path").to_pylist()
        paths[0] = _spelled(how, victim)
        i = table.schema.get_field_index("path")
        table = table.set_column(i, table.schema.field(i), pa.array(paths, pa.string()))
        pq.write_table(table, leaf)
    leaves_module.CACHE.clear()
    snap = lakelog.open_table(str(tmp_path / "t")).snapshot()
    assert all(not f.path.endswith("victim.parquet") for f in snap.files())
    assert sorted(snap.to_arrow().column("id").to_pylist()) == [0, 1, 2]
    lakelog.open_table(str(tmp_path / "t")).vacuum(older_than=ZERO, force=True, dry_run=False)
    assert victim.exists()


def test_the_buffer_scan_finds_every_bad_path() -> None:
    """The fast scan over a path column (and its slices) never misses what the exact
    rule refuses."""
    good = ["day=1/a.parquet", "b..c/d.parquet", "x/.hidden", "a//b"]
    bad = ["../v", "/abs", "s3://b/k", "file:///t", "", "_lakelog/1.json", "a/../../v", "./.."]
    for p in bad:
        column = pa.array([*good, p, *good])
        assert bad_data_paths(column) == [p]
        assert bad_data_paths(column.slice(len(good))) == [p]
        assert bad_data_paths(pa.chunked_array([good, [p]])) == [p]
    assert bad_data_paths(pa.array(good)) == []
    assert bad_data_paths(pa.array([*good, None])) == [""]
