"""Helpers shared by the row-level change tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

import lakelog

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("day", pa.string()),
        ("v", pa.float64()),
        ("note", pa.string()),
    ]
)


def rows(ids: list[int], day: str = "d1", note: str = "n") -> pa.Table:
    return pa.table(
        {
            "id": ids,
            "day": [day] * len(ids),
            "v": [float(i) for i in ids],
            "note": [f"{note}{i}" for i in ids],
        },
        schema=SCHEMA,
    )


def make_table(
    root: Path | str,
    *,
    partition_by: tuple[str, ...] = (),
    files: int = 4,
    per: int = 10,
    vectors: bool = False,
) -> lakelog.Table:
    """``files`` appends of ``per`` rows: ids ``[i*per, (i+1)*per)``, day ``d<i % 2>``.

    Copy-on-write unless ``vectors``: the tests using it count the files a change
    rewrites and read those files (new tables have deletion vectors on by default).
    """
    uri = str(root)
    props = {"lakelog.deletion_vectors": "true" if vectors else "false"}
    t = lakelog.create_table(uri, SCHEMA, partition_by=partition_by, properties=props)
    for i in range(files):
        t.append(rows(list(range(i * per, (i + 1) * per)), day=f"d{i % 2}"))
    return t


def table_rows(t: lakelog.Table, version: int | None = None) -> list[dict[str, Any]]:
    snap = t.refresh().snapshot(version)
    return sorted(snap.to_arrow().to_pylist(), key=lambda r: (r["id"], r["day"], r["note"]))


def file_rows(t: lakelog.Table, path: str) -> list[dict[str, Any]]:
    """The rows of one data file, in file order (partition columns left out)."""
    import pyarrow.parquet as pq

    with t.storage.open_input(path) as f:
        return pq.read_table(f).to_pylist()


def files_on_disk(root: Path) -> set[str]:
    """Data files under a local table root (the log's manifests left out)."""
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_lakelog" not in p.parts}
