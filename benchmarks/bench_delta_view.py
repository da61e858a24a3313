"""What the Delta view costs a commit, and how fast Delta readers read it.

1. **Commit cost.** ``--commits`` appends of ``--rows`` rows each to a table without
   the view and to one with ``lakelog.delta_view=true`` (same data, alternating, so
   both see the same machine load). Reported: the median time of one append in each
   and their ratio (the view's cost is one read of the previous Delta entry, one put,
   and a Delta checkpoint where lakelog writes a manifest, every 10 versions).
2. **Reading.** A table with the view on, made by ``--files`` appends (one file per
   partition each, 4 partitions) and a compaction of one partition (so the log
   holds removes too). Reported: the median time to open
   and read the whole latest version through lakelog (``open_table(uri).snapshot()
   .to_arrow()``) and through the view with delta-rs (``DeltaTable(uri)
   .to_pyarrow_table()``), their ratio, and each one's time to open the table alone
   (log replay, manifest or checkpoint).

Local disk; medians of ``--repeat`` runs.
Run: ``python benchmarks/bench_delta_view.py [--quick] [--repeat N] [--save]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import deltalake
from _common import median_time, print_table, write_json_result

import lakelog

SCHEMA = pa.schema(
    [("id", pa.int64()), ("ts", pa.timestamp("us", "UTC")), ("s", pa.string()), ("p", pa.string())]
)


def batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": ids,
            "ts": pa.array([i * 1_000_000 for i in ids], pa.timestamp("us", "UTC")),
            "s": [f"s{i % 997}" for i in ids],
            "p": [f"p{i % 4}" for i in ids],
        },
        schema=SCHEMA,
    )


def commit_cost(root: Path, commits: int, rows: int) -> dict[str, float]:
    plain = lakelog.create_table(str(root / "plain"), SCHEMA, partition_by=["p"])
    view = lakelog.create_table(
        str(root / "view"), SCHEMA, partition_by=["p"], properties={"lakelog.delta_view": "true"}
    )
    times: dict[str, list[float]] = {"plain": [], "view": []}
    for i in range(commits):
        data = batch(i * rows, rows)
        for name, t in (
            (("plain", plain), ("view", view))
            if i % 2
            else (
                ("view", view),
                ("plain", plain),
            )
        ):
            start = time.perf_counter()
            t.append(data)
            times[name].append(time.perf_counter() - start)
    assert deltalake.DeltaTable(str(root / "view")).version() == view.version
    p, v = statistics.median(times["plain"]), statistics.median(times["view"])
    return {"plain_ms": p * 1e3, "view_ms": v * 1e3, "ratio": v / p}


def read_cost(root: Path, files: int, rows: int, repeat: int) -> dict[str, float]:
    uri = str(root / "read")
    t = lakelog.create_table(
        uri, SCHEMA, partition_by=["p"], properties={"lakelog.delta_view": "true"}
    )
    for i in range(files):
        t.append(batch(i * rows, rows))
    t.compact(min_input_files=2, partition_filter=[("p", "=", "p0")])
    want = t.refresh().snapshot().num_rows
    assert deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == want
    num_files = t.snapshot().num_files
    ll_read, _ = median_time(lambda: lakelog.open_table(uri).snapshot().to_arrow(), repeat=repeat)
    dl_read, _ = median_time(lambda: deltalake.DeltaTable(uri).to_pyarrow_table(), repeat=repeat)
    ll_open, _ = median_time(lambda: lakelog.open_table(uri).snapshot().num_files, repeat=repeat)
    dl_open, _ = median_time(lambda: deltalake.DeltaTable(uri).version(), repeat=repeat)
    return {
        "files": num_files,
        "rows": want,
        "lakelog_read_ms": ll_read * 1e3,
        "deltalake_read_ms": dl_read * 1e3,
        "read_ratio": dl_read / ll_read,
        "lakelog_open_ms": ll_open * 1e3,
        "deltalake_open_ms": dl_open * 1e3,
        "open_ratio": dl_open / ll_open,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--save", action="store_true", help="append results to benchmarks/results")
    args = ap.parse_args()
    if args.quick:
        args.commits, args.files, args.repeat = 20, 40, 2
    with tempfile.TemporaryDirectory() as tmp:
        c = commit_cost(Path(tmp), args.commits, args.rows)
        r = read_cost(Path(tmp), args.files, args.rows, args.repeat)
    print_table(
        [
            {
                "measure": "append (median)",
                "without view": f"{c['plain_ms']:.1f} ms",
                "with view / deltalake": f"{c['view_ms']:.1f} ms",
                "ratio": f"{c['ratio']:.2f}x",
            },
            {
                "measure": f"read latest ({r['files']:.0f} files)",
                "without view": f"{r['lakelog_read_ms']:.1f} ms (lakelog)",
                "with view / deltalake": f"{r['deltalake_read_ms']:.1f} ms",
                "ratio": f"{r['read_ratio']:.2f}x",
            },
            {
                "measure": "open (log replay)",
                "without view": f"{r['lakelog_open_ms']:.1f} ms (lakelog)",
                "with view / deltalake": f"{r['deltalake_open_ms']:.1f} ms",
                "ratio": f"{r['open_ratio']:.2f}x",
            },
        ]
    )
    print(
        f"the view costs an append {c['ratio']:.2f}x its time without it; deltalake "
        f"reads the view in {r['read_ratio']:.2f}x lakelog's time"
    )
    if args.save:
        write_json_result("delta_view", {"args": vars(args), "commit": c, "read": r})


if __name__ == "__main__":
    main()
