"""Spark Connect against classic Spark: each ``lakelog.spark`` operation timed on both, in
one run, on ``local[2]``.

Two worker processes run the operations: one with a classic SparkSession (``local[2]``),
one with a Spark Connect session on a Connect server (its own process, ``local[2]``, a free
port on 127.0.0.1). A Connect client cannot share a process with a classic session, so
both sides get a process of their own. The operations alternate between the workers
(classic first in odd runs, Connect first in even ones) so load on the machine hits both
alike; each operation builds its table untimed, and only the ``lakelog.spark`` call (and
the action that runs it) is timed. The medians and the ratio Connect / classic are printed
(target: within 1.15), with the streaming sink's rows per second on each.

Run: ``python benchmarks/bench_spark_connect.py [--quick] [--runs N] [--rows N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))

from _common import print_table, write_json_result  # noqa: E402

WORK = Path("/tmp/lakelog-bench-spark-connect")
OPS = [
    "write_append",
    "write_replace_where",
    "read_filtered",
    "merge",
    "delete",
    "compact",
    "optimize",
    "convert",
    "read_changes",
    "stream",
]


# -- the operations (run in a worker) -------------------------------------------------------


def _frame(spark: Any, start: int, rows: int) -> Any:
    from pyspark.sql import functions as F

    return spark.range(start, start + rows).select(
        F.col("id"),
        (F.col("id") % 8).cast("string").alias("p"),
        (F.col("id") * 0.5).alias("v"),
    )


def _table(uri: str, files: int, rows: int, **kw: Any) -> None:
    import pyarrow as pa

    import lakelog

    per = max(1, rows // files)
    for i in range(files):
        ids = pa.array(range(i * per, (i + 1) * per), pa.int64())
        t = pa.table(
            {"id": ids, "p": [str(x % 8) for x in ids.to_pylist()], "v": ids.cast("double")}
        )
        lakelog.write_table(uri, t, **kw)


def run_op(spark: Any, op: str, root: str, rows: int) -> dict[str, float]:
    """Build the op's table (untimed), then time the ``lakelog.spark`` call."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import lakelog
    import lakelog.spark as lspark

    uri = os.path.join(root, "t")
    extra: dict[str, float] = {}
    if op == "write_append":
        df = _frame(spark, 0, rows)
        t0 = time.perf_counter()
        lspark.write(df, uri, partition_by=["p"])
    elif op == "write_replace_where":
        lspark.write(_frame(spark, 0, rows), uri, partition_by=["p"])
        df = _frame(spark, 0, rows).where("p = '3'")
        t0 = time.perf_counter()
        lspark.write(df, uri, mode="overwrite", replace_where="p = '3'")
    elif op == "read_filtered":
        _table(uri, 16, rows)
        t0 = time.perf_counter()
        lspark.read(spark, uri, filter="id >= 1000").count()
    elif op == "merge":
        _table(uri, 8, rows)
        source = _frame(spark, rows - rows // 10, rows // 5)
        t0 = time.perf_counter()
        lspark.merge(spark, uri, source, on="id", when_matched="update")
    elif op == "delete":
        _table(uri, 8, rows, properties={"lakelog.deletion_vectors": "true"})
        t0 = time.perf_counter()
        lspark.delete(spark, uri, "p = '3'")
    elif op == "compact":
        _table(uri, 24, rows)
        t0 = time.perf_counter()
        lspark.compact(spark, uri)
    elif op == "optimize":
        _table(uri, 8, rows)
        t0 = time.perf_counter()
        lspark.optimize(spark, uri, zorder_by=["id", "v"], incremental=False)
    elif op == "convert":
        os.makedirs(uri)
        per = rows // 64
        for k in range(64):
            ids = pa.array(range(k * per, (k + 1) * per), pa.int64())
            pq.write_table(pa.table({"id": ids}), os.path.join(uri, f"part-{k:03d}.parquet"))
        t0 = time.perf_counter()
        lspark.convert(spark, uri, files_per_task=16)
    elif op == "read_changes":
        _table(uri, 4, rows, properties={"lakelog.change_data_feed": "true"})
        lakelog.open_table(uri).delete("p = '5'")
        t0 = time.perf_counter()
        lspark.read_changes(spark, uri, 0).count()
    elif op == "stream":
        src, dst = os.path.join(root, "src"), os.path.join(root, "dst")
        _table(src, 10, rows)
        lspark.register(spark)
        t0 = time.perf_counter()
        query = (
            spark.readStream.format("lakelog")
            .load(src)
            .writeStream.format("lakelog")
            .option("checkpointLocation", dst + "-checkpoint")
            .trigger(availableNow=True)
            .start(dst)
        )
        query.awaitTermination()
        n = lakelog.open_table(dst).snapshot().num_rows
        extra["rows_per_s"] = n / (time.perf_counter() - t0)
    else:
        raise ValueError(op)
    return {"seconds": time.perf_counter() - t0, **extra}


def worker(target: str) -> None:
    """A worker process: ``classic`` or a Connect URL; one JSON request per stdin line."""
    import warnings

    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas")
    if target == "classic":
        from _services import build_spark_session

        spark = build_spark_session("lakelog-bench-connect", master="local[2]", log_level="ERROR")
    else:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(target).getOrCreate()
    print("READY", flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        shutil.rmtree(req["root"], ignore_errors=True)
        os.makedirs(req["root"])
        got = run_op(spark, req["op"], req["root"], req["rows"])
        shutil.rmtree(req["root"], ignore_errors=True)
        print("RESULT " + json.dumps(got), flush=True)
    spark.stop()


# -- the driver -----------------------------------------------------------------------------


class _Worker:
    def __init__(self, target: str) -> None:
        from _services import worker_python_path

        env = {**os.environ, "PYTHONPATH": worker_python_path(), "PYSPARK_PYTHON": sys.executable}
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", target],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._line("READY")

    def _line(self, prefix: str) -> str:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        raise RuntimeError(f"the worker ended before {prefix}")

    def run(self, op: str, root: Path, rows: int) -> dict[str, float]:
        assert self.process.stdin is not None
        request = {"op": op, "root": str(root), "rows": rows}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        result: dict[str, float] = json.loads(self._line("RESULT "))
        return result

    def stop(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(timeout=120)
        self.process.stdout.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 3 runs")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    rows = args.rows or (20_000 if args.quick else 200_000)
    runs = args.runs or (3 if args.quick else 5)
    from _services import start_connect_server

    shutil.rmtree(WORK, ignore_errors=True)
    server = start_connect_server(master="local[2]")
    workers: dict[str, _Worker] = {}
    try:
        starting = [
            threading.Thread(target=lambda k=k, t=t: workers.__setitem__(k, _Worker(t)))
            for k, t in (("classic", "classic"), ("connect", server.url))
        ]
        for s in starting:
            s.start()
        for s in starting:
            s.join()
        times: dict[str, dict[str, list[dict[str, float]]]] = {
            op: {"classic": [], "connect": []} for op in OPS
        }
        for op in OPS:
            workers["classic"].run(op, WORK / "classic", rows)  # warm-up, untimed
            workers["connect"].run(op, WORK / "connect", rows)
            for i in range(runs):
                order = ("classic", "connect") if i % 2 == 0 else ("connect", "classic")
                for side in order:
                    times[op][side].append(workers[side].run(op, WORK / side, rows))
            print(
                f"{op:20s} classic {[round(r['seconds'], 2) for r in times[op]['classic']]} "
                f"connect {[round(r['seconds'], 2) for r in times[op]['connect']]}",
                flush=True,
            )
    finally:
        for w in workers.values():
            w.stop()
        server.stop()
    table = []
    for op in OPS:
        c = statistics.median(r["seconds"] for r in times[op]["classic"])
        r = statistics.median(r["seconds"] for r in times[op]["connect"])
        row: dict[str, Any] = {"operation": op, "classic_s": c, "connect_s": r, "ratio": r / c}
        if op == "stream":
            row["classic_rows_s"] = statistics.median(x["rows_per_s"] for x in times[op]["classic"])
            row["connect_rows_s"] = statistics.median(x["rows_per_s"] for x in times[op]["connect"])
        table.append(row)
    print(
        f"\n{rows:,} rows per operation, {runs} runs, local[2], {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}; ratio = Connect / classic (target <= 1.15)"
    )
    print_table(table)
    write_json_result("spark_connect", {"rows": rows, "runs": runs, "operations": table})


if __name__ == "__main__":
    main()
