"""Spark at scale: building a DataFrame over a plan of many files without a status call
per file on the driver.

A table of ``--files`` one-row Parquet files (default 100,000; ``--quick``: 10,000) on
local disk, committed by lakelog. Each side is timed from nothing to a planned query
(``df._jdf.queryExecution().executedPlan()``: Spark has resolved its file index and
cut its splits), which is where per-file status calls happen; no rows are read:

* ``lakelog.spark.read``: the file list, sizes and times from the log, handed to Spark as
  a file-sink log (``MetadataLogFileIndex``): no status call per file;
* the plan's URLs handed to ``spark.read.parquet`` (what ``lakelog.spark.read`` did
  before, and still does on Spark Connect): the driver checks every file one by one
  (cheap here; ``listing_conf``);
* the same with the checks in one Spark job, as the URL path does on every other
  filesystem (where a check is a request);
* ``spark.read.format("lakelog")``: the Python data source takes sizes from the log
  and makes no status call at all (reads go through pyarrow in Python workers);
* peer: ``spark.read.parquet(<folder>)``, Spark listing the folder itself (one
  listing per folder; wrong once files are replaced, see bench_spark_read.py).

On local disk a status call costs microseconds, so the ratios here understate what
an object store (a request of 10-50 ms each) does to the one-by-one path.
Run: ``python benchmarks/bench_spark_files.py [--quick] [--files N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from _common import median_time, print_table, write_json_result  # noqa: E402

import lakelog  # noqa: E402
import lakelog.spark as lspark  # noqa: E402
from lakelog.log.actions import AddFile, FileStats  # noqa: E402
from lakelog.spark.read import listing_conf, session_conf  # noqa: E402

WORK = Path("/tmp/lakelog-bench-spark-files")
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def build(n: int) -> str:
    root = WORK / f"t{n}"
    marker = root / ".built"
    if marker.exists():
        return str(root)
    shutil.rmtree(root, ignore_errors=True)
    table = lakelog.create_table(str(root), SCHEMA)
    adds = []
    for i in range(n):
        name = f"part-{i:07d}.parquet"
        pq.write_table(pa.table({"id": [i], "v": ["x"]}, schema=SCHEMA), str(root / name))
        adds.append(
            AddFile(
                path=name,
                size_bytes=os.path.getsize(root / name),
                num_rows=1,
                stats=FileStats(min={"id": i}, max={"id": i}, null_count={"id": 0, "v": 0}),
            )
        )
    table.commit(adds, operation="APPEND", kind="append")
    marker.touch()
    return str(root)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true", help="10,000 files, 3 runs")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    n, runs = (10_000, 3) if args.quick else (args.files, args.runs)
    started = time.perf_counter()
    uri = build(n)
    print(f"table of {n:,} files ready in {time.perf_counter() - started:.1f} s", flush=True)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("lakelog-bench-spark-files")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    lspark.register(spark)

    def planned(df: object) -> None:
        df._jdf.queryExecution().executedPlan()  # type: ignore[attr-defined]

    def lakelog_read() -> None:
        planned(lspark.read(spark, uri))

    def lakelog_urls() -> None:
        plan = lspark.plan_read(spark, uri)
        with session_conf(spark, listing_conf(spark, len(plan.urls), plan.base_url)):
            reader = spark.read.schema("id long, v string").option("__globPaths__", "false")
            planned(reader.parquet(*plan.urls))

    def lakelog_job() -> None:
        plan = lspark.plan_read(spark, uri)
        with session_conf(spark, listing_conf(spark, len(plan.urls), "s3a://")):
            reader = spark.read.schema("id long, v string").option("__globPaths__", "false")
            planned(reader.parquet(*plan.urls))

    def data_source() -> None:
        planned(spark.read.format("lakelog").load(uri))

    def folder() -> None:
        planned(spark.read.parquet(uri))

    rows = []
    results = {}
    for name, fn in [
        ("spark folder listing (peer)", folder),
        ("lakelog.spark.read (file list from the log)", lakelog_read),
        ("lakelog URLs, driver checks each file", lakelog_urls),
        ("lakelog URLs, one Spark job checks files", lakelog_job),
        ('spark.read.format("lakelog")', data_source),
    ]:
        median, samples = median_time(fn, repeat=runs, warmup=1)
        results[name] = {"median_s": median, "samples_s": samples}
        rows.append({"path": name, "median s": median})
    peer = results["spark folder listing (peer)"]["median_s"]
    for row in rows:
        row["x peer"] = float(row["median s"]) / peer  # type: ignore[arg-type]
    print_table(rows)
    write_json_result("spark_files", {"files": n, "runs": runs, "results": results})
    spark.stop()


if __name__ == "__main__":
    main()
