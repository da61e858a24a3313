"""Two maintenance jobs at once against one job on the same table, vs delta-rs.

A table of ``--files`` (800) small files over 8 ``kind`` partitions (``--rows``, 20,000
rows each), as lakelog and as a Delta table (delta-rs), one pristine copy each;
every run starts from a fresh copy. Jobs are OS processes started together:

* **one job**: ``compact()`` [delta-rs: ``optimize.compact()``];
* **two jobs, same work**: two ``compact()`` processes at once; lakelog with claims (the
  default) and with ``lakelog.maintenance.claims=false``; delta-rs: two
  ``optimize.compact()`` processes (one fails with a commit conflict after its work);
* **two jobs, mixed**: ``compact()`` of half the partitions and ``optimize(zorder_by=...)``
  of the table at once, claims on and off.

Reported (median of ``--runs``, default 3): wall time from the start of the first job to
the end of the last, CPU time of all jobs (work done in vain shows here: a lakelog run
that loses at commit deletes its outputs), data files left on disk and those no version
references (a delta-rs loser's), jobs that ended with abandoned groups or a conflict,
and the ratios to one job.

    python benchmarks/bench_concurrent_maintenance.py [--files 800] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import print_table, write_json_result

import lakelog

WORK = Path("/tmp/lakelog-bench-concurrent")
SCHEMA = pa.schema([("kind", pa.string()), ("a", pa.int64()), ("b", pa.float64())])
KINDS = [f"k{i}" for i in range(8)]

JOB = r"""
import json, sys, time
engine, uri, what = sys.argv[1:4]
t0 = time.time()
out = {"what": what, "start": t0}
try:
    if engine == "lakelog":
        import lakelog
        t = lakelog.open_table(uri)
        if what == "compact":
            r = t.compact()
        elif what == "compact-half":
            r = t.compact(partition_filter=[("kind", "in", ["k0", "k1", "k2", "k3"])])
        else:
            r = t.optimize(zorder_by=["a", "b"])
        out.update(version=r.version, abandoned=len(r.abandoned_groups))
    else:
        from deltalake import DeltaTable
        r = DeltaTable(uri).optimize.compact()
        out.update(version=0, abandoned=0, added=r.get("numFilesAdded"))
except Exception as e:  # a delta-rs commit conflict: the job's work is lost
    out.update(error=type(e).__name__, message=str(e)[:200])
out["end"] = time.time()
print(json.dumps(out))
"""


def build(root: Path, files: int, rows: int) -> tuple[Path, Path]:
    """Pristine lakelog and Delta tables of the same small files."""
    from deltalake import write_deltalake

    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(0)
    ll = lakelog.create_table(str(root / "lakelog"), SCHEMA, partition_by=["kind"])
    for i in range(files):
        n = rows
        batch = pa.table(
            {
                "kind": [KINDS[i % len(KINDS)]] * n,
                "a": rng.integers(0, 10**6, n),
                "b": rng.random(n),
            },
            schema=SCHEMA,
        )
        ll.append(batch)
        write_deltalake(str(root / "delta"), batch, mode="append", partition_by=["kind"])
    return root / "lakelog", root / "delta"


def parquet_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_lakelog" not in p.parts}


def referenced(engine: str, root: Path) -> set[str]:
    """Data files any version references."""
    if engine == "lakelog":
        t = lakelog.open_table(str(root))
        out: set[str] = set()
        for v in range(t.version + 1):
            out |= {f.path for f in t.snapshot(v).files()}
        return out
    from deltalake import DeltaTable

    dt = DeltaTable(str(root))
    out = set()
    for v in range(dt.version() + 1):
        dt.load_as_version(v)
        for u in dt.file_uris():
            path = unquote(urlparse(u).path) if "://" in u else u
            out.add(str(Path(path).relative_to(root)))
    return out


def row_count(engine: str, root: Path) -> int:
    if engine == "lakelog":
        return lakelog.open_table(str(root)).snapshot().num_rows
    from deltalake import DeltaTable

    adds = pa.table(DeltaTable(str(root)).get_add_actions(flatten=True))
    return int(sum(adds["num_records"].to_pylist()))


def scenario(
    engine: str, pristine: Path, jobs: list[str], *, claims: bool = True
) -> dict[str, Any]:
    root = WORK / "run" / engine
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(pristine, root)
    if engine == "lakelog" and not claims:
        lakelog.open_table(str(root)).set_properties({"lakelog.maintenance.claims": "false"})
    before = parquet_files(root)
    rows_before = row_count(engine, root)
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", JOB, engine, str(root), what],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for what in jobs
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=900)
        if p.returncode != 0:
            raise RuntimeError(err[-2000:])
        results.append(json.loads(out.strip().splitlines()[-1]))
    wall = max(r["end"] for r in results) - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    written = parquet_files(root) - before
    wasted = written - referenced(engine, root)
    lost = sum(1 for r in results if r.get("error") or r.get("abandoned"))
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "written": len(written),
        "unreferenced": len(wasted),
        "lost_jobs": lost,
        "rows_after_over_before": row_count(engine, root) / rows_before,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=800)
    ap.add_argument("--rows", type=int, default=20_000, help="rows per file")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    ll, dl = build(WORK / "pristine", args.files, args.rows)
    cases: list[tuple[str, str, list[str], bool]] = [
        ("lakelog: one compact", "lakelog", ["compact"], True),
        ("lakelog: two compacts, claims", "lakelog", ["compact", "compact"], True),
        ("lakelog: two compacts, no claims", "lakelog", ["compact", "compact"], False),
        ("lakelog: compact half + optimize, claims", "lakelog", ["compact-half", "optimize"], True),
        (
            "lakelog: compact half + optimize, no claims",
            "lakelog",
            ["compact-half", "optimize"],
            False,
        ),
        ("delta-rs: one compact", "delta", ["compact"], True),
        ("delta-rs: two compacts", "delta", ["compact", "compact"], True),
    ]
    rows = []
    for label, engine, jobs, claims in cases:
        runs = [
            scenario(engine, ll if engine == "lakelog" else dl, jobs, claims=claims)
            for _ in range(args.runs)
        ]
        row: dict[str, Any] = {"case": label}
        for key in ("wall_s", "cpu_s", "written", "unreferenced", "lost_jobs"):
            row[key] = statistics.median(float(r[key]) for r in runs)
        row["rows after / before (worst)"] = max(r["rows_after_over_before"] for r in runs)
        rows.append(row)
        print(f"  {label}: {row}", flush=True)
    base = {r["case"].split(":")[0]: r for r in rows if r["case"].endswith("one compact")}
    for r in rows:
        one = base[r["case"].split(":")[0]]
        r["wall / one job"] = r["wall_s"] / one["wall_s"]
        r["CPU / one job"] = r["cpu_s"] / one["cpu_s"]
        r["written / one job"] = r["written"] / max(1, one["written"])
    print(
        f"\n{args.files} files of {args.rows:,} rows in {len(KINDS)} partitions, median of "
        f"{args.runs} runs"
    )
    print_table(rows)
    write_json_result("concurrent_maintenance", {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
