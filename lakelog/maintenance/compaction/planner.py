"""The compaction planner: snapshot in, plan out (no I/O beyond the snapshot).

:func:`plan_compaction` picks the *candidates* (files below ``min_file_size``,
by default 75% of the target, or below 75% of ``target_rows``), groups them by
partition and bin-packs each partition first-fit-decreasing into groups of at
most the target size (bytes, rows, or both: a group closes when either would
be exceeded). Groups of one file are dropped, since rewriting a file alone
changes nothing, unless its deletion vector marks at least
``lakelog.deletion_vectors.purge_ratio`` of its rows: such a file is a candidate
whatever its size, and its rewrite drops those rows for good.

A :class:`CompactionPlan` carries its read version, the table schema and
every source :class:`DataFile` whole, so it can be printed, saved as JSON and
executed elsewhere (another process, a Spark task) without reading the log.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import InvalidArgumentError
from ...io.parquet_settings import parquet_options
from ...io.writer import ParquetOptions, check_codec
from ...log.actions import DataFile, decode_schema, encode_schema
from ...log.filelist import FileList
from ...log.snapshot import Snapshot
from ...partitioning import partition_dir
from ...properties import get_float, get_int, get_str
from ...transforms import spec_key
from ..clustering.spec import TAG_SPEC
from ..groups import FileGroup, SavedPlan
from ..options import CompactionOptions, with_keywords
from ..partition_filter import partition_matcher
from ..report import human_bytes

__all__ = [
    "PLAN_FORMAT",
    "CompactionPlan",
    "CompactionSettings",
    "bin_pack",
    "plan_compaction",
    "resolve_options",
]

PLAN_FORMAT = 1
"""Version of the plan JSON this library writes and the newest it reads."""


class CompactionSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The resolved options a plan was made with (and its outputs are written with):
    :class:`~lakelog.maintenance.options.CompactionOptions` filled from the table.

    ``None`` for a target means that dimension does not bound files.
    """

    target_file_size: int | None
    target_rows: int | None
    min_file_size: int | None
    min_rows: int | None
    min_input_files: int
    row_group_size: int
    compression: str
    parquet: ParquetOptions = ParquetOptions()
    """Page index, bloom filters and page size of the output (lakelog.parquet.*)."""
    purge_ratio: float = 1.0
    """A file whose deletion vector marks at least this share of its rows is rewritten
    whatever its size (``lakelog.deletion_vectors.purge_ratio``)."""
    partition_spec: tuple[str, ...] = ()
    partition_spec_id: int = -1
    """The table's current spec of transforms and its id (-1: none): the output is
    written in it (format.md, "Partition transforms and evolution")."""


class CompactionPlan(SavedPlan, frozen=True, kw_only=True):
    """What a compaction will rewrite, decided from the snapshot at ``read_version``;
    saved and loaded as JSON (:class:`~lakelog.maintenance.groups.SavedPlan`)."""

    KIND = "compact"
    FORMAT = PLAN_FORMAT
    NOUN = "compaction plan"

    plan_format: int = PLAN_FORMAT
    kind: str = "compact"
    table_id: str
    read_version: int
    schema: str
    """Arrow IPC serialization of the full table schema, base64 (as in the log)."""
    partition_by: tuple[str, ...] = ()
    options: CompactionSettings
    partition_filter: str | None = None
    snapshot_file_count: int = 0
    snapshot_total_bytes: int = 0
    candidate_file_count: int = 0
    groups: tuple[FileGroup, ...] = ()

    # -- derived figures ---------------------------------------------------------
    def arrow_schema(self) -> pa.Schema:
        return decode_schema(self.schema)

    @property
    def estimated_output_files(self) -> int:
        return sum(g.estimated_output_files for g in self.groups)

    def group(self, group_id: str) -> FileGroup:
        for g in self.groups:
            if g.group_id == group_id:
                return g
        raise InvalidArgumentError(
            f"expected a group id of this plan (one of {[g.group_id for g in self.groups][:5]}"
            f"{' ...' if len(self.groups) > 5 else ''}), found {group_id!r}"
        )

    # -- description -------------------------------------------------------------
    def describe(self, *, files: bool = False) -> str:
        """A human summary; ``files=True`` also lists every source file."""
        o = self.options
        bounds = []
        if o.target_file_size is not None:
            bounds.append(f"target {human_bytes(o.target_file_size)}")
        if o.target_rows is not None:
            bounds.append(f"target {o.target_rows:,} rows")
        small = []
        if o.min_file_size is not None:
            small.append(f"< {human_bytes(o.min_file_size)}")
        if o.min_rows is not None:
            small.append(f"< {o.min_rows:,} rows")
        lines = [
            f"compaction plan at version {self.read_version}: {len(self.groups)} groups, "
            f"{self.source_file_count} of {self.snapshot_file_count} files "
            f"({human_bytes(self.source_bytes)}) -> ~{self.estimated_output_files} files; "
            f"file count {self.snapshot_file_count} -> ~{self.estimated_after_file_count}",
            f"  {', '.join(bounds)}; candidates: files {' and '.join(small)} "
            f"({self.candidate_file_count} found); at least {o.min_input_files} files per "
            f"group; row groups of {o.row_group_size:,} rows; codec {o.compression}",
        ]
        if self.partition_filter:
            lines.append(f"  partition filter: {self.partition_filter}")
        for g in self.groups:
            where = partition_dir(self.partition_by, g.partition) if self.partition_by else "-"
            lines.append(
                f"  group {g.group_id}  partition {where}: {len(g.files)} files, "
                f"{human_bytes(g.total_bytes)}, {g.num_rows:,} rows -> ~{g.estimated_output_files} "
                f"file{'s' if g.estimated_output_files != 1 else ''}"
            )
            if files:
                lines.extend(f"    {f.path} ({human_bytes(f.size_bytes)})" for f in g.files)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


def resolve_options(snapshot: Snapshot, options: CompactionOptions) -> CompactionSettings:
    """Fill the unset options from table properties (the given ones were checked when
    ``options`` was made)."""
    props = snapshot.properties
    ratio = get_float(props, "lakelog.compaction.min_file_size_ratio")
    if not 0 < ratio <= 1:
        raise InvalidArgumentError(
            f"expected table property lakelog.compaction.min_file_size_ratio in (0, 1], "
            f"found {ratio}; fix it with set_properties()."
        )
    target_rows, target_file_size = options.target_rows, options.target_file_size
    if target_file_size is None and target_rows is None:
        target_file_size = get_int(props, "lakelog.target_file_size")
    min_file_size = options.min_file_size
    if min_file_size is None and target_file_size is not None:
        min_file_size = max(1, int(target_file_size * ratio))
    min_input_files = options.min_input_files
    row_group_size = options.row_group_size
    compression = options.compression
    current = snapshot.partition_spec
    return CompactionSettings(
        target_file_size=target_file_size,
        target_rows=target_rows,
        min_file_size=min_file_size,
        min_rows=None if target_rows is None else max(1, int(target_rows * ratio)),
        min_input_files=(
            get_int(props, "lakelog.compaction.min_input_files")
            if min_input_files is None
            else min_input_files
        ),
        row_group_size=(
            get_int(props, "lakelog.row_group_size") if row_group_size is None else row_group_size
        ),
        compression=check_codec(
            get_str(props, "lakelog.compression") if compression is None else compression
        ),
        parquet=parquet_options(props),
        purge_ratio=get_float(props, "lakelog.deletion_vectors.purge_ratio"),
        partition_spec=() if current is None else current.texts,
        partition_spec_id=-1 if current is None else current.spec_id,
    )


def bin_pack(
    files: Iterable[DataFile], *, max_bytes: int | None, max_rows: int | None
) -> list[list[DataFile]]:
    """First-fit-decreasing: largest files first, each into the first group it fits.

    A group never exceeds ``max_bytes`` nor ``max_rows`` (``None`` = no bound)
    unless one file alone does, in which case it is alone in its group.
    Deterministic: ties are broken by path.
    """
    if max_bytes is None and max_rows is None:
        raise InvalidArgumentError("expected max_bytes or max_rows for bin_pack, found neither")
    items = sorted(
        files,
        key=lambda f: (-(f.size_bytes if max_bytes is not None else f.num_rows), f.path),
    )
    if not items:
        return []
    cap_b = max_bytes if max_bytes is not None else math.inf
    cap_r = max_rows if max_rows is not None else math.inf
    min_b = min(f.size_bytes for f in items)
    min_r = min(f.num_rows for f in items)
    groups: list[list[DataFile]] = []
    used: list[tuple[int, int]] = []
    open_bins: list[int] = []  # groups that could still take the smallest file
    for f in items:
        for pos, i in enumerate(open_bins):
            b, r = used[i]
            if b + f.size_bytes <= cap_b and r + f.num_rows <= cap_r:
                groups[i].append(f)
                used[i] = (b + f.size_bytes, r + f.num_rows)
                if used[i][0] + min_b > cap_b or used[i][1] + min_r > cap_r:
                    del open_bins[pos]
                break
        else:
            groups.append([f])
            used.append((f.size_bytes, f.num_rows))
            if f.size_bytes + min_b <= cap_b and f.num_rows + min_r <= cap_r:
                open_bins.append(len(groups) - 1)
    return groups


def _group_id(files: Sequence[DataFile]) -> str:
    digest = hashlib.sha256("\n".join(sorted(f.path for f in files)).encode()).hexdigest()
    return f"g-{digest[:16]}"


def _estimate_outputs(files: Sequence[DataFile], options: CompactionSettings) -> int:
    n = 1
    if options.target_file_size is not None:
        n = max(n, math.ceil(sum(f.size_bytes for f in files) / options.target_file_size))
    if options.target_rows is not None:
        n = max(n, math.ceil(sum(f.num_rows for f in files) / options.target_rows))
    return n


def _candidates(
    snapshot: Snapshot,
    options: CompactionSettings,
    exclude: Collection[str],
    only: Collection[str] | None = None,
) -> list[DataFile]:
    """Files small in every bounded dimension, in ``only`` (None: any) and not in
    ``exclude``, decoded only for those rows.

    Files written by clustering (tagged with a clustering spec) are left to
    ``optimize``: its small delta files are small on purpose, and merging them
    here without their order would undo the layout.
    """
    ft = snapshot.entries
    clustered = pc.match_substring(ft.column("tags"), f'"{TAG_SPEC}"')
    mask: pc.Expression | None = None
    if pc.any(clustered).as_py():
        ft = ft.filter(pc.invert(pc.fill_null(clustered, False)))
    if options.min_file_size is not None:
        mask = pc.field("size_bytes") < options.min_file_size
    if options.min_rows is not None:
        rows = pc.field("num_rows") < options.min_rows
        mask = rows if mask is None else mask & rows
    if mask is not None and pc.max(ft.column("deleted_rows")).as_py():
        # deletion vectors: files with many deleted rows are candidates whatever their size
        deleted = pc.fill_null(ft.column("deleted_rows"), 0)
        heavy = pc.greater_equal(deleted, pc.multiply(ft.column("num_rows"), options.purge_ratio))
        ft = ft.append_column("purge", heavy)
        mask = mask | pc.field("purge")
    if exclude:
        free = ~pc.field("path").isin(pa.array(list(exclude), pa.string()))
        mask = free if mask is None else mask & free
    if only is not None:
        chosen = pc.field("path").isin(pa.array(list(only), pa.string()))
        mask = chosen if mask is None else mask & chosen
    return list(FileList.of_entries(ft if mask is None else ft.filter(mask)))


def _purges(files: Sequence[DataFile], options: CompactionSettings) -> bool:
    """Whether a group holds a file compaction rewrites for its deleted rows, so it is
    rewritten even alone."""
    return any(
        f.deleted is not None and f.deleted.rows >= f.num_rows * options.purge_ratio for f in files
    )


def plan_compaction(
    snapshot: Snapshot,
    options: CompactionOptions | None = None,
    *,
    exclude: Collection[str] = frozenset(),
    only: Collection[str] | None = None,
    **keywords: Any,
) -> CompactionPlan:
    """Decide which files to rewrite together; pure (reads nothing but ``snapshot``).

    ``options`` (default: all unset), or its fields as keyword arguments
    (``target_file_size=...``; combined as :func:`~lakelog.maintenance.options.with_keywords`
    says). Unset options come from the table properties (``lakelog.target_file_size``,
    ``lakelog.compaction.*``, ``lakelog.row_group_size``, ``lakelog.compression``).
    ``exclude``: paths no group may take (files under another run's live claim,
    :func:`lakelog.maintenance.claims.claimed_files`). ``only``: the paths groups may
    take, if given (auto-compaction's choice of one size tier,
    :mod:`lakelog.maintenance.auto`); candidates still have to be small.
    """
    request = with_keywords(options or CompactionOptions(), **keywords)
    partition_filter = request.partition_filter
    settings = resolve_options(snapshot, request)
    partition_by = tuple(snapshot.partition_by)
    match = (
        None
        if partition_filter is None
        else partition_matcher(snapshot.schema, partition_by, partition_filter)
    )
    by_partition: dict[tuple[str | None, ...], list[DataFile]] = {}
    specs = bool(snapshot.partition_specs)
    width = len(partition_by)
    for f in _candidates(snapshot, settings, exclude, only):
        key = tuple(f.partition.get(c) for c in partition_by)
        if specs:  # one group per partition of a spec of transforms (format version 8)
            key += (spec_key(f.tags),)
        by_partition.setdefault(key, []).append(f)
    keys = list(by_partition)
    if match is not None and keys:
        selected = match([dict(zip(partition_by, k[:width], strict=True)) for k in keys])
        keys = [k for k, ok in zip(keys, selected, strict=True) if ok]
    keys.sort(key=lambda k: tuple((v is None, v or "") for v in k))
    need = max(2, settings.min_input_files)
    groups: list[FileGroup] = []
    candidates = 0
    for key in keys:
        files = by_partition[key]
        candidates += len(files)
        for packed in bin_pack(
            files, max_bytes=settings.target_file_size, max_rows=settings.target_rows
        ):
            if len(packed) < need and not _purges(packed, settings):
                continue
            groups.append(
                FileGroup(
                    group_id=_group_id(packed),
                    partition=dict(zip(partition_by, key[:width], strict=True)),
                    files=tuple(packed),
                    estimated_output_files=_estimate_outputs(packed, settings),
                )
            )
    return CompactionPlan(
        table_id=snapshot.table_id,
        read_version=snapshot.version,
        schema=encode_schema(snapshot.schema),
        partition_by=partition_by,
        options=settings,
        partition_filter=None if partition_filter is None else str(partition_filter),
        snapshot_file_count=snapshot.num_files,
        snapshot_total_bytes=snapshot.total_bytes,
        candidate_file_count=candidates,
        groups=tuple(groups),
    )
