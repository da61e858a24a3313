"""The Delta view of a table with column ids: Delta column mapping (``name`` mode) once a
column is stored under another name, a plain Delta table before. Every Delta reader
here either returns exactly lakelog's rows at every version, or refuses the table;
the one known to return wrong rows (DuckDB's delta extension, for the partition columns
of a column-mapped table) is recorded as a strict expected failure."""

from __future__ import annotations

import importlib.util
import json
import pathlib
from pathlib import Path
from typing import Any

import deltalake
import duckdb
import polars as pl
import pyarrow as pa
import pytest

import lakelog


def _duck() -> duckdb.DuckDBPyConnection:
    spec = importlib.util.find_spec("duckdb_ext")
    assert spec is not None and spec.submodule_search_locations
    ext = pathlib.Path(spec.submodule_search_locations[0])
    con = duckdb.connect(config={"extension_directory": str(ext / "extensions")})
    con.execute("LOAD delta")
    return con


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r.get("id", r.get("a")))


def _build(path: Path, *, partitioned: bool) -> lakelog.Table:
    schema = pa.schema([("a", pa.int64()), ("b", pa.string()), ("p", pa.string())])
    t = lakelog.create_table(
        str(path),
        schema,
        partition_by=["p"] if partitioned else (),
        properties={"lakelog.delta_view": "true", "lakelog.manifest_interval": "3"},
    )
    t.append(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"], "p": ["u", "u", "v"]}))
    t.rename_column("a", "id")
    t.append(pa.table({"id": [4], "b": ["q"], "p": ["v"]}))
    t.drop_columns("b")
    t.add_columns({"b": pa.string()})  # a new physical name: the old values stay gone
    t.append(pa.table({"id": [5], "b": ["new"], "p": ["v"]}))
    t.delete("id = 2")
    t.compact(min_input_files=2)
    return t


def _versions(t: lakelog.Table) -> list[int]:
    return list(range(1, t.version + 1))  # the view starts at version 0 with no rows


def _deltalake_query(path: Path, version: int) -> list[dict[str, Any]]:
    dt = deltalake.DeltaTable(str(path), version=version)
    got = deltalake.QueryBuilder().register("t", dt).execute("select * from t").read_all()
    return _sorted(pa.table(got).to_pylist())


@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
def test_the_view_uses_name_mode_and_deltalake_reads_every_version(
    tmp_path: Path, partitioned: bool
) -> None:
    t = _build(tmp_path / "t", partitioned=partitioned)
    last = sorted((tmp_path / "t" / "_delta_log").glob("*.json"), key=lambda p: int(p.stem))[-1]
    meta = None
    for v in range(t.version, -1, -1):
        lines = (tmp_path / "t" / "_delta_log" / f"{v:020d}.json").read_text().splitlines()
        found = [json.loads(x)["metaData"] for x in lines if "metaData" in x]
        if found:
            meta = found[0]
            break
    assert meta is not None and last.exists()
    assert meta["configuration"]["delta.columnMapping.mode"] == "name"
    fields = json.loads(meta["schemaString"])["fields"]
    physical = {f["name"]: f["metadata"]["delta.columnMapping.physicalName"] for f in fields}
    assert physical["id"] == "a" and physical["b"].startswith("col-")
    for v in _versions(t):
        want = _sorted(t.snapshot(version=v).to_arrow().to_pylist())
        assert _deltalake_query(tmp_path / "t", v) == want, v


@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
def test_readers_without_column_mapping_refuse(tmp_path: Path, partitioned: bool) -> None:
    t = _build(tmp_path / "t", partitioned=partitioned)
    with pytest.raises(deltalake.exceptions.DeltaProtocolError, match="columnMapping"):
        deltalake.DeltaTable(str(tmp_path / "t")).to_pyarrow_table()
    with pytest.raises(Exception, match="columnMapping"):
        pl.scan_delta(str(tmp_path / "t")).collect()
    assert t.version > 0


def test_duckdb_reads_a_flat_column_mapped_view(tmp_path: Path) -> None:
    t = _build(tmp_path / "t", partitioned=False)
    con = _duck()
    want = _sorted(t.snapshot().to_arrow().to_pylist())
    got = con.execute(f"SELECT * FROM delta_scan('{tmp_path / 't'}')").arrow()
    got = got.read_all() if hasattr(got, "read_all") else got
    assert _sorted(got.to_pylist()) == want


@pytest.mark.xfail(
    strict=True,
    reason="duckdb-delta 1.4.4 returns NULL for the partition columns of a Delta table "
    "with column mapping (duckdb/duckdb-delta issues 50 and 343); docs/delta-view.md",
)
def test_duckdb_partition_columns_of_a_column_mapped_view(tmp_path: Path) -> None:
    t = _build(tmp_path / "t", partitioned=True)
    con = _duck()
    want = _sorted(t.snapshot().to_arrow().to_pylist())
    got = con.execute(f"SELECT * FROM delta_scan('{tmp_path / 't'}')").arrow()
    got = got.read_all() if hasattr(got, "read_all") else got
    assert _sorted(got.to_pylist()) == want


def test_ids_without_a_rename_keep_a_plain_view_every_reader_reads(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("b", pa.string()), ("p", pa.string())])
    t = lakelog.create_table(
        str(tmp_path / "t"),
        schema,
        partition_by=["p"],
        properties={"lakelog.delta_view": "true", "lakelog.column_mapping": "true"},
    )
    t.append(pa.table({"id": [1, 2], "b": ["x", "y"], "p": ["u", "v"]}))
    assert t.snapshot().metadata.format_version == 7
    want = _sorted(t.snapshot().to_arrow().to_pylist())
    root = str(tmp_path / "t")
    assert _sorted(deltalake.DeltaTable(root).to_pyarrow_table().to_pylist()) == want
    assert _sorted(pl.scan_delta(root).collect().to_dicts()) == want
    got = _duck().execute(f"SELECT * FROM delta_scan('{root}')").arrow()
    got = got.read_all() if hasattr(got, "read_all") else got
    assert _sorted(got.to_pylist()) == want
    assert deltalake.DeltaTable(root).protocol().min_reader_version == 1
