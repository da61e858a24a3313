"""How well a layout skips data, from file statistics alone.

Every figure here uses only each file's min/max per column, its row count
and its size, so it is cheap on any table and comparable across engines
(:meth:`FileBoxes.from_arrays` takes another engine's per-file stats).

* *Average overlap depth* of a column: total width of the files' [min, max]
  ranges over the width of their union (1.0 = no two files overlap; a table
  of N unclustered files approaches N).
* *Expected fraction of bytes read* by a range query of selectivity ``s``:
  the data's distribution is estimated from the files (rows spread evenly in
  each file's range); a query is a window holding a fraction ``s`` of the
  rows at a uniformly random position; a file is read when its range meets
  the window. The expectation has a closed form per file, and for boxes over
  several columns (independent windows) it is the product over columns.
* Explicit query boxes (``{"col": (lo, hi)}``) are evaluated exactly.
"""

from __future__ import annotations

import decimal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import InvalidArgumentError, LakelogError
from ...log import mapping
from ...log.snapshot import Snapshot

__all__ = ["ClusteringReport", "FileBoxes", "clustering_report", "plot_layout"]

F64 = npt.NDArray[np.float64]
Query = Mapping[str, tuple[Any, Any]]


def _to_float(values: Sequence[Any]) -> tuple[F64, list[Any] | None]:
    """Floats of the values (NaN for None); non-numbers are mapped to their rank.

    Returns the floats and, for ranked values, the sorted distinct values.
    """
    known = [v for v in values if v is not None]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in known):
        return np.array([np.nan if v is None else float(v) for v in values]), None
    if all(isinstance(v, (str, decimal.Decimal)) for v in known):
        try:
            return np.array(
                [np.nan if v is None else float(decimal.Decimal(v)) for v in values]
            ), None
        except (decimal.InvalidOperation, ValueError):
            pass
    order = sorted(set(known))
    rank = {v: float(i) for i, v in enumerate(order)}
    return np.array([np.nan if v is None else rank[v] for v in values]), order


@dataclass(frozen=True)
class FileBoxes:
    """Per-file size, rows and [min, max] of some columns (NaN where unknown)."""

    columns: tuple[str, ...]
    sizes: F64
    rows: F64
    lo: F64
    """shape (columns, files)"""
    hi: F64
    ranks: dict[str, list[Any]] = field(default_factory=dict)
    """For columns mapped to ranks (strings ...): the sorted distinct endpoints."""

    @property
    def num_files(self) -> int:
        return len(self.sizes)

    @classmethod
    def from_arrays(
        cls,
        columns: Sequence[str],
        *,
        sizes: Sequence[float],
        rows: Sequence[float],
        mins: Mapping[str, Sequence[Any]],
        maxs: Mapping[str, Sequence[Any]],
    ) -> FileBoxes:
        """From plain per-file lists (e.g. another engine's file statistics)."""
        n = len(sizes)
        lo = np.full((len(columns), n), np.nan)
        hi = np.full((len(columns), n), np.nan)
        ranks: dict[str, list[Any]] = {}
        for i, c in enumerate(columns):
            both, order = _to_float([*mins[c], *maxs[c]])
            if order is not None:
                ranks[c] = order
            lo[i], hi[i] = both[:n], both[n:]
            bad = np.isnan(lo[i]) | np.isnan(hi[i])
            lo[i][bad], hi[i][bad] = np.nan, np.nan
        return cls(
            columns=tuple(columns),
            sizes=np.asarray(sizes, dtype=np.float64),
            rows=np.asarray(rows, dtype=np.float64),
            lo=lo,
            hi=hi,
            ranks=ranks,
        )

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, columns: Sequence[str]) -> FileBoxes:
        files = list(snapshot.files())
        mins: dict[str, list[Any]] = {c: [] for c in columns}
        maxs: dict[str, list[Any]] = {c: [] for c in columns}
        schema = snapshot.schema  # the log keys statistics by physical name (format.md)
        stored = {
            c: mapping.physical_name(schema.field(c)) if c in schema.names else c for c in columns
        }
        for f in files:
            st = f.stats
            for c in columns:
                mins[c].append(None if st is None else st.min.get(stored[c]))
                maxs[c].append(None if st is None else st.max.get(stored[c]))
        return cls.from_arrays(
            columns,
            sizes=[f.size_bytes for f in files],
            rows=[f.num_rows for f in files],
            mins=mins,
            maxs=maxs,
        )

    def scalar(self, column: str, value: Any) -> float:
        """A query bound in this object's scale for ``column``."""
        order = self.ranks.get(column)
        if order is None:
            if isinstance(value, (str, decimal.Decimal)):
                return float(decimal.Decimal(value))
            return float(value)
        import bisect

        return float(bisect.bisect_left(order, value))

    # -- metrics -------------------------------------------------------------------------
    def overlap_depth(self, column: str) -> tuple[float, int]:
        """(average, maximum) overlap depth of the files' ranges of ``column``."""
        i = self.columns.index(column)
        ok = ~np.isnan(self.lo[i])
        lo, hi = self.lo[i][ok], self.hi[i][ok]
        if not len(lo):
            return float("nan"), 0
        order = np.argsort(lo, kind="stable")
        lo, hi = lo[order], hi[order]
        reach = np.maximum.accumulate(hi)
        starts = np.r_[True, lo[1:] > reach[:-1]]
        seg_id = np.cumsum(starts) - 1
        seg_lo = lo[starts]
        seg_hi = np.maximum.reduceat(hi, np.flatnonzero(starts))
        union = float((seg_hi - seg_lo).sum())
        widths = float((hi - lo).sum())
        # every range a point: files per distinct point
        avg = widths / union if union > 0 else len(lo) / max(1, int(seg_id[-1]) + 1)
        ev = np.concatenate([lo, hi])
        step = np.concatenate([np.ones(len(lo)), -np.ones(len(hi))])
        o = np.lexsort((-step, ev))  # opens before closes at equal values
        return avg, int(np.cumsum(step[o]).max())

    def _cdf(self, i: int) -> tuple[F64, F64, F64]:
        """Estimated CDF at each file's min (left limit) and max (right limit)."""
        ok = ~np.isnan(self.lo[i])
        lo, hi, w = self.lo[i][ok], self.hi[i][ok], self.rows[ok]
        total = w.sum()
        xs = np.unique(np.concatenate([lo, hi]))
        width = hi - lo
        point = width <= 0
        slope = np.where(point, 0.0, w / np.where(point, 1.0, width))
        dslope = np.zeros(len(xs))
        np.add.at(dslope, np.searchsorted(xs, lo), slope)
        np.add.at(dslope, np.searchsorted(xs, hi), -slope)
        jump = np.zeros(len(xs))
        np.add.at(jump, np.searchsorted(xs, lo[point]), w[point])
        slope_after = np.cumsum(dslope)
        gaps = np.diff(xs)
        inc = np.r_[0.0, slope_after[:-1] * gaps]
        right = np.cumsum(inc + jump)
        left = right - jump
        f_lo = np.full(self.num_files, 0.0)
        f_hi = np.full(self.num_files, 1.0)
        if total > 0:
            f_lo[ok] = left[np.searchsorted(xs, lo)] / total
            f_hi[ok] = right[np.searchsorted(xs, hi)] / total
        return f_lo, f_hi, ok.astype(np.float64)

    def match_probability(self, column: str, selectivity: float) -> F64:
        """Per file: probability that a random window of ``selectivity`` meets it."""
        s = float(selectivity)
        f_lo, f_hi, _ = self._cdf(self.columns.index(column))
        if s >= 1:
            return np.ones(self.num_files)
        # window [u, u + s] with u ~ U[0, 1 - s]; meets the file iff u in [f_lo - s, f_hi]
        a = np.clip(f_lo - s, 0.0, 1.0 - s)
        b = np.clip(f_hi, 0.0, 1.0 - s)
        return np.clip((b - a) / (1.0 - s), 0.0, 1.0)

    def expected_fraction(self, columns: Sequence[str], selectivity: float) -> float:
        """Expected fraction of bytes read by a box of ``selectivity`` on every column."""
        p = np.ones(self.num_files)
        for c in columns:
            p *= self.match_probability(c, selectivity)
        total = self.sizes.sum()
        return float((p * self.sizes).sum() / total) if total > 0 else 0.0

    def fractions(self, queries: Sequence[Query]) -> F64:
        """Fraction of bytes in files that can match each query box (exact)."""
        total = self.sizes.sum()
        out = np.zeros(len(queries))
        for q_i, q in enumerate(queries):
            hit = np.ones(self.num_files, dtype=bool)
            for c, (qlo, qhi) in q.items():
                if c not in self.columns:
                    raise InvalidArgumentError(
                        f"expected query columns among {list(self.columns)}, found {c!r}"
                    )
                i = self.columns.index(c)
                lo, hi = self.lo[i], self.hi[i]
                known = ~np.isnan(lo)
                meets = (lo <= self.scalar(c, qhi)) & (hi >= self.scalar(c, qlo))
                hit &= ~known | meets
            out[q_i] = (self.sizes[hit].sum() / total) if total > 0 else 0.0
        return out


@dataclass(frozen=True)
class ClusteringReport:
    """Data-skipping figures of one snapshot for some columns."""

    version: int | None
    columns: tuple[str, ...]
    file_count: int
    total_bytes: int
    selectivity: float
    per_column: dict[str, dict[str, float]]
    box_fraction: float
    """Expected fraction of bytes read by a box of ``selectivity`` on every column."""
    query_fractions: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": self.version,
            "columns": list(self.columns),
            "file_count": self.file_count,
            "total_bytes": self.total_bytes,
            "selectivity": self.selectivity,
            "per_column": self.per_column,
            "box_fraction": self.box_fraction,
        }
        if self.query_fractions:
            out["query_fractions"] = self.query_fractions
            out["mean_query_fraction"] = float(np.mean(self.query_fractions))
        return out

    def __str__(self) -> str:
        lines = [
            f"version {self.version}: {self.file_count} files, {self.total_bytes} bytes; "
            f"range queries of selectivity {self.selectivity:g}"
        ]
        for c, m in self.per_column.items():
            lines.append(
                f"  {c}: average overlap depth {m['avg_depth']:.2f} (max {m['max_depth']:.0f}), "
                f"expected fraction of bytes read {m['expected_fraction']:.3f}"
            )
        if len(self.columns) > 1:
            lines.append(f"  box on {', '.join(self.columns)}: {self.box_fraction:.4f}")
        if self.query_fractions:
            lines.append(
                f"  {len(self.query_fractions)} given queries: mean fraction "
                f"{float(np.mean(self.query_fractions)):.4f}"
            )
        return "\n".join(lines)


def _check_columns(snapshot: Snapshot, columns: Sequence[str]) -> tuple[str, ...]:
    cols = (columns,) if isinstance(columns, str) else tuple(columns)
    if not cols:
        raise InvalidArgumentError("expected at least one column, found none")
    unknown = [c for c in cols if c not in snapshot.schema.names]
    if unknown:
        raise InvalidArgumentError(
            f"expected columns of the table {snapshot.schema.names}, found unknown {unknown}"
        )
    return cols


def clustering_report(
    snapshot: Snapshot,
    columns: Sequence[str],
    *,
    selectivity: float = 0.01,
    queries: Sequence[Query] | None = None,
) -> ClusteringReport:
    """Overlap depth and expected bytes read for ``columns`` (file stats only)."""
    cols = _check_columns(snapshot, columns)
    if not 0 < selectivity <= 1:
        raise InvalidArgumentError(f"expected selectivity in (0, 1], found {selectivity}")
    boxes = FileBoxes.from_snapshot(snapshot, cols)
    per: dict[str, dict[str, float]] = {}
    for c in cols:
        avg, mx = boxes.overlap_depth(c)
        per[c] = {
            "avg_depth": avg,
            "max_depth": float(mx),
            "expected_fraction": boxes.expected_fraction([c], selectivity),
            "files_without_bounds": float(np.isnan(boxes.lo[cols.index(c)]).sum()),
        }
    return ClusteringReport(
        version=snapshot.version,
        columns=cols,
        file_count=boxes.num_files,
        total_bytes=int(boxes.sizes.sum()),
        selectivity=selectivity,
        per_column=per,
        box_fraction=boxes.expected_fraction(cols, selectivity),
        query_fractions=[] if not queries else [float(x) for x in boxes.fractions(queries)],
    )


def plot_layout(
    panels: Sequence[tuple[str, Snapshot | FileBoxes]],
    columns: Sequence[str],
    path: str,
) -> str:
    """Draw each file's [min, max] box over two columns, one panel per layout, to a PNG.

    ``panels`` is e.g. ``[("before (v3)", snap3), ("after (v5)", snap5)]``.
    Needs matplotlib (``pip install 'lakelog[plot]'``).
    """
    if len(columns) != 2:
        raise InvalidArgumentError(f"expected two columns to plot, found {list(columns)}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError as e:
        raise LakelogError(
            "expected matplotlib to draw the layout, found it missing; install it with "
            "pip install 'lakelog[plot]' or omit --plot."
        ) from e
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 6), squeeze=False)
    cx, cy = columns
    for ax, (title, src) in zip(axes[0], panels, strict=True):
        boxes = src if isinstance(src, FileBoxes) else FileBoxes.from_snapshot(src, columns)
        ix, iy = boxes.columns.index(cx), boxes.columns.index(cy)
        ok = ~(np.isnan(boxes.lo[ix]) | np.isnan(boxes.lo[iy]))
        x0, x1, y0, y1 = boxes.lo[ix][ok], boxes.hi[ix][ok], boxes.lo[iy][ok], boxes.hi[iy][ok]
        if len(x0):
            cmap = plt.get_cmap("tab20")
            for k in range(len(x0)):
                ax.add_patch(
                    Rectangle(
                        (x0[k], y0[k]),
                        max(x1[k] - x0[k], 0.0),
                        max(y1[k] - y0[k], 0.0),
                        facecolor=cmap(k % 20),
                        edgecolor="black",
                        alpha=0.25,
                        linewidth=0.6,
                    )
                )
            pad_x = (x1.max() - x0.min()) * 0.02 or 1.0
            pad_y = (y1.max() - y0.min()) * 0.02 or 1.0
            ax.set_xlim(x0.min() - pad_x, x1.max() + pad_x)
            ax.set_ylim(y0.min() - pad_y, y1.max() + pad_y)
        rep = boxes.expected_fraction(list(columns), 0.01)
        ax.set_title(
            f"{title}\n{boxes.num_files} files; a query of 1% of rows on each column "
            f"reads {rep:.1%} of bytes"
        )
        ax.set_xlabel(cx + (" (rank)" if cx in boxes.ranks else ""))
        ax.set_ylabel(cy + (" (rank)" if cy in boxes.ranks else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
