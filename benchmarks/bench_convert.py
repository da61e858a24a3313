"""Adopting a folder of small Parquet files: ``lakelog.convert`` vs delta-rs's
``convert_to_deltalake`` (and, with ``--spark``, ``lakelog.spark.convert`` on ``local[2]``).

Data: ``--files`` (10,000) Parquet files of ``--rows`` (100) rows each, cut from the seeded
benchmark set of ``_data.py``, written by pyarrow under Hive folders ``event=<value>/``
(4 partitions, files assigned round-robin; the ``event`` column is dropped from the
files, as pyarrow's and DuckDB's partitioned writers leave partition columns out).
Two identical copies, one per tool, so neither sees the other's log.

Each run converts its copy in place and the log is deleted afterwards, lakelog and
delta-rs alternating: ``lakelog.convert(uri)`` (partition column and types inferred;
statistics from every footer; one commit, with its manifest) against
``convert_to_deltalake(uri, partition_by=<event: string>, partition_strategy="hive")``
(statistics collected, its default). Both results are checked: every file adopted, the
same row count. Reported: the median over ``--runs`` and the ratio lakelog / delta-rs.

``--spark`` adds a third copy converted by ``lakelog.spark.convert`` (footers read in Spark
tasks, one commit on the driver) on a ``local[2]`` session started before the runs, and
warmed up by one conversion of a small folder in 8 tasks (the JVM start, and the Python
workers starting and importing lakelog, are not timed; the warm-up's time is printed);
reported also as the ratio Spark / embedded. ``--quick``: 200 files, 3 runs.

Usage: ``python benchmarks/bench_convert.py [--files 10000] [--rows 100] [--runs 5] [--spark]
[--quick]``
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

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _data
from _common import print_table, write_json_result

import lakelog

WORK = Path("/tmp/lakelog-bench-convert")


def make_files(folder: Path, files: int, rows: int) -> int:
    """``files`` files of ``rows`` rows under ``event=<value>/`` folders; returns rows."""
    total = 0
    per_batch = _data.DEFAULT_ROWS // rows
    for i in range(files):
        batch = _data.batch(i // per_batch)
        part = batch.slice((i % per_batch) * rows, rows)
        event = _data.EVENTS[i % len(_data.EVENTS)]
        target = folder / f"event={event}"
        target.mkdir(parents=True, exist_ok=True)
        pq.write_table(part.drop(["event"]), target / f"part-{i:05d}.parquet")
        total += part.num_rows
    return total


def run_lakelog(uri: Path) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    table = lakelog.convert(str(uri))
    elapsed = time.perf_counter() - t0
    snap = table.snapshot()
    result = (elapsed, snap.num_files, snap.num_rows)
    shutil.rmtree(uri / "_lakelog")
    return result


def spark_session() -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("lakelog-bench-convert")
        .config("spark.driver.memory", "4g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_spark(spark: Any, uri: Path, files_per_task: int | None = None) -> tuple[float, int, int]:
    import lakelog.spark

    t0 = time.perf_counter()
    table = lakelog.spark.convert(spark, str(uri), files_per_task=files_per_task)
    elapsed = time.perf_counter() - t0
    snap = table.snapshot()
    result = (elapsed, snap.num_files, snap.num_rows)
    shutil.rmtree(uri / "_lakelog")
    return result


def run_delta(uri: Path) -> tuple[float, int, int]:
    from deltalake import DeltaTable, convert_to_deltalake
    from deltalake.schema import Field, PrimitiveType, Schema

    t0 = time.perf_counter()
    convert_to_deltalake(
        str(uri),
        partition_by=Schema([Field("event", PrimitiveType("string"))]),
        partition_strategy="hive",
    )
    elapsed = time.perf_counter() - t0
    dt = DeltaTable(str(uri))
    actions = dt.get_add_actions(flatten=True)
    actions = pa.table(actions) if not isinstance(actions, pa.Table) else actions
    result = (elapsed, actions.num_rows, int(pc.sum(actions["num_records"]).as_py()))
    shutil.rmtree(uri / "_delta_log")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--spark", action="store_true", help="add lakelog.spark.convert, local[2]")
    ap.add_argument("--quick", action="store_true", help="200 files, 3 runs")
    args = ap.parse_args()
    if args.quick:
        args.files, args.runs = 200, 3

    shutil.rmtree(WORK, ignore_errors=True)
    mine, theirs, distributed = WORK / "lakelog", WORK / "delta", WORK / "spark"
    t0 = time.perf_counter()
    rows = make_files(mine, args.files, args.rows)
    shutil.copytree(mine, theirs)
    if args.spark:
        shutil.copytree(mine, distributed)
    print(f"wrote {args.files:,} files of {args.rows} rows in {time.perf_counter() - t0:.1f} s")

    samples: dict[str, list[float]] = {"lakelog.convert": [], "deltalake.convert_to_deltalake": []}
    tools: list[tuple[str, Any, Path]] = [
        ("lakelog.convert", run_lakelog, mine),
        ("deltalake.convert_to_deltalake", run_delta, theirs),
    ]
    if args.spark:
        spark = spark_session()
        warm = WORK / "warm-up"
        make_files(warm, 8, args.rows)
        # one task per file: every Python worker starts and imports lakelog here, untimed
        cold, _, _ = run_spark(spark, warm, files_per_task=1)
        print(f"warm-up (8 files, 8 tasks, workers importing lakelog): {cold:.2f} s")
        samples["lakelog.spark.convert (local[2])"] = []
        tools.append(
            (
                "lakelog.spark.convert (local[2])",
                lambda uri: run_spark(spark, uri),
                distributed,
            )
        )
    for run in range(args.runs):
        order = list(tools)
        if run % 2:
            order.reverse()
        for name, fn, folder in order:
            elapsed, files, got_rows = fn(folder)
            if (files, got_rows) != (args.files, rows):
                raise SystemExit(
                    f"{name} adopted {files} files / {got_rows} rows, "
                    f"expected {args.files} / {rows}"
                )
            samples[name].append(elapsed)
    med = {name: statistics.median(s) for name, s in samples.items()}
    ratio = med["lakelog.convert"] / med["deltalake.convert_to_deltalake"]
    print_table(
        [
            {
                "tool": name,
                f"median of {args.runs} (s)": round(med[name], 3),
                "runs (s)": " ".join(f"{x:.2f}" for x in samples[name]),
            }
            for name in samples
        ]
    )
    print(f"lakelog / delta-rs: {ratio:.2f}x (target <= 0.30x)")
    result: dict[str, Any] = {
        "files": args.files,
        "rows_per_file": args.rows,
        "runs": args.runs,
        "samples_s": samples,
        "ratio": ratio,
    }
    if args.spark:
        on_spark = med["lakelog.spark.convert (local[2])"] / med["lakelog.convert"]
        print(f"lakelog.spark.convert (local[2]) / lakelog.convert: {on_spark:.2f}x")
        result["spark_over_embedded"] = on_spark
    write_json_result("convert" + ("-spark" if args.spark else ""), result)


if __name__ == "__main__":
    main()
