"""Skipping inside files: bytes read by point lookups and narrow ranges, and write cost.

Data: the seeded benchmark set of ``_data.py`` (400 x 25,000 = 10M rows at scale 1;
``LAKELOG_BENCH_SCALE`` shrinks it), clustered on ``customer_id, ts`` (Hilbert) into
files of ``--target`` bytes. Three copies of the same rows:

* **today**: lakelog files as written before the skipping work: no page index, no
  bloom filters, row groups cut every ``lakelog.row_group_size`` rows; read with
  lakelog's reader without plan-time row-group skipping (pyarrow still skips row
  groups by statistics during the scan, as it always did);
* **skipping**: lakelog with the defaults (page index, compact row-group cuts of about
  16,384 rows in clustered files) plus bloom filters on ``customer_id`` and ``payload``;
  read with plan-time skipping;
* **delta-rs**: the same rows written by delta-rs and z-ordered by it on the same
  columns, read through its pyarrow dataset (file stats from its log, then pyarrow's
  row-group statistics).

Queries (seeded): ``--queries`` point lookups ``customer_id = c``, as many narrow
ranges ``ts`` in a window of 20,000 (about 500 rows), and as many point lookups of an
existing ``payload`` (a near-unique string outside the clustering: where bloom
filters matter). Every query reads all columns. Bytes are counted by a wrapping
fsspec filesystem (``countfile://``) under every reader, footers and bloom filters
included. Write cost: ``write_table`` and a full ``optimize`` of the same rows with
the features off and on (median of ``--runs``).

With ``--spark``, the same queries also go through ``lakelog.spark.read(spark, uri,
filter=<SQL>).collect()`` on a local SparkSession over the **today** and **skipping**
copies, and through ``spark.read.parquet(<delta-rs's live files>).where(<SQL>)`` over
delta-rs's (Delta's Spark jars cannot be installed here): bytes are Hadoop's own count
of bytes read from the local filesystem (what Spark's input metrics are made of), with
Spark's Parquet column-index and bloom-filter filtering at their defaults (on).

Usage: ``python benchmarks/bench_skipping.py [--queries 300] [--runs 3] [--target 128MiB]
[--spark [--spark-queries N]] [--spark-only]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from fsspec import AbstractFileSystem, register_implementation
from fsspec.implementations.local import LocalFileSystem

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _data
from _common import fmt_bytes, print_table, write_json_result

import lakelog
import lakelog.log.snapshot as snapshot_module
import lakelog.maintenance.clustering.sort as sort_module
from lakelog.scan.skipping import collect_skip_stats

MiB = 1 << 20
WORK = Path("/tmp/lakelog-bench-skipping")
COLUMNS = ["customer_id", "ts"]
TS_WINDOW = 20_000
FEATURES = {
    "lakelog.parquet.bloom_filter_columns": "customer_id,payload",
}
NO_FEATURES = {
    "lakelog.parquet.page_index": "false",
    "lakelog.clustering.row_group_size": str(256 * 1024),  # before it existed: 262,144
}


# -- counting every byte read ------------------------------------------------------------


class Counter:
    def __init__(self) -> None:
        self.bytes = 0
        self.reads = 0
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.bytes += n
            self.reads += 1


COUNTER = Counter()


class _Counted:
    def __init__(self, f: Any) -> None:
        self._f = f

    def read(self, n: int = -1) -> bytes:
        data: bytes = self._f.read(n)
        COUNTER.add(len(data))
        return data

    def readinto(self, b: Any) -> int:
        n: int = self._f.readinto(b)
        COUNTER.add(n or 0)
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __enter__(self) -> _Counted:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()


class CountingFS(AbstractFileSystem):  # type: ignore[misc]
    """The local disk, counting the bytes every read returns (``countfile://``)."""

    protocol = "countfile"
    root_marker = "/"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inner = LocalFileSystem()

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        text = str(path)
        if text.startswith("countfile://"):
            text = text[len("countfile://") :]
        return text.rstrip("/") or "/"

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        return self.inner.ls(path, detail=detail, **kwargs)

    def info(self, path: str, **kwargs: Any) -> Any:
        return self.inner.info(path, **kwargs)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        f = self.inner._open(path, mode, **kwargs)
        return _Counted(f) if "r" in mode else f

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kw: Any
    ) -> bytes:
        data: bytes = self.inner.cat_file(path, start=start, end=end, **kw)
        COUNTER.add(len(data))
        return data


register_implementation("countfile", CountingFS, clobber=True)


# -- building the tables -----------------------------------------------------------------


def _stream(n: int) -> Iterator[pa.RecordBatch]:
    for t in _data.batches(n):
        yield from t.to_batches()


def _fixed_cuts(keys: Any, size: int, slack: float = 0.0) -> int:
    return min(size, len(keys))


def build_lakelog(
    path: Path, n: int, target: int, *, features: bool
) -> tuple[float, float, float, float]:
    """Write and cluster one copy; returns wall seconds of the write and of the optimize,
    then their CPU seconds (all threads: steadier than wall time on a shared machine)."""
    shutil.rmtree(path, ignore_errors=True)
    props = dict(FEATURES if features else NO_FEATURES)
    props["lakelog.target_file_size"] = str(target)
    real_cut = sort_module.row_group_cut
    if not features:  # today's writer cut row groups every row_group_size rows
        sort_module.row_group_cut = _fixed_cuts  # type: ignore[assignment]
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        schema = _data.SCHEMA
        lakelog.write_table(
            str(path), pa.RecordBatchReader.from_batches(schema, _stream(n)), properties=props
        )
        t1, c1 = time.perf_counter(), time.process_time()
        lakelog.open_table(str(path)).optimize(zorder_by=COLUMNS, incremental=False)
        t2, c2 = time.perf_counter(), time.process_time()
    finally:
        sort_module.row_group_cut = real_cut  # type: ignore[assignment]
    return t1 - t0, t2 - t1, c1 - c0, c2 - c1


def build_delta(path: Path, n: int, target: int) -> tuple[float, float]:
    from deltalake import DeltaTable, write_deltalake

    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    write_deltalake(
        str(path),
        pa.RecordBatchReader.from_batches(_data.SCHEMA, _stream(n)),
        target_file_size=target,
    )
    t1 = time.perf_counter()
    DeltaTable(str(path)).optimize.z_order(COLUMNS, target_size=target)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


# -- queries -----------------------------------------------------------------------------


def queries(n_batches: int, k: int, seed: int = 2026) -> dict[str, list[pc.Expression]]:
    rng = np.random.default_rng(seed)
    span = n_batches * _data.TS_SPAN
    out: dict[str, list[pc.Expression]] = {"customer_id =": [], "ts range": [], "payload =": []}
    for _ in range(k):
        out["customer_id ="].append(
            pc.field("customer_id") == int(rng.integers(0, _data.CUSTOMER_IDS))
        )
        lo = int(rng.integers(0, span - TS_WINDOW))
        out["ts range"].append((pc.field("ts") >= lo) & (pc.field("ts") < lo + TS_WINDOW))
    for i in rng.integers(0, n_batches, k):
        row = int(rng.integers(0, _data.DEFAULT_ROWS))
        value = _data.batch(int(i)).column("payload")[row].as_py()
        out["payload ="].append(pc.field("payload") == value)
    return out


Reader = Callable[[pc.Expression], pa.Table]


def lakelog_reader(path: Path, *, skipping: bool) -> Reader:
    table = lakelog.open_table(f"countfile://{path}", single_writer=True)
    snap = table.snapshot()

    def read(expr: pc.Expression) -> pa.Table:
        if skipping:
            return snap.to_arrow(filter=expr)
        real = snapshot_module.wants_footers
        snapshot_module.wants_footers = lambda *a: False  # type: ignore[assignment]
        try:
            return snap.to_arrow(filter=expr)
        finally:
            snapshot_module.wants_footers = real  # type: ignore[assignment]

    return read


def delta_reader(path: Path) -> Reader:
    from deltalake import DeltaTable

    fs = pafs.SubTreeFileSystem(str(path), pafs.PyFileSystem(pafs.FSSpecHandler(CountingFS())))
    dataset = DeltaTable(str(path)).to_pyarrow_dataset(filesystem=fs)

    def read(expr: pc.Expression) -> pa.Table:
        return dataset.to_table(filter=expr)

    return read


def _sql(expr: pc.Expression) -> str:
    """The Spark SQL text of one of :func:`queries`' expressions (``==``, ``>=``, ``<``
    over a column and a literal, joined by ``and``)."""
    text = str(expr)
    if "'" in text or "\\" in text:
        raise ValueError(f"a literal this translation does not escape: {text}")
    for op, sql in ((" == ", " = "), (" and ", " AND ")):
        text = text.replace(op, sql)
    return text.replace('"', "'")


def _spark_reader(spark: Any, name: str, path: Path) -> Callable[[str], Any]:
    """A query's DataFrame: through ``lakelog.spark.read`` for lakelog's copies; for
    delta-rs's, Spark's Parquet reader over the live files its log lists (no Delta jars
    can be installed here), the same scan a Delta reader would plan without stats."""
    import lakelog.spark as lspark

    if name != "delta-rs":
        return lambda sql: lspark.read(spark, str(path), filter=sql)
    from deltalake import DeltaTable

    urls = DeltaTable(str(path)).file_uris()
    frame = spark.read.parquet(*urls)
    return lambda sql: frame.where(sql)


def measure_spark(paths: dict[str, Path], qs: dict[str, list[pc.Expression]]) -> list[dict]:
    """Bytes read and time per query through ``lakelog.spark.read`` on a local Spark."""
    import os

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("lakelog-bench-skipping")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.session.timeZone", "UTC")
        # Hadoop counts the bytes of stream reads only: parquet-mr's vectored reads of
        # the local filesystem bypass the counters, and Spark's input metrics with them
        # (a lookup then "reads" its footers alone); the same ranges are read either way
        .config("spark.hadoop.parquet.hadoop.vectored.io.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    store = spark.sparkContext._jsc.sc().statusStore()  # type: ignore[union-attr]

    def bytes_read() -> int:
        """Spark's input metrics: bytes read by every task so far (the status store is
        fed asynchronously: read until two looks agree)."""
        last = -1
        while True:
            executors = store.executorList(True).iterator()
            total = 0
            while executors.hasNext():
                total += int(executors.next().totalInputBytes())
            if total == last:
                return total
            last = total
            time.sleep(0.2)

    rows = []
    try:
        for shape, q in qs.items():
            base: float | None = None
            for name, path in paths.items():
                read = _spark_reader(spark, name, path)
                for expr in q[:3]:  # warm the JVM and the OS cache
                    read(_sql(expr)).collect()
                b0, t0, got = bytes_read(), time.perf_counter(), 0
                for expr in q:
                    got += len(read(_sql(expr)).collect())
                ms = 1000 * (time.perf_counter() - t0) / len(q)
                per = (bytes_read() - b0) / len(q)
                base = base or per
                print(f"{shape:14s} spark/{name:9s} {fmt_bytes(per)}/query {ms:.1f} ms", flush=True)
                rows.append(
                    {
                        "query": shape,
                        "reader": f"spark: {name}",
                        "bytes/query": fmt_bytes(per),
                        "x today": per / base,
                        "ms/query": ms,
                        "rows": got,
                    }
                )
    finally:
        spark.stop()
    return rows


def measure(read: Reader, qs: list[pc.Expression]) -> dict[str, float]:
    COUNTER.bytes = COUNTER.reads = 0
    rows = 0
    t0 = time.perf_counter()
    for q in qs:
        rows += read(q).num_rows
    seconds = time.perf_counter() - t0
    return {
        "bytes": COUNTER.bytes / len(qs),
        "reads": COUNTER.reads / len(qs),
        "ms": 1000 * seconds / len(qs),
        "rows": rows,
    }


def layout(path: Path) -> str:
    table = lakelog.open_table(str(path))
    files = table.snapshot().files()
    return f"{len(files)} files, {fmt_bytes(sum(f.size_bytes for f in files))}"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3, help="write-cost repetitions (median)")
    ap.add_argument("--target", type=int, default=128 * MiB, help="target file size, bytes")
    ap.add_argument("--skip-delta", action="store_true")
    ap.add_argument(
        "--reuse", action="store_true", help="query the tables a previous run built (no write cost)"
    )
    ap.add_argument("--write-only", action="store_true", help="measure the write cost only")
    ap.add_argument("--spark", action="store_true", help="also read through lakelog.spark.read")
    ap.add_argument(
        "--spark-queries",
        type=int,
        default=None,
        help="Spark reads only the first N queries of each shape (default: all)",
    )
    ap.add_argument(
        "--spark-only",
        action="store_true",
        help="only the Spark reads, on the tables a previous run built",
    )
    args = ap.parse_args()
    n = _data.n_batches()
    WORK.mkdir(parents=True, exist_ok=True)
    print(
        f"{n} batches x {_data.DEFAULT_ROWS} rows = {n * _data.DEFAULT_ROWS:,} rows; "
        f"target {fmt_bytes(args.target)}"
    )

    # write cost: the same rows with the features off and on, alternating, median of runs
    cost: dict[str, list[tuple[float, float, float, float]]] = {"today": [], "skipping": []}
    for _ in range(0 if args.reuse or args.spark_only else args.runs):
        for name in ("today", "skipping"):
            cost[name].append(
                build_lakelog(WORK / name, n, args.target, features=name == "skipping")
            )
    if not args.skip_delta and not args.reuse and not args.spark_only:
        delta_cost = build_delta(WORK / "delta", n, args.target)
    write_rows: list[dict[str, Any]] = []
    for name, runs in cost.items() if not (args.reuse or args.spark_only) else ():
        write_rows.append(
            {
                "copy": name,
                "write_table s": statistics.median(r[0] for r in runs),
                "optimize s": statistics.median(r[1] for r in runs),
                "write cpu s": statistics.median(r[2] for r in runs),
                "optimize cpu s": statistics.median(r[3] for r in runs),
                "layout": layout(WORK / name),
            }
        )
    if write_rows:
        base = write_rows[0]
        for r in write_rows:
            r["write x"] = r["write_table s"] / base["write_table s"]
            r["optimize x"] = r["optimize s"] / base["optimize s"]
            r["write cpu x"] = r["write cpu s"] / base["write cpu s"]
            r["optimize cpu x"] = r["optimize cpu s"] / base["optimize cpu s"]
        if not args.skip_delta:
            write_rows.append(
                {"copy": "delta-rs", "write_table s": delta_cost[0], "optimize s": delta_cost[1]}
            )
        print_table(write_rows, file=sys.stdout)
        sys.stdout.flush()

    if args.write_only:
        return
    qs = queries(n, args.queries)
    spark_qs = {k: v[: args.spark_queries] for k, v in qs.items()}
    copies = ("today", "skipping") if args.skip_delta else ("today", "skipping", "delta-rs")
    spark_paths = {c: WORK / ("delta" if c == "delta-rs" else c) for c in copies}
    if args.spark_only:
        print_table(measure_spark(spark_paths, spark_qs))
        return
    readers: dict[str, Reader] = {
        "today": lakelog_reader(WORK / "today", skipping=False),
        "skipping": lakelog_reader(WORK / "skipping", skipping=True),
    }
    if not args.skip_delta:
        readers["delta-rs"] = delta_reader(WORK / "delta")
    rows = []
    for shape, q in qs.items():
        base: dict[str, float] | None = None
        for name, read in readers.items():
            for expr in q[:3]:  # warm the OS cache and the readers
                read(expr)
            m = measure(read, q)
            base = base or m
            print(
                f"{shape:14s} {name:9s} {fmt_bytes(m['bytes'])}/query {m['ms']:.1f} ms", flush=True
            )
            rows.append(
                {
                    "query": shape,
                    "reader": name,
                    "bytes/query": fmt_bytes(m["bytes"]),
                    "x today": m["bytes"] / base["bytes"],
                    "ms/query": m["ms"],
                    "reads/query": m["reads"],
                    "rows": int(m["rows"]),
                }
            )
    if args.spark:
        rows += measure_spark(spark_paths, spark_qs)
    print_table(rows)
    with collect_skip_stats() as stats:
        readers["skipping"](qs["customer_id ="][0])
    print(f"one customer_id lookup with skipping: {stats}")
    write_json_result(
        "skipping",
        {
            "batches": n,
            "queries": args.queries,
            "target": args.target,
            "write": write_rows,
            "reads": rows,
        },
    )


if __name__ == "__main__":
    main()
