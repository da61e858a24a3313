"""The catalog's ``load_table(name)`` vs ``lakelog.open_table(path)`` with 10,000 tables.

Setup (untimed): one real lakelog table (an empty table plus one append of 3 rows) is
created, then its folder is copied 10,000 times (``shutil.copytree`` with hard links:
every name has a table folder of its own, since a location has one name) and the 10,000
names are inserted in one
transaction straight into the catalog's ``lakelog_tables`` (``lakelog.catalog.schema``),
spread over 10 namespaces. That is the cheap way to register them: 10,000
``register_table`` calls would open each table first and take minutes; what is measured
is the lookup, which does not care how the row got there.

Timed, for random names (the same sequence on each backend), interleaved per lookup:

* ``catalog.load_table(name)``: the catalog lookup (one ``SELECT`` by primary key) plus
  opening the table at its latest version;
* ``catalog.describe_table(name)``: the lookup alone;
* the peer, ``lakelog.open_table(location)``: opening the same table by its path;

then ``describe_table`` alone for the same names back to back (the catalog's own cost,
without the wake-up a database server process needs after the client did other work).

Backends: SQLite (a file on local disk, WAL) and PostgreSQL (``--postgres URL``, else a
throwaway server on 127.0.0.1 started like the tests' fixture, which needs the PostgreSQL
binaries). Target: ``load_table`` p99 < 20 ms.

    python benchmarks/bench_catalog.py                     # 10,000 tables, 2,000 lookups
    python benchmarks/bench_catalog.py --quick             # 500 tables, 200 lookups
    python benchmarks/bench_catalog.py --backends sqlite
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import pyarrow as pa
from _common import print_table

import lakelog

NAMESPACES = 10


def quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ratio(samples: list[float], peer: list[float], q: float) -> str:
    return f"{quantile(samples, q) / quantile(peer, q):.2f}x"


def build_tables(root: Path, count: int) -> list[tuple[str, str]]:
    """``count`` copies of one small table under ``root``: (name, location) pairs."""
    template = root / "template"
    lakelog.write_table(str(template), pa.table({"id": [1, 2, 3]}))
    lakelog.open_table(str(template)).append(pa.table({"id": [4]}))
    out = []
    for i in range(count):
        ns, name = f"ns{i % NAMESPACES}", f"t{i:05d}"
        target = root / ns / name
        shutil.copytree(template, target, copy_function=os.link)  # files shared, read-only
        out.append((f"{ns}.{name}", "file://" + str(target)))
    return out


def register_all(catalog: Any, url: str, names: list[tuple[str, str]]) -> None:
    """Insert every name in one transaction (the cheap registration, see above)."""
    import sqlalchemy as sa

    from lakelog.catalog.schema import READY, tables

    for i in range(NAMESPACES):
        catalog.create_namespace(f"ns{i}", exist_ok=True)
    now = int(time.time() * 1000)
    rows = [
        {
            "namespace": name.split(".")[0],
            "name": name.split(".")[1],
            "location": location,
            "state": READY,
            "token": uuid.uuid4().hex,
            "created_ms": now,
            "updated_ms": now,
        }
        for name, location in names
    ]
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(sa.insert(tables), rows)
    engine.dispose()
    assert catalog.count_tables() == len(names)


def measure(
    catalog: Any, names: list[tuple[str, str]], lookups: int, seed: int
) -> dict[str, list[float]]:
    rng = random.Random(seed)
    picks = [names[rng.randrange(len(names))] for _ in range(lookups)]
    timings: dict[str, list[float]] = {"load_table": [], "describe_table": [], "open_table": []}
    calls: dict[str, Callable[[str, str], object]] = {
        "load_table": lambda name, _: catalog.load_table(name),
        "describe_table": lambda name, _: catalog.describe_table(name),
        "open_table": lambda _, location: lakelog.open_table(location),
    }
    for name, location in picks[:20]:  # warm-up: connections, imports, page cache
        for call in calls.values():
            call(name, location)
    for i, (name, location) in enumerate(picks):
        order = list(calls) if i % 2 == 0 else list(reversed(calls))
        for key in order:
            start = time.perf_counter()
            calls[key](name, location)
            timings[key].append(time.perf_counter() - start)
    # the lookup alone, back to back: the catalog's own cost without the wake-ups a
    # server process needs when the client did other work in between
    timings["describe_table, back to back"] = []
    for name, _ in picks:
        start = time.perf_counter()
        catalog.describe_table(name)
        timings["describe_table, back to back"].append(time.perf_counter() - start)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=10_000)
    parser.add_argument("--lookups", type=int, default=2_000)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--postgres", default=None, metavar="URL", help="an existing server")
    parser.add_argument("--quick", action="store_true", help="500 tables, 200 lookups")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.quick:
        args.tables, args.lookups = 500, 200
    root = Path(tempfile.mkdtemp(prefix="lakelog-bench-catalog-"))
    server = None
    try:
        t0 = time.perf_counter()
        names = build_tables(root / "tables", args.tables)
        print(f"{args.tables:,} tables copied in {time.perf_counter() - t0:.1f} s")
        results = []
        for backend in args.backends.split(","):
            if backend == "sqlite":
                url = f"sqlite:///{root}/catalog.db"
            elif args.postgres:
                url = args.postgres
            else:
                from _services import start_postgres_server

                server = start_postgres_server()
                url = server.create_database(f"bench_{uuid.uuid4().hex[:8]}")
            catalog = lakelog.connect_catalog(url, warehouse=str(root / "tables"))
            t0 = time.perf_counter()
            register_all(catalog, url, names)
            print(f"{backend}: {len(names):,} names registered in {time.perf_counter() - t0:.1f} s")
            timings = measure(catalog, names, args.lookups, args.seed)
            catalog.close()
            peer = timings["open_table"]
            for key in timings:
                ms = [s * 1000 for s in timings[key]]
                results.append(
                    {
                        "backend": backend,
                        "call": key,
                        "p50 ms": f"{quantile(ms, 0.5):.2f}",
                        "p99 ms": f"{quantile(ms, 0.99):.2f}",
                        "mean ms": f"{statistics.fmean(ms):.2f}",
                        "p50 / open_table": ratio(timings[key], peer, 0.5),
                        "p99 / open_table": ratio(timings[key], peer, 0.99),
                    }
                )
        print(f"\n{args.lookups:,} lookups of random names among {args.tables:,} tables")
        print_table(results)
        worst = max(float(r["p99 ms"]) for r in results if r["call"] == "load_table")
        met = "met" if worst < 20 else "NOT met"
        print(f"\nload_table p99, worst backend: {worst:.2f} ms (target < 20 ms: {met})")
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
