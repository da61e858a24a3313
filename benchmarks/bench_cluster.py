"""Clustering: lakelog ``optimize(zorder_by=...)`` vs delta-rs ``optimize.z_order``.

Data: the seeded 400 x 25,000-row set of ``_data.py`` as a lakelog table and a
Delta table (one commit per batch). Both are clustered on ``customer_id, x``
with a target file size of 8 MiB; each run starts from a fresh copy of the
unclustered table. Quality is measured the same way for both, from each
output's per-file min/max (lakelog: its snapshot's file stats; delta-rs: the
``add.stats`` of its log, via ``DeltaTable.get_add_actions``): the mean
fraction of bytes in files that can match, over 300 seeded queries, a third
each of

* A: ``customer_id`` in a window of 1,000 keys,
* B: ``x`` in a window of 0.01,
* AB: ``customer_id`` window of 10,000 and ``x`` window of 0.1.

The three ``(30k)`` columns repeat the measurement over 10,000 further seeded queries
of each shape: 100 queries estimate a layout's expected fraction only to about
+-0.005.

Incremental: 20 rounds of appending 1% new rows (spread over the key space)
to the clustered lakelog table, each followed by ``optimize()``; reported are
total bytes rewritten / bytes appended and the fractions against a full
re-clustering of the same data.

Usage: ``python benchmarks/bench_cluster.py [--quick] [--runs N]``; ``--quick``
uses 40 batches and a 1 MiB target (same files-per-table shape, ~10x less data).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _data
from _common import fmt_bytes, print_table, write_json_result

import lakelog
from lakelog.maintenance.clustering.layout import FileBoxes

MiB = 1 << 20
COLUMNS = ["customer_id", "x"]
WORK = Path("/tmp/lakelog-bench-cluster")
N_QUERIES = 300


def queries(
    seed: int = 20240601, n: int = N_QUERIES
) -> dict[str, list[dict[str, tuple[float, float]]]]:
    rng = np.random.default_rng(seed)
    out: dict[str, list[dict[str, tuple[float, float]]]] = {"A": [], "B": [], "AB": []}
    for _ in range(n // 3):
        c = int(rng.integers(0, _data.CUSTOMER_IDS - 1000 + 1))
        out["A"].append({"customer_id": (c, c + 999)})
        x = float(rng.uniform(0, 1 - 0.01))
        out["B"].append({"x": (x, x + 0.01)})
        c = int(rng.integers(0, _data.CUSTOMER_IDS - 10_000 + 1))
        x = float(rng.uniform(0, 1 - 0.1))
        out["AB"].append({"customer_id": (c, c + 9_999), "x": (x, x + 0.1)})
    return out


QUERIES = queries()
DENSE_QUERIES = queries(seed=7, n=30_000)
"""The same three query shapes, 10,000 each: the layout's expected fraction to about
+-0.001, where 100 queries of a shape give it to about +-0.005."""


def quality(boxes: FileBoxes, *, dense: bool = True) -> dict[str, float]:
    out: dict[str, float] = {k: float(boxes.fractions(q).mean()) for k, q in QUERIES.items()}
    if dense:
        for k, q in DENSE_QUERIES.items():
            out[f"{k} (30k)"] = float(boxes.fractions(q).mean())
    out["files"] = boxes.num_files
    return out


def lakelog_boxes(uri: str) -> FileBoxes:
    return FileBoxes.from_snapshot(lakelog.open_table(uri).snapshot(), COLUMNS)


def delta_boxes(path: str) -> FileBoxes:
    from deltalake import DeltaTable

    t = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pydict()
    return FileBoxes.from_arrays(
        COLUMNS,
        sizes=t["size_bytes"],
        rows=t["num_records"],
        mins={c: t[f"min.{c}"] for c in COLUMNS},
        maxs={c: t[f"max.{c}"] for c in COLUMNS},
    )


def build(n: int, target: int) -> tuple[str, str]:
    base = WORK / f"n{n}-t{target}"
    ll, dl = base / "lakelog", base / "delta"
    if not (base / ".done").exists():
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        t = lakelog.create_table(
            str(ll), _data.SCHEMA, properties={"lakelog.target_file_size": str(target)}
        )
        for b in _data.batches(n):
            t.append(b)
        _data.build_delta_table(dl, n)
        (base / ".done").write_text("ok")
    return str(ll), str(dl)


def fresh_copy(src: str, name: str) -> str:
    dst = WORK / "runs" / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return str(dst)


def run_lakelog(
    src: str, target: int, *, compression: str | None = None, name: str = "lakelog"
) -> tuple[float, str]:
    uri = fresh_copy(src, name)
    table = lakelog.open_table(uri)
    start = time.perf_counter()
    table.optimize(zorder_by=COLUMNS, target_file_size=target, compression=compression)
    return time.perf_counter() - start, uri


def run_delta(src: str, target: int) -> tuple[float, str]:
    from deltalake import DeltaTable

    path = fresh_copy(src, "delta")
    dt = DeltaTable(path)
    start = time.perf_counter()
    dt.optimize.z_order(COLUMNS, target_size=target)
    return time.perf_counter() - start, path


def incremental(
    clustered: str, target: int, rows: int, rounds: int = 20, *, per_round_full: bool = True
) -> dict[str, Any]:
    """``rounds`` appends of ``rows`` rows, each followed by ``optimize()``; after each
    round, a copy of the table is re-clustered in full, and each round's fractions are
    compared with that copy's (the same data), not with the last round's."""
    uri = fresh_copy(clustered, "incremental")
    table = lakelog.open_table(uri)
    appended = rewritten = 0
    per_round = []
    start = time.perf_counter()
    for r in range(rounds):
        res = table.append(_data.batch(100_000 + r, rows))
        added = sum(a.size_bytes for a in res.actions if isinstance(a, lakelog.log.actions.AddFile))
        rep = table.optimize(zorder_by=COLUMNS, target_file_size=target)
        appended += added
        rewritten += rep.rewritten_bytes
        per_round.append(
            {
                "round": r + 1,
                "appended": added,
                "rewritten": rep.rewritten_bytes,
                **quality(lakelog_boxes(uri), dense=False),
            }
        )
        if per_round_full:  # the same table re-clustered in full, outside the timing
            paused = time.perf_counter()
            copy = fresh_copy(uri, "incremental-round-full")
            lakelog.open_table(copy).optimize(
                zorder_by=COLUMNS, target_file_size=target, incremental=False
            )
            per_round[-1]["full"] = quality(lakelog_boxes(copy), dense=False)
            start += time.perf_counter() - paused
    seconds = time.perf_counter() - start
    inc = quality(lakelog_boxes(uri))
    full_uri = fresh_copy(uri, "incremental-full")
    lakelog.open_table(full_uri).optimize(
        zorder_by=COLUMNS, target_file_size=target, incremental=False
    )
    full = quality(lakelog_boxes(full_uri))
    return {
        "rounds": rounds,
        "rows_per_round": rows,
        "appended_bytes": appended,
        "rewritten_bytes": rewritten,
        "rewrite_ratio": rewritten / max(1, appended),
        "seconds": seconds,
        "incremental": inc,
        "full": full,
        "relative": {k: inc[k] / full[k] for k in ("A", "B", "AB")},
        "worst_round_relative": {
            k: max(x[k] / x["full"][k] if "full" in x else x[k] / full[k] for x in per_round)
            for k in ("A", "B", "AB")
        },
        "max_files": max(x["files"] for x in per_round),
        "per_round": per_round,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="40 batches, 1 MiB target")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per engine")
    ap.add_argument("--skip-incremental", action="store_true")
    args = ap.parse_args()
    n = 40 if args.quick else _data.n_batches()
    target = 1 * MiB if args.quick else 8 * MiB
    runs = args.runs or (2 if args.quick else 3)
    print(f"data: {n} batches x {_data.DEFAULT_ROWS:,} rows; target file size {fmt_bytes(target)}")
    ll_src, dl_src = build(n, target)
    before = quality(lakelog_boxes(ll_src))

    ll_times, dl_times = [], []
    ll_uri = dl_path = ""
    for _ in range(runs):
        s, ll_uri = run_lakelog(ll_src, target)
        ll_times.append(s)
        s, dl_path = run_delta(dl_src, target)
        dl_times.append(s)
    ll_t, dl_t = float(np.median(ll_times)), float(np.median(dl_times))
    ll_q, dl_q = quality(lakelog_boxes(ll_uri)), quality(delta_boxes(dl_path))
    # the same run with delta-rs's codec (snappy): more files at the same target size
    snappy_s, snappy_uri = run_lakelog(ll_src, target, compression="snappy", name="snappy")
    snappy_q = quality(lakelog_boxes(snappy_uri))
    rows = [
        {"layout": "unclustered (lakelog input)", **before, "seconds": None},
        {"layout": "delta-rs z_order", **dl_q, "seconds": dl_t},
        {"layout": "lakelog optimize (hilbert)", **ll_q, "seconds": ll_t},
        {"layout": "lakelog, compression=snappy", **snappy_q, "seconds": snappy_s},
    ]
    print_table(
        rows,
        columns=["layout", "files", "A", "B", "AB", "A (30k)", "B (30k)", "AB (30k)", "seconds"],
    )
    print(f"time ratio lakelog / delta-rs: {ll_t / dl_t:.3f} (medians of {runs})")
    result: dict[str, Any] = {
        "batches": n,
        "target_file_size": target,
        "runs": runs,
        "lakelog_seconds": ll_times,
        "delta_seconds": dl_times,
        "time_ratio": ll_t / dl_t,
        "quality": {
            "unclustered": before,
            "delta": dl_q,
            "lakelog": ll_q,
            "lakelog_snappy": snappy_q,
        },
        "lakelog_snappy_seconds": snappy_s,
    }
    if not args.skip_incremental:
        rows_per_round = n * _data.DEFAULT_ROWS // 100
        inc = incremental(ll_uri, target, rows_per_round)
        result["incremental"] = inc
        worst = ", ".join(f"{k} {v:.2f}" for k, v in inc["worst_round_relative"].items())
        print(
            f"worst round / full re-clustering of that round: {worst}; "
            f"at most {inc['max_files']} files"
        )
        print(
            f"incremental: 20 rounds of {rows_per_round:,} rows: rewritten "
            f"{fmt_bytes(inc['rewritten_bytes'])} / appended {fmt_bytes(inc['appended_bytes'])} "
            f"= {inc['rewrite_ratio']:.2f} ({inc['seconds']:.1f} s)"
        )
        print_table(
            [
                {"layout": "incremental", **inc["incremental"]},
                {"layout": "full re-clustering", **inc["full"]},
                {"layout": "incremental / full", **inc["relative"]},
            ],
            columns=["layout", "files", "A", "B", "AB"],
        )
    path = write_json_result("cluster" + ("-quick" if args.quick else ""), result)
    print(f"saved {path}")


if __name__ == "__main__":
    main()
