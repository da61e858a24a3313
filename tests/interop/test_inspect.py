"""``table.inspect``: the metadata tables agree with the snapshots they describe, over
random histories of appends, deletes, overwrites and compactions (Hypothesis), after
expiry, and for empty and unpartitioned tables."""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakelog
from lakelog.inspect import flatten

SCHEMA = pa.schema([("p", pa.int64()), ("id", pa.int64()), ("x", pa.float64()), ("s", pa.string())])

_op = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 12), st.integers(0, 2)),
    st.tuples(st.just("delete"), st.integers(2, 5), st.integers(0, 1)),
    st.tuples(st.just("overwrite"), st.integers(1, 5), st.integers(0, 2)),
    st.tuples(st.just("compact"), st.just(0), st.just(0)),
)


def _rows(start: int, n: int, p: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "p": [p] * n,
            "id": ids,
            "x": [None if i % 4 == 0 else i / 3 for i in ids],
            "s": [f"s{i:03d}" for i in ids],
        },
        schema=SCHEMA,
    )


def _check(table: lakelog.Table) -> None:
    snaps = table.inspect.snapshots().to_pylist()
    versions = [r["version"] for r in snaps]
    assert versions == sorted(versions, reverse=True) and versions[0] == table.refresh().version
    for r in snaps:
        snap = table.snapshot(r["version"])
        assert (r["num_files"], r["num_rows"], r["total_bytes"]) == (
            snap.num_files,
            snap.num_rows,
            snap.total_bytes,
        ), r
        files = table.inspect.files(version=r["version"]).to_pylist()
        by_path = {f.path: f for f in snap.files()}
        assert sorted(f["path"] for f in files) == sorted(by_path)
        for f in files:
            d = by_path[f["path"]]
            assert f["num_rows"] == d.num_rows and f["size_bytes"] == d.size_bytes
            assert f["partition"] == {"p": int(d.partition["p"])}  # type: ignore[arg-type]
            assert d.stats is not None
            for col in ("id", "s"):
                assert f["stats"][col]["min"] == d.stats.min.get(col)
                assert f["stats"][col]["max"] == d.stats.max.get(col)
                assert f["stats"][col]["null_count"] == d.stats.null_count.get(col)
        parts = table.inspect.partitions(version=r["version"]).to_pylist()
        assert sum(p["file_count"] for p in parts) == len(files)
        assert sum(p["num_rows"] for p in parts) == snap.num_rows
        for p in parts:
            mine = [f for f in files if f["partition"] == p["partition"]]
            assert p["file_count"] == len(mine)
            assert p["stats"]["id"]["min"] == min(f["stats"]["id"]["min"] for f in mine)
            assert p["stats"]["x"]["null_count"] == sum(f["stats"]["x"]["null_count"] for f in mine)
        if r["version"] > 0 and r is not snaps[-1]:
            prev = table.snapshot(r["version"] - 1)
            assert r["rows_added"] - r["rows_removed"] == snap.num_rows - prev.num_rows
            assert r["files_added"] - r["files_removed"] == snap.num_files - prev.num_files


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(_op, min_size=1, max_size=6))
def test_metadata_tables_agree_with_every_version(ops: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        uri = str(Path(d) / "t")
        lakelog.write_table(uri, _rows(0, 3, 0), partition_by=["p"])
        table = lakelog.open_table(uri)
        start = 3
        for op, a, b in ops:
            if op == "append":
                table.append(_rows(start, a, b))
                start += a
            elif op == "delete":
                table.delete(pc.equal(pc.bit_wise_and(pc.field("id"), a - 1), b))
            elif op == "overwrite":
                table.overwrite(_rows(start, a, b), partitions=[{"p": b}])
                start += a
            else:
                table.compact(target_file_size=1 << 20, min_input_files=2)
        _check(table)


def test_after_expiry_snapshots_start_at_the_oldest_readable_version(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, _rows(0, 3, 0), partition_by=["p"])
    table = lakelog.open_table(uri)
    for i in range(5):
        table.append(_rows(10 * (i + 1), 2, i % 2))
    table.compact(target_file_size=1 << 20, min_input_files=2)
    table.expire_snapshots(older_than=dt.timedelta(0), retain_last=2)
    snaps = table.inspect.snapshots().to_pylist()
    latest, oldest = table.refresh().version, snaps[-1]["version"]
    assert 0 < oldest < latest
    assert [s["version"] for s in snaps] == list(range(latest, oldest - 1, -1))
    assert snaps[-1]["files_added"] is None  # what the oldest commit changed is gone
    _check(table)
    history = table.inspect.history()
    ops = history.column("operation").to_pylist()
    compact = history.column("metrics")[ops.index("COMPACT")].as_py()
    assert json.loads(compact)["num_removed_files"] > 0


def test_empty_and_unpartitioned_tables(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "e"), SCHEMA)
    assert t.inspect.files().num_rows == 0
    (only,) = t.inspect.partitions().to_pylist()
    assert only["file_count"] == 0 and only["num_rows"] == 0 and "partition" not in only
    assert only["stats"]["id"] == {"min": None, "max": None, "null_count": None}
    (v0,) = t.inspect.snapshots().to_pylist()
    assert v0["operation"] == "CREATE TABLE" and v0["files_added"] == 0
    t.append(_rows(0, 4, 0))
    t.append(_rows(4, 4, 1))
    (whole,) = t.inspect.partitions().to_pylist()
    assert whole["file_count"] == 2 and whole["num_rows"] == 8
    assert whole["stats"]["s"] == {"min": "s000", "max": "s007", "null_count": 0}
    flat = flatten(t.inspect.files())
    assert "stats.x.min" in flat.column_names and "tags" in flat.column_names
    assert all(not pa.types.is_nested(f.type) for f in flat.schema)
    # a file whose bounds are unknown makes its partition's unknown, never a wrong bound
    files: dict[str, Any] = t.inspect.files(filter="id >= 4").to_pylist()[0]
    assert files["stats"]["id"]["min"] == 4
