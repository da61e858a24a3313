"""The Delta view of a table partitioned by transforms (format version 8): Delta has no
hidden partitioning, so the view is an unpartitioned Delta table whose files hold every
column (docs/partitioning.md, "The Delta view"); every version reads the same rows in
deltalake, polars and DuckDB as in lakelog, across three specs and a compaction."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from _delta_view_helpers import (
    deltalake_rows,
    duckdb_connection,
    duckdb_rows,
    lakelog_rows,
    polars_rows,
)

import lakelog

deltalake = pytest.importorskip("deltalake")

SCHEMA = pa.schema([("ts", pa.timestamp("us", "UTC")), ("id", pa.int64()), ("name", pa.string())])
NAMES = SCHEMA.names
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def _rows(first: int, n: int) -> pa.Table:
    ids = list(range(first, first + n))
    return pa.table(
        {
            "ts": [T0 + dt.timedelta(hours=7 * i) for i in ids],
            "id": ids,
            "name": [f"n{i % 4}-{i}" for i in ids],
        },
        schema=SCHEMA,
    )


def test_three_specs_read_the_same_through_the_view(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = lakelog.create_table(
        uri,
        SCHEMA,
        partition_by=["day(ts)"],
        properties={"lakelog.delta_view": "true", "lakelog.manifest_interval": "4"},
    )
    t.append(_rows(0, 20))
    t.append(_rows(20, 20))
    t.set_partitioning(["bucket(3, id)"])
    t.append(_rows(40, 20))
    t.set_partitioning(["truncate(2, name)", "month(ts)"])
    t.append(_rows(60, 20))
    t.delete("id in (0, 9, 18, 27, 45, 63, 72)")
    t.compact(min_input_files=2)
    latest = t.refresh().version
    view = deltalake.DeltaTable(uri)
    assert view.metadata().partition_columns == []
    con = duckdb_connection()
    for v in range(latest + 1):
        want = lakelog_rows(t, v)
        assert deltalake_rows(uri, NAMES, v) == want, f"deltalake at version {v}"
        assert polars_rows(uri, NAMES, v) == want, f"polars at version {v}"
    assert duckdb_rows(con, uri, NAMES) == lakelog_rows(t, latest)
    assert duckdb_rows(con, uri, NAMES, where="id = 41") == [
        r for r in lakelog_rows(t, latest) if r["id"] == 41
    ]
