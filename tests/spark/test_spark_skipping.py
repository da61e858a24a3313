"""Skipping inside files with Spark: Spark reads lakelog's page indexes and bloom filters
with its filtering on and returns the same rows; Spark's writer carries the configured
bloom filters and page index, and lakelog's reader skips by Spark-written filters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.scan.skipping import collect_skip_stats

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

BLOOM = "lakelog.parquet.bloom_filter_columns"
FILTERING = {
    "parquet.filter.bloom.enabled": "true",
    "parquet.filter.columnindex.enabled": "true",
    "parquet.filter.stats.enabled": "true",
}


@pytest.fixture
def parquet_filtering(spark: Any) -> Iterator[None]:
    """Spark's Parquet reader with bloom filter and column index filtering on."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    before = {k: conf.get(k) for k in FILTERING}
    for k, v in FILTERING.items():
        conf.set(k, v)
    spark.conf.set("spark.sql.parquet.filterPushdown", "true")
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                conf.unset(k)
            else:
                conf.set(k, v)


def _data(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "k": rng.integers(0, 50_000, n),
            "s": pa.array([None if v % 9 == 0 else f"s{v}" for v in rng.integers(0, 10**6, n)]),
            "x": rng.random(n),
        }
    )


def test_spark_reads_lakelog_indexes_and_filters_with_same_rows(
    spark: Any, parquet_filtering: None, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    parts = [_data(3000, seed) for seed in range(3)]
    lakelog.write_table(
        uri,
        parts[0],
        properties={
            BLOOM: "k,s",
            "lakelog.row_group_size": 500,
            "lakelog.parquet.data_page_size": 2048,
        },
    )
    table = lakelog.open_table(uri)
    for p in parts[1:]:
        table.append(p)
    table.optimize(sort_by=["k"], incremental=False)
    data = pa.concat_tables(parts)
    present = data.column("k").to_pylist()
    keys = [present[10], present[4000], present[8999], 50_001, -3]
    strings = [*[v for v in data.column("s").to_pylist()[:50] if v is not None][:2], "nope"]
    quoted = ", ".join(f"'{v}'" for v in strings)
    for text, expr in [
        (f"k = {keys[0]}", pc.field("k") == keys[0]),
        (f"k in ({', '.join(map(str, keys))})", pc.field("k").isin(keys)),
        (f"s in ({quoted})", pc.field("s").isin(strings)),
        (
            f"k between {keys[1]} and {keys[1] + 20}",
            (pc.field("k") >= keys[1]) & (pc.field("k") <= keys[1] + 20),
        ),
    ]:
        expected = sorted(data.filter(expr).column("k").to_pylist())
        got = sorted(r.k for r in lspark.read(spark, uri, filter=text).select("k").collect())
        assert got == expected, text
        assert sorted(table.snapshot().to_arrow(filter=text).column("k").to_pylist()) == expected


def test_spark_writes_carry_filters_lakelog_reads(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    data = _data(4000, 9)
    lakelog.create_table(
        uri,
        data.schema,
        properties={BLOOM: "k,s", "lakelog.parquet.bloom_filter_ndv": 5000},
    )
    df = spark.createDataFrame(
        [tuple(r.values()) for r in data.to_pylist()], "k long, s string, x double"
    )
    lspark.write(df.repartition(2), uri)
    table = lakelog.open_table(uri)
    files = table.snapshot().files()
    assert files
    for f in files:
        md = pq.read_metadata(f"{uri}/{f.path}")
        names = [md.schema.column(i).path for i in range(md.num_columns)]
        for r in range(md.num_row_groups):
            rg = md.row_group(r)
            assert all(rg.column(i).has_column_index for i in range(md.num_columns))
            assert (rg.column(names.index("k")).bloom_filter_offset or 0) > 0
            assert (rg.column(names.index("s")).bloom_filter_offset or 0) > 0
            assert not rg.column(names.index("x")).bloom_filter_offset
    seen = set(data.column("k").to_pylist())
    absent = [v for v in range(20_000, 30_000) if v not in seen][:3]  # inside every file range
    with collect_skip_stats() as stats:
        got = table.snapshot().to_arrow(filter=pc.field("k").isin(absent))
    assert got.num_rows == 0
    assert stats.bloom_filters_read >= len(files) and stats.files_skipped >= len(files) - 1
    one = data.column("k")[17].as_py()
    got = table.snapshot().to_arrow(filter=pc.field("k") == one)
    assert got.num_rows == data.filter(pc.field("k") == one).num_rows
