"""Identity values given out by Spark's plain writers (``lakelog.spark.write``,
``df.write.format("lakelog")`` and the streaming sink): each task numbers its rows, the
commit moves each task's values to its place in the write and past a write that landed
meanwhile, and records the mark (docs/constraints.md, "Identity columns")."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.errors import ConstraintViolationError
from lakelog.spark.errors import typed_errors

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.string())])


def _table(tmp_path: Path, *, always: bool = True) -> lakelog.Table:
    t = lakelog.create_table(
        str(tmp_path / "t"), SCHEMA, identity={"id": {"start": 1, "step": 1, "always": always}}
    )
    t.append(pa.table({"k": [1, 2], "v": ["a", "b"]}))
    return t


def _racing(
    uri: str, marker: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` body whose first task appends a row (k=1000) with the embedded
    writer while the Spark write runs: it lands after the write read the table, before
    it commits (once: a marker file)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        yield from batches
        context = TaskContext.get()
        if context is not None and context.partitionId() == 0:
            try:
                with open(marker, "x"):
                    pass
            except FileExistsError:
                return
            lakelog.open_table(uri).append(pa.table({"k": [1000], "v": ["raced"]}))

    return run


def _frame(spark: Any, t: lakelog.Table, tmp_path: Path, keys: range) -> Any:
    df = spark.createDataFrame([(k, f"n{k}") for k in keys], "k long, v string").repartition(4)
    return df.mapInArrow(_racing(t.uri, str(tmp_path / "marker")), df.schema)


def _check(t: lakelog.Table, written: range) -> None:
    """Every id unique; the rows before (and the raced append) keep theirs, the Spark
    write's come after them, and an append afterwards comes after the write's."""
    t.refresh()
    rows = t.snapshot().to_arrow()
    ids = dict(zip(rows["k"].to_pylist(), rows["id"].to_pylist(), strict=True))
    assert sorted(ids) == sorted([1, 2, 1000, *written])
    assert None not in ids.values() and len(set(ids.values())) == len(ids)
    assert (ids[1], ids[2], ids[1000]) == (1, 2, 3)
    spark_ids = sorted(ids[k] for k in written)
    assert spark_ids == list(range(4, 4 + len(written)))  # past the raced append's
    t.append(pa.table({"k": [2000], "v": ["after"]}))
    t.refresh()
    after = t.snapshot().to_arrow().filter(pa.compute.equal(pa.compute.field("k"), 2000))
    assert after["id"].to_pylist() == [max(spark_ids) + 1]


def test_spark_write_numbers_rows_past_a_racing_append(spark: Any, tmp_path: Path) -> None:
    t = _table(tmp_path)
    lspark.write(_frame(spark, t, tmp_path, range(10, 50)), t.uri)
    _check(t, range(10, 50))


def test_batch_writer_numbers_rows_past_a_racing_append(spark: Any, tmp_path: Path) -> None:
    lspark.register(spark)
    t = _table(tmp_path, always=False)
    _frame(spark, t, tmp_path, range(10, 50)).write.format("lakelog").mode("append").save(t.uri)
    _check(t, range(10, 50))


def test_streaming_sink_numbers_rows_past_a_racing_append(spark: Any, tmp_path: Path) -> None:
    lspark.register(spark)
    t = _table(tmp_path)
    src = str(tmp_path / "src")
    lakelog.write_table(src, pa.table({"k": pa.array(range(10, 50), pa.int64())}))
    from pyspark.sql import functions as F

    stream = spark.readStream.format("lakelog").load(src).withColumn("v", F.lit("s"))
    stream = stream.mapInArrow(_racing(t.uri, str(tmp_path / "marker")), stream.schema)
    query = (
        stream.writeStream.format("lakelog")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start(t.uri)
    )
    query.awaitTermination()
    _check(t, range(10, 50))


@pytest.mark.parametrize("writer", ["write", "format"])
def test_a_value_given_to_an_always_column_is_refused(
    spark: Any, tmp_path: Path, writer: str
) -> None:
    lspark.register(spark)
    t = _table(tmp_path)
    df = spark.createDataFrame([(7, 3, "c")], "id long, k long, v string")
    with pytest.raises(ConstraintViolationError, match="GENERATED ALWAYS AS IDENTITY"):
        if writer == "write":
            lspark.write(df, t.uri)
        else:  # Spark's own call: its errors typed as docs/spark.md says
            with typed_errors():
                df.write.format("lakelog").mode("append").save(t.uri)
    assert t.refresh().version == 1
    on_disk = {p for p in os.listdir(tmp_path / "t") if p.endswith(".parquet")}
    assert on_disk == {f.path for f in t.snapshot().files()}


def test_spark_write_numbers_a_partitioned_table(spark: Any, tmp_path: Path) -> None:
    t = lakelog.create_table(
        str(tmp_path / "p"), SCHEMA, partition_by=["v"], identity={"id": {"start": 10, "step": 5}}
    )
    df = spark.createDataFrame([(k, f"p{k % 3}") for k in range(30)], "k long, v string")
    lspark.write(df.repartition(3), t.uri)
    t.refresh()
    ids = sorted(t.snapshot().to_arrow()["id"].to_pylist())
    assert ids == list(range(10, 10 + 30 * 5, 5))
    assert {f.partition["v"] for f in t.snapshot().files()} == {"p0", "p1", "p2"}
