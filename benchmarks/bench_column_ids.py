"""Column ids (format version 7): what the mapping costs reads and pruning.

Three tables hold identical rows (default 4,000,000 rows in 40 appends of 100,000 rows,
one file each; ten columns of ints, floats and strings; ``k`` increases across the
whole table, so a range filter on it prunes all but one or two files):

* ``a``  no column ids (the default);
* ``b``  column ids from creation (``lakelog.column_mapping=true``), nothing renamed:
  every physical name equals its name, so reads still go through a pyarrow Dataset;
* ``c``  as ``b``, then two columns renamed after the data was written: ``k`` (the
  filtered column) to ``key`` and ``name`` to ``label``. The snapshot's
  ``reads_through_lakelog`` is then true and every read goes through lakelog's own
  per-file reader (``lakelog/scan/rows.py`` ``live_batches``) instead of a Dataset
  scan; the log keys statistics by physical name, so pruning renames the filter first.

Measured per table, each the median of ``--runs`` timed runs after one untimed warm-up
(files in the page cache), the tables and the peer interleaved in a rotating order:

* ``full``     ``t.snapshot().to_arrow()``;
* ``pruned``   ``t.snapshot().to_arrow(filter="k >= lo and k < hi")`` (~1.5% of rows;
  ``key`` on ``c``);
* ``plan``     ``snapshot.files(filter)`` (and ``len`` of it) on a freshly opened table
  (``open_table`` and ``snapshot()`` not timed; ``plan_open`` times the three together);
  a run's figure is the median of 25 fresh opens (one takes about a millisecond);
* the peer, plain pyarrow over the same table's files:
  ``pyarrow.dataset.dataset(paths, format="parquet").to_table()`` and ``.to_table(filter=
  ...)`` with the filter over the names the files store (``k``: the physical name).

Printed: medians, the ratios ``b/a`` and ``c/a`` (ratio of medians, and the median of
the per-run ratios), the fastest run and the median CPU time of the reads (user +
system, every thread: less moved by other load on a shared machine than wall time) with
their ratios to ``a``, and ``lakelog/pyarrow`` for each table; the files each table's
pruning keeps (which must be the same files for all three) and checks that the three
tables read the same rows. Target (column ids issue): pruning unchanged (same files,
plan time within noise) and full reads <= 1.03x of ``a``.

``--deletion-vectors on`` repeats everything on copies of the three tables with
``lakelog.deletion_vectors=true`` after ``delete("x < 0.001")`` (0.1% of rows, in every
file): then ``a`` and ``b`` go through lakelog's own reader too, so ``c/a`` isolates the
mapping inside the same reader. (The pyarrow peer then returns the deleted rows too.)
Default ``off``: the tables as created (deletion vectors off, the default); ``both``
runs the two.

    python benchmarks/bench_column_ids.py --runs 5
    python benchmarks/bench_column_ids.py --runs 5 --deletion-vectors both
    python benchmarks/bench_column_ids.py --quick      # 400,000 rows, 1 run
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from _common import BENCH_DIR, print_table, write_json_result

import lakelog

TABLES = ("a", "b", "c")
RENAMES = {"k": "key", "name": "label"}
"""Renames applied to table ``c`` after its data was written (``k`` is the filtered
column)."""
K_STEP = 4
SELECT_FRACTION = 0.015
FULL_TARGET = 1.03
PLAN_REPEATS = 25
"""Fresh opens per run whose median is the run's plan time."""
CATS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64()),
        pa.field("id", pa.int64()),
        pa.field("qty", pa.int32()),
        pa.field("bucket", pa.int64()),
        pa.field("x", pa.float64()),
        pa.field("y", pa.float64()),
        pa.field("z", pa.float32()),
        pa.field("cat", pa.string()),
        pa.field("name", pa.string()),
        pa.field("note", pa.string()),
    ]
)


# -- data -------------------------------------------------------------------------------


def chunk(i: int, rows: int) -> pa.Table:
    """Append ``i`` (deterministic: ``numpy.random.default_rng(10_000 + i)``). Row ``r``
    of the table (``r = i * rows + j``) has ``k = 4 r + u``, ``u`` in ``[0, 4)``: ``k``
    strictly increases across the table, so each file covers its own range of it."""
    rng = np.random.default_rng(10_000 + i)
    r = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
    k = r * K_STEP + rng.integers(0, K_STEP, rows, dtype=np.int64)
    cats = pa.array(CATS, pa.string())
    name = pc.binary_join_element_wise(
        pa.scalar("user-"),
        pa.array(rng.integers(0, 10**9, rows, dtype=np.int64)).cast(pa.string()),
        pa.scalar(""),
    )
    note = pc.binary_join_element_wise(
        pa.scalar("n"),
        pa.array(rng.integers(0, 1000, rows, dtype=np.int64)).cast(pa.string()),
        pa.scalar("-"),
        pa.array(rng.integers(0, 10**6, rows, dtype=np.int64)).cast(pa.string()),
        pa.scalar(""),
    )
    return pa.Table.from_arrays(
        [
            pa.array(k),
            pa.array(rng.integers(0, 10**12, rows, dtype=np.int64)),
            pa.array(rng.integers(0, 1000, rows, dtype=np.int32)),
            pa.array(rng.integers(0, 100, rows, dtype=np.int64)),
            pa.array(rng.random(rows)),
            pa.array(rng.normal(size=rows)),
            pa.array(rng.random(rows).astype(np.float32)),
            pc.take(cats, pa.array(rng.integers(0, len(CATS), rows, dtype=np.int64))),
            name,
            note,
        ],
        schema=SCHEMA,
    )


def build(root: Path, files: int, rows: int) -> dict[str, Path]:
    """The three tables under ``root`` (reused when built before with the same shape)."""
    shape = {"files": files, "rows": rows, "renames": RENAMES, "layout": 1}
    marker = root / "shape.json"
    paths = {name: root / name for name in TABLES}
    if marker.exists() and json.loads(marker.read_text()) == shape:
        return paths
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    t0 = time.perf_counter()
    tables = {
        "a": lakelog.create_table(str(paths["a"]), SCHEMA),
        "b": lakelog.create_table(
            str(paths["b"]), SCHEMA, properties={"lakelog.column_mapping": "true"}
        ),
        "c": lakelog.create_table(
            str(paths["c"]), SCHEMA, properties={"lakelog.column_mapping": "true"}
        ),
    }
    for i in range(files):
        data = chunk(i, rows)
        for t in tables.values():
            t.append(data)
    for old, new in RENAMES.items():
        tables["c"].rename_column(old, new)
    marker.write_text(json.dumps(shape))
    print(f"built the three tables in {time.perf_counter() - t0:.1f} s under {root}")
    return paths


def with_vectors(root: Path, paths: dict[str, Path]) -> dict[str, Path]:
    """Copies of the three tables with deletion vectors on and 0.1% of rows deleted."""
    out = {}
    for name, src in paths.items():
        dst = root / f"{name}-dv"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
        t = lakelog.open_table(str(dst))
        t.set_properties({"lakelog.deletion_vectors": "true"})
        t.delete("x < 0.001")
        out[name] = dst
    return out


# -- measuring ------------------------------------------------------------------------


def logical(name: str, table: str) -> str:
    """The name users say for column ``name`` (as created) on ``table``."""
    return RENAMES.get(name, name) if table == "c" else name


def sql_filter(table: str, lo: int, hi: int) -> str:
    k = logical("k", table)
    return f"{k} >= {lo} and {k} < {hi}"


def as_created(got: pa.Table) -> pa.Table:
    """``got`` with the columns under the names they were created with."""
    back = {new: old for old, new in RENAMES.items()}
    return got.rename_columns([back.get(n, n) for n in got.column_names])


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, every thread of the process) of ``fn()``."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def kept_appends(path: Path, flt: str, rows: int) -> list[int]:
    """The appends (0, 1, ...) whose files pruning keeps: a file of append ``i`` holds
    ``k`` in ``[i * rows * 4, (i + 1) * rows * 4)``, read from its statistics (under
    ``k`` or ``key``: whichever name the file list uses)."""
    out = []
    for f in lakelog.open_table(str(path)).snapshot().files(flt):
        low = f.stats.min if f.stats is not None else {}
        k = low.get("k", low.get("key"))
        if not isinstance(k, int):
            raise RuntimeError(f"expected a minimum of k in the statistics of {f.path}: {low}")
        out.append(k // (rows * K_STEP))
    return sorted(out)


def measure(
    label: str, paths: dict[str, Path], runs: int, lo: int, hi: int, rows_per_file: int
) -> tuple[dict[str, Any], list[str]]:
    """Time every case on the three tables; return the summary and correctness problems."""
    problems: list[str] = []
    tables = {name: lakelog.open_table(str(p)) for name, p in paths.items()}
    filters = {name: sql_filter(name, lo, hi) for name in TABLES}
    peer_filter = (pc.field("k") >= lo) & (pc.field("k") < hi)  # physical names
    file_paths = {
        name: [t.snapshot().storage.full(f.path) for f in t.snapshot().files()]
        for name, t in tables.items()
    }
    through = {name: t.snapshot().reads_through_lakelog for name, t in tables.items()}

    # correctness, untimed: the same rows and the same files kept on all three
    kept = {name: kept_appends(paths[name], filters[name], rows_per_file) for name in TABLES}
    for name in ("b", "c"):
        if kept[name] != kept["a"]:
            problems.append(f"{label}: pruning kept files {kept[name]} on {name}, {kept['a']} on a")
    # (files are listed, and read, in the order of their random names: sort by k)
    full_a = tables["a"].snapshot().to_arrow().sort_by("k")
    rows = full_a.num_rows
    for name in ("b", "c"):
        other = as_created(tables[name].snapshot().to_arrow()).sort_by("k")
        if not other.equals(full_a):
            problems.append(f"{label}: full read of {name} differs from a ({other.num_rows} rows)")
        del other
    del full_a
    gc.collect()
    pruned_a = tables["a"].snapshot().to_arrow(filter=filters["a"])
    want = ds.dataset(file_paths["a"], format="parquet").to_table(filter=peer_filter)
    if label == "deletion vectors off" and not pruned_a.sort_by("k").equals(want.sort_by("k")):
        problems.append(f"{label}: pruned read of a differs from pyarrow's")
    for name in ("b", "c"):
        other = as_created(tables[name].snapshot().to_arrow(filter=filters[name]))
        if not other.sort_by("k").equals(pruned_a.sort_by("k")):
            problems.append(
                f"{label}: pruned read of {name} differs from a "
                f"({other.num_rows} rows, a {pruned_a.num_rows})"
            )
    selected = pruned_a.num_rows
    del pruned_a, want
    gc.collect()

    def lakelog_read(t: lakelog.Table, flt: str | None) -> Callable[[], int]:
        return lambda: t.snapshot().to_arrow(filter=flt).num_rows

    def pyarrow_read(fp: list[str], flt: pc.Expression | None) -> Callable[[], int]:
        return lambda: ds.dataset(fp, format="parquet").to_table(filter=flt).num_rows

    cases: dict[str, dict[str, Callable[[], int]]] = {"full": {}, "pruned": {}}
    for name in TABLES:
        cases["full"][name] = lakelog_read(tables[name], None)
        cases["pruned"][name] = lakelog_read(tables[name], filters[name])
        cases["full"][f"pyarrow-{name}"] = pyarrow_read(file_paths[name], None)
        cases["pruned"][f"pyarrow-{name}"] = pyarrow_read(file_paths[name], peer_filter)

    def plan(name: str, flt: str) -> Callable[[], tuple[float, float, int]]:
        def run() -> tuple[float, float, int]:
            t0 = time.perf_counter()
            snap = lakelog.open_table(str(paths[name])).snapshot()
            t1 = time.perf_counter()
            n = len(snap.files(flt))
            t2 = time.perf_counter()
            return t2 - t1, t2 - t0, n

        return run

    samples: dict[str, dict[str, list[float]]] = {
        case: {who: [] for who in fns} for case, fns in cases.items()
    }
    cpu_samples: dict[str, dict[str, list[float]]] = {
        case: {who: [] for who in fns} for case, fns in cases.items()
    }
    samples["plan"] = {name: [] for name in TABLES}
    samples["plan_open"] = {name: [] for name in TABLES}
    plan_files: dict[str, int] = {}
    for i in range(runs + 1):  # run 0: warm-up, not kept
        rot = i % len(TABLES)
        order = [*TABLES[rot:], *TABLES[:rot]]
        for case, fns in cases.items():
            for name in order:
                for who in (name, f"pyarrow-{name}"):
                    gc.collect()
                    seconds, cpu = timed(fns[who])
                    if i:
                        samples[case][who].append(seconds)
                        cpu_samples[case][who].append(cpu)
        for name in order:  # a plan takes about a millisecond: each run's is a median
            got = [plan(name, filters[name])() for _ in range(PLAN_REPEATS)]
            plan_files[name] = got[0][2]
            if i:
                samples["plan"][name].append(statistics.median(g[0] for g in got))
                samples["plan_open"][name].append(statistics.median(g[1] for g in got))
        if i:
            full = {n: samples["full"][n][-1] for n in TABLES}
            print(
                f"  {label}: run {i}/{runs} full a {full['a']:.3f} b {full['b']:.3f} "
                f"c {full['c']:.3f} s; pruned a {samples['pruned']['a'][-1]:.3f} "
                f"c {samples['pruned']['c'][-1]:.3f} s",
                flush=True,
            )

    summary: dict[str, Any] = {
        "rows": rows,
        "rows_per_file": rows_per_file,
        "rows_selected": selected,
        "files": len(file_paths["a"]),
        "files_kept": {name: len(kept[name]) for name in TABLES},
        "kept_appends": kept,
        "plan_len": plan_files,
        "reads_through_lakelog": through,
        "cases": {},
    }
    for case, whos in samples.items():
        out: dict[str, Any] = {}
        for who, xs in whos.items():
            out[who] = {
                "median_seconds": statistics.median(xs),
                "min_seconds": min(xs),
                "samples_seconds": xs,
            }
            if case in cpu_samples:
                out[who]["median_cpu_seconds"] = statistics.median(cpu_samples[case][who])
        for name in ("b", "c"):
            base = whos["a"]
            out[name]["ratio_to_a"] = out[name]["median_seconds"] / out["a"]["median_seconds"]
            out[name]["min_ratio_to_a"] = out[name]["min_seconds"] / out["a"]["min_seconds"]
            out[name]["pair_ratio_to_a"] = statistics.median(
                x / y for x, y in zip(whos[name], base, strict=True)
            )
        for name in TABLES:
            peer = f"pyarrow-{name}"
            if peer in whos:
                out[name]["ratio_to_pyarrow"] = (
                    out[name]["median_seconds"] / out[peer]["median_seconds"]
                )
        if case in cpu_samples:
            for name in ("b", "c"):
                out[name]["cpu_ratio_to_a"] = (
                    out[name]["median_cpu_seconds"] / out["a"]["median_cpu_seconds"]
                )
        summary["cases"][case] = out
    return summary, problems


def report(label: str, summary: dict[str, Any]) -> None:
    print(
        f"\n{label}: {summary['rows']:,} rows in {summary['files']} files; filter selects "
        f"{summary['rows_selected']:,} rows ({summary['rows_selected'] / summary['rows']:.2%}); "
        f"files kept a/b/c {summary['files_kept']['a']}/{summary['files_kept']['b']}/"
        f"{summary['files_kept']['c']} (appends {summary['kept_appends']['a']}); "
        f"reads_through_lakelog {summary['reads_through_lakelog']}"
    )
    rows = []
    for case, out in summary["cases"].items():
        for name in TABLES:
            s = out[name]
            rows.append(
                {
                    "case": case,
                    "table": name,
                    "median_s": s["median_seconds"],
                    "vs_a": s.get("ratio_to_a"),
                    "vs_a_pairs": s.get("pair_ratio_to_a"),
                    "min_s": s["min_seconds"],
                    "min_vs_a": s.get("min_ratio_to_a"),
                    "cpu_s": s.get("median_cpu_seconds"),
                    "cpu_vs_a": s.get("cpu_ratio_to_a"),
                    "pyarrow_s": out.get(f"pyarrow-{name}", {}).get("median_seconds"),
                    "lakelog/pyarrow": s.get("ratio_to_pyarrow"),
                }
            )
    print_table(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=40, help="appends (one file each)")
    ap.add_argument("--rows", type=int, default=100_000, help="rows per append")
    ap.add_argument("--runs", type=int, default=None, help="timed runs of each (default 5)")
    ap.add_argument("--quick", action="store_true", help="4 appends, 1 run")
    ap.add_argument(
        "--deletion-vectors",
        choices=("off", "on", "both"),
        default="off",
        help="tables as created (off), copies with deletion vectors and 0.1%% deleted "
        "(on), or both",
    )
    ap.add_argument("--data", default=str(BENCH_DIR / "data" / "column_ids"))
    args = ap.parse_args(argv)
    files = 4 if args.quick else args.files
    runs = args.runs or (1 if args.quick else 5)
    root = Path(args.data)
    paths = build(root, files, args.rows)
    total = files * args.rows
    # rows [0.3175, 0.3325) of the table: across a file boundary on the default shape
    first = int(total * 0.3175)
    lo, hi = first * K_STEP, (first + int(total * SELECT_FRACTION)) * K_STEP
    print(
        f"data: {files} appends x {args.rows:,} rows ({total:,} rows); filter k in "
        f"[{lo:,}, {hi:,}); {runs} runs each; {os.cpu_count()} cores; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    variants = []
    if args.deletion_vectors in ("off", "both"):
        variants.append(("deletion vectors off", paths))
    if args.deletion_vectors in ("on", "both"):
        variants.append(("deletion vectors on", with_vectors(root, paths)))
    results: dict[str, Any] = {}
    problems: list[str] = []
    for label, where in variants:
        summary, found = measure(label, where, runs, lo, hi, args.rows)
        results[label] = summary
        problems += found
    for label, summary in results.items():
        report(label, summary)
    print(
        "\nvs_a: median / median of a (no ids); vs_a_pairs: median of per-run ratios; "
        "min_s: fastest run (least disturbed by other load); "
        "cpu_s: median CPU time (user + system, all threads); "
        f"target: plan within noise, full <= {FULL_TARGET:.2f}x. lakelog/pyarrow: "
        "to_arrow vs pyarrow.dataset over the same table's files (plan: pruning alone, "
        "plan_open: open_table + snapshot + pruning)"
    )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if problems:
        print("\nCORRECTNESS PROBLEMS:")
        for p in problems:
            print(f"  {p}")
    else:
        print("\ncorrectness: the three tables read the same rows and prune to the same files")
    path = write_json_result(
        "column_ids",
        {
            "appends": files,
            "rows_per_append": args.rows,
            "runs": runs,
            "load_average": os.getloadavg(),
            "variants": results,
            "problems": problems,
        },
    )
    print(f"saved to {path}")
    if problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
