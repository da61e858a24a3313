"""Snapshots: the table as of one version, resolved from the log.

Resolving version ``v`` = the newest readable manifest at or below ``v``
plus the replay of the commits after it (or a replay from version 0 when no
manifest is usable). The file set never comes from listing data folders.

A version below the oldest readable version recorded by ``expire_snapshots``
raises :class:`VersionExpiredError`, also while the expiry is still deleting
(or was killed before deleting) the old commits and data files.
"""

from __future__ import annotations

import bisect
import contextlib
import datetime as dt
import itertools
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from ..errors import (
    CorruptLogError,
    DataFileMissingError,
    InvalidArgumentError,
    LakelogError,
    LogGapError,
    TableNotFoundError,
    UnsupportedFormatError,
    VersionExpiredError,
    VersionNotFoundError,
)
from ..filters import (
    FileStatsColumns,
    Predicate,
    Unknown,
    parse_filter,
    predicate_columns,
    prune_mask,
    to_expression,
)
from ..stats import file_guarantee, filter_is_null_sensitive, referenced_columns
from ..storage import Storage
from .actions import FORMAT_VERSION, Commit, DataFile, ExpireVersions, Metadata
from .commits import (
    TAIL_MAX_BATCH,
    LogListing,
    commit_path,
    decode_commit,
    gap_error,
    list_log,
    read_header,
    read_tail,
)
from .file_index import concat_stats_columns, filter_stats_columns, stats_columns
from .files import FILES_SCHEMA, ReplayState, data_files
from .manifests import read_hint, read_hint_oldest, read_manifest, read_manifest_header

__all__ = ["Snapshot", "load_snapshot", "oldest_readable_version", "version_as_of"]

_PRUNE_FS = pafs.LocalFileSystem()
_COLUMN_SETS = 8
"""Column sets whose typed columns a snapshot keeps before it starts over."""


class Snapshot:
    """The table as of one version: immutable."""

    def __init__(
        self,
        storage: Storage,
        *,
        version: int,
        timestamp_ms: int,
        metadata: Metadata,
        files: pa.Table,
        oldest_version: int = 0,
        carry: _Carry | None = None,
    ) -> None:
        if metadata.format_version > FORMAT_VERSION:
            raise UnsupportedFormatError(
                f"expected table format version <= {FORMAT_VERSION}, found "
                f"{metadata.format_version}; upgrade lakelog to read this table."
            )
        self.storage = storage
        self.version = version
        self.timestamp_ms = timestamp_ms
        self.metadata = metadata
        self.file_table = files
        self.oldest_version = oldest_version
        """Oldest readable version as of this version (0: nothing expired)."""
        self._carry = carry
        self._built: dict[frozenset[str] | None, FileStatsColumns] = {}

    def __repr__(self) -> str:
        return (
            f"Snapshot(uri={self.storage.uri!r}, version={self.version}, "
            f"files={self.num_files}, timestamp={self.timestamp.isoformat()})"
        )

    # -- description -----------------------------------------------------------
    @property
    def timestamp(self) -> dt.datetime:
        """Commit time of this version (UTC)."""
        return dt.datetime.fromtimestamp(self.timestamp_ms / 1000, tz=dt.timezone.utc)

    @cached_property
    def schema(self) -> pa.Schema:
        """Full table schema, partition columns included."""
        return self.metadata.arrow_schema()

    @property
    def partition_by(self) -> tuple[str, ...]:
        return self.metadata.partition_by

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.metadata.properties)

    @property
    def table_id(self) -> str:
        return self.metadata.table_id

    @property
    def num_files(self) -> int:
        return int(self.file_table.num_rows)

    @property
    def num_rows(self) -> int:
        return int(pc.sum(self.file_table.column("num_rows")).as_py() or 0)

    @property
    def total_bytes(self) -> int:
        return int(pc.sum(self.file_table.column("size_bytes")).as_py() or 0)

    @cached_property
    def file_schema(self) -> pa.Schema:
        """Schema of the data files: the table schema without partition columns."""
        keep = [f for f in self.schema if f.name not in self.partition_by]
        return pa.schema(keep, metadata=self.schema.metadata)

    # -- files -----------------------------------------------------------------
    @cached_property
    def _all_files(self) -> tuple[DataFile, ...]:
        return tuple(data_files(self.file_table))

    @cached_property
    def stats_columns(self) -> FileStatsColumns:
        """Typed partition values and statistics of every live file, one row per file
        in ``file_table`` order: what pruning compares. Built once per snapshot from
        the log's JSON columns, or carried over from the snapshot this one advanced
        from (its rows still live, then the added files')."""
        return self._columns(None)

    def _columns_for(self, pred: Predicate) -> FileStatsColumns:
        """The typed columns pruning ``pred`` needs: all of them once built, else only
        the columns it refers to (a partition filter then parses no statistics)."""
        if "stats_columns" in self.__dict__:
            return self.stats_columns
        return self._columns(predicate_columns(pred))

    def _columns(self, names: frozenset[str] | None) -> FileStatsColumns:
        """Typed columns of ``names`` (None: all), cached per column set; derived from
        the carried columns of the previous snapshot when it had built them."""
        cached = self._built.get(names)
        if cached is not None:
            return cached
        carry = self._carry
        base = None if carry is None else carry.columns.get(names)
        if carry is not None and base is not None and carry.schema.equals(self.schema):
            built = concat_stats_columns(
                base if carry.keep is None else filter_stats_columns(base, carry.keep),
                None
                if carry.added is None
                else stats_columns(carry.added, self.schema, self.partition_by, columns=names),
            )
        else:
            built = stats_columns(self.file_table, self.schema, self.partition_by, columns=names)
        if carry is not None:  # each carried set is used once: then let it go
            carry.columns.pop(names, None)
            if not carry.columns:
                self._carry = None
        if len(self._built) >= _COLUMN_SETS:
            self._built.clear()
        self._built[names] = built
        return built

    def _filter(self, filter: Any) -> tuple[Predicate | None, pc.Expression | None]:
        """A filter as lakelog's predicate (for pruning) and as a row expression."""
        pred = parse_filter(filter, self.schema)
        if pred is None:
            return None, None
        return pred, filter if isinstance(filter, pc.Expression) else to_expression(pred)

    def files(self, filter: Any = None) -> list[DataFile]:
        """Live data files, pruned by partition values and min/max stats.

        ``filter``: a :class:`pyarrow.compute.Expression`, DNF tuples, or a SQL-like
        string such as ``"day = '2026-11-02' and sensor between 10 and 20"`` (see
        :mod:`lakelog.filters`). A file is kept unless its partition values or
        statistics prove no row can match. Pruning is a few vectorized comparisons
        over :attr:`stats_columns`; :class:`DataFile` objects are built only for the
        files returned.
        """
        pred, expr = self._filter(filter)
        if pred is None or expr is None:
            return list(self._all_files)
        if isinstance(pred, Unknown):  # a shape lakelog does not model: pyarrow decides
            return self._prune(self._all_files, expr)
        keep = prune_mask(pred, self._columns_for(pred))
        if "_all_files" in self.__dict__:
            return list(itertools.compress(self._all_files, keep.to_pylist()))
        return data_files(self.file_table.filter(keep))

    def _prune(self, files: Sequence[DataFile], expr: pc.Expression) -> list[DataFile]:
        schema = self.schema
        cols = referenced_columns(expr, schema.names)
        null_safe = filter_is_null_sensitive(expr)
        fmt = ds.ParquetFileFormat()
        true = pc.scalar(True)
        frags = []
        for i, f in enumerate(files):
            g = file_guarantee(f, schema, columns=cols, null_safe=null_safe)
            frags.append(
                fmt.make_fragment(
                    f"/{i}", filesystem=_PRUNE_FS, partition_expression=true if g is None else g
                )
            )
        dataset = ds.FileSystemDataset(frags, schema, fmt, _PRUNE_FS)
        try:
            kept = [int(fr.path[1:]) for fr in dataset.get_fragments(filter=expr)]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise InvalidArgumentError(
                f"expected a filter over the table's columns {schema.names}, found {expr}: {e}"
            ) from e
        return [files[i] for i in kept]

    def file_urls(self, filter: Any = None) -> list[str]:
        """Full URLs of the live files (for engines such as Spark)."""
        if filter is None:  # straight from the path column
            prefix = self.storage.url("") + "/"
            return [prefix + p for p in self.file_table.column("path").to_pylist()]
        return [self.storage.url(f.path) for f in self.files(filter)]

    # -- reading ---------------------------------------------------------------
    def dataset(self, filter: Any = None) -> ds.FileSystemDataset:
        """A pyarrow Dataset over exactly this snapshot's files.

        Each fragment carries its partition values and (null-safe) min/max
        ranges, so pyarrow prunes too; ``filter`` pre-prunes the file list.
        Reading it directly gives pyarrow's own errors (a missing file is a bare
        ``FileNotFoundError``); :meth:`to_arrow` and :meth:`to_batches` type them.
        """
        files = self.files(filter)
        schema = self.schema
        fmt = ds.ParquetFileFormat()
        fs = self.storage.arrow_filesystem()
        true = pc.scalar(True)
        frags = []
        for f in files:
            g = file_guarantee(f, schema, null_safe=True)
            frags.append(
                fmt.make_fragment(
                    self.storage.full(f.path),
                    filesystem=fs,
                    partition_expression=true if g is None else g,
                    file_size=f.size_bytes,
                )
            )
        return ds.FileSystemDataset(frags, schema, fmt, fs)

    def to_arrow(self, columns: Sequence[str] | None = None, filter: Any = None) -> pa.Table:
        """Read the snapshot (or the matching rows and columns) into a Table.

        A referenced data file deleted outside lakelog is a :class:`DataFileMissingError`.
        """
        _, expr = self._filter(filter)
        cols = self._check_columns(columns)
        dataset = self.dataset(expr)
        with self._reading():
            return dataset.to_table(columns=cols, filter=expr)

    def to_batches(
        self, columns: Sequence[str] | None = None, filter: Any = None, *, batch_size: int = 65536
    ) -> Iterator[pa.RecordBatch]:
        """Stream the snapshot as record batches of up to ``batch_size`` rows (bounded
        memory). Arguments are checked on the call, errors are typed as in :meth:`to_arrow`."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise InvalidArgumentError(
                f"expected batch_size to be an integer > 0 (rows), found {batch_size!r}; "
                f"pass a whole number of rows such as batch_size=65536."
            )
        _, expr = self._filter(filter)
        cols = self._check_columns(columns)
        return self._stream(self.dataset(expr), cols, expr, batch_size)

    def _stream(
        self,
        dataset: ds.FileSystemDataset,
        columns: list[str] | None,
        expr: pc.Expression | None,
        batch_size: int,
    ) -> Iterator[pa.RecordBatch]:
        with self._reading():
            yield from dataset.to_batches(columns=columns, filter=expr, batch_size=batch_size)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Typed errors for reading the data files: a filter over unknown columns, a
        data file deleted outside lakelog."""
        try:
            yield
        except FileNotFoundError as e:
            if isinstance(e, LakelogError):
                raise
            raise self._missing_file(e) from e
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            if "No match for FieldRef" in str(e):
                raise InvalidArgumentError(
                    f"expected a filter over the table's columns {self.schema.names}: {e}"
                ) from e
            raise

    def _missing_file(self, error: FileNotFoundError) -> DataFileMissingError:
        """The error for a data file of this version that is gone: the one the
        filesystem error names, else the first that no longer exists."""
        text = str(error)
        named = [f.path for f in self._all_files if self.storage.full(f.path) in text]
        path = max(named, key=len) if named else None
        if path is None:
            path = next((f.path for f in self._all_files if not self.storage.exists(f.path)), "")
        where = f"{path!r}" if path else f"({error})"
        return DataFileMissingError(
            f"expected data file {where}, which version {self.version} of {self.storage.uri} "
            f"references, found it missing: it was deleted outside lakelog (lakelog only "
            f"deletes files that no retained version references). Restore it from a backup, "
            f"or read a version that does not reference it (time travel with "
            f"table.snapshot(version)); to drop it for good, overwrite the rows or partition "
            f"it held.",
            path=path,
            version=self.version,
        )

    def _check_columns(self, columns: Sequence[str] | None) -> list[str] | None:
        if columns is None:
            return None
        if isinstance(columns, str):
            columns = [columns]
        missing = [c for c in columns if c not in self.schema.names]
        if missing:
            raise InvalidArgumentError(
                f"expected columns of the table {self.schema.names}, found unknown {missing}"
            )
        return list(columns)


# -- resolution -----------------------------------------------------------------


def _empty_state() -> tuple[Metadata | None, pa.Table]:
    return None, FILES_SCHEMA.empty_table()


class _Carry(NamedTuple):
    """Typed columns the snapshot a new one advanced from had built (by column set,
    None: all), to derive its own from: the base rows ``keep`` selects, then ``added``."""

    schema: pa.Schema
    columns: dict[frozenset[str] | None, FileStatsColumns]
    keep: pa.BooleanArray | None
    added: pa.Table | None


def _finish(storage: Storage, state: ReplayState, base: Snapshot | None = None) -> Snapshot:
    if state.metadata is None:
        raise CorruptLogError(
            f"expected a metadata action at or before version {state.version} of "
            f"{storage.uri}, found none; the log is damaged."
        )
    files, keep, added = state.split()
    carry = None
    if base is not None and base._built:
        carry = _Carry(base.schema, dict(base._built), keep, added)
    return Snapshot(
        storage,
        version=state.version,
        timestamp_ms=state.timestamp_ms,
        metadata=state.metadata,
        files=files,
        oldest_version=state.oldest_version,
        carry=carry,
    )


def _replay_forward(storage: Storage, state: ReplayState, upto: int | None) -> ReplayState:
    """Apply commits after ``state.version`` (up to ``upto``, or until the end).

    To the end, commits come from :func:`read_tail` (batched reads that tell the end
    of the log from a hole). Up to a given version, exactly the commits needed are
    fetched, in batches; one missing is a hole (:class:`LogGapError`).
    """
    if upto is None:
        for v, data in read_tail(storage, state.version + 1):
            state.apply(decode_commit(data, v))
        return state
    v = state.version + 1
    while v <= upto:
        n = min(TAIL_MAX_BATCH, upto - v + 1)
        for got in storage.read_many([commit_path(x) for x in range(v, v + n)]):
            if got is None:
                later = [c for c in list_log(storage).commits if c > v]
                raise gap_error(storage, v, later[0] if later else upto)
            state.apply(decode_commit(got, v))
            v += 1
    return state


def _from_manifest(storage: Storage, version: int) -> ReplayState | None:
    try:
        m = read_manifest(storage, version)
    except (FileNotFoundError, CorruptLogError):
        return None
    h = m.header
    return ReplayState.start(h.metadata, m.files, h.version, h.timestamp_ms, h.oldest_version)


def oldest_readable_version(storage: Storage, listing: LogListing | None = None) -> int:
    """The oldest version expiry left readable (0 if nothing was expired).

    The hint (or else the newest readable manifest header) gives the oldest
    version as of its manifest; the commits after it may raise it. An expiry
    writes a manifest at its oldest version before it commits, so no expiry
    hides below the newest manifest.
    """
    listing = listing or list_log(storage)
    oldest, base = 0, -1
    hint = read_hint_oldest(storage)
    if hint is not None and hint[0] in listing.manifests:
        base, oldest = hint
    else:
        for m in reversed(listing.manifests):
            header = read_manifest_header(storage, m)
            if header is not None:
                oldest, base = header.oldest_version, m
                break
    for v in listing.commits:
        if v <= base:
            continue
        try:
            data = storage.read_bytes(commit_path(v))
        except FileNotFoundError:
            continue
        if b'"expire"' not in data:  # most commits expire nothing: skip decoding
            continue
        for a in decode_commit(data, v).actions:
            if isinstance(a, ExpireVersions):
                oldest = max(oldest, a.oldest_version)
    return oldest


def _expired_error(storage: Storage, version: int, oldest: int) -> VersionExpiredError:
    return VersionExpiredError(
        f"expected a version at or after {oldest}, the oldest readable version of "
        f"{storage.uri}, found {version}: older versions were expired by "
        f"expire_snapshots and their files may be gone. Read version {oldest} or later.",
        oldest_version=oldest,
    )


def _check_not_expired(storage: Storage, version: int, listing: LogListing) -> None:
    # Every expiry leaves a manifest at or above its oldest version, so a
    # version at or above the newest manifest cannot be expired: no reads then.
    if listing.manifests and version < listing.manifests[-1]:
        oldest = oldest_readable_version(storage, listing)
        if version < oldest:
            raise _expired_error(storage, version, oldest)


def load_snapshot(
    storage: Storage, version: int | None = None, *, listing: LogListing | None = None
) -> Snapshot:
    """Resolve the latest snapshot, or the one at ``version``."""
    if version is None:
        hint = read_hint(storage)
        if hint is not None:
            state = _from_manifest(storage, hint)
            if state is not None:
                try:
                    return _finish(storage, _replay_forward(storage, state, None))
                except LogGapError as e:
                    # an expiry deleting below its oldest version, after a stale hint:
                    # resolve from a listing; a hole in the readable range is damage
                    if e.missing >= oldest_readable_version(storage):
                        raise
        listing = listing or list_log(storage)
        if not listing.commits and not listing.manifests:
            raise TableNotFoundError(
                f"expected a lakelog table at {storage.uri}, found no log "
                f"(_lakelog/ is missing or empty); create one with lakelog.create_table()."
            )
        version = max(listing.commits[-1:] + listing.manifests[-1:])
    if version < 0:
        raise VersionNotFoundError(f"expected a version >= 0, found {version}")
    listing = listing or list_log(storage)
    if not listing.commits and not listing.manifests:
        raise TableNotFoundError(f"expected a lakelog table at {storage.uri}, found no log")
    latest = max(listing.commits[-1:] + listing.manifests[-1:])
    if version > latest:
        raise VersionNotFoundError(
            f"expected a version between 0 and {latest} of {storage.uri}, found {version}"
        )
    _check_not_expired(storage, version, listing)
    commits = set(listing.commits)
    # newest usable manifest at or below the version, with every later commit present
    idx = bisect.bisect_right(listing.manifests, version)
    for m in reversed(listing.manifests[:idx]):
        if any(v not in commits for v in range(m + 1, version + 1)):
            continue
        state = _from_manifest(storage, m)
        if state is not None:
            return _finish(storage, _replay_forward(storage, state, version))
    missing = [v for v in range(0, version + 1) if v not in commits]
    if missing:
        oldest = oldest_readable_version(storage, listing)
        if version < oldest:
            raise _expired_error(storage, version, oldest)
        if missing[-1] >= oldest:  # a readable version's commit is gone: damage
            hole = next(v for v in missing if v >= oldest)
            raise gap_error(storage, hole, min(v for v in listing.commits if v > hole))
        raise CorruptLogError(
            f"expected to resolve version {version} of {storage.uri} from a manifest or from "
            f"commits 0..{version}, found no usable manifest at or after the oldest readable "
            f"version {oldest} and commit {missing[0]} missing. Restore the manifest "
            f"_lakelog/{oldest:020d}.manifest.parquet from a backup."
        )
    meta, base = _empty_state()
    state = ReplayState.start(meta, base, -1, 0)
    return _finish(storage, _replay_forward(storage, state, version))


def advance(snapshot: Snapshot, commits: Sequence[Commit]) -> Snapshot:
    """The snapshot after applying later commits (pure)."""
    if not commits:
        return snapshot
    state = ReplayState.start(
        snapshot.metadata,
        snapshot.file_table,
        snapshot.version,
        snapshot.timestamp_ms,
        snapshot.oldest_version,
    )
    for c in commits:
        state.apply(c)
    return _finish(snapshot.storage, state, snapshot)


def version_as_of(storage: Storage, when: dt.datetime | int) -> int:
    """The latest version committed at or before ``when`` (datetime or epoch ms).

    Commit timestamps strictly increase, so this is a binary search over
    commit headers. An instant before the oldest readable version of an
    expired table raises :class:`VersionExpiredError`.
    """
    if isinstance(when, dt.datetime):
        aware = when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)
        ts = int(aware.timestamp() * 1000)
    else:
        ts = int(when)
    listing = list_log(storage)
    versions = listing.commits
    if not versions:
        raise TableNotFoundError(f"expected a lakelog table at {storage.uri}, found no log")
    oldest = 0
    if versions[0] > 0 or (listing.manifests and versions[0] < listing.manifests[-1]):
        oldest = oldest_readable_version(storage, listing)
        versions = tuple(v for v in versions if v >= oldest) or versions
    lo, hi = 0, len(versions) - 1
    first_ts = read_header(storage, versions[0]).timestamp_ms
    if ts < first_ts:
        first = dt.datetime.fromtimestamp(first_ts / 1000, tz=dt.timezone.utc)
        message = (
            f"expected an instant at or after the oldest readable commit "
            f"(version {versions[0]} at {first.isoformat()}), found "
            f"{dt.datetime.fromtimestamp(ts / 1000, tz=dt.timezone.utc).isoformat()}"
        )
        if oldest > 0:
            raise VersionExpiredError(
                f"{message}; older versions were expired by expire_snapshots.",
                oldest_version=oldest,
            )
        raise VersionNotFoundError(message)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if read_header(storage, versions[mid]).timestamp_ms <= ts:
            lo = mid
        else:
            hi = mid - 1
    return versions[lo]
