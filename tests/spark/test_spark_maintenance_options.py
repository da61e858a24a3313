"""``lakelog.spark.compact`` / ``optimize`` take the options objects of ``Table.compact`` /
``Table.optimize``: the same plan as the keyword arguments, run on the executors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.errors import InvalidArgumentError

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]


def _build(uri: str) -> lakelog.Table:
    """Two partitions of three small files each."""
    schema = pa.schema([("part", pa.string()), ("id", pa.int64()), ("x", pa.float64())])
    table = lakelog.create_table(uri, schema, partition_by=["part"])
    for i in range(3):
        ids = np.arange(i * 200, (i + 1) * 200)
        table.append(
            pa.table(
                {
                    "part": pa.array(["p0", "p1"] * 100),
                    "id": pa.array(ids, pa.int64()),
                    "x": pa.array(np.random.default_rng(i).random(200)),
                },
                schema=schema,
            )
        )
    return table


def _rows(uri: str) -> list[tuple[Any, ...]]:
    d = lakelog.open_table(uri).snapshot().to_arrow().to_pydict()
    return sorted(zip(d["part"], d["id"], d["x"], strict=True))


def test_compact_and_optimize_take_the_options_objects(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    before = _rows(_build(uri).uri)
    options = lspark.CompactionOptions(partition_filter=[("part", "=", "p0")])
    execution = lspark.ExecutionOptions(max_concurrent_groups=1)
    by_keywords = lspark.compact(spark, uri, partition_filter=[("part", "=", "p0")], dry_run=True)
    dry = lspark.compact(spark, uri, options=options, dry_run=True)
    assert dry.planned_groups == by_keywords.planned_groups and len(dry.planned_groups) == 1
    with pytest.raises(InvalidArgumentError, match="max_concurrent_groups"):
        lspark.compact(spark, uri, execution=execution, max_concurrent_groups=2)

    report = lspark.compact(spark, uri, options=options, execution=execution)
    assert report.extra["engine"] == "spark" and report.compacted_file_count == 3
    assert len(report.commits) == 1 and _rows(uri) == before
    parts = sorted(f.partition["part"] for f in lakelog.open_table(uri).snapshot().files())
    assert parts == ["p0", "p1", "p1", "p1"]

    clustered = lspark.optimize(
        spark, uri, options=lspark.ClusteringOptions(sort_by=["x"]), execution=execution
    )
    assert clustered.extra["engine"] == "spark" and clustered.extra["sort_columns"] == ["x"]
    assert clustered.version is not None and _rows(uri) == before
