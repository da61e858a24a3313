"""The conflict rules of row-level changes, one winner at a time (docs/format.md,
"Conflict rules for row-level changes").

Each test plans and rewrites a change on an old snapshot, lets a real commit land
meanwhile, and then commits: the change either rebases (and the result equals
running the winner first, then the change) or fails with CommitConflictError,
leaving the table as the winner left it. Real OS processes race in
test_processes.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _rowlevel_helpers import files_on_disk, make_table, rows, table_rows

import lakelog
from lakelog import CommitConflictError
from lakelog.log.actions import RemoveFile
from lakelog.log.commits import read_commit
from lakelog.log.snapshot import Snapshot
from lakelog.maintenance.commit import commit_rewrite
from lakelog.maintenance.compaction.planner import plan_compaction
from lakelog.maintenance.compaction.rewrite import RewriteOptions, rewrite_group
from lakelog.rowlevel.merge import MergeChange
from lakelog.rowlevel.predicate import DeleteChange, UpdateChange, Where
from lakelog.rowlevel.result import ChangeResult
from lakelog.rowlevel.run import run_change


def delete_on(t: lakelog.Table, snap: Snapshot, where: str) -> ChangeResult:
    return run_change(t, DeleteChange(Where(where, snap.schema, operation="DELETE")), snap)


def merge_on(t: lakelog.Table, snap: Snapshot, src: pa.Table, **kw: Any) -> ChangeResult:
    change = MergeChange(
        snap.schema,
        snap.partition_by,
        src,
        "id",
        when_matched=kw.get("when_matched", "update"),
        when_not_matched=kw.get("when_not_matched", "insert"),
        when_not_matched_by_source=kw.get("by_source", "ignore"),
        duplicates="error",
        options=t.write_options(),
    )
    return run_change(t, change, snap)


def ids(t: lakelog.Table) -> list[int]:
    return [r["id"] for r in table_rows(t)]


def test_append_the_change_cannot_match_rebases(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    snap = t.snapshot()
    t.append(rows([100, 101]))  # outside the predicate's range: pruned without reading
    t.append(rows([3, 50]))  # within the bounds of 'id = 5' but no row matches: read
    r = delete_on(t, snap, "id = 5")
    assert r.committed and r.attempts == 2 and r.version == snap.version + 3
    assert ids(t) == sorted([i for i in range(20) if i != 5] + [3, 50, 100, 101])


def test_append_of_matching_rows_is_rewritten_too(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    snap = t.snapshot()
    appended = t.append(rows([5, 6]))
    r = delete_on(t, snap, "id = 5")
    # as if it ran after the append: the appended 5 is deleted as well, in the same commit
    assert r.committed and r.attempts == 2 and r.deleted_rows == 2
    assert (r.files_removed, r.copied_rows) == (2, 10)
    removed = {a.path for a in r.actions if isinstance(a, RemoveFile)}
    assert {a.path for a in appended.actions} <= removed  # type: ignore[union-attr]
    assert 5 not in ids(t) and ids(t).count(6) == 2
    h = read_commit(t.storage, r.version).header
    assert h.metrics["num_deleted_rows"] == 2 and h.metrics["num_removed_files"] == 2


def test_matching_rows_appended_and_compacted_meanwhile_conflict(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", partition_by=("day",), files=2)
    snap = t.snapshot()
    appended = t.append(rows([5], day="d1"))
    # the appended file is compacted away again with day d1's other file: its row moved
    t.compact(partition_filter=[("day", "=", "d1")], min_input_files=2)
    before = files_on_disk(tmp_path / "t")
    with pytest.raises(CommitConflictError, match=r"rows matching its predicate.*APPEND") as e:
        delete_on(t, snap, "id = 5")
    (add,) = [a.path for a in appended.actions]  # type: ignore[union-attr]
    assert e.value.conflicting_files == (add,) and e.value.winning_version == appended.version
    assert "Run the DELETE again" in str(e.value)
    assert files_on_disk(tmp_path / "t") == before  # its rewritten file was deleted
    assert ids(t).count(5) == 2
    t.delete("id = 5")  # running it again deletes both
    assert 5 not in ids(t)


@pytest.mark.parametrize("vectors", [False, True], ids=["copy-on-write", "vectors"])
def test_matching_rows_appended_and_changed_again_meanwhile_are_rewritten(
    tmp_path: Path, vectors: bool
) -> None:
    t = make_table(tmp_path / "t", files=2, vectors=vectors)
    snap = t.snapshot()
    t.append(rows([5, 6, 107]))
    # another change rewrites the appended file, or re-adds it with a vector: its 5
    # lives on there
    t.delete("id = 107")
    r = delete_on(t, snap, "id = 5")
    assert r.committed and r.deleted_rows == 2
    assert (r.files_marked > 0) == vectors
    assert 5 not in ids(t) and ids(t).count(6) == 2 and 107 not in ids(t)


def test_a_rewrite_of_a_file_it_only_read_rebases(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    snap = t.snapshot()
    # the second file's bounds (v in [10, 19]) may hold v = 15.5: read, no row matches;
    # a concurrent update rewrites that file without making a row match
    t.update("id = 15", set={"note": "x"})
    r = delete_on(t, snap, "id = 5 or v = 15.5")
    assert r.committed and r.attempts == 2 and r.deleted_rows == 1
    got = {x["id"]: x["note"] for x in table_rows(t)}
    assert 5 not in got and got[15] == "x" and len(got) == 19


def test_rows_another_change_moved_into_the_predicate_are_updated_too(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    snap = t.snapshot()
    t.update("id = 15", set={"v": 15.5})  # now a row of a file it only read matches
    change = UpdateChange(
        Where("id = 5 or v = 15.5", snap.schema, operation="UPDATE"), snap.schema, {"note": "u"}
    )
    r = run_change(t, change, snap)
    assert r.committed and r.updated_rows == 2
    got = {x["id"]: x["note"] for x in table_rows(t)}
    assert (got[5], got[15], got[14]) == ("u", "u", "n14")


def test_removing_a_file_it_rewrites_conflicts(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    snap = t.snapshot()
    t.delete("id = 7")  # rewrites the first file
    with pytest.raises(CommitConflictError, match=r"which this change rewrites.*DELETE") as e:
        delete_on(t, snap, "id = 3")
    assert len(e.value.conflicting_files) == 1
    assert "Run the change again" in str(e.value)


def test_compaction_of_its_files_conflicts_and_other_compactions_rebase(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", partition_by=("day",), files=4)
    snap = t.snapshot()
    # compact day d1 only (ids 10..19 and 30..39): the delete of id 3 (day d0) rebases
    report = t.compact(partition_filter=[("day", "=", "d1")], min_input_files=2)
    assert report.version is not None
    r = delete_on(t, snap, "id = 3")
    assert r.committed and 3 not in ids(t) and len(ids(t)) == 39
    # now compact d0, then a delete planned before it: conflict
    snap = t.snapshot()
    report = t.compact(partition_filter=[("day", "=", "d0")], min_input_files=2)
    assert report.version is not None
    with pytest.raises(CommitConflictError, match="COMPACT"):
        delete_on(t, snap, "id = 4")


def test_compaction_committing_after_the_change_loses(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=4)
    plan = plan_compaction(t.snapshot())
    assert plan.groups
    opts = RewriteOptions.from_compaction(plan.options)
    results = [
        rewrite_group(t.storage, plan.arrow_schema(), plan.partition_by, g, opts)
        for g in plan.groups
    ]
    t.delete("id = 12")
    result, abandoned = commit_rewrite(t, plan, results)
    assert result is None and len(abandoned) == len(plan.groups)
    assert ids(t) == [i for i in range(40) if i != 12]


def test_metadata_change_conflicts(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=1)
    snap = t.snapshot()
    t.set_properties({"owner": "me"})
    with pytest.raises(CommitConflictError, match="metadata"):
        delete_on(t, snap, "id = 1")


def test_merges_of_disjoint_keys_both_land(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=4)
    snap = t.snapshot()
    a = merge_on(t, t.snapshot(), rows([1, 2, 500], note="a"))
    b = merge_on(t, snap, rows([31, 32, 600], note="b"))
    assert a.committed and b.committed and b.attempts == 2
    got = {r["id"]: r["note"] for r in table_rows(t)}
    assert len(got) == 42 and (got[1], got[500], got[31], got[600]) == ("a1", "a500", "b31", "b600")


def test_merge_inserting_a_key_appended_concurrently_conflicts(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    snap = t.snapshot()
    t.append(rows([700]))  # the same new key arrives from an ingest job
    with pytest.raises(CommitConflictError, match="keys of the merge source"):
        merge_on(t, snap, rows([700], note="m"))
    assert ids(t).count(700) == 1  # no duplicate
    # another merge inserting the same key: the same
    snap = t.snapshot()
    merge_on(t, t.snapshot(), rows([800], note="x"))
    with pytest.raises(CommitConflictError):
        merge_on(t, snap, rows([800], note="y"))
    assert ids(t).count(800) == 1


def test_merge_deleting_by_source_conflicts_with_any_append(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=1)
    snap = t.snapshot()
    t.append(rows([900]))
    with pytest.raises(CommitConflictError):
        merge_on(t, snap, rows([1]), by_source="delete")


def test_expiry_of_the_read_version_fails_the_change(tmp_path: Path) -> None:
    import datetime as dt

    t = make_table(tmp_path / "t", files=3)
    snap = t.snapshot(1)
    t.expire_snapshots(older_than=dt.timedelta(0), retain_last=1)
    with pytest.raises(CommitConflictError, match="expired"):
        delete_on(t, snap, "id = 1")
