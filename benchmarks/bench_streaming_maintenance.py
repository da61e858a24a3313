"""A streaming ingest under five maintenance policies, against no maintenance and a fully
compacted table.

The ingest: ``--commits`` (600) micro-batch appends into a table of ``--partitions`` (20)
partitions ``p``; each commit writes ``--rows`` (40) rows into each of
``--partitions-per-commit`` (2) partitions, round robin, with an increasing key ``id``
and a value ``v``. Every ``--query-every`` (30) commits two queries run on a fresh
handle (``open_table`` + ``snapshot().to_arrow``, the fastest of ``--repeat`` runs):

* **point**: one key of one partition (``p = P and id = K``);
* **range**: ``v`` between two bounds over every partition (about 10% of the rows).

Policies (every one ingests the same batches):

* ``none``: no maintenance;
* ``compact-300``: ``Table.compact()`` every ``--optimize-every`` (300) commits (the
  scheduled job; its time is not in the commit latency);
* ``auto-inline``: ``lakelog.auto_compact=true`` (``min_files`` ``--min-files``, default
  the property's), run before ``append`` returns;
* ``auto-async``: the same, ``lakelog.auto_compact.mode=async`` (its runs in a worker
  process, ``lakelog.auto_compact.worker=process``, the default);
* ``auto-async-thread``: async on a background thread of the writer
  (``lakelog.auto_compact.worker=thread``), the design before the worker process;
* ``maintain-30``: ``Table.maintain(dry_run=False, budget_bytes=--maintain-budget)``
  every ``--maintain-every`` (30) commits, the in-process equivalent of
  ``lakelog maintain T --every ... --no-dry-run`` (its time is not in the commit latency).

**Paired.** Each policy runs in its own process (no GIL shared between policies), and
the coordinator steps them in lockstep: commit ``seq`` of every policy runs right after
the others' (the order rotates each step), the queries of a point one policy at a time.
A load spike from elsewhere on a shared machine then hits every policy alike, and the
ratios (p99 against ``none``, query time against the reference) compare figures taken
within milliseconds of each other. What one policy does in the background (an async
worker, a thread) runs while the other policies' commits are timed too: the machine's
load, like any other.

The reference at each query point is the same rows written fully compacted (one file
per partition). Reported per policy: query time over time and its worst ratio to the
compacted table's (target <= 1.3x at every point), live files, write amplification
(bytes rewritten by maintenance / bytes appended; target <= 3) and commit latency
p50/p99 (async mode's p99 against no maintenance: target <= 1.10x).

    python benchmarks/bench_streaming_maintenance.py [--commits 600] [--policies none,auto-async]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import statistics
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import fmt_bytes, print_table, write_json_result

import lakelog

WORK = Path("/tmp/lakelog-bench-streaming")
SCHEMA = pa.schema([("p", pa.int64()), ("id", pa.int64()), ("v", pa.float64())])
POLICIES = ("none", "compact-300", "auto-inline", "auto-async", "auto-async-thread", "maintain-30")
REWRITES = ("COMPACT", "AUTO COMPACT")


def batch(seq: int, args: argparse.Namespace) -> pa.Table:
    k = args.partitions_per_commit
    parts = [(seq * k + j) % args.partitions for j in range(k)]
    n = args.rows
    p = np.repeat(np.array(parts, dtype=np.int64), n)
    ids = seq * 10_000 + np.arange(len(p), dtype=np.int64)
    rng = np.random.default_rng(seq)
    return pa.table({"p": p, "id": ids, "v": rng.random(len(p))}, schema=SCHEMA)


def point_filter(seq: int, args: argparse.Namespace) -> str:
    """A key written about halfway through the stream so far."""
    half = max(0, seq // 2)
    part = (half * args.partitions_per_commit) % args.partitions
    return f"p = {part} and id = {half * 10_000 + 3}"


RANGE = "v >= 0.45 and v < 0.55"


def timed_query(uri: str, where: str, repeat: int) -> float:
    """The fastest of ``repeat`` runs: on a shared machine the others measure the
    neighbours' load more than the query."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        lakelog.open_table(uri).snapshot().to_arrow(filter=where, columns=["id", "v"])
        samples.append(time.perf_counter() - t0)
    return min(samples)


def compacted_reference(uri: str, at: str) -> str:
    """The rows of ``uri`` written again as one file per partition."""
    shutil.rmtree(at, ignore_errors=True)
    rows = lakelog.open_table(uri).snapshot().to_arrow()
    lakelog.write_table(at, rows, partition_by=["p"])
    return at


def open_policy(policy: str, args: argparse.Namespace) -> lakelog.Table:
    uri = str(WORK / policy)
    shutil.rmtree(uri, ignore_errors=True)
    props = {}
    if policy.startswith("auto"):
        props["lakelog.auto_compact"] = "true"
        if args.min_files:
            props["lakelog.auto_compact.min_files"] = str(args.min_files)
        if policy.startswith("auto-async"):
            props["lakelog.auto_compact.mode"] = "async"
        if policy == "auto-async-thread":
            props["lakelog.auto_compact.worker"] = "thread"
    return lakelog.create_table(uri, SCHEMA, partition_by=["p"], properties=props)


def policy_process(policy: str, args: argparse.Namespace, conn: Connection) -> None:
    """One policy's ingest in its own process (no GIL shared with another policy's),
    one step at a time as the coordinator says: ``("append", seq)`` commits a batch
    (and runs the policy's scheduled maintenance after it, outside the commit's time),
    ``("query", seq)`` runs the queries, ``("finish", None)`` sends the figures."""
    t = open_policy(policy, args)
    uri = t.uri
    latencies: list[float] = []
    maintenance_s = 0.0
    pending = []
    while True:
        what, seq = conn.recv()
        if what == "append":
            data = batch(seq, args)
            t0 = time.perf_counter()
            result = t.append(data)
            latencies.append(time.perf_counter() - t0)
            auto = result.auto_compaction
            if auto is not None and auto.status == "running":
                pending.append(auto)
            done = seq + 1
            if policy == "compact-300" and done % args.optimize_every == 0:
                t0 = time.perf_counter()
                t.compact()
                maintenance_s += time.perf_counter() - t0
            if policy == "maintain-30" and done % args.maintain_every == 0:
                t0 = time.perf_counter()
                t.maintain(dry_run=False, budget_bytes=args.maintain_budget)
                maintenance_s += time.perf_counter() - t0
            conn.send(None)
        elif what == "query":
            point = timed_query(uri, point_filter(seq, args), args.repeat)
            rng = timed_query(uri, RANGE, args.repeat)
            files = lakelog.open_table(uri).snapshot().num_files
            conn.send({"commits": seq + 1, "point": point, "range": rng, "files": files})
        else:
            break
    for outcome in pending:  # the async runs end before the figures are read
        outcome.wait(300)
    history = lakelog.open_table(uri).history()
    appended = sum(int(h.metrics.get("num_bytes", 0)) for h in history if h.operation == "APPEND")
    rewritten = sum(
        int(h.metrics.get("removed_bytes", 0)) for h in history if h.operation in REWRITES
    )
    rows = lakelog.open_table(uri).snapshot().num_rows
    assert rows == args.commits * args.rows * args.partitions_per_commit, (policy, rows)
    conn.send(
        {
            "policy": policy,
            "latencies": latencies,
            "files": lakelog.open_table(uri).snapshot().num_files,
            "appended_bytes": appended,
            "rewritten_bytes": rewritten,
            "write_amplification": rewritten / appended if appended else 0.0,
            "maintenance_s": maintenance_s,
            "rewrite_commits": sum(1 for h in history if h.operation in REWRITES),
        }
    )


def run_paired(
    policies: list[str], args: argparse.Namespace
) -> tuple[dict[str, Any], dict[int, Any]]:
    """Every policy in its own process, in lockstep: commit ``seq`` of each policy runs
    right after the others' (the order rotates), so a load spike from elsewhere on the
    machine hits every policy alike; the queries of a point run one policy at a time,
    beside the fully compacted reference of the same rows."""
    ctx = mp.get_context("spawn")
    conns: dict[str, Connection] = {}
    procs = []
    for policy in policies:
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=policy_process, args=(policy, args, theirs), daemon=False)
        proc.start()
        conns[policy] = ours
        procs.append(proc)
    points: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    reference: dict[int, Any] = {}
    for seq in range(args.commits):
        k = seq % len(policies)
        for policy in policies[k:] + policies[:k]:
            conns[policy].send(("append", seq))
            conns[policy].recv()
        done = seq + 1
        if done % args.query_every == 0:
            for policy in policies:
                conns[policy].send(("query", seq))
                points[policy].append(conns[policy].recv())
            ref = compacted_reference(str(WORK / "none"), str(WORK / "compacted"))
            reference[done] = {
                "point": timed_query(ref, point_filter(seq, args), args.repeat),
                "range": timed_query(ref, RANGE, args.repeat),
                "files": lakelog.open_table(ref).snapshot().num_files,
            }
    results: dict[str, Any] = {}
    for policy in policies:
        conns[policy].send(("finish", None))
    for policy in policies:
        r = conns[policy].recv()
        lat = np.array(r.pop("latencies"))
        r["commit_p50_ms"] = float(np.percentile(lat, 50) * 1000)
        r["commit_p99_ms"] = float(np.percentile(lat, 99) * 1000)
        r["points"] = points[policy]
        results[policy] = r
    for proc in procs:
        proc.join()
    return results, reference


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=600)
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--partitions-per-commit", type=int, default=2)
    ap.add_argument("--rows", type=int, default=40, help="rows per partition per commit")
    ap.add_argument("--query-every", type=int, default=30)
    ap.add_argument("--optimize-every", type=int, default=300)
    ap.add_argument("--maintain-every", type=int, default=30, help="commits between rounds")
    ap.add_argument(
        "--maintain-budget", type=int, default=1 << 30, help="bytes one maintain round rewrites"
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs per query (the fastest)")
    ap.add_argument("--min-files", type=int, default=0, help="0: the property's default")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--save", action="store_true", help="append to benchmarks/results/")
    args = ap.parse_args()
    policies = [p for p in args.policies.split(",") if p]
    unknown = set(policies) - set(POLICIES)
    if unknown:
        ap.error(f"unknown policies {sorted(unknown)}; choose from {list(POLICIES)}")
    if "none" not in policies:  # the peer of every ratio, and the reference's rows
        policies.insert(0, "none")
    WORK.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results, reference = run_paired(policies, args)
    print(f"{len(policies)} policies in lockstep: {time.perf_counter() - t0:.1f} s", flush=True)

    base = results["none"]
    summary = []
    for policy, r in results.items():
        worst_point = max(p["point"] / reference[p["commits"]]["point"] for p in r["points"])
        worst_range = max(p["range"] / reference[p["commits"]]["range"] for p in r["points"])
        mean_range = statistics.mean(
            p["range"] / reference[p["commits"]]["range"] for p in r["points"]
        )
        r["worst_point_vs_compacted"] = worst_point
        r["worst_range_vs_compacted"] = worst_range
        r["mean_range_vs_compacted"] = mean_range
        summary.append(
            {
                "policy": policy,
                "live files": r["files"],
                "commit p50 ms": f"{r['commit_p50_ms']:.1f}",
                "commit p99 ms": f"{r['commit_p99_ms']:.1f}",
                "p99 / none": f"{r['commit_p99_ms'] / base['commit_p99_ms']:.2f}x",
                "point / compacted (worst)": f"{worst_point:.2f}x",
                "range / compacted (worst)": f"{worst_range:.2f}x",
                "range / compacted (mean)": f"{mean_range:.2f}x",
                "write ampl.": f"{r['write_amplification']:.2f}",
                "rewritten": fmt_bytes(r["rewritten_bytes"]),
                "rewrite commits": r["rewrite_commits"],
                "maintenance s": f"{r['maintenance_s']:.1f}",
            }
        )
    print()
    print(
        f"{args.commits} commits x {args.partitions_per_commit} of {args.partitions} "
        f"partitions x {args.rows} rows; queries every {args.query_every} commits "
        f"(fastest of {args.repeat}); appended {fmt_bytes(base['appended_bytes'])}"
    )
    print_table(summary)
    print()
    print("query time over time (ms: point | range), live files in brackets:")
    over_time = []
    for i, commits in enumerate(sorted(reference)):
        ref = reference[commits]
        line: dict[str, object] = {
            "commits": commits,
            "compacted": f"{ref['point'] * 1000:.1f} | {ref['range'] * 1000:.1f} ({ref['files']})",
        }
        for policy, r in results.items():
            p = r["points"][i]
            line[policy] = f"{p['point'] * 1000:.1f} | {p['range'] * 1000:.1f} ({p['files']})"
        over_time.append(line)
    print_table(over_time)
    if args.save:
        write_json_result(
            "streaming_maintenance",
            {"args": vars(args), "reference": reference, "results": results},
        )


if __name__ == "__main__":
    main()
