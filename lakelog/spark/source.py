"""``spark.readStream.format("lakelog")``: a Structured Streaming source with admission
control, whose offsets say exactly which file comes next.

What it streams (the behaviour of Delta's source, in lakelog's terms):

* **Where it starts.** Without ``startingVersion`` or ``startingTimestamp``: the files of
  the latest snapshot when the query first starts, then every later commit. With
  ``startingVersion`` ``v``: the commits from ``v`` on (``latest``: only those after the
  query starts). With ``startingTimestamp``: the commits at or after that instant.
* **What a commit gives.** The files it adds with ``data_change`` (appends). Commits
  without data changes (compaction, clustering, claims, expiry) give nothing: their rows
  were streamed already. A commit that removes files with ``data_change`` (a delete,
  update, merge, overwrite or restore) stops the query with
  :class:`~lakelog.errors.ChangeFeedError`, since its changes are not appends; unless
  ``skipChangeCommits`` (the commit is skipped whole) or ``readChangeFeed``: then every
  commit gives its rows of the change feed (:mod:`lakelog.scan.feed`) with
  ``_change_type``, ``_commit_version`` and ``_commit_timestamp``, and the starting
  snapshot's rows are inserts at its version.
* **Offsets** are positions ``{"version": v, "index": i}``: the next file is file ``i``
  of commit ``v`` (with ``"snapshot": true``, of the starting snapshot of version ``v``).
  Commit files never change and a snapshot's files are ordered by modification time and
  path, so a query restarted from its checkpoint plans a batch again to the same files:
  none read twice, none skipped.
* **Admission control.** ``maxFilesPerTrigger`` (default 1000, unless only
  ``maxBytesPerTrigger`` is given) and ``maxBytesPerTrigger`` (a soft bound: the file that
  crosses it is the batch's last) bound each micro-batch, ``Trigger.AvailableNow``
  included: it reads up to the version that was the latest when the query started.
* **Expiry.** A query whose next commit (or starting snapshot) was expired fails with
  :class:`~lakelog.errors.VersionExpiredError`: its files may be gone.
* **Schema.** The table's schema when the query starts. A later commit that adds a column
  or changes a type stops the query (:class:`~lakelog.errors.SchemaMismatchError`);
  restarted, it reads with the new schema.

Each micro-batch's files are read in Spark tasks (bins of ``maxPartitionBytes``, as the
batch reader bins them) with lakelog's reader: deletion vectors applied, partition values
filled in. The driver only reads commits.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from ..errors import (
    ChangeFeedError,
    InvalidArgumentError,
    LakelogError,
    LogGapError,
    SchemaMismatchError,
    VersionExpiredError,
    VersionNotFoundError,
)
from ..io.schema import readable_as
from ..log import mapping
from ..log.actions import AddFile, Commit, DataFile, Metadata, RemoveFile
from ..log.commits import commits_between, read_header
from ..log.manifests import read_hint
from ..log.snapshot import load_snapshot, oldest_readable_version, version_as_of
from ..scan.feed import ChangePart, FeedPlanner, read_part
from ..storage import Storage
from .errors import carry
from .feed import CHANGE_COLUMNS, bins, part_bytes, snapshot_parts, spark_batches
from .options import DEFAULT_MAX_FILES, StreamReadOptions, stream_read_options
from .schema import to_arrow_type

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "DEFAULT_MAX_FILES",
    "Position",
    "SourceOptions",
    "StreamReader",
    "source_options",
    "stream_reader",
]

_FETCH_AHEAD = 256
"""Commits decoded and kept ahead of the stream per look at the log."""
_PLANNER_COMMITS = 1000
"""Commits one change-feed planner follows before a new one starts (it remembers the
files added since its start, so a long-running stream would hold them all)."""


# -- options and offsets ---------------------------------------------------------------


SourceOptions = StreamReadOptions
"""The source's options, checked when the query starts (:mod:`lakelog.spark.options`)."""


def source_options(options: Mapping[str, str]) -> SourceOptions:
    """Parse and check the options of ``readStream.format("lakelog")`` (by name first)."""
    return stream_read_options(options)


@dataclass(frozen=True)
class Position:
    """A stream offset: the next file to read is file ``index`` of commit ``version`` (of
    the snapshot of ``version`` when ``snapshot``)."""

    version: int
    snapshot: bool
    index: int

    def to_json(self) -> dict[str, Any]:
        # a fixed key order: Spark compares offsets by their JSON text
        out: dict[str, Any] = {"version": self.version, "index": self.index}
        if self.snapshot:
            out["snapshot"] = True
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Position:
        version, index = raw.get("version"), raw.get("index")
        snapshot = raw.get("snapshot", False)
        ok = all(isinstance(x, int) and not isinstance(x, bool) for x in (version, index))
        if not ok or not isinstance(snapshot, bool) or set(raw) - {"version", "index", "snapshot"}:
            raise InvalidArgumentError(
                f"expected a lakelog stream offset {{'version': int, 'index': int}}, found "
                f"{dict(raw)!r}: the checkpoint was written by another source; start the "
                f"query with a new checkpointLocation."
            )
        return cls(int(version), snapshot, int(index))  # type: ignore[arg-type]


# -- what each commit streams ----------------------------------------------------------


@dataclass(frozen=True)
class _Segment:
    """The files one commit (or the starting snapshot) streams, in order; ``failure``:
    the error a query reaching it fails with."""

    start: Position
    parts: Sequence[ChangePart]
    failure: LakelogError | None = None

    @property
    def after(self) -> Position:
        return Position(self.start.version + 1, False, 0)


def _limits(limit: ReadLimit, opts: SourceOptions) -> tuple[float, float]:
    """(files, bytes) a batch may take: the engine's limit, the other from the options
    (Spark hands one limit; both options apply together, as in Delta)."""
    if isinstance(limit, ReadAllAvailable):
        return float("inf"), float("inf")
    files = float(opts.max_files) if opts.max_files is not None else float("inf")
    size = float(opts.max_bytes) if opts.max_bytes is not None else float("inf")
    if isinstance(limit, ReadMaxFiles):
        files = float(limit.max_files)
    elif isinstance(limit, ReadMaxBytes):
        size = float(limit.max_bytes)
    return files, size


def _changed_rows(commit: Commit) -> list[RemoveFile]:
    return [a for a in commit.actions if isinstance(a, RemoveFile) and a.data_change]


def _schema_change(commit: Commit, schema: pa.Schema) -> str | None:
    """What a metadata action of ``commit`` changes that ``schema`` cannot read, or None."""
    for a in commit.actions:
        if not isinstance(a, Metadata):
            continue
        new = a.arrow_schema()
        for field in new:
            if field.name not in schema.names:
                return f"column {field.name!r} ({field.type}) was added"
            mine = schema.field(field.name).type
            if not readable_as(field.type, mine, dropped=False):
                return f"column {field.name!r} changed from {mine} to {field.type}"
        moved = _restored(new, schema)
        if moved is not None:
            return f"column {moved!r} is stored under another name (dropped and added back)"
    return None


def _restored(new: pa.Schema, schema: pa.Schema) -> str | None:
    """The first field (a path) of ``schema`` that ``new`` stores under another physical
    name (format.md, "Column ids": a column or nested field dropped and added back): read
    with ``schema``, its new values would be nulls. None if there is none. (Turning column
    ids on names every field as its files hold it: no change.)"""
    new_stored = mapping.walk(mapping.physical_schema(new))
    stored = {
        path: held for (path, _), (held, _) in zip(mapping.walk(new), new_stored, strict=True)
    }
    mine = mapping.walk(mapping.physical_schema(schema))
    for (path, _), (held, _) in zip(mapping.walk(schema), mine, strict=True):
        if path in stored and stored[path] != held:
            return ".".join(path)
    return None


@carry
class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """The ``lakelog`` source of a streaming query (see the module docstring).

    Spark builds one on the driver, where a long-lived Python worker keeps its caches of
    decoded commits across micro-batches, and pickles another with :meth:`read` to the
    executors; everything it needs there is plain data set in ``__init__``."""

    def __init__(
        self,
        storage: Storage,
        options: SourceOptions,
        *,
        table_schema: pa.Schema,
        columns: Sequence[str],
        partition_by: Sequence[str],
        spark_schema: StructType,
    ) -> None:
        self.uri = storage.uri
        self.storage_options = storage.storage_options
        self.opts = options
        self.schema_bytes = table_schema.serialize().to_pybytes()
        self.columns = tuple(columns)
        self.partition_by = tuple(partition_by)
        self.out_types = [to_arrow_type(f.dataType) for f in spark_schema.fields]
        self.out_names = [f.name for f in spark_schema.fields]
        self._reset()

    def _reset(self) -> None:
        self._commits: dict[int, _Segment] = {}
        self._snapshots: dict[int, _Segment] = {}
        self._latest = -1  # the newest commit seen
        self._target: int | None = None  # Trigger.AvailableNow: read no commit above it
        self._planner: FeedPlanner | None = None  # readChangeFeed: cuts commits into parts
        self._planned = (-1, 0)  # the next version the planner expects, commits it followed

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for k in ("_commits", "_snapshots"):
            state[k] = {}
        state["_planner"] = None
        return state

    def _storage(self) -> Storage:
        return Storage(self.uri, self.storage_options)

    @functools.cached_property
    def _table_schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(self.schema_bytes))

    # -- offsets, on the driver ------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        storage = self._storage()
        opts = self.opts
        if opts.starting_timestamp is not None:
            first = _first_at(storage, opts.starting_timestamp)
            self._check_readable(storage, first)
            return Position(first, False, 0).to_json()
        latest = load_snapshot(storage)
        if opts.starting_version is None:
            return Position(latest.version, True, 0).to_json()
        if opts.starting_version == "latest":
            return Position(latest.version + 1, False, 0).to_json()
        if opts.starting_version > latest.version:
            raise VersionNotFoundError(
                f"expected startingVersion at most {latest.version}, the latest version of "
                f"{storage.uri}, found {opts.starting_version}; use 'latest' to stream only "
                f"the commits after the query starts."
            )
        self._check_readable(storage, opts.starting_version)
        return Position(opts.starting_version, False, 0).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_files is not None:
            return ReadMaxFiles(self.opts.max_files)
        if self.opts.max_bytes is not None:
            return ReadMaxBytes(self.opts.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = _latest_version(self._storage())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch: as many files after ``start`` as ``limit``
        admits, commits without files passed over; ``start`` itself if nothing is new."""
        max_files, max_bytes = _limits(limit, self.opts)
        pos = Position.from_json(start)
        files = size = 0
        end = pos
        for seg in self._segments(pos):
            if seg.failure is not None:
                if files:  # deliver what came before first
                    return end.to_json()
                raise seg.failure
            first = pos.index if seg.start == Position(pos.version, pos.snapshot, 0) else 0
            for i in range(first, len(seg.parts)):
                # Delta's admission: a file is taken while both budgets are left
                if files >= max_files or size >= max_bytes:
                    return Position(seg.start.version, seg.start.snapshot, i).to_json()
                files += 1
                size += seg.parts[i].file.size_bytes
            end = seg.after
            if files >= max_files:
                break
        return end.to_json()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        if self._latest < 0:
            return None
        return Position(self._latest + 1, False, 0).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The files between two offsets, in bins of ``maxPartitionBytes`` for the tasks."""
        first, last = Position.from_json(start), Position.from_json(end)
        parts: list[ChangePart] = []
        for seg in self._segments(first, until=last):
            lo = first.index if seg.start == Position(first.version, first.snapshot, 0) else 0
            hi = last.index if seg.start == Position(last.version, last.snapshot, 0) else None
            if seg.failure is not None and (hi is None or hi > 0):
                raise seg.failure
            parts.extend(seg.parts[lo:hi])
        return [InputPartition(b) for b in bins(parts, self.opts.partition_bytes, part_bytes)]

    def commit(self, end: dict[str, Any]) -> None:
        done = Position.from_json(end)
        for v in [v for v in self._commits if v < done.version]:
            del self._commits[v]
        for v in [v for v in self._snapshots if v < done.version or not done.snapshot]:
            del self._snapshots[v]

    # -- rows, in the tasks -------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of a bin of parts (an append's rows are its inserts, without the
        change columns unless the feed is read)."""
        storage = self._storage()
        schema = self._table_schema
        for part in partition.value:
            rows = read_part(storage, part, schema, self.partition_by, columns=self.columns)
            yield from spark_batches(rows, self.out_names, self.out_types)

    # -- the log ---------------------------------------------------------------------------

    def _segments(self, pos: Position, until: Position | None = None) -> Iterator[_Segment]:
        """The segments from ``pos`` on: its snapshot, then commits while they exist (up
        to the AvailableNow target, or through ``until``)."""
        storage = self._storage()
        v = pos.version
        if pos.snapshot:
            yield self._snapshot_segment(storage, v)
            v += 1
        while (self._target is None or v <= self._target) and (until is None or v <= until.version):
            seg = self._commits.get(v) or self._fetch(storage, v)
            if seg is None:
                return
            yield seg
            v += 1

    def _snapshot_segment(self, storage: Storage, version: int) -> _Segment:
        seg = self._snapshots.get(version)
        if seg is None:
            try:
                snap = load_snapshot(storage, version)
            except VersionExpiredError as e:
                raise self._expired(storage, version, e.oldest_version, "snapshot") from None
            parts = snapshot_parts(snap, snap.schema)
            seg = _Segment(Position(version, True, 0), parts)
            self._snapshots = {version: seg}
        return seg

    def _fetch(self, storage: Storage, version: int) -> _Segment | None:
        """Decode commits from ``version`` on into the cache; None if it does not exist
        yet. An expired commit is a :class:`VersionExpiredError`."""
        try:
            for commit in commits_between(storage, version):
                v = commit.header.version
                self._commits[v] = self._segment(storage, commit)
                self._latest = max(self._latest, v)
                if v >= version + _FETCH_AHEAD or (self._target is not None and v >= self._target):
                    break
        except LogGapError:
            try:  # a hole below the oldest readable version is an expiry, not damage
                self._check_readable(storage, version)
            except VersionExpiredError as expired:
                raise expired from None
            raise
        if version in self._commits:
            return self._commits[version]
        hint = read_hint(storage)  # an expiry leaves a manifest above what it expired
        if self._latest >= version or (hint is not None and hint >= version):
            self._check_readable(storage, version)
        return None

    def _check_readable(self, storage: Storage, version: int) -> None:
        oldest = oldest_readable_version(storage)
        # the feed reads a commit's removed rows from the version before it
        first = oldest + 1 if oldest and self.opts.read_change_feed else oldest
        if version < first:
            raise self._expired(storage, version, oldest, "commit")

    def _expired(self, storage: Storage, version: int, oldest: int, what: str) -> LakelogError:
        return VersionExpiredError(
            f"expected the {what} of version {version}, the next this stream reads from "
            f"{storage.uri}, to be readable, found it expired (the oldest readable version "
            f"is {oldest}): its files may be gone, so the query cannot go on without "
            f"skipping rows. Start the query again with a new checkpointLocation and "
            f"startingVersion {max(oldest, version)} or later, and keep expiry "
            f"(lakelog.expire.*) behind the streams that read the table.",
            oldest_version=oldest,
        )

    def _segment(self, storage: Storage, commit: Commit) -> _Segment:
        header = commit.header
        start = Position(header.version, False, 0)
        changed = _schema_change(commit, self._table_schema)
        if changed is not None:
            return _Segment(
                start,
                (),
                SchemaMismatchError(
                    f"expected the schema this stream started with, found that at version "
                    f"{header.version} of {storage.uri} {changed}; restart the query (from "
                    f"the same checkpointLocation) to read with the new schema."
                ),
            )
        if self.opts.read_change_feed:
            return self._feed_segment(storage, commit)
        removes = _changed_rows(commit)
        if removes and self.opts.skip_change_commits:
            return _Segment(start, ())
        if removes:
            return _Segment(
                start,
                (),
                ChangeFeedError(
                    f"expected only appends and commits without data changes in a stream "
                    f"from {storage.uri}, found {header.operation!r} at version "
                    f"{header.version}, which removed rows of {len(removes)} file(s): a "
                    f"stream of appends cannot express it. Set .option('skipChangeCommits', "
                    f"'true') to pass over such commits, or .option('readChangeFeed', "
                    f"'true') to stream their change rows (table property "
                    f"lakelog.change_data_feed).",
                    version=header.version,
                ),
            )
        v, ts, schema = header.version, header.timestamp_ms, self._table_schema
        adds = [a for a in commit.actions if isinstance(a, AddFile) and a.data_change]
        return _Segment(
            start, [ChangePart(v, ts, "insert", DataFile.from_add(a), schema) for a in adds]
        )

    def _feed_segment(self, storage: Storage, commit: Commit) -> _Segment:
        """The commit's parts of the change feed, cut by a planner that followed the
        commits before it (a new one when the stream jumped, or after a while)."""
        v = commit.header.version
        nxt, followed = self._planned
        if self._planner is None or nxt != v or followed >= _PLANNER_COMMITS:
            self._planner, followed = FeedPlanner(storage, v), 0
        self._planned = (v + 1, followed + 1)
        start = Position(v, False, 0)
        try:
            return _Segment(start, self._planner.parts(commit))
        except ChangeFeedError as e:
            return _Segment(start, (), e)
        except VersionExpiredError as e:
            return _Segment(start, (), self._expired(storage, v, e.oldest_version, "commit"))


def _first_at(storage: Storage, when: dt.datetime) -> int:
    """The first version committed at or after ``when`` (the latest + 1 if none)."""
    try:
        v = version_as_of(storage, when)
    except VersionExpiredError:  # before the oldest readable commit
        raise
    except VersionNotFoundError:  # before the first commit of a table never expired
        return 0
    ms = int(when.timestamp() * 1000)
    return v if read_header(storage, v).timestamp_ms >= ms else v + 1


def _latest_version(storage: Storage) -> int:
    return load_snapshot(storage).version


def stream_reader(opts: SourceOptions, schema: StructType) -> StreamReader:
    """The source of ``spark.readStream.format("lakelog").load(uri)``: the options
    checked (:func:`lakelog.spark.options.stream_read_options`), the table's schema and
    partitioning as of now."""
    storage = opts.storage()
    snap = load_snapshot(storage)
    columns = [n for n in schema.names if n not in CHANGE_COLUMNS]
    unknown = [n for n in columns if n not in snap.schema.names]
    if unknown:
        raise SchemaMismatchError(
            f"expected the columns of {storage.uri} ({', '.join(snap.schema.names)}), found "
            f"{', '.join(map(repr, unknown))} in the schema given to readStream; leave out "
            f".schema(...): the source has the table's schema."
        )
    return StreamReader(
        storage,
        opts,
        table_schema=snap.schema,
        columns=columns,
        partition_by=snap.partition_by,
        spark_schema=schema,
    )
