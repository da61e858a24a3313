"""Bounded-memory ordering of rows by a ``uint64`` key, and writing them in order.

:class:`ExternalSorter` takes record batches, computes a key per row and
yields the rows back in key order. While the buffered rows fit in
``max_bytes`` (Arrow bytes) they are sorted in memory: one ``argsort`` of
the keys, then a ``take`` per output slice, so the sorted copy never exists
at once. Beyond that, each full buffer is sorted and spilled as a run to a
temporary Parquet file, and the runs are combined by a streaming k-way
merge: every step takes, from each run's current batch, the rows with keys
up to the smallest "last key" among the runs, and sorts only those. Memory
is then one batch per run; nothing loops over rows in Python.

:func:`write_segments` cuts the ordered stream into output files: key
segments (``[start, end)`` ranges of the key), each cut into a given number
of files of equal row counts; files are written on background threads
(Parquet encoding releases the GIL) while the next rows are being ordered.
Inside a file, row groups are cut the same way (:func:`row_group_cut`): near
the row group size, at the key boundary with the highest differing bit, so a
row group holds whole aligned blocks of the curve (or tiles) and its min/max
statistics prune.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import queue
import shutil
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from ... import threads
from ...errors import InvalidArgumentError
from ...io.writer import RollingWriter, SpecWriter
from ...log.actions import AddFile

__all__ = [
    "KEY_MAX",
    "ExternalSorter",
    "FileCut",
    "KeyFn",
    "RowGroupCutter",
    "Segment",
    "SortStats",
    "WrittenFile",
    "file_cuts",
    "row_group_cut",
    "sorted_keys",
    "stable_argsort",
    "write_segments",
]

KeyFn = Callable[[pa.RecordBatch], npt.NDArray[np.uint64]]
"""Computes the ``uint64`` sort key of every row of a batch."""

_KEY = "__lakelog_sort_key"
_SLICE_ROWS = 131_072
_KEY_CHUNK = 262_144
_SCATTER_ROWS = 131_072
_HIST_BITS = 20
"""Keys below ``2**_HIST_BITS`` are counted per value as they are computed (a chunk's
counts then take at most 8 MiB; curve keys over two columns use 18 bits)."""
_Hist = npt.NDArray[np.int64] | None


def stable_argsort(keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.intp]:
    """``np.argsort(keys, kind="stable")``, by 16-bit radix passes when the keys span less
    than ``2**32`` (curve keys over a few hundred ranks per column always do): numpy
    sorts 16-bit integers by radix, several times faster than a merge sort of 64-bit ones.
    """
    if len(keys) < 4096:
        return np.argsort(keys, kind="stable")
    lo = keys.min()
    span = int(keys.max()) - int(lo)
    if span >= 1 << 32:
        return np.argsort(keys, kind="stable")
    rel = keys - lo
    if span < 1 << 16:
        return np.argsort(rel.astype(np.uint16), kind="stable")
    order = np.argsort((rel & np.uint64(0xFFFF)).astype(np.uint16), kind="stable")
    high = (rel[order] >> np.uint64(16)).astype(np.uint16)
    result: npt.NDArray[np.intp] = order[np.argsort(high, kind="stable")]
    return result


def sorted_keys(keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """``np.sort(keys)``; a counting sort when the keys span less than ``2**24``."""
    counted = _counted(keys)
    if counted is None:
        return np.sort(keys)
    result: npt.NDArray[np.uint64] = np.repeat(*counted)
    return result


def _counted(
    keys: npt.NDArray[np.uint64],
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]] | None:
    """Distinct keys in order and their counts by one ``bincount``, when the keys span
    less than ``2**24`` (and not far more than their number); else None."""
    if len(keys) < 1 << 16:
        return None
    lo = keys.min()
    span = int(keys.max()) - int(lo)
    if span >= 1 << 24 or span > 4 * len(keys):
        return None
    counts = np.bincount((keys - lo).astype(np.intp), minlength=span + 1)
    present = np.flatnonzero(counts)
    distinct = present.astype(np.uint64)
    distinct += lo
    return distinct, counts[present].astype(np.int64)


@dataclass
class SortStats:
    """What one sort did: rows, spilled runs and their bytes on disk."""

    rows: int = 0
    bytes: int = 0
    runs: int = 0
    spilled_bytes: int = 0


class ExternalSorter:
    """Orders batches by key within ``max_bytes`` of buffered Arrow data.

    Use as a context manager: temporary run files are removed on exit. Call
    :meth:`add` with the input, then :meth:`key_counts` (distinct keys and
    their counts, for choosing file cuts) and :meth:`ordered` (the rows in key
    order). With ``key_bits`` (keys are below ``2**key_bits``, at most 20), keys
    are counted per value as they are computed, so :meth:`key_counts` is exact
    and free even after spilling.
    """

    def __init__(
        self,
        schema: pa.Schema,
        key_fn: KeyFn,
        *,
        max_bytes: int,
        spill_dir: str | None = None,
        slice_rows: int = _SLICE_ROWS,
        max_sample: int = 4_000_000,
        key_bits: int | None = None,
    ) -> None:
        if max_bytes <= 0:
            raise InvalidArgumentError(f"expected max_bytes > 0, found {max_bytes}")
        self.schema = schema
        self.key_fn = key_fn
        self.max_bytes = max_bytes
        self.spill_dir = spill_dir
        self.slice_rows = self._max_slice = slice_rows
        self.max_sample = max_sample
        self.stats = SortStats()
        self._tmp: str | None = None
        self._runs: list[str] = []
        self._batches: list[pa.RecordBatch] = []
        self._keys: list[npt.NDArray[np.uint64]] = []
        self._sorted_keys: npt.NDArray[np.uint64] | None = None
        # keys known to be small: count them per value while they are computed
        self._hist: npt.NDArray[np.int64] | None = None
        if key_bits is not None and 0 < key_bits <= _HIST_BITS:
            self._hist = np.zeros(1 << key_bits, dtype=np.int64)

    def __enter__(self) -> ExternalSorter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self._runs = []
        self._batches, self._keys, self._sorted_keys = [], [], None

    def _key_chunk(self, table: pa.Table) -> tuple[npt.NDArray[np.uint64], _Hist]:
        keys = np.ascontiguousarray(self.key_fn(table), dtype=np.uint64)  # type: ignore[arg-type]
        if self._hist is None:
            return keys, None
        if not len(keys):
            return keys, np.zeros_like(self._hist)
        if int(keys.max()) >= len(self._hist):
            return keys, None  # not as small as promised: key_counts falls back to sorting
        return keys, np.bincount(keys.view(np.int64), minlength=len(self._hist))

    def _keyed(
        self, batches: Iterable[pa.RecordBatch]
    ) -> Iterator[tuple[list[pa.RecordBatch], npt.NDArray[np.uint64], _Hist]]:
        """Batches grouped into chunks of about ``_KEY_CHUNK`` rows (at most a quarter of
        ``max_bytes``) with their keys (and key counts), computed on two helper threads
        (numpy releases the GIL on large arrays); at most three chunks are in flight."""
        with threads.pool("lakelog-keys", 2) as pool:
            ahead: deque[tuple[list[pa.RecordBatch], Future[tuple[Any, _Hist]]]] = deque()
            group: list[pa.RecordBatch] = []
            rows = nbytes = 0
            chunk_bytes = max(1, self.max_bytes // 4)

            def submit() -> None:
                table = pa.Table.from_batches(group, schema=self.schema)
                ahead.append((list(group), pool.submit(self._key_chunk, table)))

            for batch in batches:
                if not batch.num_rows:
                    continue
                group.append(batch)
                rows += batch.num_rows
                nbytes += batch.nbytes
                if rows >= _KEY_CHUNK or nbytes >= chunk_bytes:
                    submit()
                    group, rows, nbytes = [], 0, 0
                while len(ahead) > 2:
                    g, fut = ahead.popleft()
                    yield g, *fut.result()
            if group:
                submit()
            while ahead:
                g, fut = ahead.popleft()
                yield g, *fut.result()

    def add(self, batches: Iterable[pa.RecordBatch]) -> None:
        """Consume the input: buffer it, sorting and spilling a run whenever it is full."""
        buf: list[pa.RecordBatch] = []
        keys: list[npt.NDArray[np.uint64]] = []
        size = 0
        for group, k, hist in self._keyed(batches):
            if self._hist is not None:
                if hist is None:
                    self._hist = None
                else:
                    self._hist += hist
            pos = 0
            for batch in group:
                buf.append(batch)
                keys.append(k[pos : pos + batch.num_rows])
                pos += batch.num_rows
                size += batch.nbytes + 8 * batch.num_rows
                self.stats.rows += batch.num_rows
                self.stats.bytes += batch.nbytes
            # output slices (and the writers' queues of them) stay a small part of the budget
            row = max(1, self.stats.bytes // max(1, self.stats.rows))
            self.slice_rows = max(1024, min(self._max_slice, self.max_bytes // (16 * row)))
            if size >= self.max_bytes:
                self._spill(buf, keys)
                buf, keys, size = [], [], 0
        if self._runs:
            if buf:
                self._spill(buf, keys)
            return
        self._batches, self._keys = buf, keys

    def key_sample(self) -> tuple[npt.NDArray[np.uint64], float]:
        """Sorted keys of all rows (in memory) or of every k-th row of each run; and k."""
        if not self._runs:
            if self._sorted_keys is None:
                allkeys = np.concatenate(self._keys) if self._keys else np.zeros(0, np.uint64)
                self._sorted_keys = sorted_keys(allkeys)
            return self._sorted_keys, 1.0
        step = max(1, -(-self.stats.rows // self.max_sample))
        parts = []
        for path in self._runs:
            col = pq.read_table(path, columns=[_KEY]).column(0)
            parts.append(col.to_numpy().astype(np.uint64)[::step])
        return sorted_keys(np.concatenate(parts)), float(step)

    def key_counts(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        """Distinct keys in order and their row counts (of all rows in memory, or of the
        sample of :meth:`key_sample` when runs were spilled and keys were not counted
        as they came); for :func:`file_cuts`."""
        if self._hist is not None:
            present = np.flatnonzero(self._hist)
            return present.astype(np.uint64), self._hist[present]
        if self._runs or self._sorted_keys is not None:
            return _runs(self.key_sample()[0])
        keys = np.concatenate(self._keys) if self._keys else np.zeros(0, np.uint64)
        counted = _counted(keys)
        return _runs(np.sort(keys)) if counted is None else counted

    def row_sample(self, n: int) -> pa.Table | None:
        """About ``n`` rows spread over everything added (for size estimates)."""
        if self._runs:
            parts = []
            for path in self._runs:
                f = pq.ParquetFile(path)
                parts.append(f.read_row_group(0).drop_columns([_KEY]))
            table = pa.concat_tables(parts)
        elif self._batches:
            # per batch: a take over many chunks would first concatenate all of them
            total = sum(b.num_rows for b in self._batches)
            if total <= n:
                return pa.Table.from_batches(self._batches, schema=self.schema)
            idx = np.linspace(0, total - 1, n).astype(np.int64)
            starts = np.cumsum([0] + [b.num_rows for b in self._batches])
            cut = np.searchsorted(idx, starts)
            picked = [
                b.take(pa.array(idx[cut[i] : cut[i + 1]] - starts[i]))
                for i, b in enumerate(self._batches)
                if cut[i + 1] > cut[i]
            ]
            return pa.Table.from_batches(picked, schema=self.schema)
        else:
            return None
        if table.num_rows > n:
            idx = np.linspace(0, table.num_rows - 1, n).astype(np.int64)
            table = table.take(pa.array(idx))
        return table

    def ordered(
        self, cuts: Sequence[int] | None = None
    ) -> Iterator[tuple[pa.Table, npt.NDArray[np.uint64]]]:
        """Yield ``(rows, keys)`` chunks with keys non-decreasing across the stream.

        With ``cuts`` (the first key of each output file), rows held in memory
        are first scattered into one bucket per file, batch by batch, then each
        bucket is sorted alone: two cache-friendly passes instead of one
        random gather over everything.
        """
        if self._runs:
            yield from self._merge()
            return
        if not self._batches:
            return
        if cuts is None or len(cuts) <= 1:
            table = pa.Table.from_batches(self._batches, schema=self.schema)
            allkeys = np.concatenate(self._keys)
            self._batches, self._keys = [], []
            order = stable_argsort(allkeys)
            yield from self._take_slices(table, order, allkeys[order])
            return
        yield from self._bucketed(np.array(cuts[1:], dtype=np.uint64))

    def _bucketed(
        self, bounds: npt.NDArray[np.uint64]
    ) -> Iterator[tuple[pa.Table, npt.NDArray[np.uint64]]]:
        nb = len(bounds) + 1
        parts: list[list[pa.Table]] = [[] for _ in range(nb)]
        part_keys: list[list[npt.NDArray[np.uint64]]] = [[] for _ in range(nb)]

        def scatter(group: list[pa.RecordBatch], k: npt.NDArray[np.uint64]) -> list[Any]:
            b = np.searchsorted(bounds, k, side="right")
            order = stable_argsort(b.astype(np.uint64))
            counts = np.bincount(b, minlength=nb)
            offs = np.concatenate([[0], np.cumsum(counts)])
            taken = pa.Table.from_batches(group, schema=self.schema).take(pa.array(order))
            ks = k[order]
            return [
                (j, taken.slice(int(offs[j]), int(counts[j])), ks[offs[j] : offs[j + 1]])
                for j in np.flatnonzero(counts)
            ]

        def groups() -> Iterator[tuple[list[pa.RecordBatch], npt.NDArray[np.uint64]]]:
            # scatter a few batches at once: fewer, larger pieces per bucket
            group: list[pa.RecordBatch] = []
            gkeys: list[npt.NDArray[np.uint64]] = []
            rows = 0
            for batch, k in zip(self._batches, self._keys, strict=True):
                group.append(batch)
                gkeys.append(k)
                rows += batch.num_rows
                if rows >= _SCATTER_ROWS:
                    yield group, np.concatenate(gkeys)
                    group, gkeys, rows = [], [], 0
            if group:
                yield group, np.concatenate(gkeys)

        with threads.pool("lakelog-scatter", 2) as pool:
            futures = [pool.submit(scatter, g, k) for g, k in groups()]
            self._batches, self._keys = [], []
            for fut in futures:
                for j, piece, ks in fut.result():
                    parts[j].append(piece)
                    part_keys[j].append(ks)
            futures.clear()

            def sort_bucket(j: int) -> tuple[pa.Table, npt.NDArray[np.uint64]]:
                table = pa.concat_tables(parts[j])  # no copy: take handles the chunks
                k = np.concatenate(part_keys[j])
                parts[j], part_keys[j] = [], []
                order = stable_argsort(k)
                return table.take(pa.array(order)), k[order]

            todo = [j for j in range(nb) if parts[j]]
            ahead = deque(pool.submit(sort_bucket, j) for j in todo[:2])
            for i in range(len(todo)):
                table, k = ahead.popleft().result()
                if i + 2 < len(todo):
                    ahead.append(pool.submit(sort_bucket, todo[i + 2]))
                for st in range(0, table.num_rows, self.slice_rows):
                    yield table.slice(st, self.slice_rows), k[st : st + self.slice_rows]

    def _take_slices(
        self, table: pa.Table, order: npt.NDArray[np.intp], keys: npt.NDArray[np.uint64]
    ) -> Iterator[tuple[pa.Table, npt.NDArray[np.uint64]]]:
        # gather the next slices on a helper thread while this one is consumed
        starts = list(range(0, len(order), self.slice_rows))
        with threads.pool("lakelog-take", 1) as pool:

            def submit(st: int) -> Future[pa.Table]:
                return pool.submit(table.take, pa.array(order[st : st + self.slice_rows]))

            ahead = deque(submit(st) for st in starts[:2])
            for j, st in enumerate(starts):
                rows = ahead.popleft().result()
                if j + 2 < len(starts):
                    ahead.append(submit(starts[j + 2]))
                yield rows, keys[st : st + rows.num_rows]

    # -- spilling ----------------------------------------------------------------------
    def _spill(self, buf: list[pa.RecordBatch], keys: list[npt.NDArray[np.uint64]]) -> None:
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="lakelog-sort-", dir=self.spill_dir)
        path = os.path.join(self._tmp, f"run-{len(self._runs):05d}.parquet")
        schema = self.schema.append(pa.field(_KEY, pa.uint64()))
        table = pa.Table.from_batches(buf, schema=self.schema)
        allkeys = np.concatenate(keys) if len(keys) > 1 else keys[0]
        order = stable_argsort(allkeys)
        ordered_keys = allkeys[order]
        del buf, keys
        with pq.ParquetWriter(path, schema, compression="lz4") as w:
            for chunk, k in self._take_slices(table, order, ordered_keys):
                w.write_table(chunk.append_column(_KEY, pa.array(k)), row_group_size=len(k))
        self._runs.append(path)
        pa.default_memory_pool().release_unused()  # give the run's memory back to the OS
        self.stats.runs += 1
        self.stats.spilled_bytes += os.path.getsize(path)

    def _merge(self) -> Iterator[tuple[pa.Table, npt.NDArray[np.uint64]]]:
        files = [pq.ParquetFile(p) for p in self._runs]
        rows = max(1, sum(f.metadata.num_rows for f in files))
        row_bytes = max(1, self.stats.bytes // rows)  # as Arrow data in memory
        # one batch per run (plus its merge copy) fits the budget
        batch_rows = max(1024, self.max_bytes // (2 * len(files) * row_bytes))
        readers = [f.iter_batches(batch_size=batch_rows) for f in files]
        heads: list[tuple[pa.Table, npt.NDArray[np.uint64]] | None] = [
            self._next(r) for r in readers
        ]
        while True:
            live = [i for i, h in enumerate(heads) if h is not None]
            if not live:
                return
            bound = min(heads[i][1][-1] for i in live)  # type: ignore[index]
            parts: list[pa.Table] = []
            part_keys: list[npt.NDArray[np.uint64]] = []
            for i in live:
                head = heads[i]
                assert head is not None
                t, k = head
                n = int(np.searchsorted(k, bound, side="right"))
                if n:
                    parts.append(t.slice(0, n))
                    part_keys.append(k[:n])
                heads[i] = (t.slice(n), k[n:]) if n < len(k) else self._next(readers[i])
            merged = pa.concat_tables(parts)
            mk = np.concatenate(part_keys)
            order = stable_argsort(mk)
            yield merged.take(pa.array(order)), mk[order]

    def _next(
        self, reader: Iterator[pa.RecordBatch]
    ) -> tuple[pa.Table, npt.NDArray[np.uint64]] | None:
        for batch in reader:
            if batch.num_rows:
                k = batch.column(_KEY).to_numpy(zero_copy_only=False).astype(np.uint64)
                return pa.Table.from_batches([batch.drop_columns([_KEY])]), k
        return None


# -- writing ---------------------------------------------------------------------------


KEY_MAX = (1 << 64) - 1
"""The largest key; the last segment ends here (inclusive)."""


class Segment(msgspec.Struct, frozen=True, kw_only=True):
    """Rows with keys in ``[key_start, key_end)`` become ``files`` files of about equal rows.

    The last segment of a plan ends at :data:`KEY_MAX` and includes it.
    ``rows`` is the expected row count (exact or estimated); the last file of
    a segment takes any surplus.
    """

    key_start: int
    key_end: int
    rows: int
    files: int
    tier: str = "base"


@dataclass(frozen=True)
class WrittenFile:
    """One output file with the key range of its rows and its segment's tier."""

    add: AddFile
    key_min: int
    key_max: int
    tier: str


@dataclass(frozen=True)
class FileCut:
    """One output file: the rows with keys in ``[key_start, next cut)``."""

    key_start: int
    tier: str


def _top_bit(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    """Index of the highest set bit of each value (-1 for 0), vectorized."""
    out = np.full(len(x), -1, dtype=np.int64)
    rest = x.copy()
    for shift in (32, 16, 8, 4, 2, 1):
        s = np.uint64(shift)
        big = (rest >> s) > 0
        rest = np.where(big, rest >> s, rest)
        out += np.where(big, shift, 0)
    out += (rest > 0).astype(np.int64)
    return out


def file_cuts(
    segments: Sequence[Segment],
    keys: npt.NDArray[np.uint64],
    *,
    counts: npt.NDArray[np.int64] | None = None,
    slack: float = 0.2,
) -> list[FileCut]:
    """Where each output file starts, given the sorted keys (or a sorted sample).

    With ``counts``, ``keys`` are the distinct keys in order and ``counts`` how many
    rows hold each (see :meth:`ExternalSorter.key_counts`): the same cuts, at a
    cost that follows the distinct keys rather than the rows.

    A segment of ``files`` files is cut near equal row counts, each cut moved
    within ``slack`` of a file's rows to the key boundary with the highest
    differing bit: there the key space splits at its coarsest, so the file's
    rows form whole aligned blocks of the curve and its min/max box is tight.
    """
    if counts is None:
        keys, counts = _runs(keys)
    if len(keys) != len(counts):
        raise InvalidArgumentError(
            f"expected one count per distinct key, found {len(counts)} counts for {len(keys)} keys"
        )
    # first[i]: rows with a key below keys[i]; a cut before keys[i] splits there
    first = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    cuts: list[FileCut] = []
    for seg in segments:
        cuts.append(FileCut(seg.key_start, seg.tier))
        if seg.files <= 1:
            continue
        ia = int(np.searchsorted(keys, np.uint64(seg.key_start), side="left"))
        if seg.key_end == KEY_MAX:
            ib = len(keys)
        else:
            ib = int(np.searchsorted(keys, np.uint64(seg.key_end), side="left"))
        a, b = int(first[ia]), int(first[ib])
        n = b - a
        if n < 2 * seg.files:
            continue
        per = n / seg.files
        half = max(1, int(per * slack))
        last = seg.key_start
        for j in range(1, seg.files):
            target = a + round(j * per)
            lo, hi = max(a + 1, target - half), min(b - 1, target + half)
            # candidate cuts: before distinct keys ia < i < ib starting within [lo, hi]
            i_lo = max(ia + 1, int(np.searchsorted(first, lo, side="left")))
            i_hi = min(ib - 1, int(np.searchsorted(first, hi, side="right")) - 1)
            if i_lo > i_hi:
                continue  # one key across the whole window: no cut possible here
            level = _top_bit(keys[i_lo - 1 : i_hi] ^ keys[i_lo : i_hi + 1])
            cand = np.flatnonzero(level == level.max()) + i_lo
            q = int(cand[np.argmin(np.abs(first[cand] - target))])
            key = int(keys[q])
            if key > last:
                cuts.append(FileCut(key, seg.tier))
                last = key
    return cuts


ROW_GROUP_SLACK = 0.2
"""A row group may end this fraction of the row group size early to end at a coarser
key boundary."""


def row_group_cut(keys: npt.NDArray[np.uint64], size: int, slack: float = ROW_GROUP_SLACK) -> int:
    """Rows of the next row group of key-ordered rows ``keys`` (at least ``size`` of
    them): at most ``size``, at least ``size * (1 - slack)``, ending before the key
    boundary with the highest differing bit in that window (the latest such one); when
    one key fills the whole window, exactly ``size``.

    >>> row_group_cut(np.array([1, 2, 3, 4, 8, 9, 10, 11], dtype=np.uint64), 6, 0.5)
    4
    """
    lo = max(1, int(size * (1 - slack)))
    hi = min(size, len(keys) - 1)
    if hi < lo:
        return min(size, len(keys))
    # candidate: a cut before row i, lo <= i <= hi, where keys[i - 1] != keys[i]
    level = _top_bit(keys[lo - 1 : hi] ^ keys[lo : hi + 1])
    best = int(level.max())
    if best < 0:
        return size
    return lo + int(np.flatnonzero(level == best)[-1])


class RowGroupCutter:
    """Feeds key-ordered rows to a writer, ending its row groups at :func:`row_group_cut`
    (memory: about one row group, as the writer's own buffer)."""

    def __init__(self, writer: RollingWriter | SpecWriter) -> None:
        self.writer = writer
        self.size = writer.options.row_group_size
        self._rows: list[pa.Table] = []
        self._keys: list[npt.NDArray[np.uint64]] = []
        self._pending = 0

    def add(self, rows: pa.Table | pa.RecordBatch, keys: npt.NDArray[np.uint64]) -> None:
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        self._rows.append(rows)
        self._keys.append(keys)
        self._pending += len(keys)
        while self._pending > self.size:  # the next row group ends in here
            table = pa.concat_tables(self._rows)
            joined = np.concatenate(self._keys)
            cut = row_group_cut(joined, self.size)
            self._write(table.slice(0, cut))
            self.writer.end_row_group()
            self._rows, self._keys = [table.slice(cut)], [joined[cut:]]
            self._pending -= cut

    def finish(self) -> None:
        """Hand the writer the rows still held (the file's last row group)."""
        for t in self._rows:
            self._write(t)
        self._rows, self._keys, self._pending = [], [], 0

    def _write(self, table: pa.Table) -> None:
        for b in table.to_batches():
            self.writer.write(b)


def _runs(keys: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """The distinct values of sorted ``keys`` and how often each occurs."""
    if not len(keys):
        return keys, np.zeros(0, dtype=np.int64)
    starts = np.concatenate([[0], np.flatnonzero(keys[1:] != keys[:-1]) + 1])
    counts = np.diff(np.append(starts, len(keys))).astype(np.int64)
    return keys[starts], counts


DELTA_ROW_GROUP_DIVISOR = 8
"""Delta files (late rows, merged into the base later) get row groups of this fraction of
the row-group size: a query for a narrow key range then reads about the same share of
them as of the base files, whose files cover narrow ranges (so late rows waiting in delta
files do not make a narrow query read wide row groups)."""


class _FileJob:
    """Writes one output file on a background thread fed through a small queue."""

    def __init__(self, make_writer: Callable[[], RollingWriter | SpecWriter], tier: str) -> None:
        self.writer = make_writer()
        if tier == "delta":  # key-ranged reads of late rows prune finer row groups
            opts = self.writer.options
            self.writer.options = dataclasses.replace(
                opts, row_group_size=max(1, opts.row_group_size // DELTA_ROW_GROUP_DIVISOR)
            )
        self.tier = tier
        self.queue: queue.Queue[object] = queue.Queue(maxsize=2)
        self.result: list[AddFile] = []
        self.error: BaseException | None = None
        self.key_min: int | None = None
        self.key_max = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            cutter = RowGroupCutter(self.writer)
            while True:
                item = self.queue.get()
                if item is _DONE:
                    break
                assert isinstance(item, tuple)
                cutter.add(*item)
            cutter.finish()
            self.result = self.writer.close()
        except BaseException as e:  # noqa: BLE001 - re-raised by the caller thread
            self.error = e
            while self.queue.get() is not _DONE:  # drain so the producer never blocks
                pass

    def put(self, rows: pa.Table, keys: npt.NDArray[np.uint64]) -> None:
        if self.error is not None:
            raise self.error
        lo, hi = int(keys[0]), int(keys[-1])
        self.key_min = lo if self.key_min is None else min(self.key_min, lo)
        self.key_max = max(self.key_max, hi)
        self.queue.put((rows, keys))

    def finish(self) -> list[WrittenFile]:
        self.queue.put(_DONE)
        self.thread.join()
        if self.error is not None:
            raise self.error
        return [WrittenFile(a, self.key_min or 0, self.key_max, self.tier) for a in self.result]

    def abort(self) -> list[str]:
        self.queue.put(_DONE)
        self.thread.join()
        return list(dict.fromkeys([a.path for a in self.result] + self.writer.abort()))


_DONE = object()


def write_segments(
    ordered: Iterable[tuple[pa.Table, npt.NDArray[np.uint64]]],
    cuts: Sequence[FileCut],
    make_writer: Callable[[], RollingWriter | SpecWriter],
    *,
    parallel_files: int = 2,
    delete: Callable[[list[str]], None] | None = None,
) -> list[WrittenFile]:
    """Write key-ordered rows into one file per cut (a file with no rows is not created).

    Up to ``parallel_files`` files are encoded at once on background threads.
    On error every file written so far is deleted (via ``delete``).
    """
    if not cuts or cuts[0].key_start != 0:
        raise InvalidArgumentError("expected file cuts starting at key 0, found none there")
    starts = np.array([c.key_start for c in cuts], dtype=np.uint64)
    if len(starts) > 1 and not bool(np.all(starts[1:] > starts[:-1])):
        raise InvalidArgumentError("expected strictly increasing file cuts")
    out: list[WrittenFile] = []
    running: deque[_FileJob] = deque()
    current: _FileJob | None = None
    current_i = -1
    try:
        for rows, keys in ordered:
            if not len(keys):
                continue
            # file index of every row boundary in this chunk: one searchsorted per chunk
            which = np.searchsorted(starts, keys, side="right") - 1
            bounds = np.flatnonzero(np.diff(which)) + 1
            pieces = np.concatenate([[0], bounds, [len(keys)]])
            for p0, p1 in itertools.pairwise(pieces):
                f = int(which[p0])
                if f != current_i:
                    if current is not None:
                        running.append(current)
                        while len(running) >= parallel_files:
                            out.extend(running.popleft().finish())
                    current, current_i = _FileJob(make_writer, cuts[f].tier), f
                assert current is not None
                current.put(rows.slice(int(p0), int(p1 - p0)), keys[p0:p1])
        if current is not None:
            running.append(current)
            current = None
        while running:
            out.extend(running.popleft().finish())
        return out
    except BaseException:
        leftovers = [w.add.path for w in out]
        if current is not None:
            leftovers.extend(current.abort())
        for job in running:
            leftovers.extend(job.abort())
        if delete is not None:
            try:
                delete(leftovers)
            except Exception:  # noqa: BLE001 - vacuum removes what this cannot
                pass
        raise
