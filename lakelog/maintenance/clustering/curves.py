"""Space-filling-curve keys (Z-order / Hilbert) over rank-normalized columns.

Clustering orders the rows of a table by a curve key computed over 2-4 columns
so that each output file covers a compact box of the multi-column key space.
Raw-byte interleaving (as done by several table formats) behaves badly on
skewed data, large integers, strings with long common prefixes and floats, so
each column is first mapped to ``bits`` bits by its *rank* against quantile
boundaries computed from a sample:

* :func:`compute_boundaries` picks per-column sorted, unique boundaries;
* :func:`rank_keys` maps values to ``[0, 2**bits - 2]`` (order preserving,
  spread over the whole range), nulls and NaNs to ``2**bits - 1``;
* :func:`morton_keys` / :func:`hilbert_keys` combine per-column ranks into one
  ``uint64`` key; :func:`curve_keys` does all of it for a table.

Everything is vectorized with numpy / ``pyarrow.compute``; Python loops only
run over bits, columns, or boundaries (never over rows).
"""

from __future__ import annotations

import base64
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

from ...errors import InvalidArgumentError

__all__ = [
    "DEFAULT_MAX_BITS",
    "MAX_COLUMN_BITS",
    "ColumnBoundaries",
    "CurveName",
    "compute_boundaries",
    "curve_keys",
    "default_bits",
    "grid_keys",
    "hilbert_keys",
    "morton_keys",
    "rank_keys",
]

CurveName = Literal["zorder", "hilbert"]

#: Default per-column resolution: 65536 buckets is far finer than the number of
#: files a clustering run produces, while keeping boundary lists small enough to
#: ship as JSON (at most 65534 values per column).
DEFAULT_MAX_BITS = 16
#: Hard cap on per-column bits; keeps rank scaling exact in ``uint64``.
MAX_COLUMN_BITS = 32

U64Array = npt.NDArray[np.uint64]

_Kind = Literal["int", "float", "bool", "temporal32", "temporal64", "string", "binary", "decimal"]


def default_bits(ncolumns: int) -> int:
    """Default bits per column: ``min(16, 63 // ncolumns)``.

    The total key then has at most 63 bits, so it is also a valid non-negative
    ``int64`` (engines / Parquet writers without unsigned support).
    """
    if ncolumns < 1 or ncolumns > 63:
        raise InvalidArgumentError(f"need 1..63 columns, got {ncolumns}")
    return min(DEFAULT_MAX_BITS, 63 // ncolumns)


def _value_type(t: pa.DataType) -> pa.DataType:
    """The type used for boundaries: dictionary types are decoded."""
    return t.value_type if pa.types.is_dictionary(t) else t


def _kind(t: pa.DataType) -> _Kind:
    """Classify a (decoded) Arrow type; raise ``InvalidArgumentError`` if unsupported."""
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return "float"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return "temporal32"
    if (
        pa.types.is_date64(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_time64(t)
        or pa.types.is_duration(t)
    ):
        return "temporal64"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_decimal(t):
        return "decimal"
    raise InvalidArgumentError(
        f"expected a column of integer, float, boolean, temporal, string, binary or decimal "
        f"type for curve clustering, found {t}; cluster on a derived column instead."
    )


def _coerce(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """Decode dictionaries and cast ``arr`` to ``target`` if needed."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not arr.type.equals(target):
        arr = pc.cast(arr, target)
    return arr


def _chunks(values: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    if isinstance(values, pa.ChunkedArray):
        return list(values.chunks)
    if isinstance(values, pa.Array):
        return [values]
    raise InvalidArgumentError(
        f"expected a pyarrow Array or ChunkedArray, got {type(values).__name__}"
    )


def _to_numpy(arr: pa.Array, kind: _Kind) -> npt.NDArray[Any]:
    """Numeric view of a numeric/temporal array; nulls become 0 (mask separately)."""
    if kind == "bool":
        arr = arr.cast(pa.uint8())
    elif kind == "temporal32":
        arr = arr.view(pa.int32())
    elif kind == "temporal64":
        arr = arr.view(pa.int64())
    if arr.null_count:
        arr = arr.fill_null(0)
    out: npt.NDArray[Any] = arr.to_numpy(zero_copy_only=False)
    return out


def _sort(arr: pa.Array) -> pa.Array:
    return arr.take(pc.array_sort_indices(arr))


def _dedupe_sorted(arr: pa.Array) -> pa.Array:
    """Drop consecutive duplicates of a sorted, null-free array."""
    n = len(arr)
    if n <= 1:
        return arr
    differs = pc.not_equal(arr.slice(1), arr.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return arr.filter(pa.array(np.concatenate([[True], differs])))


def _clean(arr: pa.Array, kind: _Kind) -> pa.Array:
    """Drop nulls and NaNs; map -0.0 to 0.0."""
    arr = arr.filter(pc.invert(arr.is_null(nan_is_null=True)))
    if kind == "float" and len(arr):
        arr = pc.if_else(pc.equal(arr, 0), pa.scalar(0.0, arr.type), arr)
    return arr


def _evenly_spaced(arr: pa.Array, count: int) -> pa.Array:
    """``count`` elements of ``arr`` at positions ``i * len / (count + 1)``, i = 1..count."""
    pos = (np.arange(1, count + 1, dtype=np.int64) * len(arr)) // (count + 1)
    return arr.take(pa.array(pos))


@dataclass(frozen=True)
class ColumnBoundaries:
    """Sorted, de-duplicated quantile boundaries of one column, in the column's Arrow type.

    Dictionary columns store boundaries in the dictionary's value type.
    ``len(boundaries) <= 2**bits - 2``: ranks ``0..len(boundaries)`` take at most
    ``2**bits - 1`` codes and the last code ``2**bits - 1`` is reserved for nulls.
    """

    column: str
    boundaries: pa.Array
    bits: int

    def __post_init__(self) -> None:
        b = self.boundaries
        if not isinstance(b, pa.Array):
            raise InvalidArgumentError("boundaries must be a pyarrow Array")
        if pa.types.is_dictionary(b.type):
            raise InvalidArgumentError("boundaries must not be dictionary-encoded")
        _kind(b.type)
        if not 1 <= self.bits <= MAX_COLUMN_BITS:
            raise InvalidArgumentError(f"bits must be in 1..{MAX_COLUMN_BITS}, got {self.bits}")
        if len(b) > (1 << self.bits) - 2:
            raise InvalidArgumentError(f"{len(b)} boundaries do not fit in {self.bits} bits")
        if b.is_null(nan_is_null=True).true_count:
            raise InvalidArgumentError("boundaries must not contain nulls or NaN")
        if len(b) > 1 and not pc.all(pc.less(b.slice(0, len(b) - 1), b.slice(1))).as_py():
            raise InvalidArgumentError("boundaries must be strictly increasing")

    def to_json(self) -> dict[str, Any]:
        """JSON-serializable form; exact for every supported type."""
        b = self.boundaries
        kind = _kind(b.type)
        values: list[Any]
        if kind == "float":
            values = [float(x).hex() for x in b.to_pylist()]
        elif kind == "temporal32":
            values = b.view(pa.int32()).to_pylist()
        elif kind == "temporal64":
            values = b.view(pa.int64()).to_pylist()
        elif kind == "binary":
            values = [base64.b64encode(x).decode("ascii") for x in b.to_pylist()]
        elif kind == "decimal":
            values = [str(x) for x in b.to_pylist()]
        else:  # int, bool, string: native JSON values
            values = b.to_pylist()
        return {
            "column": self.column,
            "bits": self.bits,
            "type": str(b.type),
            "boundaries": values,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], type: pa.DataType) -> ColumnBoundaries:
        """Inverse of :meth:`to_json`; ``type`` is the column's Arrow type."""
        t = _value_type(type)
        if "type" in d and d["type"] != str(t):
            raise InvalidArgumentError(f"boundaries were computed for type {d['type']}, not {t}")
        kind = _kind(t)
        raw: list[Any] = list(d["boundaries"])
        if kind == "float":
            arr = pa.array([float.fromhex(x) for x in raw], t)
        elif kind == "temporal32":
            arr = pa.array(raw, pa.int32()).view(t)
        elif kind == "temporal64":
            arr = pa.array(raw, pa.int64()).view(t)
        elif kind == "binary":
            arr = pa.array([base64.b64decode(x) for x in raw], t)
        elif kind == "decimal":
            arr = pa.array([Decimal(x) for x in raw], t)
        else:
            arr = pa.array(raw, t)
        return cls(column=str(d["column"]), boundaries=arr, bits=int(d["bits"]))


def compute_boundaries(
    sample: pa.Table,
    columns: Sequence[str],
    *,
    bits: int | None = None,
    max_boundaries: int | None = None,
) -> list[ColumnBoundaries]:
    """Per-column boundaries from a sample of the table.

    ``bits`` defaults to :func:`default_bits` (``min(16, 63 // len(columns))``).
    With ``k = 2**bits - 2`` slots: if a column has at most ``k`` distinct
    non-null values, every distinct value becomes a boundary. Otherwise the
    boundaries are ``k`` equal-frequency quantiles (sorted sample at evenly
    spaced positions), de-duplicated; slots freed by de-duplication (heavy
    hitters) are filled with values evenly spaced among the *distinct* values,
    so skewed tails still get resolution. Nulls and NaNs are ignored.
    ``max_boundaries`` caps ``k`` (ranks are still spread over all ``bits``), which
    keeps the boundaries small enough to store in every clustered file's footer.
    """
    if not columns:
        raise InvalidArgumentError("need at least one column")
    if len(set(columns)) != len(columns):
        raise InvalidArgumentError(f"duplicate columns: {list(columns)}")
    nbits = default_bits(len(columns)) if bits is None else bits
    if not 1 <= nbits <= MAX_COLUMN_BITS:
        raise InvalidArgumentError(f"bits must be in 1..{MAX_COLUMN_BITS}, got {nbits}")
    if nbits * len(columns) > 64:
        raise InvalidArgumentError(f"{len(columns)} columns x {nbits} bits exceed 64 bits")
    slots = (1 << nbits) - 2
    if max_boundaries is not None:
        if max_boundaries < 1:
            raise InvalidArgumentError(f"expected max_boundaries >= 1, found {max_boundaries}")
        slots = min(slots, max_boundaries)
    result: list[ColumnBoundaries] = []
    for name in columns:
        col = sample.column(name)
        t = _value_type(col.type)
        kind = _kind(t)
        pieces = [_coerce(c, t) for c in _chunks(col)]
        arr = pa.concat_arrays(pieces) if pieces else pa.array([], t)
        ordered = _sort(_clean(arr, kind))
        distinct = _dedupe_sorted(ordered)
        if len(distinct) <= slots:
            bounds = distinct
        else:
            bounds = _dedupe_sorted(_evenly_spaced(ordered, slots))
            spare = slots - len(bounds)
            if spare > 0:
                extra = _evenly_spaced(distinct, spare)
                bounds = _dedupe_sorted(_sort(pa.concat_arrays([bounds, extra])))
        result.append(ColumnBoundaries(column=name, boundaries=bounds, bits=nbits))
    return result


def _search_generic(bounds: pa.Array, values: pa.Array) -> npt.NDArray[np.int64]:
    """Vectorized ``searchsorted(bounds, values, side="right")`` via Arrow comparisons.

    Binary search run on all rows at once: one ``take`` + ``less_equal`` per step,
    ``len(bounds).bit_length()`` steps. Works for any type Arrow can compare.
    """
    n, nb = len(values), len(bounds)
    lo = np.zeros(n, dtype=np.int64)
    if nb == 0 or n == 0:
        return lo
    hi = np.full(n, nb, dtype=np.int64)
    if values.null_count:
        values = values.fill_null(bounds[0])
    for _ in range(nb.bit_length()):
        active = lo < hi
        mid = (lo + hi) // 2
        probe = bounds.take(pa.array(np.minimum(mid, nb - 1)))
        le = pc.less_equal(probe, values).to_numpy(zero_copy_only=False)
        lo = np.where(active & le, mid + 1, lo)
        hi = np.where(active & ~le, mid, hi)
    return lo


_GRID = 1 << 16
"""Cells of the grid :func:`_numeric_rank` lays over the boundaries' range."""


def _numeric_rank(
    b: npt.NDArray[Any], v: npt.NDArray[Any], *, grid: int = _GRID, min_rows: int = 4 * _GRID
) -> npt.NDArray[np.int64]:
    """``searchsorted(b, v, side="right")``, exact, in a few linear passes.

    A monotone map ``cell(x)`` puts values and boundaries on a grid of
    ``grid`` cells over ``[b[0], b[-1]]``. Because it is monotone, every
    boundary in a lower cell than ``v`` is ``<= v`` and every one in a higher cell
    is ``> v``: the rank of ``v`` is the number of boundaries below its cell,
    unless its cell holds boundaries too; only those rows (about
    ``len(b) / grid`` of them on even data) take the binary search. Inputs of
    fewer than ``min_rows`` values go straight to the binary search.
    """
    nb = len(b)
    if len(v) < min_rows or nb < 2:
        return np.searchsorted(b, v, side="right").astype(np.int64, copy=False)
    lo, hi = float(b[0]), float(b[-1])
    scale = grid / (hi - lo) if hi > lo else math.inf
    # a range wider than the float maximum (hi - lo overflows) scales to 0: binary search
    if not (math.isfinite(lo) and math.isfinite(hi) and math.isfinite(scale) and scale > 0):
        return np.searchsorted(b, v, side="right").astype(np.int64, copy=False)

    def cell(x: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        c = x.astype(np.float64)  # a copy; rounding is monotone
        with np.errstate(over="ignore", invalid="ignore"):  # huge values become +-inf
            c -= lo
            c *= scale
            c += 1.0
        np.fmax(c, 0.0, out=c)  # below the range, -inf and NaN (NaN ranks are masked later)
        np.fmin(c, float(grid + 1), out=c)  # above the range, +inf
        return c.astype(np.int64)

    cb = cell(b)
    edges = np.arange(grid + 3, dtype=np.int64)
    below = np.searchsorted(cb, edges, side="left").astype(np.int32)
    shared = below[1:] > below[:-1]  # the cell holds at least one boundary
    cv = cell(v)
    ranks = below[cv].astype(np.int64)
    slow = np.flatnonzero(shared[cv])
    if len(slow):
        ranks[slow] = np.searchsorted(b, v[slow], side="right")
    return ranks


def _rank_chunk(chunk: pa.Array, bounds: ColumnBoundaries) -> U64Array:
    b = bounds.boundaries
    kind = _kind(b.type)
    arr = _coerce(chunk, b.type)
    nb = len(b)
    if kind in ("string", "binary", "decimal"):
        ranks = _search_generic(b, arr)
    else:
        ranks = _numeric_rank(_to_numpy(b, kind), _to_numpy(arr, kind))
    span = (1 << bounds.bits) - 2  # largest non-null key
    if nb == 0:
        keys = np.zeros(len(arr), dtype=np.uint64)
    elif nb == span:
        keys = ranks.astype(np.uint64)
    else:
        # floor(rank * span / nb), exact since rank, span < 2**32; one gather from a table
        scaled = np.arange(nb + 1, dtype=np.uint64) * np.uint64(span) // np.uint64(nb)
        keys = scaled[ranks]
    if arr.null_count or kind == "float":
        null = arr.is_null(nan_is_null=True).to_numpy(zero_copy_only=False)
        keys[null] = np.uint64(span + 1)
    return keys


def rank_keys(values: pa.Array | pa.ChunkedArray, bounds: ColumnBoundaries) -> U64Array:
    """Order-preserving ``uint64`` keys in ``[0, 2**bits)`` for one column.

    ``rank`` = number of boundaries ``<= value`` (``searchsorted`` right), scaled
    from ``[0, len(boundaries)]`` onto ``[0, 2**bits - 2]`` so every column uses
    its full bit range. Nulls and float NaNs get ``2**bits - 1``; ``-0.0 == 0.0``.
    Values are dictionary-decoded and cast to the boundaries' type first.
    """
    chunks = _chunks(values)
    if not chunks:
        return np.zeros(0, dtype=np.uint64)
    if len(chunks) > 1:  # one pass over all rows: the grid in _numeric_rank pays off on many
        t = bounds.boundaries.type
        chunks = [pa.concat_arrays([_coerce(c, t) for c in chunks])]
    return _rank_chunk(chunks[0], bounds)


def _check_ranks(ranks: Sequence[npt.ArrayLike], bits: int) -> list[U64Array]:
    if len(ranks) == 0:
        raise InvalidArgumentError("need at least one rank array")
    if bits < 1 or bits * len(ranks) > 64:
        raise InvalidArgumentError(f"{len(ranks)} dims x {bits} bits must be within 1..64 bits")
    cols: list[U64Array] = []
    for r in ranks:
        a = np.asarray(r)
        if a.ndim != 1 or not (a.dtype.kind in "iu" or a.size == 0):
            raise InvalidArgumentError("ranks must be 1-D integer arrays")
        if a.size and a.dtype.kind == "i" and a.min() < 0:
            raise InvalidArgumentError("ranks must be non-negative")
        u = a.astype(np.uint64)
        if u.size and bits < 64 and u.max() >= np.uint64(1 << bits):
            raise InvalidArgumentError(f"ranks must be < 2**{bits}")
        cols.append(u)
    if len({c.shape[0] for c in cols}) != 1:
        raise InvalidArgumentError("rank arrays must have equal lengths")
    return cols


def _interleave(cols: Sequence[U64Array], bits: int) -> U64Array:
    one = np.uint64(1)
    out = np.zeros(cols[0].shape[0], dtype=np.uint64)
    tmp = np.empty_like(out)
    for level in range(bits - 1, -1, -1):
        shift = np.uint64(level)
        for c in cols:
            out <<= one
            np.right_shift(c, shift, out=tmp)
            tmp &= one
            out |= tmp
    return out


def morton_keys(ranks: Sequence[npt.ArrayLike], bits: int) -> U64Array:
    """Z-order key: interleave bits from the top level down, column 0 most significant."""
    return _curve(_check_ranks(ranks, bits), bits, _interleave)


def hilbert_keys(ranks: Sequence[npt.ArrayLike], bits: int) -> U64Array:
    """n-dimensional Hilbert index (Skilling 2004, axes -> transpose -> interleave).

    Vectorized over rows; loops only over bits and dimensions. Consecutive
    indices are grid neighbours (Manhattan distance 1). One dimension: identity.
    """
    cols = _check_ranks(ranks, bits)
    if len(cols) == 1:
        return cols[0]
    return _curve(cols, bits, _hilbert)


_Curve = Callable[[Sequence[U64Array], int], U64Array]
TABLE_BITS = 20
"""Grids of at most ``2**TABLE_BITS`` cells are mapped through a cached table of the
whole curve (8 MiB at most): one gather per row instead of a pass per bit."""
_CHUNK_ROWS = 1 << 15
"""Rows per block when the curve is computed bit by bit, so the block stays in cache."""


@functools.lru_cache(maxsize=8)
def _curve_table(fn: _Curve, ndim: int, bits: int) -> U64Array:
    """The key of every cell, indexed by the ranks concatenated (column 0 highest)."""
    cells = np.arange(1 << (ndim * bits), dtype=np.uint64)
    mask = np.uint64((1 << bits) - 1)
    axes = [(cells >> np.uint64((ndim - 1 - i) * bits)) & mask for i in range(ndim)]
    table = fn(axes, bits)
    table.setflags(write=False)
    return table


def grid_keys(cols: Sequence[U64Array], bits: int, fn: _Curve) -> U64Array:
    """``fn(cols, bits)`` for many rows: through a cached table of every cell when the grid
    is small, else in cache-sized blocks. ``fn`` must be hashable and pure (curves, and
    :class:`lakelog.maintenance.clustering.tiling.TiledCurve`)."""
    return _curve(cols, bits, fn)


def _curve(cols: Sequence[U64Array], bits: int, fn: _Curve) -> U64Array:
    n, ndim = len(cols[0]), len(cols)
    if ndim * bits <= TABLE_BITS and n >= 1 << max(0, ndim * bits - 4):
        index = cols[0].copy()
        for c in cols[1:]:
            index <<= np.uint64(bits)
            index |= c
        return _curve_table(fn, ndim, bits)[index]
    if n <= _CHUNK_ROWS:
        return fn(cols, bits)
    out = np.empty(n, dtype=np.uint64)
    for start in range(0, n, _CHUNK_ROWS):
        stop = start + _CHUNK_ROWS
        out[start:stop] = fn([c[start:stop] for c in cols], bits)
    return out


def _hilbert(cols: Sequence[U64Array], bits: int) -> U64Array:
    """Skilling's transform over two or more dimensions (one is the identity, handled by
    :func:`hilbert_keys`)."""
    x = [c.copy() for c in cols]
    ndim = len(x)
    one, zero = np.uint64(1), np.uint64(0)
    m = np.empty_like(x[0])
    t = np.empty_like(x[0])
    x0 = x[0]
    # Inverse undo of excess work, from the top bit down. Branch-free: m is the
    # low-bit mask where bit `level` of x[i] is set (invert x0), else 0 (exchange).
    for level in range(bits - 1, 0, -1):
        sh, low = np.uint64(level), np.uint64((1 << level) - 1)
        for i in range(ndim):
            np.right_shift(x[i], sh, out=m)
            m &= one
            np.subtract(zero, m, out=m)  # 1 -> all ones, 0 -> 0
            m &= low
            if i == 0:
                x0 ^= m
                continue
            np.bitwise_xor(x0, x[i], out=t)
            t &= m ^ low
            x0 ^= m
            x0 ^= t
            x[i] ^= t
    # Gray encode.
    for i in range(1, ndim):
        x[i] ^= x[i - 1]
    t[:] = 0
    for level in range(bits - 1, 0, -1):
        np.right_shift(x[ndim - 1], np.uint64(level), out=m)
        m &= one
        np.subtract(zero, m, out=m)
        m &= np.uint64((1 << level) - 1)
        t ^= m
    for i in range(ndim):
        x[i] ^= t
    return _interleave(x, bits)


def curve_keys(
    table: pa.Table | pa.RecordBatch,
    boundaries: Sequence[ColumnBoundaries],
    curve: CurveName,
) -> pa.Array:
    """``uint64`` curve key per row over the columns named by ``boundaries`` (in order)."""
    if not boundaries:
        raise InvalidArgumentError("need at least one ColumnBoundaries")
    widths = {b.bits for b in boundaries}
    if len(widths) != 1:
        raise InvalidArgumentError(f"all columns must use the same bits, got {sorted(widths)}")
    bits = widths.pop()
    ranks = [rank_keys(table.column(b.column), b) for b in boundaries]
    if curve == "zorder":
        keys = morton_keys(ranks, bits)
    elif curve == "hilbert":
        keys = hilbert_keys(ranks, bits)
    else:
        raise InvalidArgumentError(f"unknown curve {curve!r}")
    return pa.array(keys, type=pa.uint64())
