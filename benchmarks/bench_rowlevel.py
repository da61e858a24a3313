"""Row-level changes: ``table.delete/update/merge`` vs delta-rs ``DeltaTable.delete/update/merge``.

Data: the compaction benchmark's seeded data set (``_data.py``: appends of 25,000
rows, one file each), built once as a lakelog table and once as a Delta table by
``bench_compact.build`` under ``benchmarks/data/compact/``. Cases:

* ``delete-range``      delete 1% of rows by a ``customer_id`` range (``customer_id < 1000``)
* ``delete-scattered``  delete 1% of rows by a scattered predicate (``x < 0.01``)
* ``update``            update 1% of rows (``y < 0.01``: ``event = 'fixed'``)
* ``upsert``            merge a source of 1% of the table's rows (100,000 at full scale),
                        half of them matching existing rows (sampled evenly from every
                        file) on the key ``(ts, customer_id)``, updating matches and
                        inserting the rest (delta-rs:
                        ``.merge(...).when_matched_update_all().when_not_matched_insert_all()``)

Two lakelog runs per case: ``lakelog`` copy-on-write (``lakelog.deletion_vectors=false``)
and ``lakelog-dv`` with ``lakelog.deletion_vectors=true`` (either set on the copy before
the timer starts when the table says otherwise; new tables have vectors on by default):
changed rows are marked in deletion vectors, updated and inserted rows written to new
files (docs/format.md, "Deletion vectors"). delta-rs rewrites files in both (it does not
write deletion vectors).

Each timed run copies the pristine table and runs one operation in a fresh
interpreter (its own peak RSS, ``VmHWM``); the time is the operation alone. Bytes
rewritten are the bytes of the data files the operation removed from the table and
of those it added, from each table's own file list before and after, plus, for
lakelog, the commit files it wrote (where deletion vectors live). After each change a
second fresh interpreter times a full read of the table (``read_after_s``; its memory is
not counted): deletion vectors move cost from the change to readers. Runs alternate
between the two engines; medians and ratios are printed and saved to
``benchmarks/results/rowlevel.json``.

Targets: lakelog time <= 0.5x delta-rs on each case; bytes rewritten no more than
delta-rs; peak RSS bounded by the source plus a few target files.

    python benchmarks/bench_rowlevel.py                # 400 appends (10M rows), 3 runs
    python benchmarks/bench_rowlevel.py --batches 100  # 2.5M rows
    python benchmarks/bench_rowlevel.py --quick        # 20 appends, 1 run
    python benchmarks/bench_rowlevel.py --default-decision --runs 3
        # copy-on-write vs deletion vectors for new tables: bench_rowlevel_default.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import BENCH_DIR, fmt_bytes, print_table, run_in_subprocess_peak_rss, write_json_result
from _data import DEFAULT_ROWS, SCHEMA, TS_SPAN, batch, n_batches

CASES = ("delete-range", "delete-scattered", "update", "upsert")
ENGINES = ("lakelog", "lakelog-dv", "delta")
SOURCE_FRACTION = 0.01
"""Upsert source rows as a fraction of the table's (100,000 of 10M)."""


def upsert_source(n: int) -> Any:
    """The upsert source for a table of ``n`` batches: half rows of the table (their keys,
    new values), sampled evenly from every batch, and half new rows (new keys)."""
    import numpy as np
    import pyarrow as pa

    size = max(2, int(n * DEFAULT_ROWS * SOURCE_FRACTION))
    half = size // 2
    per = [half // n + (1 if i < half % n else 0) for i in range(n)]
    parts = []
    for i in range(n):
        if not per[i]:
            continue
        rng = np.random.default_rng(1_000_000 + i)
        rows = batch(i).take(pa.array(np.sort(rng.choice(DEFAULT_ROWS, per[i], replace=False))))
        parts.append(rows.set_column(2, "x", pa.array(np.full(rows.num_rows, -1.0))))
    matched = pa.concat_tables(parts)
    rng = np.random.default_rng(7)
    fresh = size - half
    new = pa.table(
        {
            "ts": np.arange(n * TS_SPAN, n * TS_SPAN + fresh, dtype=np.int64),
            "customer_id": rng.integers(0, 100_000, fresh, dtype=np.int64),
            "x": np.full(fresh, -2.0),
            "y": rng.random(fresh),
            "event": pa.array(["new"] * fresh, pa.string()),
            "payload": pa.array(["pnew"] * fresh, pa.string()),
        },
        schema=SCHEMA,
    )
    return pa.concat_tables([matched.cast(SCHEMA), new])


# -- children (a fresh interpreter each) -------------------------------------------------


def _lakelog_files(table: Any) -> dict[str, int]:
    return {f.path: f.size_bytes for f in table.refresh().snapshot().files()}


def child_lakelog(path: str, case: str, n: int, vectors: str = "false") -> dict[str, Any]:
    import lakelog

    table = lakelog.open_table(path)
    if table.properties.get("lakelog.deletion_vectors", "false") != vectors:
        table.set_properties({"lakelog.deletion_vectors": vectors})
    source = upsert_source(n) if case == "upsert" else None
    before = _lakelog_files(table)
    log_before = table.snapshot().version
    t0, c0 = time.perf_counter(), time.process_time()
    if case == "delete-range":
        r = table.delete("customer_id < 1000")
    elif case == "delete-scattered":
        r = table.delete("x < 0.01")
    elif case == "update":
        r = table.update("y < 0.01", set={"event": "fixed"})
    else:
        r = table.merge(source, on=["ts", "customer_id"])
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    after = _lakelog_files(table)
    log_dir = Path(path) / "_lakelog"
    commits = sum(
        (log_dir / f"{v:020d}.json").stat().st_size
        for v in range(log_before + 1, table.snapshot().version + 1)
    )
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rows_changed": r.deleted_rows + r.updated_rows + r.inserted_rows,
        "files_removed": len(before.keys() - after.keys()),
        "bytes_removed": sum(s for p, s in before.items() if p not in after),
        "bytes_added": sum(s for p, s in after.items() if p not in before) + commits,
        "rows": table.snapshot().num_rows,
    }


def child_lakelog_dv(path: str, case: str, n: int) -> dict[str, Any]:
    return child_lakelog(path, case, n, "true")


def _delta_files(path: str) -> dict[str, int]:
    from deltalake import DeltaTable

    actions = DeltaTable(path).get_add_actions(flatten=True)
    return dict(
        zip(
            actions.column("path").to_pylist(),
            actions.column("size_bytes").to_pylist(),
            strict=True,
        )
    )


def child_delta(path: str, case: str, n: int) -> dict[str, Any]:
    from deltalake import DeltaTable

    dt = DeltaTable(path)
    source = upsert_source(n) if case == "upsert" else None
    before = _delta_files(path)
    t0, c0 = time.perf_counter(), time.process_time()
    if case == "delete-range":
        m = dt.delete("customer_id < 1000")
        changed = m["num_deleted_rows"]
    elif case == "delete-scattered":
        m = dt.delete("x < 0.01")
        changed = m["num_deleted_rows"]
    elif case == "update":
        m = dt.update(updates={"event": "'fixed'"}, predicate="y < 0.01")
        changed = m["num_updated_rows"]
    else:
        m = (
            dt.merge(
                source,
                predicate="t.ts = s.ts AND t.customer_id = s.customer_id",
                source_alias="s",
                target_alias="t",
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        changed = m["num_target_rows_updated"] + m["num_target_rows_inserted"]
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    after = _delta_files(path)
    rows = DeltaTable(path).to_pyarrow_dataset().count_rows()
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rows_changed": changed,
        "files_removed": len(before.keys() - after.keys()),
        "bytes_removed": sum(s for p, s in before.items() if p not in after),
        "bytes_added": sum(s for p, s in after.items() if p not in before),
        "rows": rows,
    }


# -- driver ---------------------------------------------------------------------------


def child_read_lakelog(path: str) -> None:
    """A full read of the table (after a change), in its own interpreter: prints the
    time as JSON."""
    import lakelog

    t0 = time.perf_counter()
    rows = lakelog.open_table(path).snapshot().to_arrow().num_rows
    _report({"read_seconds": time.perf_counter() - t0, "rows": rows})


def child_read_delta(path: str) -> None:
    from deltalake import DeltaTable

    t0 = time.perf_counter()
    rows = DeltaTable(path).to_pyarrow_dataset().to_table().num_rows
    _report({"read_seconds": time.perf_counter() - t0, "rows": rows})


def _report(result: dict[str, Any]) -> None:
    import json

    print(json.dumps(result), flush=True)
    # deltalake's scan threads can abort the interpreter's exit ("terminate called
    # without an active exception"): both readers leave without it, the result printed
    os._exit(0)


def read_after(engine: str, path: str) -> dict[str, Any]:
    """Run :func:`child_read_lakelog` or :func:`child_read_delta` in a fresh interpreter."""
    import json

    here = Path(__file__).resolve().parent
    code = (
        f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]; "
        f"import bench_rowlevel as b; b.child_read_{engine}({path!r})"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"read after the change failed: {done.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def run_once(kind: str, case: str, pristine: Path, work: Path, n: int) -> dict[str, Any]:
    copy = work / f"rowlevel-{kind}-run"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(pristine, copy)
    try:
        child = run_in_subprocess_peak_rss(
            func=f"bench_rowlevel:child_{kind.replace('-', '_')}", args=[str(copy), case, n]
        )
        read = read_after("delta" if kind == "delta" else "lakelog", str(copy))
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    out: dict[str, Any] = child.last_json()
    out["peak_rss_bytes"] = child.peak_rss_bytes
    out["read_seconds"] = read["read_seconds"]
    return out


def main() -> None:
    from bench_compact import build

    if "--default-decision" in sys.argv[1:]:
        # copy-on-write vs deletion vectors for new tables over a sequence of corrections:
        # bench_rowlevel_default.py, with the remaining options (--runs, --quick, ...)
        import bench_rowlevel_default

        bench_rowlevel_default.main([a for a in sys.argv[1:] if a != "--default-decision"])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 appends, 1 run")
    ap.add_argument(
        "--default-decision",
        action="store_true",
        help="copy-on-write vs deletion vectors for new tables (bench_rowlevel_default.py)",
    )
    ap.add_argument("--batches", type=int, default=None, help="appends of 25,000 rows")
    ap.add_argument("--runs", type=int, default=None, help="timed runs of each (default 3)")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset")
    ap.add_argument("--data", default=str(BENCH_DIR / "data" / "compact"))
    args = ap.parse_args()
    n = 20 if args.quick else (args.batches or n_batches())
    runs = args.runs or (1 if args.quick else 3)
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown cases {unknown}; choose from {list(CASES)}")
    root = Path(args.data)
    root.mkdir(parents=True, exist_ok=True)
    ll, dl = build(root, n)
    print(
        f"data: {n} appends x {DEFAULT_ROWS:,} rows ({n * DEFAULT_ROWS:,} rows, {n} files); "
        f"{runs} runs each; {os.cpu_count()} cores"
    )
    results: dict[str, Any] = {}
    table_rows = []
    for case in cases:
        samples: dict[str, list[dict[str, Any]]] = {k: [] for k in ENGINES}
        for i in range(runs):
            for kind, pristine in (("lakelog", ll), ("lakelog-dv", ll), ("delta", dl)):
                r = run_once(kind, case, pristine, root, n)
                samples[kind].append(r)
                print(
                    f"  {case:16s} run {i + 1}/{runs} {kind:8s} {r['seconds']:7.2f} s  "
                    f"cpu {r['cpu_seconds']:7.2f} s  "
                    f"RSS {fmt_bytes(r['peak_rss_bytes']):>10s}  rows changed "
                    f"{r['rows_changed']:,}  files removed {r['files_removed']}  "
                    f"bytes -{fmt_bytes(r['bytes_removed'])} +{fmt_bytes(r['bytes_added'])}"
                )
        summary = {}
        for kind, rs in samples.items():
            summary[kind] = {
                "median_seconds": statistics.median(r["seconds"] for r in rs),
                "samples_seconds": [r["seconds"] for r in rs],
                "median_cpu_seconds": statistics.median(r["cpu_seconds"] for r in rs),
                "median_read_seconds": statistics.median(r["read_seconds"] for r in rs),
                "max_peak_rss_bytes": max(r["peak_rss_bytes"] for r in rs),
                "rows_changed": rs[0]["rows_changed"],
                "files_removed": rs[0]["files_removed"],
                "bytes_removed": rs[0]["bytes_removed"],
                "bytes_added": rs[0]["bytes_added"],
                "rows_after": rs[0]["rows"],
            }
        for kind in ("lakelog", "lakelog-dv"):
            pairs = [
                a["seconds"] / b["seconds"]
                for a, b in zip(samples[kind], samples["delta"], strict=True)
            ]
            summary[kind]["ratio"] = statistics.median(pairs)
            summary[kind]["pair_ratios"] = pairs
            summary[kind]["cpu_ratio"] = statistics.median(
                a["cpu_seconds"] / b["cpu_seconds"]
                for a, b in zip(samples[kind], samples["delta"], strict=True)
            )
        results[case] = summary
        for kind in ENGINES:
            s = summary[kind]
            table_rows.append(
                {
                    "case": case,
                    "engine": kind,
                    "median_s": s["median_seconds"],
                    "ratio": s.get("ratio"),
                    "median_cpu_s": s["median_cpu_seconds"],
                    "cpu_ratio": s.get("cpu_ratio"),
                    "read_after_s": s["median_read_seconds"],
                    "rows_changed": s["rows_changed"],
                    "files_removed": s["files_removed"],
                    "bytes_removed": fmt_bytes(s["bytes_removed"]),
                    "bytes_added": fmt_bytes(s["bytes_added"]),
                    "peak_rss": fmt_bytes(s["max_peak_rss_bytes"]),
                }
            )
    print()
    print_table(table_rows)
    print(
        "\nratio: median of per-run lakelog / delta-rs wall time (target <= 0.50x); "
        "cpu_ratio: the same for CPU time (user + system, all threads); read_after_s: a "
        "full read of the table after the change (to_arrow; delta-rs: to_pyarrow_dataset)"
    )
    path = write_json_result(
        "rowlevel",
        {"appends": n, "rows_per_append": DEFAULT_ROWS, "runs": runs, "cases": results},
    )
    print(f"saved to {path}")


if __name__ == "__main__":
    main()
