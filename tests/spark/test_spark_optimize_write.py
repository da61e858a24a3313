"""Optimized writes from Spark: ``lakelog.spark.write(optimize_write=True)`` and the table
property ``lakelog.optimize_write`` shuffle the rows by partition (by the clustering's key
range on a table that declares one) before Spark writes them, so a DataFrame spread over
many tasks makes about one file per partition instead of one per task and partition.

The DataFrames here are spread over 8 tasks (``spark.range(..., numPartitions=8)``), each
holding rows of every partition: without the option every task writes a file into every
partition folder.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import _connect_ops
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.errors import InvalidArgumentError, UnknownOptionError
from lakelog.spark.options import stream_write_options, write_options

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

TASKS, PARTS, ROWS = 8, 4, 4000


def _frame(spark: Any) -> Any:
    from pyspark.sql import functions as F

    return spark.range(0, ROWS, numPartitions=TASKS).select(
        F.col("id"), (F.col("id") % PARTS).alias("part"), ((F.col("id") * 7919) % ROWS).alias("k")
    )


def _files(uri: str) -> list[Any]:
    return list(lakelog.open_table(uri).snapshot().files())


def _rows(uri: str) -> list[tuple[Any, ...]]:
    t = lakelog.open_table(uri).snapshot().to_arrow()
    return sorted(tuple(r.values()) for r in t.to_pylist())


def test_optimized_write_makes_one_file_per_partition(spark: Any, tmp_path: Path) -> None:
    plain, optimized = str(tmp_path / "plain"), str(tmp_path / "optimized")
    df = _frame(spark)
    lspark.write(df, plain, partition_by=["part"])
    result = lspark.write(df, optimized, partition_by=["part"], optimize_write=True)

    assert len(_files(plain)) == TASKS * PARTS  # every task wrote into every partition
    files = _files(optimized)
    assert len(files) == PARTS
    assert sorted(f.partition["part"] for f in files) == [str(p) for p in range(PARTS)]
    assert _rows(optimized) == _rows(plain)
    assert len(_rows(plain)) == ROWS
    assert result.auto_compaction is None  # auto-compaction is off on these tables


def test_the_table_property_turns_it_on_and_the_argument_wins(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    df = _frame(spark)
    lspark.write(df, uri, partition_by=["part"], properties={"lakelog.optimize_write": "true"})
    assert len(_files(uri)) == PARTS  # the property of the table the write created
    appended = lspark.write(df, uri)  # the stored property
    assert len(_files(uri)) == 2 * PARTS
    history = lakelog.open_table(uri).history(limit=1)
    assert history[0].version == appended.version
    assert history[0].parameters.get("optimize_write") is True
    lspark.write(df, uri, optimize_write=False)
    assert len(_files(uri)) == 2 * PARTS + TASKS * PARTS
    assert len(_rows(uri)) == 3 * ROWS
    with pytest.raises(InvalidArgumentError, match=r"lakelog\.optimize_write"):
        lakelog.open_table(uri).set_properties({"lakelog.optimize_write": "maybe"})


def test_a_clustered_table_gets_disjoint_key_ranges(spark: Any, tmp_path: Path) -> None:
    plain, optimized = str(tmp_path / "plain"), str(tmp_path / "optimized")
    props = {"lakelog.clustering.columns": "k"}
    df = _frame(spark)
    lspark.write(df, plain, properties=props)
    lspark.write(df, optimized, properties=props, optimize_write=True)

    def ranges(uri: str) -> list[tuple[int, int]]:
        return sorted((f.stats.min["k"], f.stats.max["k"]) for f in _files(uri))

    assert len(ranges(plain)) == TASKS  # each task's rows span every key
    assert all(lo < 100 and hi > ROWS - 100 for lo, hi in ranges(plain))
    got = ranges(optimized)
    assert len(got) < TASKS
    assert all(a[1] < b[0] for a, b in itertools.pairwise(got))  # no overlap
    assert _rows(optimized) == _rows(plain)


def test_data_source_options_refuse_it_and_unknown_names_stay_refused(
    spark: Any, tmp_path: Path
) -> None:
    for given in ({"optimizeWrite": "true"}, {"optimize_write": "false"}):
        with pytest.raises(InvalidArgumentError, match=r"optimize_write=True"):
            write_options({"path": "/t", **given}, overwrite=False)
        with pytest.raises(InvalidArgumentError, match=r"foreachBatch"):
            stream_write_options({"path": "/t", **given}, overwrite=False)
    with pytest.raises(UnknownOptionError):
        write_options({"path": "/t", "optimizeWrites": "true"}, overwrite=False)
    lspark.register(spark)
    uri = str(tmp_path / "t")
    with pytest.raises(Exception, match=r"optimize_write=True"):
        _frame(spark).write.format("lakelog").mode("append").option("optimizeWrite", "true").save(
            uri
        )
    assert not (tmp_path / "t" / "_lakelog").exists()


def test_both_on_spark_connect(spark: Any, connect_client: Any, tmp_path: Path) -> None:
    """The optimized write and the Spark auto-compaction through the DataFrame API only:
    the same files and rows on a Connect session as on the classic one."""
    (tmp_path / "classic").mkdir()
    (tmp_path / "connect").mkdir()
    classic = _connect_ops.optimize_write_auto(spark, str(tmp_path / "classic"))
    remote = connect_client.run("optimize_write_auto", root=str(tmp_path / "connect"))
    assert remote["files"] == classic["files"] == PARTS
    assert remote["rows"] == classic["rows"] and len(remote["rows"]) == 400
    assert remote["auto"] == classic["auto"] == "compacted"
    assert remote["auto_files"] == classic["auto_files"] == 1
    assert remote["auto_rows"] == classic["auto_rows"]
    assert sorted(r["id"] for r in remote["auto_rows"]) == list(range(20))
