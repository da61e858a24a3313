"""merge: upsert semantics, duplicate source keys, key pruning, the report, bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _rowlevel_helpers import SCHEMA, file_rows, files_on_disk, make_table, rows, table_rows

import lakelog
from lakelog import InvalidArgumentError, SchemaMismatchError
from lakelog.log.actions import AddFile
from lakelog.log.commits import read_commit
from lakelog.rowlevel import MergeReport


def source(ids: list[int], note: str = "new", day: str = "d1") -> pa.Table:
    return rows(ids, day=day, note=note)


def by_id(t: lakelog.Table) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for r in table_rows(t):
        assert r["id"] not in out, f"id {r['id']} twice"
        out[r["id"]] = r
    return out


def test_upsert_updates_in_place_and_inserts(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=4, per=10)
    r = t.merge(source([15, 17, 100, 101]), on="id")
    assert isinstance(r, MergeReport) and r.committed
    assert (r.updated_rows, r.inserted_rows, r.deleted_rows) == (2, 2, 0)
    assert (r.source_rows, r.source_duplicates) == (4, 0)
    # keys 15..101: pruning by the source's keys per file keeps only the file of 10..19
    assert (r.files_scanned, r.files_removed) == (1, 1)
    got = by_id(t)
    assert len(got) == 42
    assert got[15]["note"] == "new15" and got[16]["note"] == "n16"
    assert got[100]["note"] == "new100"
    rewritten = [a for a in r.actions if isinstance(a, AddFile) and a.num_rows == 10]
    assert [x["id"] for x in file_rows(t, rewritten[0].path)] == list(range(10, 20))
    h = read_commit(t.storage, r.version).header
    assert h.operation == "MERGE" and h.parameters["on"] == ["id"]
    assert h.metrics["num_inserted_rows"] == 2 and h.metrics["num_updated_rows"] == 2


def test_key_pruning_uses_every_source_key_not_just_the_range(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=10, per=10)
    # keys 5 and 95: their overall range spans every file, but only two files can hold them
    r = t.merge(source([5, 95]), on="id", when_not_matched="ignore")
    assert (r.files_scanned, r.files_removed, r.updated_rows) == (2, 2, 2)


def test_insert_only_merge_reads_but_does_not_rewrite(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    r = t.merge(source([3, 50]), on="id", when_matched="ignore")
    assert (r.files_scanned, r.files_removed, r.inserted_rows, r.updated_rows) == (1, 0, 1, 0)
    assert by_id(t)[3]["note"] == "n3" and by_id(t)[50]["note"] == "new50"


def test_when_matched_delete_and_not_matched_by_source(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    r = t.merge(source([1, 2, 99]), on="id", when_matched="delete", when_not_matched="ignore")
    assert (r.deleted_rows, r.inserted_rows) == (2, 0)
    assert 1 not in by_id(t) and 99 not in by_id(t)
    r = t.merge(source([3, 4, 5, 77]), on="id", when_not_matched_by_source="delete")
    # every file is read; rows without a source row go, matches are updated, 77 inserted
    assert r.files_scanned == 2 and r.deleted_rows == 15 and r.updated_rows == 3
    assert sorted(by_id(t)) == [3, 4, 5, 77]
    assert {x["note"] for x in by_id(t).values()} == {"new3", "new4", "new5", "new77"}


def test_empty_source_with_delete_by_source_empties_the_table(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    r = t.merge(source([]), on="id")
    assert not r.committed
    t.merge(source([]), on="id", when_not_matched_by_source="delete")
    assert t.snapshot().num_rows == 0


@pytest.mark.parametrize(
    ("duplicates", "expected"),
    [
        ("last", {1: "x1", 50: "second50"}),  # the last row of each key
        ("first", {1: "first1", 50: "first50"}),
    ],
)
def test_duplicate_source_keys_follow_duplicates(
    tmp_path: Path, duplicates: str, expected: dict[int, str]
) -> None:
    t = make_table(tmp_path / "t", files=1)
    src = pa.concat_tables(
        [source([1, 50], note="first"), source([50, 1], note="second"), source([1], note="x")]
    )
    r = t.merge(src, on="id", duplicates=duplicates)  # type: ignore[arg-type]
    assert (r.source_rows, r.source_duplicates) == (5, 3)
    got = by_id(t)
    assert {k: got[k]["note"] for k in expected} == expected


def test_duplicate_source_keys_are_an_error_by_default(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=1)
    v = t.version
    with pytest.raises(InvalidArgumentError, match=r"duplicates='last'.*Nothing was written"):
        t.merge(source([1, 2, 2]), on="id")
    assert t.refresh().version == v and len(files_on_disk(tmp_path / "t")) == 1


def test_null_keys_match_nothing(tmp_path: Path) -> None:
    schema = pa.schema([("k", pa.string()), ("n", pa.int64())])
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, pa.table({"k": ["a", None], "n": [1, 2]}, schema=schema))
    t = lakelog.open_table(uri)
    src = pa.table({"k": [None, None, "a"], "n": [10, 20, 30]}, schema=schema)
    r = t.merge(src, on="k")  # two null keys are not duplicates of each other
    assert (r.updated_rows, r.inserted_rows) == (1, 2)
    got = sorted(t.snapshot().to_arrow().to_pylist(), key=lambda x: x["n"])
    assert got == [
        {"k": None, "n": 2},
        {"k": None, "n": 10},
        {"k": None, "n": 20},
        {"k": "a", "n": 30},
    ]


def test_composite_keys_and_partition_pruning(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", partition_by=("day",), files=4)
    # the same ids exist in no other day; key (day, id) = ('d0', 5) is in one file only
    src = pa.concat_tables([source([5], day="d0"), source([5], day="d1")])
    r = t.merge(src, on=["day", "id"])
    assert (r.updated_rows, r.inserted_rows) == (1, 1)
    assert r.files_scanned == 1  # d1 files hold no id 5; d0's second file neither
    got = [x for x in table_rows(t) if x["id"] == 5]
    assert [(x["day"], x["note"]) for x in got] == [("d0", "new5"), ("d1", "new5")]


def test_dry_run(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    v = t.version
    r = t.merge(source([1, 2, 300]), on="id", dry_run=True)
    assert r.dry_run and (r.updated_rows, r.inserted_rows, r.files_removed) == (2, 1, 1)
    assert t.refresh().version == v and len(files_on_disk(tmp_path / "t")) == 2


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"on": "nope"}, InvalidArgumentError, "key columns of the table"),
        ({"on": []}, InvalidArgumentError, "name the key"),
        ({"on": ["id", "id"]}, InvalidArgumentError, "distinct"),
        ({"on": "id", "when_matched": "upsert"}, InvalidArgumentError, "when_matched"),
        ({"on": "id", "duplicates": "keep"}, InvalidArgumentError, "duplicates"),
        ({"on": "id", "when_not_matched_by_source": "x"}, InvalidArgumentError, "by_source"),
    ],
)
def test_bad_options_are_refused(
    tmp_path: Path, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    t = make_table(tmp_path / "t", files=1)
    with pytest.raises(error, match=match):
        t.merge(source([1]), **kwargs)


def test_source_must_match_the_schema(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=1)
    with pytest.raises(SchemaMismatchError):
        t.merge(pa.table({"id": [1]}), on="id")
    bad = source([1]).cast(pa.schema([("id", pa.string()), *list(SCHEMA)[1:]]))
    with pytest.raises(SchemaMismatchError):
        t.merge(bad, on="id")
