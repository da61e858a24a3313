"""Row-level changes on Spark: ``lakelog.spark.merge/delete/update`` vs the embedded
``Table.merge/delete/update`` vs delta-rs ``DeltaTable.merge/delete/update``.

Data: the seeded data set of ``_data.py`` with ``ROWS_PER_FILE`` rows per batch, one
file per append: 200 files x 100,000 rows (20M rows) by default, ``--quick`` 40 files x
50,000 rows (2M rows). Built once as a lakelog table and as a Delta table under
``benchmarks/data/spark_changes/``. Cases:

* ``merge``   a source of 1% of the table's rows, half of them matching existing rows
              (sampled evenly from every file) on the key ``(ts, customer_id)``, updating
              matches and inserting the rest; the source is a Parquet file each engine
              reads within the timed operation (Spark: ``spark.read.parquet``, so it
              never passes the driver)
* ``delete``  delete 1% of the rows (``x < 0.01``, spread over every file)
* ``update``  update 1% of the rows (``y < 0.01``: ``event = 'fixed'``)

Engines, each run in a fresh interpreter on a fresh copy of the table (its peak RSS is
the process's ``VmHWM``): ``spark`` and ``spark-dv`` (``local[2]``; the driver is the
child's Python process, its peak RSS is the driver's; the time is the operation alone,
after the same operation ran twice on a small table to warm the session), ``embedded``
and ``embedded-dv``, and ``delta`` (delta-rs rewrites files: it writes no deletion
vectors). ``-dv`` runs set
``lakelog.deletion_vectors=true`` on the copy first, the others ``false`` (new tables have
vectors on by default). Bytes written are the data files
added plus lakelog's commit files. An empty SparkSession's driver RSS (a session that ran
one tiny job) is measured the same way, for the "driver below 2x an empty session" target.

Targets: Spark merge <= 1.5x the embedded merge on ``local[2]`` (copy-on-write and with
vectors); with deletion vectors each Spark operation <= 0.5x delta-rs; the Spark driver's
peak RSS < 2x the empty session's.

    python benchmarks/bench_spark_changes.py            # 20M rows / 200 files, 3 runs
    python benchmarks/bench_spark_changes.py --quick    # 2M rows / 40 files, 1 run
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import BENCH_DIR, fmt_bytes, print_table, run_in_subprocess_peak_rss, write_json_result
from _data import SCHEMA, TS_SPAN, batch

CASES = ("merge", "delete", "update")
ENGINES = ("spark", "spark-dv", "embedded", "embedded-dv", "delta")
SOURCE_FRACTION = 0.01


def build(root: Path, files: int, rows: int) -> tuple[Path, Path, Path]:
    """The pristine lakelog and Delta tables and the merge source (built once)."""
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    import lakelog

    ll, dl = root / f"lakelog-{files}x{rows}", root / f"delta-{files}x{rows}"
    src = root / f"source-{files}x{rows}.parquet"
    if not (ll / "_lakelog").exists():
        shutil.rmtree(ll, ignore_errors=True)
        t0 = time.perf_counter()
        for i in range(files):
            lakelog.write_table(str(ll), batch(i, rows))
        print(f"built lakelog table in {time.perf_counter() - t0:.1f} s")
    if not (dl / "_delta_log").exists():
        shutil.rmtree(dl, ignore_errors=True)
        t0 = time.perf_counter()
        for i in range(files):
            write_deltalake(str(dl), batch(i, rows), mode="append")
        print(f"built Delta table in {time.perf_counter() - t0:.1f} s")
    if not src.exists():
        pq.write_table(merge_source(files, rows), str(src))
    return ll, dl, src


def merge_source(files: int, rows: int) -> Any:
    """Half rows of the table (their keys, new values) sampled evenly from every file,
    half new keys: 1% of the table's rows."""
    import numpy as np
    import pyarrow as pa

    size = max(2, int(files * rows * SOURCE_FRACTION))
    half = size // 2
    per = [half // files + (1 if i < half % files else 0) for i in range(files)]
    parts = []
    for i in range(files):
        rng = np.random.default_rng(1_000_000 + i)
        taken = batch(i, rows).take(pa.array(np.sort(rng.choice(rows, per[i], replace=False))))
        parts.append(taken.set_column(2, "x", pa.array(np.full(taken.num_rows, -1.0))))
    rng = np.random.default_rng(7)
    fresh = size - half
    new = pa.table(
        {
            "ts": np.arange(files * TS_SPAN, files * TS_SPAN + fresh, dtype=np.int64),
            "customer_id": rng.integers(0, 100_000, fresh, dtype=np.int64),
            "x": np.full(fresh, -2.0),
            "y": rng.random(fresh),
            "event": pa.array(["new"] * fresh, pa.string()),
            "payload": pa.array(["pnew"] * fresh, pa.string()),
        },
        schema=SCHEMA,
    )
    return pa.concat_tables([pa.concat_tables(parts).cast(SCHEMA), new])


# -- children (a fresh interpreter each) -------------------------------------------------


def spark_session() -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark-changes")
        .config("spark.driver.memory", "4g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.pythonUDF.arrow.enabled", "false")
        .config("spark.executorEnv.PYTHONPATH", str(BENCH_DIR.parent))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(10).count()  # a warm session, as a pipeline's would be
    return spark


def _warm_up(spark: Any, case: str) -> None:
    """The same operation once on a small table: a pipeline's session has its Python
    workers started and Spark's code compiled; the timed run then measures the work."""
    import tempfile

    import lakelog
    import lakelog.spark as lspark

    for _ in range(2):
        uri = tempfile.mkdtemp(prefix="bench-warm-")
        try:
            for i in range(4):
                lakelog.write_table(uri, batch(10_000 + i, 2_000))
            if case == "merge":
                rows = batch(10_000, 100).to_pylist()
                df = spark.createDataFrame(rows, schema=_spark_schema())
                lspark.merge(spark, uri, df, on=["ts", "customer_id"])
            elif case == "delete":
                lspark.delete(spark, uri, "x < 0.01")
            else:
                lspark.update(spark, uri, "y < 0.01", set={"event": "'fixed'"})
        finally:
            shutil.rmtree(uri, ignore_errors=True)


def _spark_schema() -> str:
    return "ts long, customer_id long, x double, y double, event string, payload string"


def child_empty_session() -> dict[str, Any]:
    spark_session()
    return {}


def _files(table: Any) -> dict[str, int]:
    return {f.path: f.size_bytes for f in table.refresh().snapshot().files()}


def _lakelog_change(path: str, case: str, source: str, engine: str) -> dict[str, Any]:
    import lakelog

    table = lakelog.open_table(path)
    vectors = "true" if engine.endswith("-dv") else "false"
    if table.properties.get("lakelog.deletion_vectors", "false") != vectors:
        table.set_properties({"lakelog.deletion_vectors": vectors})
    before, log_before = _files(table), table.refresh().snapshot().version
    if engine.startswith("spark"):
        import lakelog.spark as lspark

        spark = spark_session()
        _warm_up(spark, case)
        t0 = time.perf_counter()
        if case == "merge":
            df = spark.read.parquet(source)
            r = lspark.merge(spark, path, df, on=["ts", "customer_id"])
        elif case == "delete":
            r = lspark.delete(spark, path, "x < 0.01")
        else:
            r = lspark.update(spark, path, "y < 0.01", set={"event": "'fixed'"})
    else:
        import pyarrow.parquet as pq

        t0 = time.perf_counter()
        if case == "merge":
            r = table.merge(pq.read_table(source), on=["ts", "customer_id"])
        elif case == "delete":
            r = table.delete("x < 0.01")
        else:
            r = table.update("y < 0.01", set={"event": "fixed"})
    seconds = time.perf_counter() - t0
    after = _files(table)
    log_dir = Path(path) / "_lakelog"
    commits = sum(
        (log_dir / f"{v:020d}.json").stat().st_size
        for v in range(log_before + 1, table.snapshot().version + 1)
    )
    return {
        "seconds": seconds,
        "rows_changed": r.deleted_rows + r.updated_rows + r.inserted_rows,
        "files_added": len(after.keys() - before.keys()),
        "bytes_written": sum(s for p, s in after.items() if p not in before) + commits,
        "rows": table.snapshot().num_rows,
    }


def child_lakelog(path: str, case: str, source: str, engine: str) -> dict[str, Any]:
    return _lakelog_change(path, case, source, engine)


def _delta_files(path: str) -> dict[str, int]:
    from deltalake import DeltaTable

    actions = DeltaTable(path).get_add_actions(flatten=True)
    return dict(
        zip(
            actions.column("path").to_pylist(),
            actions.column("size_bytes").to_pylist(),
            strict=True,
        )
    )


def child_delta(path: str, case: str, source: str, engine: str) -> dict[str, Any]:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    dt = DeltaTable(path)
    before = _delta_files(path)
    t0 = time.perf_counter()
    if case == "delete":
        changed = dt.delete("x < 0.01")["num_deleted_rows"]
    elif case == "update":
        changed = dt.update(updates={"event": "'fixed'"}, predicate="y < 0.01")["num_updated_rows"]
    else:
        m = (
            dt.merge(
                pq.read_table(source),
                predicate="t.ts = s.ts AND t.customer_id = s.customer_id",
                source_alias="s",
                target_alias="t",
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        changed = m["num_target_rows_updated"] + m["num_target_rows_inserted"]
    seconds = time.perf_counter() - t0
    after = _delta_files(path)
    return {
        "seconds": seconds,
        "rows_changed": changed,
        "files_added": len(after.keys() - before.keys()),
        "bytes_written": sum(s for p, s in after.items() if p not in before),
        "rows": DeltaTable(path).to_pyarrow_dataset().count_rows(),
    }


# -- driver ---------------------------------------------------------------------------


def run_once(engine: str, case: str, pristine: Path, work: Path, source: Path) -> dict[str, Any]:
    copy = work / f"run-{engine}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(pristine, copy)
    try:
        func = "child_delta" if engine == "delta" else "child_lakelog"
        child = run_in_subprocess_peak_rss(
            func=f"bench_spark_changes:{func}", args=[str(copy), case, str(source), engine]
        )
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    out: dict[str, Any] = child.last_json()
    out["peak_rss_bytes"] = child.peak_rss_bytes
    return out


def _ratio(samples: dict[str, list[dict[str, Any]]], a: str, b: str) -> float:
    """The median of the paired time ratios a/b."""
    return statistics.median(
        x["seconds"] / y["seconds"] for x, y in zip(samples[a], samples[b], strict=True)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="40 files x 50,000 rows, 1 run")
    ap.add_argument("--files", type=int, default=None, help="files (appends) of the table")
    ap.add_argument("--rows", type=int, default=None, help="rows per file")
    ap.add_argument("--runs", type=int, default=None, help="timed runs of each (default 3)")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset")
    ap.add_argument("--data", default=str(BENCH_DIR / "data" / "spark_changes"))
    args = ap.parse_args()
    files = args.files or (40 if args.quick else 200)
    rows = args.rows or (50_000 if args.quick else 100_000)
    runs = args.runs or (1 if args.quick else 3)
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown cases {unknown}; choose from {list(CASES)}")
    root = Path(args.data)
    root.mkdir(parents=True, exist_ok=True)
    ll, dl, source = build(root, files, rows)
    print(
        f"data: {files} files x {rows:,} rows ({files * rows:,} rows); {runs} runs each; "
        f"{os.cpu_count()} cores; Spark local[2]"
    )
    empty = [
        run_in_subprocess_peak_rss(func="bench_spark_changes:child_empty_session").peak_rss_bytes
        for _ in range(runs)
    ]
    empty_rss = statistics.median(empty)
    print(f"empty SparkSession driver peak RSS: {fmt_bytes(empty_rss)}")
    results: dict[str, Any] = {"empty_session_rss_bytes": empty_rss}
    table_rows = []
    for case in cases:
        samples: dict[str, list[dict[str, Any]]] = {e: [] for e in ENGINES}
        for i in range(runs):
            for engine in ENGINES:
                r = run_once(engine, case, dl if engine == "delta" else ll, root, source)
                samples[engine].append(r)
                print(
                    f"  {case:7s} run {i + 1}/{runs} {engine:12s} {r['seconds']:7.2f} s  "
                    f"RSS {fmt_bytes(r['peak_rss_bytes']):>10s}  rows changed "
                    f"{r['rows_changed']:,}  files added {r['files_added']}  "
                    f"written {fmt_bytes(r['bytes_written'])}",
                    flush=True,
                )
        summary: dict[str, Any] = {}
        for engine, rs in samples.items():
            summary[engine] = {
                "median_seconds": statistics.median(r["seconds"] for r in rs),
                "samples_seconds": [r["seconds"] for r in rs],
                "max_peak_rss_bytes": max(r["peak_rss_bytes"] for r in rs),
                "rows_changed": rs[0]["rows_changed"],
                "files_added": rs[0]["files_added"],
                "bytes_written": rs[0]["bytes_written"],
                "rows_after": rs[0]["rows"],
            }

        for engine in ("spark", "spark-dv"):
            peer = "embedded" if engine == "spark" else "embedded-dv"
            summary[engine]["vs_embedded"] = _ratio(samples, engine, peer)
            summary[engine]["vs_delta"] = _ratio(samples, engine, "delta")
            summary[engine]["rss_vs_empty_session"] = (
                summary[engine]["max_peak_rss_bytes"] / empty_rss
            )
        for engine in ("embedded", "embedded-dv"):
            summary[engine]["vs_delta"] = _ratio(samples, engine, "delta")
        results[case] = summary
        for engine in ENGINES:
            s = summary[engine]
            table_rows.append(
                {
                    "case": case,
                    "engine": engine,
                    "median s": f"{s['median_seconds']:.2f}",
                    "vs embedded": f"{s['vs_embedded']:.2f}x" if "vs_embedded" in s else "",
                    "vs delta-rs": f"{s['vs_delta']:.2f}x" if "vs_delta" in s else "",
                    "written": fmt_bytes(s["bytes_written"]),
                    "peak RSS": fmt_bytes(s["max_peak_rss_bytes"]),
                    "RSS vs empty session": f"{s['rss_vs_empty_session']:.2f}x"
                    if "rss_vs_empty_session" in s
                    else "",
                }
            )
    print()
    print_table(table_rows)
    write_json_result(
        "spark_changes",
        {"files": files, "rows_per_file": rows, "runs": runs, "results": results},
    )


if __name__ == "__main__":
    main()
