"""What a table's rules cost a write: one append of ``--rows`` rows to a table with two
CHECK constraints, a NOT NULL column and a generated column (``day`` computed from
``ts``), against the same append to the same table without them (the ``day`` values
given in the data, so both write the same columns and bytes).

Prints the median of ``--runs`` appends of each, and the ratio (target <= 1.05x).

    python benchmarks/bench_constraints.py --rows 2000000 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import lakelog

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("amount", pa.float64()),
        ("currency", pa.string()),
        ("day", pa.date32()),
    ]
)
CONSTRAINTS = {
    "positive": "amount > 0",
    "known_currency": "currency IN ('EUR', 'USD', 'GBP')",
}


def data(rows: int) -> pa.Table:
    rng = np.random.default_rng(7)
    start = np.datetime64("2026-01-01T00:00:00", "us").astype(np.int64)
    ts = start + rng.integers(0, 365 * 86_400_000_000, rows)
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "amount": pa.array(rng.uniform(0.01, 1000.0, rows)),
            "currency": pa.array(np.array(["EUR", "USD", "GBP"])[rng.integers(0, 3, rows)]),
        }
    )


def timed_append(root: Path, name: str, table: pa.Table, *, guarded: bool) -> tuple[float, float]:
    """(wall, CPU) seconds of one append: CPU time (every thread of the process) is the
    steadier figure on a loaded machine."""
    if guarded:
        t = lakelog.create_table(
            str(root / name),
            SCHEMA,
            constraints=CONSTRAINTS,
            generated={"day": "CAST(ts AS DATE)"},
        )
    else:
        t = lakelog.create_table(str(root / name), SCHEMA)
    start, cpu = time.perf_counter(), time.process_time()
    t.append(table)
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = data(args.rows)
    # the plain table is given the day values (computed here, outside the timing)
    day = pc.cast(pc.floor_temporal(rows["ts"], unit="day"), pa.date32())
    plain_rows = rows.append_column("day", day).select(SCHEMA.names).cast(SCHEMA)
    guarded_rows = rows
    plain: list[tuple[float, float]] = []
    guarded: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        timed_append(root, "warmup", plain_rows, guarded=False)
        for run in range(args.runs):  # interleaved, each first in turn: load hits both alike
            order = [False, True] if run % 2 == 0 else [True, False]
            for rules in order:
                name = f"{'guarded' if rules else 'plain'}{run}"
                took = timed_append(
                    root, name, guarded_rows if rules else plain_rows, guarded=rules
                )
                (guarded if rules else plain).append(took)
            check = lakelog.open_table(str(root / f"guarded{run}")).snapshot().to_arrow()
            assert check.num_rows == args.rows and check["day"].null_count == 0
    p, g = statistics.median(w for w, _ in plain), statistics.median(w for w, _ in guarded)
    pc_, gc_ = statistics.median(c for _, c in plain), statistics.median(c for _, c in guarded)
    print(f"rows: {args.rows:,}  runs: {args.runs}  (medians; wall / CPU)")
    print(f"append, no rules:                                  {p:.3f} s / {pc_:.3f} s")
    print(f"append, 2 CHECK + NOT NULL + a generated column:   {g:.3f} s / {gc_:.3f} s")
    print(f"ratio, wall (target <= 1.05x): {g / p:.3f}x")
    print(f"ratio, CPU:                    {gc_ / pc_:.3f}x")


if __name__ == "__main__":
    main()
