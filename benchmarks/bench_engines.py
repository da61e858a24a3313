"""TPC-H through DuckDB, polars and Spark: lakelog's native readers against the engines' own.

The 8 TPC-H tables of scale factor ``--sf`` (DuckDB's ``tpch`` extension, from the
``duckdb-ext-tpch`` wheel: offline) are written as lakelog tables with deletion vectors
on (``lakelog.deletion_vectors=true``), then given ``--rounds`` refresh rounds: each
inserts a share ``--churn`` (0.1%) of new orders (copies of random orders under new keys,
with their lineitems) and deletes as many old orders with their lineitems (rows marked by
vectors). The 22 TPC-H queries run in three phases: after round 0 (the load), after
the last round, and after ``compact()`` (vectors purged), through:

* **DuckDB**: ``snapshot.to_duckdb(con, name=...)`` per table (lakelog), against
  ``read_parquet`` of a Parquet copy of the same live rows (plain Parquet: at round 0 and
  after compaction, lakelog's own live files, which hold no deleted row), and against
  ``delta_scan`` of a delta-rs table of the same rows (``duckdb-ext-delta``);
* **polars**: ``snapshot.to_polars()`` against ``pl.scan_parquet`` of the same Parquet
  files as DuckDB's peer, both queried through ``pl.SQLContext`` with DuckDB's TPC-H SQL;
  the queries polars' SQL cannot run are listed and left out;
* **Spark** (``--spark``): ``lakelog.spark.read`` per table registered as a temp view,
  against ``spark.read.parquet`` of the same Parquet files as DuckDB's peer (in a second
  session of the same ``local[2]`` application), through Spark SQL with DuckDB's TPC-H
  SQL (every query runs as written).

Each query runs ``--repeat`` times per reader, readers alternating; the best time
counts. Printed: per query and phase the times and ratios (lakelog / peer), and their
geometric means. Every reader's answers are checked against DuckDB's over the plain
Parquet copy (floats to 6 significant digits; Spark's to 4: its average of a decimal
keeps 6 decimal places).

Usage: ``python benchmarks/bench_engines.py [--sf 1] [--rounds 5] [--repeat 3]
[--churn 0.001] [--no-polars] [--no-delta] [--spark] [--save]``
"""

from __future__ import annotations

import argparse
import decimal
import importlib.util
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import duckdb
import polars as pl
from _common import print_table, write_json_result

import lakelog

TABLES = ["lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region"]
PROPS = {"lakelog.deletion_vectors": "true"}


def connection() -> Any:
    """DuckDB with the ``tpch`` and ``delta`` extensions from their wheels (offline)."""
    spec = importlib.util.find_spec("duckdb_ext")
    assert spec is not None and spec.submodule_search_locations, (
        "pip install duckdb-ext-tpch duckdb-ext-delta"
    )
    folder = Path(next(iter(spec.submodule_search_locations))) / "extensions"
    con = duckdb.connect(
        config={
            "extension_directory": str(folder),
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        }
    )
    con.execute("LOAD tpch")
    return con


def load(root: Path, sf: float) -> dict[str, lakelog.Table]:
    gen = connection()
    gen.execute(f"CALL dbgen(sf={sf})")
    tables = {}
    for name in TABLES:
        reader = gen.sql(f"SELECT * FROM {name}").fetch_record_batch(1_000_000)
        uri = str(root / "lakelog" / name)
        tables[name] = lakelog.write_table(uri, reader, properties=PROPS) and lakelog.open_table(
            uri
        )
    gen.close()
    return tables


def refresh(
    tables: dict[str, lakelog.Table], rounds: int, seed: int = 42, churn: float = 0.001
) -> None:
    """``rounds`` rounds of ``churn`` of the orders inserted (with lineitems) and as many
    deleted (0.1% by default)."""
    rng = np.random.default_rng(seed)
    orders, lineitem = tables["orders"], tables["lineitem"]
    for _ in range(rounds):
        keys = orders.snapshot().to_arrow(columns=["o_orderkey"])["o_orderkey"].to_numpy()
        n = max(1, int(len(keys) * churn))
        top = int(keys.max())
        copied = rng.choice(keys, n, replace=False)
        new_keys = np.arange(top + 1, top + 1 + n, dtype=keys.dtype)
        remap = pa.table({"old": copied, "new": new_keys})
        con = duckdb.connect()
        con.register("remap", remap)
        orders.snapshot().to_duckdb(con, name="o", filter=pc.field("o_orderkey").isin(copied))
        lineitem.snapshot().to_duckdb(con, name="l", filter=pc.field("l_orderkey").isin(copied))
        new_o = con.sql(
            "SELECT * REPLACE (remap.new AS o_orderkey) FROM o JOIN remap ON o_orderkey = old"
        ).arrow()
        new_l = con.sql(
            "SELECT * REPLACE (remap.new AS l_orderkey) FROM l JOIN remap ON l_orderkey = old"
        ).arrow()
        new_o = _table(new_o).select(orders.snapshot().schema.names)
        new_l = _table(new_l).select(lineitem.snapshot().schema.names)
        con.close()
        orders.append(new_o.cast(orders.snapshot().schema))
        lineitem.append(new_l.cast(lineitem.snapshot().schema))
        gone = rng.choice(keys, n, replace=False)
        orders.delete(pc.field("o_orderkey").isin(gone))
        lineitem.delete(pc.field("l_orderkey").isin(gone))


def _table(got: Any) -> pa.Table:
    return got.read_all() if isinstance(got, pa.RecordBatchReader) else got


def copies(tables: dict[str, lakelog.Table], root: Path, phase: str) -> dict[str, list[str]]:
    """Per table, Parquet files of its live rows: lakelog's own when none has a
    deletion vector, else a copy of the live rows written by lakelog's writer (the same
    compression and row groups: the peer differs only in having no vectors)."""
    out = {}
    for name, t in tables.items():
        snap = t.snapshot()
        if not any(f.deleted is not None for f in snap.files()):
            out[name] = [snap.storage.full(f.path) for f in snap.files()]
            continue
        uri = str(root / f"parquet-{phase}" / name)
        reader = pa.RecordBatchReader.from_batches(
            mapping_free(snap.schema), snap.to_batches(batch_size=1_000_000)
        )
        copy = lakelog.write_table(uri, reader) and lakelog.open_table(uri)
        out[name] = [copy.storage.full(f.path) for f in copy.snapshot().files()]
    return out


def delta_tables(tables: dict[str, lakelog.Table], root: Path, phase: str) -> dict[str, str]:
    """delta-rs tables of the same live rows, in lakelog's compression and row-group
    size (the reader is compared, not the file layout)."""
    import deltalake

    out = {}
    for name, t in tables.items():
        uri = str(root / f"delta-{phase}" / name)
        snap = t.snapshot()
        reader = pa.RecordBatchReader.from_batches(
            mapping_free(snap.schema), snap.to_batches(batch_size=1_000_000)
        )
        props = deltalake.WriterProperties(
            compression=snap.properties.get("lakelog.compression", "zstd").upper(),
            max_row_group_size=int(snap.properties.get("lakelog.row_group_size", 256 * 1024)),
        )
        deltalake.write_deltalake(uri, reader, writer_properties=props)
        out[name] = uri
    return out


def mapping_free(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type, f.nullable) for f in schema])


def queries(con: Any) -> dict[int, str]:
    return dict(con.sql("SELECT query_nr, query FROM tpch_queries()").fetchall())


def normalise(rows: list[tuple[Any, ...]], digits: int = 6) -> list[tuple[Any, ...]]:
    def one(v: Any) -> Any:
        if isinstance(v, (float, decimal.Decimal)):
            f = float(v)
            return 0.0 if f == 0 else float(f"{f:.{digits}g}")
        return v

    return sorted((tuple(one(v) for v in r) for r in rows), key=repr)


def same(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]], *, spark: bool) -> bool:
    """The same rows; Spark's within a relative 1e-4 per number (its average of a
    decimal keeps 6 decimal places), rows matched in the order of 3 digits."""
    if not spark:
        return normalise(got) == normalise(want)
    if len(got) != len(want):
        return False

    def rough(r: tuple[Any, ...]) -> str:
        return repr(normalise([r], 3)[0])

    order = sorted(range(len(got)), key=lambda i: rough(got[i]))
    wanted = sorted(range(len(want)), key=lambda i: rough(want[i]))
    for i, j in zip(order, wanted, strict=True):
        for x, y in zip(got[i], want[j], strict=True):
            if isinstance(x, (float, decimal.Decimal)) or isinstance(y, (float, decimal.Decimal)):
                if not math.isclose(float(x), float(y), rel_tol=1e-4, abs_tol=1e-6):
                    return False
            elif x != y:
                return False
    return True


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, got = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        got = fn()
        times.append(time.perf_counter() - t)
    return min(times), got


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def spark_session() -> Any:
    """One ``local[2]`` Spark application for both Spark readers (the same settings)."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName("bench-engines")
        .config("spark.driver.memory", "3g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )


def spark_readers(
    spark: Any, tables: dict[str, lakelog.Table], files: dict[str, list[str]]
) -> tuple[dict[str, Callable[[str], Any]], float]:
    """Spark SQL over ``lakelog.spark.read`` temp views, and over ``spark.read.parquet``
    of the peer's files in a second session (its own temp views); the first reader's
    registration time."""
    import lakelog.spark as lspark

    lake, plain = spark.newSession(), spark.newSession()
    t = time.perf_counter()
    for name, table in tables.items():
        lspark.read(lake, table.uri).createOrReplaceTempView(name)
    register_s = time.perf_counter() - t
    for name, paths in files.items():
        plain.read.parquet(*("file://" + p for p in paths)).createOrReplaceTempView(name)
    return {
        "spark lakelog": lambda q: lake.sql(q).collect(),
        "spark parquet": lambda q: plain.sql(q).collect(),
    }, register_s


def spark_times(
    readers: dict[str, Callable[[str], Any]], q: str, repeat: int
) -> tuple[dict[str, float], dict[str, Any]]:
    """Best times of the Spark readers on ``q``, and their answers: one untimed run
    each first (Spark compiles a query's code on its first run), then ``repeat`` rounds
    in alternating order (the JVM's state favours neither)."""
    names = [r for r in readers if r.startswith("spark")]
    answers = {name: readers[name](q) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeat):
        for name in names if i % 2 == 0 else names[::-1]:
            t = time.perf_counter()
            readers[name](q)
            times[name].append(time.perf_counter() - t)
    return {name: min(ts) for name, ts in times.items()}, answers


def run_phase(
    phase: str,
    tables: dict[str, lakelog.Table],
    root: Path,
    sql: dict[int, str],
    args: argparse.Namespace,
    spark: Any = None,
) -> dict[str, Any]:
    files = copies(tables, root, phase)
    lake_con, plain_con = connection(), connection()
    t = time.perf_counter()
    for name, table in tables.items():
        table.snapshot().to_duckdb(lake_con, name=name)
    register_s = time.perf_counter() - t
    for name, paths in files.items():
        listed = ", ".join(f"'{p}'" for p in paths)
        plain_con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet([{listed}])")
    readers: dict[str, Callable[[str], Any]] = {
        "duckdb lakelog": lambda q: lake_con.sql(q).fetchall(),
        "duckdb parquet": lambda q: plain_con.sql(q).fetchall(),
    }
    spark_register_s = None
    if spark is not None:
        spark_side, spark_register_s = spark_readers(spark, tables, files)
        readers.update(spark_side)
    if not args.no_delta:
        delta_con = connection()
        delta_con.execute("LOAD delta")
        for name, uri in delta_tables(tables, root, phase).items():
            delta_con.execute(f"CREATE VIEW {name} AS SELECT * FROM delta_scan('{uri}')")
        readers["duckdb delta_scan"] = lambda q: delta_con.sql(q).fetchall()
    polars_ok: list[int] = []
    if not args.no_polars:
        lake_ctx = pl.SQLContext({n: t.snapshot().to_polars() for n, t in tables.items()})
        plain_ctx = pl.SQLContext({n: pl.scan_parquet(files[n], glob=False) for n in tables})

        def polars_reader(ctx: Any) -> Callable[[str], Any]:
            return lambda q: ctx.execute(q).collect().rows()

        readers["polars lakelog"] = polars_reader(lake_ctx)
        readers["polars parquet"] = polars_reader(plain_ctx)
    times: dict[str, dict[int, float]] = {r: {} for r in readers}
    failed: dict[str, list[int]] = {}
    for nr, q in sql.items():
        want = None
        for _ in range(1):
            for reader, fn in readers.items():
                if reader.startswith("spark"):
                    continue
                try:
                    s, got = best(lambda fn=fn, q=q: fn(q), args.repeat)
                except Exception as e:  # polars' SQL lacks some of TPC-H's syntax
                    if reader.startswith("polars"):
                        failed.setdefault(reader, []).append(nr)
                        continue
                    raise RuntimeError(f"{reader} failed on Q{nr}: {e}") from e
                if want is None:
                    want = got
                elif not same(got, want, spark=reader.startswith("spark")):
                    raise AssertionError(f"{reader} answers Q{nr} differently from the peers")
                times[reader][nr] = s
        if spark is not None:
            spark_best, answers = spark_times(readers, q, args.repeat)
            for reader, s in spark_best.items():
                times[reader][nr] = s
                if not same(answers[reader], want or [], spark=True):
                    raise AssertionError(f"{reader} answers Q{nr} differently from the peers")
    polars_ok = [
        nr
        for nr in sql
        if nr in times.get("polars lakelog", {}) and nr in times.get("polars parquet", {})
    ]
    rows = []
    for nr in sql:
        row: dict[str, Any] = {"query": f"Q{nr:02d}"}
        for reader in readers:
            if nr in times[reader]:
                row[reader] = times[reader][nr] * 1000
        lk, pq_ = times["duckdb lakelog"][nr], times["duckdb parquet"][nr]
        row["duckdb lakelog/parquet"] = lk / pq_
        if "spark lakelog" in times:
            row["spark lakelog/parquet"] = times["spark lakelog"][nr] / times["spark parquet"][nr]
        if "duckdb delta_scan" in times:
            row["duckdb lakelog/delta"] = lk / times["duckdb delta_scan"][nr]
        if nr in polars_ok:
            row["polars lakelog/parquet"] = (
                times["polars lakelog"][nr] / times["polars parquet"][nr]
            )
        rows.append(row)
    summary: dict[str, Any] = {"phase": phase, "register_ms": register_s * 1000}
    if spark_register_s is not None:
        summary["spark register_ms"] = spark_register_s * 1000
    for key in (
        "duckdb lakelog/parquet",
        "duckdb lakelog/delta",
        "polars lakelog/parquet",
        "spark lakelog/parquet",
    ):
        vals = [r[key] for r in rows if key in r]
        if vals:
            summary[key] = geomean(vals)
    summary["polars queries"] = polars_ok
    summary["polars failed"] = sorted(
        set(failed.get("polars lakelog", [])) | set(failed.get("polars parquet", []))
    )
    print(f"\n== {phase}: times in ms (best of {args.repeat}), ratios lakelog / peer")
    print_table(rows)
    print(
        "geomean: "
        + ", ".join(f"{k} {v:.3f}" for k, v in summary.items() if isinstance(v, float) and "/" in k)
    )
    if summary["polars failed"]:
        print(f"polars SQL could not run Q{summary['polars failed']}: left out")
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-polars", action="store_true")
    ap.add_argument("--no-delta", action="store_true")
    ap.add_argument("--spark", action="store_true", help="add the Spark readers")
    ap.add_argument(
        "--churn", type=float, default=0.001, help="orders inserted and deleted per round"
    )
    ap.add_argument("--save", action="store_true")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    root = Path(tempfile.mkdtemp(prefix="bench-engines-"))
    try:
        t = time.perf_counter()
        tables = load(root, args.sf)
        print(f"loaded SF {args.sf} in {time.perf_counter() - t:.1f} s")
        sql = queries(connection())
        spark = spark_session() if args.spark else None
        phases = [run_phase("round 0", tables, root, sql, args, spark)]
        t = time.perf_counter()
        refresh(tables, args.rounds, churn=args.churn)
        marked = {
            n: sum(1 for f in tb.snapshot().files() if f.deleted is not None)
            for n, tb in tables.items()
        }
        took = time.perf_counter() - t
        print(f"\n{args.rounds} refresh rounds in {took:.1f} s; files with vectors: {marked}")
        phases.append(run_phase(f"round {args.rounds}", tables, root, sql, args, spark))
        for tb in tables.values():
            tb.set_properties({"lakelog.deletion_vectors.purge_ratio": "0.0001"})
            tb.compact()
        phases.append(run_phase("compacted", tables, root, sql, args, spark))
        print("\nsummary (geometric means of per-query ratios):")
        print_table([{k: v for k, v in p.items() if not isinstance(v, list)} for p in phases])
        print(f"load average at end: {os.getloadavg()}")
        if args.save:
            write_json_result(
                "bench_engines", {"sf": args.sf, "rounds": args.rounds, "phases": phases}
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
