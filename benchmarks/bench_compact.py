"""Compaction: ``table.compact()`` vs delta-rs ``DeltaTable.optimize.compact()``.

Data: the seeded data set of ``_data.py`` (400 appends x 25,000 rows), built
once as a lakelog table and once as a Delta table (400 ``write_deltalake``
appends) under ``benchmarks/data/compact/``. Each timed run copies the
pristine table and compacts the copy in a fresh interpreter, so each run's
peak RSS (``VmHWM``) is its own. Both compact with the same target size
(128 MiB) and all cores (delta-rs: one task per core; lakelog:
``max_concurrent_groups`` = cores). Runs alternate between the two; medians
and the ratio are printed and saved to ``benchmarks/results/compact.json``.

Targets: lakelog wall time <= 0.8 x delta-rs; lakelog peak RSS below
2 x target file size + 300 MB.

    python benchmarks/bench_compact.py            # full scale, 5 runs each
    python benchmarks/bench_compact.py --quick    # 40 appends, 3 runs each
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (
    BENCH_DIR,
    fmt_bytes,
    print_table,
    run_in_subprocess_peak_rss,
    write_json_result,
)
from _data import batches, n_batches

MiB = 1024 * 1024
TARGET = 128 * MiB


def _dir_stats(path: Path, suffix: str = ".parquet") -> tuple[int, int]:
    files = [p for p in path.rglob(f"*{suffix}") if "_lakelog" not in p.parts]
    return len(files), sum(p.stat().st_size for p in files)


def build(root: Path, n: int) -> tuple[Path, Path]:
    """Build (once) the pristine lakelog and Delta tables of ``n`` appends."""
    from deltalake import write_deltalake

    import lakelog

    ll = root / f"lakelog-{n}"
    dl = root / f"delta-{n}"
    if not (ll / "_lakelog").exists():
        shutil.rmtree(ll, ignore_errors=True)
        t0 = time.perf_counter()
        table = None
        for b in batches(n):
            if table is None:
                lakelog.write_table(str(ll), b)
                table = lakelog.open_table(str(ll))
            else:
                table.append(b)
        print(f"built lakelog table ({n} appends) in {time.perf_counter() - t0:.1f} s")
    if not (dl / "_delta_log").exists():
        shutil.rmtree(dl, ignore_errors=True)
        t0 = time.perf_counter()
        for b in batches(n):
            write_deltalake(str(dl), b, mode="append")
        print(f"built Delta table ({n} appends) in {time.perf_counter() - t0:.1f} s")
    return ll, dl


# -- children (run in a fresh interpreter each) ---------------------------------------


def child_lakelog(path: str, target: int, workers: int) -> dict[str, Any]:
    import lakelog

    table = lakelog.open_table(path)
    t0 = time.perf_counter()
    report = table.compact(target_file_size=target, max_concurrent_groups=workers)
    seconds = time.perf_counter() - t0
    snap = table.snapshot()
    return {
        "seconds": seconds,
        "files_before": report.before_file_count,
        "files_after": snap.num_files,
        "bytes_after": snap.total_bytes,
        "rows": snap.num_rows,
        "groups": len(report.planned_groups),
    }


def child_delta(path: str, target: int, workers: int) -> dict[str, Any]:
    from deltalake import DeltaTable

    dt = DeltaTable(path)
    before = len(dt.file_uris())
    t0 = time.perf_counter()
    metrics = dt.optimize.compact(target_size=target, max_concurrent_tasks=workers)
    seconds = time.perf_counter() - t0
    dt = DeltaTable(path)
    uris = dt.file_uris()
    size = sum(os.path.getsize(u.removeprefix("file://")) for u in uris)
    rows = dt.to_pyarrow_dataset().count_rows()
    return {
        "seconds": seconds,
        "files_before": before,
        "files_after": len(uris),
        "bytes_after": size,
        "rows": rows,
        "groups": metrics.get("partitionsOptimized"),
    }


def run_once(kind: str, pristine: Path, work: Path, workers: int) -> dict[str, Any]:
    copy = work / f"{kind}-run"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(pristine, copy)
    try:
        child = run_in_subprocess_peak_rss(
            func=f"bench_compact:child_{kind}", args=[str(copy), TARGET, workers]
        )
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    out = child.last_json()
    out["peak_rss_bytes"] = child.peak_rss_bytes
    out["child_wall_seconds"] = child.wall_seconds
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="40 appends, 3 runs each")
    ap.add_argument("--runs", type=int, default=None, help="timed runs of each (default 5)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--data", default=str(BENCH_DIR / "data" / "compact"))
    args = ap.parse_args()
    n = 40 if args.quick else n_batches()
    runs = args.runs or (3 if args.quick else 5)
    root = Path(args.data)
    root.mkdir(parents=True, exist_ok=True)
    ll, dl = build(root, n)
    files, size = _dir_stats(ll)
    print(
        f"data: {n} appends x 25,000 rows; lakelog {files} files, {fmt_bytes(size)}; "
        f"target {fmt_bytes(TARGET)}; {args.workers} workers; {runs} runs each"
    )
    samples: dict[str, list[dict[str, Any]]] = {"lakelog": [], "delta": []}
    for i in range(runs):
        for kind, pristine in (("lakelog", ll), ("delta", dl)):
            r = run_once(kind, pristine, root, args.workers)
            samples[kind].append(r)
            print(
                f"  run {i + 1}/{runs} {kind:8s} {r['seconds']:.2f} s  "
                f"peak RSS {fmt_bytes(r['peak_rss_bytes'])}  files {r['files_before']}"
                f"->{r['files_after']}  rows {r['rows']:,}"
            )
    rows = []
    summary: dict[str, Any] = {}
    for kind, rs in samples.items():
        med = statistics.median(r["seconds"] for r in rs)
        rss = statistics.median(r["peak_rss_bytes"] for r in rs)
        summary[kind] = {
            "median_seconds": med,
            "samples_seconds": [r["seconds"] for r in rs],
            "median_peak_rss_bytes": rss,
            "max_peak_rss_bytes": max(r["peak_rss_bytes"] for r in rs),
            "files_before": rs[0]["files_before"],
            "files_after": rs[0]["files_after"],
            "bytes_after": rs[0]["bytes_after"],
            "rows": rs[0]["rows"],
        }
        rows.append(
            {
                "engine": kind,
                "median_s": med,
                "peak_rss": fmt_bytes(rss),
                "files": f"{rs[0]['files_before']}->{rs[0]['files_after']}",
                "bytes_after": fmt_bytes(rs[0]["bytes_after"]),
            }
        )
    ratio = summary["lakelog"]["median_seconds"] / summary["delta"]["median_seconds"]
    # each lakelog run against the delta-rs run right after it: robust to load drifting
    pair_ratios = [
        a["seconds"] / b["seconds"]
        for a, b in zip(samples["lakelog"], samples["delta"], strict=True)
    ]
    pair_ratio = statistics.median(pair_ratios)
    budget = 2 * TARGET + 300 * 1000 * 1000
    print()
    print_table(rows)
    print(
        f"\nlakelog / delta-rs wall time: {ratio:.2f}x (target <= 0.80x); median of "
        f"per-pair ratios {pair_ratio:.2f}x {[round(r, 2) for r in pair_ratios]}"
    )
    print(
        f"lakelog peak RSS {fmt_bytes(summary['lakelog']['max_peak_rss_bytes'])} "
        f"(max of runs) vs budget {fmt_bytes(budget)} (2 x target + 300 MB)"
    )
    path = write_json_result(
        "compact",
        {
            "appends": n,
            "rows_per_append": 25_000,
            "target_file_size": TARGET,
            "workers": args.workers,
            "runs": runs,
            "ratio": ratio,
            "rss_budget_bytes": budget,
            **summary,
        },
    )
    print(f"saved to {path}")


if __name__ == "__main__":
    main()
