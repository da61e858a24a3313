"""Optimized writes from Spark: files written and a following query, with and without.

One DataFrame of ``--rows`` (2,000,000) rows spread over ``--tasks`` (64) Spark tasks,
each holding rows of every one of ``--parts`` (16) partitions, written by
``lakelog.spark.write`` into two tables:

* **plain**: Spark's writer as is, one file per task and partition;
* **optimize_write=True**: the rows shuffled by partition first (``REBALANCE`` hint,
  adaptive execution sizing the tasks to ``lakelog.target_file_size``).

Reported per side: the write's time, files written, and the time (median of ``--runs``)
of two queries on a fresh DataFrame: a whole-table aggregate and one partition's
aggregate; with the ratios plain / optimized.

    python benchmarks/bench_optimize_write.py [--rows N] [--tasks N] [--parts N] [--runs N]
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

from _common import median_time, print_table, write_json_result  # noqa: E402

import lakelog  # noqa: E402
import lakelog.spark as lspark  # noqa: E402

WORK = Path("/tmp/lakelog-bench-optimize-write")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--parts", type=int, default=16)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("lakelog-bench-optimize-write")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.range(0, args.rows, numPartitions=args.tasks).select(
        F.col("id"),
        (F.col("id") % args.parts).alias("part"),
        (F.rand(7) * 1000).alias("v"),
        F.concat(F.lit("user-"), (F.col("id") % 9973).cast("string")).alias("user"),
    )
    rows, results = [], {}
    for name, optimize in (("plain", False), ("optimize_write=True", True)):
        uri = str(WORK / ("optimized" if optimize else "plain"))
        started = time.perf_counter()
        lspark.write(df, uri, partition_by=["part"], optimize_write=optimize)
        write_s = time.perf_counter() - started
        files = lakelog.open_table(uri).snapshot().num_files

        def whole(uri: str = uri) -> None:
            lspark.read(spark, uri).agg(F.sum("v"), F.count("*")).collect()

        def one_part(uri: str = uri) -> None:
            lspark.read(spark, uri).where("part = 3").agg(F.sum("v")).collect()

        whole_s, _ = median_time(whole, repeat=args.runs, warmup=1)
        part_s, _ = median_time(one_part, repeat=args.runs, warmup=1)
        results[name] = {
            "write_s": write_s,
            "files": files,
            "query_all_s": whole_s,
            "query_one_partition_s": part_s,
        }
        rows.append(
            {
                "write": name,
                "write s": write_s,
                "files": files,
                "query all s": whole_s,
                "query 1 part s": part_s,
            }
        )
    plain, opt = results["plain"], results["optimize_write=True"]
    ratios = {
        "files plain/optimized": plain["files"] / opt["files"],
        "query all plain/optimized": plain["query_all_s"] / opt["query_all_s"],
        "query 1 part plain/optimized": plain["query_one_partition_s"]
        / opt["query_one_partition_s"],
        "write optimized/plain": opt["write_s"] / plain["write_s"],
    }
    print_table(rows)
    for k, v in ratios.items():
        print(f"{k}: {v:.2f}x")
    write_json_result(
        "optimize_write",
        {
            "rows": args.rows,
            "tasks": args.tasks,
            "parts": args.parts,
            "results": results,
            "ratios": ratios,
        },
    )
    spark.stop()


if __name__ == "__main__":
    main()
