"""Every ``lakelog.spark`` operation as a function ``op(spark, root, **args) -> JSON``, run
both on the test session's classic SparkSession and, in the Connect client process
(:mod:`_connect_client`), on a Spark Connect session: the tests compare the two results.

Each function builds its own tables under ``root`` (a fresh folder per engine) and
returns what it saw: rows, reports and the table's log (operations and row counts, not
ids or times), so the same operation on both engines gives equal results.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import lakelog
import lakelog.spark as lspark
from lakelog.errors import LakelogError

ROW_SCHEMA = "id long, p string, v double"


def _json(value: Any) -> Any:
    """``value`` with dates, decimals and bytes as text (JSON as both engines send it)."""
    return json.loads(json.dumps(value, default=str))


def _rows(uri: str) -> list[Any]:
    table = lakelog.open_table(uri).snapshot().to_arrow()
    return sorted(_json(table.to_pylist()), key=lambda r: json.dumps(r, sort_keys=True))


def _log(uri: str) -> list[Any]:
    """The table's commits, oldest first: operation and row figures (no ids, no times)."""
    out = []
    for h in reversed(lakelog.open_table(uri).history()):
        metrics = {
            k: h.metrics[k]
            for k in ("num_rows", "num_added_rows", "num_deleted_rows", "num_updated_rows")
            if k in h.metrics
        }
        out.append([h.version, h.operation, metrics])
    return _json(out)


def summary(uri: str) -> dict[str, Any]:
    files = lakelog.open_table(uri).snapshot().num_files
    return {"rows": _rows(uri), "log": _log(uri), "files": files}


def _frame(spark: Any, ids: range | list[int], *, p: str | None = None) -> Any:
    rows = [(i, p if p is not None else f"p{i % 2}", float(i)) for i in ids]
    return spark.createDataFrame(rows, ROW_SCHEMA)


def _refused(fn: Any) -> str | None:
    """The lakelog error class ``fn()`` raises (None if it returns)."""
    try:
        fn()
    except LakelogError as e:
        return type(e).__name__
    return None


def _appends(uri: str, n: int, rows: int = 20, **kw: Any) -> None:
    for i in range(n):
        ids = list(range(i * rows, (i + 1) * rows))
        lakelog.write_table(
            uri,
            pa.table({"id": ids, "a": [x % 7 for x in ids], "b": [x % 5 for x in ids]}),
            **kw,
        )


# -- operations ------------------------------------------------------------------------


def write_modes(spark: Any, root: str) -> dict[str, Any]:
    """``lakelog.spark.write`` in every mode."""
    uri = os.path.join(root, "t")
    lspark.write(_frame(spark, range(10)), uri, partition_by=["p"])
    lspark.write(_frame(spark, range(10, 14)), uri, mode="append")
    lspark.write(_frame(spark, [100, 102], p="p0"), uri, mode="overwrite", replace_where="p = 'p0'")
    lspark.write(_frame(spark, [201], p="p1"), uri, mode="overwrite", partition_overwrite="dynamic")
    outside = _refused(
        lambda: lspark.write(
            _frame(spark, [7], p="p1"), uri, mode="overwrite", replace_where="p = 'p0'"
        )
    )
    exists = _refused(lambda: lspark.write(_frame(spark, [1]), uri, mode="error"))
    wider = spark.createDataFrame([(300, "p0", 3.0, "x")], ROW_SCHEMA + ", w string")
    lspark.write(wider, uri, schema_mode="merge")
    once = [
        lspark.write(
            _frame(spark, [400]), uri, schema_mode="merge", app_id="job", app_version=1
        ).skipped
        for _ in range(2)
    ]
    full = os.path.join(root, "full")
    lspark.write(_frame(spark, range(3)), full)
    lspark.write(_frame(spark, range(5, 7)), full, mode="overwrite")
    return {
        **summary(uri),
        "outside": outside,
        "exists": exists,
        "once": once,
        "full": summary(full),
    }


def format_write(spark: Any, root: str) -> dict[str, Any]:
    """``df.write.format("lakelog")`` and ``spark.read.format("lakelog")``."""
    uri = os.path.join(root, "t")
    lspark.register(spark)
    _frame(spark, range(6)).write.format("lakelog").mode("append").save(uri)
    _frame(spark, range(6, 9)).write.format("lakelog").mode("append").save(uri)
    (
        _frame(spark, [1, 2])
        .write.format("lakelog")
        .mode("overwrite")
        .option("replaceWhere", "id < 3")
        .save(uri)
    )
    back = spark.read.format("lakelog").load(uri).where("id > 3").collect()
    return {**summary(uri), "read": sorted(r.id for r in back)}


def streaming(spark: Any, root: str) -> dict[str, Any]:
    """The streaming source and sink: a lakelog table streamed into another, twice."""
    src, dst = os.path.join(root, "src"), os.path.join(root, "dst")
    lspark.register(spark)
    lakelog.write_table(src, pa.table({"id": pa.array(range(5), pa.int64())}))

    def run() -> None:
        query = (
            spark.readStream.format("lakelog")
            .load(src)
            .writeStream.format("lakelog")
            .option("checkpointLocation", dst + "-checkpoint")
            .trigger(availableNow=True)
            .start(dst)
        )
        query.awaitTermination()

    run()
    lakelog.write_table(src, pa.table({"id": pa.array(range(5, 8), pa.int64())}))
    run()
    return {"rows": _rows(dst), "log": [op for _, op, _ in _log(dst)]}


def row_level(spark: Any, root: str) -> dict[str, Any]:
    """``merge``, ``delete`` and ``update``."""
    uri = os.path.join(root, "t")
    for i in range(3):
        ids = list(range(i * 10, i * 10 + 10))
        lakelog.write_table(
            uri,
            pa.table({"id": ids, "p": [f"p{x % 2}" for x in ids], "v": [float(x) for x in ids]}),
        )
    m = lspark.merge(spark, uri, _frame(spark, [5, 15, 40]), on="id", when_matched="update")
    d = lspark.delete(spark, uri, "id < 3")
    u = lspark.update(spark, uri, "id = 20", set={"v": pc.field("v") * 10})
    counts = [
        [m.inserted_rows, m.updated_rows, m.deleted_rows],
        [d.deleted_rows],
        [u.updated_rows],
    ]
    return {**summary(uri), "counts": counts}


def compact(spark: Any, root: str) -> dict[str, Any]:
    uri = os.path.join(root, "t")
    _appends(uri, 6)
    report = lspark.compact(spark, uri, min_input_files=2)
    return {
        **summary(uri),
        "compacted": [report.compacted_file_count, report.output_file_count],
        "spark_groups": report.extra["spark_groups"],
        "failed": report.extra["failed_groups"],
    }


def optimize_write_auto(spark: Any, root: str) -> dict[str, Any]:
    """An optimized write of a DataFrame over 8 tasks into 4 partitions, and the
    auto-compaction (as a Spark job) after ``lakelog.spark.write`` appends."""
    from pyspark.sql import functions as F

    uri, auto = os.path.join(root, "t"), os.path.join(root, "auto")
    wide = spark.range(0, 400, numPartitions=8).select("id", (F.col("id") % 4).alias("p"))
    lspark.write(wide, uri, partition_by=["p"], optimize_write=True)
    props = {"lakelog.auto_compact": "true", "lakelog.auto_compact.min_files": "3"}
    lspark.write(spark.range(0, 10, numPartitions=2), auto, properties=props)
    outcome = lspark.write(spark.range(10, 20, numPartitions=2), auto).auto_compaction
    return {
        **summary(uri),
        "auto": None if outcome is None else outcome.status,
        "auto_files": lakelog.open_table(auto).snapshot().num_files,
        "auto_rows": _rows(auto),
    }


def optimize(spark: Any, root: str) -> dict[str, Any]:
    """Clustering: groups in one task each, and a group too large for one task (the
    Spark jobs of :mod:`lakelog.spark.cluster_job`)."""
    small, large = os.path.join(root, "small"), os.path.join(root, "large")
    _appends(small, 4)
    _appends(large, 4, rows=200)
    one = lspark.optimize(spark, small, zorder_by=["a", "b"], incremental=False)
    two = lspark.optimize(
        spark, large, zorder_by=["a", "b"], incremental=False, max_group_bytes=1024
    )
    return {
        "small": summary(small),
        "large": summary(large),
        "compacted": [one.compacted_file_count, two.compacted_file_count],
        "failed": [one.extra["failed_groups"], two.extra["failed_groups"]],
        "large_groups": [one.extra["large_groups"], two.extra["large_groups"]],
    }


def convert(spark: Any, root: str) -> dict[str, Any]:
    folder = os.path.join(root, "folder")
    for day in ("2024-01-01", "2024-01-02"):
        os.makedirs(os.path.join(folder, f"day={day}"))
        for k in range(3):
            ids = list(range(k * 4, k * 4 + 4))
            pq.write_table(
                pa.table({"id": ids}), os.path.join(folder, f"day={day}", f"{k}.parquet")
            )
    table = lspark.convert(spark, folder, files_per_task=2)
    return {**summary(folder), "version": table.version}


def changes_and_history(spark: Any, root: str) -> dict[str, Any]:
    """``read_changes`` and ``history``."""
    uri = os.path.join(root, "t")
    props = {"lakelog.change_data_feed": "true"}
    lakelog.write_table(uri, pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), properties=props)
    table = lakelog.open_table(uri)
    table.update("id = 2", set={"v": "B"})
    table.delete("id = 3")
    feed = lspark.read_changes(spark, uri, 0).collect()
    history = lspark.history(spark, uri).collect()
    return {
        "changes": sorted([r.id, r.v, r._change_type, r._commit_version] for r in feed),
        "history": [[r.version, r.operation] for r in history],
    }


def sql(spark: Any, root: str) -> dict[str, Any]:
    """``lakelog.spark.sql`` over a catalog's names: DDL, INSERT, UPDATE, DELETE, MERGE,
    a query with time travel, ALTER COLUMN ... TYPE and DESCRIBE HISTORY."""
    catalog = lakelog.connect_catalog(
        "sqlite:///" + os.path.join(root, "c.db"), warehouse=os.path.join(root, "wh")
    )
    try:
        run = lambda statement: lspark.sql(spark, statement, catalog=catalog)  # noqa: E731
        run("CREATE NAMESPACE s")
        run("CREATE TABLE s.t (id BIGINT, p STRING, v DOUBLE) USING lakelog PARTITIONED BY (p)")
        run("INSERT INTO s.t VALUES (1, 'a', 1.0), (2, 'a', 2.0), (3, 'b', 3.0)")
        counts = [
            run("UPDATE s.t SET v = v * 10 WHERE id = 2").collect()[0].asDict(),
            run("DELETE FROM s.t WHERE id = 1").collect()[0].asDict(),
            run(
                "MERGE INTO s.t AS t USING (SELECT 3 AS id, 'b' AS p, 30.0 AS v "
                "UNION ALL SELECT 4, 'c', 4.0) AS s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
            )
            .collect()[0]
            .asDict(),
        ]
        old = run("SELECT id FROM s.t VERSION AS OF 1 ORDER BY id").collect()
        run("ALTER TABLE s.t ADD COLUMNS (n INT)")
        run("ALTER TABLE s.t ALTER COLUMN n TYPE BIGINT")
        widened = dict(run("SELECT * FROM s.t").dtypes)["n"]
        history = run("DESCRIBE HISTORY s.t").collect()
        uri = catalog.load_table("s.t").uri
        return {
            **summary(uri),
            "counts": _json(counts),
            "v1": [r.id for r in old],
            "widened": widened,
            "history": len(history),
        }
    finally:
        catalog.close()


def merge_clauses(spark: Any, root: str) -> dict[str, Any]:
    """A MERGE with every kind of WHEN clause, conditions and SET / VALUES expressions,
    through ``lakelog.spark.sql`` and through ``lakelog.spark.merge`` with clause objects
    whose SQL text lakelog reads itself on Connect; and the embedded ``Table.merge``'s
    rows for the same clauses."""
    from lakelog import (
        when_matched_delete,
        when_matched_update,
        when_not_matched_by_source_update,
        when_not_matched_insert,
    )

    catalog = lakelog.connect_catalog(
        "sqlite:///" + os.path.join(root, "c.db"), warehouse=os.path.join(root, "wh")
    )
    start = pa.table({"id": [1, 2, 3, 4], "p": ["a", "a", "b", "b"], "v": [1.0, 2.0, 3.0, 4.0]})
    changes = [(1, "a", 10.0), (2, "x", 0.5), (7, "c", 70.0), (8, "c", 0.0)]
    try:
        catalog.create_namespace("s")
        by_sql = catalog.create_table("s.t", start.schema)
        by_sql.append(start)
        src = catalog.create_table("s.src", start.schema)
        src.append(
            pa.table(
                {
                    "id": [r[0] for r in changes],
                    "p": [r[1] for r in changes],
                    "v": [r[2] for r in changes],
                }
            )
        )
        counts = (
            lspark.sql(
                spark,
                "MERGE INTO s.t t USING s.src s ON t.id = s.id "
                "WHEN MATCHED AND s.p = 'x' THEN DELETE "
                "WHEN MATCHED THEN UPDATE SET v = t.v + s.v "
                "WHEN NOT MATCHED AND s.v > 1 THEN INSERT (id, p, v) VALUES (s.id, 'new', s.v * 2) "
                "WHEN NOT MATCHED BY SOURCE AND t.v > 3 THEN UPDATE SET p = 'idle'",
                catalog=catalog,
            )
            .collect()[0]
            .asDict()
        )
        clauses: dict[str, Any] = {
            "when_matched": [
                when_matched_delete(condition="source.p = 'x'"),
                when_matched_update(set={"v": "v + source.v"}),
            ],
            "when_not_matched": [
                when_not_matched_insert(
                    values={"id": "source.id", "p": "'new'", "v": "source.v * 2"},
                    condition="source.v > 1",
                )
            ],
            "when_not_matched_by_source": [
                when_not_matched_by_source_update(set={"p": "'idle'"}, condition="v > 3")
            ],
        }
        api = os.path.join(root, "api")
        lakelog.write_table(api, start)
        frame = spark.createDataFrame(changes, ROW_SCHEMA)
        report = lspark.merge(spark, api, frame, "id", **clauses)
        embedded = os.path.join(root, "embedded")
        lakelog.write_table(embedded, start)
        source = pa.table(
            {
                "id": [r[0] for r in changes],
                "p": [r[1] for r in changes],
                "v": [r[2] for r in changes],
            }
        )
        lakelog.open_table(embedded).merge(source, "id", **clauses)
        return {
            "sql": _rows(by_sql.uri),
            "counts": _json(counts),
            "api": _rows(api),
            "api_counts": [report.updated_rows, report.deleted_rows, report.inserted_rows],
            "embedded": _rows(embedded),
        }
    finally:
        catalog.close()


def typed_errors(spark: Any, root: str) -> dict[str, Any]:
    """lakelog's error classes out of Spark's exceptions: ``read_changes`` over a commit
    without change files, a missing data file through the ``lakelog`` format
    (``unwrap`` and ``typed_errors``), and the workers' environment check."""
    from lakelog.errors import ChangeFeedError, DataFileMissingError
    from lakelog.spark.environment import check_executors

    changed, missing = os.path.join(root, "t"), os.path.join(root, "m")
    lakelog.write_table(changed, pa.table({"id": pa.array(range(4), pa.int64())}))
    deleted = lakelog.open_table(changed).delete("id = 1").version
    lakelog.write_table(missing, pa.table({"id": pa.array(range(10), pa.int64())}))
    (path,) = [f.path for f in lakelog.open_table(missing).snapshot().files()]
    os.remove(os.path.join(missing, path))
    out: dict[str, Any] = {"deleted": deleted, "path": path}
    try:
        lspark.read_changes(spark, changed, 0).collect()
    except ChangeFeedError as e:
        out["read_changes"] = [type(e).__name__, e.version]
    lspark.register(spark)
    try:
        spark.read.format("lakelog").load(missing).collect()
    except Exception as e:  # noqa: BLE001 - Spark's own exception, of either engine
        found = lspark.unwrap(e)
        out["unwrap"] = [type(found).__name__, getattr(found, "path", None)]
    try:
        with lspark.typed_errors():
            spark.read.format("lakelog").load(missing).collect()
    except DataFileMissingError as e:
        out["typed"] = [e.path, e.version]
    check_executors(spark)  # the probe runs through the DataFrame API (cached by now)
    out["checked"] = True
    return out


def connect_expressions(spark: Any, root: str) -> dict[str, Any]:
    """Strings and Columns in the row-level APIs: run on Spark Connect, where lakelog sees
    no plan, a string where/matched_condition and a SET value's SQL text are read by
    lakelog's own readers and a Column where is refused naming the parameter."""
    from pyspark.sql import functions as F

    uri = os.path.join(root, "t")
    lakelog.write_table(uri, pa.table({"id": list(range(10)), "v": [float(i) for i in range(10)]}))
    source = spark.createDataFrame([(4, 1.0)], "id long, v double")
    calls = {
        "delete_string": lambda: lspark.delete(spark, uri, "id = 1").deleted_rows,
        "delete_column": lambda: lspark.delete(spark, uri, F.col("id") == 2),
        "update_sql_value": lambda: (
            lspark.update(spark, uri, "id = 3", set={"v": "v * 2"}).updated_rows
        ),
        "after_sql_value": lambda: _json(lakelog.open_table(uri).snapshot().to_arrow().to_pydict()),
        "update_literal": lambda: lspark.update(spark, uri, "id = 3", set={"v": 5.0}).updated_rows,
        "merge_sql_value": lambda: (
            lspark.merge(
                spark, uri, source, on="id", when_matched={"v": "v * 10"}, matched_condition="v > 3"
            ).updated_rows
        ),
        "merge_arithmetic_condition": lambda: lspark.merge(
            spark, uri, source, on="id", matched_condition="v < source.v * 2"
        ),
    }
    out: dict[str, Any] = {}
    for name, call in calls.items():
        try:
            out[name] = call()
        except LakelogError as e:
            out[name] = type(e).__name__ + ": " + str(e)
    return {**out, **summary(uri)}


def read_filters(spark: Any, root: str) -> dict[str, Any]:
    """``lakelog.spark.read`` with Column filters (and strings): files pruned, rows."""
    from pyspark.sql import functions as F

    uri = os.path.join(root, "t")
    day = dt.date(2024, 1, 1)
    for i in range(4):
        ids = list(range(i * 10, i * 10 + 10))
        lakelog.write_table(
            uri,
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "day": [day + dt.timedelta(days=i)] * 10,
                    "x": [float(v) for v in ids],
                    "s": [None if v % 10 == 0 else f"s{v}" for v in ids],
                }
            ),
        )
    filters: dict[str, Any] = {
        "gt": F.col("id") > 25,
        "lit_left": F.lit(12) >= F.col("id"),
        "and_or": (F.col("id") < 5) | ((F.col("id") >= 30) & (F.col("id") < 32)),
        "not": ~(F.col("id") < 30),
        "in": F.col("id").isin(1, 35),
        "date": F.col("day") == F.lit(day + dt.timedelta(days=2)),
        "between": F.col("id").between(11, 12),
        "ne": F.col("id") != 3,
        "float_gt": (F.col("x") > 30.0) & (F.col("id") >= 30),  # x: NaN rules, left out
        "partly": (F.col("id") > 30) & (F.length("s") > 1),
        "null": F.col("s").isNull() & (F.col("id") >= 20),
        "string": "id > 25",
    }
    out: dict[str, Any] = {}
    for name, f in filters.items():
        try:
            plan = lspark.plan_read(spark, uri, filter=f)
            rows = sorted(r.id for r in lspark.read(spark, uri, filter=f).collect())
            out[name] = {"skipped": plan.skipped_files, "rows": rows}
        except LakelogError as e:
            out[name] = {"error": type(e).__name__, "message": str(e)}
    try:
        lspark.read(spark, uri, filter=F.length("s") > 1)
        out["unusable"] = None
    except LakelogError as e:
        out["unusable"] = {"error": type(e).__name__, "message": str(e)}
    return out


def merge_like_embedded(
    spark: Any,
    root: str,
    ids: list[int | None],
    partitioned: bool,
    vectors: bool,
    matched: str = "update",
    by_source: str | None = None,
    cut: int = 6,
    second: str = "delete",
) -> dict[str, Any]:
    """A Spark merge, then a delete or an update, on a copy of a table, against the
    embedded ones (``tests/spark/test_spark_changes.py``'s property, on any session)."""
    import shutil

    ours, theirs = os.path.join(root, "spark"), os.path.join(root, "embedded")
    props = {"lakelog.deletion_vectors": "true" if vectors else "false"}
    for i in range(3):
        keys: list[int | None] = [i * 8 + j for j in range(12)]
        if i == 1:
            keys[5] = None
        t = pa.table(
            {
                "id": pa.array(keys, pa.int64()),
                "p": [f"p{(x or 0) % 2}" for x in keys],
                "v": [float(i * 100 + j) for j in range(12)],
            }
        )
        lakelog.write_table(ours, t, partition_by=["p"] if partitioned else [], properties=props)
    shutil.copytree(ours, theirs)
    source = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "p": [f"p{(x or 0) % 3 % 2}" for x in ids],
            "v": [1000.0 + n for n in range(len(ids))],
        }
    )
    frame = spark.createDataFrame([tuple(r.values()) for r in source.to_pylist()], ROW_SCHEMA)
    options: dict[str, Any] = {"on": "id", "when_matched": matched, "duplicates": "last"}
    want = lakelog.open_table(theirs).merge(
        source, when_not_matched_by_source=by_source or "ignore", **options
    )
    got = lspark.merge(spark, ours, frame, when_not_matched_by_source=by_source, **options)
    where = f"id < {cut} or v >= 1005"
    if second == "delete":
        a = lspark.delete(spark, ours, where)
        b = lakelog.open_table(theirs).delete(where)
    else:
        values = {"v": pc.field("v") * 2, "p": "p9"}
        a = lspark.update(spark, ours, where, set={**values, "p": "'p9'"})  # SQL
        b = lakelog.open_table(theirs).update(where, set=values)
    return {
        "same": _rows(ours) == _rows(theirs),
        "counts": [
            [got.inserted_rows, got.updated_rows, got.deleted_rows, got.committed],
            [want.inserted_rows, want.updated_rows, want.deleted_rows, want.committed],
        ],
        "second": [[a.deleted_rows, a.updated_rows], [b.deleted_rows, b.updated_rows]],
    }


def deletion_vectors(spark: Any, root: str) -> dict[str, Any]:
    """A table with deletion vectors read by ``read`` and by the ``lakelog`` format."""
    uri = os.path.join(root, "dv")
    lakelog.write_table(
        uri,
        pa.table({"id": pa.array(range(100), pa.int64()), "p": [f"p{i % 3}" for i in range(100)]}),
        partition_by=["p"],
        properties={"lakelog.deletion_vectors": "true", "lakelog.row_group_size": "8"},
    )
    table = lakelog.open_table(uri)
    table.delete("id < 10 or id = 55")
    table.update("id = 60", set={"id": 600})
    lspark.register(spark)
    return {
        "read": sorted(r.id for r in lspark.read(spark, uri).collect()),
        "filtered": sorted(r.id for r in lspark.read(spark, uri, filter="id < 70").collect()),
        "format": sorted(r.id for r in spark.read.format("lakelog").load(uri).collect()),
        "embedded": _ids(uri),
    }


def _ids(uri: str) -> list[int]:
    return sorted(lakelog.open_table(uri).snapshot().to_arrow().column("id").to_pylist())


def refusals(spark: Any, root: str) -> dict[str, Any]:
    """What each operation refuses: the same lakelog error class on both engines (a raw
    PySpark error propagates and fails the test)."""
    uri = os.path.join(root, "t")
    lakelog.write_table(uri, pa.table({"id": [1, 2, 3], "p": ["a", "b", "c"], "v": [1.0] * 3}))
    narrow = spark.createDataFrame([("1",)], "id string")
    return {
        "duplicates": _refused(
            lambda: lspark.merge(spark, uri, _frame(spark, [1, 1]), on="id", duplicates="error")
        ),
        "schema": _refused(lambda: lspark.write(narrow, uri)),
        "memory": _refused(lambda: lspark.compact(spark, "memory://connect-refusals")),
        "where": _refused(lambda: lspark.delete(spark, uri, "nope = 1")),
        "replace_where": _refused(
            lambda: lspark.write(
                _frame(spark, [1]), uri, mode="overwrite", replace_where="nope = 1"
            )
        ),
        "no_table": _refused(lambda: lspark.read(spark, os.path.join(root, "none"))),
        "rows": _rows(uri),
    }


def failed_group(spark: Any, root: str) -> dict[str, Any]:
    """A compaction whose group over a damaged file fails in its task: the other group
    commits, the failed one is reported with the line of its error (no JVM trace)."""
    uri = os.path.join(root, "t")
    for i in range(3):
        ids = list(range(i * 10, i * 10 + 10))
        lakelog.write_table(
            uri, pa.table({"id": ids, "p": ["a"] * 5 + ["b"] * 5}), partition_by=["p"]
        )
    damaged = next(f.path for f in lakelog.open_table(uri).snapshot().files() if "p=a" in f.path)
    with open(os.path.join(uri, damaged), "r+b") as fh:
        fh.truncate(40)
    report = lspark.compact(spark, uri, min_input_files=2)
    failed = report.extra["failed_groups"]
    return {
        "failed": len(failed),
        "error": next(iter(failed.values()), ""),
        "abandoned": len(report.abandoned_groups),
        "committed": report.commits != [],
    }
