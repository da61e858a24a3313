"""The SQL layer's cost: ``lakelog.sql.execute(statement)`` vs the same query on DuckDB
views the caller made itself (``catalog.to_duckdb(con)``, then ``con.sql``).

Setup (untimed): a catalog (SQLite) with one table ``bench.events`` of ``--rows`` rows in
``--files`` appends (columns id, day, value), partitioned by day.

Timed, interleaved per run, for each query (the same text to both):

* ``lakelog.sql.execute``: parse (sqlglot), resolve the names in the catalog, a view of
  the snapshot per table, transpile to DuckDB's dialect, run;
* the peer: ``catalog.to_duckdb(con)`` (a view of every table) then ``con.sql(query)``
  on a fresh connection.

Both read through ``snapshot.to_duckdb``, so the ratio is the statement layer's overhead.

    python benchmarks/bench_sql.py                    # 2,000,000 rows, 20 files, 7 runs
    python benchmarks/bench_sql.py --rows 200000 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import duckdb
import numpy as np
import pyarrow as pa
from _common import print_table

import lakelog
from lakelog.sql import execute

QUERIES = {
    "point": "SELECT * FROM bench.events WHERE id = 12345",
    "one day": "SELECT count(*), sum(value) FROM bench.events WHERE day = 'd03'",
    "group by": "SELECT day, avg(value) FROM bench.events GROUP BY day ORDER BY day",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()

    tmp = tempfile.mkdtemp()
    catalog = lakelog.connect_catalog("sqlite:///" + tmp + "/c.db", warehouse=tmp + "/wh")
    catalog.create_namespace("bench")
    schema = pa.schema([("id", pa.int64()), ("day", pa.string()), ("value", pa.float64())])
    table = catalog.create_table("bench.events", schema, partition_by=["day"])
    per = args.rows // args.files
    rng = np.random.default_rng(7)
    for i in range(args.files):
        ids = np.arange(i * per, (i + 1) * per)
        table.append(
            pa.table(
                {
                    "id": ids,
                    "day": [f"d{d:02d}" for d in rng.integers(0, 10, per)],
                    "value": rng.random(per),
                },
                schema=schema,
            )
        )

    rows = []
    for label, query in QUERIES.items():
        ours: list[float] = []
        peer: list[float] = []
        for _ in range(args.runs):
            t = time.perf_counter()
            got = execute(query, catalog=catalog)
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            con = duckdb.connect()
            catalog.to_duckdb(con)
            want = con.sql(query).to_arrow_table()
            con.close()
            peer.append(time.perf_counter() - t)
            assert got.num_rows == want.num_rows
        a, b = statistics.median(ours), statistics.median(peer)
        rows.append(
            {
                "query": label,
                "lakelog.sql.execute ms": a * 1000,
                "to_duckdb + con.sql ms": b * 1000,
                "ratio": a / b,
            }
        )
    print(f"{args.rows:,} rows in {args.files} appends; medians of {args.runs} runs")
    print_table(rows)
    catalog.close()


if __name__ == "__main__":
    main()
