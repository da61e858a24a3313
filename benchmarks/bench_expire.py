"""Expiry of a long history: lakelog ``expire_snapshots`` vs delta-rs cleanup.

The table: ``--commits`` commits adding ``--files`` data files in total, 90% of
them removed again by later commits (``_delta_log.synthetic_commit_sequence``
with ``expired_fraction=0.9``: 10 adds and ~9 removes per commit), so 10% are
live at the end. Data files are zero-byte files under the table root; the
lakelog log (a commit per version, a manifest every 10 versions, as a real
table has) and the Delta log (a commit per version, delta-rs checkpoints every
100 versions and at the end) are written directly.

Both expire every version but the latest and delete what only those versions
used: 90% of the data files and almost the whole log.

* lakelog: ``open_table(uri).expire_snapshots(older_than=0, retain_last=1)``.
* delta-rs: ``DeltaTable(uri)``, ``cleanup_metadata()`` (log files older than
  ``delta.logRetentionDuration``: the log files are dated back so all qualify),
  then ``vacuum(retention_hours=0, enforce_retention_duration=False,
  dry_run=False, full=True)`` (``full``: the synthetic tombstones are older
  than ``deletedFileRetentionDuration``, so the default "lite" mode, which
  only knows tombstones kept in the checkpoint, would find nothing).

Each run starts from a hard-linked copy of a template built once. Reported:
median wall time, and filesystem calls two ways: lakelog's own storage
operations (each one request on an object store; deletes counted per file),
and file system calls of the whole operation counted by ``strace -f -c`` in a
child process, minus the same child that only imports the library.

Run: ``python benchmarks/bench_expire.py [--quick] [--repeat N] [--save]``.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec
import pyarrow as pa
from _common import print_table, write_json_result
from _delta_log import (
    ARROW_SCHEMA,
    commit_timestamp_ms,
    delta_log_dir,
    live_file_counts,
    synthetic_commit_sequence,
    write_delta_log,
)

import lakelog
from lakelog.log.actions import (
    AddFile,
    CommitHeader,
    FileStats,
    Metadata,
    RemoveFile,
    encode_schema,
)
from lakelog.log.commits import commit_path, encode_commit, list_log
from lakelog.log.files import files_from_adds
from lakelog.log.manifests import LAST_MANIFEST, ManifestHeader, encode_manifest, manifest_path
from lakelog.storage import Storage

MANIFEST_INTERVAL = 10
_SYSCALLS = (
    "openat,open,creat,unlink,unlinkat,newfstatat,statx,stat,lstat,access,faccessat,"
    "faccessat2,getdents64,rename,renameat,renameat2,link,linkat,mkdir,mkdirat,rmdir,"
    "readlink,readlinkat,utimensat"
)


# ------------------------------------------------------------------ building


def _sequence(args: argparse.Namespace) -> Iterator[Any]:
    return synthetic_commit_sequence(
        args.commits, args.live_files, expired_fraction=args.expired_fraction
    )


def _touch_all(root: Path, paths: Iterator[str]) -> int:
    n = 0
    for p in paths:
        fd = os.open(root / p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd)
        n += 1
    return n


def build_lakelog(root: Path, args: argparse.Namespace) -> None:
    """The synthetic history as a lakelog table (log written directly)."""
    log = root / "_lakelog"
    log.mkdir(parents=True)
    enc = msgspec.json.Encoder()
    metadata = Metadata(
        table_id=uuid.uuid5(uuid.NAMESPACE_URL, "lakelog-bench-expire").hex,
        schema=encode_schema(ARROW_SCHEMA),
        created_ms=commit_timestamp_ms(0),
    )
    live: collections.OrderedDict[str, tuple[int, int, str, int]] = collections.OrderedDict()
    paths: list[str] = []
    for version, (adds, removes) in enumerate(_sequence(args)):
        ts = commit_timestamp_ms(version)
        actions: list[Any] = [metadata] if version == 0 else []
        for path in removes:
            size = live.pop(path)[0]
            actions.append(RemoveFile(path=path, deletion_ms=ts, size_bytes=size))
        for a in adds:
            stats = FileStats(
                min=dict(a.min_values), max=dict(a.max_values), null_count=dict(a.null_count)
            )
            actions.append(
                AddFile(
                    path=a.path,
                    size_bytes=a.size,
                    num_rows=a.num_rows,
                    stats=stats,
                    modification_ms=ts,
                )
            )
            live[a.path] = (a.size, a.num_rows, enc.encode(stats).decode(), ts)
            paths.append(a.path)
        header = CommitHeader(
            version=version,
            timestamp_ms=ts,
            operation="WRITE" if version else "CREATE TABLE",
            txn_id=uuid.uuid4().hex,
            read_version=version - 1 if version else None,
        )
        (root / commit_path(version)).write_bytes(encode_commit(header, actions))
        if version % MANIFEST_INTERVAL == 0:
            rows = list(live.values())
            files = pa.table(
                {
                    "path": list(live.keys()),
                    "size_bytes": [r[0] for r in rows],
                    "num_rows": [r[1] for r in rows],
                    "partition": ["{}"] * len(rows),
                    "stats": [r[2] for r in rows],
                    "modification_ms": [r[3] for r in rows],
                    "tags": ["{}"] * len(rows),
                    "deleted_rows": [None] * len(rows),
                    "deleted_bitmap": [None] * len(rows),
                },
                schema=files_from_adds([]).schema,
            )
            mh = ManifestHeader(
                version=version, timestamp_ms=ts, num_files=len(rows), metadata=metadata
            )
            (root / manifest_path(version)).write_bytes(encode_manifest(mh, files))
            (root / LAST_MANIFEST).write_text(json.dumps({"version": version}))
    _touch_all(root, iter(paths))


def build_delta(root: Path, args: argparse.Namespace) -> None:
    """The same history as a Delta table; log files dated at their commit time."""
    last = write_delta_log(root, _sequence(args), checkpoint_every=100, checkpoint_latest=True)
    for p in delta_log_dir(root).iterdir():
        name = p.name.split(".")[0]
        version = int(name) if name.isdigit() else last
        t = commit_timestamp_ms(version) / 1000
        os.utime(p, (t, t))
    _touch_all(root, (a.path for adds, _ in _sequence(args) for a in adds))


def link_copy(src: Path, dst: Path) -> None:
    """A hard-linked copy: cheap, and deleting in it leaves the template intact."""
    for dirpath, _, names in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for n in names:
            os.link(Path(dirpath) / n, dst / rel / n)


# ------------------------------------------------------------------ the operations


def expire_lakelog(path: str) -> dict[str, Any]:
    report = lakelog.open_table(path).expire_snapshots(older_than=dt.timedelta(0), retain_last=1)
    return report.to_dict(paths=False)


def expire_delta(path: str) -> dict[str, Any]:
    from deltalake import DeltaTable

    table = DeltaTable(path)
    table.cleanup_metadata()
    gone = table.vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True
    )
    return {"data_files_deleted": len(gone)}


class StorageCounter:
    """Counts lakelog's storage operations (deletes per file) while active."""

    METHODS = (
        "read_bytes",
        "exists",
        "list_names",
        "walk",
        "open_input",
        "open_output",
        "write_bytes",
        "put_if_absent",
        "delete",
    )

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self._saved: dict[str, Callable[..., Any]] = {}

    def __enter__(self) -> StorageCounter:
        for name in self.METHODS:
            real = getattr(Storage, name)
            self._saved[name] = real

            def wrapper(self_: Storage, *a: Any, _n: str = name, _r: Any = real, **k: Any) -> Any:
                self.counts[_n] += len(a[0]) if _n == "delete" else 1
                return _r(self_, *a, **k)

            setattr(Storage, name, wrapper)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, real in self._saved.items():
            setattr(Storage, name, real)


def _check_lakelog(path: Path, want_live: int, latest: int) -> int:
    """Checks the outcome; returns the number of files left in the log folder."""
    t = lakelog.open_table(str(path))
    snap = t.snapshot()
    assert snap.num_files == want_live, snap.num_files
    assert snap.oldest_version == latest, snap.oldest_version
    listing = list_log(t.storage)
    assert listing.commits[0] == latest, listing.commits[:3]
    on_disk = sum(1 for p in path.iterdir() if p.is_file())
    assert on_disk == want_live, on_disk
    return sum(1 for _ in (path / "_lakelog").iterdir())


def _check_delta(path: Path, want_live: int) -> int:
    """Checks the outcome; returns the number of files left in the log folder."""
    from deltalake import DeltaTable

    assert len(DeltaTable(str(path)).file_uris()) == want_live
    on_disk = sum(1 for p in path.iterdir() if p.is_file())
    assert on_disk == want_live, on_disk
    return sum(1 for _ in delta_log_dir(path).iterdir())


_STRACE_CHILD = r"""
import sys, json
sys.path[:0] = json.loads(sys.argv[1])
which, path, op = sys.argv[2], sys.argv[3], sys.argv[4]
import bench_expire as b
if which == "lakelog":
    import lakelog
    if op == "1":
        b.expire_lakelog(path)
else:
    import deltalake
    if op == "1":
        b.expire_delta(path)
"""


def strace_calls(which: str, template: Path, work: Path) -> int | None:
    """File system calls of the operation in a child (strace -f -c), minus imports."""
    if shutil.which("strace") is None:
        return None
    totals = []
    for op in ("0", "1"):
        target = work / f"strace-{which}-{op}"
        link_copy(template, target)
        out = work / f"strace-{which}-{op}.txt"
        sys_path = json.dumps(
            [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
        )
        proc = subprocess.run(
            [
                "strace",
                "-f",
                "-qq",
                "-c",
                "-o",
                str(out),
                "-e",
                f"trace={_SYSCALLS}",
                sys.executable,
                "-c",
                _STRACE_CHILD,
                sys_path,
                which,
                str(target),
                op,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            print(f"strace of {which} failed: {proc.stderr[-500:]}", file=sys.stderr)
            return None
        total = 0
        for line in out.read_text().splitlines():
            parts = line.split()
            if parts and parts[-1] == "total":
                total = int(parts[3])
        totals.append(total)
        shutil.rmtree(target, ignore_errors=True)
    return totals[1] - totals[0]


# ------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=100_000, help="data files in total")
    parser.add_argument("--expired-fraction", type=float, default=0.9)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1,000 commits, 10,000 files")
    parser.add_argument("--no-delta", action="store_true", help="skip the delta-rs peer")
    parser.add_argument("--no-strace", action="store_true", help="skip syscall counting")
    parser.add_argument("--dir", type=Path, default=None, help="work here (default: /tmp)")
    parser.add_argument("--save", action="store_true", help="append to results/expire.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.commits, args.files, args.repeat = 1_000, 10_000, min(args.repeat, 3)
    args.live_files = round(args.files * (1 - args.expired_fraction))
    expected_live = live_file_counts(_sequence(args))[-1]
    latest = args.commits - 1

    with tempfile.TemporaryDirectory(prefix="lakelog-bench-expire-", dir=args.dir) as tmp:
        work = Path(tmp)
        print(
            f"building {args.commits:,} commits, {args.files:,} files "
            f"({args.expired_fraction:.0%} to expire) under {work} ..."
        )
        started = time.perf_counter()
        build_lakelog(work / "template-lakelog", args)
        peers = ["lakelog"]
        if not args.no_delta:
            import deltalake

            build_delta(work / "template-delta", args)
            peers.append("delta-rs")
        print(f"built in {time.perf_counter() - started:.1f}s")

        results: dict[str, dict[str, Any]] = {}
        for peer in peers:
            template = work / ("template-lakelog" if peer == "lakelog" else "template-delta")
            run = expire_lakelog if peer == "lakelog" else expire_delta
            samples = []
            detail: dict[str, Any] = {}
            for i in range(args.repeat):
                target = work / f"run-{peer}-{i}"
                link_copy(template, target)
                start = time.perf_counter()
                detail = run(str(target))
                samples.append(time.perf_counter() - start)
                if peer == "lakelog":
                    log_left = _check_lakelog(target, expected_live, latest)
                else:
                    log_left = _check_delta(target, expected_live)
                shutil.rmtree(target)
            row: dict[str, Any] = {
                "peer": peer,
                "median_s": statistics.median(samples),
                "min_s": min(samples),
                "max_s": max(samples),
                **detail,
                "log_files_left": log_left,
            }
            if peer == "lakelog":
                target = work / "run-counted"
                link_copy(template, target)
                with StorageCounter() as counter:
                    run(str(target))
                shutil.rmtree(target)
                row["storage_ops"] = sum(counter.counts.values())
                row["storage_ops_by_kind"] = dict(counter.counts)
            if not args.no_strace:
                row["fs_syscalls"] = strace_calls(
                    "lakelog" if peer == "lakelog" else "delta", template, work
                )
            results[peer] = row

        table_rows = [
            {k: v for k, v in r.items() if not isinstance(v, dict)} for r in results.values()
        ]
        print(
            f"\nexpire {args.commits:,} commits / {args.files:,} files, "
            f"{args.expired_fraction:.0%} expired; median of {args.repeat}"
        )
        print_table(table_rows)
        ratio = None
        if "delta-rs" in results:
            ratio = results["delta-rs"]["median_s"] / results["lakelog"]["median_s"]
            print(f"\ndelta-rs / lakelog time: {ratio:.2f}x")
            a, b = results["lakelog"].get("fs_syscalls"), results["delta-rs"].get("fs_syscalls")
            if a and b:
                print(f"delta-rs / lakelog file system calls: {b / a:.2f}x")
        print(f"lakelog storage operations: {results['lakelog'].get('storage_ops_by_kind')}")
        if args.save:
            import deltalake

            out = write_json_result(
                "expire",
                {
                    "benchmark": "expire_long_history",
                    "commits": args.commits,
                    "files": args.files,
                    "expired_fraction": args.expired_fraction,
                    "repeat": args.repeat,
                    "deltalake": deltalake.__version__,
                    "results": results,
                    "time_ratio_delta_over_lakelog": ratio,
                },
            )
            print(f"saved to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
