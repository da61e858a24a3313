"""``lakelog.spark.read`` hands Spark its file list without a status call per file.

Spark takes the files, sizes and times of a plan from a file-sink log that lakelog writes
to a local temporary folder (Spark's ``MetadataLogFileIndex``), so building a DataFrame
over 100,000 files asks the filesystem nothing per file. What must hold, against a real
SparkSession:

* the scan's file index is the log's, and it holds exactly the plan's files;
* no file is checked while the DataFrame is built: a file deleted behind the log's back
  is only noticed when rows are read (the URL path refuses to build at all);
* the temporary folder is gone once the DataFrame exists, and the DataFrame still reads;
* partition values come from folder names on partitioned tables and from nowhere on
  unpartitioned ones, even when an unpartitioned table's files sit in ``k=v`` folders;
* a setting that would make Spark ignore the log, or a table root Spark would parse as a
  partition, still reads exactly the table (the URL path takes over).
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.log.actions import AddFile

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

read_module = sys.modules["lakelog.spark.read"]


def _index_name(df: Any) -> str:
    plan = df._jdf.queryExecution().executedPlan().toString()
    return "MetadataLogFileIndex" if "MetadataLogFileIndex" in plan else "other"


def _partitioned(tmp_path: Path) -> str:
    uri = str(tmp_path / "t")
    data = pa.table(
        {
            "day": pa.array([dt.date(2024, 1, 1 + i % 3) for i in range(12)], pa.date32()),
            "kind": pa.array([["a b", "50%", "é", None][i % 4] for i in range(12)]),
            "id": pa.array(range(12), pa.int64()),
        }
    )
    lakelog.write_table(uri, data.slice(0, 6), partition_by=["day"])
    lakelog.open_table(uri).append(data.slice(6))
    return uri


def _local_paths(uris: list[str]) -> list[str]:
    return [urllib.parse.unquote(urllib.parse.urlparse(u).path) for u in uris]


def test_the_scan_takes_its_files_from_the_log(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = _partitioned(tmp_path)
    made: list[str] = []
    real = tempfile.mkdtemp

    def mkdtemp(*args: Any, **kwargs: Any) -> str:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(read_module.tempfile, "mkdtemp", mkdtemp)
    plan = lspark.plan_read(spark, uri)
    df = plan.to_dataframe(spark)
    assert _index_name(df) == "MetadataLogFileIndex"
    assert made and not any(os.path.exists(m) for m in made)  # the log's folder is gone
    assert sorted(_local_paths(df.inputFiles())) == sorted(
        u.removeprefix("file://") for u in plan.urls
    )
    got = sorted((r.id, r.day, r.kind) for r in df.collect())
    want = lakelog.open_table(uri).snapshot().to_arrow()
    assert got == sorted(
        zip(
            want.column("id").to_pylist(),
            want.column("day").to_pylist(),
            want.column("kind").to_pylist(),
            strict=True,
        )
    )
    # pruning still applies: only one day's files are in the index
    one_day = lspark.read(spark, uri, filter="day = '2024-01-02'")
    want_urls = lspark.plan_read(spark, uri, filter="day = '2024-01-02'").urls
    assert 0 < len(want_urls) < len(plan.urls)
    assert sorted(_local_paths(one_day.inputFiles())) == sorted(
        u.removeprefix("file://") for u in want_urls
    )
    assert {r.day for r in one_day.collect()} == {dt.date(2024, 1, 2)}


def test_no_file_is_checked_while_the_dataframe_is_built(spark: Any, tmp_path: Path) -> None:
    uri = _partitioned(tmp_path)
    plan = lspark.plan_read(spark, uri)
    victim = plan.files[0].path
    os.remove(os.path.join(uri, victim))
    df = plan.to_dataframe(spark)  # builds: nothing asked the filesystem about the file
    assert _index_name(df) == "MetadataLogFileIndex"
    with pytest.raises(Exception, match=r"(?i)not exist|FileNotFound|No such file"):
        df.count()
    # the URL path, by contrast, checks every file before it builds anything
    with pytest.raises(Exception, match=r"(?i)not exist|PATH_NOT_FOUND"):
        spark.read.parquet(*plan.urls)


def test_unpartitioned_files_in_k_v_folders_get_no_partition_column(
    spark: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64())])
    table = lakelog.create_table(uri, schema)
    adds = []
    for i, rel in enumerate(["a=1/f.parquet", "a=2/g.parquet", "h.parquet", "x/y=3/z.parquet"]):
        path = tmp_path / "t" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": [i]}, schema=schema), path)
        adds.append(AddFile(path=rel, size_bytes=path.stat().st_size, num_rows=1))
    table.commit(adds, operation="APPEND", kind="append")
    df = lspark.read(spark, uri)
    assert _index_name(df) == "MetadataLogFileIndex"
    assert df.columns == ["id"]
    assert sorted(r.id for r in df.collect()) == [0, 1, 2, 3]


def test_a_setting_that_ignores_the_log_still_reads_the_table(spark: Any, tmp_path: Path) -> None:
    uri = _partitioned(tmp_path)
    key = "spark.sql.streaming.fileStreamSink.ignoreMetadata"
    spark.conf.set(key, "true")
    try:
        df = lspark.read(spark, uri)
        assert _index_name(df) == "MetadataLogFileIndex"  # set back to false while built
        assert df.count() == 12
    finally:
        spark.conf.unset(key)
    assert spark.conf.get(key, None) in (None, "false")


def test_a_root_named_like_a_partition_falls_back_to_urls(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "env=prod")
    lakelog.write_table(uri, pa.table({"day": ["d1", "d2"], "id": [1, 2]}), partition_by=["day"])
    df = lspark.read(spark, uri)
    assert _index_name(df) == "other"
    assert df.columns == ["day", "id"]
    assert sorted((r.day, r.id) for r in df.collect()) == [("d1", 1), ("d2", 2)]


def test_when_spark_does_not_take_the_log_the_urls_are_read(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If Spark's index does not hold exactly the plan's files, the URL path is used."""
    uri = _partitioned(tmp_path)
    monkeypatch.setattr(read_module, "_SINK_LOG_HEADER", b"v999")  # a log Spark refuses
    df = lspark.read(spark, uri)
    assert _index_name(df) == "other"
    assert df.count() == 12


def _column_index_option(df: Any) -> str | None:
    leaf = df._jdf.queryExecution().analyzed().collectLeaves().head()
    got = leaf.relation().options().get("parquet.filter.columnindex.enabled")
    return str(got.get()) if got.isDefined() else None


@pytest.mark.parametrize("page_index", ["true", "false"])
def test_single_page_files_are_read_without_the_column_index(
    spark: Any, tmp_path: Path, page_index: str
) -> None:
    """Files whose chunks are single pages (tagged by the writer) are scanned with
    parquet-mr's column-index filtering off: their index repeats the statistics."""
    uri = str(tmp_path / "t")
    data = pa.table({"k": pa.array(range(3_000), pa.int64()), "s": [f"v{i}" for i in range(3_000)]})
    lakelog.write_table(
        uri,
        data,
        properties={"lakelog.row_group_size": 500, "lakelog.parquet.page_index": page_index},
    )
    df = lspark.read(spark, uri, filter="k between 700 and 720")
    assert _index_name(df) == "MetadataLogFileIndex"
    assert _column_index_option(df) == ("false" if page_index == "true" else None)
    assert sorted(r.k for r in df.collect()) == list(range(700, 721))
