"""Reading deletion vectors through the Delta view, against the same table compacted.

A table of ``--rows`` rows in ``--files`` files (one append each; columns ``id``,
``x`` uniform in [0, 1), ``s`` a short string) with ``lakelog.delta_view=true`` and
``lakelog.deletion_vectors=true`` gets ``delete("x < f")`` for f = 1% and 10%: every
file keeps its rows and gets a vector (in a DV file of the view). A copy of that table
is then compacted with every marked file rewritten (``lakelog.deletion_vectors.purge_ratio``
0.001, ``compact(target_rows=rows per file)``): the same live rows, the same number of
files, no vectors.

Each reader reads the whole latest version of both, alternating, ``--runs`` times:

* deltalake: ``DeltaTable(uri).scan()`` read into one Arrow table (its DataFusion
  engine: ``to_pyarrow_table`` refuses tables with deletion vectors);
* DuckDB: ``SELECT * FROM delta_scan(uri)`` fetched as Arrow (``duckdb-ext-delta``);
* polars: ``pl.scan_delta(uri).collect()``.

Reported per reader and share: the median time with vectors, compacted, and their
ratio (with / compacted), plus the row counts checked against lakelog's. The load
average is printed at the start and the end (the machine is shared).

Run: ``python benchmarks/bench_view_vectors.py [--rows N] [--files N] [--runs N]
[--quick] [--save]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import deltalake
import duckdb
import polars as pl
from _common import print_table, write_json_result

import lakelog

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("s", pa.string())])
PROPS = {"lakelog.delta_view": "true", "lakelog.deletion_vectors": "true"}


def duckdb_connection() -> Any:
    """DuckDB with the ``delta`` extension from the ``duckdb-ext-delta`` wheel (offline)."""
    spec = importlib.util.find_spec("duckdb_ext")
    assert spec is not None and spec.submodule_search_locations, "pip install duckdb-ext-delta"
    folder = Path(next(iter(spec.submodule_search_locations))) / "extensions"
    con = duckdb.connect(
        config={
            "extension_directory": str(folder),
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        }
    )
    con.execute("LOAD delta")
    return con


def build(root: Path, rows: int, files: int, share: float) -> tuple[str, str, int]:
    """The table with vectors and its compacted copy; returns both URIs and the live
    row count."""
    uri = str(root / f"marked-{share:g}")
    t = lakelog.create_table(uri, SCHEMA, properties=PROPS)
    rng = np.random.default_rng(42)
    per = rows // files
    for i in range(files):
        ids = np.arange(i * per, (i + 1) * per, dtype=np.int64)
        t.append(
            pa.table(
                {"id": ids, "x": rng.random(per), "s": [f"s{j % 1009}" for j in ids.tolist()]},
                schema=SCHEMA,
            )
        )
    result = t.delete(f"x < {share}")
    snap = t.snapshot()
    marked = sum(1 for f in snap.files() if f.deleted is not None)
    assert result.files_marked == files and result.files_removed == 0, result
    assert marked == files, f"expected every file marked, found {marked}"
    compacted = str(root / f"compacted-{share:g}")
    shutil.copytree(uri, compacted)
    c = lakelog.open_table(compacted)
    c.set_properties({"lakelog.deletion_vectors.purge_ratio": "0.001"})  # every marked file
    c.compact(target_rows=per)  # one output per input file
    assert len(c.snapshot().files()) == files
    csnap = c.snapshot()
    assert not any(f.deleted for f in csnap.files()), "compaction left a vector"
    assert csnap.num_rows == snap.num_rows
    return uri, compacted, snap.num_rows


def readers(con: Any) -> dict[str, Callable[[str], int]]:
    def with_deltalake(uri: str) -> int:
        reader = deltalake.DeltaTable(uri).scan()
        return pa.RecordBatchReader.from_stream(reader).read_all().num_rows

    def with_duckdb(uri: str) -> int:
        path = uri.replace("'", "''")
        return con.execute(f"SELECT * FROM delta_scan('{path}')").fetch_arrow_table().num_rows

    def with_polars(uri: str) -> int:
        return pl.scan_delta(uri).collect().height

    return {
        "deltalake scan()": with_deltalake,
        "duckdb delta_scan": with_duckdb,
        "polars": with_polars,
    }


def timed(fn: Callable[[str], int], uri: str) -> tuple[float, int]:
    start = time.perf_counter()
    n = fn(uri)
    return time.perf_counter() - start, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5, help="timed reads of each table (median)")
    ap.add_argument("--shares", default="0.01,0.1", help="shares of rows deleted")
    ap.add_argument("--quick", action="store_true", help="200,000 rows, 2 runs")
    ap.add_argument("--save", action="store_true", help="append to benchmarks/results/")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.runs = 200_000, 2
    shares = [float(s) for s in args.shares.split(",")]
    load_start = os.getloadavg()
    print(
        f"{args.rows:,} rows in {args.files} files; {args.runs} runs; "
        f"load average {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}"
    )
    con = duckdb_connection()
    out_rows: list[dict[str, str]] = []
    record: dict[str, Any] = {"rows": args.rows, "files": args.files, "runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="bench-view-vectors-") as tmp:
        for share in shares:
            marked, compacted, live = build(Path(tmp), args.rows, args.files, share)
            dv_bytes = sum(p.stat().st_size for p in Path(marked).glob("deletion_vector_*.bin"))
            for name, fn in readers(con).items():
                fn(marked), fn(compacted)  # warm the page cache and the engines
                with_dv: list[float] = []
                without: list[float] = []
                for _ in range(args.runs):
                    s, n = timed(fn, marked)
                    assert n == live, f"{name} read {n} rows with vectors, lakelog has {live}"
                    with_dv.append(s)
                    s, n = timed(fn, compacted)
                    assert n == live, f"{name} read {n} rows compacted, lakelog has {live}"
                    without.append(s)
                a, b = statistics.median(with_dv), statistics.median(without)
                ratios = [x / y for x, y in zip(with_dv, without, strict=True)]
                out_rows.append(
                    {
                        "deleted": f"{share:.0%}",
                        "reader": name,
                        "with vectors": f"{a * 1000:.0f} ms",
                        "compacted": f"{b * 1000:.0f} ms",
                        "ratio": f"{a / b:.2f}x",
                        "median per-run ratio": f"{statistics.median(ratios):.2f}x",
                    }
                )
                record[f"{share:g}/{name}"] = {"with_vectors_s": a, "compacted_s": b}
            print(f"  {share:.0%}: {live:,} live rows, DV files {dv_bytes / 1024:.0f} KiB")
    load_end = os.getloadavg()
    print_table(out_rows)
    print(f"load average at the end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    if args.save:
        record["load_average"] = [load_start[0], load_end[0]]
        write_json_result("bench_view_vectors", record)


if __name__ == "__main__":
    main()
