"""A table without partition transforms writes its ``metadata`` action (in commits and in
manifest headers, both layouts) without a ``partition_specs`` field, exactly the bytes of
the writers before format version 8; a table with transforms records its specs and reads
them back."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog.log import format as fmt
from lakelog.log.commits import commit_path
from lakelog.log.snapshot import load_snapshot

SCHEMA = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("id", pa.int64())])
ROWS = pa.table(
    {"ts": [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)] * 3, "id": [1, 2, 3]},
    schema=SCHEMA,
)


def _metadata_lines(root: Path) -> list[bytes]:
    out = []
    for path in sorted((root / "_lakelog").glob("*.json")):
        out += [line for line in path.read_bytes().splitlines() if b'"metadata"' in line]
    return out


def _manifest_headers(root: Path) -> list[dict[str, object]]:
    out = []
    for path in sorted((root / "_lakelog").rglob("*.parquet")):
        kv = pq.read_metadata(path).metadata or {}
        out += [json.loads(v) for k, v in kv.items() if k == b"lakelog"]
        schema_kv = pq.read_schema(path).metadata or {}
        out += [json.loads(v) for k, v in schema_kv.items() if k == b"lakelog"]
    return [h for h in out if isinstance(h, dict) and "metadata" in h]  # not leaves


@pytest.mark.parametrize("layout", [fmt.FLAT_MANIFESTS.version, fmt.ROOTS.version])
@pytest.mark.parametrize("partition_by", [[], ["id"]])
def test_a_table_without_transforms_writes_no_partition_specs(
    tmp_path: Path, layout: int, partition_by: list[str]
) -> None:
    root = tmp_path / "t"
    with fmt.writing_manifests(layout):
        table = lakelog.create_table(
            str(root),
            SCHEMA,
            partition_by=partition_by,
            properties={"lakelog.manifest_interval": "1"},
        )
        table.append(ROWS)
        table.set_properties({"team": "x"})  # a second metadata action
    lines = _metadata_lines(root)
    assert len(lines) == 2
    for line in lines:
        assert b"partition_specs" not in line
        # the pre-version-8 layout: the action ends with its creation time
        assert re.search(rb'"created_ms":\d+\},?$', line), line[-60:]
        assert list(json.loads(line.rstrip(b",")))[-1] == "created_ms"
    headers = _manifest_headers(root)
    assert headers and all("partition_specs" not in h["metadata"] for h in headers)
    snap = load_snapshot(table.storage)
    assert snap.partition_specs == () and snap.partition_by == tuple(partition_by)
    assert table.refresh().snapshot().to_arrow().num_rows == 3


def test_a_table_with_transforms_records_its_specs(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = lakelog.create_table(
        str(root), SCHEMA, partition_by=["day(ts)"], properties={"lakelog.manifest_interval": "1"}
    )
    table.append(ROWS)
    table.set_partitioning(["bucket(2, id)"])
    table.append(ROWS)
    lines = _metadata_lines(root)
    assert all(b'"partition_specs":' in line for line in lines)
    assert all(h["metadata"]["partition_specs"] for h in _manifest_headers(root))
    snap = load_snapshot(table.storage)
    assert snap.metadata.partition_specs == (("day(ts)",), ("bucket(2, id)",))
    assert snap.metadata.format_version >= fmt.PARTITION_TRANSFORMS.version
    assert table.refresh().snapshot().to_arrow().num_rows == 6
    assert (root / commit_path(0)).exists()
