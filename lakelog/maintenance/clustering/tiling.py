"""Tiles of the rank grid: files with near-square min/max boxes for any file count.

A curve key cut into ``n`` files of equal rows gives each file one run of the
curve. For a Hilbert curve over two columns that run is a square when ``n``
is a power of 4; for other ``n`` the runs are half-squares or ragged shapes,
and a file's box is 6-15% wider per column than a square of the same area
(``python benchmarks/layout_model.py``). A range query on one column reads a
file with a chance of about its box's width on that column, so wider boxes
mean more bytes read.

A :class:`Tiling` fixes the shapes instead: the rank grid is cut into ``n``
boxes of equal row counts by recursive slabs (Sort-Tile-Recursive: the
longer side of a box is cut into ``round(side / side of a square tile)``
slabs of near-equal tile counts, at quantiles of a sample, then each slab
again), and the key of a row becomes ``tile << low | curve key >> drop``:
rows are ordered tile by tile (tiles in curve order of their centres), by
the curve within a tile. Cutting that order into ``n`` files puts one tile in
each file, so every file is a near-square box, whatever ``n`` is.

:func:`build_tiling` tries a few tilings (slabs first along each column; two
halves tiled across each other, so no column gets all the narrow sides) and
keeps the best by the row-weighted mean box width of the widest column on
the sample, only if it beats cutting the plain curve.

Within a tile the curve runs over the tile's own box (stretched to the whole
grid), so when a tile outgrows the target size, cutting it in 2 or 4 files
along the curve halves or quarters its box.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import InvalidArgumentError
from . import curves
from .sort import KEY_MAX, Segment, file_cuts

__all__ = ["Slabs", "TiledCurve", "Tiling", "build_tiling", "curve_files", "layout_widths"]

U64Array = npt.NDArray[np.uint64]
IntArray = npt.NDArray[np.int64]
Curve = Callable[[Sequence[U64Array], int], U64Array]
"""A curve over ranks: ``hilbert_keys`` or ``morton_keys``."""

HIST_BITS = 20
"""Keys of tiled specs are no longer than the plain curve's, nor than ``HIST_BITS`` bits
when that drops only fine curve bits, so the sorter counts them per value as cheaply
(:class:`~.sort.ExternalSorter`)."""
MIN_LOW_BITS = 12
"""Curve bits kept within a tile at least: 4,096 cells, so a tile grown past the target
size can still be cut into several files along the curve."""
MAX_TILES = 1 << 16
MIN_GAIN = 0.01
"""A tiling is used only when it narrows the widest column's mean box by at least 1%."""
BISECT_MAX_DIMS = 3
"""Two halves tiled across each other are tried for up to this many columns."""


@dataclass(frozen=True)
class Slabs:
    """A box of the rank grid cut along ``dim``: part ``i`` holds ranks in
    ``[cuts[i - 1], cuts[i])`` (the first from 0, the last to the end)."""

    dim: int
    cuts: tuple[int, ...]
    parts: tuple[Slabs | int, ...]
    """Each part is a tile id or a box cut further."""

    def to_json(self) -> dict[str, Any]:
        return {
            "dim": self.dim,
            "cuts": list(self.cuts),
            "parts": [p if isinstance(p, int) else p.to_json() for p in self.parts],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Slabs:
        parts = tuple(p if isinstance(p, int) else cls.from_json(p) for p in d["parts"])
        return cls(dim=int(d["dim"]), cuts=tuple(int(c) for c in d["cuts"]), parts=parts)


def _leaves(node: Slabs | int) -> list[int]:
    if isinstance(node, int):
        return [node]
    return [t for p in node.parts for t in _leaves(p)]


@dataclass(frozen=True)
class Tiling:
    """Tiles of a ``ndim``-column rank grid of ``bits`` bits per column, and how the
    key of a row is made from its tile and its curve key."""

    ndim: int
    bits: int
    root: Slabs
    n_tiles: int

    def __post_init__(self) -> None:
        leaves = _leaves(self.root)
        if sorted(leaves) != list(range(self.n_tiles)) or self.n_tiles < 2:
            raise InvalidArgumentError(
                f"expected a tiling whose tiles are numbered 0..{self.n_tiles - 1} once each, "
                f"found {len(leaves)} tiles {sorted(leaves)[:8]}...; the clustering spec is "
                f"damaged: recluster with optimize(incremental=False)."
            )
        self._check(self.root)

    def _check(self, node: Slabs | int) -> None:
        if isinstance(node, int):
            return
        top = 1 << self.bits
        ok = (
            0 <= node.dim < self.ndim
            and len(node.parts) == len(node.cuts) + 1
            and all(0 < c < top for c in node.cuts)
            and all(a < b for a, b in itertools.pairwise(node.cuts))
        )
        if not ok:
            raise InvalidArgumentError(
                f"expected slabs with a column below {self.ndim} and increasing cuts inside "
                f"(0, {top}), found column {node.dim}, cuts {list(node.cuts)[:8]} for "
                f"{len(node.parts)} parts; the clustering spec is damaged: recluster with "
                f"optimize(incremental=False)."
            )
        for p in node.parts:
            self._check(p)

    # -- the key -----------------------------------------------------------------------
    @property
    def curve_bits(self) -> int:
        return self.ndim * self.bits

    @property
    def tile_bits(self) -> int:
        return max(1, (self.n_tiles - 1).bit_length())

    @property
    def drop_bits(self) -> int:
        """Low curve bits dropped from the key: the key stays within :data:`HIST_BITS`
        bits while at least :data:`MIN_LOW_BITS` curve bits remain."""
        over = self.tile_bits + self.curve_bits - min(self.curve_bits, HIST_BITS)
        return max(0, min(over, self.curve_bits - MIN_LOW_BITS))

    @property
    def low_bits(self) -> int:
        """Key bits below the tile id."""
        return self.curve_bits - self.drop_bits

    @property
    def key_bits(self) -> int:
        return self.tile_bits + self.low_bits

    def tiles_between(self, key_start: int, key_end: int) -> int:
        """How many tiles the keys ``[key_start, key_end)`` touch."""
        top = self.n_tiles - 1
        last = min(top, (max(key_end, 1) - 1) >> self.low_bits)
        return max(1, last - min(top, key_start >> self.low_bits) + 1)

    @functools.cached_property
    def boxes(self) -> tuple[U64Array, U64Array]:
        """Each tile's box: the lowest rank per column, and the width (tiles x columns)."""
        lo = np.zeros((self.n_tiles, self.ndim), dtype=np.uint64)
        width = np.zeros((self.n_tiles, self.ndim), dtype=np.uint64)
        todo: list[tuple[Slabs | int, list[int], list[int]]] = [
            (self.root, [0] * self.ndim, [1 << self.bits] * self.ndim)
        ]
        while todo:
            node, low, high = todo.pop()
            if isinstance(node, int):
                lo[node] = low
                width[node] = [h - a for a, h in zip(low, high, strict=True)]
                continue
            edges = [low[node.dim], *node.cuts, high[node.dim]]
            for i, part in enumerate(node.parts):
                a, b = list(low), list(high)
                a[node.dim], b[node.dim] = edges[i], edges[i + 1]
                todo.append((part, a, b))
        return lo, width

    def keys(self, ranks: Sequence[U64Array], curve: Curve) -> U64Array:
        """``tile << low | local curve key >> drop`` for rows with these ranks: the curve
        runs over each tile's own box, stretched to the whole grid, so cutting a tile
        in 2 or 4 files along it halves or quarters the box. Tile ``t`` takes the
        columns in an order rotated by ``t``, so the halves of neighbouring tiles are
        narrow on different columns."""
        tile = self.tile_of(ranks)
        lo, width = self.boxes
        local = np.empty((self.ndim, len(tile)), dtype=np.uint64)
        for j, r in enumerate(ranks):
            v = r - lo[tile, j]
            v <<= np.uint64(self.bits)
            v //= width[tile, j]
            local[j] = v
        turn = (np.arange(self.ndim)[:, None] + tile[None, :]) % self.ndim
        local = np.take_along_axis(local, turn, axis=0)
        out = tile.astype(np.uint64)
        out <<= np.uint64(self.low_bits)
        out |= curve(list(local), self.bits) >> np.uint64(self.drop_bits)
        return out

    def tile_of(self, ranks: Sequence[U64Array]) -> IntArray:
        """The tile of every row (vectorized: one sort per box cut, none per row)."""
        n = len(ranks[0]) if ranks else 0
        out = np.zeros(n, dtype=np.int64)
        todo: list[tuple[Slabs | int, npt.NDArray[np.intp] | None]] = [(self.root, None)]
        while todo:
            node, idx = todo.pop()
            if isinstance(node, int):
                if idx is None:
                    out[:] = node
                else:
                    out[idx] = node
                continue
            col = ranks[node.dim] if idx is None else ranks[node.dim][idx]
            slab = _slab_table(node.cuts, self.bits)[col]
            order = np.argsort(slab, kind="stable")  # radix sort of small ints
            if idx is not None:
                order = idx[order]
            counts = np.bincount(slab, minlength=len(node.parts))
            start = 0
            for part, c in zip(node.parts, counts.tolist(), strict=True):
                if c:
                    todo.append((part, order[start : start + c]))
                start += c
        return out

    # -- persistence -------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"tiles": self.n_tiles, "slabs": self.root.to_json()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any], *, ndim: int, bits: int) -> Tiling:
        try:
            root = Slabs.from_json(d["slabs"])
            n = int(d["tiles"])
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidArgumentError(
                f"expected a tiling with 'tiles' and 'slabs', found {str(d)[:200]!r} ({e}); "
                f"the clustering spec is damaged: recluster with optimize(incremental=False)."
            ) from e
        return cls(ndim=ndim, bits=bits, root=root, n_tiles=n)


@functools.lru_cache(maxsize=4096)
def _slab_table(cuts: tuple[int, ...], bits: int) -> npt.NDArray[np.uint16]:
    """The slab of every rank (slabs are at most 2**bits, so 16-bit ids suffice)."""
    table = np.searchsorted(np.array(cuts, dtype=np.int64), np.arange(1 << bits), side="right")
    out = table.astype(np.uint16)
    out.setflags(write=False)
    return out


@dataclass(frozen=True)
class TiledCurve:
    """A tiling's keys as a curve over ranks. Hashable and pure, so
    :func:`lakelog.maintenance.clustering.curves.grid_keys` keeps a table of every cell's key for
    small grids, shared by every spec with this tiling."""

    tiling: Tiling
    curve: Curve

    def __call__(self, ranks: Sequence[U64Array], bits: int) -> U64Array:
        return self.tiling.keys(ranks, self.curve)


# -- measuring a layout -------------------------------------------------------------------


def layout_widths(ranks: Sequence[U64Array], bits: int, files: IntArray) -> npt.NDArray[np.float64]:
    """Row-weighted mean width of the files' boxes on each column, as a share of the grid
    (``files`` numbers the file of each row)."""
    if not len(files):
        return np.zeros(len(ranks))
    small = files.astype(np.uint16) if int(files.max()) < 1 << 16 else files
    order = np.argsort(small, kind="stable")  # a radix sort for up to 65,536 files
    f = files[order]
    starts = np.concatenate([[0], np.flatnonzero(f[1:] != f[:-1]) + 1])
    rows = np.diff(np.append(starts, len(f)))
    out = np.empty(len(ranks))
    for j, r in enumerate(ranks):
        v = r[order].astype(np.int64)
        width = np.maximum.reduceat(v, starts) - np.minimum.reduceat(v, starts) + 1
        out[j] = float((width * rows).sum()) / len(f) / (1 << bits)
    return out


def _score(widths: npt.NDArray[np.float64]) -> tuple[float, float]:
    """Widest column first, then all columns: no column is sacrificed for another."""
    return float(widths.max()), float(widths.sum())


def curve_files(curve_keys: U64Array, n: int) -> IntArray:
    """The file of each row when the plain curve is cut into ``n`` files."""
    keys = np.sort(curve_keys)
    cuts = file_cuts([Segment(key_start=0, key_end=KEY_MAX, rows=len(keys), files=n)], keys)
    starts = np.array([c.key_start for c in cuts], dtype=np.uint64)
    return (np.searchsorted(starts, curve_keys, side="right") - 1).astype(np.int64)


# -- building ------------------------------------------------------------------------------


def _apportion(n: int, weights: IntArray) -> list[int]:
    """``n`` split in proportion to ``weights`` (largest remainders), at least 1 each."""
    k = len(weights)
    if n <= k:
        return [1] * k  # caller guarantees n >= k
    ideal = (n - k) * weights / max(1, int(weights.sum()))
    base = np.floor(ideal).astype(np.int64)
    rest = (n - k) - int(base.sum())
    if rest > 0:
        base[np.argsort(-(ideal - base), kind="stable")[:rest]] += 1
    return [int(b) + 1 for b in base]


class _Builder:
    def __init__(self, ranks: Sequence[U64Array], bits: int) -> None:
        self.ranks = [r.astype(np.int64) for r in ranks]
        self.ndim = len(ranks)
        self.bits = bits
        self.top = 1 << bits
        self.boxes: list[tuple[list[int], list[int]]] = []

    def build(self, forced: Sequence[int | None], n: int) -> Slabs | int:
        self.boxes = []
        idx = np.arange(len(self.ranks[0]))
        node = self._node(idx, [0] * self.ndim, [self.top] * self.ndim, n, list(forced))
        return node

    def _leaf(self, lo: list[int], hi: list[int]) -> int:
        self.boxes.append((lo, hi))
        return len(self.boxes) - 1

    def _node(
        self,
        idx: npt.NDArray[np.intp],
        lo: list[int],
        hi: list[int],
        n: int,
        forced: list[int | None],
    ) -> Slabs | int:
        if n <= 1 or len(idx) < 2:
            return self._leaf(lo, hi)
        sides = np.array([h - low for low, h in zip(lo, hi, strict=True)], dtype=np.float64)
        first = forced[0] if forced else None
        rest = forced[1:]
        prefs = [first] if first is not None else []
        prefs += [int(d) for d in np.argsort(-sides, kind="stable") if d != first]
        for dim in prefs:
            side = (float(np.prod(sides)) / n) ** (1.0 / self.ndim)
            k = int(min(n, max(2, round(sides[dim] / side))))
            values = self.ranks[dim][idx]
            # rows below each rank: a histogram, not a sort
            below = np.concatenate([[0], np.cumsum(np.bincount(values, minlength=self.top))])
            # k slabs of near-equal tile counts, cut where their rows say
            per, extra = divmod(n, k)
            counts = per + (np.arange(k) * extra // k != (np.arange(k) + 1) * extra // k)
            pos = np.round(np.cumsum(counts)[:-1] * len(values) / n)
            cuts = np.unique(np.searchsorted(below, pos, side="right") - 1)
            lowest = int(np.searchsorted(below, 0, side="right")) - 1  # lowest rank held
            cuts = cuts[(cuts > lowest) & (cuts > lo[dim]) & (cuts < hi[dim])]
            if not len(cuts):
                continue  # one value along this side: try the next
            # the slabs' row counts decide their tile counts
            rows = np.diff(below[np.concatenate([[0], cuts, [self.top]])])
            tiles = _apportion(n, rows)  # len(cuts) < k <= n
            slab = _slab_table(tuple(int(c) for c in cuts), self.bits)[values]
            order = np.argsort(slab, kind="stable")
            parts: list[Slabs | int] = []
            edges = [lo[dim], *(int(c) for c in cuts), hi[dim]]
            start = 0
            for i, (count, t) in enumerate(zip(rows.tolist(), tiles, strict=True)):
                sub = idx[order[start : start + count]]
                start += count
                clo, chi = list(lo), list(hi)
                clo[dim], chi[dim] = edges[i], edges[i + 1]
                parts.append(self._node(sub, clo, chi, t, rest))
            return Slabs(dim=dim, cuts=tuple(int(c) for c in cuts), parts=tuple(parts))
        return self._leaf(lo, hi)


def _number(node: Slabs | int, ids: Mapping[int, int]) -> Slabs | int:
    if isinstance(node, int):
        return ids[node]
    return Slabs(dim=node.dim, cuts=node.cuts, parts=tuple(_number(p, ids) for p in node.parts))


def build_tiling(ranks: Sequence[U64Array], bits: int, n: int, curve: str) -> Tiling | None:
    """The best tiling of the sample's rank grid into ``n`` tiles of equal rows, or None
    when none beats cutting the plain curve into ``n`` files (by :data:`MIN_GAIN`)."""
    ndim = len(ranks)
    if n < 2 or ndim < 2 or not len(ranks[0]) or n > MAX_TILES or n * 8 > len(ranks[0]):
        return None
    fn = curves.hilbert_keys if curve == "hilbert" else curves.morton_keys
    sample = [np.asarray(r, dtype=np.uint64) for r in ranks]
    plain = _score(layout_widths(sample, bits, curve_files(fn(sample, bits), n)))
    builder = _Builder(sample, bits)
    # slabs first along each column; and, for few columns, two halves along each column
    # whose slabs run along two different columns
    trials = [_slabs_first(builder, d, n, ndim, bits, fn) for d in range(ndim)]
    if ndim <= BISECT_MAX_DIMS:
        trials += [
            _halves(builder, d, a, b, n, ndim, bits, fn)
            for d in range(ndim)
            for a, b in itertools.permutations(range(ndim), 2)
        ]
    best: tuple[tuple[float, float], Tiling] | None = None
    for tiling in trials:
        if tiling is None:
            continue
        score = _score(layout_widths(sample, bits, tiling.tile_of(sample)))
        if best is None or score < best[0]:
            best = (score, tiling)
    if best is None or best[0][0] > plain[0] * (1 - MIN_GAIN):
        return None
    return best[1]


def _slabs_first(
    builder: _Builder, dim: int, n: int, ndim: int, bits: int, fn: Any
) -> Tiling | None:
    """Recursive slabs, the first cut along ``dim``."""
    root = builder.build([dim], n)
    return _finish(builder, root, ndim, bits, fn)


def _halves(
    builder: _Builder, dim: int, a: int, b: int, n: int, ndim: int, bits: int, fn: Any
) -> Tiling | None:
    """Cut in two along ``dim``; the first half's slabs run along ``a``, the second's
    along ``b``."""
    if n < 4:
        return None
    values = builder.ranks[dim]
    below = np.concatenate([[0], np.cumsum(np.bincount(values, minlength=builder.top))])
    cut = int(np.searchsorted(below, round(len(values) * (n // 2) / n), side="right")) - 1
    if not 0 < cut < builder.top or below[cut] == 0:
        return None
    builder.boxes = []
    lo, hi = [0] * ndim, [builder.top] * ndim
    sel = builder.ranks[dim] < cut
    left_hi = list(hi)
    left_hi[dim] = cut
    right_lo = list(lo)
    right_lo[dim] = cut
    rows_left = int(sel.sum())
    tiles = _apportion(n, np.array([rows_left, len(values) - rows_left]))
    left = builder._node(np.flatnonzero(sel), lo, left_hi, tiles[0], [a])
    right = builder._node(np.flatnonzero(~sel), right_lo, hi, tiles[1], [b])
    root = Slabs(dim=dim, cuts=(cut,), parts=(left, right))
    return _finish(builder, root, ndim, bits, fn)


def _finish(builder: _Builder, root: Slabs | int, ndim: int, bits: int, fn: Any) -> Tiling | None:
    """Number the tiles in curve order of their centres."""
    if isinstance(root, int) or len(builder.boxes) < 2:
        return None
    centres = [
        np.array([(lo[j] + hi[j] - 1) // 2 for lo, hi in builder.boxes], dtype=np.uint64)
        for j in range(ndim)
    ]
    order = np.argsort(fn(centres, bits), kind="stable")
    ids = {int(old): new for new, old in enumerate(order)}
    numbered = _number(root, ids)
    assert isinstance(numbered, Slabs)
    return Tiling(ndim=ndim, bits=bits, root=numbered, n_tiles=len(builder.boxes))
