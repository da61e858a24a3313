"""merge with Delta's WHEN clauses: conditions, SET / VALUES expressions, clause order,
NOT MATCHED BY SOURCE UPDATE, sources with other columns, and the errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakelog
from lakelog import (
    InvalidArgumentError,
    SchemaMismatchError,
    when_matched_delete,
    when_matched_update,
    when_not_matched_by_source_delete,
    when_not_matched_by_source_update,
    when_not_matched_insert,
)
from lakelog.log.commits import read_commit

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string())])


def table(path: Path, properties: dict[str, Any] | None = None) -> lakelog.Table:
    t = lakelog.create_table(str(path), SCHEMA, properties=properties)
    t.append(pa.table({"id": [1, 2], "v": [10, 20], "s": ["a", "b"]}, schema=SCHEMA))
    t.append(pa.table({"id": [3, 4], "v": [30, 40], "s": ["c", None]}, schema=SCHEMA))
    return t


def rows(t: lakelog.Table) -> list[dict[str, Any]]:
    return t.snapshot().to_arrow().sort_by("id").to_pylist()


def src(ids: list[int | None], vs: list[int | None], ss: list[str | None]) -> pa.Table:
    return pa.table({"id": ids, "v": vs, "s": ss}, schema=SCHEMA)


@pytest.mark.parametrize("vectors", [False, True], ids=["rewrite", "deletion-vectors"])
def test_first_clause_whose_condition_holds_applies(tmp_path: Path, vectors: bool) -> None:
    props = {"lakelog.deletion_vectors": "true"} if vectors else None
    t = table(tmp_path / "t", props)
    r = t.merge(
        src([1, 2, 3, 9, 10], [100, 200, 300, 900, 1000], ["x", "y", "z", "new", None]),
        "id",
        when_matched=[
            when_matched_delete(condition="source.v >= 300"),
            when_matched_update(set={"v": "v + source.v"}, condition=pc.field("s") == "a"),
            when_matched_update(),
        ],
        when_not_matched=[when_not_matched_insert(condition="source.s IS NOT NULL")],
        when_not_matched_by_source=[
            when_not_matched_by_source_update(set={"s": "'gone'", "v": 0}),
        ],
    )
    assert rows(t) == [
        {"id": 1, "v": 110, "s": "a"},  # second clause: v + source.v, s kept
        {"id": 2, "v": 200, "s": "y"},  # third clause: every column from the source
        {"id": 4, "v": 0, "s": "gone"},  # no source row: NOT MATCHED BY SOURCE UPDATE
        {"id": 9, "v": 900, "s": "new"},  # inserted; 10 is not (its s is null)
    ]
    assert (r.updated_rows, r.deleted_rows, r.inserted_rows) == (3, 1, 1)
    header = read_commit(t.storage, r.version).header
    assert header.parameters["when_matched"][0] == {
        "action": "delete",
        "condition": "source.v >= 300",
    }


def test_insert_values_and_conditional_source_deletes(tmp_path: Path) -> None:
    t = table(tmp_path / "t", {"lakelog.change_data_feed": "true"})
    before = t.snapshot().version
    r = t.merge(
        src([3, 7, 8], [1, 70, 80], ["z", "q", "r"]),
        "id",
        when_matched="ignore",
        when_not_matched=[
            when_not_matched_insert(
                values={"id": "source.id", "v": pc.field("source.v") * 2},
                condition="source.v > 75",
            ),
            when_not_matched_insert(values={"id": "source.id", "s": "source.s || '!'"}),
        ],
        when_not_matched_by_source=[when_not_matched_by_source_delete(condition="v <= 20")],
    )
    assert rows(t) == [
        {"id": 3, "v": 30, "s": "c"},
        {"id": 4, "v": 40, "s": None},
        {"id": 7, "v": None, "s": "q!"},  # second insert clause; v left out: null
        {"id": 8, "v": 160, "s": None},  # first insert clause
    ]
    assert (r.updated_rows, r.deleted_rows, r.inserted_rows) == (0, 2, 2)
    feed = t.changes(before + 1).to_arrow().sort_by("id").to_pylist()
    assert [(c["id"], c["_change_type"]) for c in feed] == [
        (1, "delete"),
        (2, "delete"),
        (7, "insert"),
        (8, "insert"),
    ]


def test_dry_run_counts_what_the_clauses_would_do(tmp_path: Path) -> None:
    t = table(tmp_path / "t")
    version = t.snapshot().version
    r = t.merge(
        src([1, 5, 6], [1, 50, 60], ["x", "y", "z"]),
        "id",
        when_matched=[when_matched_update(set={"v": "source.v"}, condition="v > 100")],
        when_not_matched=[when_not_matched_insert(condition="source.v > 55")],
        dry_run=True,
    )
    assert (r.updated_rows, r.inserted_rows, r.committed) == (0, 1, False)
    assert t.snapshot().version == version


def test_a_source_with_other_columns_and_without_some(tmp_path: Path) -> None:
    t = table(tmp_path / "t")
    changes = pa.table({"id": [1, 2, 5], "op": ["delete", "upsert", "upsert"], "v": [0, 21, 50]})
    t.merge(
        changes,
        "id",
        when_matched=[
            when_matched_delete(condition="source.op = 'delete'"),
            when_matched_update(set={"v": "source.v"}),
        ],
        when_not_matched=[
            when_not_matched_insert(values={"id": "source.id", "v": "source.v", "s": "source.op"})
        ],
    )
    assert rows(t) == [
        {"id": 2, "v": 21, "s": "b"},
        {"id": 3, "v": 30, "s": "c"},
        {"id": 4, "v": 40, "s": None},
        {"id": 5, "v": 50, "s": "upsert"},
    ]
    with pytest.raises(InvalidArgumentError, match=r"lacks \['s'\]; name the columns"):
        t.merge(changes, "id", when_matched=[when_matched_update()])


def test_string_forms_keep_their_meaning_and_refuse_other_columns(tmp_path: Path) -> None:
    t = table(tmp_path / "t")
    with pytest.raises(SchemaMismatchError, match="unexpected columns"):
        t.merge(pa.table({"id": [1], "v": [1], "s": ["x"], "op": ["d"]}), "id")
    r = t.merge(src([1], [5], ["x"]), "id", when_matched="delete", when_not_matched="ignore")
    assert r.deleted_rows == 1
    assert read_commit(t.storage, r.version).header.parameters["when_matched"] == "delete"


def written(t: lakelog.Table) -> int:
    return t.snapshot().version


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (
            {"when_matched": [when_matched_delete(), when_matched_update(condition="v > 1")]},
            "expected a condition on every when_matched clause but the last",
        ),
        (
            {"when_not_matched": [when_not_matched_insert(), when_not_matched_insert()]},
            "clause 1 of 2 (insert) without a condition",
        ),
        (
            {"when_matched": [when_matched_update(set={"vv": "source.v"})]},
            "found 'vv' (did you mean 'v'?)",
        ),
        (
            {"when_matched": [when_matched_update(set={"v": "source.vv"})]},
            "found 'source.vv' (did you mean 'source.v'?)",
        ),
        (
            {"when_matched": [when_matched_delete(condition=pc.field("w") > 1)]},
            "No match for FieldRef",
        ),
        (
            {"when_not_matched": [when_not_matched_insert(values={"id": "source.id", "v": "v"})]},
            "found 'v'",
        ),
        (
            {"when_not_matched": [when_not_matched_insert(values={"v": pc.field("v")})]},
            "may use only the source row's columns as source.<col> (not ['v'])",
        ),
        (
            {
                "when_not_matched_by_source": [
                    when_not_matched_by_source_delete(condition=pc.field("source.v") > 1)
                ]
            },
            "may use only the target row's columns",
        ),
        (
            {"when_matched": [when_matched_update(set={"id": 5})]},
            "leave the key columns ['id'] alone",
        ),
        (
            {"when_matched": [when_not_matched_insert()]},
            "expected when_matched= to hold when_matched_... clauses",
        ),
        (
            {"when_matched": [when_matched_delete(condition="v + 1")]},
            "to be true or false per row, found a value of type int64",
        ),
        (
            {"when_matched": [when_matched_update(set={"v": "'text'"})]},
            "expected a value of type int64 for column 'v'",
        ),
        ({"when_matched": "upsert"}, "expected when_matched to be one of 'update', 'delete'"),
    ],
)
def test_bad_clauses_are_refused_before_anything_is_written(
    tmp_path: Path, options: dict[str, Any], words: str
) -> None:
    t = table(tmp_path / "t")
    version = written(t)
    with pytest.raises((InvalidArgumentError, SchemaMismatchError)) as e:
        t.merge(src([1, 9], [1, 9], ["x", "y"]), "id", **options)
    assert words in str(e.value) and "\n" not in str(e.value)
    assert written(t) == version


def test_several_source_rows_for_one_target_row_are_an_error(tmp_path: Path) -> None:
    t = table(tmp_path / "t")
    version = written(t)
    clauses = [when_matched_update(set={"v": "v + source.v"}, condition="source.v > 0")]
    with pytest.raises(InvalidArgumentError, match=r"found 1 key\(s\) more than once"):
        t.merge(src([2, 2, 8], [1, 2, 3], ["x", "y", "z"]), "id", when_matched=clauses)
    assert written(t) == version
    r = t.merge(src([2, 2], [1, 2], ["x", "y"]), "id", when_matched=clauses, duplicates="last")
    assert r.updated_rows == 1 and rows(t)[1] == {"id": 2, "v": 22, "s": "b"}


def test_null_keys_match_nothing_and_are_inserted_by_clauses(tmp_path: Path) -> None:
    t = table(tmp_path / "t")
    t.merge(
        src([None, 1], [5, 6], ["n", "m"]),
        "id",
        when_matched=[when_matched_update(set={"s": "source.s"})],
        when_not_matched=[when_not_matched_insert(condition="source.id IS NULL")],
    )
    got = t.snapshot().to_arrow().to_pylist()
    assert {"id": None, "v": 5, "s": "n"} in got and {"id": 1, "v": 10, "s": "m"} in got
