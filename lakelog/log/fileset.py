"""The live files of one version, held lazily: a base plus the tail of changes since.

The base is a version-2 root (its leaves read only when an operation needs them, from
the process-wide leaf cache) or a version-1 file table; the tail is what the commits
after the base added and removed (``lakelog.log.files.ReplayState``). A base row is
live unless its root marks it removed or the tail removed or added its path again.

Every operation reads only what it needs: a filtered plan prunes leaves by the root's
summaries before reading any; counts come from the root, corrected by the few leaves
that hold files the tail removed (:meth:`FileSet.locate`); the full file table is built
only when a caller asks for every file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..filters import FileStatsColumns, Predicate, prune_mask
from ..storage import Storage
from .actions import AddFile, Metadata
from .file_index import (
    cast_lenient,
    concat_stats_columns,
    filter_stats_columns,
    stats_columns,
)
from .filelist import FileList
from .files import ReplayState, empty_files, files_from_adds
from .leaves import Leaf, leaf_schema, load_leaves
from .manifests import Root

__all__ = ["Block", "FileSet", "conform_struct", "entries_block", "to_current"]

_PIN_SHARE = 4
"""A plan keeping less than 1/_PIN_SHARE of a block's files copies their rows."""
_LOAD_BATCH = 16
"""Leaves read (and held) at once by an operation over many leaves."""


Block = Leaf
"""A block of file entries in typed columns: a manifest leaf, the entries of a version-1
manifest, or the tail's adds. One representation for every source of live files."""


def entries_block(files: pa.Table, schema: pa.Schema, partition_by: Sequence[str]) -> Leaf:
    """A block of typed entries from a :func:`~.files.files_from_adds` table (a version-1 manifest,
    or the adds since a base), converted in one vectorized pass."""
    return Leaf.of_files(files, schema, partition_by)


def _table_of(block: Block, mask: Any) -> pa.Table:
    """The live rows of a block as a file table (:func:`~.files.files_from_adds`)."""
    return files_from_adds(block.data_files(mask))


def to_current(entries: pa.Table, schema: pa.Schema, partition_by: Sequence[str]) -> pa.Table:
    """Leaf rows written under an older schema, in the current leaf schema (fields by
    name; what does not cast is unknown)."""
    target = leaf_schema(schema, partition_by)
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
            cols.append(conform_struct(col, f.type))
        else:
            try:
                cols.append(col.cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                cols.append(pa.nulls(n, f.type))
    return pa.table(cols, schema=target)


def conform_struct(values: pa.Array, t: pa.StructType) -> pa.StructArray:
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


def _and(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return b
    return a if b is None else a & b


class FileSet:
    """The live files of one version (immutable; caches what it computed): the one
    live-file value a snapshot holds.

    Made from a replayed state (:meth:`of_state`) it keeps that state (the app versions
    and plans beside the files) and the manifests found unusable while resolving it
    (``avoid``): a snapshot whose manifest turns out unusable swaps in the file set of
    the same version resolved without it."""

    def __init__(
        self,
        storage: Storage,
        metadata: Metadata,
        schema: pa.Schema,
        base: Root | Leaf,
        added: dict[str, AddFile],
        removed: dict[str, dict[str, str | None]],
        *,
        state: ReplayState | None = None,
        avoid: frozenset[int] = frozenset(),
    ) -> None:
        self.state = state
        """The replayed state the files come from (None: a file set made otherwise)."""
        self.avoid = avoid
        """Manifests found unusable while resolving this version."""
        self.storage = storage
        self.metadata = metadata
        self.schema = schema
        self.partition_by = tuple(metadata.partition_by)
        self.key = metadata.schema
        self.base = base
        self.root = base if isinstance(base, Root) else None
        self.flat = base if isinstance(base, Leaf) else None
        self.added = added
        self.removed = removed
        self._tail: Leaf | None = None
        self._located: dict[int, np.ndarray] | None = None
        self._dead: np.ndarray | None = None
        self._lock = threading.RLock()

    @classmethod
    def of_state(
        cls,
        storage: Storage,
        metadata: Metadata,
        schema: pa.Schema,
        state: ReplayState,
        *,
        avoid: frozenset[int] = frozenset(),
    ) -> FileSet:
        """The live files of a replayed state (its base set; ``schema``: the physical
        schema of ``metadata``)."""
        assert state.base is not None  # set when the snapshot was made
        return cls(
            storage,
            metadata,
            schema,
            state.base,
            state.added,
            state.removed,
            state=state,
            avoid=avoid,
        )

    # -- the tail and what it makes dead in the base -----------------------------------
    def dead(self) -> dict[str, dict[str, str | None]]:
        out = {p: a.partition for p, a in self.added.items()}
        out.update(self.removed)
        return out

    def tail(self) -> Leaf | None:
        """The files added since the base, as typed entries in the current schema."""
        if not self.added:
            return None
        with self._lock:
            if self._tail is None:
                adds = files_from_adds(list(self.added.values()))
                self._tail = entries_block(adds, self.schema, self.partition_by)
            return self._tail

    def flat_live(self) -> np.ndarray | None:
        """Mask of the live rows of a version-1 base (None: all)."""
        assert self.flat is not None
        dead = self.dead()
        if not dead or not len(self.flat):
            return None
        hit = pc.is_in(self.flat.paths(), value_set=pa.array(list(dead), pa.string()))
        return np.asarray(pc.invert(hit))

    def locate(self) -> dict[int, np.ndarray]:
        """For each leaf holding files the tail made dead: their positions (only rows
        the root still counts live). Only leaves whose path range holds such a path,
        and whose partition ranges hold its partition, are read; a path not found that
        way is looked for by path range alone."""
        with self._lock:
            if self._located is None:
                self._located = self._locate() if self.root is not None else {}
            return self._located

    def _locate(self) -> dict[int, np.ndarray]:
        root = self.root
        assert root is not None
        dead = self.dead()
        if not dead or not len(root):
            return {}
        order = sorted(dead)
        paths = np.array(order, dtype=object)
        # each leaf's slice [lo, hi) of the sorted dead paths within its path range, for
        # every leaf at once (a leaf with no range bounds takes them all)
        pmin = root.entries.column("path_min")
        pmax = root.entries.column("path_max")
        unbounded = np.asarray(pc.or_(pc.is_null(pmin), pc.is_null(pmax)))
        lows = np.searchsorted(paths, np.array(pmin.fill_null("").to_pylist(), dtype=object))
        highs = np.searchsorted(
            paths, np.array(pmax.fill_null("").to_pylist(), dtype=object), "right"
        )
        lows[unbounded], highs[unbounded] = 0, len(paths)
        candidates = np.flatnonzero(lows < highs)
        typed = self._hint_columns(order, dead)
        found: dict[int, set[int]] = {}
        hit_paths: set[str] = set()
        # pass 1: path range and partition ranges; pass 2: path range alone, for paths
        # not found (a remove that named no partition, or a different one)
        for by_partition in (True, False):
            todo: dict[int, np.ndarray] = {}
            for i in candidates.tolist():
                lo, hi = int(lows[i]), int(highs[i])
                idx = np.arange(lo, hi)
                if by_partition and typed:
                    idx = idx[self._in_partition_ranges(i, typed, lo, hi)]
                else:
                    idx = np.array([j for j in idx if paths[j] not in hit_paths], dtype=np.int64)
                if len(idx):
                    todo[i] = idx
            for batch in _batches(sorted(todo), _LOAD_BATCH):
                leaves = load_leaves(self.storage, [root.leaves[i] for i in batch])
                for i, leaf in zip(batch, leaves, strict=True):
                    wanted = pa.array(list(paths[todo[i]]), pa.string())
                    pos = np.flatnonzero(np.asarray(pc.is_in(leaf.paths(), value_set=wanted)))
                    if not len(pos):
                        continue
                    pos = np.setdiff1d(pos, root.removed(i), assume_unique=True)
                    if len(pos):
                        found.setdefault(i, set()).update(pos.tolist())
                        hit_paths.update(leaf.paths().take(pa.array(pos)).to_pylist())
            if len(hit_paths) == len(paths) or not typed:
                break
        return {i: np.array(sorted(p), dtype=np.int64) for i, p in found.items()}

    def _hint_columns(
        self, order: list[str], dead: dict[str, dict[str, str | None]]
    ) -> dict[str, tuple[pa.Array, np.ndarray]]:
        """Per partition column: the dead paths' hinted values (typed) and which paths
        named one at all. Empty when the table is unpartitioned or no hint names one."""
        out: dict[str, tuple[pa.Array, np.ndarray]] = {}
        for c in self.partition_by:
            named = np.array([c in dead[p] for p in order], dtype=bool)
            if not named.any():
                continue
            strings = pa.array([dead[p].get(c) for p in order], pa.string())
            out[c] = (cast_lenient(strings, self.schema.field(c).type), named)
        return out

    def _in_partition_ranges(
        self, i: int, typed: dict[str, tuple[pa.Array, np.ndarray]], lo: int, hi: int
    ) -> np.ndarray:
        """Which of the dead paths ``lo:hi`` may be in leaf ``i`` by their partition hint."""
        root = self.root
        assert root is not None
        keep = np.ones(hi - lo, dtype=bool)
        mins = root.entries.column("min") if "min" in root.entries.column_names else None
        maxs = root.entries.column("max") if "max" in root.entries.column_names else None
        nulls = (
            root.entries.column("null_count") if "null_count" in root.entries.column_names else None
        )
        for c, (values, named) in typed.items():
            part = values.slice(lo, hi - lo)
            t = part.type
            lo_v = _field_at(mins, c, i, t)
            hi_v = _field_at(maxs, c, i, t)
            n_null = _field_at(nulls, c, i, pa.int64())
            fits = np.ones(hi - lo, dtype=bool)
            if lo_v is not None and hi_v is not None:
                inside = pc.and_(pc.greater_equal(part, lo_v), pc.less_equal(part, hi_v))
                fits = np.asarray(pc.fill_null(inside, False))
            elif lo_v is None and hi_v is None and n_null is not None:
                fits = np.zeros(hi - lo, dtype=bool)  # the leaf holds only nulls
            if n_null is None or n_null.as_py():
                fits |= np.asarray(part.is_null())
            keep &= fits | ~named[lo:hi]
        return keep

    def _dead_sorted(self) -> np.ndarray:
        with self._lock:
            if self._dead is None:
                self._dead = np.array(sorted(self.dead()), dtype=object)
            return self._dead

    def leaf_live(self, i: int, leaf: Leaf) -> np.ndarray | None:
        """Mask of the live rows of leaf ``i`` (None: all): the root's removed positions,
        and the rows whose path the tail made dead (looked up in this leaf only)."""
        root = self.root
        assert root is not None
        removed = root.removed(i)
        mask: np.ndarray | None = None
        if len(removed):
            mask = np.ones(len(leaf), dtype=bool)
            mask[removed] = False
        dead = self._dead_sorted()
        if len(dead):
            lo, hi = 0, len(dead)
            pmin, pmax = root.entries.column("path_min")[i], root.entries.column("path_max")[i]
            if pmin.is_valid and pmax.is_valid:
                lo = int(np.searchsorted(dead, pmin.as_py(), "left"))
                hi = int(np.searchsorted(dead, pmax.as_py(), "right"))
            if lo < hi:
                hit = pc.is_in(leaf.paths(), value_set=pa.array(list(dead[lo:hi]), pa.string()))
                if pc.any(hit).as_py():
                    alive = np.asarray(pc.invert(hit))
                    mask = alive if mask is None else mask & alive
        return mask

    # -- iteration -------------------------------------------------------------------------
    def blocks(
        self, leaf_filter: Callable[[Root], np.ndarray] | None = None
    ) -> Iterator[tuple[Block, np.ndarray | None]]:
        """Every block with its live mask: the leaves (those ``leaf_filter`` keeps),
        read a batch at a time, then the version-1 base, then the tail."""
        if self.root is not None:
            keep = np.asarray(self.root.entries.column("live_files")) > 0
            if leaf_filter is not None:
                keep &= leaf_filter(self.root)
            chosen = np.flatnonzero(keep).tolist()
            for batch in _batches(chosen, _LOAD_BATCH):
                leaves = load_leaves(self.storage, [self.root.leaves[i] for i in batch])
                for i, leaf in zip(batch, leaves, strict=True):
                    yield leaf, self.leaf_live(i, leaf)
        if self.flat is not None:
            yield self.flat, self.flat_live()
        tail = self.tail()
        if tail is not None:
            yield tail, None

    def files(self, pred: Predicate | None, names: frozenset[str] | None) -> FileList:
        """Live files, pruned by ``pred`` (None: all): leaves by the root's summaries,
        then files by their typed columns. ``names``: the columns ``pred`` refers to.
        The result holds the blocks' columns; :class:`DataFile` values are built only
        for the files a caller takes."""
        parts: list[tuple[Block, np.ndarray | None]] = []
        leaf_filter = None
        if pred is not None:

            def leaf_filter(root: Root) -> np.ndarray:
                summary = root.summary_columns(self.schema, self.partition_by, names, self.key)
                return np.asarray(prune_mask(pred, summary))

        for block, live in self.blocks(leaf_filter):
            mask = live
            if pred is not None:
                cols = block.stats_columns(self.schema, self.partition_by, names, self.key)
                mask = _and(np.asarray(prune_mask(pred, cols)), live)
            if mask is None:
                parts.append((block, None))
            elif mask.any():
                pos = np.flatnonzero(mask)
                if len(pos) * _PIN_SHARE < len(block):
                    # a few files of a large block: hold a copy of their rows, not the
                    # whole block (a sparse plan over many leaves would pin them all)
                    parts.append((Leaf(block.table.take(pa.array(pos))), None))
                else:
                    parts.append((block, pos))
        return FileList(parts)

    def paths(self) -> list[str]:
        out: list[str] = []
        for block, live in self.blocks():
            paths = block.paths()
            out.extend((paths if live is None else paths.filter(pa.array(live))).to_pylist())
        return out

    def counts(self) -> tuple[int, int, int]:
        """Live files, rows and bytes: the root's counts less the located dead rows,
        plus the version-1 base's live rows and the tail's."""
        files = rows = size = 0
        if self.root is not None:
            files, rows, size = self.root.live_counts()
            located = self.locate()
            if located:
                batch = sorted(located)
                for i, leaf in zip(
                    batch,
                    load_leaves(self.storage, [self.root.leaves[i] for i in batch]),
                    strict=True,
                ):
                    pos = pa.array(located[i])
                    files -= len(located[i])
                    rows -= leaf.live_rows(pos)
                    size -= int(pc.sum(leaf.column("size_bytes").take(pos)).as_py() or 0)
        extra: list[tuple[Leaf, np.ndarray | None]] = []
        if self.flat is not None:
            extra.append((self.flat, self.flat_live()))
        tail = self.tail()
        if tail is not None:
            extra.append((tail, None))
        for block, live in extra:
            pos = None if live is None else pa.array(np.flatnonzero(live))
            sizes = block.column("size_bytes")
            files += len(block) if pos is None else len(pos)
            rows += block.live_rows(pos)
            size += int(pc.sum(sizes if pos is None else sizes.take(pos)).as_py() or 0)
        return files, rows, size

    def file_table(self) -> pa.Table:
        """Every live file as one file table (base order, then the tail)."""
        parts = [
            _table_of(b, None if live is None else pa.array(live)) for b, live in self.blocks()
        ]
        return pa.concat_tables(parts) if parts else empty_files()

    def entries(self) -> pa.Table:
        """Every live file as one table of typed entries (the leaf schema of the current
        table schema), in :meth:`file_table` order."""
        parts = [
            to_current(
                b.table if live is None else b.table.filter(pa.array(live)),
                self.schema,
                self.partition_by,
            )
            for b, live in self.blocks()
        ]
        if not parts:
            return leaf_schema(self.schema, self.partition_by).empty_table()
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def stats_columns(self, names: frozenset[str] | None) -> FileStatsColumns:
        """Typed columns of every live file, in :meth:`file_table` order."""
        out: FileStatsColumns | None = None
        for block, live in self.blocks():
            cols = block.stats_columns(self.schema, self.partition_by, names, self.key)
            if live is not None:
                cols = filter_stats_columns(cols, pa.array(live))
            out = cols if out is None else concat_stats_columns(out, cols)
        if out is None:
            return stats_columns(empty_files(), self.schema, self.partition_by, columns=names)
        return out


def _field_at(column: Any, name: str, i: int, t: pa.DataType) -> pa.Scalar | None:
    """Field ``name`` of row ``i`` of a struct column in type ``t``; None if absent,
    null, or not castable."""
    if column is None:
        return None
    struct = column.chunk(0) if isinstance(column, pa.ChunkedArray) else column
    if struct.type.get_field_index(name) < 0 or not struct[i].is_valid:
        return None
    value = struct.field(name)[i]
    if not value.is_valid:
        return None
    try:
        return value if value.type == t else value.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def _batches(items: Sequence[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])
