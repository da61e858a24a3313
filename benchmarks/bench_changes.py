"""Change data feed: ``Table.changes`` vs diffing two snapshots vs delta-rs ``load_cdf``.

Data: the row-level benchmark's data set (``_data.py``: appends of 25,000 rows, one file
each), built once as a lakelog and a Delta table by ``bench_compact.build`` under
``benchmarks/data/compact/``. Before the timed reads one copy of each is prepared:

* lakelog: ``lakelog.deletion_vectors=true`` and ``lakelog.change_data_feed=true``, then
  ``update("y < 0.01", set={"event": "fixed"})`` (1% of the rows), then 100 appends of
  1,000 rows (``_data.batch(n + k, rows=1000)``);
* Delta: ``delta.enableChangeDataFeed=true``, then delta-rs
  ``DeltaTable.update(predicate="y < 0.01")`` (it rewrites the files and writes ``cdc``
  files), then the same 100 appends with ``write_deltalake``.

Reads (each in a fresh interpreter, median of the runs):

* ``update``   the update's version: ``table.changes(v, v).to_arrow()``;
  ``diff``: ``snapshot(v - 1).to_arrow()`` and ``snapshot(v).to_arrow()`` joined on the
  key ``(ts, customer_id)``, keeping rows only on one side or with any value changed
  (what a user does without a feed); delta-rs:
  ``DeltaTable(uri).load_cdf(starting_version=v, ending_version=v).read_all()``.
* ``appends``  the 100 append versions, the same three ways.

Bytes read: the ``rchar`` growth of ``/proc/self/io`` of the child around the timed
call (every byte its ``read`` calls returned, page cache hits included; no reader here
maps files), so it counts the log, the change files and the data files each side opens.

Write cost (``delete``: ``x < 0.01``; ``update``: ``y < 0.01``, both with deletion
vectors): each run copies the pristine lakelog table, sets the properties (untimed) and
times the operation in a fresh interpreter, with the feed on and off, alternating.
Target: feed on / off <= 1.10x.

    python benchmarks/bench_changes.py                # 100 appends (2.5M rows), 3 runs
    python benchmarks/bench_changes.py --batches 400  # the full 10M rows
    python benchmarks/bench_changes.py --quick        # 20 appends, 1 run
"""

from __future__ import annotations

import argparse
import json
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

from _common import BENCH_DIR, fmt_bytes, print_table, write_json_result
from _data import DEFAULT_ROWS, batch

APPENDS = 100
APPEND_ROWS = 1_000
KEY = ["ts", "customer_id"]
VALUES = ["x", "y", "event", "payload"]
READERS = ("lakelog", "diff", "delta")
WRITE_CASES = ("delete", "update")
WRITE_TARGET = 1.10


# -- children (a fresh interpreter each) -------------------------------------------------


def _rchar() -> int:
    with open("/proc/self/io") as fh:
        for line in fh:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def _peak_rss() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def diff(old: Any, new: Any) -> Any:
    """The rows that differ between two versions of a table, by :data:`KEY`: a full
    outer join keeping keys on one side only and rows with any value changed."""
    import pyarrow.compute as pc

    joined = old.join(
        new, keys=KEY, join_type="full outer", left_suffix="_old", right_suffix="_new"
    )
    changed = pc.or_(pc.is_null(joined["x_old"]), pc.is_null(joined["x_new"]))
    for c in VALUES:
        changed = pc.or_(
            changed, pc.fill_null(pc.not_equal(joined[f"{c}_old"], joined[f"{c}_new"]), False)
        )
    return joined.filter(changed)


def child_read(kind: str, path: str, start: int, end: int) -> None:
    """Time one read of the changes of versions ``start..end``; prints JSON."""
    if kind == "delta":
        from deltalake import DeltaTable
    else:
        import lakelog
    r0, t0, c0 = _rchar(), time.perf_counter(), time.process_time()
    if kind == "lakelog":
        rows = lakelog.open_table(path).changes(start, end).to_arrow().num_rows
    elif kind == "diff":
        table = lakelog.open_table(path)
        old = table.snapshot(start - 1).to_arrow()
        new = table.snapshot(end).to_arrow()
        rows = diff(old, new).num_rows
    else:
        reader = DeltaTable(path).load_cdf(starting_version=start, ending_version=end)
        rows = reader.read_all().num_rows
    out = {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "bytes_read": _rchar() - r0,
        "rows": rows,
        "peak_rss_bytes": _peak_rss(),
    }
    print(json.dumps(out), flush=True)
    # deltalake's scan threads can abort the interpreter's exit ("terminate called
    # without an active exception"): leave without it, the result printed
    os._exit(0)


def child_write(path: str, case: str, feed: str) -> None:
    """Time one delete or update of 1% with deletion vectors, the feed on or off."""
    import lakelog

    table = lakelog.open_table(path)
    table.set_properties({"lakelog.deletion_vectors": "true", "lakelog.change_data_feed": feed})
    t0, c0 = time.perf_counter(), time.process_time()
    if case == "delete":
        r = table.delete("x < 0.01")
    else:
        r = table.update("y < 0.01", set={"event": "fixed"})
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    feed_dir = Path(path) / "_change_data"
    feed_bytes = sum(f.stat().st_size for f in feed_dir.rglob("*") if f.is_file())
    out = {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rows_changed": r.deleted_rows + r.updated_rows,
        "change_file_bytes": feed_bytes,
        "peak_rss_bytes": _peak_rss(),
    }
    print(json.dumps(out), flush=True)
    os._exit(0)


def _child(call: str) -> dict[str, Any]:
    here = Path(__file__).resolve().parent
    code = (
        f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]; "
        f"import bench_changes as b; b.{call}"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"child {call} failed: {done.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(lines[-1])
    return out


# -- preparation (untimed) ----------------------------------------------------------------


def prepare(ll: Path, dl: Path, root: Path, n: int) -> dict[str, Any]:
    """Copies of both tables with the feed on, the 1% update and the appends; returns
    the paths and the version ranges of each side."""
    from deltalake import DeltaTable, write_deltalake

    import lakelog

    lp, dp = root / f"changes-lakelog-{n}", root / f"changes-delta-{n}"
    for src, dst in ((ll, lp), (dl, dp)):
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
    appends = [batch(n + k, rows=APPEND_ROWS) for k in range(APPENDS)]

    table = lakelog.open_table(str(lp))
    table.set_properties({"lakelog.deletion_vectors": "true", "lakelog.change_data_feed": "true"})
    updated = table.update("y < 0.01", set={"event": "fixed"}).updated_rows
    lu = table.snapshot().version
    for b in appends:
        table.append(b)
    la = table.snapshot().version

    DeltaTable(str(dp)).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    DeltaTable(str(dp)).update(updates={"event": "'fixed'"}, predicate="y < 0.01")
    du = DeltaTable(str(dp)).version()
    for b in appends:
        write_deltalake(str(dp), b, mode="append")
    da = DeltaTable(str(dp)).version()
    return {
        "lakelog": str(lp),
        "delta": str(dp),
        "updated_rows": updated,
        "ranges": {
            "update": {"lakelog": (lu, lu), "delta": (du, du)},
            "appends": {"lakelog": (lu + 1, la), "delta": (du + 1, da)},
        },
    }


# -- driver ---------------------------------------------------------------------------


def _ratios(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> float:
    return float(statistics.median(x["seconds"] / y["seconds"] for x, y in zip(a, b, strict=True)))


def bench_reads(prep: dict[str, Any], runs: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    results: dict[str, Any] = {}
    rows = []
    for case, ranges in prep["ranges"].items():
        samples: dict[str, list[dict[str, Any]]] = {k: [] for k in READERS}
        for i in range(runs):
            for kind in READERS:
                side = "delta" if kind == "delta" else "lakelog"
                start, end = ranges[side]
                r = _child(f"child_read({kind!r}, {prep[side]!r}, {start}, {end})")
                samples[kind].append(r)
                print(
                    f"  {case:8s} run {i + 1}/{runs} {kind:8s} {r['seconds']:7.3f} s  "
                    f"read {fmt_bytes(r['bytes_read']):>10s}  rows {r['rows']:,}"
                )
        summary = {
            kind: {
                "median_seconds": statistics.median(r["seconds"] for r in rs),
                "samples_seconds": [r["seconds"] for r in rs],
                "median_cpu_seconds": statistics.median(r["cpu_seconds"] for r in rs),
                "bytes_read": statistics.median(r["bytes_read"] for r in rs),
                "max_peak_rss_bytes": max(r["peak_rss_bytes"] for r in rs),
                "rows": rs[0]["rows"],
            }
            for kind, rs in samples.items()
        }
        for peer in ("diff", "delta"):
            summary["lakelog"][f"ratio_{peer}"] = _ratios(samples["lakelog"], samples[peer])
            summary["lakelog"][f"bytes_ratio_{peer}"] = (
                summary["lakelog"]["bytes_read"] / summary[peer]["bytes_read"]
            )
        results[case] = summary
        for kind in READERS:
            s = summary[kind]
            rows.append(
                {
                    "case": case,
                    "reader": {"lakelog": "changes()", "diff": "diff of snapshots"}.get(
                        kind, "delta-rs load_cdf"
                    ),
                    "median_s": s["median_seconds"],
                    "vs_diff": s.get("ratio_diff"),
                    "vs_delta": s.get("ratio_delta"),
                    "bytes_read": fmt_bytes(s["bytes_read"]),
                    "bytes_vs_diff": s.get("bytes_ratio_diff"),
                    "bytes_vs_delta": s.get("bytes_ratio_delta"),
                    "rows": s["rows"],
                    "peak_rss": fmt_bytes(s["max_peak_rss_bytes"]),
                }
            )
    return results, rows


def bench_writes(ll: Path, root: Path, runs: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    results: dict[str, Any] = {}
    rows = []
    copy = root / "changes-write-run"
    for case in WRITE_CASES:
        samples: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
        for i in range(runs):
            for feed in ("off", "on") if i % 2 == 0 else ("on", "off"):
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(ll, copy)
                try:
                    flag = "true" if feed == "on" else "false"
                    r = _child(f"child_write({str(copy)!r}, {case!r}, {flag!r})")
                finally:
                    shutil.rmtree(copy, ignore_errors=True)
                samples[feed].append(r)
                print(
                    f"  {case:8s} run {i + 1}/{runs} feed {feed:3s} {r['seconds']:7.3f} s  "
                    f"rows {r['rows_changed']:,}  change files {fmt_bytes(r['change_file_bytes'])}"
                )
        ratio = _ratios(samples["on"], samples["off"])
        results[case] = {
            feed: {
                "median_seconds": statistics.median(r["seconds"] for r in rs),
                "samples_seconds": [r["seconds"] for r in rs],
                "median_cpu_seconds": statistics.median(r["cpu_seconds"] for r in rs),
                "rows_changed": rs[0]["rows_changed"],
                "change_file_bytes": rs[0]["change_file_bytes"],
            }
            for feed, rs in samples.items()
        }
        results[case]["ratio_on_off"] = ratio
        met = ratio <= WRITE_TARGET
        results[case]["target_met"] = met
        rows.append(
            {
                "case": f"{case} 1%, deletion vectors",
                "feed_on_s": results[case]["on"]["median_seconds"],
                "feed_off_s": results[case]["off"]["median_seconds"],
                "on_off": ratio,
                "target": f"<= {WRITE_TARGET:.2f}x: {'met' if met else 'NOT met'}",
                "rows_changed": results[case]["on"]["rows_changed"],
                "change_files": fmt_bytes(results[case]["on"]["change_file_bytes"]),
            }
        )
    return results, rows


def main() -> None:
    from bench_compact import build

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 appends, 1 run")
    ap.add_argument(
        "--batches", type=int, default=None, help="appends of 25,000 rows (default 100)"
    )
    ap.add_argument("--runs", type=int, default=None, help="timed runs of each (default 3)")
    ap.add_argument("--data", default=str(BENCH_DIR / "data" / "compact"))
    args = ap.parse_args()
    n = 20 if args.quick else (args.batches or 100)
    runs = args.runs or (1 if args.quick else 3)
    root = Path(args.data)
    root.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    ll, dl = build(root, n)
    print(
        f"data: {n} appends x {DEFAULT_ROWS:,} rows ({n * DEFAULT_ROWS:,} rows); {runs} runs; "
        f"{os.cpu_count()} cores; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    prep = prepare(ll, dl, root, n)
    print(
        f"prepared: 1% update ({prep['updated_rows']:,} rows), "
        f"{APPENDS} appends of {APPEND_ROWS:,} rows"
    )
    try:
        reads, read_rows = bench_reads(prep, runs)
    finally:
        shutil.rmtree(prep["lakelog"], ignore_errors=True)
        shutil.rmtree(prep["delta"], ignore_errors=True)
    writes, write_rows = bench_writes(ll, root, runs)
    load_end = os.getloadavg()
    print()
    print_table(read_rows)
    print(
        "\nvs_diff / vs_delta: median of per-run changes() / peer wall time; bytes: rchar "
        "growth of the reading process (the same ratios for bytes)\n"
    )
    print_table(write_rows)
    print(f"\nload average at the end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    path = write_json_result(
        "changes",
        {
            "appends": n,
            "rows_per_append": DEFAULT_ROWS,
            "feed_appends": APPENDS,
            "feed_append_rows": APPEND_ROWS,
            "runs": runs,
            "load_average_start": load,
            "load_average_end": load_end,
            "updated_rows": prep["updated_rows"],
            "reads": reads,
            "writes": writes,
        },
    )
    print(f"saved to {path}")


if __name__ == "__main__":
    main()
