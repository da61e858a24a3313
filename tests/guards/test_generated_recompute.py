"""An update that changes a column a generated column reads computes the generated
column again from the new values when it does not set it, and checks it when it does
(Delta's semantics; docs/constraints.md): ``Table.update``, merge's UPDATE clauses, and
Spark's update and merge."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
from lakelog import ConstraintViolationError

SCHEMA = pa.schema(
    [("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("day", pa.date32()),
     ("amount", pa.float64())]
)  # fmt: skip
TS = dt.datetime(2026, 3, 4, 10, 0, tzinfo=dt.timezone.utc)
LATER = dt.datetime(2026, 5, 6, 10, 0, tzinfo=dt.timezone.utc)


def _table(tmp_path: Path) -> lakelog.Table:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, generated={"day": "CAST(ts AS DATE)"})
    t.append(pa.table({"id": [1, 2], "ts": [TS, TS], "amount": [1.0, 2.0]}))
    return t


def _days(t: lakelog.Table) -> list[Any]:
    t.refresh()
    return t.snapshot().to_arrow().sort_by("id")["day"].to_pylist()


def test_update_computes_a_generated_column_again(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.update("id = 1", set={"ts": pa.scalar(LATER, pa.timestamp("us", tz="UTC"))})
    assert _days(t) == [dt.date(2026, 5, 6), dt.date(2026, 3, 4)]
    t.update("id = 2", set={"amount": 5.0})  # reads nothing it changes: kept
    assert _days(t) == [dt.date(2026, 5, 6), dt.date(2026, 3, 4)]
    with pytest.raises(ConstraintViolationError, match="'day'"):  # set, and wrong
        t.update(
            "id = 2",
            set={"ts": pa.scalar(LATER, pa.timestamp("us", tz="UTC")), "day": dt.date(2020, 1, 1)},
        )


def test_merge_update_computes_a_generated_column_again(tmp_path: Path) -> None:
    t = _table(tmp_path)
    source = pa.table({"id": [2], "ts": pa.array([LATER], pa.timestamp("us", tz="UTC"))})
    t.merge(
        source,
        on="id",
        when_matched=lakelog.when_matched_update({"ts": "source.ts"}),
        when_not_matched=None,
    )
    assert _days(t) == [dt.date(2026, 3, 4), dt.date(2026, 5, 6)]


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_spark_update_and_merge_compute_a_generated_column_again(
    spark: Any, tmp_path: Path
) -> None:
    import lakelog.spark as lspark

    t = _table(tmp_path)
    lspark.update(
        spark, t.uri, "id = 1", set={"ts": pa.scalar(LATER, pa.timestamp("us", tz="UTC"))}
    )
    assert _days(t)[0] == dt.date(2026, 5, 6)
    source = spark.createDataFrame([(2, LATER)], "id long, ts timestamp")
    lspark.merge(
        spark,
        t.uri,
        source,
        on="id",
        when_matched=[lakelog.when_matched_update({"ts": "source.ts"})],
        when_not_matched=None,
    )
    assert _days(t) == [dt.date(2026, 5, 6), dt.date(2026, 5, 6)]
