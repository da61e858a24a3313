"""The Delta view across expiries that do not run to the end: an expiry SIGKILLed at each
step between its commit and the trim of the view, then vacuum (or the next commit), and
deltalake reading every version it can open; a trim that fails; a view turned off and
kept; and expiries racing a process that changes table properties."""

from __future__ import annotations

import datetime as dt
import json
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _delta_view_helpers import lakelog_rows, local_path, rows
from _processes import spawn, wait_paused

import lakelog
from lakelog.interop.delta.log import list_delta_log
from lakelog.log.commits import list_log
from lakelog.log.snapshot import load_snapshot
from lakelog.storage import Storage

deltalake = pytest.importorskip("deltalake")

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
NAMES = SCHEMA.names
ZERO = dt.timedelta(0)
EXPIRE = "EXPIRE SNAPSHOTS"

EXPIRY = textwrap.dedent(
    """
    import sys, datetime as dt
    import lakelog

    t = lakelog.open_table(sys.argv[1])
    r = t.expire_snapshots(older_than=dt.timedelta(0), retain_last=int(sys.argv[2]))
    print("expired", r.oldest_version, r.expire_commit_version, flush=True)
    """
)

PROPERTY_LOOP = textwrap.dedent(
    """
    import sys
    import lakelog

    t = lakelog.open_table(sys.argv[1])
    done = 0
    for i in range(int(sys.argv[2])):
        try:
            t.set_properties({"owner": f"team-{i}"})
            done += 1
        except lakelog.CommitConflictError:
            pass  # an expiry landed first: a metadata change conflicts with every winner
    print("changed", done, flush=True)
    """
)


def batch(start: int, n: int = 3) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "p": ["a" if i % 2 else "b" for i in ids]}, schema=SCHEMA)


def _history(uri: str) -> tuple[lakelog.Table, dict[int, list[dict[str, Any]]]]:
    """Appends, a compaction (whose inputs only expired versions keep) and more appends,
    with the rows of every version as lakelog reads them before any expiry."""
    t = lakelog.create_table(
        uri,
        SCHEMA,
        partition_by=["p"],
        properties={"lakelog.delta_view": "true", "lakelog.manifest_interval": "3"},
    )
    for i in range(4):
        t.append(batch(10 * i))
    t.compact(min_input_files=2)
    t.append(batch(100))
    t.append(batch(200))
    t.refresh()
    return t, {v: lakelog_rows(t, v) for v in range(t.version + 1)}


def _expected(t: lakelog.Table, before: dict[int, list[dict[str, Any]]]) -> dict[int, Any]:
    """Rows of every version: lakelog's for the retained ones, the recorded ones below."""
    t.refresh()
    out = dict(before)
    for v in range(t.snapshot().oldest_version, t.version + 1):
        out[v] = lakelog_rows(t, v)
    return out


def assert_delta_reads(uri: str, expected: dict[int, Any]) -> list[int]:
    """Every version deltalake opens reads (no missing file) the rows lakelog has at that
    version; a version it refuses to open is fine. Returns the versions it opened."""
    opened = []
    for v in sorted(expected):
        try:
            table = deltalake.DeltaTable(local_path(uri), version=v)
        except FileNotFoundError as e:  # a listed file gone shows at read, never here
            raise AssertionError(f"deltalake raised FileNotFoundError loading {v}") from e
        except Exception:  # noqa: BLE001 - refused at load: not a version readers see
            continue
        got = table.to_pyarrow_table()  # FileNotFoundError here is the defect
        assert rows(got, NAMES) == expected[v], f"deltalake at version {v}"
        opened.append(v)
    assert opened
    return opened


def _killed_expiry(uri: str, point: str) -> None:
    proc = spawn(EXPIRY, uri, "2", LAKELOG_CRASH_AT=point)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -9 and "expired" not in out, (proc.returncode, out, err)


def _vacuum(uri: str) -> lakelog.VacuumReport:
    return lakelog.open_table(uri).vacuum(older_than=ZERO, force=True, dry_run=False)


_POINTS = [
    "expire:after-commit",
    "delta-view:before-write",  # the expiry's only commit: its entry
    "delta-view:before-trim",
    "delta-view:before-put",
]


@pytest.mark.processes
@pytest.mark.parametrize("point", _POINTS)
def test_vacuum_after_a_killed_expiry_keeps_every_delta_version_readable(
    tmp_path: Path, point: str
) -> None:
    uri = str(tmp_path / "t")
    t, before = _history(uri)
    latest = t.version
    removed = {f.path for f in t.snapshot(4).files()} - {f.path for f in t.snapshot().files()}
    assert removed  # the compaction's inputs: only versions to be expired list them
    _killed_expiry(uri, point)
    oldest = t.refresh().snapshot().oldest_version
    assert oldest == latest - 1 and t.version == latest + 1  # the expiry committed
    before[latest + 1] = before[latest]

    report = _vacuum(uri)
    expected = _expected(t, before)
    assert_delta_reads(uri, expected)
    # vacuum finished the view's trim first, so the files only expired versions
    # used are gone as they would be after a whole expiry
    assert set(report.files) >= removed
    listing = list_delta_log(t.storage)
    assert min(listing.commits + listing.checkpoints) == oldest
    # vacuum's sync wrote the expiry's missing entry too, unless the trim was done (then
    # vacuum has nothing to finish): the view stays a version behind until the next
    # writer or a sync writes it, and readers see the version before
    assert listing.head() == t.version - (point == "delta-view:before-put")


# Killed before the expiry's Delta entry, the view lacks it and the next writer syncs,
# which trims too (as test_delta_view_processes shows for any writer); these two points
# left the entry written and the trim undone, which no later commit noticed.
@pytest.mark.processes
@pytest.mark.parametrize("point", ["expire:after-commit", "delta-view:before-trim"])
def test_the_next_commit_finishes_the_trim_of_a_killed_expiry(tmp_path: Path, point: str) -> None:
    uri = str(tmp_path / "t")
    t, before = _history(uri)
    latest = t.version
    _killed_expiry(uri, point)
    before[latest + 1] = before[latest]
    lakelog.open_table(uri).append(batch(300))
    oldest = t.refresh().snapshot().oldest_version
    listing = list_delta_log(t.storage)
    assert min(listing.commits + listing.checkpoints) == oldest, listing
    assert listing.head() == t.version
    # the lakelog log below the oldest version is still there: a rerun deletes it
    assert list_log(t.storage).commits[0] < oldest
    report = lakelog.open_table(uri).expire_snapshots(older_than=ZERO, retain_last=4)
    assert report.oldest_version == oldest and report.data_files
    _vacuum(uri)
    assert_delta_reads(uri, _expected(t, before))


class NoDeltaDeletes(Storage):
    """A store that refuses to delete anything under ``_delta_log/`` while ``refuse``."""

    refuse = True

    def delete(self, rel_paths: list[str]) -> None:
        if self.refuse and any(p.startswith("_delta_log/") for p in rel_paths):
            raise PermissionError(13, "Permission denied", rel_paths[0])
        super().delete(rel_paths)


def _on(storage: Storage) -> lakelog.Table:
    """The table at ``storage``'s root, read and written through that very object."""
    return lakelog.Table(storage, load_snapshot(storage))


def test_a_failed_trim_stops_the_expiry_before_any_file_is_deleted(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t, before = _history(uri)
    latest = t.version
    data = {f.path for v in range(latest + 1) for f in t.snapshot(v).files()}
    storage = NoDeltaDeletes(uri)
    with pytest.raises(lakelog.LakelogError, match=r"Delta view.*run the expiry again") as info:
        _on(storage).expire_snapshots(older_than=ZERO, retain_last=2)
    assert not isinstance(info.value, lakelog.CommitConflictError)
    oldest = t.refresh().snapshot().oldest_version
    assert oldest == latest - 1  # committed, but nothing deleted: no data, no log
    assert all(t.storage.exists(p) for p in data)
    assert list_log(t.storage).commits[0] == 0
    before[latest + 1] = before[latest]
    assert_delta_reads(uri, _expected(t, before))
    # vacuum cannot trim either: it keeps what the Delta versions below the oldest list
    report = _on(storage).vacuum(older_than=ZERO, force=True, dry_run=False)
    assert not set(report.files) & data
    assert_delta_reads(uri, _expected(t, before))

    storage.refuse = False
    report = _on(storage).expire_snapshots(older_than=ZERO, retain_last=3)
    assert report.oldest_version == oldest and report.data_files
    assert min(list_delta_log(t.storage).commits) == oldest
    _vacuum(uri)
    assert_delta_reads(uri, _expected(t, before))


def test_a_view_turned_off_and_kept_keeps_the_files_it_lists(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t, before = _history(uri)
    t.set_properties({"lakelog.delta_view": "false"})  # the view stays, frozen
    frozen = t.version - 1
    t.compact(min_input_files=2)
    t.append(batch(400))
    t.refresh()
    for v in range(frozen + 1, t.version + 1):
        before[v] = lakelog_rows(t, v)
    report = t.expire_snapshots(older_than=ZERO, retain_last=1)
    assert report.oldest_version == t.refresh().version - 1
    _vacuum(uri)
    opened = assert_delta_reads(uri, {v: before[v] for v in range(frozen + 1)})
    assert opened[-1] == frozen
    # deleting the view frees them: the next vacuum deletes them
    lakelog.disable_delta_view(uri)
    assert _vacuum(uri).files


def test_a_broken_view_keeps_every_file_its_entries_list(tmp_path: Path) -> None:
    """Another engine's Delta commit stops the view (lakelog no longer writes or trims
    it); its versions, lakelog's below the oldest and the other engine's, stay readable."""
    uri = str(tmp_path / "t")
    t, before = _history(uri)
    head = t.version
    Path(uri, "p=a").mkdir(exist_ok=True)
    foreign = Path(uri, "p=a", "other-engine-0.parquet")
    pq.write_table(pa.table({"id": pa.array([999], pa.int64())}), foreign)
    add = {
        "path": "p=a/other-engine-0.parquet",
        "partitionValues": {"p": "a"},
        "size": foreign.stat().st_size,
        "modificationTime": 0,
        "dataChange": True,
    }
    entry = [{"commitInfo": {"engineInfo": "other-engine", "operation": "WRITE"}}, {"add": add}]
    Path(uri, "_delta_log", f"{head + 1:020d}.json").write_text(
        "\n".join(json.dumps(line) for line in entry) + "\n"
    )
    before[head + 1] = sorted([*before[head], {"id": 999, "p": "a"}], key=lambda r: str(r["id"]))
    t.append(batch(500))  # lakelog's commit lands; its view entry finds the other engine's
    assert lakelog.delta_view_status(uri).broken
    t.compact(min_input_files=2)
    t.expire_snapshots(older_than=ZERO, retain_last=1)
    _vacuum(uri)
    assert foreign.exists()
    opened = assert_delta_reads(uri, {v: before[v] for v in range(head + 2)})
    assert opened[-1] == head + 1


# -- expiry beside a process that changes properties -------------------------------


@pytest.mark.processes
def test_expiry_retries_over_a_property_change_before_its_put(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t, _ = _history(uri)
    gate = tmp_path / "gate"
    proc = spawn(EXPIRY, uri, "2", LAKELOG_PAUSE_AT=f"commit:before-put:{EXPIRE}:{gate}")
    wait_paused(gate, proc)
    t.set_properties({"owner": "someone"})  # lands where the expiry is about to put
    changed = t.version
    gate.touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    snap = t.refresh().snapshot()
    assert snap.version == changed + 1 and snap.properties["owner"] == "someone"
    assert t.history()[0].operation == EXPIRE
    assert out.split()[:3] == ["expired", str(snap.oldest_version), str(changed + 1)]


@pytest.mark.processes
def test_repeated_expiries_beside_a_property_writer_never_raise(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t, _ = _history(uri)
    writer = spawn(PROPERTY_LOOP, uri, "80")
    runs = 0
    while writer.poll() is None or runs < 3:
        t.expire_snapshots(older_than=ZERO, retain_last=1)
        runs += 1
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0 and int(out.split()[1]) > 0, (out, err)
    assert t.refresh().snapshot().properties["owner"].startswith("team-")
    assert assert_delta_reads(uri, {t.version: lakelog_rows(t, t.version)}) == [t.version]
