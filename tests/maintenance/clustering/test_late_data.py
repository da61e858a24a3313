"""Late data never snowballs: maintenance keeps a sorted table sorted as late rows arrive.

A table sorted by ``ts`` takes 50 rounds of 1% late rows spread over its whole time
range, each followed by ``optimize()`` (the declared sort). After every round: no file
above 1.1x the target size, no row group above the row-group size, and at most 10 bytes
rewritten per byte appended; every 10 rounds, a 1% ``ts`` range query reads (row groups
pruned by their statistics, as lakelog's reader does) within 25% of the bytes it reads
after a full re-sort of the same rows. Sizes keep the proportions of real tables (row
groups 1/16 of a file, 1% of the table several minimum delta files), so fixed costs
(footers) do not dominate; ``benchmarks/bench_late_data.py`` runs the same at 2x the rows
beside delta-rs. Only byte counts are asserted, never times.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog

pytestmark = pytest.mark.slow

ROWS = 1_000_000
ROUNDS = 50
TARGET = 1 << 20
ROW_GROUP = 4096
SPAN = 10**9
SCHEMA = pa.schema([("ts", pa.int64()), ("k", pa.int64()), ("v", pa.float64())])


def _batch(rng: np.random.Generator, n: int) -> pa.Table:
    return pa.table(
        {"ts": rng.integers(0, SPAN, n), "k": rng.integers(0, 10**6, n), "v": rng.random(n)},
        schema=SCHEMA,
    )


class _Footers:
    """Row groups of every file seen: (ts min, ts max, compressed bytes, rows)."""

    def __init__(self) -> None:
        self.groups: dict[str, list[tuple[int, int, int, int]]] = {}

    def of(self, t: lakelog.Table) -> dict[str, list[tuple[int, int, int, int]]]:
        live = {f.path for f in t.snapshot().files()}
        for path in live - self.groups.keys():
            md = pq.read_metadata(t.storage.full(path))
            out = []
            for i in range(md.num_row_groups):
                rg = md.row_group(i)
                st = rg.column(0).statistics
                size = sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))
                out.append((st.min, st.max, size, rg.num_rows))
            self.groups[path] = out
        return {p: self.groups[p] for p in live}


def _fraction_read(groups: dict[str, list[tuple[int, int, int, int]]]) -> float:
    """Mean share of the table's row-group bytes that 300 seeded 1% ``ts`` ranges read."""
    rows = np.array([g for gs in groups.values() for g in gs], dtype=np.float64)
    lo, hi, size = rows[:, 0], rows[:, 1], rows[:, 2]
    starts = np.random.default_rng(7).integers(0, int(SPAN * 0.99), 300)
    read = [size[(lo <= s + SPAN // 100) & (hi >= s)].sum() for s in starts]
    return float(np.mean(read) / size.sum())


def _full_resort_fraction(t: lakelog.Table, scratch: Path) -> float:
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(t.storage.full(""), scratch)
    copy = lakelog.open_table(str(scratch))
    copy.optimize(incremental=False)
    return _fraction_read(_Footers().of(copy))


def test_late_rows_never_snowball(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    t = lakelog.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        properties={
            "lakelog.target_file_size": str(TARGET),
            "lakelog.row_group_size": str(ROW_GROUP),
        },
    )
    for _ in range(10):
        t.append(_batch(rng, ROWS // 10))
    t.optimize(sort_by=["ts"], incremental=False)
    t.set_clustering(sort_by=["ts"])  # optimize() keeps this sort from now on
    footers = _Footers()
    appended = rewritten = 0
    for rnd in range(ROUNDS):
        before = {f.path for f in t.snapshot().files()}
        t.append(_batch(rng, ROWS // 100))
        appended += sum(f.size_bytes for f in t.snapshot().files() if f.path not in before)
        report = t.optimize()
        assert report.version is not None and report.extra["sort_columns"] == ["ts"]
        rewritten += report.written_bytes
        files = t.snapshot().files()
        assert max(f.size_bytes for f in files) <= 1.1 * TARGET, rnd
        groups = footers.of(t)
        assert max(g[3] for gs in groups.values() for g in gs) <= ROW_GROUP, rnd
        assert rewritten / appended <= 10, (rnd, rewritten / appended)
        if rnd % 10 == 9:
            ours = _fraction_read(groups)
            ideal = _full_resort_fraction(t, tmp_path / f"full-{rnd}")
            assert ours <= 1.25 * ideal, (rnd, ours, ideal)
    assert sum(f.num_rows for f in t.snapshot().files()) == ROWS + ROUNDS * (ROWS // 100)
