"""Core log: commit latency and snapshot resolution, lakelog vs delta-rs.

(a) Commit latency on local disk: the median time of one append of the same
    tiny batch (100 rows of the seeded data set), lakelog ``Table.append`` vs
    delta-rs ``write_deltalake(table, mode="append")``, alternating, 50 each;
    also both "by path" (``lakelog.write_table`` / ``write_deltalake(path)``,
    which read the table state first).
(b) Snapshot resolution: the same synthetic sequence of 10,000 commits
    leaving 100,000 live files (``_delta_log.synthetic_commit_sequence``) is
    written as a Delta log with a checkpoint at the latest version, as a copy
    of it without a checkpoint, and as a lakelog log (commit files, version 0
    also carrying the metadata, a manifest every ``lakelog.manifest_interval``
    = 10 versions as the writer would leave). Only logs are read. Timed, each
    the median of ``--runs`` runs after one warm-up:

    * lakelog resolve: ``open_table(uri)`` (resolves the latest snapshot) and
      ``num_files``; + files: also the ``DataFile`` list (``files()``);
    * delta-rs: ``DeltaTable(path)``, and + ``file_uris()``, with and without
      the checkpoint;
    * time travel to the middle version (5,000): lakelog
      ``load_snapshot(storage, 5000)`` (what ``table.snapshot(5000)`` runs),
      and delta-rs ``DeltaTable(path, version=5000)`` + ``file_uris()``.

Targets: the latest version at or below delta-rs with its
checkpoint; version 5,000 within the same time.

    python benchmarks/bench_log.py            # 10,000 commits / 100,000 files
    python benchmarks/bench_log.py --quick    # 1,000 commits / 10,000 files

Generated logs are kept under ``benchmarks/data/log/`` and reused.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.compute as pc
from _common import BENCH_DIR, median_time, print_table, write_json_result
from _data import batch
from _delta_log import (
    ARROW_SCHEMA,
    BASE_TIMESTAMP_MS,
    AddSpec,
    Commit,
    commit_timestamp_ms,
    create_checkpoint,
    live_file_counts,
    synthetic_commit_sequence,
    write_delta_log,
)

import lakelog
from lakelog.log.actions import (
    Action,
    AddFile,
    CommitHeader,
    FileStats,
    Metadata,
    RemoveFile,
    encode_schema,
)
from lakelog.log.commits import LOG_DIR, commit_path, encode_commit
from lakelog.log.files import files_from_adds
from lakelog.log.manifests import ManifestHeader, write_manifest
from lakelog.log.snapshot import load_snapshot
from lakelog.properties import DEFAULTS
from lakelog.storage import Storage

MANIFEST_INTERVAL = int(DEFAULTS["lakelog.manifest_interval"])
_TXN_NS = uuid.UUID("6f1c7c1e-4a8e-4c47-9d2e-0b7c1a2f3e4d")


# -- (b) building the logs ---------------------------------------------------------------


def _add_action(spec: AddSpec, ts: int) -> AddFile:
    return AddFile(
        path=spec.path,
        size_bytes=spec.size,
        num_rows=spec.num_rows,
        stats=FileStats(
            min=dict(spec.min_values), max=dict(spec.max_values), null_count=dict(spec.null_count)
        ),
        modification_ms=ts if spec.modification_time is None else spec.modification_time,
    )


def write_lakelog_log(path: Path, commits: Iterable[Commit], *, interval: int) -> int:
    """Write ``commits`` as lakelog versions 0, 1, ... with a manifest every ``interval``.

    The live file set is kept columnar and advanced once per manifest (adds
    since the last one appended, removes filtered out), so generation stays
    linear in the number of manifests.
    """
    log_dir = path / LOG_DIR
    log_dir.mkdir(parents=True, exist_ok=False)
    storage = Storage(str(path))
    metadata = Metadata(
        table_id=uuid.uuid5(_TXN_NS, "bench-log").hex,
        schema=encode_schema(ARROW_SCHEMA),
        created_ms=BASE_TIMESTAMP_MS,
    )
    live = files_from_adds([])
    pending: dict[str, AddFile] = {}
    gone: set[str] = set()
    sizes: dict[str, int] = {}
    version = -1
    for version, (adds, removes) in enumerate(commits):
        ts = commit_timestamp_ms(version)
        actions: list[Action] = [metadata] if version == 0 else []
        for p in removes:
            actions.append(RemoveFile(path=p, deletion_ms=ts, size_bytes=sizes.pop(p, None)))
            if pending.pop(p, None) is None:
                gone.add(p)
        new = [_add_action(a, ts) for a in adds]
        actions.extend(new)
        for a in new:
            pending[a.path] = a
            sizes[a.path] = a.size_bytes
        header = CommitHeader(
            version=version,
            timestamp_ms=ts,
            operation="CREATE TABLE AS WRITE" if version == 0 else "WRITE",
            read_version=None if version == 0 else version - 1,
            txn_id=uuid.uuid5(_TXN_NS, str(version)).hex,
            engine="lakelog-bench-synthetic",
        )
        with open(path / commit_path(version), "xb") as f:
            f.write(encode_commit(header, actions))
        if version % interval == 0:
            if gone:
                keep = pc.invert(pc.is_in(live.column("path"), pa.array(list(gone), pa.string())))
                live = live.filter(keep)
                gone.clear()
            if pending:
                live = pa.concat_tables([live, files_from_adds(list(pending.values()))])
                pending.clear()
            live = live.combine_chunks()
            write_manifest(
                storage,
                ManifestHeader(
                    version=version, timestamp_ms=ts, num_files=live.num_rows, metadata=metadata
                ),
                live,
            )
    return version


def build_logs(root: Path, n_commits: int, n_files: int) -> dict[str, Path]:
    """Build (once) the three logs of the same sequence under ``root``."""
    paths = {
        "delta_cp": root / "delta-checkpoint",
        "delta_json": root / "delta-json-only",
        "lakelog": root / "lakelog",
    }
    marker = root / "complete.json"
    params = {"commits": n_commits, "files": n_files, "interval": MANIFEST_INTERVAL}
    if marker.exists() and json.loads(marker.read_text()) == params:
        return paths
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)

    def seq() -> Iterable[Commit]:
        return synthetic_commit_sequence(n_commits, n_files)

    t0 = time.perf_counter()
    write_delta_log(paths["delta_json"], seq())
    shutil.copytree(paths["delta_json"], paths["delta_cp"])
    create_checkpoint(paths["delta_cp"])
    t1 = time.perf_counter()
    write_lakelog_log(paths["lakelog"], seq(), interval=MANIFEST_INTERVAL)
    t2 = time.perf_counter()
    print(f"built logs in {root}: delta {t1 - t0:.1f} s, lakelog {t2 - t1:.1f} s")
    marker.write_text(json.dumps(params))
    return paths


# -- (b) timing --------------------------------------------------------------------------


def _lakelog_latest(uri: str, listing: str) -> int:
    t = lakelog.open_table(uri)
    return _listed(t.snapshot(t.version), listing)  # the snapshot open_table resolved


def _lakelog_version(uri: str, version: int, listing: str) -> int:
    return _listed(load_snapshot(Storage(uri), version), listing)


def _listed(snap: lakelog.Snapshot, listing: str) -> int:
    if listing == "files":
        return len(snap.files())
    if listing == "urls":
        return len(snap.file_urls())
    return snap.num_files


def _delta(path: str, version: int | None, listing: str) -> int:
    from deltalake import DeltaTable

    dt = DeltaTable(path, version=version)
    return len(dt.file_uris()) if listing == "urls" else -1


LL_RESOLVE = "lakelog resolve"
LL_URLS = "lakelog resolve + file_urls()"
LL_FILES = "lakelog resolve + files()"
DL_CP = "delta-rs checkpoint: DeltaTable"
DL_CP_URIS = "delta-rs checkpoint: + file_uris()"
DL_JSON = "delta-rs no checkpoint: DeltaTable"
DL_JSON_URIS = "delta-rs no checkpoint: + file_uris()"
DL_V = "delta-rs: DeltaTable(version=)"
DL_V_URIS = "delta-rs: + file_uris()"


def time_resolution(
    paths: dict[str, Path], mid: int, expected: list[int], runs: int
) -> list[dict[str, Any]]:
    """Median seconds of every reader; each first checked for the right file count."""
    ll, dcp, djson = (str(paths[k]) for k in ("lakelog", "delta_cp", "delta_json"))
    cases: list[tuple[str, str, Callable[[], int], int]] = []
    for label, listing in ((LL_RESOLVE, "count"), (LL_URLS, "urls"), (LL_FILES, "files")):
        cases.append(("latest", label, partial(_lakelog_latest, ll, listing), expected[-1]))
    for label, path, listing in (
        (DL_CP, dcp, "none"),
        (DL_CP_URIS, dcp, "urls"),
        (DL_JSON, djson, "none"),
        (DL_JSON_URIS, djson, "urls"),
    ):
        want = expected[-1] if listing == "urls" else -1
        cases.append(("latest", label, partial(_delta, path, None, listing), want))
    for label, listing in ((LL_RESOLVE, "count"), (LL_URLS, "urls"), (LL_FILES, "files")):
        cases.append((f"v{mid}", label, partial(_lakelog_version, ll, mid, listing), expected[mid]))
    cases.append((f"v{mid}", DL_V, partial(_delta, dcp, mid, "none"), -1))
    cases.append((f"v{mid}", DL_V_URIS, partial(_delta, dcp, mid, "urls"), expected[mid]))
    for which, label, fn, want in cases:  # also the warm-up run
        got = fn()
        if got != want:
            raise AssertionError(f"{which} {label}: {got} files, expected {want}")
    # round robin, so load from elsewhere on the machine hits every reader alike
    samples: list[list[float]] = [[] for _ in cases]
    for run in range(runs):
        for i, (_, _, fn, _) in enumerate(cases):
            samples[i].append(median_time(fn, repeat=1, warmup=0)[0])
        print(f"  run {run + 1}/{runs} done", flush=True)
    return [
        {
            "version": which,
            "reader": label,
            "median_s": statistics.median(s),
            "min_s": min(s),
            "max_s": max(s),
        }
        for (which, label, _, _), s in zip(cases, samples, strict=True)
    ]


# -- (a) commit latency --------------------------------------------------------------------


def time_commits(n: int, rows: int) -> list[dict[str, Any]]:
    from deltalake import DeltaTable, write_deltalake

    data = batch(0, rows=rows)
    with tempfile.TemporaryDirectory(prefix="bench-log-", dir=BENCH_DIR / "data") as tmp:
        ll_path, dl_path = f"{tmp}/lakelog", f"{tmp}/delta"
        ll_path2, dl_path2 = f"{tmp}/lakelog-path", f"{tmp}/delta-path"
        lakelog.write_table(ll_path, data)
        lakelog.write_table(ll_path2, data)
        write_deltalake(dl_path, data)
        write_deltalake(dl_path2, data)
        table = lakelog.open_table(ll_path)
        dtable = DeltaTable(dl_path)
        ops: dict[str, Callable[[], object]] = {
            "lakelog Table.append": lambda: table.append(data),
            "delta-rs write_deltalake(DeltaTable)": lambda: write_deltalake(
                dtable, data, mode="append"
            ),
            "lakelog write_table(path)": lambda: lakelog.write_table(ll_path2, data),
            "delta-rs write_deltalake(path)": lambda: write_deltalake(
                dl_path2, data, mode="append"
            ),
        }
        samples: dict[str, list[float]] = {k: [] for k in ops}
        for _ in range(n):  # alternate so load on the machine hits both alike
            for label, op in ops.items():
                t0 = time.perf_counter()
                op()
                samples[label].append(time.perf_counter() - t0)
        assert lakelog.open_table(ll_path).version == n
        assert DeltaTable(dl_path).version() == n
    out = []
    for label, s in samples.items():
        s_sorted = sorted(s)
        out.append(
            {
                "writer": label,
                "commits": n,
                "median_ms": 1000 * statistics.median(s),
                "p90_ms": 1000 * s_sorted[int(0.9 * (len(s) - 1))],
            }
        )
    return out


# -- main ----------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1,000 commits / 10,000 files")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per reader (default 5)")
    ap.add_argument("--commit-runs", type=int, default=50, help="commits per writer (default 50)")
    ap.add_argument("--data", default=str(BENCH_DIR / "data" / "log"))
    args = ap.parse_args()
    n_commits, n_files = (1_000, 10_000) if args.quick else (10_000, 100_000)
    mid = n_commits // 2
    data_root = Path(args.data)
    data_root.mkdir(parents=True, exist_ok=True)

    import deltalake

    print(f"(a) commit latency, {args.commit_runs} commits each, local disk")
    commits = time_commits(args.commit_runs, rows=100)
    print_table(commits)
    ll_ms = commits[0]["median_ms"]
    dl_ms = commits[1]["median_ms"]
    print(f"lakelog / delta-rs (handle kept): {ll_ms / dl_ms:.2f}x")

    print(f"\n(b) snapshot resolution: {n_commits:,} commits, {n_files:,} live files")
    paths = build_logs(data_root / f"{n_commits}x{n_files}", n_commits, n_files)
    expected = live_file_counts(synthetic_commit_sequence(n_commits, n_files))
    rows = time_resolution(paths, mid, expected, args.runs)
    print()
    print_table(rows)
    med = {(r["version"], r["reader"]): r["median_s"] for r in rows}
    v = f"v{mid}"
    pairs = {
        "latest: lakelog resolve / delta-rs checkpoint DeltaTable": (
            ("latest", LL_RESOLVE),
            ("latest", DL_CP),
        ),
        "latest: lakelog + file_urls() / delta-rs checkpoint + file_uris()": (
            ("latest", LL_URLS),
            ("latest", DL_CP_URIS),
        ),
        "latest: lakelog + files() / delta-rs checkpoint + file_uris()": (
            ("latest", LL_FILES),
            ("latest", DL_CP_URIS),
        ),
        f"{v}: lakelog + files() / delta-rs + file_uris()": ((v, LL_FILES), (v, DL_V_URIS)),
        f"{v}: lakelog + files() / latest delta-rs checkpoint + file_uris()": (
            (v, LL_FILES),
            ("latest", DL_CP_URIS),
        ),
    }
    ratios = {k: float(med[a] / med[b]) for k, (a, b) in pairs.items()}
    print()
    for k, v in ratios.items():
        print(f"{k}: {v:.3f}")
    out = write_json_result(
        "log",
        {
            "benchmark": "core_log",
            "quick": args.quick,
            "deltalake": deltalake.__version__,
            "commits": n_commits,
            "live_files": n_files,
            "manifest_interval": MANIFEST_INTERVAL,
            "runs": args.runs,
            "commit_latency": commits,
            "resolution": rows,
            "ratios": ratios,
        },
    )
    print(f"saved to {out}")


if __name__ == "__main__":
    main()
