"""Metadata at scale: commits and query plans on huge tables, lakelog vs delta-rs.

Tables of *virtual* files: only logs exist, data files are never read. One file
set per size (100,000 and 1,000,000 live files; 10,000,000 with ``--full``),
100 files per ``day`` partition (1,000 / 10,000 / 100,000 partitions), each file
with stats on ``customer_id`` (a narrow pseudo-random range, so a query for 1%
of the id domain keeps about 1% of the files) and ``value``. The same files,
added by the same ``--log-commits`` (1,000) commits, are written

* as a lakelog table through the public API (``create_table`` +
  ``Table.commit_files``), with lakelog's default of a manifest every 10
  versions: version-2 manifests, each written incrementally (a root plus the
  leaves that changed), so there are manifests at the middle and at the last
  data commit; then one more commit setting ``lakelog.manifest_interval`` to
  its default (the head: one commit past a manifest);
* as a Delta log (``_delta_log.write_delta_log``, schema and partition column
  patched into version 0) with delta-rs's own checkpoints at the middle and at
  the last data commit, and the same empty head commit.

So the latest version and the middle version (the time-travel target) have the
same file set and the same distance to a manifest / checkpoint on both sides.
Measured, side by side in one run (delta-rs in brackets):

* cold open of the latest version, in a fresh process: ``lakelog.open_table``
  [``DeltaTable(path)``], and then the full file list: ``snapshot.file_urls()``
  [``file_uris()``], the same answer (one URL per file), and
  ``snapshot.files()`` (a ``DataFile`` with partition values and statistics per
  file, which delta-rs has no counterpart for);
* one-partition plan ``snapshot.files([("day", "=", d)])``
  [``file_uris(file_pruning_predicate=[("day", "=", d)])``], warm (same
  process, after one warm-up call) and cold (fresh process: open + plan);
* 1% ``customer_id`` range plan from stats, warm: ``snapshot.files(filter)``
  [``to_pyarrow_dataset()`` + ``get_fragments(filter)``, the pyarrow
  dataset path; also delta-rs pruning in Rust, ``file_uris(file_pruning_predicate=)``];
* time travel to the middle version, cold: ``load_snapshot(storage, v)`` +
  ``files()`` [``DeltaTable(path, version=v)`` + ``file_uris()``];
* small append commits (``--commits``, 1,000) on a hard-linked
  copy of each table and of a 1,000-file table (the baseline): latency
  p50 / p99 / max of ``Table.append`` [``write_deltalake(DeltaTable,
  mode="append")``] of the same 10-row batch, and log bytes written per commit
  (every file new in the log folder afterwards - commits, manifests,
  checkpoints, hints - over the number of commits);
* peak RSS (``VmHWM``) of every measuring process, each library in its own.

Cold and warm figures are medians of ``--runs`` (3) runs: cold ones of that many
fresh processes, warm ones of that many timed calls after the warm-up. Cold
means a fresh interpreter (imports excluded from the time); the OS page cache
is warm.

    nice -n 10 python benchmarks/bench_scale.py            # 100k and 1M files
    python benchmarks/bench_scale.py --quick               # 10k and 100k, ~1 min
    python benchmarks/bench_scale.py --full                # + 10M files

Generated logs are cached under ``benchmarks/data/scale/`` (git-ignored),
keyed by the parameters and the lakelog version; ``--rebuild`` regenerates
them (do that after the log format changed, so the new writer writes them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence, Sized
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
from _common import (
    BENCH_DIR,
    fmt_bytes,
    print_table,
    run_in_subprocess_peak_rss,
    write_json_result,
)
from _delta_log import AddSpec, Commit, create_checkpoint, delta_log_dir, write_delta_log

# -- the file set ----------------------------------------------------------------------

FILES_PER_PARTITION = 100
BASELINE_FILES = 1_000
"""Size of the small table whose append latency is the baseline of the ratio."""
ID_DOMAIN = 1_000_000_000
"""``customer_id`` values lie in ``[0, ID_DOMAIN)``."""
ID_SPAN = ID_DOMAIN // 10_000
"""Width of one file's ``customer_id`` range (0.01% of the domain)."""
RANGE_WIDTH = ID_DOMAIN // 100
"""A 1% range query."""
ROWS_PER_FILE = 10_000
FIRST_DAY = dt.date(2000, 1, 1)
DEFAULT_INTERVAL = 10
"""``lakelog.manifest_interval`` of the finished table (lakelog's default)."""
GENERATOR = 3
"""Bump when the generated logs change, to invalidate the cache."""

SCHEMA = pa.schema(
    [
        pa.field("day", pa.string()),
        pa.field("customer_id", pa.int64()),
        pa.field("value", pa.int64()),
    ]
)
DELTA_SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": f.name, "type": "string" if f.type == pa.string() else "long"}
            | {"nullable": True, "metadata": {}}
            for f in SCHEMA
        ],
    },
    separators=(",", ":"),
)


def day(p: int) -> str:
    """The ``day`` value of partition ``p``."""
    return (FIRST_DAY + dt.timedelta(days=p)).isoformat()


def file_spec(i: int) -> AddSpec:
    """The ``i``-th file: partition ``i // 100``, a pseudo-random id range."""
    id_min = (i * 2_654_435_761) % (ID_DOMAIN - ID_SPAN)
    value_min = (i * 104_729) % 1_000_000
    d = day(i // FILES_PER_PARTITION)
    return AddSpec(
        path=f"day={d}/part-{i:08d}.parquet",
        size=1_000_000 + (i * 7_919) % 100_000,
        num_rows=ROWS_PER_FILE,
        min_values={"customer_id": id_min, "value": value_min},
        max_values={"customer_id": id_min + ID_SPAN - 1, "value": value_min + 1_000_000},
        null_count={"customer_id": 0, "value": 0},
        partition_values={"day": d},
    )


def scale_commits(n_files: int, n_commits: int) -> Iterator[Commit]:
    """Version 0 empty (creation), versions ``1..n_commits`` add the files in order,
    version ``n_commits + 1`` empty (the property commit on the lakelog side)."""
    yield [], []
    for c in range(n_commits):
        lo, hi = n_files * c // n_commits, n_files * (c + 1) // n_commits
        yield [file_spec(i) for i in range(lo, hi)], []
    yield [], []


class Shape:
    """Versions and expected answers of one generated table."""

    def __init__(self, n_files: int, n_commits: int) -> None:
        if n_commits < 2 or n_commits % 2:
            raise ValueError(f"expected an even number of log commits >= 2, found {n_commits}")
        self.n_files = n_files
        self.n_commits = n_commits
        self.mid = n_commits // 2
        self.latest = n_commits + 1
        self.files_at_mid = n_files * self.mid // n_commits
        self.partitions = -(-n_files // FILES_PER_PARTITION)

    def days(self, k: int) -> list[str]:
        """``k`` distinct full partitions around the middle of the day range."""
        first = max(0, self.partitions // 2 - k // 2)
        return [day(min(first + j, self.partitions - 1)) for j in range(k)]

    @staticmethod
    def ranges(k: int) -> list[tuple[int, int]]:
        """``k`` distinct 1% ``customer_id`` ranges ``[lo, hi)``."""
        return [
            (ID_DOMAIN * (30 + 7 * j) // 100, ID_DOMAIN * (30 + 7 * j) // 100 + RANGE_WIDTH)
            for j in range(k)
        ]


# -- building the logs -----------------------------------------------------------------


def _lakelog_adds(specs: Sequence[AddSpec]) -> list[Any]:
    import lakelog

    return [
        lakelog.DataFile(
            path=s.path,
            size_bytes=s.size,
            num_rows=s.num_rows,
            partition=dict(s.partition_values),
            stats=lakelog.FileStats(
                min=dict(s.min_values), max=dict(s.max_values), null_count=dict(s.null_count)
            ),
        ).to_add()
        for s in specs
    ]


def build_lakelog(path: Path, shape: Shape) -> None:
    """The lakelog table, written by lakelog's own writer (public API only)."""
    import lakelog

    table = lakelog.create_table(str(path), SCHEMA, partition_by=["day"])
    commits = scale_commits(shape.n_files, shape.n_commits)
    next(commits)  # version 0: the creation above
    for v in range(1, shape.n_commits + 1):
        adds, _ = next(commits)
        result = table.commit_files(_lakelog_adds(adds), mode="append", operation="WRITE")
        if result.version != v:
            raise AssertionError(f"expected version {v}, committed {result.version}")
        if v % 100 == 0:
            print(f"    lakelog: version {v}/{shape.n_commits}", flush=True)
    table.set_properties({"lakelog.manifest_interval": DEFAULT_INTERVAL})


def build_delta(path: Path, shape: Shape) -> None:
    """The Delta log: JSON commits, then delta-rs checkpoints at the middle and the end."""
    from deltalake import DeltaTable

    write_delta_log(path, scale_commits(shape.n_files, shape.n_commits))
    first = delta_log_dir(path) / f"{0:020d}.json"
    lines = [json.loads(line) for line in first.read_text().splitlines() if line]
    for action in lines:
        if "metaData" in action:
            action["metaData"]["schemaString"] = DELTA_SCHEMA
            action["metaData"]["partitionColumns"] = ["day"]
    first.write_text("".join(json.dumps(a, separators=(",", ":")) + "\n" for a in lines))
    for version in (shape.mid, shape.n_commits):
        DeltaTable(str(path), version=version).create_checkpoint()
    if not (delta_log_dir(path) / f"{shape.n_commits:020d}.checkpoint.parquet").exists():
        create_checkpoint(path)  # in case delta-rs ignored the loaded version


def _cache_key(shape: Shape, side: str) -> dict[str, Any]:
    key: dict[str, Any] = {
        "generator": GENERATOR,
        "files": shape.n_files,
        "commits": shape.n_commits,
    }
    if side == "lakelog":
        import lakelog

        key["lakelog"] = lakelog.__version__
    else:
        import deltalake

        key["deltalake"] = deltalake.__version__
    return key


def ensure_logs(root: Path, shape: Shape, *, rebuild: bool) -> dict[str, Path]:
    """Build (or reuse) both logs of ``shape`` under ``root``."""
    paths = {}
    builders: dict[str, Callable[[Path, Shape], None]] = {
        "lakelog": build_lakelog,
        "delta": build_delta,
    }
    for side, build in builders.items():
        path = root / f"{shape.n_files}x{shape.n_commits}" / side
        marker = path.with_name(f"{side}.complete.json")
        key = _cache_key(shape, side)
        if rebuild or not marker.exists() or json.loads(marker.read_text()) != key:
            marker.unlink(missing_ok=True)
            shutil.rmtree(path, ignore_errors=True)
            path.parent.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            print(f"  building the {side} log of {shape.n_files:,} files ...", flush=True)
            build(path, shape)
            print(f"  built {path} in {time.perf_counter() - t0:.1f} s", flush=True)
            marker.write_text(json.dumps(key))
        paths[side] = path
    return paths


# -- measuring processes (run as ``bench_scale:<function>`` in a fresh interpreter) ------


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _range_filter(lo: int, hi: int) -> list[tuple[str, str, int]]:
    return [("customer_id", ">=", lo), ("customer_id", "<", hi)]


def _latest(uri: str) -> Any:
    """``open_table`` and the snapshot it resolved (no second look at the log)."""
    import lakelog

    table = lakelog.open_table(uri)
    return table.snapshot(table.version)


def lakelog_cold(uri: str, what: str, arg: Any = None) -> dict[str, Any]:
    """One cold measurement in this (fresh) process."""
    from lakelog.log.snapshot import load_snapshot
    from lakelog.storage import Storage

    if what == "open":
        # the full file list: ``files()`` (typed columns) and every path as a Python
        # string, as delta-rs's ``file_uris()`` gives every URL
        t_open, snap = _timed(lambda: _latest(uri))
        t_files, paths = _timed(lambda: snap.files().paths())
        return {"open": t_open, "open_files": t_open + t_files, "files": len(paths)}
    if what == "open_iterate":
        # every DataFile built once (iterated, not held): what a caller looping over
        # ``files()`` pays
        seconds, n = _timed(lambda: sum(1 for f in _latest(uri).files() if f.size_bytes >= 0))
        return {"seconds": seconds, "files": n}
    if what == "open_urls":
        seconds, urls = _timed(lambda: _latest(uri).file_urls())
        return {"seconds": seconds, "files": len(urls)}
    if what == "partition":
        seconds, files = _timed(lambda: _latest(uri).files([("day", "=", arg)]))
        return {"seconds": seconds, "files": len(files)}
    if what == "time_travel":
        seconds, paths = _timed(lambda: load_snapshot(Storage(uri), arg).files().paths())
        return {"seconds": seconds, "files": len(paths)}
    raise ValueError(what)


def delta_cold(path: str, what: str, arg: Any = None) -> dict[str, Any]:
    """One cold measurement in this (fresh) process."""
    from deltalake import DeltaTable

    if what == "open":
        t_open, table = _timed(lambda: DeltaTable(path))
        t_files, files = _timed(table.file_uris)
        return {"open": t_open, "open_files": t_open + t_files, "files": len(files)}
    if what == "partition":
        seconds, files = _timed(
            lambda: DeltaTable(path).file_uris(file_pruning_predicate=[("day", "=", arg)])
        )
        return {"seconds": seconds, "files": len(files)}
    if what == "time_travel":
        seconds, files = _timed(lambda: DeltaTable(path, version=arg).file_uris())
        return {"seconds": seconds, "files": len(files)}
    raise ValueError(what)


SLOW_PLAN_SECONDS = 10.0
"""A plan whose warm-up call took longer is timed once, not ``runs`` times."""


def _warm(plan: Callable[[Any], Sized], args: list[Any]) -> dict[str, Any]:
    """``plan(args[0])`` untimed (warm-up), then timed for the other arguments."""
    first, answer = _timed(lambda: plan(args[0]))
    rest = args[1:2] if first > SLOW_PLAN_SECONDS else args[1:]
    timed = [_timed(partial(plan, a)) for a in rest]
    return {
        "samples": [t for t, _ in timed],
        "first": first,
        "files": [len(answer)] + [len(f) for _, f in timed],
    }


def lakelog_warm(uri: str, kind: str, args: list[Any]) -> dict[str, Any]:
    """Open the latest version, then plan (``kind``: partition or range) warm."""
    snap = _latest(uri)
    if kind == "partition":
        return _warm(lambda d: snap.files([("day", "=", d)]), args)
    if kind == "range":
        return _warm(lambda r: snap.files(_range_filter(*r)), args)
    raise ValueError(kind)


def delta_warm(path: str, kind: str, args: list[Any]) -> dict[str, Any]:
    """As :func:`lakelog_warm`; ``range`` through pyarrow dataset fragments (the usual
    Python path), ``range_rust`` through delta-rs's own pruning (``file_uris``)."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    table = DeltaTable(path)

    def fragments(r: list[int]) -> list[Any]:
        expr = (pc.field("customer_id") >= r[0]) & (pc.field("customer_id") < r[1])
        return list(table.to_pyarrow_dataset().get_fragments(filter=expr))

    if kind == "partition":
        return _warm(lambda d: table.file_uris(file_pruning_predicate=[("day", "=", d)]), args)
    if kind == "range":
        return _warm(fragments, args)
    if kind == "range_rust":
        return _warm(lambda r: table.file_uris(file_pruning_predicate=_range_filter(*r)), args)
    raise ValueError(kind)


def _log_state(log_dir: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_ino, p.stat().st_size) for p in log_dir.rglob("*") if p.is_file()}


def _bytes_written(before: dict[str, tuple[int, int]], log_dir: Path) -> int:
    after = _log_state(log_dir)
    return sum(size for p, (ino, size) in after.items() if before.get(p, (None,))[0] != ino)


def _small_batch(d: str) -> pa.Table:
    return pa.table(
        {"day": [d] * 10, "customer_id": list(range(10)), "value": list(range(10))},
        schema=SCHEMA,
    )


def lakelog_commits(uri: str, n: int, d: str) -> dict[str, Any]:
    """``n`` appends of a 10-row batch through one ``Table``; latencies and log bytes."""
    import lakelog

    table = lakelog.open_table(uri)
    start = table.version
    log_dir = Path(uri) / "_lakelog"
    before = _log_state(log_dir)
    batch = _small_batch(d)
    samples = [_timed(lambda: table.append(batch))[0] for _ in range(n)]
    written = _bytes_written(before, log_dir)
    if lakelog.open_table(uri).version != start + n:
        raise AssertionError("lakelog: not every append landed")
    return {"samples": samples, "log_bytes": written}


def delta_commits(path: str, n: int, d: str) -> dict[str, Any]:
    """As :func:`lakelog_commits` with ``write_deltalake(DeltaTable, mode="append")``."""
    from deltalake import DeltaTable, write_deltalake

    table = DeltaTable(path)
    start = table.version()
    log_dir = delta_log_dir(path)
    before = _log_state(log_dir)
    batch = _small_batch(d)
    samples = [_timed(lambda: write_deltalake(table, batch, mode="append"))[0] for _ in range(n)]
    written = _bytes_written(before, log_dir)
    if DeltaTable(path).version() != start + n:
        raise AssertionError("delta-rs: not every append landed")
    return {"samples": samples, "log_bytes": written}


# -- driving ---------------------------------------------------------------------------


def _child(func: str, *args: Any) -> tuple[dict[str, Any], int]:
    run = run_in_subprocess_peak_rss(func=f"bench_scale:{func}", args=args)
    return run.last_json(), run.peak_rss_bytes


def _link_copy(src: Path, dst: Path) -> None:
    """A copy of a log sharing every file (writers replace files, never edit them);
    the small ``_last_*`` hints are copied all the same."""

    def copy(s: str, d: str) -> None:
        if Path(s).name.startswith("_last"):
            shutil.copy2(s, d)
        else:
            os.link(s, d)

    shutil.copytree(src, dst, copy_function=copy)


def format1_copy(src: str, dst: str, version: int) -> dict[str, Any]:
    """A copy of the lakelog log whose manifest at ``version`` is a version-1 manifest
    (one flat file of every live file, as before format 2): commits and older manifests
    hard-linked, the version-1 manifest written by lakelog's own checkpoint."""
    from lakelog.log.checkpoint import write_checkpoint
    from lakelog.log.commits import LOG_DIR
    from lakelog.log.snapshot import load_snapshot
    from lakelog.storage import Storage

    src_log, dst_log = Path(src) / LOG_DIR, Path(dst) / LOG_DIR
    dst_log.mkdir(parents=True)
    for item in src_log.iterdir():
        name = item.name
        if item.is_dir():
            _link_copy(item, dst_log / name)
        elif name.endswith(".json") or (
            name.endswith(".manifest.parquet") and int(name.split(".")[0]) < version
        ):
            os.link(item, dst_log / name)
    snap = load_snapshot(Storage(dst), version)
    write_checkpoint(snap, leaf_files=1, format_version=1)
    return {"files": snap.num_files}


def _percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Results:
    """Rows of the final table plus the raw record saved as JSON."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.raw: list[dict[str, Any]] = []

    def add(
        self,
        size: int,
        measure: str,
        ll: float,
        dl: float | None,
        *,
        unit: str = "s",
        ll_rss: int | None = None,
        dl_rss: int | None = None,
        files: str = "",
    ) -> None:
        def show(x: float | None) -> str:
            if x is None:
                return ""
            if unit == "B":
                return fmt_bytes(x)
            if unit == "ms" or (x < 1 and x >= 1e-3):
                return f"{1000 * x:.1f} ms"
            if x < 1e-3:
                return f"{1e6 * x:.0f} us"
            return f"{x:.2f} s"

        self.rows.append(
            {
                "files": f"{size:,}",
                "measure": measure,
                "lakelog": show(ll),
                "delta-rs": show(dl),
                "ratio": "" if not dl else f"{ll / dl:.3g}x",
                "RSS lakelog": "" if ll_rss is None else fmt_bytes(ll_rss),
                "RSS delta-rs": "" if dl_rss is None else fmt_bytes(dl_rss),
                "answer (files)": files,
            }
        )
        self.raw.append(
            {
                "live_files": size,
                "measure": measure,
                "lakelog": ll,
                "delta_rs": dl,
                "unit": unit,
                "lakelog_rss": ll_rss,
                "delta_rs_rss": dl_rss,
                "answer": files,
            }
        )


def _median_cold(func: str, target: str, what: str, arg: Any, runs: int) -> dict[str, Any]:
    outs = [_child(func, target, what, arg) for _ in range(runs)]
    keys = [k for k in outs[0][0] if k != "files"]
    med = {k: statistics.median(o[k] for o, _ in outs) for k in keys}
    med["files"] = outs[0][0]["files"]
    med["rss"] = max(rss for _, rss in outs)
    return med


def measure_reads(res: Results, shape: Shape, paths: dict[str, Path], runs: int) -> None:
    size = shape.n_files
    ll, dl = str(paths["lakelog"]), str(paths["delta"])
    days = shape.days(runs + 1)
    ranges = [list(r) for r in shape.ranges(runs + 1)]

    a = _median_cold("lakelog_cold", ll, "open", None, runs)
    b = _median_cold("delta_cold", dl, "open", None, runs)
    for n in (a["files"], b["files"]):
        if n != size:
            raise AssertionError(f"latest version: {n} files, expected {size}")
    res.add(size, "cold open (latest)", a["open"], b["open"])
    u = _median_cold("lakelog_cold", ll, "open_urls", None, runs)
    if u["files"] != size:
        raise AssertionError(f"latest version: {u['files']} URLs, expected {size}")
    res.add(
        size,
        "cold open + all file URLs",
        u["seconds"],
        b["open_files"],
        ll_rss=u["rss"],
        dl_rss=b["rss"],
        files=f"{size:,}",
    )
    res.add(
        size,
        "cold open + full file list (files(), every path)",
        a["open_files"],
        b["open_files"],
        ll_rss=a["rss"],
        dl_rss=b["rss"],
        files=f"{size:,}",
    )
    it = _median_cold("lakelog_cold", ll, "open_iterate", None, runs)
    if it["files"] != size:
        raise AssertionError(f"latest version: {it['files']} DataFiles, expected {size}")
    res.add(
        size,
        "cold open + every DataFile built (delta-rs: URLs)",
        it["seconds"],
        b["open_files"],
        ll_rss=it["rss"],
        dl_rss=b["rss"],
        files=f"{size:,}",
    )
    print(f"    cold open done (lakelog {a['open_files']:.2f} s)", flush=True)

    a = _median_cold("lakelog_cold", ll, "partition", days[0], runs)
    b = _median_cold("delta_cold", dl, "partition", days[0], runs)
    for n in (a["files"], b["files"]):
        if n != FILES_PER_PARTITION:
            raise AssertionError(f"partition {days[0]}: {n} files, expected {FILES_PER_PARTITION}")
    res.add(
        size,
        "1-partition plan, cold (open + plan)",
        a["seconds"],
        b["seconds"],
        ll_rss=a["rss"],
        dl_rss=b["rss"],
        files=str(FILES_PER_PARTITION),
    )
    print(f"    cold plan done (lakelog {a['seconds']:.2f} s)", flush=True)

    med = statistics.median
    pl, pl_rss = _child("lakelog_warm", ll, "partition", days)
    pd, pd_rss = _child("delta_warm", dl, "partition", days)
    for w in (pl, pd):
        if any(n != FILES_PER_PARTITION for n in w["files"]):
            raise AssertionError(f"partition plans returned {w['files']} files")
    res.add(
        size,
        "1-partition plan, warm",
        med(pl["samples"]),
        med(pd["samples"]),
        ll_rss=pl_rss,
        dl_rss=pd_rss,
        files=str(FILES_PER_PARTITION),
    )
    rl, rl_rss = _child("lakelog_warm", ll, "range", ranges)
    print(f"    warm plans: lakelog done (range {med(rl['samples']):.2f} s)", flush=True)
    for kind, label in (
        ("range", "1% range plan, warm (delta-rs: pyarrow fragments)"),
        ("range_rust", "1% range plan, warm (delta-rs: Rust pruning)"),
    ):
        if kind == "range" and size > FRAGMENTS_MAX_FILES:
            print(f"    {label}: skipped above {FRAGMENTS_MAX_FILES:,} files", flush=True)
            continue
        rd, rd_rss = _child("delta_warm", dl, kind, ranges)
        if rd["files"][: len(rl["files"])] != rl["files"][: len(rd["files"])]:
            raise AssertionError(
                f"range answers differ: lakelog {rl['files']}, {kind} {rd['files']}"
            )
        res.add(
            size,
            label,
            med(rl["samples"]),
            med(rd["samples"]),
            ll_rss=rl_rss,
            dl_rss=rd_rss,
            files=f"{rl['files'][0]:,}",
        )
    print("    warm plans done", flush=True)

    a = _median_cold("lakelog_cold", ll, "time_travel", shape.mid, runs)
    b = _median_cold("delta_cold", dl, "time_travel", shape.mid, runs)
    for n in (a["files"], b["files"]):
        if n != shape.files_at_mid:
            raise AssertionError(f"version {shape.mid}: {n} files, expected {shape.files_at_mid}")
    res.add(
        size,
        f"time travel to v{shape.mid} + all files, cold",
        a["seconds"],
        b["seconds"],
        ll_rss=a["rss"],
        dl_rss=b["rss"],
        files=f"{shape.files_at_mid:,}",
    )
    # the same with a version-1 manifest at that version: what time travel cost before
    # format 2 ("stays as fast as today"), in this run
    v1 = Path(tempfile.mkdtemp(prefix="lakelog-scale-v1-"))
    try:
        _child("format1_copy", ll, str(v1 / "t"), shape.mid)
        c = _median_cold("lakelog_cold", str(v1 / "t"), "time_travel", shape.mid, runs)
    finally:
        shutil.rmtree(v1, ignore_errors=True)
    if c["files"] != shape.files_at_mid:
        raise AssertionError(f"format-1 copy: {c['files']} files at v{shape.mid}")
    res.add(
        size,
        f"time travel to v{shape.mid}, format-1 manifest (before format 2)",
        c["seconds"],
        b["seconds"],
        ll_rss=c["rss"],
        dl_rss=b["rss"],
        files=f"{shape.files_at_mid:,}",
    )
    print(f"    time travel: format 2 / format 1 = {a['seconds'] / c['seconds']:.2f}x", flush=True)


def measure_commits(
    res: Results, shape: Shape, paths: dict[str, Path], n: int, data_root: Path
) -> dict[str, float]:
    size = shape.n_files
    d = shape.days(1)[0]
    out: dict[str, dict[str, Any]] = {}
    rss: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="commits-", dir=data_root) as tmp:
        for side, func in (("lakelog", "lakelog_commits"), ("delta", "delta_commits")):
            copy = Path(tmp) / side
            _link_copy(paths[side], copy)
            out[side], rss[side] = _child(func, str(copy), n, d)
    ll, dl = out["lakelog"]["samples"], out["delta"]["samples"]
    tag = f"{n} appends"
    res.add(
        size,
        f"append p50 ({tag})",
        _percentile(ll, 0.5),
        _percentile(dl, 0.5),
        unit="ms",
        ll_rss=rss["lakelog"],
        dl_rss=rss["delta"],
    )
    res.add(size, "append p99", _percentile(ll, 0.99), _percentile(dl, 0.99), unit="ms")
    res.add(size, "append max", max(ll), max(dl), unit="ms")
    res.add(
        size,
        "log bytes written / append",
        out["lakelog"]["log_bytes"] / n,
        out["delta"]["log_bytes"] / n,
        unit="B",
    )
    print(f"    {tag} done (lakelog p99 {1000 * _percentile(ll, 0.99):.1f} ms)", flush=True)
    return {"lakelog_p99": _percentile(ll, 0.99), "delta_p99": _percentile(dl, 0.99)}


def lakelog_appends(data_root: Path, sizes: Sequence[int], log_commits: int, n: int) -> None:
    """lakelog's append latencies alone (see ``--lakelog-appends``)."""
    for size in sizes:
        shape = Shape(size, log_commits)
        paths = ensure_logs(data_root, shape, rebuild=False)
        with tempfile.TemporaryDirectory(prefix="commits-", dir=data_root) as tmp:
            copy = Path(tmp) / "lakelog"
            _link_copy(paths["lakelog"], copy)
            out, rss = _child("lakelog_commits", str(copy), n, shape.days(1)[0])
        s = out["samples"]
        print(
            f"{size:>12,} files: append p50 {1000 * _percentile(s, 0.5):.2f} ms, p99 "
            f"{1000 * _percentile(s, 0.99):.2f} ms, max {1000 * max(s):.2f} ms; peak RSS "
            f"{fmt_bytes(rss)}; log bytes per append {fmt_bytes(out['log_bytes'] / n)}",
            flush=True,
        )


FRAGMENTS_MAX_FILES = 2_000_000
"""pyarrow's dataset fragments hold about 8.6 GiB per million files (measured at 1M):
above this the peer would not fit in memory, so only delta-rs's Rust pruning is compared."""


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="10k and 100k files, few commits")
    mode.add_argument("--full", action="store_true", help="+ 10M files, 1,000 appends")
    ap.add_argument("--sizes", default=None, help="comma-separated live file counts")
    ap.add_argument("--runs", type=int, default=3, help="runs per measurement (median)")
    ap.add_argument("--commits", type=int, default=None, help="appends per table (1000)")
    ap.add_argument("--log-commits", type=int, default=None, help="commits building a log (1000)")
    ap.add_argument("--data", default=str(BENCH_DIR / "data" / "scale"))
    ap.add_argument("--rebuild", action="store_true", help="regenerate the cached logs")
    ap.add_argument("--no-commits", action="store_true", help="skip the append latencies")
    ap.add_argument(
        "--lakelog-appends",
        action="store_true",
        help="only lakelog's append latencies, at each size and at the 1,000-file table "
        "(before and after), from the cached logs: a quiet re-measure of one row",
    )
    args = ap.parse_args(argv)

    if args.quick:
        sizes, n_appends, log_commits = [10_000, 100_000], 40, 100
    elif args.full:
        sizes, n_appends, log_commits = [100_000, 1_000_000, 10_000_000], 1_000, 1_000
    else:
        sizes, n_appends, log_commits = [100_000, 1_000_000], 1_000, 1_000
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    n_appends = args.commits or n_appends
    log_commits = args.log_commits or log_commits
    runs = 1 if args.quick and args.runs == 3 else args.runs
    data_root = Path(args.data)
    data_root.mkdir(parents=True, exist_ok=True)

    import deltalake

    import lakelog

    t_start = time.perf_counter()
    print(
        f"lakelog {lakelog.__version__}, delta-rs {deltalake.__version__}; sizes {sizes}, "
        f"{log_commits} log commits, {n_appends} appends, median of {runs} run(s)",
        flush=True,
    )
    if args.lakelog_appends:
        lakelog_appends(data_root, [BASELINE_FILES, *sizes, BASELINE_FILES], log_commits, n_appends)
        return
    res = Results()
    commit_summary: dict[int, dict[str, float]] = {}
    if not args.no_commits:
        shape = Shape(BASELINE_FILES, log_commits)
        print(f"\n{BASELINE_FILES:,} files (baseline)", flush=True)
        paths = ensure_logs(data_root, shape, rebuild=args.rebuild)
        commit_summary[BASELINE_FILES] = measure_commits(res, shape, paths, n_appends, data_root)
    for size in sizes:
        shape = Shape(size, log_commits)
        print(f"\n{size:,} files, {shape.partitions:,} partitions", flush=True)
        paths = ensure_logs(data_root, shape, rebuild=args.rebuild)
        measure_reads(res, shape, paths, runs)
        if not args.no_commits:
            commit_summary[size] = measure_commits(res, shape, paths, n_appends, data_root)

    print(
        f"\nlakelog vs delta-rs {deltalake.__version__} (ratio: lakelog / delta-rs); "
        f"total {time.perf_counter() - t_start:.0f} s"
    )
    print_table(res.rows)
    base = commit_summary.get(BASELINE_FILES)
    if base:
        print("\nappend p99 / the 1,000-file table's (target at 1M and 10M: <= 2x):")
        for size, s in commit_summary.items():
            if size != BASELINE_FILES:
                print(
                    f"  {size:>12,} files: lakelog {s['lakelog_p99'] / base['lakelog_p99']:.1f}x, "
                    f"delta-rs {s['delta_p99'] / base['delta_p99']:.1f}x"
                )
    out = write_json_result(
        "scale",
        {
            "benchmark": "metadata_at_scale",
            "lakelog": lakelog.__version__,
            "deltalake": deltalake.__version__,
            "sizes": sizes,
            "log_commits": log_commits,
            "appends": n_appends,
            "runs": runs,
            "rows": res.raw,
        },
    )
    print(f"saved to {out}")


if __name__ == "__main__":
    main()
