"""Spark: a selective query through the snapshot's pruned file list vs a directory read.

The table holds the seeded benchmark data set (10M rows; ``ts`` increases
across batches) in 1,000 files of 10,000 rows, committed by lakelog, so
files are sorted by ``ts`` and a ``ts`` range selects a few files by their
stats. Both sides run the same filter and the same aggregate in one Spark
session; a run is timed from building the DataFrame (planning, listing, log
reading) to the collected result:

* lakelog: ``lakelog.spark.read(spark, uri, filter=...)`` (log -> pruned
  file list -> Spark's Parquet reader);
* peer: ``spark.read.parquet(<table folder>).where(...)`` (Spark lists the
  folder and skips row groups by footer statistics in every file).

The directory read is also *wrong* once files are rewritten: after a
compaction it reads the removed files too. Run:
``python benchmarks/bench_spark_read.py [--quick] [--runs N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))

import pyarrow as pa  # noqa: E402
from _common import median_time, print_table, write_json_result  # noqa: E402
from _data import DEFAULT_ROWS, SCHEMA, TS_SPAN, batches  # noqa: E402

import lakelog  # noqa: E402
import lakelog.spark as lspark  # noqa: E402

ROWS_PER_FILE = 10_000


def build_table(path: Path, n_batches: int) -> str:
    """``n_batches`` x 25,000 rows written as files of 10,000 rows in one commit."""
    uri = str(path)
    marker = path / f".built-{n_batches}"
    if marker.exists():
        return uri
    shutil.rmtree(path, ignore_errors=True)
    table = lakelog.create_table(
        uri,
        SCHEMA,
        properties={
            "lakelog.target_file_size": "1",  # close a file after each row group
            "lakelog.row_group_size": str(ROWS_PER_FILE),
            "lakelog.compression": "snappy",
        },
    )
    # one append of the whole stream: the writer cuts 10,000-row files in ts order
    stream = (rb for t in batches(n_batches) for rb in t.to_batches())
    table.append(pa.RecordBatchReader.from_batches(SCHEMA, stream))
    marker.touch()
    return uri


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 files / 1M rows, 3 runs")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--data", default=str(BENCH_DIR / "data" / "spark_read"))
    args = parser.parse_args()
    n_batches = 40 if args.quick else 400
    runs = args.runs or (3 if args.quick else 5)

    from _services import build_spark_session
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    uri = build_table(Path(args.data) / f"t{n_batches}", n_batches)
    snap = lakelog.open_table(uri).snapshot()
    print(
        f"table: {snap.num_files} files, {snap.num_rows:,} rows, built in "
        f"{time.perf_counter() - t0:.1f}s"
    )

    spark = build_spark_session(
        "lakelog-bench-spark-read",
        extra_conf={
            "spark.driver.memory": "4g",
            "spark.sql.shuffle.partitions": "2",
        },
    )
    total = n_batches * DEFAULT_ROWS
    # about 1% of the rows: a ts range in the middle of the table
    lo = (n_batches // 2) * TS_SPAN
    hi = lo + max(1, n_batches // 100) * TS_SPAN
    flt = f"ts >= {lo} AND ts < {hi}"
    agg = [F.count("*").alias("n"), F.sum("x").alias("sx")]

    def via_lakelog() -> tuple[int, float]:
        row = lspark.read(spark, uri, filter=flt).agg(*agg).collect()[0]
        return int(row.n), float(row.sx)

    def via_folder() -> tuple[int, float]:
        row = spark.read.parquet(uri).where(flt).agg(*agg).collect()[0]
        return int(row.n), float(row.sx)

    a, b = via_lakelog(), via_folder()
    assert a[0] == b[0] and abs(a[1] - b[1]) < 1e-6 * max(1.0, abs(a[1])), (a, b)
    plan = lspark.plan_read(spark, uri, filter=flt)
    t_ll, s_ll = median_time(via_lakelog, repeat=runs, warmup=1)
    t_dir, s_dir = median_time(via_folder, repeat=runs, warmup=1)
    t_plan, _ = median_time(lambda: lspark.plan_read(spark, uri, filter=flt), repeat=runs)
    rows = [
        {
            "path": "lakelog.spark.read(filter=...)",
            "files read": len(plan.urls),
            "median s": t_ll,
            "runs": ", ".join(f"{s:.3f}" for s in s_ll),
        },
        {
            "path": "spark.read.parquet(folder).where",
            "files read": snap.num_files,
            "median s": t_dir,
            "runs": ", ".join(f"{s:.3f}" for s in s_dir),
        },
    ]
    print(f"\nfilter: {flt}  ({a[0]:,} of {total:,} rows)")
    print_table(rows)
    print(f"plan_read alone (log + pruning): median {t_plan:.3f}s")
    ratio = t_dir / t_ll
    print(f"\nratio (directory read / lakelog read): {ratio:.2f}x")
    write_json_result(
        "bench_spark_read",
        {
            "quick": args.quick,
            "files": snap.num_files,
            "rows": snap.num_rows,
            "filter": flt,
            "matching_rows": a[0],
            "files_after_pruning": len(plan.urls),
            "lakelog_median_s": t_ll,
            "folder_median_s": t_dir,
            "plan_read_median_s": t_plan,
            "ratio": ratio,
            "runs": runs,
            "cpu_count": os.cpu_count(),
        },
    )
    spark.stop()


if __name__ == "__main__":
    main()
