"""Every write mode from Spark: ``replace_where``, dynamic partition overwrite, schema merge
and exactly-once, through :func:`lakelog.spark.write` and ``df.write.format("lakelog")``.

Each mode commits as the embedded operation does (``Table.overwrite(where=...)``,
``Table.overwrite(partitions=...)``, ``Table.append(schema_mode="merge")``), with the same
conflict rules; the race test runs the embedded append in a real process while the
Spark overwrite waits right before its commit.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _processes import spawn

import lakelog
import lakelog.spark as lspark
from lakelog import CommitConflictError, InvalidArgumentError, SchemaMismatchError

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

D1, D2, D3, D4 = (dt.date(2024, 1, d) for d in (1, 2, 3, 4))
SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.date32()), ("v", pa.string())])
SPARK_SCHEMA = "id long, day date, v string"


def _table(uri: str, rows: list[tuple[int, dt.date, str]], parts: list[str]) -> lakelog.Table:
    data = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], SCHEMA)
    lakelog.write_table(uri, data, partition_by=parts)
    return lakelog.open_table(uri)


def _rows(uri: str) -> list[tuple[Any, ...]]:
    t = lakelog.open_table(uri).snapshot().to_arrow()
    return sorted(tuple(r.values()) for r in t.to_pylist())


def _files(root: Path) -> set[str]:
    """Every file under the table folder outside the log (data files and staging)."""
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).parts[0] != "_lakelog"
    }


BASE = [(1, D1, "a"), (2, D1, "b"), (3, D2, "c"), (4, D2, "d"), (5, D3, "e")]


def test_replace_where_replaces_exactly_the_matching_rows(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _table(uri, BASE, ["day"])
    new = spark.createDataFrame([(10, D2, "new"), (11, D4, "new")], SPARK_SCHEMA)
    # a filter over a partition column and a data column: day=2 files keep id 3
    result = lspark.write(
        new, uri, mode="overwrite", replace_where="day >= '2024-01-02' and id != 3"
    )
    assert result.operation == "OVERWRITE" and not result.skipped
    assert _rows(uri) == sorted(
        [(1, D1, "a"), (2, D1, "b"), (3, D2, "c"), (10, D2, "new"), (11, D4, "new")]
    )
    t = lakelog.open_table(uri)
    assert t.version == 1  # one commit
    header = t.history(limit=1)[0]
    assert header.parameters["where"] == "day >= '2024-01-02' and id != 3"
    assert header.metrics["num_deleted_rows"] == 2 and header.metrics["num_inserted_rows"] == 2
    # a DNF filter selecting a whole partition: its file is removed, not rewritten; with
    # an app version, a replayed batch is skipped
    day1 = spark.createDataFrame([(20, D1, "z")], SPARK_SCHEMA)
    for attempt in range(2):
        done = lspark.write(
            day1,
            uri,
            mode="overwrite",
            replace_where=[("day", "=", D1)],
            app_id="fixes",
            app_version=1,
        )
        assert done.version == 2 and done.skipped == (attempt == 1)
    assert [r for r in _rows(uri) if r[1] == D1] == [(20, D1, "z")]
    t = lakelog.open_table(uri)
    assert t.history(limit=1)[0].metrics["num_copied_rows"] == 0
    assert t.snapshot().app_versions == {"fixes": 1}


def test_replace_where_refuses_rows_outside_and_leaves_the_table(
    spark: Any, tmp_path: Path
) -> None:
    root = tmp_path / "t"
    uri = str(root)
    t = _table(uri, BASE, ["day"])
    before_files, before_rows = _files(root), _rows(uri)
    bad = spark.createDataFrame(
        [(10, D2, "in"), (11, D3, "out"), (12, None, "out")], SPARK_SCHEMA
    )  # a null day does not match either: the filter is not true for it
    with pytest.raises(InvalidArgumentError, match=r"found 2 row\(s\) outside it") as e:
        lspark.write(bad, uri, mode="overwrite", replace_where="day = '2024-01-02'")
    assert "Nothing was committed" in str(e.value)
    assert t.refresh().version == 0
    assert _rows(uri) == before_rows
    assert _files(root) == before_files  # staged files gone, nothing published
    with pytest.raises(InvalidArgumentError, match="mode 'overwrite'"):
        lspark.write(bad, uri, replace_where="day = '2024-01-02'")  # mode="append"
    with pytest.raises(InvalidArgumentError, match="found both"):
        lspark.write(
            bad,
            uri,
            mode="overwrite",
            replace_where="day = '2024-01-02'",
            partition_overwrite="dynamic",
        )
    with pytest.raises(InvalidArgumentError, match="'nope'"):  # before Spark runs
        lspark.write(bad, uri, mode="overwrite", replace_where="nope = 1")
    assert _files(root) == before_files and t.refresh().version == 0


def test_dynamic_overwrite_replaces_only_the_dataframes_partitions(
    spark: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri, BASE, ["day"])
    kept = {f.path for f in t.snapshot().files() if f.partition["day"] != "2024-01-02"}
    new = spark.createDataFrame([(30, D2, "x"), (31, D4, "y")], SPARK_SCHEMA)
    result = lspark.write(new, uri, mode="overwrite", partition_overwrite="dynamic")
    assert result.operation == "SPARK WRITE"
    assert _rows(uri) == sorted([*(r for r in BASE if r[1] != D2), (30, D2, "x"), (31, D4, "y")])
    assert kept <= {f.path for f in t.refresh().snapshot().files()}  # untouched files
    header = t.history(limit=1)[0]
    assert header.parameters["partition_overwrite"] == "dynamic"
    assert {p["day"] for p in header.parameters["partitions"]} == {"2024-01-02", "2024-01-04"}
    # the session setting, as Spark's own writers read it
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        lspark.write(spark.createDataFrame([(40, D1, "w")], SPARK_SCHEMA), uri, mode="overwrite")
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    assert sorted(r[0] for r in _rows(uri)) == [5, 30, 31, 40]
    # an unpartitioned table: the whole table, as in Spark and Delta
    flat = str(tmp_path / "flat")
    _table(flat, BASE, [])
    lspark.write(new, flat, mode="overwrite", partition_overwrite="dynamic")
    assert sorted(r[0] for r in _rows(flat)) == [30, 31]


def test_schema_merge_adds_a_column_and_widens_a_type(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    first = spark.createDataFrame([(1, D1), (2, D2)], "n int, day date")
    lspark.write(first, uri, partition_by=["day"])
    wider = spark.createDataFrame([(3_000_000_000, D2, "hi")], "n long, day date, note string")
    with pytest.raises(SchemaMismatchError):
        lspark.write(wider, uri)  # strict, as before
    result = lspark.write(wider, uri, schema_mode="merge")
    t = lakelog.open_table(uri)
    assert t.schema.field("n").type == pa.int64()
    assert t.schema.field("note").type == pa.string()
    header = t.history(limit=1)[0]
    assert header.version == result.version == 1  # the metadata rides with the rows
    assert header.parameters["added_columns"] == ["note"]
    assert header.parameters["widened_columns"] == ["n"]
    got = sorted(tuple(r) for r in lspark.read(spark, uri).select("n", "day", "note").collect())
    assert got == [(1, D1, None), (2, D2, None), (3_000_000_000, D2, "hi")]
    # a DataFrame lacking a column and narrower than the table: nulls, cast up
    lspark.write(spark.createDataFrame([(4, D3)], "n int, day date"), uri, schema_mode="merge")
    assert (4, D3, None) in _rows(uri)
    assert lakelog.open_table(uri).schema.field("n").type == pa.int64()


def test_the_lakelog_format_takes_the_same_options(spark: Any, tmp_path: Path) -> None:
    lspark.register(spark)
    root = tmp_path / "t"
    uri = str(root)
    t = _table(uri, BASE, ["day"])

    def fmt(rows: list[Any], schema: str = SPARK_SCHEMA) -> Any:
        return spark.createDataFrame(rows, schema).write.format("lakelog")

    fmt([(10, D2, "new")]).mode("overwrite").option(
        "replaceWhere", "day = '2024-01-02' and id >= 4"
    ).save(uri)
    assert [r for r in _rows(uri) if r[1] == D2] == [(3, D2, "c"), (10, D2, "new")]
    files, version = _files(root), t.refresh().version
    with pytest.raises(Exception, match=r"found 1 row\(s\) outside it"):
        fmt([(11, D3, "out")]).mode("overwrite").option("replaceWhere", "day = '2024-01-02'").save(
            uri
        )
    assert _files(root) == files and t.refresh().version == version
    fmt([(20, D3, "x")]).mode("overwrite").option("partitionOverwriteMode", "dynamic").save(uri)
    assert [r for r in _rows(uri) if r[1] == D3] == [(20, D3, "x")]
    assert {r[1] for r in _rows(uri)} == {D1, D2, D3}
    fmt([(21, D1, "y", 1.5)], SPARK_SCHEMA + ", score double").mode("append").option(
        "mergeSchema", "true"
    ).save(uri)
    assert lakelog.open_table(uri).schema.names == ["id", "day", "v", "score"]
    for _ in range(2):  # a replayed batch lands once
        fmt([(22, D1, "once", None)], SPARK_SCHEMA + ", score double").mode("append").option(
            "txnAppId", "job"
        ).option("txnVersion", "7").save(uri)
    assert [r[0] for r in _rows(uri)].count(22) == 1
    assert lakelog.open_table(uri).snapshot().app_versions == {"job": 7}
    with pytest.raises(Exception, match="mode 'overwrite'"):
        fmt([(23, D1, "z")]).mode("append").option("partitionOverwriteMode", "dynamic").save(uri)


APPEND = """
import os, sys, time
import pyarrow as pa, lakelog
uri, day, gate = sys.argv[1], sys.argv[2], sys.argv[3]
while not os.path.exists(gate + ".paused"):
    time.sleep(0.01)
data = pa.table({"id": pa.array([99], pa.int64()),
                 "day": pa.array([pa.scalar(day).cast(pa.date32()).as_py()], pa.date32()),
                 "v": ["raced"]})
lakelog.open_table(uri).append(data)
open(gate, "w").close()
"""


def _finished(proc: subprocess.Popen[str]) -> None:
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]


@pytest.mark.parametrize("day,conflicts", [("2024-01-02", True), ("2024-01-03", False)])
def test_dynamic_overwrite_racing_an_embedded_append(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, day: str, conflicts: bool
) -> None:
    root = tmp_path / "t"
    uri = str(root)
    t = _table(uri, BASE, ["day"])
    gate = tmp_path / "gate"
    appender = spawn(APPEND, uri, day, str(gate))
    # this process's overwrite waits right before its commit's put, until the appender
    # (another process) committed into partition ``day`` and opened the gate
    monkeypatch.setenv("LAKELOG_PAUSE_AT", f"commit:before-put:SPARK WRITE:{gate}")
    new = spark.createDataFrame([(30, D2, "x")], SPARK_SCHEMA)
    if conflicts:
        files = _files(root)
        with pytest.raises(CommitConflictError, match="partitions it replaces"):
            lspark.write(new, uri, mode="overwrite", partition_overwrite="dynamic")
        _finished(appender)
        assert t.refresh().version == 1  # only the append
        # the overwrite's files are deleted: only the append's file is new
        assert len(_files(root) - files) == 1
        assert (99, D2, "raced") in _rows(uri)
    else:
        result = lspark.write(new, uri, mode="overwrite", partition_overwrite="dynamic")
        _finished(appender)
        assert result.version == 2 and result.attempts == 2  # rebased over the append
        assert _rows(uri) == sorted(
            [*(r for r in BASE if r[1] != D2), (30, D2, "x"), (99, D3, "raced")]
        )
