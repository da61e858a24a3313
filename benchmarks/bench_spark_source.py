"""Streaming out of lakelog: rows per second of ``readStream.format("lakelog")`` against
Spark's own Parquet file source over the same files, in one run.

The table is written by ``--appends`` appends of ``--rows`` rows each (one file per append;
five columns: ``id`` long, ``ts`` timestamp, ``k`` long, ``user`` string, ``x`` double).
Both queries read it with ``trigger(availableNow=True)`` (every file there when the query
starts, then the query ends) into Spark's ``noop`` sink, so only the source and the tasks
that read its files are measured; a run's time is from ``start()`` to the end of
``awaitTermination()`` (planning, every micro-batch, the checkpoint). Runs alternate between
the sources so load on the machine hits both alike; one warm-up run of each is discarded;
the medians and their ratio are printed.

* lakelog: the driver reads the log's commits and plans batches of files
  (``maxFilesPerTrigger`` at its default, 1000); tasks read the files with lakelog's Arrow
  reader in Python workers (rows cross to the JVM as Arrow batches).
* Spark's file source: ``readStream.schema(...).parquet(<table folder>)`` lists the folder
  (``_lakelog`` is hidden from it by its leading underscore) and reads with Spark's
  vectorized Parquet reader in the JVM.

Run: ``python benchmarks/bench_spark_source.py [--quick] [--appends N] [--rows N]
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

import numpy as np
import pyarrow as pa

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))

from _common import print_table, write_json_result  # noqa: E402

import lakelog  # noqa: E402
import lakelog.spark as lspark  # noqa: E402

WORK = Path("/tmp/lakelog-bench-spark-source")
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("k", pa.int64()),
        ("user", pa.string()),
        ("x", pa.float64()),
    ]
)


def build_table(root: Path, appends: int, rows: int) -> int:
    """A lakelog table of ``appends`` appends of ``rows`` rows; returns its row count."""
    shutil.rmtree(root, ignore_errors=True)
    table = lakelog.create_table(str(root), SCHEMA)
    start = np.datetime64("2026-11-01T00:00:00", "us")
    for a in range(appends):
        ids = np.arange(a * rows, (a + 1) * rows, dtype=np.int64)
        table.append(
            pa.table(
                {
                    "id": ids,
                    "ts": pa.array(start + ids.astype("timedelta64[s]"), SCHEMA.field("ts").type),
                    "k": ids % 100,
                    "user": pa.array([f"user-{i % 1000}" for i in ids.tolist()]),
                    "x": ids * 0.5,
                },
                schema=SCHEMA,
            )
        )
    return int(table.snapshot().num_rows)


def run_once(spark: Any, source: str, table: Path, schema: Any, expected: int) -> dict[str, float]:
    """One ``availableNow`` query from ``source`` into ``noop``; its wall time and rows."""
    checkpoint = WORK / "checkpoints" / source
    shutil.rmtree(checkpoint, ignore_errors=True)
    if source == "lakelog":
        frame = spark.readStream.format("lakelog").load(str(table))
    else:
        frame = spark.readStream.schema(schema).parquet(str(table))
    t0 = time.perf_counter()
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    secs = time.perf_counter() - t0
    if query.exception() is not None:
        raise RuntimeError(f"{source} query failed: {query.exception()}")
    progress = query.recentProgress
    rows = sum(p["numInputRows"] for p in progress)
    # A source that skipped or repeated files would look faster or slower for no reason.
    assert rows == expected, (source, rows, expected)
    batches = sum(1 for p in progress if p["numInputRows"] > 0)
    return {"rows": rows, "seconds": secs, "rows_per_s": rows / secs, "batches": batches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 appends x 20,000 rows")
    parser.add_argument("--appends", type=int, default=None)
    parser.add_argument("--rows", type=int, default=None, help="rows per append")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    appends = args.appends or (10 if args.quick else 50)
    rows = args.rows or (20_000 if args.quick else 100_000)

    from _services import build_spark_session

    table = WORK / "table"
    t0 = time.perf_counter()
    total = build_table(table, appends, rows)
    print(
        f"table: {appends} appends x {rows:,} rows in {time.perf_counter() - t0:.1f}s", flush=True
    )

    spark = build_spark_session(
        "lakelog-bench-spark-source",
        master="local[2]",
        extra_conf={"spark.driver.memory": "4g", "spark.sql.shuffle.partitions": "2"},
        log_level="OFF",
    )
    lspark.register(spark)
    schema = spark.read.parquet(str(table)).schema
    for source in ("lakelog", "parquet"):  # warm-up: Python workers, JIT, page cache
        run_once(spark, source, table, schema, total)
    results: dict[str, list[dict[str, float]]] = {"lakelog": [], "parquet": []}
    for i in range(args.runs):
        for source in ("lakelog", "parquet") if i % 2 == 0 else ("parquet", "lakelog"):
            r = run_once(spark, source, table, schema, total)
            results[source].append(r)
            print(
                f"run {i + 1} {source:8s}: {r['rows_per_s']:>12,.0f} rows/s "
                f"({r['rows']:,} rows in {r['seconds']:.2f}s, {r['batches']} batches)",
                flush=True,
            )
    med = {s: statistics.median(r["rows_per_s"] for r in rs) for s, rs in results.items()}
    secs = {s: statistics.median(r["seconds"] for r in rs) for s, rs in results.items()}
    print(
        f"\n{appends} appends x {rows:,} rows ({total:,} rows, {appends} files), "
        f"{args.runs} runs, local[2], {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    )
    print_table(
        [
            {
                "source": "readStream.format('lakelog')"
                if s == "lakelog"
                else "Spark parquet source",
                "median rows/s": f"{med[s]:,.0f}",
                "median s": f"{secs[s]:.2f}",
                "runs rows/s": ", ".join(f"{r['rows_per_s']:,.0f}" for r in results[s]),
            }
            for s in ("lakelog", "parquet")
        ]
    )
    ratio = med["lakelog"] / med["parquet"]
    print(f"\nratio (lakelog / Spark parquet source, rows per second): {ratio:.2f}x")
    write_json_result(
        "bench_spark_source",
        {
            "quick": args.quick,
            "appends": appends,
            "rows_per_append": rows,
            "runs": args.runs,
            "lakelog_rows_per_s": med["lakelog"],
            "parquet_rows_per_s": med["parquet"],
            "lakelog_seconds": secs["lakelog"],
            "parquet_seconds": secs["parquet"],
            "ratio": ratio,
            "cpu_count": os.cpu_count(),
        },
    )
    spark.stop()


if __name__ == "__main__":
    main()
