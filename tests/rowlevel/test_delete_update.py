"""delete and update: what is read, what is rewritten, row order, no-ops, bad input."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from _rowlevel_helpers import file_rows, files_on_disk, make_table, table_rows

import lakelog
from lakelog import InvalidArgumentError, SchemaMismatchError, threads
from lakelog.log.actions import AddFile
from lakelog.log.commits import read_commit
from lakelog.rowlevel import ChangeResult, execute
from lakelog.rowlevel.base import Counts


def test_delete_rewrites_only_files_holding_matches_and_keeps_order(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=4, per=10)
    before = {f.path for f in t.snapshot().files()}
    # ids 12 and 17 sit in the second file; its stats exclude the others but 5..25 is
    # within the first and third files' bounds only partly: pruning keeps 1 file
    r = t.delete("id = 12 or id = 17")
    assert isinstance(r, ChangeResult) and r.committed
    assert (r.deleted_rows, r.files_scanned, r.files_removed, r.files_added) == (2, 1, 1, 1)
    assert r.copied_rows == 8
    after = t.snapshot().files()
    removed = before - {f.path for f in after}
    assert len(removed) == 1
    new = [f for f in after if f.path not in before]
    assert [x["id"] for x in file_rows(t, new[0].path)] == [10, 11, 13, 14, 15, 16, 18, 19]
    ids = [r["id"] for r in table_rows(t)]
    assert ids == [i for i in range(40) if i not in (12, 17)]
    c = read_commit(t.storage, r.version)
    assert c.header.operation == "DELETE"
    assert c.header.parameters == {"predicate": "id = 12 or id = 17"}
    assert c.header.metrics["num_deleted_rows"] == 2
    assert c.header.format_version == 1  # plain removes and adds: version-1 readers read it
    assert all(a.data_change for a in c.actions)  # type: ignore[union-attr]


def test_candidates_without_matches_are_read_not_rewritten(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=3, per=10)
    # string bounds ['n0', 'n9'] and ['n20', 'n29'] may hold 'n25' (['n10', 'n19'] not):
    # two candidates are read, only the one holding the row is rewritten
    r = t.delete("note = 'n25'")
    assert (r.files_scanned, r.files_removed, r.deleted_rows) == (2, 1, 1)


def test_once_probes_stop_paying_files_without_matches_are_still_kept(tmp_path: Path) -> None:
    """Files 0-9 each hold matches: probing stops after the first few (every one needed
    its rewrite); files 10 and 11, candidates by their bounds, hold none. They are read
    in full and left as they were: same paths, and their rewrites deleted."""
    t = make_table(tmp_path / "t", files=12, per=10)
    files = t.snapshot().files()
    spared = {f.path for f in files[10:]}
    # ids 3, 13, ..., 93 in files 0-9; 'n100a' and 'n110a' lie within the note bounds
    # of files 10 and 11 (['n100', 'n109'], ['n110', 'n119']), but no row holds them
    hits = ", ".join(str(i) for i in range(3, 100, 10))
    with threads.limited(0):  # no worker threads: in order, so 10 and 11 come unprobed
        r = t.delete(f"id in ({hits}) or note = 'n100a' or note = 'n110a'")
    assert (r.deleted_rows, r.files_scanned, r.files_removed) == (10, 12, 10)
    after = {f.path for f in t.snapshot().files()}
    assert spared <= after and len(after) == 12
    # the replaced files stay until vacuum; the discarded rewrites of 10 and 11 are gone
    assert files_on_disk(tmp_path / "t") == {f.path for f in files} | after
    assert [x["id"] for x in table_rows(t)] == [
        i for i in range(120) if not (i % 10 == 3 and i < 100)
    ]


def test_probe_guide_stops_when_probes_spare_nothing_and_resumes() -> None:
    guide = execute.ProbeGuide()
    rewrite, untouched = Counts(deleted=1, kept=1), Counts(kept=2)
    for _ in range(execute.PROBE_SAMPLE - 1):
        guide.record(rewrite)
        assert guide.worth_probing()
    guide.record(rewrite)
    assert not guide.worth_probing()  # 8 of 8 needed their rewrite
    guide.record(untouched)  # a rewrite that changed nothing: a probe would have spared it
    assert guide.worth_probing()


def test_delete_matching_nothing_commits_nothing(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    v = t.version
    for where in ("id = 1000", "note = 'absent'", "false"):
        r = t.delete(where)
        assert not r.committed and r.version == v and r.deleted_rows == 0
    assert t.refresh().version == v
    assert "nothing committed" in r.summary()


def test_delete_true_deletes_everything_and_where_is_required(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    for bad in (None, "", "   ", []):
        with pytest.raises(InvalidArgumentError, match='pass "true"'):
            t.delete(bad)
    r = t.delete("true")
    assert r.deleted_rows == 20 and r.files_added == 0 and r.files_removed == 2
    assert t.snapshot().num_rows == 0 and t.snapshot().num_files == 0


def test_delete_forms_and_null_semantics(tmp_path: Path) -> None:
    t = lakelog.write_table(str(tmp_path / "t"), pa.table({"a": [1, None, 3, 4]}))
    t = lakelog.open_table(str(tmp_path / "t"))
    # a comparison with a null is null: the row is kept, as in SQL
    t.delete(pc.field("a") != 3)
    assert sorted(t.snapshot().to_arrow().column("a").to_pylist(), key=str) == [3, None]
    t.delete([("a", "=", 3)])
    assert t.snapshot().to_arrow().column("a").to_pylist() == [None]
    t.delete("a is null")
    assert t.snapshot().num_rows == 0


def test_delete_on_partitions_uses_partition_pruning(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", partition_by=("day",), files=4)
    r = t.delete("day = 'd1'")
    # whole files match: removed, nothing rewritten
    assert (r.files_scanned, r.files_removed, r.files_added, r.deleted_rows) == (2, 2, 0, 20)
    assert {r["day"] for r in table_rows(t)} == {"d0"}


def test_dry_run_reports_and_changes_nothing(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=3)
    v = t.version
    r = t.delete("id < 15", dry_run=True)
    assert r.dry_run and not r.committed and r.deleted_rows == 15
    assert [(f.num_rows, f.deleted_rows) for f in r.files] == [(10, 10), (10, 5)]
    assert t.refresh().version == v
    assert len(files_on_disk(tmp_path / "t")) == 3  # nothing written


def test_update_in_place_with_values_and_expressions(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    r = t.update("id >= 5 and id < 8", set={"v": pc.field("v") * 10, "note": "fixed"})
    assert (r.updated_rows, r.files_removed, r.copied_rows) == (3, 1, 7)
    (new,) = added(r)
    got = file_rows(t, new.path)
    assert [x["id"] for x in got] == list(range(10))  # same order, updated in place
    assert [x["v"] for x in got[4:9]] == [4.0, 50.0, 60.0, 70.0, 8.0]
    assert [x["note"] for x in got[4:9]] == ["n4", "fixed", "fixed", "fixed", "n8"]
    c = read_commit(t.storage, r.version)
    assert c.header.parameters["set"] == {"v": "multiply_checked(v, 10)", "note": "fixed"}
    # set expressions read the row's values before the update (v uses the old id)
    t.update("id = 1", set={"id": pc.field("id") + 100, "v": pc.field("id")})
    row = [x for x in table_rows(t) if x["id"] == 101]
    assert row and row[0]["v"] == 1.0


def test_update_moving_rows_to_another_partition(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", partition_by=("day",), files=2)
    t.update("id < 3", set={"day": "d9"})
    by_day: dict[str, list[int]] = {}
    for f in t.snapshot().files():
        by_day.setdefault(f.partition["day"] or "", []).extend(
            x["id"] for x in file_rows(t, f.path)
        )
    assert sorted(by_day["d9"]) == [0, 1, 2]
    assert sorted(by_day["d0"]) == list(range(3, 10))


@pytest.mark.parametrize(
    ("assignments", "error"),
    [
        ({"nope": 1}, InvalidArgumentError),
        ({"id": "seven"}, SchemaMismatchError),
        ({"id": 1.5}, SchemaMismatchError),
        ({"v": pc.field("note")}, SchemaMismatchError),
        ({"v": pc.field("missing") + 1}, InvalidArgumentError),
        ({}, InvalidArgumentError),
    ],
)
def test_update_values_are_checked_before_anything_is_written(
    tmp_path: Path, assignments: dict[str, object], error: type[Exception]
) -> None:
    t = make_table(tmp_path / "t", files=2)
    v = t.version
    with pytest.raises(error):
        t.update("id = 1", set=assignments)
    assert t.refresh().version == v
    assert len(files_on_disk(tmp_path / "t")) == 2


def test_update_refuses_null_in_non_nullable_column(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("d", pa.date32())])
    t = lakelog.create_table(str(tmp_path / "t"), schema)
    t.append(pa.table({"id": [1, 2], "d": [dt.date(2024, 1, 1)] * 2}, schema=schema))
    with pytest.raises(SchemaMismatchError, match="non-nullable"):
        t.update("id = 1", set={"id": None})
    # a date given as its text is parsed for a date column
    t.update("id = 1", set={"d": "2025-02-03"})
    got = {r["id"]: r["d"] for r in t.snapshot().to_arrow().to_pylist()}
    assert got == {1: dt.date(2025, 2, 3), 2: dt.date(2024, 1, 1)}
    # an expression producing nulls into the non-nullable column: refused, nothing left
    v = t.version
    with pytest.raises(SchemaMismatchError):
        t.update("id = 2", set={"id": pc.if_else(pc.field("id") > 100, pc.field("id"), None)})
    assert t.refresh().version == v
    assert len(files_on_disk(tmp_path / "t")) == 2  # the failed rewrite is gone


def test_time_travel_sees_before_and_after(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    v = t.version
    t.delete("id < 5")
    assert len(table_rows(t, v)) == 20
    assert len(table_rows(t)) == 15


def test_rewritten_files_keep_the_table_writer_settings(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    t = make_table(tmp_path / "t", files=1, per=100)
    t.set_properties({"lakelog.compression": "snappy", "lakelog.row_group_size": "16"})
    r = t.delete("id = 0")
    (add,) = added(r)
    with t.storage.open_input(add.path) as f:
        md = pq.ParquetFile(f).metadata
    assert md.row_group(0).column(0).compression == "SNAPPY"
    assert md.num_row_groups == 7  # 99 rows in row groups of 16
    # named with a writer lease id, like every writer's files (vacuum keeps them meanwhile)
    assert re.fullmatch(r"part-\d{5}-[0-9a-f]{32}-[0-9a-f]{16}\.parquet", add.path)


def added(r: ChangeResult) -> list[AddFile]:
    return [a for a in r.actions if isinstance(a, AddFile)]


def test_changes_after_schema_evolution(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    t.add_columns({"tag": pa.string()})  # the existing files lack it: read as nulls
    t.update("id = 3", set={"tag": "x"})
    t.delete("tag is null and id >= 15")
    r = t.merge(
        pa.table(
            {
                "id": [4, 99],
                "day": ["d0", "d0"],
                "v": [0.0, 0.0],
                "note": ["m", "m"],
                "tag": ["y", "z"],
            }
        ),
        on="id",
    )
    assert (r.updated_rows, r.inserted_rows) == (1, 1)
    got = {x["id"]: x["tag"] for x in table_rows(t)}
    assert (got[3], got[4], got[99], got[5]) == ("x", "y", "z", None)
    assert sorted(got) == [*range(15), 99]
