"""lakelog.spark.merge with Delta's WHEN clauses: the same clause code as the embedded
merge runs in the tasks, so the same clauses give the same table and counts; Spark
Columns in SET values and conditions are computed by Spark; the errors are the embedded
ones, raised before anything runs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakelog
import lakelog.spark
from lakelog import (
    InvalidArgumentError,
    when_matched_delete,
    when_matched_update,
    when_not_matched_by_source_delete,
    when_not_matched_by_source_update,
    when_not_matched_insert,
)

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.int64())])
DDL = "id BIGINT, p STRING, v BIGINT"


def twins(tmp_path: Path, *, vectors: bool = False, partitioned: bool = False) -> tuple[str, str]:
    """A table written in three files, and a copy of it: one for Spark, one embedded."""
    ours = str(tmp_path / "spark")
    props = {"lakelog.deletion_vectors": "true" if vectors else "false"}
    for i in range(3):
        ids = [i * 10 + j for j in range(6)]
        lakelog.write_table(
            ours,
            pa.table(
                {"id": ids, "p": [f"p{x % 2}" for x in ids], "v": [x * 3 for x in ids]},
                schema=SCHEMA,
            ),
            partition_by=["p"] if partitioned else [],
            properties=props,
        )
    theirs = str(tmp_path / "embedded")
    shutil.copytree(ours, theirs)
    return ours, theirs


def rows(uri: str) -> list[tuple[Any, ...]]:
    got = lakelog.open_table(uri).snapshot().to_arrow().to_pylist()
    return sorted(tuple(r[c] for c in SCHEMA.names) for r in got)


SOURCE = {
    "id": [1, 2, 3, 11, 12, 40, 41, 42],
    "p": ["p1", "p0", "p1", "p1", "p0", "p0", "p1", None],
    "v": [100, 1, 300, -5, 7, 400, 2, 9],
}


def clauses() -> dict[str, Any]:
    return {
        "when_matched": [
            when_matched_delete(condition="source.v > 250"),
            when_matched_update(set={"v": "v + source.v", "p": "'hit'"}, condition="v < 10"),
            when_matched_update(),
        ],
        "when_not_matched": [
            when_not_matched_insert(
                values={"id": "source.id", "v": "source.v * 2"}, condition="source.v > 100"
            ),
            when_not_matched_insert(condition="source.p IS NOT NULL"),
        ],
        "when_not_matched_by_source": [
            when_not_matched_by_source_delete(condition="v > 50"),
            when_not_matched_by_source_update(set={"v": "v - 1"}, condition="p = 'p0'"),
        ],
    }


@pytest.mark.parametrize(
    ("vectors", "partitioned"),
    [(False, False), (True, False), (False, True)],
    ids=["rewrite", "deletion-vectors", "partitioned"],
)
def test_clauses_give_the_embedded_rows(
    spark: Any, tmp_path: Path, vectors: bool, partitioned: bool
) -> None:
    ours, theirs = twins(tmp_path, vectors=vectors, partitioned=partitioned)
    source = pa.table(SOURCE, schema=SCHEMA)
    want = lakelog.open_table(theirs).merge(source, "id", **clauses())
    frame = spark.createDataFrame(list(zip(*SOURCE.values(), strict=True)), DDL)
    got = lakelog.spark.merge(spark, ours, frame, "id", **clauses())
    assert rows(ours) == rows(theirs)
    counts = (got.updated_rows, got.deleted_rows, got.inserted_rows)
    assert counts == (want.updated_rows, want.deleted_rows, want.inserted_rows)
    assert counts == (8, 7, 2)  # matched: 4 updated, 1 deleted; by source: 4, 6; 40, 41 in
    header = lakelog.open_table(ours).history(limit=1)[0]
    assert header.parameters["when_matched"][1] == {
        "action": "update",
        "values": {"v": "v + source.v", "p": "'hit'"},
        "condition": "v < 10",
    }


def test_spark_columns_are_computed_by_spark(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    ours, theirs = twins(tmp_path)
    source = pa.table(SOURCE, schema=SCHEMA)
    frame = spark.createDataFrame(list(zip(*SOURCE.values(), strict=True)), DDL)
    lakelog.spark.merge(
        spark,
        ours,
        frame,
        "id",
        when_matched=[
            when_matched_update(
                set={"v": F.col("v") * 2, "p": F.upper(F.col("p"))}, condition=F.col("v") < 50
            )
        ],
        when_not_matched=[
            when_not_matched_insert(
                values={"id": F.col("id"), "v": F.abs(F.col("v"))}, condition="source.v < 5"
            )
        ],
    )
    lakelog.open_table(theirs).merge(
        source,
        "id",
        when_matched=[
            when_matched_update(
                set={"v": pc.field("source.v") * 2, "p": pc.utf8_upper(pc.field("source.p"))},
                condition=pc.field("source.v") < 50,
            )
        ],
        when_not_matched=[
            when_not_matched_insert(
                values={"id": "source.id", "v": pc.abs(pc.field("source.v"))},
                condition="source.v < 5",
            )
        ],
    )
    assert rows(ours) == rows(theirs)
    assert (2, "P0", 2) in rows(ours) and (41, None, 2) in rows(ours)


def test_a_source_with_other_columns(spark: Any, tmp_path: Path) -> None:
    ours, _ = twins(tmp_path)
    frame = spark.createDataFrame(
        [(1, "delete", 0), (2, "upsert", 5), (99, "upsert", 9)], "id BIGINT, op STRING, v BIGINT"
    )
    r = lakelog.spark.merge(
        spark,
        ours,
        frame,
        "id",
        when_matched=[
            when_matched_delete(condition="source.op = 'delete'"),
            when_matched_update(set={"v": "source.v"}),
        ],
        when_not_matched=[
            when_not_matched_insert(values={"id": "source.id", "v": "source.v", "p": "source.op"})
        ],
    )
    assert (r.updated_rows, r.deleted_rows, r.inserted_rows) == (1, 1, 1)
    got = {row[0]: row for row in rows(ours)}
    assert 1 not in got and got[2] == (2, "p0", 5) and got[99] == (99, "upsert", 9)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (
            {"when_matched": [when_matched_delete(), when_matched_update(condition="v > 1")]},
            "expected a condition on every when_matched clause but the last",
        ),
        (
            {"when_matched": [when_matched_update(set={"v": "source.vv"})]},
            "vv",
        ),
        (
            {"when_not_matched_by_source": [when_not_matched_by_source_delete(condition="q > 1")]},
            "q",
        ),
        (
            {"when_matched": [when_matched_update()], "matched_condition": "v > 1"},
            "give each clause its condition= instead",
        ),
    ],
)
def test_bad_clauses_are_refused_before_anything_runs(
    spark: Any, tmp_path: Path, options: dict[str, Any], words: str
) -> None:
    ours, _ = twins(tmp_path)
    frame = spark.createDataFrame([(1, "p1", 1)], DDL)
    with pytest.raises(InvalidArgumentError) as e:
        lakelog.spark.merge(spark, ours, frame, "id", **options)
    assert words in str(e.value)
    assert len(lakelog.open_table(ours).history()) == 3


def test_a_column_in_a_not_matched_by_source_clause_is_refused(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    ours, _ = twins(tmp_path)
    frame = spark.createDataFrame([(1, "p1", 1)], DDL)
    with pytest.raises(InvalidArgumentError, match="no source row matched these rows"):
        lakelog.spark.merge(
            spark,
            ours,
            frame,
            "id",
            when_not_matched_by_source=[when_not_matched_by_source_update(set={"v": F.lit(0)})],
        )


def test_duplicate_source_keys_are_the_embedded_error(spark: Any, tmp_path: Path) -> None:
    ours, theirs = twins(tmp_path)
    data = [(2, "p0", 1), (2, "p0", 2)]
    with pytest.raises(InvalidArgumentError, match="more than once") as spark_error:
        lakelog.spark.merge(spark, ours, spark.createDataFrame(data, DDL), "id", **clauses())
    with pytest.raises(InvalidArgumentError, match="more than once") as embedded_error:
        lakelog.open_table(theirs).merge(
            pa.Table.from_pylist(
                [dict(zip(SCHEMA.names, r, strict=True)) for r in data], schema=SCHEMA
            ),
            "id",
            **clauses(),
        )
    assert str(spark_error.value) == str(embedded_error.value)
    assert len(lakelog.open_table(ours).history()) == 3
