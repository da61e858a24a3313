"""Schema evolution: add, widen and drop columns without rewriting files.

Old files read with nulls or widened values through every lakelog reader (Arrow,
the dataset DuckDB and polars scan, compaction, row-level changes); statistics and
pruning keep working across versions (also from version-2 manifests); time travel
reads each version with its own schema; bad changes are refused and change nothing.
"""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog import InvalidArgumentError, SchemaMismatchError
from lakelog.io.schema import DROPPED_KEY, merge_schema, widens

V0 = pa.schema([("id", pa.int32()), ("score", pa.float32()), ("p", pa.string())])


def _v0(ids: list[int], p: str = "a") -> pa.Table:
    return pa.table(
        {"id": ids, "score": [float(i) / 2 for i in ids], "p": [p] * len(ids)}, schema=V0
    )


def _evolved(tmp_path: Path, **props: Any) -> lakelog.Table:
    """v0: create; v1: rows 0-9; v2: merge adds `name`, widens id; v3: add `tag`;
    v4: widen score; v5: rows 20-24 in the latest schema."""
    t = lakelog.create_table(str(tmp_path / "t"), V0, partition_by=["p"], properties=props)
    t.append(_v0(list(range(10))))
    wide = pa.table(
        {
            "id": pa.array(range(10, 15), pa.int64()),
            "score": pa.array([5.0] * 5, pa.float32()),
            "p": ["b"] * 5,
            "name": [f"n{i}" for i in range(10, 15)],
        }
    )
    t.append(wide, schema_mode="merge")
    t.add_columns(pa.field("tag", pa.string()))
    t.widen_column("score", pa.float64())
    t.append(
        pa.table(
            {
                "id": pa.array(range(20, 25), pa.int64()),
                "score": [1.5] * 5,
                "p": ["a"] * 5,
                "name": ["late"] * 5,
                "tag": ["x", None, "y", None, "x"],
            }
        )
    )
    return t


def test_old_files_read_with_nulls_and_widened_values(tmp_path: Path) -> None:
    t = _evolved(tmp_path)
    snap = t.snapshot()
    assert snap.schema.names == ["id", "score", "p", "name", "tag"]
    assert snap.schema.field("id").type == pa.int64()
    assert snap.schema.field("score").type == pa.float64()
    rows = {r["id"]: r for r in snap.to_arrow().to_pylist()}
    assert sorted(rows) == [*range(15), *range(20, 25)]
    assert rows[3] == {"id": 3, "score": 1.5, "p": "a", "name": None, "tag": None}
    assert rows[12] == {"id": 12, "score": 5.0, "p": "b", "name": "n12", "tag": None}
    assert rows[22]["tag"] == "y"
    # the files were not rewritten: each keeps the types it was written with
    stored = {pq.read_schema(t.storage.full(f.path)).field("id").type for f in snap.files()}
    assert stored == {pa.int32(), pa.int64()}
    batches = list(snap.to_batches(columns=["name", "id"], batch_size=4))
    assert sum(b.num_rows for b in batches) == 20
    assert all(b.schema.names == ["name", "id"] for b in batches)


def test_time_travel_reads_each_version_with_its_schema(tmp_path: Path) -> None:
    t = _evolved(tmp_path)
    v1 = t.snapshot(1).to_arrow()
    assert v1.schema == V0 and v1.num_rows == 10
    v2 = t.snapshot(2)
    assert v2.schema.names == ["id", "score", "p", "name"]
    assert v2.schema.field("id").type == pa.int64()
    assert v2.schema.field("score").type == pa.float32()
    assert v2.to_arrow().num_rows == 15
    assert t.snapshot(3).schema.names[-1] == "tag"
    assert t.snapshot(4).schema.field("score").type == pa.float64()
    ops = [h.operation for h in reversed(t.history())]
    assert ops == ["CREATE TABLE", "APPEND", "APPEND", "ADD COLUMNS", "WIDEN COLUMN", "APPEND"]
    merged = t.history()[3]
    assert merged.parameters == {
        "schema_mode": "merge",
        "added_columns": ["name"],
        "widened_columns": ["id"],
    }


@pytest.mark.parametrize("interval", [100, 2], ids=["replay", "v2-manifests"])
def test_pruning_keeps_working_across_schema_versions(tmp_path: Path, interval: int) -> None:
    t = _evolved(tmp_path, **{"lakelog.manifest_interval": interval})
    snap = t.refresh().snapshot()
    assert snap.num_files == 3
    # a widened column: the int32 stats of old files bound the int64 values
    files = snap.files("id >= 20")
    assert len(files) == 1 and files[0].num_rows == 5
    assert snap.to_arrow(filter="id >= 20").num_rows == 5
    assert len(snap.files("score > 4.0")) == 2  # old float32 stats (up to 4.5) and 5.0
    assert sorted(snap.to_arrow(filter="score > 4.0").column("id").to_pylist()) == [
        9,
        *range(10, 15),
    ]
    # a new column: files written before have no stats for it and are kept
    assert snap.to_arrow(filter="tag = 'x'").column("id").to_pylist() == [20, 24]
    assert snap.to_arrow(filter="name is null").num_rows == 10 + 0
    assert snap.to_arrow(filter="tag is null").num_rows == 10 + 5 + 2
    assert sorted(snap.to_arrow(filter="name = 'n11' or id = 3").column("id").to_pylist()) == [
        3,
        11,
    ]
    ds_ = snap.dataset("tag = 'x'")
    assert ds_.to_table(filter=pc.field("tag") == "x").num_rows == 2


def test_duckdb_and_polars_read_the_evolved_dataset(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    t = _evolved(tmp_path)
    dataset = t.snapshot().dataset()
    con = duckdb.connect()
    con.register("events", dataset)
    got = con.execute(
        "select count(*), count(name), count(tag), sum(id), max(score) from events"
    ).fetchone()
    assert got == (20, 10, 3, sum(range(15)) + sum(range(20, 25)), 5.0)
    frame = pl.scan_pyarrow_dataset(dataset).filter(pl.col("name").is_null()).collect()
    assert frame.height == 10 and frame.schema["id"] == pl.Int64


def test_compaction_and_row_changes_read_old_files(tmp_path: Path) -> None:
    t = _evolved(tmp_path)
    before = sorted(t.snapshot().to_arrow().to_pylist(), key=lambda r: r["id"])
    report = t.compact(min_input_files=2)
    assert report.compacted_file_count >= 2
    after = sorted(t.refresh().snapshot().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert after == before
    t.update("id = 3", set={"name": "three"})
    t.delete("id = 21")
    rows = {r["id"]: r for r in t.snapshot().to_arrow().to_pylist()}
    assert rows[3]["name"] == "three" and 21 not in rows and rows[4]["name"] is None
    r = t.merge(
        pa.table(
            {
                "id": pa.array([4, 99], pa.int64()),
                "score": [0.5, 9.0],
                "p": ["a", "a"],
                "name": ["four", "new"],
                "tag": [None, "z"],
            }
        ),
        on="id",
    )
    assert (r.updated_rows, r.inserted_rows) == (1, 1)
    rows = {r["id"]: r for r in t.snapshot().to_arrow().to_pylist()}
    assert rows[4]["name"] == "four" and rows[99]["tag"] == "z"


def test_strict_append_converts_narrower_types_and_refuses_the_rest(tmp_path: Path) -> None:
    t = lakelog.create_table(
        str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("v", pa.float64())])
    )
    t.append(pa.table({"id": pa.array([1], pa.int32()), "v": pa.array([1.5], pa.float32())}))
    assert t.snapshot().to_arrow().schema.field("id").type == pa.int64()
    t.append(pa.table({"id": [2], "v": pa.nulls(1)}))  # a column of nulls fits any type
    with pytest.raises(SchemaMismatchError, match="unexpected columns"):
        t.append(pa.table({"id": [3], "v": [1.0], "extra": [1]}))
    with pytest.raises(SchemaMismatchError, match="missing column 'v'"):
        t.append(pa.table({"id": [3]}))
    assert t.refresh().version == 2 and t.schema.names == ["id", "v"]


def test_merge_append_fills_missing_columns_and_refuses_incompatible_types(
    tmp_path: Path,
) -> None:
    root = tmp_path / "t"
    t = lakelog.create_table(
        str(root), pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.float64())])
    )
    t.append(pa.table({"id": [1]}), schema_mode="merge")  # `v` nullable: written as null
    assert t.snapshot().to_arrow().to_pylist() == [{"id": 1, "v": None}]
    assert t.version == 1  # no schema change, no metadata action
    before = sorted(p.name for p in root.rglob("*.parquet"))
    bad = {
        "non-nullable missing": pa.table({"v": [1.0]}),
        "narrowing": pa.table({"id": [1], "v": pa.array([1], pa.int64())}),
        "string for int": pa.table({"id": ["x"], "v": [1.0]}),
        "null-typed new column": pa.table({"id": [1], "v": [1.0], "n": pa.nulls(1)}),
    }
    messages = {
        "non-nullable missing": "missing column 'id', which is non-nullable",
        "narrowing": "the table has double, the data int64",
        "string for int": "the table has int64, the data string",
        "null-typed new column": "new column 'n' has type null",
    }
    for name, data in bad.items():
        with pytest.raises(SchemaMismatchError, match=messages[name]):
            t.append(data, schema_mode="merge")
    with pytest.raises(InvalidArgumentError, match="schema_mode 'strict'"):
        t.append(pa.table({"id": [1]}), schema_mode="loose")  # type: ignore[arg-type]
    assert t.refresh().version == 1
    assert sorted(p.name for p in root.rglob("*.parquet")) == before
    # a new non-nullable data column is added nullable: older files have no values
    t.append(
        pa.table(
            {"id": [2], "w": pa.array([7], pa.int8())},
            schema=pa.schema([("id", pa.int64()), pa.field("w", pa.int8(), nullable=False)]),
        ),
        schema_mode="merge",
    )
    assert t.schema.field("w").nullable


def test_widening_rules() -> None:
    ok = [
        (pa.int8(), pa.int16()),
        (pa.int16(), pa.int64()),
        (pa.int32(), pa.float64()),
        (pa.uint8(), pa.int16()),
        (pa.uint32(), pa.uint64()),
        (pa.float16(), pa.float64()),
        (pa.float32(), pa.float64()),
        (pa.decimal128(5, 2), pa.decimal128(8, 3)),
        (pa.decimal128(5, 2), pa.decimal256(40, 2)),
        (pa.string(), pa.large_string()),
    ]
    refused = [
        (pa.int64(), pa.int32()),
        (pa.int64(), pa.float64()),
        (pa.int32(), pa.float32()),
        (pa.uint32(), pa.int32()),
        (pa.uint64(), pa.int64()),
        (pa.date32(), pa.timestamp("us")),
        (pa.timestamp("ms"), pa.timestamp("us")),
        (pa.decimal128(5, 2), pa.decimal128(5, 3)),
        (pa.int32(), pa.string()),
        (pa.int32(), pa.int32()),
    ]
    assert all(widens(a, b) for a, b in ok)
    assert not any(widens(a, b) for a, b in refused)


def test_widen_column_values_and_refusals(tmp_path: Path) -> None:
    schema = pa.schema(
        [("k", pa.int16()), ("d", pa.decimal128(5, 2)), ("day", pa.date32()), ("u", pa.uint8())]
    )
    t = lakelog.create_table(str(tmp_path / "t"), schema, partition_by=["k"])
    t.append(
        pa.table(
            {
                "k": pa.array([1, 2], pa.int16()),
                "d": [decimal.Decimal("1.25"), decimal.Decimal("-3.10")],
                "day": [dt.date(2024, 1, 1)] * 2,
                "u": pa.array([200, 7], pa.uint8()),
            },
            schema=schema,
        )
    )
    t.widen_column("k", pa.int64())
    t.widen_column("d", pa.decimal128(12, 4))
    t.widen_column("u", pa.int32())
    got = t.snapshot().to_arrow().sort_by("k")
    assert got.schema.field("k").type == pa.int64()
    assert got.column("d").to_pylist() == [decimal.Decimal("1.2500"), decimal.Decimal("-3.1000")]
    assert got.column("u").to_pylist() == [200, 7]
    assert t.snapshot().to_arrow(filter="k = 2").column("u").to_pylist() == [7]
    version = t.version
    with pytest.raises(SchemaMismatchError, match="days"):
        t.widen_column("day", pa.timestamp("us"))
    with pytest.raises(SchemaMismatchError, match="expected a widening"):
        t.widen_column("u", pa.int16())
    with pytest.raises(InvalidArgumentError, match="already"):
        t.widen_column("k", pa.int64())
    with pytest.raises(InvalidArgumentError, match="unknown 'nope'"):
        t.widen_column("nope", pa.int64())
    assert t.refresh().version == version


def test_add_and_drop_column_refusals(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), V0, partition_by=["p"])
    t.append(_v0([1, 2]))
    cases = [
        (lambda: t.add_columns(pa.field("x", pa.int64(), nullable=False)), "non-nullable"),
        (
            lambda: t.add_columns([pa.field("x", pa.int64()), pa.field("x", pa.int8())]),
            "more than once",
        ),
        (lambda: t.add_columns({"id": pa.int64()}), "already in the table"),
        (lambda: t.add_columns({"x": "int"}), "expected a pyarrow type"),
        (lambda: t.add_columns([]), "expected columns to add"),
        (lambda: t.drop_columns("p"), "partition columns"),
        (lambda: t.drop_columns(["nope"]), "unknown"),
        (lambda: t.drop_columns(["id", "score"]), "at least one non-partition column"),
    ]
    for call, match in cases:
        with pytest.raises((InvalidArgumentError, SchemaMismatchError), match=match):
            call()
    assert t.refresh().version == 1


def test_dropped_name_comes_back_only_once_no_file_holds_it(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), V0)
    t.append(_v0([1, 2]))
    t.append(_v0([3]))
    t.drop_columns("score")
    assert t.snapshot().to_arrow().schema.names == ["id", "p"]
    assert DROPPED_KEY in (t.schema.metadata or {})
    for again in (
        lambda: t.add_columns({"score": pa.string()}),
        lambda: t.append(pa.table({"id": [4], "p": ["a"], "score": ["hi"]}), schema_mode="merge"),
    ):
        with pytest.raises(SchemaMismatchError, match="would bring them back") as info:
            again()
        assert "2 file(s)" in str(info.value)
    # rewritten without the dropped column, no file holds it: the name is free again
    t.overwrite(t.snapshot().to_arrow())
    t.add_columns({"score": pa.string()})
    assert t.schema.metadata is None or DROPPED_KEY not in t.schema.metadata
    assert t.snapshot().to_arrow().column("score").to_pylist() == [None, None, None]
    # the old values stay readable where they belong: in the versions before the drop
    assert sorted(t.snapshot(2).to_arrow().column("score").to_pylist()) == [0.5, 1.0, 1.5]


def test_merge_schema_is_pure_and_keeps_the_table_order() -> None:
    table = pa.schema([("a", pa.int32()), ("b", pa.string())])
    data = pa.schema([("c", pa.float64()), ("b", pa.string()), ("a", pa.int64())])
    merged = merge_schema(table, data)
    assert merged.names == ["a", "b", "c"] and merged.field("a").type == pa.int64()
    assert merge_schema(table, pa.schema([("a", pa.int8())])) is table


def test_dropping_a_bloom_filtered_column_drops_it_from_the_property(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int32()), ("code", pa.string())])
    bloom = "lakelog.parquet.bloom_filter_columns"
    t = lakelog.create_table(str(tmp_path / "t"), schema, properties={bloom: "id,code"})
    t.drop_columns("code")
    assert t.properties[bloom] == "id"
    t.append(pa.table({"id": pa.array([1, 2], pa.int32())}))
    with pytest.raises(InvalidArgumentError, match="bloom-filterable"):
        t.widen_column("id", pa.float64())  # not worth a filter: remove it from the list first
