"""The clustering planner: a snapshot and a spec in, a :class:`ClusterPlan` out.

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


:func:`plan_clustering` plans every partition with :func:`plan_partition`; the only
data it reads is the keys of fresh files, through the ``fresh_keys`` function it is
given (:func:`lakelog.maintenance.clustering.sampling.fresh_keys_reader`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ...io.parquet_settings import parquet_options
from ...io.writer import ParquetOptions, check_codec
from ...log.actions import DataFile
from ...log.snapshot import Snapshot
from ...properties import get_float, get_int, get_str
from ...transforms import spec_key
from ..groups import FileGroup, SavedPlan
from ..options import ClusteringOptions
from .sort import KEY_MAX, Segment
from .spec import TAG_TIER, ClusterSpec, is_clustered, key_range

__all__ = [
    "ClusterPlan",
    "ClusterSettings",
    "FreshKeys",
    "PartitionPlan",
    "already_optimal",
    "cluster_options",
    "group_id",
    "plan_clustering",
    "plan_partition",
]

FreshKeys = Callable[[Sequence[DataFile]], npt.NDArray[np.uint64]]
"""Sorted ``uint64`` keys of every row of the given files (under the run's spec)."""

CLUSTER_PLAN_FORMAT = 1
"""Version of the clustering plan JSON this library writes and the newest it reads."""

MAX_RUN_FRACTION = 0.25
"""At most this share of a partition's base is merged by one incremental run."""

DELTA_FANIN = 4
"""Delta files of one delta segment that are merged into one when new rows arrive there."""

MIN_DELTA_BYTES = 64 * 1024
"""Delta files smaller than this cost more in footers and files than they save."""

PROP_RATIO = "lakelog.clustering.max_rewrite_ratio"

PROP_DELTA = "lakelog.clustering.min_delta_file_ratio"

PROP_GROUP = "lakelog.clustering.max_group_bytes"
PROP_ROW_GROUP = "lakelog.clustering.row_group_size"


class ClusterSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The resolved options a clustering plan was made with (and its outputs are written
    with): :class:`~lakelog.maintenance.options.ClusteringOptions` filled from the table."""

    target_file_size: int
    row_group_size: int
    compression: str
    max_group_bytes: int
    max_rewrite_ratio: float
    min_delta_bytes: int
    parquet: ParquetOptions = ParquetOptions()
    """Page index, bloom filters and page size of the output (lakelog.parquet.*)."""
    partition_spec: tuple[str, ...] = ()
    partition_spec_id: int = -1
    """The table's current spec of transforms and its id (-1: none): a group of an
    older spec is written into it (format.md, "Partition transforms and evolution")."""


class ClusterPlan(SavedPlan, frozen=True, kw_only=True):
    """What an optimize run rewrites, decided from the snapshot at ``read_version``.

    Like a compaction plan it carries every source file whole, and round-trips to
    JSON (:meth:`to_json`), so it can be saved and executed later or elsewhere.
    """

    KIND = "optimize"
    FORMAT = CLUSTER_PLAN_FORMAT
    NOUN = "clustering plan"
    OTHER_KIND_HINT = "; run compaction plans with `lakelog compact --plan`."

    plan_format: int = CLUSTER_PLAN_FORMAT
    kind: str = "optimize"
    table_id: str
    read_version: int
    partition_by: tuple[str, ...]
    spec: str
    """The clustering spec as JSON (columns, curve, boundaries)."""
    spec_id: str
    incremental: bool
    options: ClusterSettings
    snapshot_file_count: int
    snapshot_total_bytes: int
    groups: tuple[FileGroup, ...] = ()
    segments: dict[str, tuple[Segment, ...]] = msgspec.field(default_factory=dict)
    fresh_bytes: int = 0
    full_groups: tuple[str, ...] = ()
    partition_filter: str | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(json.loads(self.spec)["columns"])

    @property
    def curve(self) -> str:
        return str(json.loads(self.spec)["curve"])

    def cluster_spec(self, schema: pa.Schema) -> ClusterSpec:
        return ClusterSpec.from_json(json.loads(self.spec), schema)

    def describe(self, *, files: bool = False) -> str:
        """A human summary; ``files=True`` also lists every source file."""
        spec = json.loads(self.spec)
        lines = [
            f"optimize plan at version {self.read_version}: {spec['curve']} over "
            f"{', '.join(spec['columns'])}"
            + (f" in {spec['tiling']['tiles']} tiles" if spec.get("tiling") else "")
            + f" (spec {self.spec_id}, "
            f"{'incremental' if self.incremental else 'full'}); {len(self.groups)} groups, "
            f"{self.source_file_count} of {self.snapshot_file_count} files "
            f"({self.source_bytes} bytes, {self.fresh_bytes} new) -> file count "
            f"~{self.estimated_after_file_count}"
        ]
        for g in self.groups:
            segs = self.segments.get(g.group_id, ())
            base = sum(1 for s in segs if s.tier == "base")
            lines.append(
                f"  group {g.group_id} partition {g.partition or '-'}: {len(g.files)} files, "
                f"{g.total_bytes} bytes, {g.num_rows:,} rows -> {len(segs)} key segments "
                f"({base} base), ~{g.estimated_output_files} files"
            )
            if files:
                lines.extend(f"    {f.path} ({f.size_bytes} bytes)" for f in g.files)
        if self.partition_filter:
            lines.insert(1, f"  partition filter: {self.partition_filter}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


def group_id(files: Sequence[DataFile]) -> str:
    digest = hashlib.sha256("\n".join(sorted(f.path for f in files)).encode())
    return digest.hexdigest()[:16]


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
    fresh_keys: FreshKeys,
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

    units = _units(base)
    starts = np.array([u.start for u in units], dtype=np.uint64)
    keys = fresh_keys(fresh)
    cut = np.searchsorted(keys, starts, side="left")
    fresh_in = np.diff(np.append(cut, len(keys))).astype(np.float64)
    blocks = _Blocks.of(units, starts, delta, fresh_in)
    selected = blocks.choose(max_rewrite_ratio, fresh_bytes, total)
    row_bytes = float(blocks.base_bytes.sum()) / max(1.0, float(blocks.base_rows.sum()))
    grid = _delta_grid(starts, fresh_in[~selected].sum() * row_bytes, min_delta_bytes, key_bits)
    segments = _segments(
        units, starts, blocks, selected, fresh_in, grid, row_bytes, target_file_size
    )
    inputs = list(fresh)
    for u, unit in enumerate(units):
        if selected[u]:
            inputs.extend(unit.files)
    inputs.extend(f for first, _, f in blocks.spans if selected[first])
    inputs.extend(_full_delta_cells(segments, blocks.spans, selected, starts))
    inputs = list({f.path: f for f in inputs}.values())  # each file once, in order
    group = FileGroup(
        group_id=group_id(inputs),
        partition=partition,
        files=tuple(inputs),
        estimated_output_files=sum(s.files for s in segments if s.rows > 0),
    )
    return PartitionPlan(group=group, segments=tuple(segments), fresh_bytes=fresh_bytes, full=False)


def _units(base: Sequence[DataFile]) -> list[_Unit]:
    """The base files as overlap-closed runs in key order; the first starts at key 0."""
    units: list[_Unit] = []
    for f in sorted(base, key=key_range):
        lo, hi = key_range(f)
        if units and lo <= units[-1].kmax:
            units[-1].files.append(f)
            units[-1].kmax = max(units[-1].kmax, hi)
        else:
            units.append(_Unit(start=lo, kmax=hi, files=[f]))
    units[0].start = 0
    return units


@dataclass
class _Blocks:
    """Units linked by the delta files spanning them. A block is the smallest range a run
    can merge without leaving part of a delta file behind."""

    spans: list[tuple[int, int, DataFile]]
    """Each delta file with the first and last unit it spans."""
    block_of: npt.NDArray[np.int64]
    """The block of each unit."""
    base_rows: npt.NDArray[np.float64]
    base_bytes: npt.NDArray[np.float64]
    pending: npt.NDArray[np.float64]
    """Rows waiting to be merged into each block: new rows and its delta files' rows."""
    delta_bytes: npt.NDArray[np.float64]

    @classmethod
    def of(
        cls,
        units: Sequence[_Unit],
        starts: npt.NDArray[np.uint64],
        delta: Sequence[DataFile],
        fresh_in: npt.NDArray[np.float64],
    ) -> _Blocks:
        nu = len(units)
        spans = []
        for f in delta:
            lo, hi = key_range(f)
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
        out = cls(
            spans,
            block_of,
            np.zeros(nblocks),
            np.zeros(nblocks),
            np.zeros(nblocks),
            np.zeros(nblocks),
        )
        for u, unit in enumerate(units):
            out.base_rows[block_of[u]] += unit.rows
            out.base_bytes[block_of[u]] += unit.nbytes
            out.pending[block_of[u]] += fresh_in[u]
        for first, _, f in spans:
            out.pending[block_of[first]] += f.num_rows
            out.delta_bytes[block_of[first]] += f.size_bytes
        return out

    def choose(
        self, max_rewrite_ratio: float, fresh_bytes: int, total: int
    ) -> npt.NDArray[np.bool_]:
        """Whether each unit is merged by this run.

        A block is merged once its pending rows (new + delta) reach 1 / (ratio - 2) of
        its base rows: new bytes are written once as delta, then merged at a cost of at
        most (ratio - 1) bytes each, so the amortized cost stays near ``ratio`` per new
        byte. The densest blocks go first; at most MAX_RUN_FRACTION of the partition per
        run (but always at least one block, so a run makes progress)."""
        density = self.pending / (self.base_rows + 1.0)
        threshold = 1.0 / max(max_rewrite_ratio - 2.0, 1e-9)
        cap = max((max_rewrite_ratio - 1.0) * fresh_bytes, MAX_RUN_FRACTION * total)
        chosen = np.zeros(len(self.pending), dtype=bool)
        spent = 0.0
        for blk in np.argsort(-density, kind="stable"):
            if density[blk] < threshold:
                break
            cost = self.base_bytes[blk] + self.delta_bytes[blk]
            if spent > 0 and spent + cost > cap:
                continue
            chosen[blk] = True
            spent += cost
        selected: npt.NDArray[np.bool_] = chosen[self.block_of]
        return selected


def _segments(
    units: Sequence[_Unit],
    starts: npt.NDArray[np.uint64],
    blocks: _Blocks,
    selected: npt.NDArray[np.bool_],
    fresh_in: npt.NDArray[np.float64],
    grid: set[int],
    row_bytes: float,
    target_file_size: int,
) -> list[Segment]:
    """The key segments of a run: each run of merged units one base segment (its files
    sized to the target), each run of other units delta segments cut at ``grid``."""
    nu = len(units)
    ends = [*(int(x) for x in starts[1:]), KEY_MAX]
    block_of = blocks.block_of
    segments: list[Segment] = []
    i = 0
    while i < nu:
        k = i
        while k + 1 < nu and selected[k + 1] == selected[i]:
            k += 1
        if selected[i]:
            merged = set(block_of[i : k + 1].tolist())
            moved = float(fresh_in[i : k + 1].sum()) + sum(
                f.num_rows for first, _, f in blocks.spans if block_of[first] in merged
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
    return segments


def _full_delta_cells(
    segments: Sequence[Segment],
    spans: Sequence[tuple[int, int, DataFile]],
    selected: npt.NDArray[np.bool_],
    starts: npt.NDArray[np.uint64],
) -> list[DataFile]:
    """Delta files pile up in each grid cell between merges: once DELTA_FANIN of them lie
    in one delta segment, they are rewritten with its new rows into one file."""
    ends = [*(int(x) for x in starts[1:]), KEY_MAX]
    out: list[DataFile] = []
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
            out.extend(inside)
    return out


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


def already_optimal(files: Sequence[DataFile], target_file_size: int) -> bool:
    """Whether a partition's layout cannot be improved by clustering: a single file of
    at most the target size. Files are skipped whole by their min/max, and one file's
    box is the partition's whatever its row order, so rewriting it would only spend a
    commit (partitions clustered with the current spec need nothing either; see
    :func:`plan_partition`)."""
    return len(files) == 1 and files[0].size_bytes <= target_file_size


def plan_clustering(
    snapshot: Snapshot,
    spec: ClusterSpec,
    options: ClusterSettings,
    *,
    incremental: bool,
    fresh_keys: FreshKeys,
    files: Sequence[DataFile] | None = None,
) -> ClusterPlan:
    """Plan every partition of ``files`` (default: all live files of the snapshot).

    ``fresh_keys`` returns the sorted keys of the rows of fresh files
    (:func:`lakelog.maintenance.clustering.sampling.fresh_keys_reader`); nothing
    else is read.
    """
    by_part: dict[tuple[tuple[tuple[str, str | None], ...], str | None], list[DataFile]] = {}
    for f in snapshot.files() if files is None else files:
        # one group per partition of a spec of transforms too (format version 8)
        key = (tuple(sorted(f.partition.items())), spec_key(f.tags))
        by_part.setdefault(key, []).append(f)
    plans: list[PartitionPlan] = []
    for key in sorted(by_part, key=str):
        if already_optimal(by_part[key], options.target_file_size):
            continue
        pp = plan_partition(
            dict(key[0]),
            by_part[key],
            spec.spec_id,
            target_file_size=options.target_file_size,
            incremental=incremental,
            max_rewrite_ratio=options.max_rewrite_ratio,
            min_delta_bytes=options.min_delta_bytes,
            key_bits=spec.key_bits,
            fresh_keys=fresh_keys,
        )
        if pp is not None:
            plans.append(pp)
    return ClusterPlan(
        table_id=snapshot.table_id,
        read_version=snapshot.version,
        partition_by=snapshot.partition_by,
        spec=json.dumps(spec.to_json()),
        spec_id=spec.spec_id,
        incremental=incremental,
        options=options,
        snapshot_file_count=snapshot.num_files,
        snapshot_total_bytes=snapshot.total_bytes,
        groups=tuple(p.group for p in plans),
        segments={p.group.group_id: p.segments for p in plans},
        fresh_bytes=sum(p.fresh_bytes for p in plans),
        full_groups=tuple(p.group.group_id for p in plans if p.full),
    )


def cluster_options(snap: Snapshot, options: ClusteringOptions | None = None) -> ClusterSettings:
    """The output settings of ``options`` (default: all unset): unset fields filled from
    the table properties (the given ones were checked when ``options`` was made)."""
    options = options or ClusteringOptions()
    props = snap.properties
    target = options.target_file_size or get_int(props, "lakelog.target_file_size")
    rg = options.row_group_size
    if rg is None:  # small row groups: the unit most readers skip by
        rg = min(get_int(props, "lakelog.row_group_size"), get_int(props, PROP_ROW_GROUP))
    codec = check_codec(options.compression or get_str(props, "lakelog.compression"))
    group = options.max_group_bytes or get_int(props, PROP_GROUP)
    current = snap.partition_spec
    ratio = get_float(props, PROP_RATIO)  # >= 1 and in (0, 1]: the getters keep the
    delta = get_float(props, PROP_DELTA)  # declared ranges (lakelog.properties)
    return ClusterSettings(
        target_file_size=target,
        row_group_size=rg,
        compression=codec,
        max_group_bytes=group,
        max_rewrite_ratio=ratio,
        min_delta_bytes=min(target, max(MIN_DELTA_BYTES, int(target * delta))),
        parquet=parquet_options(props),
        partition_spec=() if current is None else current.texts,
        partition_spec_id=-1 if current is None else current.spec_id,
    )
