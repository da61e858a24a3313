"""A model of file shapes, not a timing: how tight are the min/max boxes of n equal files?

For two clustering columns with uniform ranks, a file holding 1/n of the rows covers some
box of the rank grid; a range query on one column of width w reads that file with
probability of about (its width on that column) + w. So the row-weighted mean width per
column decides what a one-column query reads. This prints it for:

* ``hilbert``: 2M uniform points ordered by the plain Hilbert key and cut into n files by
  :func:`lakelog.maintenance.clustering.sort.file_cuts` (lakelog's layout before tiles);
* ``tiles``: lakelog's layout: :func:`lakelog.maintenance.clustering.tiling.build_tiling` on a
  200,000-row sample (as ``optimize`` draws), one file per tile, measured on the 2M points
  (``-`` where no tiling beats the curve, so the curve is used);
* ``bound``: sqrt(1/n), every file a square (not reachable for most n).

Usage: ``python benchmarks/layout_model.py [n ...]`` (default: a range of n).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lakelog.maintenance.clustering.curves import hilbert_keys
from lakelog.maintenance.clustering.tiling import build_tiling, curve_files, layout_widths

ROWS = 2_000_000
SAMPLE = 200_000
BITS = 9


def hilbert_widths(n: int, ranks: list[np.ndarray]) -> np.ndarray:
    return layout_widths(ranks, BITS, curve_files(hilbert_keys(ranks, BITS), n))


def main() -> None:
    ns = [int(a) for a in sys.argv[1:]] or [16, 20, 24, 28, 30, 32, 36, 40, 45, 50, 56, 64, 100]
    rng = np.random.default_rng(1)
    top = (1 << BITS) - 1  # the last rank is for nulls
    ranks = [(rng.random(ROWS) * top).astype(np.uint64) for _ in range(2)]
    sample = [r[:SAMPLE] for r in ranks]
    print("mean box width per column (A, B) of n equal files, uniform ranks")
    print(
        f"{'n':>4} {'hilbert A':>10} {'hilbert B':>10} {'tiles A':>8} {'tiles B':>8} "
        f"{'bound':>7} {'hilbert/bound':>14} {'tiles/bound':>12}"
    )
    for n in ns:
        ha, hb = hilbert_widths(n, ranks)
        tiling = build_tiling(sample, BITS, n, "hilbert")
        bound = math.sqrt(1 / n)
        if tiling is None:
            tiles = "       -        -"
            ratio = "-"
        else:
            ta, tb = layout_widths(ranks, BITS, tiling.tile_of(ranks))
            tiles = f"{ta:>8.4f} {tb:>8.4f}"
            ratio = f"{max(ta, tb) / bound:.3f}"
        print(
            f"{n:>4} {ha:>10.4f} {hb:>10.4f} {tiles} {bound:>7.4f} "
            f"{max(ha, hb) / bound:>14.3f} {ratio:>12}"
        )


if __name__ == "__main__":
    main()
