r"""A 1% selective query on a clustered table, through every reader: files opened and time.

Data: the seeded benchmark set of ``_data.py`` (400 x 25,000 = 10M rows at scale 1;
``LAKELOG_BENCH_SCALE`` shrinks it), written as one lakelog table in files of
``--target`` bytes, then clustered with ``optimize(zorder_by=["customer_id", "x"])``
(Hilbert) and given the Delta view (``lakelog.delta_view=true``). The replaced
pre-clustering files stay on disk, as they do until expiry and vacuum.

Queries (seeded, ``--queries`` of them): ``customer_id BETWEEN c AND c + 999``, 1% of
the key space, all columns. Readers, each answering every query:

* **lakelog**: ``snapshot.to_arrow(filter=...)``;
* **duckdb (lakelog view)**: ``snapshot.to_duckdb(con, name="t")`` then SQL;
* **polars (lakelog)**: ``snapshot.to_polars().filter(...).collect()``;
* **pandas (lakelog)**: ``snapshot.to_pandas(filter=...)``;
* **deltalake (Delta view)**: ``DeltaTable(uri).to_pyarrow_dataset().to_table(filter=...)``,
  the peer: the same files, pruned by the Delta log's statistics;
* **duckdb read_parquet(live files)**: DuckDB's own Parquet reader over the explicit list of
  live files (no log pruning; DuckDB skips row groups by footer statistics), a second peer;
* **duckdb read_parquet(folder/\*.parquet)**: what listing the folder gives (the replaced
  files are read too, rows double-counted; shown for the README's warning). A ``**`` glob
  fails outright: it also reads the Delta view's checkpoint and lakelog's manifests.

Files opened: each reader runs one query in a fresh process under
``strace -f -e trace=openat``; the distinct data files (``*.parquet`` outside ``_lakelog/``
and ``_delta_log/``) it opens are counted. Time: the median over ``--runs`` of the time to
answer all queries, in process, caches warm, readers alternating.

Usage: ``python benchmarks/bench_readers.py [--queries 20] [--runs 5] [--target 8MiB]``
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _data
from _common import print_table, write_json_result

import lakelog

MiB = 1 << 20
WORK = Path("/tmp/lakelog-bench-readers")
WIDTH = 1000  # customer ids per query: 1% of _data.CUSTOMER_IDS


def build(uri: str, target: int) -> lakelog.Table:
    reader = pa.RecordBatchReader.from_batches(
        _data.SCHEMA, (b for t in _data.batches() for b in t.to_batches())
    )
    lakelog.write_table(uri, reader, properties={"lakelog.target_file_size": str(target)})
    table = lakelog.open_table(uri)
    table.optimize(zorder_by=["customer_id", "x"], target_file_size=target)
    lakelog.enable_delta_view(table)
    return table.refresh()


def queries(n: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(16)
    lows = rng.integers(0, _data.CUSTOMER_IDS - WIDTH, n)
    return [(int(lo), int(lo) + WIDTH - 1) for lo in lows]


READERS = (
    "lakelog",
    "duckdb (lakelog view)",
    "polars (lakelog)",
    "pandas (lakelog)",
    "deltalake (Delta view)",
    "duckdb read_parquet(live files)",
    "duckdb read_parquet(folder/*.parquet)",
)


def reader(uri: str, name: str) -> Callable[[int, int], int]:
    """Set up one reader (open the table, register the view, load the Delta log); the
    function returned answers one query with its row count."""
    import duckdb
    import polars as pl
    from deltalake import DeltaTable

    def expr(lo: int, hi: int) -> pc.Expression:
        return (pc.field("customer_id") >= lo) & (pc.field("customer_id") <= hi)

    con = duckdb.connect()

    def sql(source: str, lo: int, hi: int) -> int:
        got = con.sql(f"SELECT * FROM {source} WHERE customer_id BETWEEN {lo} AND {hi}").arrow()
        table = got.read_all() if isinstance(got, pa.RecordBatchReader) else got
        return table.num_rows

    if name == "deltalake (Delta view)":
        delta = DeltaTable(uri).to_pyarrow_dataset()
        return lambda lo, hi: delta.to_table(filter=expr(lo, hi)).num_rows
    if name == "duckdb read_parquet(folder/*.parquet)":
        folder = uri.removeprefix("file://")
        return lambda lo, hi: sql(f"read_parquet('{folder}/*.parquet')", lo, hi)
    snap = lakelog.open_table(uri).snapshot()
    if name == "lakelog":
        return lambda lo, hi: snap.to_arrow(filter=expr(lo, hi)).num_rows
    if name == "duckdb (lakelog view)":
        snap.to_duckdb(con, name="t")
        return lambda lo, hi: sql("t", lo, hi)
    if name == "polars (lakelog)":
        lf = snap.to_polars()
        return lambda lo, hi: lf.filter(pl.col("customer_id").is_between(lo, hi)).collect().height
    if name == "pandas (lakelog)":
        return lambda lo, hi: len(snap.to_pandas(filter=expr(lo, hi)))
    if name == "duckdb read_parquet(live files)":
        urls = [u.removeprefix("file://") for u in snap.file_urls()]
        listed = "[" + ", ".join(f"'{u}'" for u in urls) + "]"
        return lambda lo, hi: sql(f"read_parquet({listed})", lo, hi)
    raise ValueError(name)


def child(uri: str, name: str, lo: int, hi: int) -> None:
    """One query by one reader (run under strace by the parent). Leaves without
    interpreter teardown, where native thread pools winding down can abort."""
    print(reader(uri, name)(lo, hi), flush=True)
    os._exit(0)


_OPEN = re.compile(r'openat\([^"]*"([^"]+)"[^)]*\)\s*=\s*(\d+)')


def files_opened(uri: str, name: str, lo: int, hi: int) -> int | None:
    if shutil.which("strace") is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".strace") as out:
        cmd = [
            "strace", "-f", "-qq", "-e", "trace=openat", "-o", out.name,
            sys.executable, __file__, "--child", name, uri, str(lo), str(hi),
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not done.stdout.strip():
            raise SystemExit(f"{name} failed under strace: {done.stderr[-2000:]}")
        paths = set()
        for line in Path(out.name).read_text().splitlines():
            m = _OPEN.search(line)
            if m and m.group(1).endswith(".parquet"):
                p = m.group(1)
                if "/_lakelog/" not in p and "/_delta_log/" not in p:
                    paths.add(p)
    return len(paths)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--target", type=int, default=8 * MiB, help="file size in bytes")
    ap.add_argument(
        "--child", nargs=4, metavar=("READER", "URI", "LO", "HI"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.child:
        name, uri, lo, hi = args.child
        child(uri, name, int(lo), int(hi))
        return

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    uri = str(WORK / "t")
    started = time.perf_counter()
    table = build(uri, args.target)
    snap = table.snapshot()
    on_disk = sum(
        1
        for p in Path(uri).rglob("*.parquet")
        if "_lakelog" not in p.parts and "_delta_log" not in p.parts
    )
    print(
        f"built in {time.perf_counter() - started:.1f} s: {snap.num_rows:,} rows, "
        f"{snap.num_files} live files ({on_disk} Parquet files on disk), version {snap.version}"
    )
    qs = queries(args.queries)
    fns = {name: reader(uri, name) for name in READERS}
    want = [fns["lakelog"](lo, hi) for lo, hi in qs]
    for name, fn in fns.items():
        got = [fn(lo, hi) for lo, hi in qs]
        if got != want and "folder/" not in name:
            raise SystemExit(f"{name} returned {sum(got)} rows, lakelog {sum(want)}")
    glob_rows = sum(fns["duckdb read_parquet(folder/*.parquet)"](lo, hi) for lo, hi in qs)
    opened = {name: files_opened(uri, name, *qs[0]) for name in fns}
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for run in range(args.runs):
        order = list(fns) if run % 2 == 0 else list(reversed(fns))
        for name in order:
            t0 = time.perf_counter()
            for lo, hi in qs:
                fns[name](lo, hi)
            samples[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(s) for name, s in samples.items()}
    peer, native = med["deltalake (Delta view)"], med["duckdb read_parquet(live files)"]
    rows = []
    for name in fns:
        rows.append(
            {
                "reader": name,
                "files opened (1 query)": "n/a" if opened[name] is None else opened[name],
                f"time, {len(qs)} queries (median of {args.runs})": f"{med[name] * 1000:.0f} ms",
                "vs deltalake": f"{med[name] / peer:.2f}x",
                "vs duckdb live files": f"{med[name] / native:.2f}x",
            }
        )
    print(
        f"rows per query (median): {int(statistics.median(want)):,}; the folder glob "
        f"returned {glob_rows:,} rows in all against {sum(want):,}"
    )
    print_table(rows)
    write_json_result(
        "readers",
        {
            "rows": snap.num_rows,
            "live_files": snap.num_files,
            "files_on_disk": on_disk,
            "queries": len(qs),
            "runs": args.runs,
            "files_opened": opened,
            "median_s": med,
            "samples_s": samples,
        },
    )


if __name__ == "__main__":
    main()
