"""Maintenance on Spark: ``lakelog.spark.compact`` / ``optimize`` on ``local[2]`` vs the
embedded executor vs delta-rs, in one run.

Data: the seeded data set of ``_data.py`` (400 appends x 25,000 rows, one small
file each), the pristine lakelog and Delta tables of ``bench_compact.py``
(built under ``benchmarks/data/compact/`` if missing). Every timed run starts
from a fresh copy (the copy is not timed) and runs in this process; Spark is
one ``local[2]`` session started once (its start-up is not timed), everyone
gets 2-way parallelism:

* compaction to 128 MiB files: ``table.compact(max_concurrent_groups=2)``,
  ``lakelog.spark.compact(spark, uri, max_concurrent_groups=2)``,
  ``DeltaTable.optimize.compact(target_size=128 MiB, max_concurrent_tasks=2)``;
* z-order on ``customer_id, x`` to 8 MiB files: ``table.optimize(...)``,
  ``lakelog.spark.optimize(...)`` (the table is one group that fits
  ``max_group_bytes``: one Spark task sorts it), the same with
  ``max_group_bytes=256 MiB`` (the group is clustered by Spark jobs: range
  partitioning, Spark's sort and native writer, then the finalizing pass),
  and ``DeltaTable.optimize.z_order(..., target_size=8 MiB)``. Layout quality
  as in ``bench_cluster.py``: the mean fraction of bytes in files that can
  match 300 seeded range queries (A: customer_id, B: x, AB: both).

Usage: ``python benchmarks/bench_spark_maintenance.py [--quick] [--runs N]``;
``--quick`` uses 40 appends and 1 MiB z-order files. Results go to
``benchmarks/results/spark_maintenance.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import BENCH_DIR, print_table, write_json_result
from bench_cluster import delta_boxes, lakelog_boxes, quality
from bench_compact import build

import lakelog

MiB = 1 << 20
COLUMNS = ["customer_id", "x"]
WORK = Path("/tmp/lakelog-bench-spark-maintenance")


def spark_session() -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("lakelog-bench-spark-maintenance")
        .config("spark.driver.memory", "4g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.pythonUDF.arrow.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def fresh(src: Path, name: str) -> str:
    dst = WORK / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return str(dst)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def lakelog_summary(uri: str) -> dict[str, Any]:
    snap = lakelog.open_table(uri).snapshot()
    return {"files": snap.num_files, "bytes": snap.total_bytes, "rows": snap.num_rows}


def delta_summary(path: str) -> dict[str, Any]:
    from deltalake import DeltaTable

    dt = DeltaTable(path)
    uris = dt.file_uris()
    size = sum(os.path.getsize(u.removeprefix("file://")) for u in uris)
    return {"files": len(uris), "bytes": size, "rows": dt.to_pyarrow_dataset().count_rows()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="40 appends, 1 MiB z-order files")
    ap.add_argument("--runs", type=int, default=None, help="timed runs of each (default 3)")
    ap.add_argument("--data", default=str(BENCH_DIR / "data" / "compact"))
    args = ap.parse_args()
    n = 40 if args.quick else 400
    runs = args.runs or 3
    compact_target = 128 * MiB
    zorder_target = (1 if args.quick else 8) * MiB
    large_budget = (32 if args.quick else 256) * MiB
    ll, dl = build(Path(args.data), n)
    WORK.mkdir(parents=True, exist_ok=True)

    from deltalake import DeltaTable

    import lakelog.spark as lspark

    t0 = time.perf_counter()
    spark = spark_session()
    print(f"Spark local[2] session started in {time.perf_counter() - t0:.1f} s (not timed)")
    # warm-up: Python workers and the JVM's classes for both paths
    lspark.compact(spark, fresh(ll, "warmup"), max_concurrent_groups=2)
    shutil.rmtree(WORK / "warmup", ignore_errors=True)

    def c_embedded(uri: str) -> None:
        lakelog.open_table(uri).compact(target_file_size=compact_target, max_concurrent_groups=2)

    def c_spark(uri: str) -> None:
        report = lspark.compact(
            spark, uri, target_file_size=compact_target, max_concurrent_groups=2
        )
        assert report.extra["failed_groups"] == {}, report.extra["failed_groups"]

    def c_delta(path: str) -> None:
        DeltaTable(path).optimize.compact(target_size=compact_target, max_concurrent_tasks=2)

    def z_embedded(uri: str) -> None:
        lakelog.open_table(uri).optimize(
            zorder_by=COLUMNS, target_file_size=zorder_target, max_concurrent_groups=2
        )

    def z_spark(uri: str) -> None:
        report = lspark.optimize(
            spark, uri, zorder_by=COLUMNS, target_file_size=zorder_target, max_concurrent_groups=2
        )
        assert report.extra["failed_groups"] == {}, report.extra["failed_groups"]

    def z_spark_large(uri: str) -> None:
        report = lspark.optimize(
            spark,
            uri,
            zorder_by=COLUMNS,
            target_file_size=zorder_target,
            max_group_bytes=large_budget,
            max_concurrent_groups=2,
        )
        assert report.extra["large_groups"] == 1, report.extra
        assert report.extra["failed_groups"] == {}, report.extra["failed_groups"]

    def z_delta(path: str) -> None:
        DeltaTable(path).optimize.z_order(COLUMNS, target_size=zorder_target)

    cases: list[tuple[str, str, Path, Callable[[str], None], bool]] = [
        ("compact", "embedded", ll, c_embedded, True),
        ("compact", "spark", ll, c_spark, True),
        ("compact", "delta-rs", dl, c_delta, False),
        ("z-order", "embedded", ll, z_embedded, True),
        ("z-order", "spark", ll, z_spark, True),
        ("z-order", "spark (Spark jobs)", ll, z_spark_large, True),
        ("z-order", "delta-rs", dl, z_delta, False),
    ]
    samples: dict[tuple[str, str], list[float]] = {}
    shapes: dict[tuple[str, str], dict[str, Any]] = {}
    for r in range(runs):  # alternate engines within each round
        for op, engine, src, fn, is_lakelog in cases:
            path = fresh(src, "run")
            seconds = timed(lambda fn=fn, path=path: fn(path))
            samples.setdefault((op, engine), []).append(seconds)
            if r == 0:
                shape = lakelog_summary(path) if is_lakelog else delta_summary(path)
                if op == "z-order":
                    shape.update(quality(lakelog_boxes(path) if is_lakelog else delta_boxes(path)))
                shapes[(op, engine)] = shape
            shutil.rmtree(path, ignore_errors=True)
            print(f"  run {r + 1}: {op:8s} {engine:20s} {seconds:7.2f} s", flush=True)
    spark.stop()

    rows = []
    result: dict[str, Any] = {"appends": n, "runs": runs, "cases": {}}
    for op, engine, *_ in cases:
        med = statistics.median(samples[(op, engine)])
        delta_med = statistics.median(samples[(op, "delta-rs")])
        emb_med = statistics.median(samples[(op, "embedded")])
        shape = shapes[(op, engine)]
        fractions = (
            f"{shape['A']:.2f} / {shape['B']:.2f} / {shape['AB']:.3f}" if op == "z-order" else "-"
        )
        rows.append(
            {
                "op": op,
                "engine": engine,
                "median": f"{med:.2f} s",
                "vs embedded": f"{med / emb_med:.2f}x",
                "vs delta-rs": f"{med / delta_med:.2f}x",
                "files": shape["files"],
                "A / B / AB": fractions,
            }
        )
        result["cases"][f"{op}/{engine}"] = {
            "median_s": med,
            "samples_s": samples[(op, engine)],
            "vs_embedded": med / emb_med,
            "vs_delta": med / delta_med,
            **shape,
        }
    print()
    print_table(rows)
    write_json_result("spark_maintenance", result)


if __name__ == "__main__":
    main()
