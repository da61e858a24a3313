"""Nested schema evolution: fields added to structs (top level, list elements, map
values), nested fields widened, dropped and added back, and merge appends that do it
from data (docs/format.md, "Column ids, renames and nested fields").

Every test keeps a plain model of the rows of each version and checks that every reader
returns exactly them, with nulls for fields added after a file was written: time travel
through ``to_arrow``, DuckDB, polars and pandas, then compaction, clustering, a delete
and an update with a predicate on a top-level column, and the change feed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog import InvalidArgumentError, SchemaMismatchError
from lakelog.log import mapping

S = pa.struct([("x", pa.int32()), ("y", pa.string())])
E = pa.struct([("a", pa.int32())])
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("s", S),
        ("events", pa.list_(E)),
        ("tags", pa.map_(pa.string(), E)),
    ]
)
CDF = {"lakelog.change_data_feed": "true"}


# -- the model -----------------------------------------------------------------------------


def shape(value: Any, t: pa.DataType) -> Any:
    """``value`` (a model value: dicts may lack fields, or hold dropped ones) as a reader
    of type ``t`` returns it: missing fields null, others left out."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        return {f.name: shape(value.get(f.name), f.type) for f in t}
    if pa.types.is_map(t):
        return [(k, shape(v, t.item_type)) for k, v in value]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [shape(v, t.value_type) for v in value]
    return value


def shaped(rows: list[dict[str, Any]], schema: pa.Schema) -> list[dict[str, Any]]:
    out = [{f.name: shape(r.get(f.name), f.type) for f in schema} for r in rows]
    return sorted(out, key=lambda r: r["id"])


def forget(rows: list[dict[str, Any]], path: Sequence[str]) -> None:
    """Drop the field at ``path`` from the model rows: its values never come back."""

    def walk(value: Any, rest: Sequence[str]) -> None:
        if value is None:
            return
        head, tail = rest[0], rest[1:]
        if head == "element":
            for v in value:
                walk(v, tail)
        elif head == "value":
            for _, v in value:
                walk(v, tail)
        elif not tail:
            value.pop(head, None)
        else:
            walk(value.get(head), tail)

    for r in rows:
        walk(r, path)


class Model:
    """The rows of the table after each version (only the versions recorded)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.versions: dict[int, list[dict[str, Any]]] = {}

    def record(self, version: int) -> None:
        self.versions[version] = copy.deepcopy(self.rows)


def first_rows(ids: Sequence[int]) -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "s": None if i % 4 == 3 else {"x": i, "y": f"y{i}"},
            "events": [{"a": i}, {"a": -i}] if i % 2 else [],
            "tags": None if i % 3 == 2 else [("k", {"a": i * 10})],
        }
        for i in ids
    ]


def write_rows(t: lakelog.Table, rows: list[dict[str, Any]], **kw: Any) -> int:
    schema = mapping.strip(t.schema)
    return t.append(pa.Table.from_pylist(shaped(rows, schema), schema=schema), **kw).version


# -- reading every way ---------------------------------------------------------------------


def read_all_ways(snap: lakelog.Snapshot) -> dict[str, list[dict[str, Any]]]:
    """The snapshot's rows through every reader, each in the snapshot's schema."""
    schema = mapping.strip(snap.schema)
    got = snap.to_arrow()
    assert got.schema.equals(schema), (got.schema, schema)
    con = duckdb.connect()
    rel = snap.to_duckdb(con, name="t")
    dk = rel.arrow()
    dk = dk.read_all() if isinstance(dk, pa.RecordBatchReader) else dk
    pl = snap.to_polars().collect().to_arrow()
    pd = snap.to_pandas()
    ways = {
        "arrow": got,
        "batches": pa.Table.from_batches(list(snap.to_batches(batch_size=3)), schema=schema),
        "duckdb": dk.cast(schema),
        "polars": pl.cast(schema),
        "pandas": pa.Table.from_pandas(pd, schema=schema, preserve_index=False),
    }
    return {k: sorted(v.to_pylist(), key=lambda r: r["id"]) for k, v in ways.items()}


def check_versions(t: lakelog.Table, model: Model) -> None:
    """Every recorded version reads as the model's rows, through every reader."""
    for version, rows in model.versions.items():
        snap = t.snapshot(version)
        want = shaped(rows, mapping.strip(snap.schema))
        for way, got in read_all_ways(snap).items():
            assert got == want, (version, way)


def check_maintenance(t: lakelog.Table, model: Model) -> None:
    """Compaction, clustering, a delete and an update (predicates on ``id``) keep the
    model's rows; the change feed of the row-level changes gives their rows."""
    schema = mapping.strip(t.schema)
    want = shaped(model.rows, schema)
    files = t.snapshot().num_files
    report = t.compact(min_input_files=2)
    assert report.compacted_file_count == files and t.snapshot().num_files == 1
    assert sorted(t.snapshot().to_arrow().to_pylist(), key=lambda r: r["id"]) == want
    t.optimize(sort_by=["id"], incremental=False)
    assert sorted(t.snapshot().to_arrow().to_pylist(), key=lambda r: r["id"]) == want
    before = t.version
    victim = want[0]["id"]
    t.delete(f"id = {victim}")
    model.rows = [r for r in model.rows if r["id"] != victim]
    changed = want[-1]["id"]
    t.update(f"id = {changed}", set={"id": changed + 1000})
    for r in model.rows:
        if r["id"] == changed:
            r["id"] = changed + 1000
    model.record(t.version)
    check_versions(t, model)
    feed = t.changes(before + 1).to_arrow()
    kinds = {
        (r["_change_type"], r["id"]): {k: r[k] for k in schema.names} for r in feed.to_pylist()
    }
    after = {r["id"]: r for r in shaped(model.rows, schema)}
    old = {r["id"]: r for r in want}
    assert kinds == {
        ("delete", victim): old[victim],
        ("update_preimage", changed): old[changed],
        ("update_postimage", changed + 1000): after[changed + 1000],
    }


# -- adding fields -------------------------------------------------------------------------


def test_add_fields_to_a_struct_a_list_element_and_a_map_value(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, properties=CDF)
    m = Model()
    m.rows = first_rows(range(8))
    m.record(write_rows(t, m.rows))
    assert not mapping.is_mapped(t.schema)
    added = t.add_columns(
        {
            ("s", "z"): pa.float64(),
            ("events", "element", "b"): pa.string(),
            ("tags", "value", "c"): pa.int8(),
        }
    )
    m.record(added.version)
    snap = t.snapshot()
    assert snap.schema.field("s").type.names == ["x", "y", "z"]
    assert snap.schema.field("events").type.value_type.names == ["a", "b"]
    assert snap.schema.field("tags").type.item_type.names == ["a", "c"]
    # nested changes turn column ids on: every field has one, the new ones the next
    assert t.properties["lakelog.column_mapping"] == "true"
    assert snap.metadata.format_version == 7
    ids = [mapping.column_id(f) for _, f in mapping.walk(snap.schema)]
    assert None not in ids and len(set(ids)) == len(ids)
    z = snap.schema.field("s").type.field("z")
    assert mapping.physical_name(z) == "z"
    assert t.history(limit=1)[0].parameters["columns"] == [
        "s.z: double",
        "events[].b: string",
        "tags{}.c: int8",
    ]
    new = [
        {
            "id": i,
            "s": {"x": i, "y": None, "z": i / 2},
            "events": [{"a": i, "b": f"b{i}"}],
            "tags": [("n", {"a": 1, "c": i})],
        }
        for i in range(8, 12)
    ]
    m.rows += new
    m.record(write_rows(t, new))
    # the old file was not rewritten: it still has the old shape
    old_file = t.snapshot(1).files()[0]
    stored = pq.read_schema(t.storage.full(old_file.path))
    assert stored.field("s").type.names == ["x", "y"]
    check_versions(t, m)
    assert t.snapshot().to_arrow(filter="id >= 10").num_rows == 2
    check_maintenance(t, m)


def test_add_field_by_list_and_map_arrow_names(tmp_path: Path) -> None:
    """A list's element may be named by Arrow's name for it ("item") too."""
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    t.add_columns({("events", "item", "b"): pa.int64(), ("tags", "value", "d"): pa.bool_()})
    assert t.schema.field("events").type.value_type.names == ["a", "b"]
    assert t.schema.field("tags").type.item_type.names == ["a", "d"]


def test_top_level_and_nested_adds_in_one_commit(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    v = t.add_columns({"top": pa.string(), ("s", "z"): pa.int16()}).version
    assert v == 1 and t.schema.names[-1] == "top"
    assert t.schema.field("s").type.names == ["x", "y", "z"]


# -- widening --------------------------------------------------------------------------------


def test_widen_nested_int32_to_int64(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, properties=CDF)
    m = Model()
    m.rows = first_rows(range(6))
    m.record(write_rows(t, m.rows))
    m.record(t.widen_column(("s", "x"), pa.int64()).version)
    m.record(t.widen_column(("events", "element", "a"), pa.int64()).version)
    m.record(t.widen_column(("tags", "value", "a"), pa.int64()).version)
    snap = t.snapshot()
    assert snap.schema.field("s").type.field("x").type == pa.int64()
    assert snap.schema.field("events").type.value_type.field("a").type == pa.int64()
    assert snap.schema.field("tags").type.item_type.field("a").type == pa.int64()
    # time travel: each version keeps its own types
    assert t.snapshot(1).schema.field("s").type.field("x").type == pa.int32()
    assert t.snapshot(2).schema.field("events").type.value_type.field("a").type == pa.int32()
    # ids survive the change of type
    assert mapping.column_id(snap.schema.field("s").type.field("x")) is not None
    assert [h.operation for h in t.history(limit=3)] == ["WIDEN COLUMN"] * 3
    assert t.history(limit=1)[0].parameters == {
        "column": "tags{}.a",
        "from": "int32",
        "to": "int64",
    }
    big = 2**40
    new = [
        {
            "id": 100,
            "s": {"x": big, "y": "big"},
            "events": [{"a": big}],
            "tags": [("b", {"a": -big})],
        }
    ]
    m.rows += new
    m.record(write_rows(t, new))
    check_versions(t, m)
    assert t.snapshot().to_arrow(filter="id = 100").to_pylist()[0]["s"]["x"] == big
    check_maintenance(t, m)


def test_widen_a_struct_column_as_a_whole(tmp_path: Path) -> None:
    """widen_column of a struct column to a struct with a wider field and a new one: a
    nested change (ids kept for the fields it had)."""
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    m = Model()
    m.rows = first_rows(range(4))
    m.record(write_rows(t, m.rows))
    before = t.snapshot().schema
    wider = pa.struct([("x", pa.int64()), ("y", pa.large_string()), ("w", pa.date32())])
    m.record(t.widen_column("s", wider).version)
    s = t.schema.field("s")
    assert s.type == wider
    assert t.properties["lakelog.column_mapping"] == "true"
    enabled = mapping.enable(before)
    assert mapping.column_id(s.type.field("x")) == mapping.column_id(
        enabled.field("s").type.field("x")
    )
    assert mapping.physical_name(s.type.field("w")) == "w"
    m.rows.append({"id": 9, "s": {"x": 2**33, "y": "l", "w": None}, "events": [], "tags": []})
    m.record(write_rows(t, m.rows[-1:]))
    check_versions(t, m)


# -- dropping and adding back --------------------------------------------------------------


def test_drop_nested_field_then_add_it_back(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, properties=CDF)
    t.add_columns({("events", "element", "b"): pa.string(), ("tags", "value", "c"): pa.int8()})
    m = Model()
    m.rows = first_rows(range(8))
    for r in m.rows:
        for e in r["events"]:
            e["b"] = f"b{e['a']}"
        for _, v in r["tags"] or []:
            v["c"] = 7
    m.record(write_rows(t, m.rows))
    dropped = t.drop_columns([("s", "y"), ("events", "element", "b"), ("tags", "value", "a")])
    for path in (("s", "y"), ("events", "element", "b"), ("tags", "value", "a")):
        forget(m.rows, path)
    m.record(dropped.version)
    snap = t.snapshot()
    assert snap.schema.field("s").type.names == ["x"]
    assert snap.schema.field("events").type.value_type.names == ["a"]
    assert snap.schema.field("tags").type.item_type.names == ["c"]
    assert sorted(mapping.dropped_fields(snap.schema)) == [
        ["events", "item", "b"],
        ["s", "y"],
        ["tags", "value", "a"],
    ]
    assert t.history(limit=1)[0].parameters == {"columns": ["s.y", "events[].b", "tags{}.a"]}
    # time travel before the drop still reads the values
    assert t.snapshot(dropped.version - 1).to_arrow().to_pylist()[0]["s"]["y"] == "y0"
    # added back: a new column id and physical name, so the old values stay unread
    back = t.add_columns(
        {
            ("s", "y"): pa.string(),
            ("events", "element", "b"): pa.string(),
            ("tags", "value", "a"): pa.int64(),
        }
    )
    m.record(back.version)
    y = t.schema.field("s").type.field("y")
    assert mapping.physical_name(y).startswith("col-")
    old_y = mapping.enable(t.snapshot(1).schema).field("s").type.field("y")
    assert mapping.column_id(y) != mapping.column_id(old_y)
    assert t.snapshot().to_arrow(columns=["s"]).column("s").to_pylist()[0] == {
        "x": 0,
        "y": None,
    }
    new = [
        {
            "id": 50,
            "s": {"x": 50, "y": "again"},
            "events": [{"a": 5, "b": "B"}],
            "tags": [("q", {"c": 1, "a": 2**40})],
        }
    ]
    m.rows += new
    m.record(write_rows(t, new))
    check_versions(t, m)
    check_maintenance(t, m)
    # after compaction rewrote every file: still none of the old values
    got = t.snapshot().to_arrow().to_pylist()
    assert {r["s"]["y"] for r in got if r["s"]} == {None, "again"}
    # a plain pyarrow Dataset would read the old values by name: refused
    with pytest.raises(SchemaMismatchError, match="physical names"):
        t.snapshot().dataset()


def test_drop_keeps_a_field_in_its_struct(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    with pytest.raises(SchemaMismatchError, match="'events\\[\\]' to keep at least one field"):
        t.drop_columns([("events", "element", "a")])
    with pytest.raises(SchemaMismatchError, match="'s' to keep at least one field"):
        t.drop_columns([("s", "x"), ("s", "y")])
    with pytest.raises(SchemaMismatchError, match="a list's element"):
        t.drop_columns([("events", "element")])
    with pytest.raises(SchemaMismatchError, match="a map's key"):
        t.drop_columns([("tags", "key")])
    assert t.version == 0
    # dropping the whole column with a field of it: the column goes
    t.drop_columns(["s", ("s", "x")])
    assert t.schema.names == ["id", "events", "tags"]
    assert not mapping.is_mapped(t.schema)


# -- merge appends -------------------------------------------------------------------------


def test_merge_append_adds_and_widens_nested_fields(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, properties=CDF)
    m = Model()
    m.rows = first_rows(range(6))
    m.record(write_rows(t, m.rows))
    s2 = pa.struct([("y", pa.string()), ("x", pa.int64()), ("z", pa.list_(pa.int16()))])
    e2 = pa.struct([("b", pa.bool_()), ("a", pa.int32())])
    v2 = pa.struct([("a", pa.int32()), ("c", pa.string())])
    data_schema = pa.schema(
        [
            ("id", pa.int64()),
            ("s", s2),
            ("events", pa.list_(e2)),
            ("tags", pa.map_(pa.string(), v2)),
        ]
    )
    new = [
        {
            "id": 20 + i,
            "s": {"y": "m", "x": 2**35 + i, "z": [i, None]},
            "events": [{"b": True, "a": i}],
            "tags": [("t", {"a": i, "c": "c"})],
        }
        for i in range(3)
    ]
    got = t.append(pa.Table.from_pylist(new, schema=data_schema), schema_mode="merge")
    m.rows += new
    m.record(got.version)
    snap = t.snapshot()
    # new nested fields go at their struct's end, in the data's order; x widened
    assert snap.schema.field("s").type == pa.struct(
        [("x", pa.int64()), ("y", pa.string()), ("z", pa.list_(pa.int16()))]
    )
    assert snap.schema.field("events").type.value_type.names == ["a", "b"]
    assert snap.schema.field("tags").type.item_type.names == ["a", "c"]
    assert t.properties["lakelog.column_mapping"] == "true"
    ids = [mapping.column_id(f) for _, f in mapping.walk(snap.schema)]
    assert None not in ids and len(set(ids)) == len(ids)
    assert t.history(limit=1)[0].parameters == {
        "schema_mode": "merge",
        "nested_fields": ["s.x", "s.z", "events[].b", "tags{}.c"],
    }
    # data on the old shape keeps merging in (missing nested fields are nulls)
    older = first_rows([40])
    m.rows += older
    m.record(t.append(pa.Table.from_pylist(older, schema=SCHEMA), schema_mode="merge").version)
    assert t.history(limit=1)[0].parameters == {}
    # strict mode takes the old shape too, but not a nested field the table lacks
    older = first_rows([41])
    m.rows += older
    m.record(t.append(pa.Table.from_pylist(older, schema=SCHEMA)).version)
    extra = pa.schema([("id", pa.int64()), ("s", pa.struct([("x", pa.int64()), ("q", pa.int8())]))])
    with pytest.raises(SchemaMismatchError, match=r"unexpected fields \['s.q'\]"):
        t.append(pa.Table.from_pylist([{"id": 1, "s": {"x": 1, "q": 1}}], schema=extra))
    check_versions(t, m)
    check_maintenance(t, m)


def test_merge_append_readds_a_dropped_nested_field_under_a_new_name(tmp_path: Path) -> None:
    """A merge bringing back a dropped nested name: its files store it under the new
    physical name, so both the new values and the absence of the old ones read right."""
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    m = Model()
    m.rows = first_rows(range(4))
    m.record(write_rows(t, m.rows))
    m.record(t.drop_columns([("s", "y")]).version)
    forget(m.rows, ("s", "y"))
    new = first_rows([10, 11])
    m.rows += copy.deepcopy(new)
    m.record(t.append(pa.Table.from_pylist(new, schema=SCHEMA), schema_mode="merge").version)
    y = t.schema.field("s").type.field("y")
    assert mapping.physical_name(y).startswith("col-")
    added = [
        f for f in t.snapshot().files() if f.path not in {g.path for g in t.snapshot(1).files()}
    ]
    stored = pq.read_schema(t.storage.full(added[0].path)).field("s").type
    assert stored.names == ["x", mapping.physical_name(y)]
    check_versions(t, m)


# -- refusals ------------------------------------------------------------------------------


def _refused(t: lakelog.Table, change: Callable[[], Any], error: type, match: str) -> None:
    before = t.refresh().version
    with pytest.raises(error, match=match):
        change()
    assert t.refresh().version == before


def test_refusals_name_the_field_path(tmp_path: Path) -> None:
    deep = pa.struct([("items", pa.list_(pa.struct([("x", pa.int32())])))])
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("s", deep),
            ("m", pa.map_(pa.string(), pa.struct([("v", pa.int8())]))),
        ]
    )
    t = lakelog.create_table(str(tmp_path / "t"), schema)
    t.append(pa.Table.from_pylist([{"id": 1, "s": {"items": [{"x": 1}]}, "m": []}], schema=schema))
    cases: list[tuple[Callable[[], Any], type, str]] = [
        # narrowing, or a type that is not a widening
        (
            lambda: t.widen_column(("s", "items", "element", "x"), pa.int16()),
            SchemaMismatchError,
            r"field 's.items\[\].x'",
        ),
        (
            lambda: t.widen_column(("s", "items", "element", "x"), pa.float32()),
            SchemaMismatchError,
            r"s.items\[\].x",
        ),
        (lambda: t.widen_column(("m", "value", "v"), pa.string()), SchemaMismatchError, r"m\{\}.v"),
        # map keys never change
        (
            lambda: t.widen_column(("m", "key"), pa.large_string()),
            SchemaMismatchError,
            r"map's key",
        ),
        (lambda: t.add_columns({("m", "key", "z"): pa.int8()}), SchemaMismatchError, r"map keys"),
        # a path through something that has no fields
        (
            lambda: t.add_columns({("id", "z"): pa.int8()}),
            SchemaMismatchError,
            r"add field 'id.z' to, found 'id' of type int64",
        ),
        (
            lambda: t.add_columns({("s", "items", "z"): pa.int8()}),
            SchemaMismatchError,
            r"'element'",
        ),
        (
            lambda: t.add_columns({("s", "items", "element", "x", "q"): pa.int8()}),
            SchemaMismatchError,
            r"found 's.items\[\].x' of type int32",
        ),
        # unknown names, taken names, null types
        (
            lambda: t.add_columns({("s", "nope", "z"): pa.int8()}),
            InvalidArgumentError,
            r"unknown 'nope' \(in path 's.nope.z'\)",
        ),
        (
            lambda: t.add_columns({("s", "items", "element", "x"): pa.int8()}),
            SchemaMismatchError,
            r"'x' already in it",
        ),
        (
            lambda: t.add_columns({("s", "z"): pa.null()}),
            InvalidArgumentError,
            r"'s.z' has type null",
        ),
        (lambda: t.drop_columns([("s", "gone")]), InvalidArgumentError, r"unknown 'gone'"),
        (
            lambda: t.widen_column(("nope", "x"), pa.int64()),
            InvalidArgumentError,
            r"unknown 'nope'",
        ),
        # a struct widened by dropping or reordering fields, or a non-nullable new one
        (
            lambda: t.widen_column("s", pa.struct([("other", pa.int8())])),
            SchemaMismatchError,
            r"\['s.items'\] dropped",
        ),
        (
            lambda: t.widen_column(
                "s", pa.struct([deep.field(0), pa.field("n", pa.int8(), nullable=False)])
            ),
            SchemaMismatchError,
            r"new field 's.n' is non-nullable",
        ),
        (
            lambda: t.widen_column(("s", "items"), pa.list_(pa.int32())),
            SchemaMismatchError,
            r"s.items",
        ),
        # a merge whose data narrows or changes a nested type
        (
            lambda: t.append(
                pa.Table.from_pylist(
                    [{"id": 2, "s": {"items": [{"x": "a"}]}}],
                    schema=pa.schema(
                        [
                            ("id", pa.int64()),
                            (
                                "s",
                                pa.struct([("items", pa.list_(pa.struct([("x", pa.string())])))]),
                            ),
                        ]
                    ),
                ),
                schema_mode="merge",
            ),
            SchemaMismatchError,
            r"field 's.items\[\].x': the table has int32, the data string",
        ),
        (
            lambda: t.append(
                pa.Table.from_pylist(
                    [{"id": 2, "m": [("k", {"v": 1, "n": None})]}],
                    schema=pa.schema(
                        [
                            ("id", pa.int64()),
                            (
                                "m",
                                pa.map_(
                                    pa.string(), pa.struct([("v", pa.int8()), ("n", pa.null())])
                                ),
                            ),
                        ]
                    ),
                ),
                schema_mode="merge",
            ),
            SchemaMismatchError,
            r"new field 'm\{\}.n' has type null",
        ),
        (
            lambda: t.append(
                pa.Table.from_pylist(
                    [{"id": 2, "m": [(1, {"v": 1})]}],
                    schema=pa.schema(
                        [
                            ("id", pa.int64()),
                            ("m", pa.map_(pa.int32(), pa.struct([("v", pa.int8())]))),
                        ]
                    ),
                ),
                schema_mode="merge",
            ),
            SchemaMismatchError,
            r"keys of column 'm'",
        ),
    ]
    for change, error, match in cases:
        _refused(t, change, error, match)
    assert not mapping.is_mapped(t.schema)


def test_nested_changes_race_and_retry(tmp_path: Path) -> None:
    """Two handles adding fields to the same struct: the loser is rebuilt on the new
    latest version and both fields land, each with its own id."""
    uri = str(tmp_path / "t")
    a = lakelog.create_table(uri, SCHEMA)
    b = lakelog.open_table(uri)
    a.add_columns({("s", "p"): pa.int8()})
    b.add_columns({("s", "q"): pa.int8()})  # b read version 0; rebuilt on version 1
    s = a.refresh().schema.field("s").type
    assert s.names == ["x", "y", "p", "q"]
    assert len({mapping.column_id(f) for f in s}) == 4
    assert a.properties["lakelog.column_mapping"] == "true"


# -- adopted files -------------------------------------------------------------------------


def test_adopted_files_with_nested_shapes(tmp_path: Path) -> None:
    """convert() takes the widest struct of its files (files lacking a nullable field
    read it as null); add_files() refuses a file holding a nested field the table lacks
    (it would never be read), and takes one lacking a nullable field."""
    root = tmp_path / "adopted"
    root.mkdir()
    narrow = pa.schema([("id", pa.int64()), ("s", pa.struct([("x", pa.int32())]))])
    wide = pa.schema(
        [("id", pa.int64()), ("s", pa.struct([("x", pa.int64()), ("y", pa.string())]))]
    )
    pq.write_table(
        pa.Table.from_pylist([{"id": 1, "s": {"x": 1}}], schema=narrow), root / "a.parquet"
    )
    pq.write_table(
        pa.Table.from_pylist([{"id": 2, "s": {"x": 2**40, "y": "w"}}], schema=wide),
        root / "b.parquet",
    )
    t = lakelog.convert(str(root))
    assert t.schema.field("s").type == wide.field("s").type
    rows = sorted(t.snapshot().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": 1, "s": {"x": 1, "y": None}}, {"id": 2, "s": {"x": 2**40, "y": "w"}}]
    extra = pa.schema([("id", pa.int64()), ("s", pa.struct([("x", pa.int64()), ("q", pa.int8())]))])
    pq.write_table(
        pa.Table.from_pylist([{"id": 3, "s": {"x": 3, "q": 1}}], schema=extra), root / "c.parquet"
    )
    with pytest.raises(SchemaMismatchError, match=r"'c.parquet': column 's' is struct<x: int64, q"):
        t.add_files(["c.parquet"])
    pq.write_table(
        pa.Table.from_pylist([{"id": 4, "s": {"x": 4}}], schema=narrow), root / "d.parquet"
    )
    t.add_files(["d.parquet"])
    assert t.snapshot().to_arrow(filter="id = 4").to_pylist() == [
        {"id": 4, "s": {"x": 4, "y": None}}
    ]
