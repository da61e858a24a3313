"""Property test: random schema evolution against a plain in-memory model.

Random sequences of strict appends, merge appends (new columns, wider types), added,
widened and dropped columns and compactions; at every version, time travel returns the
model's rows in the model's schema, and filters (pruned by statistics, from manifests
every two versions) return exactly the model's matching rows.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakelog

WIDER = {
    pa.int8(): pa.int16(),
    pa.int16(): pa.int32(),
    pa.int32(): pa.int64(),
    pa.float32(): pa.float64(),
}
NEW_TYPES = [pa.int8(), pa.int32(), pa.float32(), pa.string()]


class Model:
    def __init__(self) -> None:
        self.schema = pa.schema([("id", pa.int64()), ("v", pa.int8())])
        self.rows: list[dict[str, Any]] = []
        self.versions: list[tuple[pa.Schema, list[dict[str, Any]]]] = []
        self.next_id = 0
        self.fresh = 0

    def snapshot(self) -> None:
        names = self.schema.names
        self.versions.append((self.schema, [{n: r.get(n) for n in names} for r in self.rows]))

    def values(self, t: pa.DataType, n: int, seed: int) -> list[Any]:
        out: list[Any] = []
        for i in range(n):
            k = (seed * 7 + i * 3) % 11
            if k == 0:
                out.append(None)
            elif pa.types.is_integer(t):
                out.append(k - 5)
            elif pa.types.is_floating(t):
                out.append((k - 5) / 2)  # exact in float32
            else:
                out.append(f"s{k}")
        return out

    def batch(self, schema: pa.Schema, n: int, seed: int) -> pa.Table:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        cols = {"id": ids}
        for f in schema:
            if f.name != "id":
                cols[f.name] = self.values(f.type, n, seed + len(cols))
        return pa.table(cols, schema=schema)

    def add_rows(self, data: pa.Table) -> None:
        self.rows.extend(data.to_pylist())


OPS = st.lists(
    st.tuples(
        st.sampled_from(["append", "merge_new", "merge_wide", "add", "widen", "drop", "compact"]),
        st.integers(0, 1000),
    ),
    min_size=3,
    max_size=8,
)


def _check(
    table: lakelog.Table, version: int, schema: pa.Schema, rows: list[dict[str, Any]]
) -> None:
    snap = table.snapshot(version)
    assert snap.schema.remove_metadata() == schema, (version, snap.schema, schema)
    got = sorted(snap.to_arrow().to_pylist(), key=lambda r: r["id"])
    assert got == sorted(rows, key=lambda r: r["id"]), version
    if rows:
        mid = sorted(r["id"] for r in rows)[len(rows) // 2]
        assert sorted(r["id"] for r in snap.to_arrow(filter=f"id >= {mid}").to_pylist()) == sorted(
            r["id"] for r in rows if r["id"] >= mid
        )
        for f in schema:
            if f.name == "id":
                continue
            nulls = sorted(r["id"] for r in rows if r[f.name] is None)
            got_nulls = snap.to_arrow(columns=["id"], filter=f"{f.name} is null")
            assert sorted(got_nulls.column("id").to_pylist()) == nulls, (version, f.name)
            if pa.types.is_integer(f.type) or pa.types.is_floating(f.type):
                want = sorted(r["id"] for r in rows if r[f.name] is not None and r[f.name] > 1)
                got_gt = snap.to_arrow(columns=["id"], filter=f"{f.name} > 1")
                assert sorted(got_gt.column("id").to_pylist()) == want, (version, f.name)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=OPS)
def test_random_evolution_matches_the_model(ops: list[tuple[str, int]]) -> None:
    root = tempfile.mkdtemp(prefix="lakelog-evo-")
    try:
        model = Model()
        t = lakelog.create_table(
            root + "/t", model.schema, properties={"lakelog.manifest_interval": 2}
        )
        model.snapshot()
        for op, seed in ops:
            data_cols = [f for f in model.schema if f.name != "id"]
            if op == "append":
                data = model.batch(model.schema, 1 + seed % 4, seed)
                t.append(data)
                model.add_rows(data)
            elif op == "merge_new":
                model.fresh += 1
                new = pa.field(f"c{model.fresh}", NEW_TYPES[seed % len(NEW_TYPES)])
                keep = [f for f in model.schema if f.name == "id" or seed % 2]
                data = model.batch(pa.schema([*keep, new]), 1 + seed % 3, seed)
                t.append(data, schema_mode="merge")
                model.schema = model.schema.append(new)
                model.add_rows(data)
            elif op == "merge_wide":
                wide = [f for f in data_cols if f.type in WIDER]
                if not wide:
                    continue
                f = wide[seed % len(wide)]
                i = model.schema.get_field_index(f.name)
                widened = model.schema.set(i, f.with_type(WIDER[f.type]))
                data = model.batch(widened, 2, seed)
                t.append(data, schema_mode="merge")
                model.schema = widened
                model.add_rows(data)
            elif op == "add":
                model.fresh += 1
                new = pa.field(f"c{model.fresh}", NEW_TYPES[seed % len(NEW_TYPES)])
                t.add_columns(new)
                model.schema = model.schema.append(new)
            elif op == "widen":
                wide = [f for f in data_cols if f.type in WIDER]
                if not wide:
                    continue
                f = wide[seed % len(wide)]
                t.widen_column(f.name, WIDER[f.type])
                i = model.schema.get_field_index(f.name)
                model.schema = model.schema.set(i, f.with_type(WIDER[f.type]))
            elif op == "drop":
                if len(data_cols) < 2:
                    continue
                name = data_cols[seed % len(data_cols)].name
                t.drop_columns(name)
                model.schema = model.schema.remove(model.schema.get_field_index(name))
                for r in model.rows:
                    r.pop(name, None)
            else:
                report = t.compact(min_input_files=2)
                if report.version is None:
                    continue
                model.snapshot()  # the run's claim (same rows), then its rewrite
            model.snapshot()
            assert t.version == len(model.versions) - 1
            _check(t, t.version, *model.versions[-1])
        for version, (schema, rows) in enumerate(model.versions):
            _check(t, version, schema, rows)
    finally:
        shutil.rmtree(root, ignore_errors=True)
