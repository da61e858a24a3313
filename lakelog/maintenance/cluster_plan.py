"""Planning an optimize run: options, the clustering spec, and the plan.

Shared by the embedded executor (:mod:`lakelog.maintenance.optimize`) and the
Spark one (:mod:`lakelog.spark.maintenance`): :func:`prepare_optimize`
validates every argument before any work, resolves the clustering spec (the
one the clustered files carry, or boundaries from a seeded sample of the
clustering columns) and plans each partition
(:func:`lakelog.maintenance.cluster.plan_partition`);
:func:`optimize_report` turns the groups an executor rewrote and committed
into the compaction :class:`MaintenanceReport` with clustering fields.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ..errors import InvalidArgumentError
from ..io.writer import WriteOptions, check_codec
from ..log.actions import DataFile
from ..log.snapshot import Snapshot
from ..properties import get_float, get_int, get_str
from ..storage import Storage
from ..table import Table
from .cluster import (
    CURVES,
    FOOTER_KEY,
    ROW_SAMPLE,
    ClusterSpec,
    PartitionPlan,
    boundaries_from_sample,
    encoded_row_bytes,
    find_spec,
    plan_partition,
    validate_clustering,
)
from .plan import FileGroup, partition_matcher, positive_int
from .report import MaintenanceReport, rewrite_report
from .rewrite import GroupResult, dictionary_columns, file_schema_of, read_group
from .sort import Segment
from .tiling import build_tiling

__all__ = [
    "ClusterOptions",
    "ClusterPlan",
    "PreparedOptimize",
    "already_optimal",
    "check_flag",
    "cluster_options",
    "dataset_of",
    "load_spec",
    "optimize_report",
    "plan_clustering",
    "prepare_optimize",
    "resolve_spec",
    "sample_rows",
    "spread_files",
]

SAMPLE_ROWS = 200_000
HEAD_FILES = 32
"""Files whose first rows estimate the encoded size of a clustered row."""
SPREAD_SAMPLE_ROWS = 5 * SAMPLE_ROWS
"""Rows read for the sample when any file is a fair sample of the others."""
MIN_SPREAD = 0.5
"""A file "spreads" when its min/max cover at least this share of a column's range."""
MIN_DELTA_BYTES = 64 * 1024
"""Delta files smaller than this cost more in footers and files than they save."""
PROP_RATIO = "lakelog.clustering.max_rewrite_ratio"
PROP_DELTA = "lakelog.clustering.min_delta_file_ratio"
PROP_GROUP = "lakelog.clustering.max_group_bytes"


class ClusterOptions(msgspec.Struct, frozen=True, kw_only=True):
    target_file_size: int
    row_group_size: int
    compression: str
    max_group_bytes: int
    max_rewrite_ratio: float
    min_delta_bytes: int


class ClusterPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What an optimize run rewrites; satisfies the compaction commit's plan protocol."""

    kind: str = "optimize"
    table_id: str
    read_version: int
    partition_by: tuple[str, ...]
    spec: str
    """The clustering spec as JSON (columns, curve, boundaries)."""
    spec_id: str
    incremental: bool
    options: ClusterOptions
    snapshot_file_count: int
    snapshot_total_bytes: int
    groups: tuple[FileGroup, ...] = ()
    segments: dict[str, tuple[Segment, ...]] = {}
    fresh_bytes: int = 0
    full_groups: tuple[str, ...] = ()

    @property
    def source_file_count(self) -> int:
        return sum(len(g.files) for g in self.groups)

    @property
    def source_bytes(self) -> int:
        return sum(g.total_bytes for g in self.groups)

    @property
    def estimated_after_file_count(self) -> int:
        out = sum(g.estimated_output_files for g in self.groups)
        return self.snapshot_file_count - self.source_file_count + out

    def cluster_spec(self, schema: pa.Schema) -> ClusterSpec:
        return ClusterSpec.from_json(json.loads(self.spec), schema)

    def to_json(self) -> str:
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> ClusterPlan:
        try:
            return msgspec.json.decode(text, type=cls)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise InvalidArgumentError(
                f"expected a clustering plan saved with ClusterPlan.to_json(), found: {e}"
            ) from e

    def describe(self) -> str:
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
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


# -- spec resolution (reads a footer or a sample) -----------------------------------------


def load_spec(storage: Storage, f: DataFile, schema: pa.Schema) -> ClusterSpec | None:
    """The spec stored in the footer of a clustered file (None if unreadable)."""
    try:
        with storage.arrow_filesystem().open_input_file(storage.full(f.path)) as src:
            meta = pq.read_metadata(src).metadata or {}
        raw = meta.get(FOOTER_KEY.encode())
        if raw is None:
            return None
        return ClusterSpec.from_footer(raw, schema)
    except (OSError, ValueError, KeyError, zlib.error, pa.ArrowException):
        return None


def dataset_of(storage: Storage, files: Sequence[DataFile], schema: pa.Schema) -> ds.Dataset:
    fs = storage.arrow_filesystem()
    fmt = ds.ParquetFileFormat()
    frags = [
        fmt.make_fragment(storage.full(f.path), filesystem=fs, file_size=f.size_bytes)
        for f in files
    ]
    return ds.FileSystemDataset(frags, schema, fmt, fs)


def sample_rows(
    storage: Storage, files: Sequence[DataFile], schema: pa.Schema, columns: Sequence[str]
) -> pa.Table:
    """About :data:`SAMPLE_ROWS` rows of ``columns``, drawn uniformly (seeded).

    Reads the columns of every file, unless every file spans most of every
    column's range (:func:`spread_files`): a subset of the files of a table
    clustered or sorted on the columns would be a biased sample, since each of
    its files holds one region of the key space.
    """
    rng = np.random.default_rng(0)
    if all(_ordered_as_numbers(schema.field(c).type) for c in columns):
        files = spread_files(files, columns, rng) or files
    total = sum(f.num_rows for f in files)
    p = min(1.0, SAMPLE_ROWS / max(1, total))
    parts = []
    for batch in dataset_of(storage, files, schema).to_batches(columns=list(columns)):
        if p >= 1.0:
            parts.append(batch)
        elif batch.num_rows:
            parts.append(batch.filter(pa.array(rng.random(batch.num_rows) < p)))
    sub = pa.schema([schema.field(c) for c in columns])
    return pa.Table.from_batches(parts, schema=sub)


def _ordered_as_numbers(t: pa.DataType) -> bool:
    """Whether file stats of this type compare as numbers (see :class:`FileStats`)."""
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_temporal(t)
        or pa.types.is_decimal(t)
    )


def spread_files(
    files: Sequence[DataFile], columns: Sequence[str], rng: np.random.Generator
) -> list[DataFile] | None:
    """A seeded random subset of ``files`` holding about :data:`SPREAD_SAMPLE_ROWS` rows,
    if each file's min/max covers at least :data:`MIN_SPREAD` of every column's
    range over all files (as ingest files do); otherwise None. The columns' stats
    must compare as numbers."""
    total = sum(f.num_rows for f in files)
    if total <= 2 * SPREAD_SAMPLE_ROWS:
        return None
    for c in columns:
        try:
            lo = np.array([float(f.stats.min[c]) for f in files])  # type: ignore[union-attr]
            hi = np.array([float(f.stats.max[c]) for f in files])  # type: ignore[union-attr]
        except (AttributeError, KeyError, TypeError, ValueError):
            return None  # no stats, or not numbers: nothing to judge the spread by
        width = float(hi.max() - lo.min())
        if not np.isfinite(width) or width <= 0 or ((hi - lo) < MIN_SPREAD * width).any():
            return None
    order = rng.permutation(len(files))
    rows = np.cumsum([files[i].num_rows for i in order])
    take = int(np.searchsorted(rows, SPREAD_SAMPLE_ROWS)) + 1
    return [files[i] for i in sorted(order[:take])]


def fresh_keys_reader(storage: Storage, schema: pa.Schema, spec: ClusterSpec) -> Any:
    def read(files: Sequence[DataFile]) -> npt.NDArray[np.uint64]:
        parts = [
            spec.keys(b)
            for b in dataset_of(storage, files, schema).to_batches(columns=list(spec.columns))
            if b.num_rows
        ]
        keys = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
        keys.sort()
        return keys

    return read


def resolve_spec(
    storage: Storage,
    files: Sequence[DataFile],
    schema: pa.Schema,
    partition_by: Sequence[str],
    columns: Sequence[str],
    curve: str,
    *,
    incremental: bool,
    options: ClusterOptions,
) -> ClusterSpec:
    """The spec of the clustered files (``incremental`` runs with the same columns and
    curve), else boundaries from a seeded sample of the clustering columns and, for
    curves over several columns, a tiling for the file count of the largest partition
    (:mod:`lakelog.maintenance.tiling`)."""
    if incremental:
        holder = find_spec(files, columns, curve)
        if holder is not None:
            found = load_spec(storage, holder, schema)
            if found is not None:
                return found
    file_schema = file_schema_of(schema, partition_by)
    if files:
        sample = sample_rows(storage, files, file_schema, columns)
    else:
        sample = pa.table({c: pa.array([], schema.field(c).type) for c in columns})
    spec = boundaries_from_sample(sample, columns, curve)
    if curve not in CURVES or len(columns) < 2 or not sample.num_rows:
        return spec
    n = reference_file_count(storage, files, file_schema, spec, options)
    return spec.with_tiling(build_tiling(spec.ranks(sample), spec.bits, n, curve))


def reference_file_count(
    storage: Storage,
    files: Sequence[DataFile],
    file_schema: pa.Schema,
    spec: ClusterSpec,
    options: ClusterOptions,
) -> int:
    """Files the largest partition of ``files`` is cut into, by the encoded size of rows
    from up to :data:`HEAD_FILES` files (seeded), ordered by key as a run writes them:
    the tiling is made for this count."""
    rows: dict[tuple[tuple[str, str | None], ...], int] = {}
    for f in files:
        key = tuple(sorted(f.partition.items()))
        rows[key] = rows.get(key, 0) + f.num_rows
    largest = max(rows.values(), default=0)
    rng = np.random.default_rng(0)
    picked = [files[i] for i in sorted(rng.permutation(len(files))[:HEAD_FILES])]
    per_file = max(1, -(-ROW_SAMPLE // max(1, len(picked))))

    def head(f: DataFile) -> pa.RecordBatch | None:
        # the generator (and its file) is released when this returns
        return next(read_group(storage, file_schema, [f], batch_size=per_file), None)

    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="lakelog-head") as pool:
        batches = [b for b in pool.map(head, picked) if b is not None and b.num_rows]
    if batches:
        sample = pa.Table.from_batches(batches, schema=file_schema)
        write_options = WriteOptions(
            target_file_size=options.target_file_size,
            row_group_size=options.row_group_size,
            compression=options.compression,
            use_dictionary=dictionary_columns(batches[0]),
        )
        row_bytes = encoded_row_bytes(sample, spec, write_options)
    else:
        row_bytes = 0.0
    if row_bytes <= 0:  # too few rows to tell: the files' own size
        row_bytes = sum(f.size_bytes for f in files) / max(1, sum(f.num_rows for f in files))
    return max(1, math.ceil(largest * row_bytes / options.target_file_size))


# -- planning ------------------------------------------------------------------------------


def already_optimal(files: Sequence[DataFile], target_file_size: int) -> bool:
    """Whether a partition's layout cannot be improved by clustering: a single file of
    at most the target size. Files are skipped whole by their min/max, and one file's
    box is the partition's whatever its row order, so rewriting it would only spend a
    commit (partitions clustered with the current spec need nothing either; see
    :func:`lakelog.maintenance.cluster.plan_partition`)."""
    return len(files) == 1 and files[0].size_bytes <= target_file_size


def plan_clustering(
    snapshot: Snapshot,
    spec: ClusterSpec,
    options: ClusterOptions,
    *,
    incremental: bool,
    files: Sequence[DataFile] | None = None,
) -> ClusterPlan:
    """Plan every partition of ``files`` (default: all live files of the snapshot)."""
    file_schema = file_schema_of(snapshot.schema, snapshot.partition_by)
    reader = fresh_keys_reader(snapshot.storage, file_schema, spec)
    by_part: dict[tuple[tuple[str, str | None], ...], list[DataFile]] = {}
    for f in snapshot.files() if files is None else files:
        by_part.setdefault(tuple(sorted(f.partition.items())), []).append(f)
    plans: list[PartitionPlan] = []
    for key in sorted(by_part, key=str):
        if already_optimal(by_part[key], options.target_file_size):
            continue
        pp = plan_partition(
            dict(key),
            by_part[key],
            spec.spec_id,
            target_file_size=options.target_file_size,
            incremental=incremental,
            max_rewrite_ratio=options.max_rewrite_ratio,
            min_delta_bytes=options.min_delta_bytes,
            key_bits=spec.key_bits,
            fresh_keys=reader,
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


# -- options -------------------------------------------------------------------------------


def cluster_options(
    snap: Snapshot,
    *,
    target_file_size: int | None,
    row_group_size: int | None,
    compression: str | None,
    max_group_bytes: int | None,
) -> ClusterOptions:
    props = snap.properties
    target = (
        get_int(props, "lakelog.target_file_size") if target_file_size is None else target_file_size
    )
    positive_int("target_file_size", target, unit="bytes")
    rg = get_int(props, "lakelog.row_group_size") if row_group_size is None else row_group_size
    positive_int("row_group_size", rg, unit="rows")
    codec = check_codec(
        get_str(props, "lakelog.compression") if compression is None else compression
    )
    group = get_int(props, PROP_GROUP) if max_group_bytes is None else max_group_bytes
    positive_int("max_group_bytes", group, unit="bytes")
    ratio = get_float(props, PROP_RATIO)  # >= 1 and in (0, 1]: the getters keep the
    delta = get_float(props, PROP_DELTA)  # declared ranges (lakelog.properties)
    return ClusterOptions(
        target_file_size=target,
        row_group_size=rg,
        compression=codec,
        max_group_bytes=group,
        max_rewrite_ratio=ratio,
        min_delta_bytes=min(target, max(MIN_DELTA_BYTES, int(target * delta))),
    )


def check_flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"expected {name} to be True or False, found {value!r}")


@dataclass(frozen=True)
class PreparedOptimize:
    """Everything an executor needs to run an optimize: checked, resolved and planned."""

    snapshot: Snapshot
    columns: tuple[str, ...]
    curve: str
    incremental: bool
    options: ClusterOptions
    spec: ClusterSpec
    plan: ClusterPlan
    started: float
    """``time.monotonic()`` when preparation began (the report's duration counts it)."""

    def extra(self) -> dict[str, Any]:
        """The clustering fields of the report."""
        return {
            "zorder_columns": list(self.columns) if self.curve != "linear" else [],
            "sort_columns": list(self.columns) if self.curve == "linear" else [],
            "curve": self.curve,
            "incremental": self.incremental,
            "spec_id": self.spec.spec_id,
            "new_bytes": self.plan.fresh_bytes,
            "full_groups": len(self.plan.full_groups),
            "spilled_runs": 0,
        }

    def commit_parameters(self) -> dict[str, Any]:
        """The ``OPTIMIZE`` commit's parameters."""
        return {
            "columns": list(self.columns),
            "curve": self.curve,
            "incremental": self.incremental,
            "spec_id": self.spec.spec_id,
            "target_file_size": self.options.target_file_size,
        }


def prepare_optimize(
    table: Table,
    *,
    zorder_by: Sequence[str] | str | None,
    sort_by: Sequence[str] | str | None,
    curve: str,
    target_file_size: int | None,
    partition_filter: Any,
    incremental: bool,
    max_group_bytes: int | None,
    compression: str | None,
    row_group_size: int | None,
    dry_run: bool,
) -> PreparedOptimize:
    """Check every argument (clear errors before any work), resolve the spec, plan."""
    started = time.monotonic()
    check_flag("dry_run", dry_run)
    check_flag("incremental", incremental)
    snap = table.snapshot()
    columns, curve_name = validate_clustering(
        snap.schema, snap.partition_by, zorder_by=zorder_by, sort_by=sort_by, curve=curve
    )
    options = cluster_options(
        snap,
        target_file_size=target_file_size,
        row_group_size=row_group_size,
        compression=compression,
        max_group_bytes=max_group_bytes,
    )
    files = snap.files()
    if partition_filter is not None:
        match = partition_matcher(snap.schema, snap.partition_by, partition_filter)
        mask = match([f.partition for f in files])
        files = [f for f, keep in zip(files, mask, strict=True) if keep]
    spec = resolve_spec(
        table.storage,
        files,
        snap.schema,
        snap.partition_by,
        columns,
        curve_name,
        incremental=incremental,
        options=options,
    )
    plan = plan_clustering(snap, spec, options, incremental=incremental, files=files)
    return PreparedOptimize(
        snapshot=snap,
        columns=columns,
        curve=curve_name,
        incremental=incremental,
        options=options,
        spec=spec,
        plan=plan,
        started=started,
    )


# -- the report ------------------------------------------------------------------------------


def optimize_report(
    plan: ClusterPlan,
    results: Sequence[GroupResult],
    commit: Any,
    abandoned: Sequence[str],
    started: float,
    extra: Mapping[str, Any],
    *,
    dry_run: bool,
) -> MaintenanceReport:
    """The report of an optimize plan: the groups that ran and were committed (minus the
    abandoned ones) count as rewritten; a dry run reports what the plan would do."""
    kept = [r for r in results if r.group_id not in abandoned] if commit is not None else []
    return rewrite_report(
        "optimize",
        plan,
        committed=kept,
        commits=[] if commit is None else [commit],
        abandoned=abandoned,
        duration_s=time.monotonic() - started,
        dry_run=dry_run,
        extra=dict(extra),
    )
