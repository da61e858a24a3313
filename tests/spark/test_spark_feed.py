"""``lakelog.spark.read_changes``: the change feed as a DataFrame read in Spark tasks,
row for row the feed of :meth:`lakelog.Table.changes`."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
import lakelog.spark as lspark

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
FEED = ("_change_type", "_commit_version", "_commit_timestamp")


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "p": [f"p{i % 2}" for i in ids]}, schema=SCHEMA)


def _spark_rows(frame: Any) -> list[tuple[Any, ...]]:
    """Rows with the commit time as epoch milliseconds (Spark hands naive datetimes)."""
    from pyspark.sql import functions as F

    frame = frame.withColumn("_commit_timestamp", F.unix_millis("_commit_timestamp"))
    return sorted(tuple(r) for r in frame.collect())


def _feed_rows(feed: Any) -> list[tuple[Any, ...]]:
    table = feed.to_arrow()
    ts = table.column("_commit_timestamp").cast(pa.int64())
    table = table.set_column(table.schema.get_field_index("_commit_timestamp"), "t", ts)
    return sorted(tuple(r.values()) for r in table.to_pylist())


@pytest.fixture
def uri(tmp_path: Path) -> str:
    """Appends (v0-v2), a compaction (v3 claims, v4 rewrites: no rows), a full overwrite
    (v5: every row deleted, new ones inserted), an append (v6)."""
    path = str(tmp_path / "t")
    lakelog.write_table(path, _rows([0, 1, 2]), partition_by=["p"])
    table = lakelog.open_table(path)
    table.append(_rows([3, 4]))
    table.append(_rows([5]))
    assert table.compact(min_file_size=1 << 30, target_file_size=1 << 30).commits
    table.overwrite(_rows([10, 11]))
    table.append(_rows([12]))
    return path


@pytest.mark.parametrize(
    ("start", "end", "options"),
    [
        (1, None, {}),
        (0, 4, {}),
        (5, 5, {"columns": ["p", "id"]}),
        (2, None, {"filter": "id >= 4 and p = 'p1'"}),
    ],
    ids=["from-1", "appends-and-compaction", "overwrite-columns", "filter"],
)
def test_read_changes_equals_table_changes(
    spark: Any, uri: str, start: int, end: int | None, options: dict[str, Any]
) -> None:
    frame = lspark.read_changes(spark, uri, start, end, **options)
    expected = lakelog.open_table(uri).changes(start, end, **options)
    assert frame.columns == expected.schema.names
    got = _spark_rows(frame)
    assert got == _feed_rows(expected)
    assert got  # every range here has rows


def test_read_changes_by_time_and_its_errors(spark: Any, uri: str) -> None:
    table = lakelog.open_table(uri)
    ms = {h.version: h.timestamp_ms for h in table.history()}
    start = dt.datetime.fromtimestamp(ms[5] / 1000, tz=dt.timezone.utc)
    got = _spark_rows(lspark.read_changes(spark, uri, start))
    assert got == _feed_rows(table.changes(5))
    assert {r[3] for r in got} == {5, 6}

    table.delete("id = 10")  # no change files: the property is off
    with pytest.raises(Exception, match=r"lakelog\.change_data_feed=true"):
        lspark.read_changes(spark, uri, 6).collect()
    lspark.register(spark)
    with pytest.raises(Exception, match="startingVersion or startingTimestamp"):
        spark.read.format("lakelog").option("readChangeFeed", "true").load(uri).collect()
