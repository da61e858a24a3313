"""The pure rules of nested schema evolution (lakelog.io.schema): which nested types
read as which (``readable_as``, ``file_columns``, ``check_schema``), which widen
(``widens``), how a merge evolves them (``merge_schema``), and that refusals name the
field's path (``s.items[].x``). Property tests evolve random nested types the way the
table may and check the rules, and Arrow's cast that readers use, against a model.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog import SchemaMismatchError
from lakelog.io.schema import (
    check_schema,
    conform,
    file_columns,
    merge_schema,
    nested_changes,
    readable_as,
    widening_problems,
    widens,
)

WIDER = {
    pa.int8(): pa.int16(),
    pa.int16(): pa.int32(),
    pa.int32(): pa.int64(),
    pa.float32(): pa.float64(),
}
"""Strict widenings (``string`` -> ``large_string`` is one both ways, and data of either
fits a column of the other without a change: see the examples below)."""
LEAVES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.string(), pa.bool_()]
ID = b"lakelog.column_id"


# -- strategies ----------------------------------------------------------------------------


@st.composite
def nested_types(draw: st.DrawFn, depth: int = 0) -> pa.DataType:
    """A struct, possibly holding lists of structs and maps to structs."""
    n = draw(st.integers(1, 3))
    fields = []
    for i in range(n):
        kind = draw(
            st.sampled_from(["leaf", "leaf", "struct", "list", "map"])
            if depth < 2
            else st.just("leaf")
        )
        if kind == "leaf":
            t = draw(st.sampled_from(LEAVES))
        elif kind == "struct":
            t = draw(nested_types(depth + 1))
        elif kind == "list":
            t = pa.list_(draw(nested_types(depth + 1)))
        else:
            t = pa.map_(pa.string(), draw(nested_types(depth + 1)))
        fields.append(pa.field(f"f{depth}_{i}", t))
    return pa.struct(fields)


@st.composite
def evolutions(draw: st.DrawFn, t: pa.DataType, path: str) -> tuple[pa.DataType, list[str]]:
    """``t`` evolved as a table may evolve it (nullable fields added at a struct's end,
    leaves widened), and the paths of what changed (as :func:`nested_changes` names
    them)."""
    changed: list[str] = []
    if pa.types.is_struct(t):
        fields = []
        for f in t:
            p = f"{path}.{f.name}"
            new, sub = draw(evolutions(f.type, p))
            changed += sub
            fields.append(f.with_type(new))
        for j in range(draw(st.integers(0, 2 if path.count(".") < 3 else 0))):
            name = f"new{path.count('.')}_{j}"
            fields.append(pa.field(name, draw(st.sampled_from(LEAVES))))
            changed.append(f"{path}.{name}")
        return pa.struct(fields), changed
    if pa.types.is_list(t):
        new, sub = draw(evolutions(t.value_type, f"{path}[]"))
        return pa.list_(new), sub
    if pa.types.is_map(t):
        new, sub = draw(evolutions(t.item_type, f"{path}{{}}"))
        return pa.map_(pa.string(), new), sub
    if t in WIDER and draw(st.booleans()):
        return WIDER[t], [path]
    return t, []


def value_of(draw: st.DrawFn, t: pa.DataType) -> Any:
    if draw(st.integers(0, 5)) == 0:
        return None
    if pa.types.is_struct(t):
        return {f.name: value_of(draw, f.type) for f in t}
    if pa.types.is_list(t):
        return [value_of(draw, t.value_type) for _ in range(draw(st.integers(0, 2)))]
    if pa.types.is_map(t):
        return [(f"k{i}", value_of(draw, t.item_type)) for i in range(draw(st.integers(0, 2)))]
    if pa.types.is_integer(t):
        return draw(st.integers(-100, 100))
    if pa.types.is_floating(t):
        return draw(st.sampled_from([0.5, -1.25, 3.0]))
    if pa.types.is_boolean(t):
        return draw(st.booleans())
    return draw(st.sampled_from(["a", "bc", ""]))


def read_as(value: Any, t: pa.DataType) -> Any:
    """The model of reading ``value`` as ``t``: fields it lacks null, extra ones gone."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        return {f.name: read_as(value.get(f.name), f.type) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [read_as(v, t.value_type) for v in value]
    if pa.types.is_map(t):
        return [(k, read_as(v, t.item_type)) for k, v in value]
    return value


def with_ids(t: pa.DataType, counter: list[int]) -> pa.DataType:
    """``t`` with a column id in the metadata of every field."""

    def field(f: pa.Field) -> pa.Field:
        counter[0] += 1
        return pa.field(f.name, with_ids(f.type, counter), f.nullable, {ID: str(counter[0])})

    if pa.types.is_struct(t):
        return pa.struct([field(f) for f in t])
    if pa.types.is_list(t):
        return pa.list_(field(t.value_field))
    if pa.types.is_map(t):
        return pa.map_(field(t.key_field), field(t.item_field))
    return t


def ids(t: pa.DataType) -> list[tuple[str, bytes | None]]:
    """Every nested field's name and column id, depth first."""
    out: list[tuple[str, bytes | None]] = []
    kids: list[pa.Field] = []
    if pa.types.is_struct(t):
        kids = list(t)
    elif pa.types.is_list(t):
        kids = [t.value_field]
    elif pa.types.is_map(t):
        kids = [t.key_field, t.item_field]
    for f in kids:
        out.append((f.name, (f.metadata or {}).get(ID)))
        out += ids(f.type)
    return out


# -- properties ----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_an_evolved_type_widens_reads_and_merges(data: st.DataObject) -> None:
    old = data.draw(nested_types())
    new, changed = data.draw(evolutions(old, "s"))
    assert readable_as(old, new)  # every file written before reads as the new type
    assert widens(old, new) == bool(changed)
    assert not widening_problems(old, new, path="s")
    if changed:
        assert not widens(new, old)  # a narrowing, or fields dropped
        assert widening_problems(new, old, path="s")
    assert nested_changes(pa.schema([("s", old)]), pa.schema([("s", new)])) == changed
    # Arrow's cast (what readers do) gives the model's values
    values = [value_of(data.draw, old) for _ in range(3)]
    got = pa.array(values, old).cast(new).to_pylist()
    assert got == [read_as(v, new) for v in values]
    # a merge of data of the new type evolves the table exactly to it, keeping the ids
    table = pa.schema([pa.field("s", with_ids(old, [0]), metadata={ID: b"0"})])
    merged = merge_schema(table, pa.schema([("s", new)]))
    assert merged.field("s").type == new
    assert (merged is table) == (not changed)
    assert merged.field("s").metadata == {ID: b"0"}
    kept = {i for _, i in ids(table.field("s").type)}
    after = ids(merged.field("s").type)
    assert {i for _, i in after if i is not None} == kept  # none lost, none invented
    assert len([i for _, i in after if i is None]) == len(
        [p for p in changed if p.rsplit(".", 1)[-1].startswith("new")]
    )
    # data of the old type goes into the evolved table as it is (strict and merge)
    check_schema(pa.schema([("s", old)]), merged)
    assert merge_schema(merged, pa.schema([("s", old)])) is merged
    batch = pa.record_batch([pa.array(values, old)], names=["s"])
    assert conform(batch, merged).column(0).to_pylist() == [read_as(v, new) for v in values]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_a_dropped_field_is_ignored_when_read_and_is_not_a_widening(data: st.DataObject) -> None:
    old = data.draw(nested_types())
    if old.num_fields < 2:
        return
    i = data.draw(st.integers(0, old.num_fields - 1))
    dropped = pa.struct([f for j, f in enumerate(old) if j != i])
    assert readable_as(old, dropped)  # the stored field is not read
    assert not widens(old, dropped)
    assert widening_problems(old, dropped, path="s") == [
        f"fields ['s.{old.field(i).name}'] dropped (drop them with drop_columns)"
    ]
    values = [value_of(data.draw, old) for _ in range(3)]
    assert pa.array(values, old).cast(dropped).to_pylist() == [read_as(v, dropped) for v in values]


# -- examples ------------------------------------------------------------------------------

ITEMS = pa.struct([("x", pa.int32()), ("y", pa.string())])
DEEP = pa.struct([("items", pa.list_(ITEMS)), ("m", pa.map_(pa.string(), ITEMS))])


def test_reading_rules_for_structs_lists_and_maps() -> None:
    s = pa.struct
    assert readable_as(s([("x", pa.int32())]), s([("x", pa.int64()), ("z", pa.string())]))
    assert readable_as(s([("x", pa.int32()), ("y", pa.int8())]), s([("x", pa.int32())]))
    # by name, not position
    assert readable_as(
        s([("y", pa.int8()), ("x", pa.int32())]), s([("x", pa.int64()), ("y", pa.int8())])
    )
    assert not readable_as(s([("x", pa.int64())]), s([("x", pa.int32())]))
    # a target field the file lacks must be nullable
    assert not readable_as(
        s([("x", pa.int32())]), s([("x", pa.int32()), pa.field("z", pa.int8(), False)])
    )
    assert readable_as(pa.list_(ITEMS), pa.large_list(s([("x", pa.int64())])))
    assert readable_as(
        pa.map_(pa.string(), ITEMS), pa.map_(pa.large_string(), s([("x", pa.int64())]))
    )
    assert not readable_as(pa.map_(pa.string(), ITEMS), pa.map_(pa.int32(), ITEMS))
    assert not readable_as(ITEMS, pa.list_(ITEMS))
    assert not readable_as(pa.list_(pa.int32()), pa.int32())


def test_widening_rules_for_nested_types() -> None:
    s = pa.struct
    assert widens(ITEMS, s([("x", pa.int64()), ("y", pa.string())]))
    assert widens(ITEMS, s([*ITEMS, ("z", pa.int8())]))
    assert widens(pa.list_(pa.int32()), pa.list_(pa.int64()))
    assert widens(pa.list_(ITEMS), pa.large_list(ITEMS))
    assert widens(pa.map_(pa.string(), ITEMS), pa.map_(pa.string(), s([*ITEMS, ("z", pa.int8())])))
    refused = {
        "same": (ITEMS, ITEMS),
        "reordered": (ITEMS, s([("y", pa.string()), ("x", pa.int32())])),
        "dropped": (ITEMS, s([("x", pa.int64())])),
        "non-nullable new": (ITEMS, s([*ITEMS, pa.field("z", pa.int8(), False)])),
        "made non-nullable": (ITEMS, s([pa.field("x", pa.int32(), False), ("y", pa.string())])),
        "narrowed": (ITEMS, s([("x", pa.int16()), ("y", pa.string())])),
        "key changed": (pa.map_(pa.string(), ITEMS), pa.map_(pa.large_string(), ITEMS)),
        "shape changed": (pa.list_(ITEMS), ITEMS),
        "new field of null type": (ITEMS, s([*ITEMS, ("z", pa.null())])),
    }
    for name, (a, b) in refused.items():
        assert not widens(a, b), name
    messages = {
        "reordered": (
            "column 's': fields reordered (['x', 'y'] -> ['y', 'x']); new fields go at the "
            "struct's end"
        ),
        "dropped": "fields ['s.y'] dropped (drop them with drop_columns)",
        "non-nullable new": "new field 's.z' is non-nullable (older rows hold no value for it)",
        "made non-nullable": "field 's.x' made non-nullable",
        "narrowed": "field 's.x': int32 does not widen to int16",
        "new field of null type": "new field 's.z' has type null",
    }
    for name, message in messages.items():
        a, b = refused[name]
        assert widening_problems(a, b, path="s") == [message]


def test_refusals_name_the_path() -> None:
    table = pa.schema([("id", pa.int64()), ("s", DEEP)])
    bad_items = pa.struct([("x", pa.string()), ("y", pa.string())])
    data = pa.schema([("id", pa.int64()), ("s", pa.struct([("items", pa.list_(bad_items))]))])
    with pytest.raises(
        SchemaMismatchError, match=r"field 's.items\[\].x': expected int32, found string"
    ):
        check_schema(data, table)
    with pytest.raises(
        SchemaMismatchError,
        match=r"field 's.items\[\].x': the table has int32, the data string, and neither widens",
    ):
        merge_schema(table, data)
    strict = pa.struct([pa.field("x", pa.int32(), False), ("y", pa.string())])
    table2 = pa.schema([("s", pa.struct([("m", pa.map_(pa.string(), strict))]))])
    data2 = pa.schema(
        [("s", pa.struct([("m", pa.map_(pa.string(), pa.struct([("y", pa.string())])))]))]
    )
    with pytest.raises(
        SchemaMismatchError, match=r"missing field 's.m\{\}.x', which is non-nullable"
    ):
        merge_schema(table2, data2)
    with pytest.raises(SchemaMismatchError, match=r"missing non-nullable field 's.m\{\}.x'"):
        check_schema(data2, table2)
    # a stored file whose nested type does not read as the table's: a foreign file
    with pytest.raises(
        SchemaMismatchError,
        match=r"data file f.parquet .* field 's.m\{\}.x': expected int32, found double",
    ):
        file_columns(
            pa.schema(
                [("s", pa.struct([("m", pa.map_(pa.string(), pa.struct([("x", pa.float64())])))]))]
            ),
            table2,
            path="f.parquet",
        )
    # data holding a nested field the table lacks: strict refuses (it would be lost)
    extra = pa.schema(
        [
            ("id", pa.int64()),
            (
                "s",
                pa.struct([("items", pa.list_(pa.struct([("x", pa.int32()), ("q", pa.int8())])))]),
            ),
        ]
    )
    with pytest.raises(SchemaMismatchError, match=r"unexpected fields \['s.items\[\].q'\]"):
        check_schema(extra, table)
    merged = merge_schema(table, extra)
    assert merged.field("s").type.field("items").type.value_type.names == ["x", "y", "q"]
    assert nested_changes(table, merged) == ["s.items[].q"]


def test_merge_keeps_ids_and_adds_bare_fields() -> None:
    """Field metadata (column ids) of the table stays; the data's never comes in."""
    meta = {ID: b"7"}
    table = pa.schema(
        [pa.field("s", pa.struct([pa.field("x", pa.int32(), metadata=meta)]), metadata={ID: b"6"})]
    )
    sneaky = {ID: b"99"}
    data = pa.schema(
        [
            pa.field(
                "s",
                pa.struct(
                    [
                        pa.field("x", pa.int64(), metadata=sneaky),
                        pa.field(
                            "n",
                            pa.struct([pa.field("k", pa.int8(), metadata=sneaky)]),
                            metadata=sneaky,
                        ),
                    ]
                ),
                metadata=sneaky,
            ),
            pa.field("t", pa.struct([pa.field("k", pa.int8(), metadata=sneaky)]), metadata=sneaky),
        ]
    )
    merged = merge_schema(table, data)
    s = merged.field("s")
    assert s.metadata == {ID: b"6"}
    assert s.type.field("x").metadata == meta and s.type.field("x").type == pa.int64()
    assert s.type.field("n").metadata is None
    assert s.type.field("n").type.field("k").metadata is None
    assert merged.field("t").metadata is None
    assert merged.field("t").type.field("k").metadata is None
