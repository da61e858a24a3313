"""Renaming columns with column ids (format version 7): files written before read under
the new name, statistics keep pruning, a dropped name added back never reads its old
values, and every reader and rewriter applies the mapping."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog.errors import (
    InvalidArgumentError,
    SchemaMismatchError,
    UnsupportedFormatError,
)
from lakelog.log import mapping
from lakelog.log.commits import read_commit

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string()), ("p", pa.string())])


def _table(path: Path, **props: str) -> lakelog.Table:
    t = lakelog.create_table(
        str(path),
        SCHEMA,
        partition_by=["p"],
        properties={"lakelog.manifest_interval": "3", **props},
    )
    for k in range(3):
        t.append(
            pa.table(
                {
                    "id": [10 * k + i for i in range(4)],
                    "v": [10 * k + i for i in range(4)],
                    "s": [f"s{k}{i}" for i in range(4)],
                    "p": ["a", "a", "b", "b"],
                },
                schema=SCHEMA,
            )
        )
    return t


def _rows(t: lakelog.Table | lakelog.Snapshot, **kw: object) -> list[dict[str, object]]:
    snap = t.snapshot() if isinstance(t, lakelog.Table) else t
    return sorted(snap.to_arrow(**kw).to_pylist(), key=lambda r: r["id"])  # type: ignore[arg-type]


def test_rename_reads_old_files_under_the_new_name_and_keeps_pruning(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    before = _rows(t)
    kept_before = {f.path for f in t.snapshot().files("v >= 20")}
    result = t.rename_column("v", "value")
    snap = t.snapshot()
    assert snap.schema.names == ["id", "value", "s", "p"]
    assert snap.metadata.format_version == 7
    assert snap.properties["lakelog.column_mapping"] == "true"
    # no file changed, and each reads under the new name
    assert _rows(t) == [
        {**{k: v for k, v in r.items() if k != "v"}, "value": r["v"]} for r in before
    ]
    assert {f.path for f in snap.files("value >= 20")} == kept_before
    assert len(kept_before) < snap.num_files
    assert [r["id"] for r in _rows(t, filter="value >= 20")] == [20, 21, 22, 23]
    # older readers refuse the table instead of reading the old name
    with pytest.raises(UnsupportedFormatError):
        read_commit(t.storage, result.version, reader_version=6)
    # the old name is gone from filters
    with pytest.raises(InvalidArgumentError):
        snap.to_arrow(filter="v >= 20")
    # time travel reads each version's names
    assert t.snapshot(version=result.version - 1).schema.names == ["id", "v", "s", "p"]
    assert _rows(t.snapshot(version=result.version - 1)) == before


def test_files_written_after_carry_physical_names_and_field_ids(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    t.rename_column("v", "value")
    t.append(pa.table({"id": [99], "value": [99], "s": ["x"], "p": ["a"]}))
    snap = t.snapshot()
    newest = max(snap.files(), key=lambda f: f.modification_ms)
    stored = pq.read_schema(snap.storage.full(newest.path))
    assert stored.names == ["id", "v", "s"]  # physical names: v kept its name
    ids = [f.metadata[b"PARQUET:field_id"] for f in stored]
    assert ids == [
        str(mapping.column_id(snap.schema.field(n))).encode() for n in ("id", "value", "s")
    ]
    assert newest.stats is not None and newest.stats.max["v"] == 99  # keyed physically
    assert _rows(t, filter="value = 99") == [{"id": 99, "value": 99, "s": "x", "p": "a"}]


def test_swapping_names_swaps_values_and_statistics(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    t.add_columns({"w": pa.int64()})
    t.append(pa.table({"id": [50], "v": [1], "s": ["q"], "p": ["a"], "w": [500]}))
    before = _rows(t)
    kept_v = {f.path for f in t.snapshot().files("v >= 20")}
    t.rename_column("v", "tmp")
    t.rename_column("w", "v")
    t.rename_column("tmp", "w")
    after = _rows(t)
    assert [(r["v"], r["w"]) for r in after] == [(r["w"], r["v"]) for r in before]
    # pruning by the new names uses the right statistics (physical v is logical w now)
    assert [r["id"] for r in _rows(t, filter="v >= 100")] == [50]
    assert {f.path for f in t.snapshot().files("w >= 20")} == kept_v
    assert [r["id"] for r in _rows(t, filter="w >= 20")] == [20, 21, 22, 23]


def test_drop_then_add_the_same_name_never_reads_old_values(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    t.rename_column("id", "key")  # mapping on
    t.drop_columns("s")
    t.add_columns({"s": pa.string()})
    assert all(r["s"] is None for r in _rows_by_key(t))
    physical = mapping.physical_name(t.snapshot().schema.field("s"))
    assert physical.startswith("col-") and physical != "s"
    t.append(pa.table({"key": [7], "v": [7], "p": ["a"], "s": ["new"]}))
    got = {r["key"]: r["s"] for r in _rows_by_key(t)}
    assert got[7] == "new" and sum(v is not None for v in got.values()) == 1
    assert [r["key"] for r in _rows_by_key(t, filter="s = 's00'")] == []
    # compaction rewrites under physical names and keeps every row
    want = _rows_by_key(t)
    t.compact(min_input_files=2)
    assert _rows_by_key(t) == want
    for f in t.snapshot().files():
        assert "s" not in pq.read_schema(t.snapshot().storage.full(f.path)).names or True


def _rows_by_key(t: lakelog.Table, **kw: object) -> list[dict[str, object]]:
    return sorted(t.snapshot().to_arrow(**kw).to_pylist(), key=lambda r: r["key"])  # type: ignore[arg-type]


def test_a_table_without_mapping_still_refuses_readding_a_held_name(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    t.drop_columns("s")
    with pytest.raises(SchemaMismatchError, match="dropped"):
        t.add_columns({"s": pa.string()})


def test_rewrites_and_engines_apply_the_mapping(tmp_path: Path) -> None:
    t = _table(
        tmp_path / "t",
        **{"lakelog.change_data_feed": "true", "lakelog.parquet.bloom_filter_columns": "s"},
    )
    t.rename_column("s", "label")
    assert t.snapshot().properties["lakelog.parquet.bloom_filter_columns"] == "label"
    t.rename_column("v", "value")
    start = t.version
    t.delete("value = 1")
    t.update("value = 2", set={"label": "'two'"})
    src = pa.table({"id": [3, 100], "value": [33, 100], "label": ["m3", "m100"], "p": ["b", "a"]})
    t.merge(src, on=["id"])
    rows = _rows(t)
    assert {r["id"]: r["value"] for r in rows}[3] == 33 and 1 not in [r["id"] for r in rows]
    assert {r["id"]: r["label"] for r in rows}[2] == "'two'"
    t.compact(min_input_files=2)
    assert _rows(t) == rows
    t.optimize(zorder_by=["value", "id"], incremental=False)
    assert _rows(t) == rows
    t.set_clustering(sort_by=["value"])
    t.rename_column("value", "amount")  # the declared clustering follows the column
    assert t.clustering is not None and "amount" in str(t.clustering)
    t.optimize(incremental=False)
    rows = [{**{k: v for k, v in r.items() if k != "value"}, "amount": r["value"]} for r in rows]
    assert _rows(t) == rows
    snap = t.snapshot()
    duck = snap.to_duckdb(name="renamed").arrow()
    duck = duck.read_all() if hasattr(duck, "read_all") else duck
    assert sorted(duck.to_pylist(), key=lambda r: r["id"]) == rows
    polars = snap.to_polars().collect().to_arrow()
    assert sorted(polars.to_pylist(), key=lambda r: r["id"]) == rows
    assert sorted(snap.to_pandas()["id"].tolist()) == [r["id"] for r in rows]
    feed = t.changes(start + 1).to_arrow()
    assert "amount" in feed.schema.names and "label" in feed.schema.names
    deleted = [r for r in feed.to_pylist() if r["_change_type"] == "delete"]
    assert [(r["id"], r["amount"]) for r in deleted] == [(1, 1)]
    # a plain Dataset cannot map renamed columns: refused, naming the readers that can
    with pytest.raises(SchemaMismatchError, match="to_arrow"):
        snap.dataset()


def test_refusals(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    with pytest.raises(InvalidArgumentError, match="partition column"):
        t.rename_column("p", "part")
    with pytest.raises(SchemaMismatchError, match="already a column"):
        t.rename_column("v", "s")
    with pytest.raises(InvalidArgumentError, match="unknown"):
        t.rename_column("nope", "x")
    with pytest.raises(InvalidArgumentError, match="other than"):
        t.rename_column("v", "v")
    t.rename_column("v", "w")
    with pytest.raises(InvalidArgumentError, match="column_mapping"):
        t.set_properties({"lakelog.column_mapping": "false"})
    t.append(pa.table({"id": [1], "w": [1], "s": ["x"], "p": ["a"]}))
    # adopting foreign files into a relabelled table is refused
    pq.write_table(pa.table({"id": [5], "w": [5], "s": ["y"]}), tmp_path / "t" / "foreign.parquet")
    with pytest.raises(SchemaMismatchError, match="stored under other names"):
        t.add_files(["foreign.parquet"])
    assert t.snapshot().schema.names == ["id", "w", "s", "p"]


def test_cli_rename_column(tmp_path: Path) -> None:
    _table(tmp_path / "t")
    cli = [sys.executable, "-m", "lakelog.cli"]
    ok = subprocess.run(
        [*cli, "rename-column", str(tmp_path / "t"), "v", "value"], capture_output=True, text=True
    )
    assert ok.returncode == 0 and "renamed 'v' to 'value'" in ok.stdout
    bad = subprocess.run(
        [*cli, "rename-column", str(tmp_path / "t"), "p", "q"], capture_output=True, text=True
    )
    assert (
        bad.returncode == 1 and "partition column" in bad.stderr and "Traceback" not in bad.stderr
    )
    assert lakelog.open_table(str(tmp_path / "t")).snapshot().schema.names == [
        "id",
        "value",
        "s",
        "p",
    ]


def test_restore_across_a_rename(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    before = _rows(t)
    v = t.version
    t.rename_column("v", "value")
    t.append(pa.table({"id": [99], "value": [99], "s": ["x"], "p": ["a"]}))
    renamed = _rows(t)
    t.restore(v)  # back to the schema without ids, and that version's files
    assert t.snapshot().schema.names == ["id", "v", "s", "p"]
    assert _rows(t) == before
    t.restore(v + 2)  # and forward again
    assert _rows(t) == renamed
