"""Streaming into lakelog: rows per second of ``writeStream.format("lakelog")`` against the
same query into Spark's own Parquet file sink, in one run.

The source is Spark's ``rate-micro-batch`` source (a fixed ``rowsPerBatch`` rows per
micro-batch, whatever the time: the sink, not the clock, sets the pace) with four derived
columns; both queries run back to back (``trigger(processingTime="0 seconds")``, so a
micro-batch starts as soon as the previous one committed) until ``--batches`` micro-batches
after one warm-up batch, and each run's throughput is the rows of those batches over the
sum of their ``triggerExecution`` durations (Spark's own progress reports: planning, the
tasks, the sink's commit and the checkpoint). Runs alternate between the sinks so load on
the machine hits both alike; the medians and their ratio are printed.

* lakelog: each task writes Parquet with lakelog's Arrow writer in a Python worker
  (rows cross from the JVM as Arrow batches); the driver commits once per batch with the
  query's id and batch id as an app transaction (exactly once).
* Spark's file sink: Spark's native Parquet writer in the JVM; the driver records the
  batch's files in ``_spark_metadata`` (Spark's own exactly-once log for this sink).

Run: ``python benchmarks/bench_spark_sink.py [--quick] [--rows-per-batch N] [--batches N]
[--runs N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))

from _common import print_table, write_json_result  # noqa: E402

import lakelog  # noqa: E402
import lakelog.spark as lspark  # noqa: E402

WORK = Path("/tmp/lakelog-bench-spark-sink")


def _source(spark: Any, rows_per_batch: int) -> Any:
    from pyspark.sql import functions as F

    rate = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 2)
        .load()
    )
    return rate.select(
        F.col("value").alias("id"),
        F.col("timestamp").alias("ts"),
        (F.col("value") % 100).alias("k"),
        F.concat(F.lit("user-"), (F.col("value") % 1000).cast("string")).alias("user"),
        (F.col("value") * 0.5).alias("x"),
    )


def run_once(spark: Any, sink: str, rows_per_batch: int, batches: int) -> dict[str, float]:
    """One query into ``sink`` until ``batches`` micro-batches after the warm-up one; its
    throughput from Spark's progress reports."""
    root = WORK / sink
    shutil.rmtree(root, ignore_errors=True)
    writer = (
        _source(spark, rows_per_batch)
        .writeStream.option("checkpointLocation", str(root / "checkpoint"))
        .trigger(processingTime="0 seconds")
    )
    if sink == "lakelog":
        query = writer.format("lakelog").start(str(root / "table"))
    else:
        query = writer.format("parquet").option("path", str(root / "table")).start()
    try:
        deadline = time.monotonic() + 1800
        while True:
            if query.exception() is not None:
                raise RuntimeError(f"{sink} query failed: {query.exception()}")
            done = [p for p in query.recentProgress if p["numInputRows"] > 0]
            if len(done) >= batches + 1:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{sink} query made no progress")
            time.sleep(0.2)
    finally:
        query.stop()
    measured = done[1 : batches + 1]  # the first batch warms up workers and the JVM
    rows = sum(p["numInputRows"] for p in measured)
    secs = sum(p["durationMs"]["triggerExecution"] for p in measured) / 1000
    commit = statistics.median(p["durationMs"].get("addBatch", 0) for p in measured) / 1000
    if sink == "lakelog":
        snap = lakelog.open_table(str(root / "table")).snapshot()
        assert snap.num_rows == sum(p["numInputRows"] for p in query.recentProgress), snap
    return {"rows": rows, "seconds": secs, "rows_per_s": rows / secs, "add_batch_s": commit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 rows x 5 batches, 3 runs")
    parser.add_argument("--rows-per-batch", type=int, default=None)
    parser.add_argument("--batches", type=int, default=None)
    parser.add_argument("--runs", type=int, default=None)
    args = parser.parse_args()
    rows_per_batch = args.rows_per_batch or (100_000 if args.quick else 1_000_000)
    batches = args.batches or (5 if args.quick else 10)
    runs = args.runs or (3 if args.quick else 5)

    from _services import build_spark_session

    spark = build_spark_session(
        "lakelog-bench-spark-sink",
        master="local[2]",
        extra_conf={"spark.driver.memory": "4g", "spark.sql.shuffle.partitions": "2"},
        log_level="OFF",  # stopping a query interrupts its running batch: noise, not errors
    )
    lspark.register(spark)
    results: dict[str, list[dict[str, float]]] = {"lakelog": [], "parquet": []}
    for i in range(runs):
        for sink in ("lakelog", "parquet") if i % 2 == 0 else ("parquet", "lakelog"):
            r = run_once(spark, sink, rows_per_batch, batches)
            results[sink].append(r)
            print(
                f"run {i + 1} {sink:8s}: {r['rows_per_s']:>12,.0f} rows/s "
                f"({r['rows']:,} rows in {r['seconds']:.2f}s; addBatch median "
                f"{r['add_batch_s']:.2f}s)",
                flush=True,
            )
    med = {s: statistics.median(r["rows_per_s"] for r in rs) for s, rs in results.items()}
    add = {s: statistics.median(r["add_batch_s"] for r in rs) for s, rs in results.items()}
    print(
        f"\n{rows_per_batch:,} rows per micro-batch, {batches} measured batches per run, "
        f"{runs} runs, local[2], {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    )
    print_table(
        [
            {
                "sink": "writeStream.format('lakelog')" if s == "lakelog" else "Spark parquet sink",
                "median rows/s": f"{med[s]:,.0f}",
                "median addBatch s": f"{add[s]:.2f}",
                "runs rows/s": ", ".join(f"{r['rows_per_s']:,.0f}" for r in results[s]),
            }
            for s in ("lakelog", "parquet")
        ]
    )
    ratio = med["lakelog"] / med["parquet"]
    print(f"\nratio (lakelog / Spark parquet sink, rows per second): {ratio:.2f}x")
    write_json_result(
        "bench_spark_sink",
        {
            "quick": args.quick,
            "rows_per_batch": rows_per_batch,
            "batches": batches,
            "runs": runs,
            "lakelog_rows_per_s": med["lakelog"],
            "parquet_rows_per_s": med["parquet"],
            "ratio": ratio,
            "cpu_count": os.cpu_count(),
        },
    )
    spark.stop()


if __name__ == "__main__":
    main()
