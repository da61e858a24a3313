"""A model of file shapes, not a timing: how tight can min/max boxes of n equal files be?

For two clustering columns with uniform ranks, a file holding 1/n of the rows covers some
box of the rank square; a range query on one column of width w reads that file with
probability of about (its extent on that column) + w. So the mean extent per column,
weighted by rows, decides what a one-column query reads. This prints it for:

* ``hilbert``: lakelog's layout: 2M uniform points ordered by the Hilbert key and cut into
  n files by :func:`lakelog.maintenance.sort.file_cuts` (the real code);
* ``strips``: a recursive strip tiling (Sort-Tile-Recursive style: cut the longer side into
  round(length / side of a square file) strips of near-equal file counts, recurse), computed
  analytically for uniform data;
* ``bound``: sqrt(1/n), every file a square (not reachable for most n).

Usage: ``python benchmarks/layout_model.py [n ...]`` (default: a range of n).
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lakelog.maintenance.curves import hilbert_keys
from lakelog.maintenance.sort import KEY_MAX, Segment, file_cuts

ROWS = 2_000_000
BITS = 16


def hilbert_extents(n: int, keys: np.ndarray, points: np.ndarray) -> tuple[float, float]:
    cuts = file_cuts([Segment(key_start=0, key_end=KEY_MAX, rows=len(keys), files=n)], keys)
    starts = np.searchsorted(keys, np.array([c.key_start for c in cuts], dtype=np.uint64))
    bounds = [*starts.tolist(), len(keys)]
    ext = np.zeros(2)
    for a, b in itertools.pairwise(bounds):
        if b > a:
            box = points[:, a:b]
            ext += (b - a) / len(keys) * (box.max(axis=1) - box.min(axis=1))
    return float(ext[0]), float(ext[1])


def strip_extents(w: float, h: float, n: int) -> tuple[float, float]:
    """Row-weighted sums of file extents (column 1, column 2) of a w x h region, n files."""
    if n == 1:
        return w * h * w, w * h * h
    side = math.sqrt(w * h / n)
    along_w = w >= h
    k = max(2, min(n, round((w if along_w else h) / side)))
    base, extra = divmod(n, k)
    ea = eb = 0.0
    for i in range(k):
        c = base + (1 if i < extra else 0)
        a, b = strip_extents(w * c / n, h, c) if along_w else strip_extents(w, h * c / n, c)
        ea, eb = ea + a, eb + b
    return ea, eb


def main() -> None:
    ns = [int(a) for a in sys.argv[1:]] or [16, 20, 24, 28, 30, 32, 36, 40, 45, 50, 56, 64]
    rng = np.random.default_rng(1)
    points = rng.random((2, ROWS))
    ranks = (points * (1 << BITS)).astype(np.uint64)
    keys = hilbert_keys([ranks[0], ranks[1]], BITS)
    order = np.argsort(keys, kind="stable")
    keys, points = keys[order], points[:, order]
    print("mean extent per column (A, B) of n equal files, uniform ranks")
    print(
        f"{'n':>4} {'hilbert A':>10} {'hilbert B':>10} {'strips A':>9} {'strips B':>9} "
        f"{'bound':>7} {'hilbert/bound':>14} {'strips/bound':>13}"
    )
    for n in ns:
        ha, hb = hilbert_extents(n, keys, points)
        sa, sb = strip_extents(1.0, 1.0, n)
        bound = math.sqrt(1 / n)
        print(
            f"{n:>4} {ha:>10.4f} {hb:>10.4f} {sa:>9.4f} {sb:>9.4f} {bound:>7.4f} "
            f"{(ha + hb) / 2 / bound:>14.3f} {(sa + sb) / 2 / bound:>13.3f}"
        )


if __name__ == "__main__":
    main()
