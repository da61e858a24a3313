"""The Delta view of a table partitioned by transforms Delta can express as generated
columns (``day``/``month``/``year`` of a date or a timestamp without time zone, and
identity fields) is partitioned by them: the derived column is in the view's schema with
``delta.generationExpression``, in ``partitionColumns``, each file's value in
``add.partitionValues`` (docs/delta-view.md, "Tables partitioned by transforms").
deltalake, DuckDB and polars (through deltalake) read the table's rows plus the derived
column, and
deltalake prunes files by it. Other transforms keep the view unpartitioned."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _delta_view_helpers import (
    deltalake_rows,
    duckdb_connection,
    duckdb_rows,
    lakelog_rows,
    polars_rows,
    rows,
)

import lakelog

deltalake = pytest.importorskip("deltalake")

SCHEMA = pa.schema([("ts", pa.timestamp("us")), ("id", pa.int64()), ("region", pa.string())])
T0 = dt.datetime(2024, 1, 30)


def _batch(first: int, n: int) -> pa.Table:
    ids = list(range(first, first + n))
    return pa.table(
        {
            "ts": [T0 + dt.timedelta(hours=9 * i) for i in ids],
            "id": ids,
            "region": [["eu", "us"][i % 2] for i in ids],
        },
        schema=SCHEMA,
    )


def _with(table: pa.Table, name: str, values: list[Any]) -> list[dict[str, Any]]:
    return rows(table.append_column(name, pa.array(values)), [*SCHEMA.names, name])


def _metadata(uri: str) -> dict[str, Any]:
    for line in (Path(uri) / "_delta_log" / f"{0:020d}.json").read_text().splitlines():
        obj = json.loads(line)
        if "metaData" in obj:
            md: dict[str, Any] = obj["metaData"]
            return md
    raise AssertionError("no metaData in version 0")


def _check_readers(uri: str, want: list[dict[str, Any]], names: list[str]) -> None:
    import polars as pl

    assert deltalake_rows(uri, names) == want
    assert duckdb_rows(duckdb_connection(), uri, names) == want
    through_deltalake = pl.scan_delta(uri, use_pyarrow=True).collect().to_arrow()
    assert rows(through_deltalake, names) == want
    # polars' own reader takes partition values from folder names, which lakelog's
    # files have none of (docs/delta-view.md): the table's columns are right
    own = SCHEMA.names
    assert polars_rows(uri, own) == [{k: r[k] for k in own} for r in want]


def test_day_of_a_timestamp_is_a_generated_partition_column(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = lakelog.create_table(
        uri, SCHEMA, partition_by=["day(ts)"], properties={"lakelog.delta_view": "true"}
    )
    t.append(_batch(0, 12))
    t.append(_batch(12, 8))
    md = _metadata(uri)
    assert md["partitionColumns"] == ["ts_day"]
    field = json.loads(md["schemaString"])["fields"][-1]
    assert field["name"] == "ts_day" and field["type"] == "date"
    assert field["metadata"]["delta.generationExpression"] == "CAST(`ts` AS DATE)"
    view = deltalake.DeltaTable(uri)
    assert "generatedColumns" in (view.protocol().writer_features or [])

    table = t.snapshot().to_arrow()
    days = [v.date() for v in table.column("ts").to_pylist()]
    want = _with(table, "ts_day", days)
    _check_readers(uri, want, [*SCHEMA.names, "ts_day"])

    day = dt.date(2024, 2, 1)
    kept = view.file_uris(file_pruning_predicate=[("ts_day", "=", day.isoformat())])
    assert kept and len(kept) < len(view.file_uris())
    paths = [u.removeprefix("file://") for u in kept]
    for path in paths:  # every file kept holds only that day's rows
        got = pq.read_table(path).column("ts").to_pylist()
        assert {v.date() for v in got} == {day}
    held = sum(pq.read_metadata(p).num_rows for p in paths)
    assert held == sum(1 for r in want if r["ts_day"] == day)


def test_month_and_identity_partition_the_view(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = lakelog.create_table(
        uri,
        SCHEMA,
        partition_by=["month(ts)", "region"],
        properties={"lakelog.delta_view": "true", "lakelog.manifest_interval": "2"},
    )
    t.append(_batch(0, 10))
    t.append(_batch(10, 10))  # a checkpoint at version 2
    t.delete("id = 3")
    md = _metadata(uri)
    assert md["partitionColumns"] == ["ts_month", "region"]
    field = json.loads(md["schemaString"])["fields"][-1]
    assert field["metadata"]["delta.generationExpression"] == "DATE_FORMAT(`ts`, 'yyyy-MM')"

    table = t.snapshot().to_arrow()
    months = [f"{v.year:04d}-{v.month:02d}" for v in table.column("ts").to_pylist()]
    want = _with(table, "ts_month", months)
    _check_readers(uri, want, [*SCHEMA.names, "ts_month"])
    view = deltalake.DeltaTable(uri)
    wanted = [("ts_month", "=", "2024-02"), ("region", "=", "eu")]
    kept = view.file_uris(file_pruning_predicate=wanted)
    assert kept and len(kept) < len(view.file_uris())


def test_a_bucket_table_stays_unpartitioned(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = lakelog.create_table(
        uri, SCHEMA, partition_by=["bucket(4, id)"], properties={"lakelog.delta_view": "true"}
    )
    t.append(_batch(0, 20))
    assert _metadata(uri)["partitionColumns"] == []
    _check_readers(uri, lakelog_rows(t, t.version), SCHEMA.names)


def test_files_without_the_spec_tag_keep_the_view_unpartitioned(tmp_path: Path) -> None:
    """A spec set on a table with data: its old files record no day, so the view stays
    unpartitioned while one is live; once the last is gone it restarts partitioned."""
    uri = str(tmp_path / "t")
    t = lakelog.create_table(uri, SCHEMA, properties={"lakelog.delta_view": "true"})
    t.append(_batch(0, 10))
    t.set_partitioning(["day(ts)"])
    t.append(_batch(10, 10))
    assert deltalake.DeltaTable(uri).metadata().partition_columns == []
    _check_readers(uri, lakelog_rows(t, t.version), SCHEMA.names)
    t.delete("id < 10")  # the rows of the file written before the spec
    view = deltalake.DeltaTable(uri)
    assert view.metadata().partition_columns == ["ts_day"]
    table = t.snapshot().to_arrow()
    want = _with(table, "ts_day", [v.date() for v in table.column("ts").to_pylist()])
    _check_readers(uri, want, [*SCHEMA.names, "ts_day"])
    for v in range(t.version + 1):  # older versions read as they did
        got = deltalake_rows(uri, SCHEMA.names, v)
        assert got == lakelog_rows(t, v), f"version {v}"


def test_turning_the_change_feed_on_restarts_the_view_unpartitioned(tmp_path: Path) -> None:
    """Change files record no transform values, so the view of a table with the feed
    on is unpartitioned; the version that turns it on restarts the view there, and
    every version before still reads with its partition column."""
    uri = str(tmp_path / "t")
    t = lakelog.create_table(
        uri, SCHEMA, partition_by=["day(ts)"], properties={"lakelog.delta_view": "true"}
    )
    t.append(_batch(0, 10))
    t.set_properties({"lakelog.change_data_feed": "true"})
    t.append(_batch(10, 10))
    assert (Path(uri) / "_delta_log" / f"{2:020d}.checkpoint.parquet").exists()
    assert deltalake.DeltaTable(uri).metadata().partition_columns == []
    _check_readers(uri, lakelog_rows(t, t.version), SCHEMA.names)
    old = deltalake.DeltaTable(uri, version=1)
    assert old.metadata().partition_columns == ["ts_day"]
    assert rows(old.to_pyarrow_table(), SCHEMA.names) == lakelog_rows(t, 1)
    changes = deltalake.DeltaTable(uri).load_cdf(starting_version=t.version).read_all()
    assert sorted(changes.column("id").to_pylist()) == list(range(10, 20))
