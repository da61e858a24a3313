"""Large pending plans live in a plans file next to the leaves (format version 4): the
root names it, readers read it only when they need the plans, an unchanged plan is
shared between roots, expiry and vacuum treat it as a leaf, and a version-3 reader
refuses such a root clearly (docs/format.md, "Pending plans in a file")."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog.log import checkpoint
from lakelog.log.actions import AddFile, ClaimGroup, FileStats, PlanClaim, PlanRelease
from lakelog.log.commits import read_commit
from lakelog.log.leaves import LEAF_DIR
from lakelog.log.manifests import manifest_path, read_manifest_header
from lakelog.log.plans import apply_plan_actions
from lakelog.log.snapshot import advance

REPO = str(Path(__file__).resolve().parents[2])
V3_COMMIT = "372c0b8"  # the last commit of format version 3
SCHEMA = pa.schema([("day", pa.string()), ("id", pa.int64())])
COW = {"lakelog.deletion_vectors": "false"}
"""Without deletion vectors, a root declares the version of its content (with them, 5:
new tables have them unless created with this)."""
PLAN = "a" * 32


def _add(i: int) -> AddFile:
    return AddFile(
        path=f"day=d{i % 3}/f{i:04d}.parquet",
        size_bytes=100,
        num_rows=1,
        partition={"day": f"d{i % 3}"},
        stats=FileStats(min={"id": i}, max={"id": i}, null_count={"id": 0}),
    )


def _claim(adds: list[AddFile]) -> PlanClaim:
    """Plan ``PLAN`` claiming each of ``adds`` as a group of its own."""
    return PlanClaim(
        plan_id=PLAN,
        operation="COMPACT",
        owner="h:1",
        lease_id="b" * 32,
        claimed_ms=1,
        groups=[ClaimGroup(group_id=f"g{i}", paths=[a.path]) for i, a in enumerate(adds)],
    )


def _table(uri: str) -> tuple[lakelog.Table, list[AddFile]]:
    t = lakelog.create_table(
        uri,
        SCHEMA,
        partition_by=["day"],
        # a plan of 30 groups goes to a plans file
        properties={
            "lakelog.manifest_interval": 3,
            "lakelog.manifest.plans_inline_bytes": 64,
            **COW,
        },
    )
    adds = [_add(i) for i in range(30)]
    t.commit(adds, operation="APPEND", kind="append")  # 1
    t.commit([_claim(adds)], operation="CLAIM", kind="append")  # 2
    t.commit([_add(100)], operation="APPEND", kind="append")  # 3: a root
    return t, adds


def _replayed(t: lakelog.Table, version: int) -> dict[str, Any]:
    plans: dict[str, Any] = {}
    for v in range(version + 1):
        apply_plan_actions(plans, read_commit(t.storage, v))
    return plans


def _plans_files(uri: str) -> set[str]:
    return {f"{LEAF_DIR}/{n}" for n in os.listdir(Path(uri) / LEAF_DIR) if n.endswith(".json")}


def test_a_large_plan_goes_to_a_plans_file_read_only_when_asked(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t, _ = _table(uri)
    header = read_manifest_header(t.storage, 3)
    assert header is not None and header.format_version == 4 and header.plans_file
    assert bytes(header.plans) == b"{}" and _plans_files(uri) == {header.plans_file}
    kv = json.loads(
        pq.ParquetFile(os.path.join(uri, manifest_path(3))).metadata.metadata[b"lakelog"]
    )
    assert kv["plans"] == {} and kv["plans_file"] == header.plans_file
    on_disk = json.loads((Path(uri) / header.plans_file).read_bytes())
    assert set(on_disk[PLAN]["groups"]) == {f"g{i}" for i in range(30)}

    fresh = lakelog.open_table(uri)
    state = fresh.snapshot()._state
    assert state.plans_load is not None and state.plans_json is None  # not read yet
    assert fresh.snapshot().num_files == 31
    assert fresh.snapshot().plans == _replayed(t, 3)
    assert state.plans_load is None and state.plans_file == header.plans_file


def test_roots_share_an_unchanged_plans_file_and_write_a_new_one_when_it_changes(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "t")
    t, _ = _table(uri)
    first = read_manifest_header(t.storage, 3)
    assert first is not None and first.plans_file
    for i in (101, 102, 103):  # appends only: 6 is a root with the same plans file
        t.commit([_add(i)], operation="APPEND", kind="append")
    again = read_manifest_header(t.storage, 6)
    assert again is not None and again.plans_file == first.plans_file
    assert _plans_files(uri) == {first.plans_file}
    # from a fresh reader too (the plans decoded or not)
    reader = lakelog.open_table(uri)
    reader.snapshot().plans  # noqa: B018 - decodes them
    reader.commit([_add(104)], operation="APPEND", kind="append")
    t.refresh()
    for i in (105,):
        t.commit([_add(i)], operation="APPEND", kind="append")
    t.commit([PlanRelease(plan_id=PLAN, group_ids=["g0", "g1"])], operation="X", kind="append")
    changed = read_manifest_header(t.storage, 9)
    assert changed is not None and changed.plans_file not in (None, first.plans_file)
    assert _plans_files(uri) == {first.plans_file, changed.plans_file}
    for v in range(10):
        assert lakelog.open_table(uri).snapshot(v).plans == _replayed(t, v)
    assert len(lakelog.open_table(uri).snapshot().plans[PLAN].groups) == 28

    # the plan ends: roots go back to no plans at all; expiry then drops the plans files
    t.commit([PlanRelease(plan_id=PLAN, group_ids=[], done=True)], operation="X", kind="append")
    for i in (106, 107):
        t.commit([_add(i)], operation="APPEND", kind="append")
    last = read_manifest_header(t.storage, 12)
    assert last is not None and last.plans_file is None and last.format_version == 2
    t.expire_snapshots(older_than=dt.timedelta(0), retain_last=1)
    # the newest root below the new oldest version keeps its leaves (a writer may still
    # build on it): its plans file stays for vacuum; the older one is gone
    assert _plans_files(uri) == {changed.plans_file}
    assert lakelog.open_table(uri).snapshot().plans == {}


def test_vacuum_keeps_listed_plans_files_and_removes_orphans(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t, _ = _table(uri)
    listed = read_manifest_header(t.storage, 3)
    assert listed is not None and listed.plans_file
    orphan = Path(uri) / LEAF_DIR / f"{3:020d}-{'c' * 16}.plans.json"  # a lost checkpoint's
    orphan.write_text("{}")
    old = dt.datetime.now().timestamp() - 7200
    for p in (orphan, Path(uri) / listed.plans_file):
        os.utime(p, (old, old))
    report = t.vacuum(older_than=dt.timedelta(hours=1), dry_run=False)
    assert str(orphan.relative_to(uri)) in report.files
    assert _plans_files(uri) == {listed.plans_file}
    assert lakelog.open_table(uri).snapshot().plans == _replayed(t, 3)


_V3_READER = """
import json, sys, lakelog
from lakelog.log.snapshot import load_snapshot
from lakelog.storage import Storage
assert lakelog.log.actions.FORMAT_VERSION == 3
try:
    snap = load_snapshot(Storage(sys.argv[1]))
    print(json.dumps({"rows": snap.num_rows}))
except lakelog.LakelogError as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)}))
"""


@pytest.mark.slow
def test_a_version_3_reader_refuses_a_root_with_a_plans_file_clearly(tmp_path: Path) -> None:
    out = tmp_path / "v3"
    out.mkdir()
    archive = out / "v3.tar"
    subprocess.run(
        ["git", "-C", REPO, "archive", "-o", str(archive), V3_COMMIT, "lakelog"], check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(out, filter="data")
    uri = str(tmp_path / "t")
    env = {**os.environ, "PYTHONPATH": str(out)}

    def read() -> dict[str, object]:
        proc = subprocess.run(
            [sys.executable, "-c", _V3_READER, uri],
            capture_output=True,
            text=True,
            env=env,
            cwd=out,  # not this checkout: "-c" puts the working directory first
        )
        assert proc.returncode == 0, proc.stderr
        got: dict[str, object] = json.loads(proc.stdout)
        return got

    t = lakelog.create_table(uri, SCHEMA, partition_by=["day"], properties=COW)
    t.commit([_add(0)], operation="APPEND", kind="append")
    assert t.snapshot().metadata.format_version == 3  # tables without vectors: still 3
    assert read() == {"rows": 1}
    t2, _ = _table(str(tmp_path / "t2"))
    uri = t2.uri
    refused = read()
    assert refused["error"] == "UnsupportedFormatError"
    assert "found 4" in str(refused["message"]) and "upgrade lakelog" in str(refused["message"])


def test_a_stale_state_names_the_plans_file_of_its_base_root_not_an_expired_one(
    tmp_path: Path,
) -> None:
    """Two writers keep equal plans in different plans files; expiry deletes the older
    file with the roots that listed it. A state that still points at that file
    (unchanged plans, an old base) names the file of the root a new manifest is built
    on, never its own; and a snapshot whose deferred plans file was expired resolves
    its version again."""
    uri = str(tmp_path / "t")
    t = lakelog.create_table(
        uri,
        SCHEMA,
        partition_by=["day"],
        # a plan of 30 groups goes to a plans file
        properties={
            "lakelog.manifest_interval": 3,
            "lakelog.manifest.plans_inline_bytes": 64,
            **COW,
        },
    )
    adds = [_add(i) for i in range(30)]
    t.commit(adds, operation="APPEND", kind="append")  # 1
    t.commit([_claim(adds)], operation="CLAIM", kind="append")  # 2
    w0 = lakelog.open_table(uri)  # its state replays the claim: no plans file of its own
    t.commit([_add(100)], operation="APPEND", kind="append")  # 3: a root with file P
    p = read_manifest_header(t.storage, 3)
    assert p is not None and p.plans_file
    stale = lakelog.open_table(uri).snapshot()  # based on root 3: plans in P, not read
    assert stale._state.plans_file == p.plans_file and stale._state.plans_load is not None
    w0.refresh()
    for i in (101, 102, 103):  # 6: w0's root, whose plans file (same plans) is P'
        w0.commit([_add(i)], operation="APPEND", kind="append")
    p2 = read_manifest_header(t.storage, 6)
    assert p2 is not None and p2.plans_file not in (None, p.plans_file)
    for i in (104, 105, 106):  # 9: reuses P'
        w0.commit([_add(i)], operation="APPEND", kind="append")
    assert read_manifest_header(t.storage, 9).plans_file == p2.plans_file  # type: ignore[union-attr]
    at9 = advance(stale, [read_commit(t.storage, v) for v in range(4, 10)])  # appends only
    assert at9.version == 9 and at9._state.plans_file == p.plans_file
    t.refresh().expire_snapshots(older_than=dt.timedelta(0), retain_last=1)  # oldest 9
    assert not (Path(uri) / p.plans_file).exists()  # only roots 0 and 3 listed P

    header = checkpoint.header_for(
        at9._state, base_plans_file=p2.plans_file, num_files=0, num_rows=0, num_bytes=0
    )
    assert header.plans_file == p2.plans_file and header.format_version == 4
    fresh = lakelog.open_table(uri).snapshot()
    assert at9.plans == fresh.plans == w0.snapshot().plans  # resolved again from the log
    assert len(fresh.plans[PLAN].groups) == 30
    with pytest.raises(lakelog.VersionExpiredError, match="found 3"):
        stale.plans  # noqa: B018 - version 3 itself is gone: said so
