"""Hidden partitioning: a one-day range query on ``ts`` over an event table partitioned by
``day(ts)``, against the same rows partitioned by identity on a derived ``date`` column
(the query then filters on both, as such tables make users do), and against no
partitioning.

The events are generated: ``--rows`` rows (default 100,000,000) whose timestamps are
uniformly random over three years (2023-01-01 to 2025-12-31), written in ``--appends``
appends that each span the whole three years (late and out-of-order arrivals: an
unpartitioned table's files then each span the three years too, so its min/max statistics
cannot skip them). Columns: ``ts`` (timestamp, UTC), ``id`` (int64), ``kind`` (string, 8
values), ``value`` (float64); the identity table also has ``date`` (``ts`` as a date).

Measured for the query ``ts >= <day> AND ts < <day + 1>`` (plus ``AND date = <day>`` on
the identity table), over ``--queries`` random days: the files and bytes the plan keeps
(``Snapshot.files(filter)``) and the median time of ``to_arrow(filter=...)``. Ratios are
day(ts) / peer. Targets: the same files as identity; at most 1/100 of no partitioning's
files and bytes.

    python benchmarks/bench_partitions.py                                  # 100M rows
    python benchmarks/bench_partitions.py --rows 3000000 --target-file-size 262144 \
        --row-group-size 16384
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from _common import fmt_bytes, print_table

import lakelog

START = dt.datetime(2023, 1, 1, tzinfo=dt.timezone.utc)
DAYS = 3 * 365
KINDS = np.array([f"kind-{i}" for i in range(8)])
SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us", tz="UTC")),
        ("id", pa.int64()),
        ("kind", pa.string()),
        ("value", pa.float64()),
    ]
)
WITH_DATE = SCHEMA.append(pa.field("date", pa.date32()))
BATCH = 1_000_000


def _batches(rows: int, seed: int, *, with_date: bool) -> Iterator[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    start_us = int(START.timestamp() * 1_000_000)
    span = DAYS * 86_400 * 1_000_000
    done = 0
    while done < rows:
        n = min(BATCH, rows - done)
        ts = pa.array(start_us + rng.integers(0, span, n), pa.int64()).cast(SCHEMA.field("ts").type)
        cols = [
            ts,
            pa.array(rng.integers(0, 1_000_000_000, n), pa.int64()),
            pa.array(KINDS[rng.integers(0, len(KINDS), n)]),
            pa.array(rng.random(n)),
        ]
        if with_date:
            cols.append(pc.cast(ts, pa.date32()))
        yield pa.RecordBatch.from_arrays(cols, schema=WITH_DATE if with_date else SCHEMA)
        done += n


def _build(
    root: Path,
    name: str,
    partition_by: list[str],
    rows: int,
    appends: int,
    target: int,
    row_group: int,
) -> tuple[lakelog.Table, float]:
    with_date = partition_by == ["date"]
    schema = WITH_DATE if with_date else SCHEMA
    table = lakelog.create_table(
        str(root / name),
        schema,
        partition_by=partition_by,
        properties={
            "lakelog.target_file_size": str(target),
            "lakelog.row_group_size": str(row_group),
        },
    )
    started = time.perf_counter()
    per = -(-rows // appends)
    for i in range(appends):
        n = min(per, rows - i * per)
        if n <= 0:
            break
        reader = pa.RecordBatchReader.from_batches(
            schema, _batches(n, seed=1000 + i, with_date=with_date)
        )
        table.append(reader)
    return table, time.perf_counter() - started


def _query(day: dt.date, identity: bool) -> str:
    nxt = day + dt.timedelta(days=1)
    where = f"ts >= '{day.isoformat()}T00:00:00+00:00' and ts < '{nxt.isoformat()}T00:00:00+00:00'"
    return where + (f" and date = '{day.isoformat()}'" if identity else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--appends", type=int, default=None, help="default: one per 10M rows")
    ap.add_argument("--target-file-size", type=int, default=128 * 1024 * 1024)
    ap.add_argument("--row-group-size", type=int, default=131_072)
    ap.add_argument("--queries", type=int, default=5, help="random days queried")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per query")
    args = ap.parse_args()
    appends = args.appends or max(1, args.rows // 10_000_000)
    rng = np.random.default_rng(7)
    days = [START.date() + dt.timedelta(days=int(d)) for d in rng.integers(0, DAYS, args.queries)]
    layouts = [
        ("day(ts)", ["day(ts)"], False),
        ("identity(date)", ["date"], True),
        ("none", [], False),
    ]
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_partitions_") as tmp:
        for label, parts, identity in layouts:
            table, write_s = _build(
                Path(tmp), label.replace("(", "_").replace(")", ""), parts, args.rows,
                appends, args.target_file_size, args.row_group_size,
            )  # fmt: skip
            snap = table.snapshot()
            files, nbytes, times, rows = [], [], [], 0
            for day in days:
                where = _query(day, identity)
                kept = snap.files(where)
                files.append(len(kept))
                nbytes.append(sum(f.size_bytes for f in kept))
                samples = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    got = snap.to_arrow(filter=where)
                    samples.append(time.perf_counter() - t0)
                rows += got.num_rows
                times.append(statistics.median(samples))
            results[label] = {
                "table files": snap.num_files,
                "table bytes": snap.total_bytes,
                "write s": write_s,
                "files read": statistics.mean(files),
                "bytes read": statistics.mean(nbytes),
                "query s": statistics.median(times),
                "rows": rows / len(days),
            }
    base = results["day(ts)"]
    table = []
    for label, r in results.items():
        table.append(
            {
                "layout": label,
                "table files": int(r["table files"]),
                "table bytes": fmt_bytes(r["table bytes"]),
                "write s": round(r["write s"], 2),
                "files read": round(r["files read"], 1),
                "bytes read": fmt_bytes(r["bytes read"]),
                "rows/query": round(r["rows"], 1),
                "query s": round(r["query s"], 4),
                "files ratio": round(base["files read"] / max(r["files read"], 1e-9), 4),
                "bytes ratio": round(base["bytes read"] / max(r["bytes read"], 1e-9), 4),
                "time ratio": round(base["query s"] / max(r["query s"], 1e-9), 3),
            }
        )
    print(
        f"{args.rows:,} rows over 3 years in {appends} append(s), target file size "
        f"{fmt_bytes(args.target_file_size)}, row groups of {args.row_group_size:,} rows; "
        f"{len(days)} one-day queries on ts "
        f"(ratios: day(ts) / layout)"
    )
    print_table(table)
    same = base["files read"] == results["identity(date)"]["files read"]
    none = results["none"]
    print(
        f"target same files as identity: {'met' if same else 'NOT met'}; "
        f"target <= 1/100 of no partitioning: files "
        f"{base['files read'] / max(none['files read'], 1e-9):.4f}, bytes "
        f"{base['bytes read'] / max(none['bytes read'], 1e-9):.4f}"
    )


if __name__ == "__main__":
    main()
