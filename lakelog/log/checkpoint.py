"""Checkpoints: writing the version-2 manifest (root and leaves) of one version.

A checkpoint at ``v`` starts from the newest root at or below ``v`` and the changes
since (``docs/format.md``, "Writing a checkpoint"): files removed since are marked in
the leaves that hold them (found by path and partition range, leaves untouched), files
added since go to new leaves, and fragmented leaves are merged (manifest compaction:
a quarter removed, or four small leaves of one size tier). What it writes follows the
change, not the table; only the root, one row per leaf, is rewritten whole.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._failpoints import failpoint, pausepoint
from ..errors import CorruptLogError, ManifestLeafError
from ..storage import Storage
from .commits import list_log
from .files import ReplayState, live_row_count, no_plans
from .fileset import FileSet, conform_struct, to_current
from .format import ROOTS, manifest_layout, manifest_version
from .leaves import (
    CACHE,
    LEAF_DIR,
    Leaf,
    leaf_path,
    leaf_version,
    load_leaves,
    plans_path,
    sort_entries,
    struct_fields,
)
from .manifests import (
    ManifestHeader,
    Root,
    read_hint,
    read_manifest_header,
    read_root,
    replace_root,
    root_leaves,
    root_schema,
    summary_types,
    write_manifest,
    write_root,
)
from .snapshot import Snapshot, load_snapshot, snapshot_of

log = logging.getLogger("lakelog")

__all__ = [
    "checkpoint",
    "keep_whole",
    "rebuild_root",
    "repair_roots",
    "write_checkpoint",
    "header_for",
    "missing_leaves",
    "plan_root",
    "rewrite_root",
    "root_files",
    "snapshot_state",
]

_FRAGMENTED = 4
"""A leaf with more than 1/_FRAGMENTED of its rows removed is rewritten."""
_TIER_BASE = 4
_TIER_CROWD = 4
"""Small leaves of one size tier are merged once there are this many."""

PLANS_INLINE_BYTES = 65_536
"""Pending plans whose JSON is longer go to a plans file (format.md, "Pending plans in a
file (version 4)"), unless the table property ``lakelog.manifest.plans_inline_bytes``
(validated where properties are set) says otherwise."""


def _plans_inline_bytes(state: ReplayState) -> int:
    props = state.metadata.properties if state.metadata is not None else {}
    try:
        return int(props.get("lakelog.manifest.plans_inline_bytes", PLANS_INLINE_BYTES))
    except ValueError:
        return PLANS_INLINE_BYTES


def header_for(
    state: ReplayState,
    *,
    num_files: int,
    num_rows: int | None = None,
    num_bytes: int | None = None,
    num_leaves: int | None = None,
    layout: int = ROOTS.version,
    base_plans_file: str | None = None,
) -> ManifestHeader:
    """The header of a manifest of ``state`` in ``layout`` (1 flat, 2 root and leaves):
    its version, metadata, counts, plans, the fields it carries for the state read back
    from it (:func:`~.manifests.carry_into_state`), and the format version all that
    needs (:func:`~.format.manifest_version`).

    Plans unchanged since the state's own base root (``state.plans_file``) are named, not
    written again: by the plans file of the root this manifest is built on
    (``base_plans_file``, at or after the state's base, so the same plans), which expiry
    keeps as long as it keeps that root's leaves; never by an older root's file. A flat
    manifest holds its plans inline."""
    assert state.metadata is not None
    flat = layout < ROOTS.version
    plans, plans_file = msgspec.Raw(b"{}"), None
    if state.plans_file is not None and base_plans_file is not None and not flat:
        plans_file = base_plans_file
    else:
        blob = state.plans_as_json()
        if len(memoryview(blob)) > _plans_inline_bytes(state) and not flat:
            plans_file = plans_path(state.version)
        else:
            plans = blob
    return ManifestHeader(
        format_version=manifest_version(
            layout=layout,
            declared=state.metadata.format_version,
            plans=not no_plans(plans),
            plans_file=plans_file is not None,
        ),
        version=state.version,
        timestamp_ms=state.timestamp_ms,
        num_files=num_files,
        metadata=state.metadata,
        oldest_version=state.oldest_version,
        num_rows=num_rows,
        num_bytes=num_bytes,
        num_leaves=num_leaves,
        app_versions=state.app_versions,
        app_commits=state.app_commits,
        plans=plans,
        plans_file=plans_file,
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
            fresh.append(_to_current(fs, table))
    tail = fs.tail()
    if tail is not None:
        fresh.append(tail.table)
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
    """Leaf rows written under an older schema, in the current leaf schema."""
    return to_current(entries, fs.schema, fs.partition_by)


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
                cols[name] = conform_struct(src, t)
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
    the root the version now has (None when version-1 manifests are written).

    ``format_version``: the manifest layout, 1 (flat) or 2 (root and leaves); by
    default :func:`~.format.manifest_layout`, roots."""
    version = state.version
    layout = manifest_layout() if format_version is None else format_version
    if layout < ROOTS.version:
        header = header_for(state, num_files=fs.counts()[0], layout=layout)
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
    if header is None or not ROOTS.declared_by(header.format_version):
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


# -- writing a checkpoint for a snapshot, and repairing roots ---------------------


def write_checkpoint(
    snapshot: Snapshot, *, leaf_files: int, format_version: int | None = None
) -> Snapshot:
    """Write the manifest of the snapshot's version (a version-2 root and the leaves it
    needs, built incrementally: ``lakelog.log.checkpoint``) and return the same snapshot
    resolved from it, so that later commits advance from the new root.

    A base root found listing a missing leaf while the new root is planned (published
    by a writer that has not rebuilt it yet, or was killed first) is not built on: the
    version is resolved again without it. Once the root is there (written here or
    found), its leaves are checked against a listing: an expiry or vacuum may have
    deleted a leaf it reused from an older root meanwhile (``docs/format.md``, "Leaves
    in expiry and vacuum"). Then the root is written again on a whole base
    (:func:`rebuild_root`)."""
    storage = snapshot.storage
    snap = snapshot
    avoid: set[int] = set()
    for attempt in range(8):
        try:
            root = checkpoint(
                storage,
                snap._files(),
                snap._state,
                leaf_files=leaf_files,
                format_version=format_version,
            )
            break
        except ManifestLeafError as e:
            # the root this snapshot was resolved from lists a leaf deleted meanwhile (its
            # writer has not rebuilt it yet, or was killed first): resolve the version
            # again without it (format.md, "Writing a checkpoint", step 1)
            base = snap._state.base
            if not isinstance(base, Root) or attempt == 7:
                raise
            log.warning(
                "manifest of version %d of %s is unusable (%s); writing the manifest of "
                "version %d on an older one",
                base.version,
                storage.uri,
                e,
                snapshot.version,
            )
            avoid.add(base.version)
            snap = load_snapshot(storage, snapshot.version, avoid=frozenset(avoid))
    if root is None:
        return snap
    root = keep_whole(storage, root, leaf_files=leaf_files)
    return snapshot_of(storage, snapshot_state(snap._state, root))


def keep_whole(storage: Storage, root: Root, *, leaf_files: int) -> Root:
    """``root`` if every leaf and plans file it names is in storage now (one listing),
    else the root of its version written again on a whole base (:func:`rebuild_root`)."""
    gone = missing_leaves(storage, root)
    if not gone:
        return root
    log.warning(
        "the manifest of version %d of %s lists leaves deleted meanwhile (%s); "
        "writing it again on a whole manifest",
        root.version,
        storage.uri,
        ", ".join(gone),
    )
    return rebuild_root(storage, root.version, leaf_files=leaf_files)


def rebuild_root(storage: Storage, version: int, *, leaf_files: int) -> Root:
    """Write the root of ``version`` again, replacing the one there, on the newest older
    root whose leaves are all in storage (or by replay from the first commit), and
    check the result the same way. :class:`CorruptLogError` when no such base is left
    (the commits since one are gone)."""
    avoid = {version}
    for _ in range(8):
        snap = load_snapshot(storage, version, avoid=frozenset(avoid))
        base = snap._state.base
        if isinstance(base, Root) and missing_leaves(storage, base):
            avoid.add(base.version)
            continue
        try:
            root = rewrite_root(storage, snap._files(), snap._state, leaf_files=leaf_files)
        except ManifestLeafError:  # a leaf of the base went between the listing and now
            if not isinstance(base, Root):
                raise
            avoid.add(base.version)
            continue
        if not missing_leaves(storage, root):
            return root
        if isinstance(base, Root):  # its leaves went while we built on them: go older
            avoid.add(base.version)
    raise CorruptLogError(
        f"expected to write the manifest of version {version} of {storage.uri} again on a "
        f"whole older manifest, found leaves deleted under each one tried (versions "
        f"{sorted(avoid)}): an expiry or vacuum of a lakelog without cleanup leases may be "
        f"running beside this one. Let it finish, then run this again."
    )


def repair_roots(
    storage: Storage, deleted: Sequence[str], *, oldest: int, leaf_files: int
) -> list[int]:
    """After ``deleted`` leaves were deleted: write again every root at or above
    ``oldest`` that lists one of them (a checkpoint published after the deleter listed
    the roots, and checked before it deleted). Returns the versions repaired."""
    gone = set(deleted)
    if not gone:
        return []
    retained = [m for m in list_log(storage).manifests if m >= oldest]
    damaged = [v for v, paths in root_leaves(storage, retained).items() if gone.intersection(paths)]
    for v in sorted(damaged):
        log.warning(
            "the manifest of version %d of %s lists a leaf just deleted; writing it again",
            v,
            storage.uri,
        )
        rebuild_root(storage, v, leaf_files=leaf_files)
    return sorted(damaged)
