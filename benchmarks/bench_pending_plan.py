"""What a large pending maintenance plan costs every other process of the table.

A maintenance run claims its groups on the log (``docs/format.md``, "Maintenance plans
and claims"): the claim lists every file it will rewrite, and while the plan is pending
each manifest header carries it. A first compaction of a table drowning in small files
claims all of them. This measures, on the cached logs of ``bench_scale.py`` (1,000,000
virtual files in 10,000 partitions, 1,000 commits; only the log exists):

* **cold open**: a fresh process opens the latest version and counts its files
  (``open_table(uri).snapshot().num_files``), median of ``--runs`` processes;
* **cold append**: a fresh process opens the table and commits an empty append;

each on four copies: the table as built (no plan), the table after a claim of every
file in one plan (one group per partition) with an interval's manifest written since
(its header holds the plan), the table right after the claim commit (with the manifest
a large commit gets at its own version, if this lakelog writes one), and delta-rs
opening its own log of the same files (the peer: Delta has no claims). It also reports
the size of the claim commit and of the newest manifest.

Usage: ``python benchmarks/bench_pending_plan.py [--files 1000000] [--runs 5]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from _common import BENCH_DIR, fmt_bytes, print_table, run_in_subprocess_peak_rss
from bench_scale import Shape, _link_copy, ensure_logs

WORK = Path("/tmp/lakelog-bench-pending-plan")


def lakelog_open(uri: str) -> dict[str, Any]:
    """Cold: open the latest version and count its files."""
    t0 = time.perf_counter()
    import lakelog

    imported = time.perf_counter()
    n = lakelog.open_table(uri).snapshot().num_files
    return {"seconds": time.perf_counter() - imported, "import": imported - t0, "files": n}


def lakelog_append(uri: str) -> dict[str, Any]:
    """Cold: open the table and commit an empty append."""
    import lakelog

    t0 = time.perf_counter()
    lakelog.open_table(uri).commit_files([], mode="append", operation="WRITE")
    return {"seconds": time.perf_counter() - t0}


def delta_open(path: str) -> dict[str, Any]:
    from deltalake import DeltaTable

    t0 = time.perf_counter()
    n = len(DeltaTable(path).file_uris())
    return {"seconds": time.perf_counter() - t0, "files": n}


def _claim_everything(uri: str, *, then_append: bool = True) -> tuple[int, int, int]:
    """Commit one plan claiming every live file (a group per partition), then (unless
    ``then_append`` is false) empty appends up to the next interval's manifest. Returns
    the sizes of the claim commit, of the newest manifest and of its plans file (0: none,
    format version 3 and before)."""
    import lakelog
    from lakelog.leases import Lease
    from lakelog.log.actions import ClaimGroup, PlanClaim
    from lakelog.log.commits import commit_path, list_log
    from lakelog.log.manifests import manifest_path, read_manifest_header

    table = lakelog.open_table(uri)
    snap = table.snapshot()
    groups: dict[str, list[str]] = {}
    for p in snap.paths():
        groups.setdefault(p.split("/", 1)[0], []).append(p)
    lease = Lease.acquire(table.storage, operation="COMPACT", properties=snap.properties)
    lease.release()  # the plan stays pending; only its claim's liveness ends
    claim = PlanClaim(
        plan_id=uuid.uuid4().hex,
        operation="COMPACT",
        owner="bench:1",
        lease_id=lease.lease_id,
        claimed_ms=int(time.time() * 1000),
        groups=[ClaimGroup(group_id=uuid.uuid4().hex[:16], paths=ps) for ps in groups.values()],
    )
    v = table.commit([claim], operation="CLAIM", kind="append", read_snapshot=snap).version
    claim_bytes = os.path.getsize(os.path.join(uri, commit_path(v)))
    interval = int(snap.properties.get("lakelog.manifest_interval", "10"))
    while then_append:
        v = table.commit_files([], mode="append", operation="WRITE").version
        if v % interval == 0:
            break
    v = list_log(table.storage).manifests[-1]
    header = read_manifest_header(table.storage, v)
    plans_file = getattr(header, "plans_file", None)
    plans_bytes = os.path.getsize(os.path.join(uri, plans_file)) if plans_file else 0
    return claim_bytes, os.path.getsize(os.path.join(uri, manifest_path(v))), plans_bytes


def _cold(func: str, target: str, runs: int) -> float:
    samples = []
    for _ in range(runs):
        run = run_in_subprocess_peak_rss(func=f"bench_pending_plan:{func}", args=[target])
        samples.append(run.last_json()["seconds"])
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    shape = Shape(args.files, args.commits)
    logs = ensure_logs(BENCH_DIR / "data" / "scale", shape, rebuild=False)
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    copies = {}
    for name in ("no plan", "plan pending", "claim just landed"):
        copies[name] = WORK / name.replace(" ", "-")
        _link_copy(logs["lakelog"], copies[name])
    for name in ("plan pending", "claim just landed"):
        claim_bytes, manifest_bytes, plans_bytes = _claim_everything(
            str(copies[name]), then_append=name == "plan pending"
        )
        print(
            f"{name}: claim commit {fmt_bytes(claim_bytes)}, newest manifest "
            f"{fmt_bytes(manifest_bytes)}, its plans file {fmt_bytes(plans_bytes)}"
        )
    rows = []
    base_open = _cold("lakelog_open", str(copies["no plan"]), args.runs)
    delta = _cold("delta_open", str(logs["delta"]), args.runs)
    for name, path in copies.items():
        opened = base_open if name == "no plan" else _cold("lakelog_open", str(path), args.runs)
        appended = _cold("lakelog_append", str(path), args.runs)
        rows.append(
            {
                "lakelog table": name,
                "cold open s": opened,
                "vs no plan": opened / base_open,
                "vs delta-rs open": opened / delta,
                "cold open + append s": appended,
            }
        )
    rows.append({"lakelog table": "delta-rs open (peer)", "cold open s": delta})
    print_table(rows)


if __name__ == "__main__":
    main()
