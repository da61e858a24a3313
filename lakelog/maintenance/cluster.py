"""Clustering specs and the incremental clustering planner.

A :class:`ClusterSpec` fixes how rows map to a ``uint64`` key: the columns,
the curve (``hilbert``, ``zorder``, or ``linear`` for ``sort_by``) and each
column's quantile boundaries. The spec is written, as JSON, into the footer
of every file clustered with it, and its fingerprint (``spec_id``) plus the
file's key range and tier go into the file's ``AddFile.tags``. Later runs
find the spec from the tags and read the boundaries back from a footer, so
keys of old and new files stay comparable; only a full run
(``incremental=False``), a change of columns or curve, or a table with no
clustered file computes new boundaries.

The incremental plan is leveled compaction in key space. Clustered files
have tier ``base`` (disjoint key ranges, about the target size) or ``delta``
(rows that arrived later, cut along an aligned grid of key ranges into files
of at least ``min_delta_bytes``). A run reads every *fresh* file (not
clustered with the current spec). Base files are grouped into *blocks* linked
by the delta files spanning them; a block is merged (base, delta and the fresh
rows of its key range sorted into new base files) once its pending rows reach
``1 / (max_rewrite_ratio - 2)`` of its base rows, densest first, at most
:data:`MAX_RUN_FRACTION` of the partition per run. Other fresh rows become
delta files, combined with the :data:`DELTA_FANIN` or more older delta files
that lie in the same key range. Each merge costs at most ``max_rewrite_ratio - 1`` bytes per
pending byte, so a run's cost grows with the new data, not with the
partition, and skewed appends are folded in where they land.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InvalidArgumentError
from ..io.writer import WriteOptions
from ..log.actions import DataFile
from . import curves
from .curves import ColumnBoundaries
from .plan import FileGroup
from .sort import KEY_MAX, Segment
from .tiling import Curve, TiledCurve, Tiling

__all__ = [
    "CURVES",
    "ClusterSpec",
    "PartitionPlan",
    "find_spec",
    "group_id",
    "is_clustered",
    "plan_partition",
    "spec_tags",
    "validate_clustering",
]

TAG_SPEC = "lakelog.clustering.spec"
TAG_COLUMNS = "lakelog.clustering.columns"
TAG_CURVE = "lakelog.clustering.curve"
TAG_TIER = "lakelog.clustering.tier"
TAG_KEY_MIN = "lakelog.clustering.key_min"
TAG_KEY_MAX = "lakelog.clustering.key_max"
FOOTER_KEY = "lakelog.clustering"

CURVES = ("hilbert", "zorder")
MAX_COLUMNS = 8
SPEC_VERSION = 1
TILED_SPEC_VERSION = 2
"""Specs with a tiling are version 2, so an older lakelog refuses them instead of
computing other keys; specs without one stay version 1 (and keep their ``spec_id``)."""
CURVE_BOUNDARIES = 510
"""Boundaries per column for curves: 512 ranks per axis (262,144 cells for two
columns) is far finer than the files of a partition, and keeps the spec small
enough for every footer (a few KiB compressed)."""
LINEAR_BOUNDARIES = 4094
MAX_RUN_FRACTION = 0.25
DELTA_FANIN = 4
"""Delta files of one delta segment that are merged into one when new rows arrive there."""
"""At most this share of a partition's base is merged by one incremental run."""


# -- spec ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterSpec:
    """Columns, curve and boundaries that define the clustering key of a row."""

    columns: tuple[str, ...]
    curve: str
    boundaries: tuple[ColumnBoundaries, ...] = field(repr=False)
    tiling: Tiling | None = field(default=None, repr=False)
    """Tiles of the rank grid (see :mod:`lakelog.maintenance.tiling`): rows are ordered
    tile by tile, by the curve within a tile. None: by the curve alone."""

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "version": SPEC_VERSION if self.tiling is None else TILED_SPEC_VERSION,
            "columns": list(self.columns),
            "curve": self.curve,
            "boundaries": [b.to_json() for b in self.boundaries],
        }
        if self.tiling is not None:
            d["tiling"] = self.tiling.to_json()
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any], schema: pa.Schema) -> ClusterSpec:
        if int(d.get("version", 0)) > TILED_SPEC_VERSION:
            raise InvalidArgumentError(
                f"expected a clustering spec version <= {TILED_SPEC_VERSION}, found "
                f"{d.get('version')}; it was written by a newer lakelog: upgrade lakelog."
            )
        cols = tuple(str(c) for c in d["columns"])
        bounds = tuple(
            ColumnBoundaries.from_json(b, schema.field(b["column"]).type) for b in d["boundaries"]
        )
        tiling = None
        if d.get("tiling") is not None:
            tiling = Tiling.from_json(d["tiling"], ndim=len(bounds), bits=bounds[0].bits)
        return cls(columns=cols, curve=str(d["curve"]), boundaries=bounds, tiling=tiling)

    def to_footer(self) -> bytes:
        """Compact form for Parquet footers: zlib-compressed JSON, base64."""
        text = json.dumps(self.to_json(), separators=(",", ":")).encode()
        return b"z:" + base64.b64encode(zlib.compress(text, 9))

    @classmethod
    def from_footer(cls, raw: bytes, schema: pa.Schema) -> ClusterSpec:
        if raw.startswith(b"z:"):
            raw = zlib.decompress(base64.b64decode(raw[2:]))
        return cls.from_json(json.loads(raw), schema)

    @cached_property
    def spec_id(self) -> str:
        """Fingerprint of the spec: equal ids mean comparable keys."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def bits(self) -> int:
        return self.boundaries[0].bits

    @property
    def key_bits(self) -> int:
        """Bits the key uses: keys are below ``2**key_bits``."""
        if self.tiling is not None:
            return self.tiling.key_bits
        return sum(b.bits for b in self.boundaries)

    def with_tiling(self, tiling: Tiling | None) -> ClusterSpec:
        return dataclasses.replace(self, tiling=tiling)

    def ranks(self, batch: pa.RecordBatch | pa.Table) -> list[npt.NDArray[np.uint64]]:
        """Each clustering column's rank of every row."""
        return [curves.rank_keys(batch.column(b.column), b) for b in self.boundaries]

    @property
    def curve_fn(self) -> Curve:
        """The curve over ranks (for tiled specs)."""
        return curves.hilbert_keys if self.curve == "hilbert" else curves.morton_keys

    def keys(self, batch: pa.RecordBatch | pa.Table) -> npt.NDArray[np.uint64]:
        """The ``uint64`` key of every row (vectorized)."""
        if self.curve == "linear":
            out = np.zeros(batch.num_rows, dtype=np.uint64)
            for b in self.boundaries:
                out <<= np.uint64(b.bits)
                out |= curves.rank_keys(batch.column(b.column), b)
            return out
        if self.tiling is None:
            keys: npt.NDArray[np.uint64] = curves.curve_keys(
                batch,
                self.boundaries,
                self.curve,  # type: ignore[arg-type]
            ).to_numpy()
            return keys
        tiled = TiledCurve(tiling=self.tiling, curve=self.curve_fn)
        return curves.grid_keys(self.ranks(batch), self.bits, tiled)


def validate_clustering(
    schema: pa.Schema,
    partition_by: Sequence[str],
    *,
    zorder_by: Sequence[str] | str | None,
    sort_by: Sequence[str] | str | None,
    curve: str,
) -> tuple[tuple[str, ...], str]:
    """Check the clustering request against the schema; returns (columns, curve)."""
    if (zorder_by is None) == (sort_by is None):
        raise InvalidArgumentError(
            "expected exactly one of zorder_by=[...] (a space-filling curve over several "
            "columns) or sort_by=[...] (a linear sort), found "
            + ("both" if zorder_by is not None else "neither")
        )
    given = zorder_by if zorder_by is not None else sort_by
    name = "zorder_by" if zorder_by is not None else "sort_by"
    cols = (given,) if isinstance(given, str) else tuple(given or ())
    if not cols:
        raise InvalidArgumentError(f"expected at least one column in {name}, found none")
    if len(cols) > MAX_COLUMNS:
        raise InvalidArgumentError(
            f"expected at most {MAX_COLUMNS} columns in {name}, found {len(cols)}; a curve "
            f"over more columns keeps too few bits per column to help any of them."
        )
    if len(set(cols)) != len(cols):
        raise InvalidArgumentError(f"expected distinct columns in {name}, found {list(cols)}")
    for c in cols:
        if not isinstance(c, str) or c not in schema.names:
            raise InvalidArgumentError(
                f"expected {name} columns of the table {schema.names}, found unknown {c!r}"
            )
        if c in partition_by:
            raise InvalidArgumentError(
                f"expected {name} columns that are not partition columns, found {c!r}; every "
                f"file holds one value of it already, so clustering on it does nothing."
            )
        t = schema.field(c).type
        try:
            curves.compute_boundaries(pa.table({c: pa.array([], t)}), [c])
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"column {c!r} of {name}: {e}") from e
    if zorder_by is not None:
        if curve not in CURVES:
            raise InvalidArgumentError(f"expected curve one of {list(CURVES)}, found {curve!r}")
        return cols, curve
    return cols, "linear"


def spec_bits(columns: Sequence[str], curve: str) -> int:
    """Bits per column: just enough for the boundaries (fewer bits, faster curves)."""
    cap = LINEAR_BOUNDARIES if curve == "linear" else CURVE_BOUNDARIES
    need = (cap + 2).bit_length() - 1  # 2**bits - 2 >= cap
    if curve == "linear":
        return min(need, curves.MAX_COLUMN_BITS, 64 // len(columns))
    return min(need, curves.default_bits(len(columns)))


def boundaries_from_sample(sample: pa.Table, columns: Sequence[str], curve: str) -> ClusterSpec:
    """A new spec from a sample of the rows (see :func:`curves.compute_boundaries`)."""
    cap = LINEAR_BOUNDARIES if curve == "linear" else CURVE_BOUNDARIES
    bits = spec_bits(columns, curve)
    bounds = curves.compute_boundaries(
        sample, list(columns), bits=bits, max_boundaries=min(cap, (1 << bits) - 2)
    )
    return ClusterSpec(columns=tuple(columns), curve=curve, boundaries=tuple(bounds))


# -- file tags -------------------------------------------------------------------------


def spec_tags(spec: ClusterSpec, *, tier: str, key_min: int, key_max: int) -> dict[str, str]:
    return {
        TAG_SPEC: spec.spec_id,
        TAG_COLUMNS: ",".join(spec.columns),
        TAG_CURVE: spec.curve,
        TAG_TIER: tier,
        TAG_KEY_MIN: str(key_min),
        TAG_KEY_MAX: str(key_max),
    }


def is_clustered(f: DataFile, spec_id: str) -> bool:
    t = f.tags
    return t.get(TAG_SPEC) == spec_id and TAG_KEY_MIN in t and TAG_KEY_MAX in t


def _key_range(f: DataFile) -> tuple[int, int]:
    return int(f.tags[TAG_KEY_MIN]), int(f.tags[TAG_KEY_MAX])


def find_spec(files: Sequence[DataFile], columns: Sequence[str], curve: str) -> DataFile | None:
    """A file clustered with the spec holding the most bytes for these columns and curve."""
    want_cols, best, best_bytes = ",".join(columns), None, -1
    by_spec: dict[str, tuple[int, DataFile]] = {}
    for f in files:
        t = f.tags
        if t.get(TAG_COLUMNS) == want_cols and t.get(TAG_CURVE) == curve and TAG_SPEC in t:
            total, first = by_spec.get(t[TAG_SPEC], (0, f))
            by_spec[t[TAG_SPEC]] = (total + f.size_bytes, first)
    for total, first in by_spec.values():
        if total > best_bytes:
            best, best_bytes = first, total
    return best


def group_id(files: Sequence[DataFile]) -> str:
    digest = hashlib.sha256("\n".join(sorted(f.path for f in files)).encode())
    return digest.hexdigest()[:16]


# -- file sizes ----------------------------------------------------------------------------


ROW_SAMPLE = 65_536
"""Rows encoded to estimate the size of a clustered row."""
TILE_FILL = (0.7, 1.1)
"""A full partition is cut into one file per tile when its tiles would hold this share
of the target size (the tiling was made for the file count of the largest partition)."""


def encoded_row_bytes(sample: pa.Table | None, spec: ClusterSpec, options: WriteOptions) -> float:
    """Bytes per row of ``sample`` ordered by key and encoded as the output will be
    (0 when the sample is too small to tell)."""
    if sample is None or sample.num_rows < 1000:
        return 0.0
    ordered = sample.take(pa.array(np.argsort(spec.keys(sample), kind="stable")))
    sink = pa.BufferOutputStream()
    codec = options.compression
    use_dict = options.use_dictionary
    pq.write_table(
        ordered,
        sink,
        compression=None if codec == "none" else codec,
        use_dictionary=list(use_dict) if isinstance(use_dict, tuple) else use_dict,
        row_group_size=options.row_group_size,
    )
    size: int = sink.getvalue().size
    return size / int(sample.num_rows)


def sized_segments(
    segments: Sequence[Segment], row_bytes: float, target: int, spec: ClusterSpec
) -> list[Segment]:
    """Base segments re-counted in files of at most the target size, by the encoded size
    of a row. With a tiling, tiles about the target size become one file each, and
    larger ones (grown by appends) the same number of equal files each, so the cuts
    fall on the tiles' edges and halves (:func:`lakelog.maintenance.sort.file_cuts`)."""
    if row_bytes <= 0:
        return list(segments)
    out = []
    for s in segments:
        if s.tier != "base":
            out.append(s)
            continue
        nbytes = s.rows * row_bytes
        files = max(1, math.ceil(nbytes / target))
        if spec.tiling is not None:
            tiles = spec.tiling.tiles_between(s.key_start, s.key_end)
            per_tile = nbytes / tiles
            if per_tile > TILE_FILL[1] * target:
                files = tiles * math.ceil(per_tile / target)
            elif per_tile >= TILE_FILL[0] * target:
                files = tiles
        out.append(msgspec.structs.replace(s, files=files))
    return out


# -- planning one partition ------------------------------------------------------------


class PartitionPlan(msgspec.Struct, frozen=True, kw_only=True):
    """The group of one partition and how its ordered rows are cut into files."""

    group: FileGroup
    segments: tuple[Segment, ...]
    fresh_bytes: int
    full: bool


def _out_files(nbytes: float, target: int) -> int:
    return max(1, round(nbytes / target))


def _full(
    partition: dict[str, str | None], files: Sequence[DataFile], target: int, fresh: int
) -> PartitionPlan:
    nbytes = sum(f.size_bytes for f in files)
    n = _out_files(nbytes, target)
    seg = Segment(key_start=0, key_end=KEY_MAX, rows=sum(f.num_rows for f in files), files=n)
    group = FileGroup(
        group_id=group_id(files), partition=partition, files=tuple(files), estimated_output_files=n
    )
    return PartitionPlan(group=group, segments=(seg,), fresh_bytes=fresh, full=True)


@dataclass
class _Unit:
    """Overlap-closed run of base files: the smallest key range a run rewrites."""

    start: int
    kmax: int
    files: list[DataFile]

    @property
    def nbytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def rows(self) -> int:
        return sum(f.num_rows for f in self.files)


def plan_partition(
    partition: dict[str, str | None],
    files: Sequence[DataFile],
    spec_id: str,
    *,
    target_file_size: int,
    incremental: bool,
    max_rewrite_ratio: float,
    min_delta_bytes: int,
    key_bits: int,
    fresh_keys: Callable[[Sequence[DataFile]], npt.NDArray[np.uint64]],
) -> PartitionPlan | None:
    """Plan one partition; ``None`` when it needs nothing.

    ``fresh_keys`` returns the sorted keys of the rows of the given (fresh)
    files; it is called only when the run is incremental and has to choose
    key ranges.
    """
    if not files:
        return None
    if not incremental:
        return _full(partition, files, target_file_size, sum(f.size_bytes for f in files))
    clustered = [f for f in files if is_clustered(f, spec_id)]
    fresh = [f for f in files if not is_clustered(f, spec_id)]
    fresh_bytes = sum(f.size_bytes for f in fresh)
    if not fresh:
        return None
    total = sum(f.size_bytes for f in files)
    base = [f for f in clustered if f.tags.get(TAG_TIER) != "delta"]
    delta = [f for f in clustered if f.tags.get(TAG_TIER) == "delta"]
    if not base or max_rewrite_ratio * fresh_bytes >= total:
        return _full(partition, files, target_file_size, fresh_bytes)

    units: list[_Unit] = []
    for f in sorted(base, key=_key_range):
        lo, hi = _key_range(f)
        if units and lo <= units[-1].kmax:
            units[-1].files.append(f)
            units[-1].kmax = max(units[-1].kmax, hi)
        else:
            units.append(_Unit(start=lo, kmax=hi, files=[f]))
    units[0].start = 0
    starts = np.array([u.start for u in units], dtype=np.uint64)
    ends = [*(int(x) for x in starts[1:]), KEY_MAX]
    nu = len(units)
    keys = fresh_keys(fresh)
    cut = np.searchsorted(keys, starts, side="left")
    fresh_in = np.diff(np.append(cut, len(keys))).astype(np.float64)

    # Blocks: units linked by the delta files spanning them. A block is the smallest
    # range a run can merge without leaving part of a delta file behind.
    spans = []
    for f in delta:
        lo, hi = _key_range(f)
        first = max(0, int(np.searchsorted(starts, np.uint64(lo), side="right")) - 1)
        last = max(0, int(np.searchsorted(starts, np.uint64(hi), side="right")) - 1)
        spans.append((first, last, f))
    block_of = np.arange(nu)
    reach = np.arange(nu)
    for first, last, _ in spans:
        reach[first] = max(reach[first], last)
    block_id, end = -1, -1
    for u in range(nu):
        if u > end:
            block_id += 1
        end = max(end, int(reach[u]))
        block_of[u] = block_id
    nblocks = block_id + 1
    base_rows = np.zeros(nblocks)
    base_bytes = np.zeros(nblocks)
    pending = np.zeros(nblocks)
    delta_bytes = np.zeros(nblocks)
    for u, unit in enumerate(units):
        base_rows[block_of[u]] += unit.rows
        base_bytes[block_of[u]] += unit.nbytes
        pending[block_of[u]] += fresh_in[u]
    for first, _, f in spans:
        pending[block_of[first]] += f.num_rows
        delta_bytes[block_of[first]] += f.size_bytes

    # A block is merged once its pending rows (new + delta) reach 1 / (ratio - 2) of its
    # base rows: new bytes are written once as delta, then merged at a cost of at most
    # (ratio - 1) bytes each, so the amortized cost stays near ``ratio`` per new byte.
    # The densest blocks go first; at most MAX_RUN_FRACTION of the partition per run
    # (but always at least one block, so a run makes progress).
    density = pending / (base_rows + 1.0)
    threshold = 1.0 / max(max_rewrite_ratio - 2.0, 1e-9)
    cap = max((max_rewrite_ratio - 1.0) * fresh_bytes, MAX_RUN_FRACTION * total)
    chosen = np.zeros(nblocks, dtype=bool)
    spent = 0.0
    for blk in np.argsort(-density, kind="stable"):
        if density[blk] < threshold:
            break
        cost = base_bytes[blk] + delta_bytes[blk]
        if spent > 0 and spent + cost > cap:
            continue
        chosen[blk] = True
        spent += cost
    selected = chosen[block_of]

    row_bytes = float(base_bytes.sum()) / max(1.0, float(base_rows.sum()))  # as clustered
    grid = _delta_grid(starts, fresh_in[~selected].sum() * row_bytes, min_delta_bytes, key_bits)
    segments: list[Segment] = []
    i = 0
    while i < nu:
        k = i
        while k + 1 < nu and selected[k + 1] == selected[i]:
            k += 1
        if selected[i]:
            blocks = set(block_of[i : k + 1].tolist())
            moved = float(fresh_in[i : k + 1].sum()) + sum(
                f.num_rows for first, _, f in spans if block_of[first] in blocks
            )
            rows = sum(units[u].rows for u in range(i, k + 1)) + moved
            nbytes = sum(units[u].nbytes for u in range(i, k + 1)) + moved * row_bytes
            segments.append(
                Segment(
                    key_start=int(starts[i]),
                    key_end=ends[k],
                    rows=round(rows),
                    files=_out_files(nbytes, target_file_size),
                    tier="base",
                )
            )
        else:
            bounds = [u for u in range(i + 1, k + 1) if u in grid]
            for a, b in zip([i, *bounds], [*(u - 1 for u in bounds), k], strict=True):
                segments.append(
                    Segment(
                        key_start=int(starts[a]),
                        key_end=ends[b],
                        rows=int(fresh_in[a : b + 1].sum()),
                        files=1,
                        tier="delta",
                    )
                )
        i = k + 1
    inputs = list(fresh)
    for u, unit in enumerate(units):
        if selected[u]:
            inputs.extend(unit.files)
    inputs.extend(f for first, _, f in spans if selected[first])
    # Delta files pile up in each grid cell between merges: once DELTA_FANIN of them lie
    # in one delta segment, they are rewritten with its new rows into one file.
    for seg in segments:
        if seg.tier != "delta":
            continue
        inside = [
            f
            for first, last, f in spans
            if not selected[first]
            and int(starts[first]) >= seg.key_start
            and ends[last] <= seg.key_end
        ]
        if len(inside) >= DELTA_FANIN:
            inputs.extend(inside)
    inputs = list({f.path: f for f in inputs}.values())  # each file once, in order
    group = FileGroup(
        group_id=group_id(inputs),
        partition=partition,
        files=tuple(inputs),
        estimated_output_files=sum(s.files for s in segments if s.rows > 0),
    )
    return PartitionPlan(group=group, segments=tuple(segments), fresh_bytes=fresh_bytes, full=False)


def _delta_grid(
    starts: npt.NDArray[np.uint64], nbytes: float, min_bytes: int, key_bits: int
) -> set[int]:
    """Units where delta files may start: the unit start nearest each point of an aligned
    grid of ``2**level`` equal key ranges, with ``level`` such that a range holds about
    ``min_bytes`` of new rows. Grids of different runs nest, so delta files of different
    runs share their edges and blocks stay local."""
    regions = max(1.0, nbytes / max(1, min_bytes))
    level = min(key_bits, max(0, int(np.floor(np.log2(regions)))))
    if level == 0 or len(starts) < 2:
        return set()
    points = np.arange(1, 1 << level, dtype=np.float64) * float(2 ** (key_bits - level))
    pos = np.searchsorted(starts.astype(np.float64), points)
    pos = np.clip(pos, 1, len(starts) - 1)
    left = starts[pos - 1].astype(np.float64)
    right = starts[pos].astype(np.float64)
    nearest = np.where(points - left < right - points, pos - 1, pos)
    return {int(u) for u in nearest if u > 0}
