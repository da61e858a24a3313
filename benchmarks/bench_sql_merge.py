"""``MERGE INTO`` through SQL on Spark vs the Python call it maps onto: the statement layer's
cost on a merge.

* ``sql``: ``lakelog.spark.sql(spark, "MERGE INTO bench.t AS t USING src AS s ON t.id =
  s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *", catalog=...)``:
  parse (sqlglot), the name looked up in the catalog (SQLite), the source query run by
  Spark, then ``lakelog.spark.merge``;
* ``api``: ``lakelog.spark.merge(spark, uri, spark.read.parquet(source), "id")``.

Data: a table of ``--rows`` rows (id, day, amount, note) in ``--rows / 100,000`` appends
(files), built once under ``benchmarks/data/sql_merge/``; the source is 1% of that many
rows, half of them existing ids (updates, spread over every file), half new ids
(inserts), in one Parquet file both read through ``spark.read.parquet`` (``src`` is a
temporary view of it for the statement), made before the clock starts: a pipeline has its
source already. The statement's time includes collecting its one row of metrics (what a
caller of ``spark.sql`` does to see them). Each timed run starts from a fresh copy of the
table (registered in the catalog under a new name for ``sql``), both copies of a pair made
and synced to disk before either runs; the two run interleaved, the first of a pair
alternating, in one warm ``local[2]`` session (each ran twice on a small table and once,
untimed, on the big one first). Prints the
median of each and the median of the paired ratios sql / api (target: within 5%).

    python benchmarks/bench_sql_merge.py                          # 20,000,000 rows, 3 runs
    python benchmarks/bench_sql_merge.py --rows 2000000 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _common import BENCH_DIR, print_table, write_json_result

import lakelog

ROWS_PER_FILE = 100_000
FRACTION = 0.01
SCHEMA = pa.schema(
    [("id", pa.int64()), ("day", pa.string()), ("amount", pa.float64()), ("note", pa.string())]
)
STATEMENT = (
    "MERGE INTO bench.{name} AS t USING src AS s ON t.id = s.id "
    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
)


def batch(i: int, rows: int, *, start: int | None = None, amount: float | None = None) -> pa.Table:
    """Rows ``start .. start + rows`` (default: file ``i``'s ids)."""
    rng = np.random.default_rng(i)
    first = i * rows if start is None else start
    ids = np.arange(first, first + rows, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "day": pa.array([f"d{d:02d}" for d in rng.integers(0, 28, rows)], pa.string()),
            "amount": rng.random(rows) if amount is None else np.full(rows, amount),
            "note": pa.array([f"n{v}" for v in ids % 1000], pa.string()),
        },
        schema=SCHEMA,
    )


def build(root: Path, rows: int) -> tuple[Path, Path]:
    """The pristine table and the source file (built once per size)."""
    files = max(1, rows // ROWS_PER_FILE)
    per = rows // files
    table = root / f"table-{rows}"
    source = root / f"source-{rows}.parquet"
    if not (table / "_lakelog").exists():
        shutil.rmtree(table, ignore_errors=True)
        t0 = time.perf_counter()
        for i in range(files):
            lakelog.write_table(str(table), batch(i, per))
        print(f"built {files} files x {per:,} rows in {time.perf_counter() - t0:.1f} s")
    if not source.exists():
        size = max(2, int(rows * FRACTION))
        half = size // 2
        rng = np.random.default_rng(42)
        existing = np.sort(rng.choice(files * per, half, replace=False)).astype(np.int64)
        updates = batch(0, half, amount=-1.0).set_column(0, "id", pa.array(existing))
        inserts = batch(1, size - half, start=files * per, amount=-2.0)
        pq.write_table(pa.concat_tables([updates, inserts]), str(source))
    return table, source


def spark_session() -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-sql-merge")
        .config("spark.driver.memory", "4g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.executorEnv.PYTHONPATH", str(BENCH_DIR.parent))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(10).count()
    return spark


class Runner:
    """Both ways of the same merge on fresh copies of one table."""

    def __init__(self, spark: Any, work: Path) -> None:
        self.spark = spark
        self.work = work
        self.catalog = lakelog.connect_catalog(
            "sqlite:///" + str(work / "catalog.db"), warehouse=str(work / "wh")
        )
        self.catalog.create_namespace("bench", exist_ok=True)
        self.n = 0

    def copy(self, pristine: Path) -> Path:
        self.n += 1
        copy = self.work / f"copy-{self.n}"
        shutil.copytree(pristine, copy)
        return copy

    def run(self, way: str, copy: Path, source: Path) -> dict[str, Any]:
        import lakelog.spark as lspark

        try:
            if way == "sql":
                name = f"t{self.n}"
                self.catalog.register_table(f"bench.{name}", str(copy))
                self.spark.read.parquet(str(source)).createOrReplaceTempView("src")
                t0 = time.perf_counter()
                out = lspark.sql(self.spark, STATEMENT.format(name=name), catalog=self.catalog)
                row = out.collect()[0]
                seconds = time.perf_counter() - t0
                updated, inserted = row["num_updated_rows"], row["num_inserted_rows"]
                self.catalog.drop_table(f"bench.{name}")
            else:
                df = self.spark.read.parquet(str(source))
                t0 = time.perf_counter()
                r = lspark.merge(self.spark, str(copy), df, "id")
                seconds = time.perf_counter() - t0
                updated, inserted = r.updated_rows, r.inserted_rows
            rows = lakelog.open_table(str(copy)).snapshot().num_rows
        finally:
            shutil.rmtree(copy, ignore_errors=True)
        return {"seconds": seconds, "updated": updated, "inserted": inserted, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20_000_000, help="rows of the table")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each way")
    ap.add_argument("--data", default=str(BENCH_DIR / "data" / "sql_merge"))
    args = ap.parse_args()
    root = Path(args.data)
    root.mkdir(parents=True, exist_ok=True)
    pristine, source = build(root, args.rows)
    small, small_source = build(root, 20_000)
    work = Path(tempfile.mkdtemp(prefix="bench-sql-merge-", dir=root))
    try:
        spark = spark_session()
        runner = Runner(spark, work)
        for _ in range(2):  # warm: Python workers started, Spark's code compiled
            for way in ("sql", "api"):
                runner.run(way, runner.copy(small), small_source)
        for way in ("sql", "api"):  # and once untimed on the big table: its plans compiled
            runner.run(way, runner.copy(pristine), source)
        print(
            f"table: {args.rows:,} rows; source {int(args.rows * FRACTION):,} rows (half "
            f"updates, half inserts); {args.repeat} runs; {os.cpu_count()} cores; local[2]"
        )
        samples: dict[str, list[dict[str, Any]]] = {"sql": [], "api": []}
        for i in range(args.repeat):
            order = ("sql", "api") if i % 2 == 0 else ("api", "sql")
            copies = {way: runner.copy(pristine) for way in order}
            os.sync()  # both copies on disk before either clock starts: no writeback inside
            for way in order:
                r = runner.run(way, copies[way], source)
                samples[way].append(r)
                print(
                    f"  run {i + 1}/{args.repeat} {way:3s} {r['seconds']:7.2f} s  updated "
                    f"{r['updated']:,} inserted {r['inserted']:,} rows after {r['rows']:,}",
                    flush=True,
                )
        for way in ("updated", "inserted", "rows"):
            assert samples["sql"][0][way] == samples["api"][0][way], samples
        runner.catalog.close()
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {w: statistics.median(r["seconds"] for r in rs) for w, rs in samples.items()}
    ratio = statistics.median(
        a["seconds"] / b["seconds"] for a, b in zip(samples["sql"], samples["api"], strict=True)
    )
    print()
    print_table(
        [
            {
                "way": label,
                "median s": f"{med[w]:.2f}",
                "samples s": ", ".join(f"{r['seconds']:.2f}" for r in samples[w]),
            }
            for w, label in (
                ("sql", "lakelog.spark.sql MERGE INTO"),
                ("api", "lakelog.spark.merge"),
            )
        ]
    )
    verdict = "met" if ratio <= 1.05 else "not met"
    print(f"\nsql / api: {ratio:.3f}x (median of paired ratios; target <= 1.05x: {verdict})")
    write_json_result(
        "sql_merge",
        {
            "rows": args.rows,
            "repeat": args.repeat,
            "median_seconds": med,
            "samples_seconds": {w: [r["seconds"] for r in rs] for w, rs in samples.items()},
            "ratio_sql_over_api": ratio,
        },
    )


if __name__ == "__main__":
    main()
