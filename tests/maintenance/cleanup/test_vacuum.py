"""vacuum: orphans go; live, retained, young and foreign files stay; one path
form whatever the spelling; a writer process mid-commit; crashes."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from _cleanup_helpers import (
    REPO,
    ZERO,
    Model,
    age,
    assert_killed,
    check_table,
    ids,
    make_table,
    referenced_by_any,
    rewrite,
    rows,
    run_child,
    write_adds,
)

import lakelog
from lakelog.log.actions import AddFile
from lakelog.maintenance.cleanup.vacuum import normalize_path
from lakelog.storage import Storage

DAY = 24 * 3600.0


def _table(uri: str, opts: Any = None) -> tuple[lakelog.Table, Model]:
    t = make_table(uri, opts, partition_by=("p",))
    model = Model(t)
    for i in range(4):
        model.append(10 * i, p="ab"[i % 2])
    return t, model


def _orphans(t: lakelog.Table, n: int, folder: str = "p=a") -> list[str]:
    """Files no commit references: data written by a writer that died."""
    adds = write_adds(t, rows(5000, n, folder.split("=")[1]))
    extra = [f"{folder}/stray-{uuid.uuid4().hex}.bin" for _ in range(n)]
    for p in extra:
        t.storage.write_bytes(p, b"garbage")
    return [a.path for a in adds] + extra


def test_orphans_go_everything_referenced_stays(backend: Any) -> None:
    t, model = _table(backend.uri, backend.storage_options)
    removed_but_retained = {f.path for f in t.snapshot().files()}
    rewrite(t)
    model.record()
    orphans = _orphans(t, 3) + _orphans(t, 2, "p=b")

    dry = t.vacuum(older_than=ZERO, force=True)  # dry run by default
    assert dry.dry_run and set(dry.files) == set(orphans)
    assert all(t.storage.exists(p) for p in orphans)
    assert dry.bytes == sum(t.storage.fs.size(t.storage.full(p)) for p in orphans)

    report = t.vacuum(older_than=ZERO, force=True, dry_run=False)
    assert set(report.files) == set(orphans) and report.bytes == dry.bytes
    assert not any(t.storage.exists(p) for p in orphans)
    # the compacted-away files are still referenced by retained versions
    assert all(t.storage.exists(p) for p in removed_but_retained)
    assert report.files_referenced == len(referenced_by_any(t, range(0, t.version + 1)))
    assert (report.oldest_version, report.latest_version) == (0, t.version)
    check_table(t, model)
    assert t.vacuum(older_than=ZERO, force=True, dry_run=False).files == ()


def test_young_files_stay_and_the_minimum_age_is_enforced(local_backend: Any) -> None:
    t, _ = _table(local_backend.uri)
    old, young = _orphans(t, 1), _orphans(t, 1)
    for p in old:
        age(t.storage.full(p), 2 * DAY)
    report = t.vacuum(older_than=dt.timedelta(days=1), dry_run=False)
    assert set(report.files) == set(old)
    assert report.files_too_young == len(young)
    assert all(t.storage.exists(p) for p in young)
    # default: 3 days, so nothing here qualifies
    assert t.vacuum().files == ()
    with pytest.raises(lakelog.InvalidArgumentError, match="min_age_seconds"):
        t.vacuum(older_than=dt.timedelta(minutes=59))
    with pytest.raises(lakelog.InvalidArgumentError):
        t.vacuum(older_than=dt.timedelta(seconds=-1), force=True)
    assert set(t.vacuum(older_than=ZERO, force=True).files) == set(young)


@pytest.mark.processes
def test_files_of_expired_versions_left_by_a_cut_short_expiry_go(local_backend: Any) -> None:
    t, model = _table(local_backend.uri)
    small = {f.path for f in t.snapshot().files()}
    rewrite(t)
    model.record()
    # an expiry recorded but killed before deleting anything
    proc = run_child(
        "import sys, datetime as dt, lakelog\n"
        "lakelog.open_table(sys.argv[1]).expire_snapshots(older_than=dt.timedelta(0), "
        "retain_last=1)",
        t.uri,
        crash_at="expire:after-commit",
    )
    assert_killed(proc)
    model.record()
    report = t.vacuum(older_than=ZERO, force=True, dry_run=False)
    assert set(report.files) == small
    check_table(t, model)


def test_nested_tables_and_the_log_are_never_touched(local_backend: Any) -> None:
    t, model = _table(local_backend.uri)
    inner = make_table(t.storage.full("nested/inner"))
    inner.append(rows(0))
    inner_orphan = _orphans(inner, 1)[0]
    delta_file = Path(t.storage.full("other/delta/part-0.parquet"))
    delta_file.parent.mkdir(parents=True)
    delta_file.write_bytes(b"x")
    (delta_file.parent / "_delta_log").mkdir()
    (delta_file.parent / "_delta_log" / "00000000000000000000.json").write_text("{}")
    stray_in_log = Path(t.storage.full("_lakelog/notes.txt"))
    stray_in_log.write_text("kept")
    dead_temp = Path(t.storage.full(f"_lakelog/.{99:020d}.json.{uuid.uuid4().hex}.tmp"))
    dead_temp.write_bytes(b"{")
    live_temp = Path(t.storage.full(f"_lakelog/{98:020d}.manifest.parquet.{uuid.uuid4().hex}.tmp"))
    live_temp.write_bytes(b"P")
    for path in (inner.storage.full(inner_orphan), delta_file, stray_in_log, dead_temp):
        age(path, 2 * DAY)
    orphan = _orphans(t, 1, "p=b")

    report = t.vacuum(older_than=dt.timedelta(days=1), dry_run=False, force=True)
    assert set(report.nested_tables) == {"nested/inner", "other/delta"}
    assert set(report.files) == {f"_lakelog/{dead_temp.name}"}
    assert not dead_temp.exists()
    for kept in (Path(inner.storage.full(inner_orphan)), delta_file, stray_in_log, live_temp):
        assert kept.exists(), kept
    assert ids(inner.snapshot()) == [0, 1, 2]
    assert all(t.storage.exists(p) for p in orphan)  # young
    check_table(t, model)


def test_hidden_files_of_other_tools_stay_lakelog_staging_leftovers_go(
    local_backend: Any,
) -> None:
    t, model = _table(local_backend.uri)
    kept = [
        "_SUCCESS",
        "p=a/.part-0.parquet.crc",
        "p=a/_committed_123",
        "_temporary/0/task/part-0.parquet",
        ".trash/part-9.parquet",
    ]
    gone = [
        "_spark_staging/w1/p=a/part-0.parquet",  # what a killed lakelog Spark job left
        "_spark_staging/w1/_SUCCESS",
        "_q=1/part-0.parquet",  # a partition folder, not hidden
        "p=a/part_1.parquet",
    ]
    for rel in kept + gone:
        path = Path(t.storage.full(rel))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
        age(path, 2 * DAY)

    dry = t.vacuum(older_than=dt.timedelta(days=1))
    assert set(dry.files) == set(gone)
    assert dry.files_hidden == len(kept) and "5 hidden" in dry.summary()
    report = t.vacuum(older_than=dt.timedelta(days=1), dry_run=False)
    assert set(report.files) == set(gone)
    assert all(Path(t.storage.full(rel)).exists() for rel in kept)
    assert not any(Path(t.storage.full(rel)).exists() for rel in gone)
    check_table(t, model)


def test_normalize_path_spellings() -> None:
    s3 = Storage("s3a://bucket/t/", {"anon": True})
    assert s3.uri == "s3://bucket/t"
    for spelled in (
        "p=a/f.parquet",
        "./p=a/f.parquet",
        "p=a//f.parquet",
        "/p=a/f.parquet",
        "s3://bucket/t/p=a/f.parquet",
        "s3a://bucket/t/p=a/f.parquet",
        "S3A://bucket/t//p=a/./f.parquet",
        "s3://bucket/t/p=a/f.parquet/",
        "/bucket/t/p=a/f.parquet",
        "../t/p=a/f.parquet",
        "p=a/../p=a/f.parquet",
    ):
        assert normalize_path(spelled, s3) == "p=a/f.parquet", spelled
    for outside in ("s3://bucket/other/p=a/f.parquet", "s3://bucket/t2/p=a/f.parquet", "../u/f"):
        assert "://" in normalize_path(outside, s3), outside
    local = Storage("/data/t/")
    for spelled in ("file:///data/t/x.parquet", "/data/t/x.parquet", "file:///data//t/x.parquet"):
        assert normalize_path(spelled, local) == "x.parquet", spelled


def _spellings(backend: Any) -> list[str]:
    uri = backend.uri
    if backend.name == "s3":
        rest = uri.split("://", 1)[1]
        return [f"s3a://{rest}/", f"s3://{rest}//", f"S3://{rest}"]
    if backend.name == "local":
        return [f"file://{uri}/", f"{uri}//", f"{uri}/./"]
    return [f"{uri}/"]


def test_live_files_survive_whatever_the_spelling(backend: Any) -> None:
    t, model = _table(backend.uri, backend.storage_options)
    rewrite(t)
    model.record()
    live = referenced_by_any(t, range(0, t.version + 1))
    orphans = _orphans(t, 1)
    for spelled in _spellings(backend):
        other = lakelog.open_table(spelled, storage_options=backend.storage_options)
        report = other.vacuum(older_than=ZERO, force=True)
        assert set(report.files) == set(orphans), spelled
    report = lakelog.open_table(
        _spellings(backend)[0], storage_options=backend.storage_options
    ).vacuum(older_than=ZERO, force=True, dry_run=False)
    assert set(report.files) == set(orphans)
    assert all(t.storage.exists(p) for p in live)
    check_table(t, model)


def test_log_paths_spelled_differently_are_still_referenced(local_backend: Any) -> None:
    """A log entry written as ``./p=a/x`` or ``p=a//x`` names the same file."""
    t, model = _table(local_backend.uri)
    extra = write_adds(t, rows(100, 2, "a")) + write_adds(t, rows(200, 2, "a"))
    odd = [
        AddFile(**{**{k: getattr(a, k) for k in a.__struct_fields__}, "path": spelled})
        for a, spelled in zip(
            extra, ["./" + extra[0].path, extra[1].path.replace("/", "//")], strict=True
        )
    ]
    t.commit(odd, operation="APPEND", kind="append")
    model.record()
    assert ids(t.snapshot()) == model.versions[t.version]
    report = t.vacuum(older_than=ZERO, force=True, dry_run=False)
    assert report.files == ()
    assert all(t.storage.exists(a.path) for a in extra)
    check_table(t, model)


_WRITER = """
import sys, time, pathlib, lakelog, pyarrow as pa
from lakelog.io.writer import write_files
uri, ready, go = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
t = lakelog.open_table(uri)
data = pa.table({"id": list(range(9000, 9010)), "p": ["b"] * 10}, schema=t.schema)
adds = write_files(t.storage, data.to_batches(), schema=t.schema, partition_by=t.partition_by,
                   options=t.write_options())
tmp = ready.with_suffix(".tmp")
tmp.write_text("\\n".join(a.path for a in adds))
tmp.rename(ready)  # appears whole
deadline = time.monotonic() + 60
while not go.exists():
    if time.monotonic() > deadline:
        sys.exit("no go")
    time.sleep(0.01)
print(t.commit(adds, operation="APPEND", kind="append").version)
"""


@pytest.mark.processes
def test_vacuum_beside_a_writer_that_has_not_committed_yet(
    local_backend: Any, tmp_path: Path
) -> None:
    t, model = _table(local_backend.uri)
    aged = _orphans(t, 2)
    for p in aged:
        age(t.storage.full(p), 2 * DAY)
    ready, go = tmp_path / "ready", tmp_path / "go"
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, t.uri, str(ready), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    try:
        while not ready.exists():
            assert writer.poll() is None, writer.communicate()
            time.sleep(0.01)
        in_flight = ready.read_text().split()
        assert in_flight and all(t.storage.exists(p) for p in in_flight)
        report = t.vacuum(older_than=dt.timedelta(hours=1), dry_run=False)
        assert set(report.files) == set(aged)
        assert report.files_too_young >= len(in_flight)
        assert all(t.storage.exists(p) for p in in_flight)
        go.touch()
        out, err = writer.communicate(timeout=60)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert int(out.split()[-1]) == t.refresh().version
    model.record()
    assert set(range(9000, 9010)) <= set(ids(t.snapshot()))
    check_table(t, model)
    assert t.vacuum(older_than=ZERO, force=True).files == ()


_VACUUM = """
import sys, datetime as dt, lakelog
import lakelog.maintenance.cleanup.vacuum as vac
vac._DELETE_BATCH = 2
r = lakelog.open_table(sys.argv[1]).vacuum(older_than=dt.timedelta(0), force=True, dry_run=False)
print(r.summary())
"""


@pytest.mark.processes
@pytest.mark.parametrize("point", ["vacuum:before-delete", "vacuum:mid-delete"])
def test_killed_vacuum_leaves_a_readable_table_and_a_rerun_finishes(
    local_backend: Any, point: str
) -> None:
    t, model = _table(local_backend.uri)
    rewrite(t)
    model.record()
    t.expire_snapshots(older_than=ZERO, retain_last=2)
    model.record()
    orphans = _orphans(t, 3)
    assert_killed(run_child(_VACUUM, t.uri, crash_at=point))
    left = [p for p in orphans if t.storage.exists(p)]
    assert len(left) == (len(orphans) if point == "vacuum:before-delete" else len(orphans) - 2)
    check_table(t, model)
    proc = run_child(_VACUUM, t.uri)
    assert proc.returncode == 0, proc.stderr
    assert not any(t.storage.exists(p) for p in orphans)
    check_table(t, model)
