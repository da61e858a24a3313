"""Property test: renames, drops and re-adds (column ids, format version 7) against an
in-memory model.

Random sequences of appends, merge appends, added, renamed (also two names swapped),
dropped, re-added (a dropped name added back) and widened columns, fields added to and
widened inside a struct, row-level deletes on any column and compactions. At every
version, time travel returns exactly the model's rows under the model's names (a
re-added column never shows its old values), and so do DuckDB, polars and pandas
through lakelog; the change feed from the start replays to the last version; and
pruning on every integer column keeps exactly the files whose own values (read under
their physical names) may match.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakelog
from lakelog.log import mapping

WIDER = {pa.int16(): pa.int32(), pa.int32(): pa.int64()}
NEW_TYPES = [pa.int16(), pa.int32(), pa.string()]


class Model:
    def __init__(self, *, nested: bool) -> None:
        fields = [("rid", pa.int64()), ("v", pa.int32()), ("s", pa.string())]
        if nested:  # with a struct, lakelog's own reader reads every file
            fields.append(("n", pa.struct([("x", pa.int16())])))
        self.schema = pa.schema(fields)
        self.rows: list[dict[str, Any]] = []
        self.versions: list[tuple[pa.Schema, list[dict[str, Any]]]] = []
        self.dropped: list[tuple[str, pa.DataType]] = []
        self.next_id = 0
        self.fresh = 0

    def snapshot(self) -> None:
        names = self.schema.names
        self.versions.append(
            (self.schema, [{n: copy.deepcopy(r.get(n)) for n in names} for r in self.rows])
        )

    def values(self, t: pa.DataType, n: int, seed: int) -> list[Any]:
        out: list[Any] = []
        for i in range(n):
            k = (seed * 7 + i * 3) % 11
            if k == 0:
                out.append(None)
            elif pa.types.is_struct(t):
                fields = [t.field(j) for j in range(t.num_fields)]
                out.append(
                    {f.name: self.values(f.type, 1, seed + i + j)[0] for j, f in enumerate(fields)}
                )
            elif pa.types.is_integer(t):
                out.append(k - 5)
            else:
                out.append(f"s{k}")
        return out

    def batch(self, schema: pa.Schema, n: int, seed: int) -> pa.Table:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        cols: dict[str, list[Any]] = {"rid": ids}
        for f in schema:
            if f.name != "rid":
                cols[f.name] = self.values(f.type, n, seed + len(cols))
        return pa.table(cols, schema=schema)

    def fresh_name(self) -> str:
        self.fresh += 1
        return f"c{self.fresh}"


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "append",
                "append",
                "merge_new",
                "add",
                "rename",
                "rename",
                "swap",
                "drop",
                "readd",
                "widen",
                "nested_add",
                "nested_widen",
                "delete",
                "compact",
            ]
        ),
        st.integers(0, 1000),
    ),
    min_size=4,
    max_size=10,
)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["rid"])


def _expected_files(snap: Any, column: str, bound: int) -> set[str]:
    """Files whose own values of ``column`` (read under its physical name) may hold a
    value >= ``bound``: those lacking the column have no statistics for it, so pruning
    keeps them."""
    physical = mapping.physical_name(snap.schema.field(column))
    out = set()
    for f in snap.files():
        stored = pq.read_schema(snap.storage.full(f.path))
        if physical not in stored.names:
            out.add(f.path)
            continue
        col = pq.read_table(snap.storage.full(f.path), columns=[physical]).column(0)
        top = pc.max(col).as_py()
        if top is not None and top >= bound:
            out.add(f.path)
    return out


def _check(
    table: lakelog.Table, version: int, schema: pa.Schema, rows: list[dict[str, Any]]
) -> None:
    snap = table.snapshot(version)
    assert snap.schema.names == schema.names, (version, snap.schema.names, schema.names)
    assert [f.type for f in snap.schema] == [f.type for f in schema], version
    got = snap.to_arrow()
    assert _rows(got) == sorted(rows, key=lambda r: r["rid"]), version
    assert [f.type for f in snap.to_arrow().schema] == [f.type for f in schema], version
    for f in schema:
        if f.name == "rid" or not pa.types.is_integer(f.type):
            continue
        want = sorted(r["rid"] for r in rows if r[f.name] is not None and r[f.name] >= 1)
        picked = snap.to_arrow(columns=["rid"], filter=f"{f.name} >= 1")
        assert sorted(picked.column("rid").to_pylist()) == want, (version, f.name)
        kept = {x.path for x in snap.files(f"{f.name} >= 1")}
        assert kept == _expected_files(snap, f.name, 1), (version, f.name)


def _engines_agree(table: lakelog.Table, version: int, rows: list[dict[str, Any]]) -> None:
    snap = table.snapshot(version)
    want = sorted(rows, key=lambda r: r["rid"])
    duck = snap.to_duckdb(name="t").arrow()
    duck = duck.read_all() if hasattr(duck, "read_all") else duck
    assert _rows(duck) == want
    assert _rows(snap.to_polars().collect().to_arrow()) == want
    frame = snap.to_pandas()
    assert list(frame.columns) == snap.schema.names
    assert sorted(frame["rid"].tolist()) == [r["rid"] for r in want]


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=OPS, vectors=st.booleans(), nested=st.booleans())
def test_renames_drops_and_readds_match_the_model(
    ops: list[tuple[str, int]], vectors: bool, nested: bool
) -> None:
    root = tempfile.mkdtemp(prefix="lakelog-ids-")
    try:
        model = Model(nested=nested)
        t = lakelog.create_table(
            root + "/t",
            model.schema,
            properties={
                "lakelog.manifest_interval": 2,
                "lakelog.change_data_feed": "true",
                # the readers differ: marked files go through lakelog's own
                "lakelog.deletion_vectors": str(vectors).lower(),
            },
        )
        model.snapshot()
        for op, seed in ops:
            data_cols = [f for f in model.schema if f.name != "rid"]
            if op == "append":
                data = model.batch(model.schema, 1 + seed % 4, seed)
                t.append(data)
                model.rows.extend(data.to_pylist())
            elif op == "merge_new":
                new = pa.field(model.fresh_name(), NEW_TYPES[seed % len(NEW_TYPES)])
                data = model.batch(model.schema.append(new), 1 + seed % 3, seed)
                t.append(data, schema_mode="merge")
                model.schema = model.schema.append(new)
                model.rows.extend(data.to_pylist())
            elif op == "add":
                new = pa.field(model.fresh_name(), NEW_TYPES[seed % len(NEW_TYPES)])
                t.add_columns(new)
                model.schema = model.schema.append(new)
            elif op == "rename":
                if not data_cols:
                    continue
                f = data_cols[seed % len(data_cols)]
                new_name = model.fresh_name()
                t.rename_column(f.name, new_name)
                i = model.schema.get_field_index(f.name)
                model.schema = model.schema.set(i, f.with_name(new_name))
                for r in model.rows:
                    r[new_name] = r.pop(f.name, None)
            elif op == "swap":  # a <-> b through a third name: names reused at once
                if len(data_cols) < 2:
                    continue
                a, b = data_cols[seed % len(data_cols)], data_cols[(seed + 1) % len(data_cols)]
                tmp = model.fresh_name()
                for i, (old, new) in enumerate(((a.name, tmp), (b.name, a.name), (tmp, b.name))):
                    t.rename_column(old, new)
                    j = model.schema.get_field_index(old)
                    model.schema = model.schema.set(j, model.schema.field(j).with_name(new))
                    for r in model.rows:
                        if old in r:
                            r[new] = r.pop(old)
                    if i < 2:
                        model.snapshot()
            elif op == "drop":
                if len(data_cols) < 2:
                    continue
                f = data_cols[seed % len(data_cols)]
                if not t.snapshot().properties.get("lakelog.column_mapping"):
                    # turn ids on (a rename and back): a re-add then gets a new physical name
                    i = model.schema.get_field_index(f.name)
                    t.rename_column(f.name, f.name + "_")
                    model.schema = model.schema.set(i, f.with_name(f.name + "_"))
                    for r in model.rows:
                        if f.name in r:
                            r[f.name + "_"] = r.pop(f.name)
                    model.snapshot()
                    t.rename_column(f.name + "_", f.name)
                    model.schema = model.schema.set(i, f)
                    for r in model.rows:
                        if f.name + "_" in r:
                            r[f.name] = r.pop(f.name + "_")
                    model.snapshot()
                t.drop_columns(f.name)
                model.schema = model.schema.remove(model.schema.get_field_index(f.name))
                model.dropped.append((f.name, f.type))
                for r in model.rows:
                    r.pop(f.name, None)
            elif op == "readd":
                free = [d for d in model.dropped if d[0] not in model.schema.names]
                if not free:
                    continue
                name, typ = free[seed % len(free)]
                t.add_columns(pa.field(name, typ))
                model.schema = model.schema.append(pa.field(name, typ))
                for r in model.rows:
                    r[name] = None  # never the old values
            elif op == "widen":
                wide = [f for f in data_cols if f.type in WIDER]
                if not wide:
                    continue
                f = wide[seed % len(wide)]
                t.widen_column(f.name, WIDER[f.type])
                i = model.schema.get_field_index(f.name)
                model.schema = model.schema.set(i, f.with_type(WIDER[f.type]))
            elif op in ("nested_add", "nested_widen"):
                structs = [f for f in data_cols if pa.types.is_struct(f.type)]
                if not structs:
                    continue
                col = structs[seed % len(structs)]
                kids = [col.type.field(j) for j in range(col.type.num_fields)]
                if op == "nested_add":
                    kid = pa.field(model.fresh_name(), NEW_TYPES[seed % len(NEW_TYPES)])
                    t.add_columns({(col.name, kid.name): kid.type})
                    kids.append(kid)
                    for r in model.rows:
                        if r.get(col.name) is not None:
                            r[col.name] = {**r[col.name], kid.name: None}
                else:
                    wide = [k for k in kids if k.type in WIDER]
                    if not wide:
                        continue
                    kid = wide[seed % len(wide)]
                    t.widen_column((col.name, kid.name), WIDER[kid.type])
                    kids = [k.with_type(WIDER[k.type]) if k.name == kid.name else k for k in kids]
                i = model.schema.get_field_index(col.name)
                model.schema = model.schema.set(i, col.with_type(pa.struct(kids)))
            elif op == "delete":
                ints = [f for f in data_cols if pa.types.is_integer(f.type)]
                if not ints or not model.rows:
                    continue
                f = ints[seed % len(ints)]
                result = t.delete(f"{f.name} = {seed % 5 - 2}")
                if not result.committed:
                    continue
                model.rows = [r for r in model.rows if r.get(f.name) != seed % 5 - 2]
            else:
                report = t.compact(min_input_files=2)
                if report.version is None:
                    continue
                model.snapshot()  # the run's claim (same rows), then its rewrite
            model.snapshot()
            assert t.version == len(model.versions) - 1, (op, t.version, len(model.versions))
            _check(t, t.version, *model.versions[-1])
        for version, (schema, rows) in enumerate(model.versions):
            _check(t, version, schema, rows)
            _engines_agree(t, version, rows)
        # the change feed from the start replays to the last version's rows
        feed = t.changes(0).to_arrow().to_pylist()
        live: dict[int, dict[str, Any]] = {}
        for r in sorted(feed, key=lambda r: r["_commit_version"]):
            kind = r["_change_type"]
            row = {k: v for k, v in r.items() if not k.startswith("_")}
            if kind in ("insert", "update_postimage"):
                live[row["rid"]] = row
            elif kind == "delete":
                live.pop(row["rid"], None)
        assert sorted(live.values(), key=lambda r: r["rid"]) == sorted(
            model.versions[-1][1], key=lambda r: r["rid"]
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
