"""Late data never snowballs: rounds of 1% late rows into a ``ts``-sorted table.

A table of ``--rows`` (2,000,000) rows ``(ts, k, v)`` is sorted by ``ts`` into files of
``--target`` (1 MiB) with row groups of ``--row-group`` (4,096) rows. Then ``--rounds``
(50) times, 1% more rows with ``ts`` spread over the whole range arrive, each round
followed by the engine's maintenance:

* **lakelog**: ``optimize()`` with the declared sort (``set_clustering(sort_by=["ts"])``),
  incremental;
* **delta-rs, z-order**: ``optimize.z_order(["ts"])`` (delta-rs's only way to keep a sort;
  it rewrites every file each time);
* **delta-rs, compact**: ``optimize.compact()`` (bin-packing only: the new rows stay in
  files spanning the whole range).

After every round, per engine: the largest file over the target, the largest row group,
bytes rewritten per byte appended (cumulative: bytes of the files each round added, less
the appended file, over the appended bytes), and the fraction of the table's bytes that
300 seeded 1% ``ts`` ranges read, with row groups pruned by their statistics (as
lakelog's and Spark's readers do) and, for reference, with whole files only; against
the same measure after a full re-sort of the same rows (lakelog ``optimize(
incremental=False)`` on a copy). Targets: no file above 1.1x the target, no
row group above the row-group size, at most 10 bytes rewritten per byte appended, and the
fraction read within 25% of the full re-sort, after every round. Also the median time
of a round's maintenance. Bytes are deterministic (seeded); times vary with the machine.

    python benchmarks/bench_late_data.py                 # 2M rows, 50 rounds
    python benchmarks/bench_late_data.py --quick         # 500k rows, 10 rounds
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import print_table, write_json_result

import lakelog

WORK = Path("/tmp/lakelog-bench-late")
SPAN = 10**9
SCHEMA = pa.schema([("ts", pa.int64()), ("k", pa.int64()), ("v", pa.float64())])
Groups = dict[str, list[tuple[int, int, int]]]


def batch(rng: np.random.Generator, n: int) -> pa.Table:
    return pa.table(
        {"ts": rng.integers(0, SPAN, n), "k": rng.integers(0, 10**6, n), "v": rng.random(n)},
        schema=SCHEMA,
    )


class Footers:
    """Row groups (ts min, ts max, compressed bytes) and sizes of every file seen."""

    def __init__(self) -> None:
        self.groups: Groups = {}
        self.rows: dict[str, int] = {}

    def read(self, paths: list[str]) -> Groups:
        for p in paths:
            if p not in self.groups:
                md = pq.read_metadata(p)
                out = []
                for i in range(md.num_row_groups):
                    rg = md.row_group(i)
                    st = rg.column(0).statistics
                    size = sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))
                    out.append((st.min, st.max, size))
                    self.rows[p] = max(self.rows.get(p, 0), rg.num_rows)
                self.groups[p] = out
        return {p: self.groups[p] for p in paths}


STARTS = np.random.default_rng(7).integers(0, int(SPAN * 0.99), 300)


def fractions(groups: Groups) -> tuple[float, float]:
    """Mean share of the bytes 1% ranges read: by row groups, and by whole files."""
    rg = np.array([g for gs in groups.values() for g in gs], dtype=np.float64)
    files = np.array(
        [
            (min(g[0] for g in gs), max(g[1] for g in gs), sum(g[2] for g in gs))
            for gs in groups.values()
        ],
        dtype=np.float64,
    )
    out = []
    for rows in (rg, files):
        lo, hi, size = rows[:, 0], rows[:, 1], rows[:, 2]
        read = [size[(lo <= s + SPAN // 100) & (hi >= s)].sum() for s in STARTS]
        out.append(float(np.mean(read) / size.sum()))
    return out[0], out[1]


class Engine(Protocol):
    """One engine's table: append a round, maintain it, list its files."""

    name: str

    def append(self, data: pa.Table) -> None: ...
    def maintain(self) -> None: ...
    def files(self) -> dict[str, int]:
        """Absolute path -> size of every live file."""
        ...


class Lakelog:
    name = "lakelog optimize()"

    def __init__(self, root: Path, initial: pa.Table, target: int, row_group: int) -> None:
        props = {"lakelog.target_file_size": str(target), "lakelog.row_group_size": str(row_group)}
        self.t = lakelog.create_table(str(root), SCHEMA, properties=props)
        for part in range(10):
            self.t.append(initial.slice(part * initial.num_rows // 10, initial.num_rows // 10))
        self.t.optimize(sort_by=["ts"], incremental=False)
        self.t.set_clustering(sort_by=["ts"])

    def append(self, data: pa.Table) -> None:
        self.t.append(data)

    def maintain(self) -> None:
        self.t.optimize()

    def files(self) -> dict[str, int]:
        return {self.t.storage.full(f.path): f.size_bytes for f in self.t.snapshot().files()}


class Delta:
    def __init__(
        self, root: Path, initial: pa.Table, target: int, row_group: int, *, zorder: bool
    ) -> None:
        from deltalake import WriterProperties, write_deltalake

        self.name = "delta-rs z_order" if zorder else "delta-rs compact"
        self.uri, self.target, self.zorder = str(root), target, zorder
        self.props = WriterProperties(max_row_group_size=row_group, compression="ZSTD")
        for part in range(10):
            write_deltalake(
                self.uri,
                initial.slice(part * initial.num_rows // 10, initial.num_rows // 10),
                mode="append",
                writer_properties=self.props,
            )
        self._zorder()

    def _table(self) -> Any:
        from deltalake import DeltaTable

        return DeltaTable(self.uri)

    def _zorder(self) -> None:
        self._table().optimize.z_order(
            ["ts"], target_size=self.target, writer_properties=self.props
        )

    def append(self, data: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(self.uri, data, mode="append", writer_properties=self.props)

    def maintain(self) -> None:
        if self.zorder:
            self._zorder()
        else:
            self._table().optimize.compact(target_size=self.target, writer_properties=self.props)

    def files(self) -> dict[str, int]:
        adds = pa.table(self._table().get_add_actions(flatten=True)).to_pydict()
        return {
            f"{self.uri}/{p}": int(s) for p, s in zip(adds["path"], adds["size_bytes"], strict=True)
        }


def full_resort(engine: Lakelog, scratch: Path, footers: Footers) -> tuple[float, float]:
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(engine.t.storage.full(""), scratch)
    copy = lakelog.open_table(str(scratch))
    copy.optimize(incremental=False)
    paths = [copy.storage.full(f.path) for f in copy.snapshot().files()]
    return fractions(footers.read(paths))


def run(
    engine: Engine,
    rounds: int,
    rows: int,
    target: int,
    ideal: Callable[[int], float],
) -> list[dict[str, Any]]:
    """Run the rounds on ``engine``; ``ideal(round)``: the full re-sort's fraction read."""
    rng = np.random.default_rng(1)  # the same late rows for every engine
    footers = Footers()
    appended = rewritten = 0
    out = []
    for rnd in range(rounds):
        before = engine.files()
        engine.append(batch(rng, rows // 100))
        mid = engine.files()
        new = {p: s for p, s in mid.items() if p not in before}
        appended += sum(new.values())
        t0 = time.perf_counter()
        engine.maintain()
        seconds = time.perf_counter() - t0
        after = engine.files()
        rewritten += sum(s for p, s in after.items() if p not in mid)
        groups = footers.read(list(after))
        rg_frac, file_frac = fractions(groups)
        best = ideal(rnd)
        out.append(
            {
                "round": rnd + 1,
                "engine": engine.name,
                "files": len(after),
                "max_file_x_target": max(after.values()) / target,
                "max_row_group": max(footers.rows[p] for p in after),
                "rewritten_per_appended": rewritten / max(1, appended),
                "fraction_rg": rg_frac,
                "fraction_files": file_frac,
                "full_resort": best,
                "read_vs_full_resort": rg_frac / best,
                "seconds": seconds,
            }
        )
        print(
            f"  {engine.name} round {rnd + 1}: {len(after)} files, largest "
            f"{max(after.values()) / target:.3f}x, amp {rewritten / max(1, appended):.2f}, "
            f"read {rg_frac:.4f} = {rg_frac / best:.3f}x the full re-sort's (whole files "
            f"{file_frac / best:.2f}x), {seconds:.2f} s",
            flush=True,
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--target", type=int, default=1 << 20, help="target file size, bytes")
    ap.add_argument("--row-group", type=int, default=4096)
    ap.add_argument("--quick", action="store_true", help="500k rows, 10 rounds")
    ap.add_argument("--no-delta", action="store_true", help="lakelog only")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.rounds = 500_000, 10
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    initial = batch(np.random.default_rng(0), args.rows)
    print(
        f"{args.rows:,} rows sorted by ts, {args.rounds} rounds of 1% late rows, target "
        f"{args.target:,} bytes, row groups of {args.row_group:,} rows",
        flush=True,
    )
    ll = Lakelog(WORK / "lakelog", initial, args.target, args.row_group)
    engines: list[Engine] = [ll]
    if not args.no_delta:
        for zorder in (True, False):
            engines.append(
                Delta(WORK / f"delta-{zorder}", initial, args.target, args.row_group, zorder=zorder)
            )
    results: dict[str, list[dict[str, Any]]] = {}
    ideals: list[float] = []
    full_footers = Footers()

    def ideal_of_lakelog(rnd: int) -> float:  # after each round, on lakelog's rows
        ideals.append(full_resort(ll, WORK / "full", full_footers)[0])
        return ideals[-1]

    for engine in engines:
        # every engine gets the same late rows each round, so the same ideal
        ideal = ideal_of_lakelog if engine is ll else ideals.__getitem__
        results[engine.name] = run(engine, args.rounds, args.rows, args.target, ideal)
    summary = []
    for name, rows in results.items():
        summary.append(
            {
                "engine": name,
                "max file / target": max(r["max_file_x_target"] for r in rows),
                "max row group": max(r["max_row_group"] for r in rows),
                "rewritten / appended (final)": rows[-1]["rewritten_per_appended"],
                "max rewritten / appended": max(r["rewritten_per_appended"] for r in rows),
                "max read / full re-sort": max(r["read_vs_full_resort"] for r in rows),
                "final read (whole files) / full re-sort": rows[-1]["fraction_files"]
                / rows[-1]["full_resort"],
                "median s per round": statistics.median(r["seconds"] for r in rows),
                "files (final)": rows[-1]["files"],
            }
        )
    print(f"\nfull re-sort after the last round: reads {ideals[-1]:.4f} of the bytes per 1% range")
    print_table(summary)
    write_json_result("late_data", {"args": vars(args), "summary": summary, "rounds": results})


if __name__ == "__main__":
    main()
