"""Copy-on-write or deletion vectors by default: a sequence of corrections, three ways.

The question: should ``create_table`` turn ``lakelog.deletion_vectors`` on? This
benchmark creates the same table three ways and runs the same sequence of row-level
changes on each, like the corrections an ingest pipeline makes after loading:

* ``lakelog-cow``  ``lakelog.create_table(..., properties={"lakelog.deletion_vectors": "false"})``
  (copy-on-write, the default before this decision);
* ``lakelog-dv``   ``lakelog.create_table(..., properties={"lakelog.deletion_vectors": "true"})``;
* ``delta``        delta-rs (``write_deltalake``). delta-rs 1.6.6 does not write deletion
  vectors: on a table with ``delta.enableDeletionVectors=true`` its delete still rewrites
  the file, and its own pyarrow reader then refuses the table (the probe at the end of a
  run checks both), so the peer is its copy-on-write.

Data: ``--files`` appends of ``--rows-per-file`` rows of the seeded data set
(``_data.batch(i, rows)``; default 20 x 100,000 = 2M rows, one file per append).

Sequence (every change spread over every file): for each fraction 0.1%, 1% and 10% of the
table's rows, in that order,

* ``delete``  ``x >= a and x < a + f`` (disjoint ranges of the uniform ``x``);
* ``update``  ``y >= b and y < b + f``: ``event = 'fixed'`` (disjoint ranges of ``y``);
* ``merge``   on ``(ts, customer_id)``: a source of ``f`` x rows, half the keys of rows with
  ``y`` in a third set of disjoint ranges (sampled from every file; new ``x`` and ``event``),
  half new keys; matched rows updated, the rest inserted.

Measured per engine, each run on a freshly built table (the build is not timed; the
sequence runs in one fresh interpreter per engine, engines rotating between runs):

a. each change's wall and CPU time (process time, all threads; median over runs);
b. a full read (``snapshot().to_arrow()``; delta-rs ``to_pyarrow_dataset().to_table()``)
   and a pruned read (``ts`` within a tenth of one file's range: one file by statistics)
   after the sequence, each in a fresh interpreter, open included, then the same read
   five more times in that interpreter (``warm``: their median, the scan alone);
c. bytes of live data files, of every data file in the folder (removed ones stay until
   vacuum) and of the log, and per change the data bytes it dropped from and added to the
   live set plus the log bytes it wrote (the vectors live in the log);
d. the same after a compaction (``table.compact()`` with its defaults, which also purges
   every file whose vector marks >= 20% of its rows; delta-rs ``optimize.compact()``).

Every run checks that the three tables hold the same rows (count, ``event = 'fixed'``
count, sum of ``x``). Ratios are lakelog / delta-rs of the medians. Results are printed
and appended to ``benchmarks/results/rowlevel_default.json``.

    python benchmarks/bench_rowlevel_default.py --runs 3     # 2M rows in 20 files
    python benchmarks/bench_rowlevel.py --default-decision --runs 3   # the same
    python benchmarks/bench_rowlevel_default.py --quick      # 200,000 rows, 1 run
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import BENCH_DIR, fmt_bytes, print_table, run_in_subprocess_peak_rss, write_json_result
from _data import SCHEMA, TS_SPAN, batch

ENGINES = ("lakelog-cow", "lakelog-dv", "delta")
KINDS = ("delete", "update", "merge")
FRACTIONS = (0.001, 0.01, 0.1)
MERGE_Y_BASE = 0.5
"""Merges match rows with ``y`` from here up, away from the updates' ranges (from 0)."""
WARM_READS = 5
"""Reads of the opened table after the first one; their median is the warm read."""
LOG_DIRS = {"lakelog-cow": "_lakelog", "lakelog-dv": "_lakelog", "delta": "_delta_log"}


def steps() -> list[dict[str, Any]]:
    """The sequence: per fraction, a delete, an update and a merge, with their ranges."""
    out = []
    lo = {"delete": 0.0, "update": 0.0, "merge": MERGE_Y_BASE}
    for f in FRACTIONS:
        for kind in KINDS:
            width = f / 2 if kind == "merge" else f
            a, b = round(lo[kind], 6), round(lo[kind] + width, 6)
            lo[kind] = b
            col = "x" if kind == "delete" else "y"
            out.append(
                {
                    "name": f"{kind} {f:.1%}",
                    "kind": kind,
                    "fraction": f,
                    "where": f"{col} >= {a} and {col} < {b}",
                    "lo": a,
                    "hi": b,
                }
            )
    return out


def merge_source(step: dict[str, Any], files: int, rows: int, new_ts: int) -> Any:
    """The merge source of ``step``: the keys of the original rows with ``y`` in the
    step's range (every file; new ``x`` and ``event``) and as many rows with new keys,
    ``ts`` from ``new_ts`` on. Keys appearing twice are dropped (both engines refuse a
    source with duplicate keys)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = []
    for i in range(files):
        b = batch(i, rows)
        y = b.column("y")
        parts.append(b.filter(pc.and_(pc.greater_equal(y, step["lo"]), pc.less(y, step["hi"]))))
    matched = pa.concat_tables(parts)
    matched = matched.set_column(2, "x", pa.array(np.full(matched.num_rows, -1.0)))
    matched = matched.set_column(4, "event", pa.array(["merged"] * matched.num_rows, pa.string()))
    fresh = max(1, matched.num_rows)
    rng = np.random.default_rng(int(new_ts) % (2**32))
    new = pa.table(
        {
            "ts": np.arange(new_ts, new_ts + fresh, dtype=np.int64),
            "customer_id": rng.integers(0, 100_000, fresh, dtype=np.int64),
            "x": np.full(fresh, -2.0),
            "y": rng.random(fresh),
            "event": pa.array(["new"] * fresh, pa.string()),
            "payload": pa.array(["pnew"] * fresh, pa.string()),
        },
        schema=SCHEMA,
    )
    source = pa.concat_tables([matched.cast(SCHEMA), new])
    key = source.column("ts").to_numpy() * 100_000 + source.column("customer_id").to_numpy()
    _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    return source.filter(pa.array(counts[inverse] == 1))


# -- sizes -------------------------------------------------------------------------------


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def folder_bytes(engine: str, path: str) -> dict[str, int]:
    """Bytes of every data file in the folder (live or not) and of the log."""
    root = Path(path)
    log = root / LOG_DIRS[engine]
    total = _tree_bytes(root)
    log_bytes = _tree_bytes(log) if log.exists() else 0
    return {"folder_data_bytes": total - log_bytes, "log_bytes": log_bytes}


def live_files(engine: str, path: str) -> dict[str, int]:
    """The live data files of the latest version: path -> bytes."""
    if engine == "delta":
        from deltalake import DeltaTable

        actions = DeltaTable(path).get_add_actions(flatten=True)
        return dict(
            zip(
                actions.column("path").to_pylist(),
                actions.column("size_bytes").to_pylist(),
                strict=True,
            )
        )
    import lakelog

    return {f.path: f.size_bytes for f in lakelog.open_table(path).snapshot().files()}


def table_state(engine: str, path: str) -> dict[str, Any]:
    """Live files and bytes, vectors, folder and log bytes of the latest version."""
    live = live_files(engine, path)
    state: dict[str, Any] = {
        "live_files": len(live),
        "live_data_bytes": sum(live.values()),
        **folder_bytes(engine, path),
        "files_with_vectors": 0,
        "marked_rows": 0,
    }
    if engine != "delta":
        import lakelog

        snap = lakelog.open_table(path).snapshot()
        marked = [f.deleted.rows for f in snap.files() if f.deleted]
        state["files_with_vectors"] = len(marked)
        state["marked_rows"] = sum(marked)
        state["rows"] = snap.num_rows
    else:
        from deltalake import DeltaTable

        state["rows"] = DeltaTable(path).to_pyarrow_dataset().count_rows()
    return state


# -- children (a fresh interpreter each) -------------------------------------------------


def build(engine: str, path: str, files: int, rows: int) -> dict[str, Any]:
    """Create the table (``engine``'s way) and append ``files`` batches, one file each."""
    shutil.rmtree(path, ignore_errors=True)
    if engine == "delta":
        from deltalake import write_deltalake

        for i in range(files):
            write_deltalake(path, batch(i, rows), mode="append")
        return {"built": path}
    import lakelog

    # explicit either way: new tables have vectors on by default
    props = {"lakelog.deletion_vectors": "true" if engine == "lakelog-dv" else "false"}
    table = lakelog.create_table(path, SCHEMA, properties=props)
    for i in range(files):
        table.append(batch(i, rows))
    return {"built": path}


def _run_change(engine: str, table: Any, step: dict[str, Any], source: Any) -> dict[str, Any]:
    """Run one change on an open table; returns its time and counts."""
    where = step["where"]
    kind = step["kind"]
    if engine == "delta":
        t0, c0 = time.perf_counter(), time.process_time()
        if kind == "delete":
            m = table.delete(where.replace(" and ", " AND "))
            changed = {"deleted": m["num_deleted_rows"]}
        elif kind == "update":
            m = table.update(
                updates={"event": "'fixed'"}, predicate=where.replace(" and ", " AND ")
            )
            changed = {"updated": m["num_updated_rows"]}
        else:
            m = (
                table.merge(
                    source,
                    predicate="t.ts = s.ts AND t.customer_id = s.customer_id",
                    source_alias="s",
                    target_alias="t",
                )
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )
            changed = {
                "updated": m["num_target_rows_updated"],
                "inserted": m["num_target_rows_inserted"],
            }
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        return {"seconds": seconds, "cpu_seconds": cpu, **changed, "files_marked": 0}
    t0, c0 = time.perf_counter(), time.process_time()
    if kind == "delete":
        r = table.delete(where)
    elif kind == "update":
        r = table.update(where, set={"event": "fixed"})
    else:
        r = table.merge(source, on=["ts", "customer_id"])
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "deleted": r.deleted_rows,
        "updated": r.updated_rows,
        "inserted": r.inserted_rows,
        "files_marked": r.files_marked,
    }


def child_sequence(engine: str, path: str, files: int, rows: int) -> dict[str, Any]:
    """Run the whole sequence on the table at ``path``: per change, its time and bytes."""
    if engine == "delta":
        from deltalake import DeltaTable

        def opened() -> Any:
            return DeltaTable(path)
    else:
        import lakelog

        lake = lakelog.open_table(path)

        def opened() -> Any:
            return lake

    changes = []
    new_ts = files * TS_SPAN
    for step in steps():
        source = None
        if step["kind"] == "merge":
            source = merge_source(step, files, rows, new_ts)
            new_ts += source.num_rows + 1
        before = live_files(engine, path)
        log_before = folder_bytes(engine, path)["log_bytes"]
        out = _run_change(engine, opened(), step, source)
        after = live_files(engine, path)
        out |= {
            "name": step["name"],
            "files_removed": len(before.keys() - after.keys()),
            "files_added": len(after.keys() - before.keys()),
            "data_bytes_dropped": sum(s for p, s in before.items() if p not in after),
            "data_bytes_added": sum(s for p, s in after.items() if p not in before),
            "log_bytes_added": folder_bytes(engine, path)["log_bytes"] - log_before,
        }
        out["bytes_written"] = out["data_bytes_added"] + out["log_bytes_added"]
        changes.append(out)
    return {"changes": changes, "state": table_state(engine, path)}


def child_compact(engine: str, path: str) -> dict[str, Any]:
    """Compact with the defaults; its time and bytes, and the table's state after."""
    before = live_files(engine, path)
    log_before = folder_bytes(engine, path)["log_bytes"]
    if engine == "delta":
        from deltalake import DeltaTable

        dt = DeltaTable(path)
        t0 = time.perf_counter()
        dt.optimize.compact()
        seconds = time.perf_counter() - t0
    else:
        import lakelog

        table = lakelog.open_table(path)
        t0 = time.perf_counter()
        table.compact()
        seconds = time.perf_counter() - t0
    after = live_files(engine, path)
    return {
        "seconds": seconds,
        "files_removed": len(before.keys() - after.keys()),
        "files_added": len(after.keys() - before.keys()),
        "bytes_written": sum(s for p, s in after.items() if p not in before)
        + folder_bytes(engine, path)["log_bytes"]
        - log_before,
        "state": table_state(engine, path),
    }


def pruned_bounds(files: int) -> tuple[int, int]:
    """The pruned read's ``ts`` range: the first tenth of the middle file's range."""
    lo = (files // 2) * TS_SPAN
    return lo, lo + TS_SPAN // 10


def child_read(engine: str, path: str, files: int, pruned: bool) -> None:
    """Open the table and read it (all rows, or the pruned range) in this fresh
    interpreter; prints the time, row count and checksums as JSON."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    import lakelog

    lo, hi = pruned_bounds(files)
    t0 = time.perf_counter()
    if engine == "delta":
        ds = DeltaTable(path).to_pyarrow_dataset()
        flt = (pc.field("ts") >= lo) & (pc.field("ts") < hi)

        def read() -> Any:
            return ds.to_table(filter=flt) if pruned else ds.to_table()
    else:
        snap = lakelog.open_table(path).snapshot()

        def read() -> Any:
            return snap.to_arrow(filter=f"ts >= {lo} and ts < {hi}") if pruned else snap.to_arrow()

    data = read()
    seconds = time.perf_counter() - t0
    # the same read again on the opened table, WARM_READS times: the scan alone
    warm_samples = []
    for _ in range(WARM_READS):
        t0 = time.perf_counter()
        read()
        warm_samples.append(time.perf_counter() - t0)
    warm = statistics.median(warm_samples)
    _report(
        {
            "seconds": seconds,
            "warm_seconds": warm,
            "rows": data.num_rows,
            "fixed": pc.sum(pc.equal(data.column("event"), "fixed")).as_py() or 0,
            "sum_x": round(pc.sum(data.column("x")).as_py() or 0.0, 3),
        }
    )


def child_probe_readers(dv_path: str, work: str) -> None:
    """What can read a table with vectors, and whether delta-rs writes vectors."""
    import pyarrow as pa
    import pyarrow.dataset as pads

    import lakelog

    out: dict[str, Any] = {}
    snap = lakelog.open_table(dv_path).snapshot()
    out["lakelog to_arrow rows"] = snap.to_arrow().num_rows

    def attempt(name: str, fn: Any) -> None:
        try:
            out[name] = fn()
        except Exception as e:  # noqa: BLE001 - reported, that is the point
            out[name] = f"refused: {type(e).__name__}: {str(e).splitlines()[0][:120]}"

    def duck() -> Any:
        import duckdb

        con = duckdb.connect()
        snap.to_duckdb(con, name="t")
        return con.execute("select count(*) from t").fetchone()[0]  # type: ignore[index]

    def polars_rows() -> Any:
        import polars as pl

        return snap.to_polars().select(pl.len()).collect().item()

    attempt("duckdb to_duckdb rows", duck)
    attempt("polars to_polars rows", polars_rows)
    attempt("pandas to_pandas rows", lambda: len(snap.to_pandas()))
    attempt("snapshot.dataset() rows", lambda: snap.dataset().count_rows())
    attempt(
        "pyarrow folder scan rows (wrong: deleted and replaced rows)",
        lambda: pads.dataset(
            dv_path, exclude_invalid_files=True, ignore_prefixes=["_"]
        ).count_rows(),
    )
    copy = Path(work) / "probe-dv-copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(dv_path, copy)
    attempt(
        "lakelog.delta_view=true on it",
        lambda: (
            lakelog.open_table(str(copy)).set_properties({"lakelog.delta_view": "true"}).version
        ),
    )
    from deltalake import DeltaTable, QueryBuilder, write_deltalake

    def query_builder_rows(path: str) -> Any:
        result = QueryBuilder().register("t", DeltaTable(path)).execute("select * from t")
        return pa.table(result.read_all()).num_rows

    if (copy / "_delta_log").exists():
        # the Delta view of a table with vectors (when this tree can write one)
        attempt(
            "  its Delta view: deltalake to_pyarrow_dataset rows",
            lambda: DeltaTable(str(copy)).to_pyarrow_dataset().count_rows(),
        )
        attempt(
            "  its Delta view: deltalake QueryBuilder rows",
            lambda: query_builder_rows(str(copy)),
        )
        attempt("  its Delta view: DuckDB delta_scan rows", lambda: _duckdb_delta_rows(str(copy)))

        def polars_delta_rows() -> Any:
            import polars as pl

            return pl.scan_delta(str(copy)).select(pl.len()).collect().item()

        attempt("  its Delta view: polars scan_delta rows", polars_delta_rows)
    shutil.rmtree(copy, ignore_errors=True)

    # delta-rs: a table with the deletionVectors feature, then a delete

    d = Path(work) / "probe-delta-dv"
    shutil.rmtree(d, ignore_errors=True)
    write_deltalake(
        str(d),
        pa.table({"id": list(range(1000))}),
        configuration={"delta.enableDeletionVectors": "true"},
    )
    dt = DeltaTable(str(d))
    m = dt.delete("id < 10")
    logs = sorted((d / "_delta_log").glob("*.json"))
    last = [json.loads(x) for x in logs[-1].read_text().splitlines() if x.strip()]
    out["delta-rs delete on a deletionVectors table"] = (
        f"removed {m['num_removed_files']} file(s), added {m['num_added_files']}, "
        f"deletionVector in an add: {any((a.get('add') or {}).get('deletionVector') for a in last)}"
    )
    attempt(
        "delta-rs to_pyarrow_dataset on that table",
        lambda: DeltaTable(str(d)).to_pyarrow_dataset().count_rows(),
    )
    attempt("delta-rs QueryBuilder (DataFusion) on that table", lambda: query_builder_rows(str(d)))
    attempt("DuckDB delta_scan on that table", lambda: _duckdb_delta_rows(str(d)))
    shutil.rmtree(d, ignore_errors=True)
    _report(out)


def _duckdb_delta_rows(path: str) -> Any:
    """Rows of the Delta table at ``path`` by DuckDB's ``delta_scan``, the extension
    loaded offline from the ``duckdb-ext-delta`` wheel."""
    import importlib.util

    import duckdb

    spec = importlib.util.find_spec("duckdb_ext")
    if spec is None or not spec.submodule_search_locations:
        return "not installed (pip install duckdb-ext-delta)"
    folder = Path(next(iter(spec.submodule_search_locations))) / "extensions"
    con = duckdb.connect(
        config={
            "extension_directory": str(folder),
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        }
    )
    con.execute("LOAD delta")
    return con.execute(f"select count(*) from delta_scan('{path}')").fetchone()[0]  # type: ignore[index]


def _report(result: dict[str, Any]) -> None:
    print(json.dumps(result, default=str), flush=True)
    # deltalake's scan threads can abort the interpreter's exit ("terminate called
    # without an active exception"): leave without it, the result printed
    os._exit(0)


def _fresh(func: str, *args: Any) -> dict[str, Any]:
    """Run ``func(*args)`` of this module in a fresh interpreter; its JSON line back."""
    here = Path(__file__).resolve().parent
    code = (
        f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]; "
        f"import bench_rowlevel_default as b; b.{func}(*{list(args)!r})"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{func}{args} failed: {done.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(lines[-1])
    return out


# -- driver ---------------------------------------------------------------------------


def _child(func: str, *args: Any) -> dict[str, Any]:
    run = run_in_subprocess_peak_rss(func=f"bench_rowlevel_default:{func}", args=list(args))
    out: dict[str, Any] = run.last_json()
    out["peak_rss_bytes"] = run.peak_rss_bytes
    return out


def _reads(engine: str, path: str, files: int) -> dict[str, Any]:
    full = _fresh("child_read", engine, path, files, False)
    pruned = _fresh("child_read", engine, path, files, True)
    return {"full": full, "pruned": pruned}


def run_once(engine: str, path: str, files: int, rows: int) -> dict[str, Any]:
    """Build, run the sequence, read, compact, read again: one engine, one run."""
    t0 = time.perf_counter()
    _child("build", engine, path, files, rows)
    out: dict[str, Any] = {"build_seconds": time.perf_counter() - t0}
    seq = _child("child_sequence", engine, path, files, rows)
    out["changes"] = seq["changes"]
    out["after_changes"] = seq["state"] | {"reads": _reads(engine, path, files)}
    out["sequence_peak_rss_bytes"] = seq["peak_rss_bytes"]
    comp = _child("child_compact", engine, path)
    out["compaction"] = {k: v for k, v in comp.items() if k != "state"}
    out["after_compaction"] = comp["state"] | {"reads": _reads(engine, path, files)}
    return out


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def _check_same_rows(per_engine: dict[str, dict[str, Any]], run: int) -> None:
    """The three tables must hold the same rows after the sequence and after compaction."""
    for stage in ("after_changes", "after_compaction"):
        for read in ("full", "pruned"):
            seen = {
                e: (
                    r[stage]["reads"][read]["rows"],
                    r[stage]["reads"][read]["fixed"],
                    r[stage]["reads"][read]["sum_x"],
                )
                for e, r in per_engine.items()
            }
            rows = {v[:2] for v in seen.values()}
            sums = [v[2] for v in seen.values()]
            if len(rows) != 1 or max(sums) - min(sums) > 1e-6 * max(1.0, abs(sums[0])):
                raise RuntimeError(f"run {run}: the engines disagree {stage} ({read}): {seen}")


def summarize(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians over runs per engine, and lakelog / delta-rs ratios."""
    names = [s["name"] for s in steps()]
    out: dict[str, Any] = {}
    for engine, runs in samples.items():
        e: dict[str, Any] = {"changes": {}}
        for i, name in enumerate(names):
            cs = [r["changes"][i] for r in runs]
            e["changes"][name] = {
                "median_seconds": _median([c["seconds"] for c in cs]),
                "samples_seconds": [c["seconds"] for c in cs],
                "median_cpu_seconds": _median([c["cpu_seconds"] for c in cs]),
                **{
                    k: cs[0][k]
                    for k in (
                        "deleted",
                        "updated",
                        "inserted",
                        "files_marked",
                        "files_removed",
                        "files_added",
                        "data_bytes_dropped",
                        "data_bytes_added",
                        "log_bytes_added",
                        "bytes_written",
                    )
                    if k in cs[0]
                },
            }
        e["sequence_seconds"] = _median([sum(c["seconds"] for c in r["changes"]) for r in runs])
        e["sequence_cpu_seconds"] = _median(
            [sum(c["cpu_seconds"] for c in r["changes"]) for r in runs]
        )
        e["sequence_bytes_written"] = runs[0]["changes"] and sum(
            c["bytes_written"] for c in runs[0]["changes"]
        )
        e["sequence_peak_rss_bytes"] = max(r["sequence_peak_rss_bytes"] for r in runs)
        for stage in ("after_changes", "after_compaction"):
            st = {k: v for k, v in runs[0][stage].items() if k != "reads"}
            for read in ("full", "pruned"):
                st[f"{read}_read_seconds"] = _median(
                    [r[stage]["reads"][read]["seconds"] for r in runs]
                )
                st[f"{read}_warm_read_seconds"] = _median(
                    [r[stage]["reads"][read]["warm_seconds"] for r in runs]
                )
                st[f"{read}_read_rows"] = runs[0][stage]["reads"][read]["rows"]
            e[stage] = st
        e["compaction"] = {
            "median_seconds": _median([r["compaction"]["seconds"] for r in runs]),
            **{k: v for k, v in runs[0]["compaction"].items() if k != "seconds"},
        }
        out[engine] = e
    return out


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def report(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Print the tables; returns the per-change rows."""
    d = summary["delta"]
    rows = []
    for name, dc in d["changes"].items():
        cow = summary["lakelog-cow"]["changes"][name]
        dv = summary["lakelog-dv"]["changes"][name]
        rows.append(
            {
                "change": name,
                "rows": dc.get("deleted", 0) + dc.get("updated", 0) + dc.get("inserted", 0),
                "cow_s": cow["median_seconds"],
                "dv_s": dv["median_seconds"],
                "delta_s": dc["median_seconds"],
                "cow/delta": _ratio(cow["median_seconds"], dc["median_seconds"]),
                "dv/delta": _ratio(dv["median_seconds"], dc["median_seconds"]),
                "dv/cow": _ratio(dv["median_seconds"], cow["median_seconds"]),
                "cpu cow/delta": _ratio(cow["median_cpu_seconds"], dc["median_cpu_seconds"]),
                "cpu dv/delta": _ratio(dv["median_cpu_seconds"], dc["median_cpu_seconds"]),
                "written cow": fmt_bytes(cow["bytes_written"]),
                "written dv": fmt_bytes(dv["bytes_written"]),
                "written delta": fmt_bytes(dc["bytes_written"]),
                "dv files marked/rewritten": f"{dv['files_marked']}/{dv['files_removed']}",
            }
        )
    rows.append(
        {
            "change": "whole sequence",
            "cow_s": summary["lakelog-cow"]["sequence_seconds"],
            "dv_s": summary["lakelog-dv"]["sequence_seconds"],
            "delta_s": d["sequence_seconds"],
            "cow/delta": _ratio(summary["lakelog-cow"]["sequence_seconds"], d["sequence_seconds"]),
            "dv/delta": _ratio(summary["lakelog-dv"]["sequence_seconds"], d["sequence_seconds"]),
            "dv/cow": _ratio(
                summary["lakelog-dv"]["sequence_seconds"],
                summary["lakelog-cow"]["sequence_seconds"],
            ),
            "cpu cow/delta": _ratio(
                summary["lakelog-cow"]["sequence_cpu_seconds"], d["sequence_cpu_seconds"]
            ),
            "cpu dv/delta": _ratio(
                summary["lakelog-dv"]["sequence_cpu_seconds"], d["sequence_cpu_seconds"]
            ),
            "written cow": fmt_bytes(summary["lakelog-cow"]["sequence_bytes_written"]),
            "written dv": fmt_bytes(summary["lakelog-dv"]["sequence_bytes_written"]),
            "written delta": fmt_bytes(d["sequence_bytes_written"]),
        }
    )
    print("\n(a) write time of each change (median s) and bytes written (data added + log)")
    print_table(rows)
    for stage, title in (
        ("after_changes", "(b, c) after the sequence"),
        (
            "after_compaction",
            "(d) after compaction (lakelog compact(), delta-rs optimize.compact())",
        ),
    ):
        srows = []
        for engine in ENGINES:
            st = summary[engine][stage]
            srows.append(
                {
                    "engine": engine,
                    "full_read_s": st["full_read_seconds"],
                    "full/delta": _ratio(st["full_read_seconds"], d[stage]["full_read_seconds"]),
                    "warm_full_s": st["full_warm_read_seconds"],
                    "warm/delta": _ratio(
                        st["full_warm_read_seconds"], d[stage]["full_warm_read_seconds"]
                    ),
                    "pruned_read_s": st["pruned_read_seconds"],
                    "pruned/delta": _ratio(
                        st["pruned_read_seconds"], d[stage]["pruned_read_seconds"]
                    ),
                    "warm_pruned_s": st["pruned_warm_read_seconds"],
                    "warm_pruned/delta": _ratio(
                        st["pruned_warm_read_seconds"], d[stage]["pruned_warm_read_seconds"]
                    ),
                    "rows": st["full_read_rows"],
                    "live files": st["live_files"],
                    "with vectors": st["files_with_vectors"],
                    "marked rows": st["marked_rows"],
                    "live data": fmt_bytes(st["live_data_bytes"]),
                    "live/delta": _ratio(st["live_data_bytes"], d[stage]["live_data_bytes"]),
                    "folder data": fmt_bytes(st["folder_data_bytes"]),
                    "log": fmt_bytes(st["log_bytes"]),
                }
            )
        print(f"\n{title}")
        print_table(srows)
    crows = []
    for engine in ENGINES:
        c = summary[engine]["compaction"]
        crows.append(
            {
                "engine": engine,
                "compaction_s": c["median_seconds"],
                "/delta": _ratio(c["median_seconds"], d["compaction"]["median_seconds"]),
                "files removed": c["files_removed"],
                "files added": c["files_added"],
                "written": fmt_bytes(c["bytes_written"]),
                "sequence peak RSS": fmt_bytes(summary[engine]["sequence_peak_rss_bytes"]),
            }
        )
    print("\n(d) the compaction itself")
    print_table(crows)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 files x 20,000 rows, 1 run")
    ap.add_argument("--files", type=int, default=None, help="appends, one file each (20)")
    ap.add_argument("--rows-per-file", type=int, default=None, help="rows per append (100,000)")
    ap.add_argument("--runs", type=int, default=None, help="runs, medians taken (default 3)")
    ap.add_argument("--data", default=str(BENCH_DIR / "data" / "rowlevel_default"))
    args = ap.parse_args(argv)
    files = args.files or (10 if args.quick else 20)
    rows = args.rows_per_file or (20_000 if args.quick else 100_000)
    runs = args.runs or (1 if args.quick else 3)
    root = Path(args.data)
    root.mkdir(parents=True, exist_ok=True)
    print(
        f"data: {files} files x {rows:,} rows ({files * rows:,} rows); {runs} runs; "
        f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at the start"
    )
    print("sequence: " + ", ".join(f"{s['name']} ({s['where']})" for s in steps()))
    samples: dict[str, list[dict[str, Any]]] = {e: [] for e in ENGINES}
    for i in range(runs):
        order = ENGINES[i % 3 :] + ENGINES[: i % 3]
        per_engine: dict[str, dict[str, Any]] = {}
        for engine in order:
            path = str(root / engine)
            r = run_once(engine, path, files, rows)
            per_engine[engine] = r
            samples[engine].append(r)
            print(
                f"  run {i + 1}/{runs} {engine:12s} sequence "
                f"{sum(c['seconds'] for c in r['changes']):6.2f} s  "
                + " ".join(f"{c['seconds']:.2f}" for c in r["changes"])
                + f"  read {r['after_changes']['reads']['full']['seconds']:.2f} s"
                f"  compact {r['compaction']['seconds']:.2f} s"
            )
        _check_same_rows(per_engine, i + 1)
    # the readers' probe runs on a fresh table with vectors (the last run's was compacted)
    probe_path = str(root / "probe-lakelog-dv")
    _child("build", "lakelog-dv", probe_path, 2, 1_000)
    import lakelog

    lakelog.open_table(probe_path).delete("x < 0.5")
    probe = _fresh("child_probe_readers", probe_path, str(root))
    shutil.rmtree(probe_path, ignore_errors=True)
    summary = summarize(samples)
    report(summary)
    print("\nreaders of a table with vectors (2 files x 1,000 rows, half deleted), and delta-rs:")
    for k, v in probe.items():
        print(f"  {k}: {v}")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    saved = write_json_result(
        "rowlevel_default",
        {
            "files": files,
            "rows_per_file": rows,
            "runs": runs,
            "steps": steps(),
            "summary": summary,
            "readers": probe,
        },
    )
    print(f"saved to {saved}")


if __name__ == "__main__":
    main()
