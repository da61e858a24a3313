"""Checkpoints: writing the version-2 manifest (root and leaves) of one version.

A checkpoint at ``v`` starts from the newest root at or below ``v`` and the changes
since (``docs/format.md``, "Writing a checkpoint"): files removed since are marked in
the leaves that hold them (found by path and partition range, leaves untouched), files
added since go to new leaves, and fragmented leaves are merged (manifest compaction:
a quarter removed, or four small leaves of one size tier). What it writes follows the
change, not the table; only the root, one row per leaf, is rewritten whole.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._failpoints import failpoint, pausepoint
from ..errors import ManifestLeafError
from ..storage import Storage
from .actions import VECTORS_FORMAT_VERSION
from .files import ReplayState, live_row_count, no_plans
from .fileset import FileSet
from .leaves import (
    CACHE,
    LEAF_DIR,
    Leaf,
    entries_from_files,
    leaf_path,
    leaf_schema,
    leaf_version,
    load_leaves,
    plans_path,
    sort_entries,
    struct_fields,
)
from .manifests import (
    ROOT_FORMAT,
    ManifestHeader,
    Root,
    read_hint,
    read_manifest_header,
    read_root,
    replace_root,
    root_schema,
    summary_types,
    write_manifest,
    write_root,
)
from .plans import PLANS_FORMAT

__all__ = [
    "WRITE_FORMAT",
    "carried_fields",
    "checkpoint",
    "header_for",
    "missing_leaves",
    "plan_root",
    "rewrite_root",
    "root_files",
    "snapshot_state",
]

WRITE_FORMAT = 2
"""Layout of the manifests this process writes. Tests set 1 to write version-1
manifests (the flat layout older lakelog versions wrote); nothing else changes it."""

_FRAGMENTED = 4
"""A leaf with more than 1/_FRAGMENTED of its rows removed is rewritten."""
_TIER_BASE = 4
_TIER_CROWD = 4
"""Small leaves of one size tier are merged once there are this many."""

_OWN_FIELDS = {"metadata", "version", "timestamp_ms", "oldest_version"}
_PLANS_FIELDS = {"plans", "plans_file"}
"""Written by :func:`header_for` itself: plans stay JSON until asked, large ones in a file."""
PLANS_INLINE_BYTES = 65_536
"""Pending plans whose JSON is longer go to a plans file (format.md, "Pending plans in a
file (version 4)")."""
PLANS_FILE_FORMAT = 4


def carried_fields() -> list[str]:
    """Fields other features added to both :class:`ReplayState` and
    :class:`ManifestHeader`: carried from the replayed state into every header written,
    and from a header read back into the state."""
    state = set(ReplayState.__struct_fields__)
    return [
        f
        for f in ManifestHeader.__struct_fields__
        if f in state and f not in _OWN_FIELDS and f not in _PLANS_FIELDS
    ]


def header_for(
    state: ReplayState, *, base_plans_file: str | None = None, **counts: Any
) -> ManifestHeader:
    """The header of a manifest of ``state`` (its version, metadata, carried fields).

    Plans unchanged since the state's own base root (``state.plans_file``) are named, not
    written again: by the plans file of the root this manifest is built on
    (``base_plans_file``, at or after the state's base, so the same plans), which expiry
    keeps as long as it keeps that root's leaves; never by an older root's file."""
    assert state.metadata is not None
    extra: dict[str, Any] = {f: getattr(state, f) for f in carried_fields()}
    flat = counts.get("format_version") == 1
    if state.plans_file is not None and base_plans_file is not None and not flat:
        extra["plans"], extra["plans_file"] = msgspec.Raw(b"{}"), base_plans_file
    else:
        plans = state.plans_as_json()
        if len(memoryview(plans)) > PLANS_INLINE_BYTES and not flat:
            extra["plans"], extra["plans_file"] = msgspec.Raw(b"{}"), plans_path(state.version)
        else:
            extra["plans"] = plans
    if "format_version" not in counts:  # the layout's version, 3 with plans, 4 in a file
        counts["format_version"] = (
            PLANS_FILE_FORMAT
            if extra.get("plans_file")
            else ROOT_FORMAT
            if no_plans(extra["plans"])
            else PLANS_FORMAT
        )
        if state.metadata.format_version >= VECTORS_FORMAT_VERSION:  # older readers refuse it
            counts["format_version"] = max(counts["format_version"], VECTORS_FORMAT_VERSION)
    return ManifestHeader(
        version=state.version,
        timestamp_ms=state.timestamp_ms,
        metadata=state.metadata,
        oldest_version=state.oldest_version,
        **counts,
        **extra,
    )


# -- planning a root ----------------------------------------------------------------


@dataclass
class _Kept:
    """A leaf of the base root the new root lists again."""

    index: int
    leaf_files: int
    removed: np.ndarray
    files: int
    rows: int
    size: int


@dataclass
class _New:
    """Rows of a new leaf (sorted)."""

    entries: pa.Table

    @property
    def files(self) -> int:
        return int(self.entries.num_rows)


def _cut(entries: pa.Table, size: int) -> list[_New]:
    return [_New(entries.slice(k, size)) for k in range(0, entries.num_rows, size)]


def _tier(live: int) -> int:
    return int(math.log(max(1, live), _TIER_BASE))


def plan_root(fs: FileSet, state: ReplayState, *, leaf_files: int) -> tuple[Root, list[Leaf]]:
    """The root of ``state.version`` over ``fs`` (in memory) and the new leaves it lists
    (not yet written)."""
    schema, partition_by = fs.schema, fs.partition_by
    version = state.version
    kept: list[_Kept] = []
    fresh: list[pa.Table] = []
    root = fs.root
    if root is not None:
        located = fs.locate()
        loaded = dict(
            zip(
                sorted(located),
                load_leaves(fs.storage, [root.leaves[i] for i in sorted(located)]),
                strict=True,
            )
        )
        counts = {
            c: root.entries.column(c).to_pylist()
            for c in ("leaf_files", "live_files", "live_rows", "live_bytes")
        }
        for i in range(len(root)):
            removed = root.removed(i)
            files, rows, size = (counts[c][i] for c in ("live_files", "live_rows", "live_bytes"))
            if i in located:
                pos, leaf = located[i], loaded[i]
                taken = pa.array(pos)
                files -= len(pos)
                rows -= leaf.live_rows(taken)
                size -= int(pc.sum(leaf.column("size_bytes").take(taken)).as_py() or 0)
                removed = np.union1d(removed, pos)
            if files > 0:
                kept.append(_Kept(i, counts["leaf_files"][i], removed, files, rows, size))
    elif fs.flat is not None:
        live = fs.flat_live()
        table = fs.flat.table if live is None else fs.flat.table.filter(pa.array(live))
        if table.num_rows:
            fresh.append(entries_from_files(table, schema, partition_by))
    tail = fs.tail()
    if tail is not None:
        fresh.append(entries_from_files(tail.table, schema, partition_by))
    # fragmented leaves: rewritten from their live rows
    fragmented = [k for k in kept if len(k.removed) * _FRAGMENTED > k.leaf_files]
    if fragmented:
        assert root is not None
        kept = [k for k in kept if k not in fragmented]
        fresh.extend(_live_rows(fs, root, fragmented))
    items: list[_Kept | _New] = list(kept)
    if fresh:
        items.extend(_cut(sort_entries(_concat(fresh)), leaf_files))
    items = _merge_tiers(fs, items, leaf_files)
    new_leaves = [
        Leaf(item.entries, leaf_path(version)) for item in items if isinstance(item, _New)
    ]
    entries = _root_entries(fs, [i for i in items if isinstance(i, _Kept)], new_leaves)
    files = int(pc.sum(entries.column("live_files")).as_py() or 0)
    header = header_for(
        state,
        base_plans_file=root.header.plans_file if root is not None else None,
        num_files=files,
        num_rows=int(pc.sum(entries.column("live_rows")).as_py() or 0),
        num_bytes=int(pc.sum(entries.column("live_bytes")).as_py() or 0),
        num_leaves=entries.num_rows,
    )
    return Root(header, entries), new_leaves


def _concat(tables: Sequence[pa.Table]) -> pa.Table:
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")


def _live_rows(fs: FileSet, root: Root, items: Sequence[_Kept]) -> list[pa.Table]:
    """The live rows of base leaves, in the current leaf schema."""
    out = []
    leaves = load_leaves(fs.storage, [root.leaves[k.index] for k in items])
    for k, leaf in zip(items, leaves, strict=True):
        mask = np.ones(len(leaf), dtype=bool)
        mask[k.removed] = False
        out.append(_to_current(fs, leaf.table.filter(pa.array(mask))))
    return out


def _to_current(fs: FileSet, entries: pa.Table) -> pa.Table:
    """Leaf rows written under an older schema, in the current leaf schema (fields by
    name; what does not cast is unknown)."""
    target = leaf_schema(fs.schema, fs.partition_by)
    if entries.schema.equals(target):
        return entries
    n = entries.num_rows
    cols = []
    for f in target:
        if f.name not in entries.column_names:
            cols.append(pa.nulls(n, f.type))
            continue
        col = entries.column(f.name).combine_chunks()
        if pa.types.is_struct(f.type):
            cols.append(_conform_struct(col, f.type))
        else:
            try:
                cols.append(col.cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                cols.append(pa.nulls(n, f.type))
    return pa.table(cols, schema=target)


def _conform_struct(values: pa.Array, t: pa.StructType) -> pa.StructArray:
    """A struct array in struct type ``t``: fields by name, cast, or null."""
    n = len(values)
    src = values if isinstance(values, pa.StructArray) else None
    fields = []
    for f in t:
        got = None
        if src is not None and src.type.get_field_index(f.name) >= 0:
            got = src.field(f.name)
            if got.type != f.type:
                try:
                    got = got.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                    got = None
        fields.append(pa.nulls(n, f.type) if got is None else got)
    mask = None if src is None else pc.invert(src.is_valid())
    return pa.StructArray.from_arrays(fields, fields=list(t), mask=mask)


def _merge_tiers(fs: FileSet, items: list[_Kept | _New], leaf_files: int) -> list[_Kept | _New]:
    """Merge small leaves (fewer than half of ``leaf_files`` live rows) four of one size
    tier at a time, until no tier holds four."""
    root = fs.root
    while True:
        tiers: dict[int, list[_Kept | _New]] = {}
        for item in items:
            if 2 * item.files < leaf_files:
                tiers.setdefault(_tier(item.files), []).append(item)
        crowd = next(
            (members for _, members in sorted(tiers.items()) if len(members) >= _TIER_CROWD), None
        )
        if crowd is None:
            return items
        tables = [m.entries for m in crowd if isinstance(m, _New)]
        old = [m for m in crowd if isinstance(m, _Kept)]
        if old:
            assert root is not None
            tables.extend(_live_rows(fs, root, old))
        ids = {id(m) for m in crowd}
        items = [i for i in items if id(i) not in ids]
        items.extend(_cut(sort_entries(_concat(tables)), leaf_files))


def _summary(entries: pa.Table) -> dict[str, Any]:
    """A new leaf's row of the root (format.md, "The root")."""
    num_rows = entries.column("num_rows")
    paths = pc.min_max(entries.column("path"))
    out: dict[str, Any] = {
        "leaf_files": entries.num_rows,
        "live_files": entries.num_rows,
        "live_rows": live_row_count(entries),
        "live_bytes": int(pc.sum(entries.column("size_bytes")).as_py() or 0),
        "path_min": paths["min"].as_py(),
        "path_max": paths["max"].as_py(),
        "num_rows": int(pc.sum(num_rows).as_py() or 0),
    }
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    for c, values in struct_fields(entries, "partition").items():
        mm = pc.min_max(values)
        mins[c], maxs[c] = mm["min"], mm["max"]
        nulls[c] = pa.scalar(values.null_count, pa.int64())  # files, not rows
    for name, agg, into in (("min", pc.min, mins), ("max", pc.max, maxs)):
        for c, values in struct_fields(entries, name).items():
            into[c] = None if values.null_count else agg(values)
    for c, values in struct_fields(entries, "null_count").items():
        nulls[c] = None if values.null_count else pc.sum(values).cast(pa.int64())
    out["min"], out["max"], out["null_count"] = mins, maxs, nulls
    return out


def _struct_column(rows: list[dict[str, Any]], t: pa.StructType) -> pa.StructArray:
    fields = []
    for f in t:
        values = [r.get(f.name) for r in rows]
        values = [None if v is None or not v.is_valid else v.cast(f.type) for v in values]
        fields.append(pa.array(values, f.type) if values else pa.array([], f.type))
    return pa.StructArray.from_arrays(fields, fields=list(t))


def _root_entries(fs: FileSet, kept: Sequence[_Kept], new: Sequence[Leaf]) -> pa.Table:
    """The rows of the new root: kept leaves (updated), then the new ones."""
    target = root_schema(fs.schema, fs.partition_by)
    bounds, counts = summary_types(fs.schema, fs.partition_by)
    parts = []
    if kept:
        root = fs.root
        assert root is not None
        old = root.entries.take(pa.array([k.index for k in kept], pa.int64()))
        cols: dict[str, pa.Array] = {
            "leaf": old.column("leaf").combine_chunks(),
            "leaf_files": old.column("leaf_files").combine_chunks(),
            "removed": pa.array([k.removed.tolist() for k in kept], pa.list_(pa.int32())),
            "live_files": pa.array([k.files for k in kept], pa.int64()),
            "live_rows": pa.array([k.rows for k in kept], pa.int64()),
            "live_bytes": pa.array([k.size for k in kept], pa.int64()),
            "path_min": old.column("path_min").combine_chunks(),
            "path_max": old.column("path_max").combine_chunks(),
            "num_rows": old.column("num_rows").combine_chunks(),
        }
        for name, t in (("min", bounds), ("max", bounds), ("null_count", counts)):
            if name in target.names:
                src = (
                    old.column(name).combine_chunks()
                    if name in old.column_names
                    else pa.nulls(len(kept))
                )
                cols[name] = _conform_struct(src, t)
        parts.append(pa.table([cols[f.name] for f in target], schema=target))
    if new:
        rows = [_summary(leaf.table) for leaf in new]
        cols = {
            "leaf": pa.array([leaf.path for leaf in new], pa.string()),
            "removed": pa.array([[] for _ in new], pa.list_(pa.int32())),
        }
        for name in ("leaf_files", "live_files", "live_rows", "live_bytes", "num_rows"):
            cols[name] = pa.array([r[name] for r in rows], pa.int64())
        for name in ("path_min", "path_max"):
            cols[name] = pa.array([r[name] for r in rows], pa.string())
        for name, t in (("min", bounds), ("max", bounds), ("null_count", counts)):
            if name in target.names:
                cols[name] = _struct_column([r[name] for r in rows], t)
        parts.append(pa.table([cols[f.name] for f in target], schema=target))
    if not parts:
        return target.empty_table()
    return pa.concat_tables(parts)


# -- writing ---------------------------------------------------------------------------


def checkpoint(
    storage: Storage,
    fs: FileSet,
    state: ReplayState,
    *,
    leaf_files: int,
    format_version: int | None = None,
) -> Root | None:
    """Write the manifest of ``state.version`` (the live files ``fs``): a version-2 root
    and the leaves it needs, built on the newest root at or below the version. Returns
    the root the version now has (None when version-1 manifests are written)."""
    version = state.version
    if (format_version or WRITE_FORMAT) < ROOT_FORMAT:
        header = header_for(state, num_files=fs.counts()[0], format_version=1)
        write_manifest(storage, header, fs.file_table())
        return None
    existing = _usable_root(storage, version)
    if existing is not None:
        return existing
    newer = _newest_base(storage, fs, version)
    try:
        root, new = plan_root(newer, state, leaf_files=leaf_files)
    except ManifestLeafError:
        if newer is fs:
            raise  # the snapshot's own base: the caller resolves it again without it
        # the hint's root lists a leaf deleted meanwhile, not rebuilt yet (format.md,
        # "Writing a checkpoint", step 1): build on the snapshot's own base instead
        root, new = plan_root(fs, state, leaf_files=leaf_files)
    if not _publish(storage, root, new, _plans_blob(root, state)):
        return read_root(storage, version)  # another writer's root was there first
    failpoint("checkpoint:after-root")
    return root


def root_files(root: Root) -> list[str]:
    """The leaves a root lists, and its plans file if it names one."""
    return list(root.leaves) + ([root.header.plans_file] if root.header.plans_file else [])


def missing_leaves(storage: Storage, root: Root) -> list[str]:
    """The leaves (and plans file) of ``root`` not in ``_leaves/`` now: one listing, never
    the process's leaf cache (a leaf cached here may be gone from storage)."""
    on_disk = set(storage.list_names(LEAF_DIR))
    return [p for p in root_files(root) if p.rsplit("/", 1)[-1] not in on_disk]


def rewrite_root(storage: Storage, fs: FileSet, state: ReplayState, *, leaf_files: int) -> Root:
    """Write the root of ``state.version`` again on the base of ``fs`` (whose leaves the
    caller found whole), replacing the root there: new leaves and plans file first."""
    root, new = plan_root(fs, state, leaf_files=leaf_files)
    for leaf in new:
        _write_leaf(storage, leaf)
    _write_plans(storage, root, _plans_blob(root, state))
    replace_root(storage, root)
    return root


def _usable_root(storage: Storage, version: int) -> Root | None:
    header = read_manifest_header(storage, version)
    if header is None or header.format_version < ROOT_FORMAT:
        return None
    return read_root(storage, version)


def _newest_base(storage: Storage, fs: FileSet, version: int) -> FileSet:
    """``fs`` on the newest root at or below ``version`` (the hint's), when that is newer
    than its own base: the same files (the changes since an older base cover every
    version in between) with fewer changes to apply and leaves still referenced."""
    hint = read_hint(storage)
    base = fs.root.version if fs.root is not None else -1
    if hint is None or not base < hint <= version:
        return fs
    newer = read_root(storage, hint)
    if newer is None:
        return fs
    return FileSet(storage, fs.metadata, fs.schema, newer, fs.added, fs.removed)


def _write_leaf(storage: Storage, leaf: Leaf) -> None:
    assert leaf.path is not None
    storage.write_bytes(leaf.path, leaf.encode())
    CACHE.put(storage.uri, leaf)


def _plans_blob(root: Root, state: ReplayState) -> bytes | None:
    """The plans file ``root`` names that is not written yet (None: it names none, or
    the one holding the state's unchanged plans)."""
    path = root.header.plans_file
    if path is None or leaf_version(path) != root.version:  # named, not written here
        return None
    return bytes(state.plans_as_json())


def _write_plans(storage: Storage, root: Root, blob: bytes | None) -> list[str]:
    if blob is None or root.header.plans_file is None:
        return []
    storage.write_bytes(root.header.plans_file, blob)
    return [root.header.plans_file]


def _publish(storage: Storage, root: Root, new: Sequence[Leaf], plans: bytes | None) -> bool:
    """The new leaves and plans file, then the root put-if-absent. False if a root was
    there first: then the new leaves and plans file are deleted again."""
    for leaf in new:
        _write_leaf(storage, leaf)
    written = _write_plans(storage, root, plans)
    failpoint("checkpoint:before-root")
    pausepoint("checkpoint:before-root")
    if write_root(storage, root):
        return True
    storage.delete([leaf.path for leaf in new if leaf.path is not None] + written)
    return False


def snapshot_state(state: ReplayState, root: Root | None) -> ReplayState:
    """``state`` rebased on the root just written (empty tail); unchanged without one."""
    if root is None:
        return state
    out = state.copy()
    out.base = root
    out.added, out.removed = {}, {}
    if root.header.plans_file is not None:  # the state's plans, as just written
        out.plans_file = root.header.plans_file
    return out
