"""The change feed: the rows that changed in a range of versions, each with its change
type, commit version and commit time (``docs/format.md``, "Change data feed").

What version ``v`` contributes follows the spec's three rules: the rows of its change
files when it lists some (``cdc`` actions); nothing for actions without data changes
(compaction, clustering, claims, expiry); otherwise the live rows of the files it adds
as inserts, the rows the files it removes had at ``v - 1`` as deletes, and for a file
removed and added back with another deletion vector, the positions the vectors differ
in. A commit that changed rows inside files without change files has no complete feed:
:class:`~lakelog.errors.ChangeFeedError`, never an approximation.

Memory: the commits of the range are read once up front (to refuse an incomplete range
before any row is returned) and kept only while they are small; rows are read a batch
at a time, one file after the other. The parts of a commit (:class:`ChangePart`) are
independent units, so an engine can spread them over workers (:func:`read_part`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import (
    ChangeFeedError,
    CorruptLogError,
    InvalidArgumentError,
    VersionExpiredError,
    VersionNotFoundError,
)
from ..filters import (
    FilterLike,
    Predicate,
    parse_filter,
    predicate_columns,
    prune_mask,
    rename_columns,
    to_expression,
)
from ..io.schema import readable_as
from ..log import mapping
from ..log.actions import AddFile, ChangeFile, Commit, DataFile, Metadata, RemoveFile
from ..log.commits import commits_between
from ..log.deletion_vectors import deleted_positions
from ..log.feed import (
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    DELETE,
    INSERT,
    needs_change_files,
)
from ..log.files import files_from_adds
from ..log.fileset import entries_block
from ..log.snapshot import Snapshot as ResolvedSnapshot
from ..log.snapshot import load_snapshot, version_as_of
from ..partitioning import partition_scalar
from ..stats import referenced_columns, utc_ms
from ..storage import Storage
from .engines import check_columns
from .rows import BATCH_ROWS, read_positions, read_rows

__all__ = [
    "CHANGE_FIELDS",
    "ChangeFeed",
    "ChangePart",
    "FeedPlanner",
    "VersionLike",
    "feed_schema",
    "open_feed",
    "read_part",
]

VersionLike: TypeAlias = "int | dt.datetime"

CHANGE_FIELDS = (
    pa.field(CHANGE_TYPE, pa.string(), nullable=False),
    pa.field(COMMIT_VERSION, pa.int64(), nullable=False),
    pa.field(COMMIT_TIMESTAMP, pa.timestamp("ms", tz="UTC"), nullable=False),
)
"""The columns the feed adds after the table's."""

CACHE_BYTES = 32 * 1024 * 1024
"""Commit bytes of a range kept from the check to the read; a larger range is read twice."""
_ACTION_BYTES = 512
"""The bytes an action of a commit counts for :data:`CACHE_BYTES`, about (a file entry
with its statistics)."""

_CHANGE_TYPE_FIELD = pa.field(CHANGE_TYPE, pa.string())
PartKind: TypeAlias = Literal["cdc", "insert", "delete", "diff"]


def feed_schema(schema: pa.Schema, columns: Sequence[str] | None = None) -> pa.Schema:
    """The feed's schema: ``columns`` of the table's ``schema`` (default all), then
    :data:`CHANGE_FIELDS`."""
    names = schema.names if columns is None else columns
    return pa.schema([*(schema.field(n) for n in names), *CHANGE_FIELDS])


@dataclass(frozen=True)
class ChangePart:
    """One unit of the rows of commit ``version``, read on its own by :func:`read_part`.

    ``kind``: ``cdc`` (the rows of change file ``file``, with their own change types),
    ``insert`` (the live rows of added ``file``), ``delete`` (the live rows of ``file``
    as of ``version - 1``: its entry then), ``diff`` (``file`` removed and added back:
    the positions its new vector deletes and ``old`` did not, as deletes, and those
    ``old`` deleted and the new does not, as inserts). ``schema``: the table's schema
    the file is read with (the version's, or the one before it for removed rows)."""

    version: int
    timestamp_ms: int
    kind: PartKind
    file: DataFile | ChangeFile
    schema: pa.Schema
    old: DataFile | None = None


class FeedPlanner:
    """Cuts the commits of a range, given in order from ``start``, into
    :class:`ChangePart` s.

    It remembers the files added since ``start`` (only those of ``wanted`` paths, when
    given: the paths a later commit removes) so that a removed file's entry at ``v - 1``
    is found without resolving that version; a file live before ``start`` is looked up
    in the snapshot of ``start - 1``, resolved once and only when needed. ``schema``:
    the table's schema at ``start - 1`` when the caller knows it (else resolved then).
    """

    def __init__(
        self,
        storage: Storage,
        start: int,
        *,
        schema: pa.Schema | None = None,
        wanted: frozenset[str] | None = None,
    ) -> None:
        self.storage = storage
        self.start = start
        self._schema = schema
        self._wanted = wanted
        self._seen: dict[str, AddFile] = {}
        self._base: ResolvedSnapshot | None = None

    def parts(self, commit: Commit) -> list[ChangePart]:
        """The parts of ``commit`` (the next in the range); :class:`ChangeFeedError` for
        a commit whose changes inside files were not recorded."""
        meta = [a for a in commit.actions if isinstance(a, Metadata)]
        after = meta[-1].arrow_schema() if meta else None
        before = self._schema_before(after)
        try:
            return self._plan(commit, before, after or before)
        finally:
            self._advance(commit, after)

    def _plan(self, commit: Commit, before: pa.Schema, after: pa.Schema) -> list[ChangePart]:
        h = commit.header
        v, ts = h.version, h.timestamp_ms
        cdc = [a for a in commit.actions if isinstance(a, ChangeFile)]
        if cdc:
            return [ChangePart(v, ts, "cdc", c, after) for c in cdc]
        if needs_change_files(commit):
            raise incomplete_error(self.storage, commit)
        adds = {a.path: a for a in commit.actions if isinstance(a, AddFile)}
        removes = {a.path: a for a in commit.actions if isinstance(a, RemoveFile)}
        deleted = [r for p, r in removes.items() if r.data_change and p not in adds]
        changed = [
            a for p, a in adds.items() if p in removes and (a.data_change or removes[p].data_change)
        ]
        inserted = [a for p, a in adds.items() if a.data_change and p not in removes]
        old = self._entries_before(v, [*deleted, *(removes[a.path] for a in changed)])
        out = [ChangePart(v, ts, "delete", old[r.path], before) for r in deleted]
        for a in changed:
            prev = old[a.path]
            if prev.deleted != a.deleted:
                out.append(ChangePart(v, ts, "diff", DataFile.from_add(a), after, prev))
        out += [ChangePart(v, ts, "insert", DataFile.from_add(a), after) for a in inserted]
        return out

    def _schema_before(self, after: pa.Schema | None) -> pa.Schema:
        """The schema as of the commit before the next (the first commit's own when
        nothing is before it)."""
        if self._schema is None:
            base = self._base_snapshot()
            if base is not None:
                self._schema = base.schema
            elif after is not None:
                return after
            else:
                raise CorruptLogError(
                    f"expected a metadata action in commit 0 of {self.storage.uri}, found "
                    f"none; the log is damaged."
                )
        return self._schema

    def _advance(self, commit: Commit, schema: pa.Schema | None) -> None:
        if schema is not None:
            self._schema = schema
        for a in commit.actions:
            if isinstance(a, AddFile):
                if self._wanted is None or a.path in self._wanted:
                    self._seen[a.path] = a
            elif isinstance(a, RemoveFile):
                self._seen.pop(a.path, None)

    def _base_snapshot(self) -> ResolvedSnapshot | None:
        if self._base is None and self.start > 0:
            self._base = load_snapshot(self.storage, self.start - 1)
        return self._base

    def _entries_before(self, version: int, removes: Sequence[RemoveFile]) -> dict[str, DataFile]:
        """The entry each removed file had at ``version - 1``."""
        out: dict[str, DataFile] = {}
        todo: dict[tuple[tuple[str, str | None], ...], list[str]] = {}
        for r in removes:
            seen = self._seen.get(r.path)
            if seen is not None:
                out[r.path] = DataFile.from_add(seen)
            else:
                todo.setdefault(tuple(sorted(r.partition.items())), []).append(r.path)
        base = self._base_snapshot() if todo else None
        for partition, paths in todo.items():
            if base is not None:
                out.update(_lookup(base, dict(partition), paths))
            gone = [p for p in paths if p not in out]
            if gone:
                raise CorruptLogError(
                    f"expected {gone[0]!r}, which commit {version} of {self.storage.uri} "
                    f"removes, to be a live file of version {version - 1}, found it not "
                    f"live; the log is damaged or was written by another tool."
                )
        return out


def _lookup(
    snapshot: ResolvedSnapshot, partition: dict[str, str | None], paths: list[str]
) -> dict[str, DataFile]:
    """The entries of ``paths`` among the live files of ``snapshot``: only the files of
    ``partition`` (as the removes named it) are looked at, when it names one."""
    schema = snapshot.schema
    terms = [
        pc.field(c).is_null()
        if value is None
        else pc.field(c) == partition_scalar(value, schema.field(c).type)
        for c, value in partition.items()
        if c in snapshot.partition_by
    ]
    expr = None
    for t in terms:
        expr = t if expr is None else expr & t
    files = snapshot.files(expr)
    wanted = set(paths)
    at = [i for i, p in enumerate(files.paths()) if p in wanted]
    found = {f.path: f for f in files.take(at)}
    if len(found) < len(wanted) and expr is not None:  # a remove naming another partition
        return found | _lookup(snapshot, {}, [p for p in paths if p not in found])
    return found


def incomplete_error(storage: Storage, commit: Commit) -> ChangeFeedError:
    h = commit.header
    return ChangeFeedError(
        f"expected change files in commit {h.version} of {storage.uri} ({h.operation}), "
        f"found none: it changed rows inside files while the table property "
        f"lakelog.change_data_feed was off, so the change feed of a range holding it would "
        f"be incomplete. Read a range after version {h.version}; set the table property "
        f"lakelog.change_data_feed=true (table.set_properties({{'lakelog.change_data_feed': "
        f"'true'}})): the feed covers the commits after that.",
        version=h.version,
    )


# -- reading one part ---------------------------------------------------------------------


def read_part(
    storage: Storage,
    part: ChangePart,
    schema: pa.Schema,
    partition_by: Sequence[str],
    *,
    columns: Sequence[str] | None = None,
    filter: pc.Expression | None = None,
    batch_size: int = BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``part`` as batches of :func:`feed_schema` (``schema``: the table's
    schema of the feed, whose types the rows are read as; a column the part's version
    does not have, or has in a type that does not read as this one, is null), those
    matching ``filter`` (an expression over ``schema``'s columns)."""
    names = list(schema.names if columns is None else columns)
    wide = names
    if filter is not None:
        wide = [*names, *(c for c in referenced_columns(filter, schema.names) if c not in names)]
    target = pa.schema([schema.field(n) for n in wide])
    out = feed_schema(schema, names)
    stamp = pa.scalar(part.timestamp_ms, pa.timestamp("ms", tz="UTC"))
    version = pa.scalar(part.version, pa.int64())
    # the part's columns under this schema's names (a column renamed since reads under
    # its new name; one dropped since is not read: format.md, "Column ids")
    part = dataclasses.replace(part, schema=mapping.named_like(part.schema, schema))
    present = [n for n in wide if n in part.schema.names]
    for rows, kinds in _raw(storage, part, present, partition_by, batch_size):
        n = rows.num_rows
        if not n:
            continue
        got = _as_schema(rows, target)
        arrays = [*got.columns, kinds, pa.repeat(version, n), pa.repeat(stamp, n)]
        batch = pa.RecordBatch.from_arrays(arrays, schema=feed_schema(target))
        if filter is None:
            yield batch
            continue
        kept = pa.Table.from_batches([batch]).filter(filter).select(out.names)
        yield from (b for b in kept.to_batches() if b.num_rows)


def _raw(
    storage: Storage,
    part: ChangePart,
    names: list[str],
    partition_by: Sequence[str],
    batch_size: int,
) -> Iterator[tuple[pa.RecordBatch, pa.Array]]:
    """Batches of ``names`` (columns of the part's schema) and the change type of each row."""
    src = part.schema
    f = part.file
    if isinstance(f, ChangeFile):
        entry = DataFile(
            path=f.path, size_bytes=f.size_bytes, num_rows=f.num_rows, partition=f.partition
        )
        for batch in read_rows(
            storage,
            entry,
            src.append(_CHANGE_TYPE_FIELD),
            partition_by,
            columns=[*names, CHANGE_TYPE],
            version=part.version,
            batch_size=batch_size,
        ):
            kinds = batch.column(CHANGE_TYPE)
            yield batch.drop_columns([CHANGE_TYPE]), kinds.cast(pa.string())
        return
    if part.kind in ("insert", "delete"):
        kind = pa.scalar(INSERT if part.kind == "insert" else DELETE, pa.string())
        at = part.version if part.kind == "insert" else part.version - 1
        for batch in read_rows(
            storage, f, src, partition_by, columns=names, version=at, batch_size=batch_size
        ):
            yield batch, pa.repeat(kind, batch.num_rows)
        return
    yield from _diff(storage, part, names, partition_by, batch_size)


def _diff(
    storage: Storage,
    part: ChangePart,
    names: list[str],
    partition_by: Sequence[str],
    batch_size: int,
) -> Iterator[tuple[pa.RecordBatch, pa.Array]]:
    f = part.file
    assert isinstance(f, DataFile) and part.old is not None
    new = _positions(f)
    old = _positions(part.old)
    gone = np.setdiff1d(new, old, assume_unique=True)  # deleted by this commit
    back = np.setdiff1d(old, new, assume_unique=True)  # brought back by it
    if not len(gone) and not len(back):
        return
    whole = msgspec.structs.replace(f, deleted=None)
    for batch, pos in read_positions(
        storage,
        whole,
        part.schema,
        partition_by,
        columns=names,
        version=part.version,
        batch_size=batch_size,
    ):
        is_gone = np.isin(pos, gone, assume_unique=True)
        is_back = np.isin(pos, back, assume_unique=True)
        keep = is_gone | is_back
        if not keep.any():
            continue
        rows = batch.filter(pa.array(keep))
        kinds = np.where(is_gone[keep], DELETE, INSERT)
        yield rows, pa.array(kinds.tolist(), pa.string())


def _positions(f: DataFile) -> np.ndarray:
    if f.deleted is None:
        return np.empty(0, np.int64)
    return deleted_positions(f.deleted, f.num_rows, path=f.path)


def _as_schema(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema``'s columns: cast where the type reads as the
    feed's, null where the column is missing or held another type."""
    n = batch.num_rows
    have = set(batch.schema.names)
    arrays = []
    for field in schema:
        if field.name not in have:
            arrays.append(pa.nulls(n, field.type))
            continue
        col = batch.column(field.name)
        if col.type != field.type:
            col = (
                col.cast(field.type)
                if readable_as(col.type, field.type)
                else pa.nulls(n, field.type)
            )
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# -- the feed of a range ----------------------------------------------------------------


class ChangeFeed:
    """The rows that changed in versions ``start..end`` (both included; empty when
    ``end < start``), ordered by commit version: the table's columns (or the ones asked
    for), then ``_change_type`` (``insert``, ``delete``, ``update_preimage``,
    ``update_postimage``), ``_commit_version`` and ``_commit_timestamp``.

    Built by :meth:`lakelog.Table.changes`, which has already refused a range it cannot
    give whole. Read it with :meth:`to_arrow` or :meth:`to_batches` (bounded memory),
    as often as wanted: every read gives the same rows.
    """

    def __init__(
        self,
        storage: Storage,
        *,
        start: int,
        end: int,
        table_schema: pa.Schema,
        partition_by: Sequence[str],
        columns: Sequence[str] | None = None,
        predicate: Predicate | None = None,
        filter: pc.Expression | None = None,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        """``cache_bytes``: the range's commit files are kept in memory when they total at
        most this many bytes, else read again for each pass."""
        self.storage = storage
        self._cache_bytes = cache_bytes
        self.start = start
        self.end = end
        self.table_schema = table_schema
        self.partition_by = tuple(partition_by)
        self.columns = None if columns is None else list(columns)
        self._predicate = predicate
        self._filter = filter
        self._cached: list[Commit] | None = None
        self._wanted: frozenset[str] = frozenset()
        self._schema_before: pa.Schema | None = None
        self._survey()

    def __repr__(self) -> str:
        return f"ChangeFeed(uri={self.storage.uri!r}, start={self.start}, end={self.end})"

    @property
    def schema(self) -> pa.Schema:
        """The schema of the rows: the table's columns, then the change columns."""
        return feed_schema(self.table_schema, self.columns)

    def to_arrow(self) -> pa.Table:
        """Every row of the feed as one Table."""
        return pa.Table.from_batches(list(self.to_batches()), schema=self.schema)

    def to_batches(self, batch_size: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        """The rows as record batches of at most ``batch_size`` rows, one file's rows
        after the other (memory: one batch).

        Args:
            batch_size: the most rows per batch; default 65,536.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise InvalidArgumentError(
                f"expected batch_size to be an integer > 0 (rows), found {batch_size!r}"
            )
        return self._batches(batch_size)

    def parts(self) -> Iterator[ChangePart]:
        """The parts of the range, commit after commit, those ``filter`` may select."""
        planner = FeedPlanner(
            self.storage, self.start, schema=self._schema_before, wanted=self._wanted
        )
        for commit in self._commits():
            yield from self._pruned(planner.parts(commit))

    def _batches(self, batch_size: int) -> Iterator[pa.RecordBatch]:
        for part in self.parts():
            yield from read_part(
                self.storage,
                part,
                self.table_schema,
                self.partition_by,
                columns=self.columns,
                filter=self._filter,
                batch_size=batch_size,
            )

    def _pruned(self, parts: list[ChangePart]) -> list[ChangePart]:
        """``parts`` without the files whose partition values or statistics show that
        no row matches the filter."""
        pred = self._predicate
        if pred is None or not parts:
            return parts
        entries = [
            DataFile(
                path=p.file.path,
                size_bytes=p.file.size_bytes,
                num_rows=p.file.num_rows,
                partition=p.file.partition,
            )
            if isinstance(p.file, ChangeFile)
            else p.file
            for p in parts
        ]
        # the log keys statistics by physical name (format.md, "Column ids")
        physical = mapping.physical_schema(self.table_schema)
        pred = rename_columns(pred, mapping.physical_names(self.table_schema))
        block = entries_block(files_from_adds(entries), physical, self.partition_by)
        cols = block.stats_columns(physical, self.partition_by, predicate_columns(pred), "feed")
        keep = prune_mask(pred, cols).to_pylist()
        return [p for p, k in zip(parts, keep, strict=True) if k]

    def _survey(self) -> None:
        """Read the range once: refuse it when a commit has no complete feed, learn
        which removed files need their earlier entry and whether the schema changes,
        and keep the commits when they are small."""
        cached: list[Commit] = []
        size = 0
        wanted: set[str] = set()
        schema_changes = False
        for commit in self._read():
            cdc = any(isinstance(a, ChangeFile) for a in commit.actions)
            if not cdc and needs_change_files(commit):
                raise incomplete_error(self.storage, commit)
            schema_changes |= any(isinstance(a, Metadata) for a in commit.actions)
            if not cdc:
                wanted.update(a.path for a in commit.actions if isinstance(a, RemoveFile))
            size += _ACTION_BYTES * (1 + len(commit.actions))
            if size <= self._cache_bytes:
                cached.append(commit)
        self._cached = cached if size <= self._cache_bytes else None
        self._wanted = frozenset(wanted)
        # with no metadata action in the range, every version has the feed's schema
        self._schema_before = None if schema_changes else self.table_schema

    def _commits(self) -> Iterator[Commit]:
        if self._cached is not None:
            yield from self._cached
            return
        yield from self._read()

    def _read(self) -> Iterator[Commit]:
        return commits_between(self.storage, self.start, self.end)


def open_feed(
    storage: Storage,
    start: VersionLike,
    end: VersionLike | None = None,
    *,
    columns: Sequence[str] | None = None,
    filter: FilterLike = None,
    latest: ResolvedSnapshot | None = None,
    cache_bytes: int = CACHE_BYTES,
) -> ChangeFeed:
    """The change feed of versions ``start..end`` of the table at ``storage`` (see
    :meth:`lakelog.Table.changes`); ``latest``: the latest snapshot when the caller has
    it resolved."""
    latest = latest if latest is not None else load_snapshot(storage)
    first, last = _resolve(storage, start, end, latest.version, latest.oldest_version)
    snap = latest if last in (latest.version, -1) else load_snapshot(storage, last)
    schema = snap.schema
    cols = check_columns(schema, columns)
    clash = [f.name for f in CHANGE_FIELDS if f.name in schema.names]
    if clash:
        raise InvalidArgumentError(
            f"expected a table without columns named {clash}, which the change feed adds, "
            f"found them in the schema of {storage.uri}; rename them to read the feed."
        )
    pred = parse_filter(filter, schema)
    expr = None
    if pred is not None:
        expr = filter if isinstance(filter, pc.Expression) else to_expression(pred)
    return ChangeFeed(
        storage,
        start=first,
        end=last,
        table_schema=schema,
        partition_by=snap.partition_by,
        columns=cols,
        predicate=pred,
        filter=expr,
        cache_bytes=cache_bytes,
    )


def _check_version(value: object, name: str) -> None:
    if isinstance(value, dt.datetime):
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(
            f"expected {name} to be a version (an integer >= 0) or a datetime, found "
            f"{value!r}; table.history() lists the versions and their times."
        )


def _resolve(
    storage: Storage, start: VersionLike, end: VersionLike | None, latest: int, oldest: int
) -> tuple[int, int]:
    """The versions of the range: ``start`` by time is the first version committed at
    or after it, ``end`` by time the last at or before it. ``latest``: the latest
    version; ``oldest``: its oldest readable version."""
    _check_version(start, "start")
    if end is not None:
        _check_version(end, "end")
    if isinstance(start, dt.datetime):
        try:
            first = version_as_of(storage, utc_ms(start) - 1) + 1
        except VersionExpiredError:
            first = -1  # before the oldest readable commit: refused below
        except VersionNotFoundError:
            first = 0  # before the first commit
    else:
        first = start
        if first > latest + 1:
            raise VersionNotFoundError(
                f"expected start to be at most {latest + 1} (the latest version of "
                f"{storage.uri} is {latest}), found start={first}"
            )
    readable = oldest + 1 if oldest > 0 else 0
    if first < readable:
        shown = f"{first}" if not isinstance(start, dt.datetime) else f"{start.isoformat()}"
        raise VersionExpiredError(
            f"expected the change feed to start at or after version {readable}, found "
            f"start={shown}: the oldest readable version of {storage.uri} is {oldest} "
            f"(older ones were expired by expire_snapshots), and the changes of a version "
            f"are read from the files of the one before it. Start at version {readable} "
            f"or later.",
            oldest_version=oldest,
        )
    if end is None:
        last = latest
    elif isinstance(end, dt.datetime):
        last = version_as_of(storage, end)
    else:
        last = end
        if last > latest:
            raise VersionNotFoundError(
                f"expected end to be at most {latest}, the latest version of {storage.uri}, "
                f"found end={last}"
            )
        if not isinstance(start, dt.datetime) and last < first - 1:
            raise InvalidArgumentError(
                f"expected end >= start - 1 (end = start - 1: an empty range), found "
                f"start={first} and end={last}; pass end=None for every version from start on."
            )
    return first, max(last, first - 1)
