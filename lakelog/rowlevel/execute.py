"""Running a change over its candidate files: probe, rewrite, collect.

Each candidate file is first *probed* (only the columns the change's condition
reads), unless that would read every column anyway; a file with no row to
change is left alone, and a file all of whose rows go is removed without being
read further. A probe only pays when some candidates need no rewrite: once most
files done so far did (:class:`ProbeGuide`, as when a change's rows are spread
over every file), the rest are rewritten straight away, and a rewrite that
changed nothing is dropped, so the outcome is the same.

A file with rows to change is read again a batch at a time, each batch goes
through :meth:`RowChange.apply` and straight into the table's writer (same
partition folder, file names carrying the writer's lease id), so unchanged rows
keep their order and memory holds one batch and one output row group per
worker. Rewritten files dictionary-encode only the columns whose values repeat
(decided once per change from a sample), which halves the encoding time and
shrinks the files. Files are processed by a few threads (:data:`MAX_WORKERS`);
on an error every file already written is deleted before it propagates.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, wait
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import threads
from ..io.writer import WriteOptions, write_files
from ..log.actions import AddFile, DataFile
from ..log.deletion_vectors import MAX_BITMAP_BYTES, union_vector
from ..log.feed import DELETE, UPDATE_POST, UPDATE_PRE
from ..properties import get_bool, get_int
from ..storage import Storage
from ..transforms import PartitionSpec
from .base import Counts, RowChange
from .change_files import ChangeWriter
from .read import read_positions, read_rows

__all__ = ["MAX_WORKERS", "FileOutcome", "ProbeGuide", "RowSink", "run_files"]

MAX_WORKERS = max(1, min(4, os.cpu_count() or 1))
"""Candidate files processed at once (each holds one batch and one output row group)."""
SAMPLE_ROWS = 4096
"""Rows of a change's first rewritten batch that decide its dictionary columns."""
SINK_BYTES = 64 * 1024 * 1024
"""Default of ``lakelog.deletion_vectors.update_buffer_bytes``: updated rows a
:class:`RowSink` buffers before it writes them."""
PROBE_SAMPLE = 8
"""Files a change probes before it may stop probing (:class:`ProbeGuide`)."""
PROBE_WORTH = 0.1
"""Probing stops while fewer than this fraction of the files done needed no rewrite."""


class ProbeGuide:
    """Whether probing a change's next file is likely to pay, from the files done.

    A probe reads the condition's columns of a file to spare the rewrite of a file
    with nothing to change (or nothing to keep). When nearly every file so far needed
    its rewrite anyway, the probe is pure cost and is skipped; skipped files still
    count (a rewrite that changed nothing, or kept nothing, is one a probe would have
    spared), so probing resumes when they stop needing it. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = 0
        self._spared = 0

    def worth_probing(self) -> bool:
        with self._lock:
            return self._done < PROBE_SAMPLE or self._spared >= PROBE_WORTH * self._done

    def record(self, counts: Counts) -> None:
        """One more file done: ``counts`` says whether it needed a rewrite."""
        with self._lock:
            self._done += 1
            self._spared += not (counts.changed and (counts.kept or counts.updated))


@dataclass
class FileOutcome:
    """What a change did (or, probing only, would do) to one file.

    ``adds`` replace the file in the commit, after its ``remove``: its rewrite, or,
    with a deletion vector, the file itself again (same path, the new vector) and the
    updated rows' new file."""

    file: DataFile
    counts: Counts
    adds: list[AddFile] = field(default_factory=list)

    @property
    def rewritten(self) -> bool:
        return self.counts.changed > 0

    @property
    def marked(self) -> bool:
        """Whether the file stays, with a deletion vector (nothing copied)."""
        return any(a.path == self.file.path for a in self.adds)

    @property
    def written(self) -> list[str]:
        """Paths of the files this outcome wrote (never the file itself)."""
        return [a.path for a in self.adds if a.path != self.file.path]


class RowSink:
    """The updated rows of a change's deletion-vector files, written together.

    Without it each marked file would get a file of its own for a few updated rows
    (an update of 1% of the rows of 400 files: 400 tiny files, and a quarter of the
    change's time spent opening and closing them). Rows are kept until
    ``ctx.sink_bytes`` are buffered, then written in one pass (files cut by partition
    and target size as any write); :meth:`flush` writes the rest. Thread-safe; memory
    stays below ``ctx.sink_bytes`` plus one batch per worker.
    """

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._lock = threading.Lock()
        self._batches: list[pa.RecordBatch] = []
        self._bytes = 0
        self.adds: list[AddFile] = []

    def add(self, batches: Sequence[pa.RecordBatch]) -> None:
        with self._lock:
            self._batches.extend(batches)
            self._bytes += sum(b.nbytes for b in batches)
            if self._bytes >= self._ctx.sink_bytes:
                self._write()

    def flush(self) -> list[AddFile]:
        """Write what is buffered; every file written so far."""
        with self._lock:
            self._write()
            return list(self.adds)

    def written(self) -> list[str]:
        with self._lock:
            return [a.path for a in self.adds]

    def _write(self) -> None:
        batches, self._batches, self._bytes = self._batches, [], 0
        if not batches:
            return
        ctx = self._ctx
        self.adds += write_files(
            ctx.storage,
            iter(batches),
            schema=ctx.schema,
            partition_by=ctx.partition_by,
            spec=ctx.spec,
            options=ctx.write_options(batches[0]),
            lease_id=ctx.lease_id,
        )


@dataclass(frozen=True)
class Context:
    """What every file of one change is read and written with."""

    storage: Storage
    schema: pa.Schema
    partition_by: tuple[str, ...]
    version: int
    options: WriteOptions
    lease_id: str | None
    spec: PartitionSpec | None = None
    """The table's current spec of transforms: rewritten rows go into it."""
    encoding: dict[str, bool | tuple[str, ...]] = field(default_factory=dict)
    """The dictionary columns, decided once from the first file rewritten."""
    probing: ProbeGuide = field(default_factory=ProbeGuide)
    vectors: bool = False
    """Mark changed rows in deletion vectors instead of rewriting files
    (``lakelog.deletion_vectors``)."""
    max_vector_bytes: int = MAX_BITMAP_BYTES
    """A file whose vector would encode larger is rewritten instead
    (``lakelog.deletion_vectors.max_vector_bytes``)."""
    sink_bytes: int = SINK_BYTES
    """Updated rows the :class:`RowSink` buffers before it writes them
    (``lakelog.deletion_vectors.update_buffer_bytes``)."""
    sink: RowSink | None = None
    """Where marked files' updated rows go (None: a new file per marked file)."""
    feed: ChangeWriter | None = None
    """Where the rows the change deletes, updates and inserts are recorded
    (``lakelog.change_data_feed``; None: not recorded)."""

    @staticmethod
    def vector_settings(properties: Mapping[str, str]) -> dict[str, Any]:
        """The deletion-vector fields of a context for a table with ``properties``."""
        return {
            "vectors": get_bool(properties, "lakelog.deletion_vectors"),
            "max_vector_bytes": get_int(properties, "lakelog.deletion_vectors.max_vector_bytes"),
            "sink_bytes": get_int(properties, "lakelog.deletion_vectors.update_buffer_bytes"),
        }

    def write_options(self, sample: pa.RecordBatch) -> WriteOptions:
        chosen = self.encoding.get("dictionary")
        if chosen is None:
            chosen = self.encoding.setdefault(
                "dictionary", dictionary_columns(sample, self.partition_by)
            )
        return dataclasses.replace(self.options, use_dictionary=chosen)


def _probe(ctx: Context, change: RowChange, f: DataFile) -> Counts:
    total = Counts()
    for batch in read_rows(
        ctx.storage,
        f,
        ctx.schema,
        ctx.partition_by,
        columns=change.probe_columns,
        version=ctx.version,
    ):
        total.add(change.probe(batch))
    return total


def _record(feed: ChangeWriter, change: RowChange, batch: pa.RecordBatch) -> None:
    """Record what ``change`` does to the rows of ``batch`` (every column) in ``feed``:
    deleted rows, and updated rows before and after."""
    leaving, updated, new, _ = change.split_changes(batch)
    _record_split(feed, batch, leaving, updated, new)


def _record_split(
    feed: ChangeWriter,
    batch: pa.RecordBatch,
    leaving: np.ndarray,
    updated: np.ndarray,
    new: pa.RecordBatch | None,
) -> None:
    deleted = leaving & ~updated
    if deleted.any():
        feed.add(batch.filter(pa.array(deleted)), DELETE)
    if updated.any():
        feed.add(batch.filter(pa.array(updated)), UPDATE_PRE)
        if new is not None:
            feed.add(new, UPDATE_POST)


def _record_positions(
    ctx: Context, feed: ChangeWriter, f: DataFile, leaving: np.ndarray, updated: np.ndarray
) -> None:
    """Record the rows of ``f`` at ``leaving`` positions, every column: those also in
    ``updated`` as pre-images, the others as deleted."""
    for batch, positions in read_positions(
        ctx.storage, f, ctx.schema, ctx.partition_by, version=ctx.version
    ):
        out = np.isin(positions, leaving)
        if not out.any():
            continue
        pre = out & np.isin(positions, updated)
        _record_split(feed, batch, out, pre, None)


def _rewrite(ctx: Context, change: RowChange, f: DataFile) -> FileOutcome:
    counts = Counts()
    feed = ctx.feed

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in read_rows(ctx.storage, f, ctx.schema, ctx.partition_by, version=ctx.version):
            out, c = change.apply(batch)
            counts.add(c)
            if feed is not None and c.changed:
                _record(feed, change, batch)
            if out.num_rows:
                yield out

    rows = batches()
    first = next(rows, None)
    adds: list[AddFile] = []
    if first is not None:  # else every row was deleted: nothing to write
        options = ctx.write_options(first)
        adds = write_files(
            ctx.storage,
            itertools.chain([first], rows),
            schema=ctx.schema,
            partition_by=ctx.partition_by,
            spec=ctx.spec,
            options=options,
            lease_id=ctx.lease_id,
        )
    if not counts.changed:  # nothing to change after all (no probe ran): undo
        ctx.storage.delete([a.path for a in adds])
        adds = []
    return FileOutcome(f, counts, adds)


def _mark(ctx: Context, change: RowChange, f: DataFile) -> FileOutcome:
    """The change as a deletion vector on ``f`` (format.md, "Deletion vectors"): the
    positions of its deleted and updated rows join the file's vector, and updated rows
    go, with their new values, to a new file. A file left with no row is removed; one
    whose vector would encode past ``ctx.max_vector_bytes`` is rewritten instead.

    With the change data feed, the rows that leave are recorded: as they are read when
    the change reads every column, else by a second read of every column of this file
    only, once it is known to change (most candidate files of a selective change
    change nothing, and the first read stays the cheap one of a few columns)."""
    counts = Counts()
    gone: list[np.ndarray] = []
    sink = ctx.sink
    feed = ctx.feed
    whole = change.split_columns is None  # every column read: record rows as they come
    pre: list[np.ndarray] = []  # positions of updated rows, for the second read
    post: list[pa.RecordBatch] = []  # their new values, recorded once the file is marked
    kept: list[pa.RecordBatch] = []  # with a sink: this file's updated rows, until done

    def replaced() -> Iterator[pa.RecordBatch]:
        for batch, positions in read_positions(
            ctx.storage,
            f,
            ctx.schema,
            ctx.partition_by,
            columns=change.split_columns,
            version=ctx.version,
        ):
            if feed is None:
                leaving, new, c = change.split(batch)
            else:
                leaving, updated, new, c = change.split_changes(batch)
                if whole and leaving.any():
                    _record_split(feed, batch, leaving, updated, new)
                elif leaving.any():
                    pre.append(positions[updated])
                    if new is not None and new.num_rows:  # new values: every column
                        post.append(new)
            counts.add(c)
            if leaving.any():
                gone.append(positions[leaving])
            if new is not None and new.num_rows:
                yield new

    rows = replaced()
    adds: list[AddFile] = []
    if sink is not None:
        kept.extend(rows)
    else:
        first = next(rows, None)
        if first is not None:
            adds = write_files(
                ctx.storage,
                itertools.chain([first], rows),
                schema=ctx.schema,
                partition_by=ctx.partition_by,
                spec=ctx.spec,
                options=ctx.write_options(first),
                lease_id=ctx.lease_id,
            )
    if not counts.changed:
        ctx.storage.delete([a.path for a in adds])
        return FileOutcome(f, counts)
    leaving = np.concatenate(gone)
    vector = union_vector(f.deleted, leaving, f.num_rows, path=f.path)
    if vector is not None and len(vector.bitmap) > ctx.max_vector_bytes:
        ctx.storage.delete([a.path for a in adds])
        # the rewrite changes the same rows: recorded above already, or by it
        return _rewrite(dataclasses.replace(ctx, feed=None) if whole else ctx, change, f)
    if feed is not None and not whole:
        _record_positions(ctx, feed, f, leaving, np.concatenate(pre))
        for batch in post:
            feed.add(batch, UPDATE_POST)
    if sink is not None and kept:
        sink.add(kept)
    if vector is not None:
        adds.insert(0, msgspec.structs.replace(f.to_add(), deleted=vector))
    return FileOutcome(f, counts, adds)


def dictionary_columns(
    sample: pa.RecordBatch, skip: Sequence[str], *, max_ratio: float = 0.5, min_rows: int = 1000
) -> bool | tuple[str, ...]:
    """Columns worth a dictionary in a rewritten file: distinct values <= ``max_ratio``
    of the sample's rows (True: every column, when the sample cannot tell).

    Dictionary-encoding a column of mostly distinct values (ids, timestamps, floats)
    costs about twice the write time and makes the file larger, as the writer falls
    back to plain pages after filling a dictionary.
    """
    if sample.num_rows < min_rows:
        return True
    sample = sample.slice(0, SAMPLE_ROWS)
    keep: list[str] = []
    for name, col in zip(sample.schema.names, sample.columns, strict=True):
        if name in skip:
            continue
        if pa.types.is_nested(col.type) or pa.types.is_dictionary(col.type):
            return True
        try:
            distinct = pc.count_distinct(col, mode="all").as_py()
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            return True
        if distinct <= max_ratio * sample.num_rows:
            keep.append(name)
    return tuple(keep) if keep else False


def process_file(ctx: Context, change: RowChange, f: DataFile, *, write: bool) -> FileOutcome:
    """Probe ``f``; with ``write``, rewrite it if it holds a row to change."""
    try:
        return _process(ctx, change, f, write=write)
    finally:
        _released(f.size_bytes)


_RELEASE_EVERY = 16 * 1024 * 1024
_since_release = [0]


def _released(nbytes: int) -> None:
    """Hand freed memory back to the allocator every ``_RELEASE_EVERY`` bytes of files
    processed: the resident set then follows what is live (a batch per worker), not
    what was ever allocated."""
    _since_release[0] += nbytes
    if _since_release[0] >= _RELEASE_EVERY:
        _since_release[0] = 0
        pa.default_memory_pool().release_unused()


def _process(ctx: Context, change: RowChange, f: DataFile, *, write: bool) -> FileOutcome:
    change = change.for_file(f)
    if write and ctx.vectors:
        split = change.split_columns
        if split is None and change.probe_columns is not None and ctx.probing.worth_probing():
            # every column is read only for the files with a row to change
            counts = _probe(ctx, change, f)
            ctx.probing.record(counts)
            if not counts.changed:
                return FileOutcome(f, counts)
            return _mark(ctx, change, f)
        outcome = _mark(ctx, change, f)
        if split is None:
            ctx.probing.record(outcome.counts)
        return outcome
    cols = change.probe_columns
    if cols is None or len(cols) >= len(ctx.schema) or not write:
        if not write:
            return FileOutcome(f, _probe(ctx, change, f))
        return _rewrite(ctx, change, f)
    if not ctx.probing.worth_probing():
        outcome = _rewrite(ctx, change, f)
        ctx.probing.record(outcome.counts)
        return outcome
    counts = _probe(ctx, change, f)
    ctx.probing.record(counts)
    if not counts.changed or not (counts.kept or counts.updated):
        # nothing to change, or every row goes: the file is kept or removed as it is
        if counts.changed and ctx.feed is not None:
            ctx.feed.add_files([f], DELETE, version=ctx.version)
        return FileOutcome(f, counts)
    return _rewrite(ctx, change, f)


def run_files(
    ctx: Context, change: RowChange, files: Sequence[DataFile], *, write: bool
) -> list[FileOutcome]:
    """:func:`process_file` over ``files`` in up to :data:`MAX_WORKERS` threads; the
    outcomes in the order of ``files``. On an error, the files written are deleted."""
    if not files:
        return []
    workers = min(MAX_WORKERS, len(files))
    if workers == 1:
        done: list[FileOutcome] = []
        try:
            for f in files:
                done.append(process_file(ctx, change, f, write=write))
        except BaseException:
            _discard(ctx.storage, done)
            raise
        return done
    with threads.pool("lakelog-change", workers) as pool:
        futures: list[Future[FileOutcome]] = [
            pool.submit(process_file, ctx, change, f, write=write) for f in files
        ]
        _, pending = wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((fu for fu in futures if fu.done() and fu.exception() is not None), None)
        if failed is not None:
            for fu in pending:
                fu.cancel()
            wait(futures)
            _discard(
                ctx.storage,
                [fu.result() for fu in futures if not fu.cancelled() and fu.exception() is None],
            )
            error = failed.exception()
            assert error is not None
            raise error
        return [fu.result() for fu in futures]


def _discard(storage: Storage, outcomes: Sequence[FileOutcome]) -> None:
    paths = [p for o in outcomes for p in o.written]
    if paths:
        try:
            storage.delete(paths)
        except Exception:  # noqa: BLE001 - vacuum removes what this cannot
            pass
