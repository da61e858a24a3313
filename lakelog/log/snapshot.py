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
import datetime as dt
import logging
import threading
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any, TypeVar

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from ..errors import (
    CorruptLogError,
    InvalidArgumentError,
    LogGapError,
    ManifestLeafError,
    TableNotFoundError,
    VersionExpiredError,
    VersionNotFoundError,
)
from ..filters import (
    FileStatsColumns,
    FilterLike,
    Predicate,
    ReadFilter,
    Unknown,
    predicate_columns,
    read_filter,
    rename_columns,
)
from ..stats import (
    file_guarantee,
    filter_is_null_sensitive,
    referenced_columns,
)
from ..storage import Storage
from ..transforms import PartitionSpec, may_match
from . import mapping
from .actions import Commit, ExpireVersions, Metadata
from .commits import (
    LogListing,
    commit_path,
    commits_between,
    decode_commit,
    gap_error,
    list_log,
    read_header,
)
from .filelist import FileList
from .files import ReplayState, empty_files
from .fileset import FileSet, entries_block
from .format import check_readable
from .manifests import (
    Manifest,
    carry_into_state,
    read_hint,
    read_hint_oldest,
    read_manifest,
    read_manifest_header,
)
from .plans import PendingPlan

__all__ = [
    "Snapshot",
    "advance",
    "load_snapshot",
    "snapshot_of",
    "oldest_readable_version",
    "version_as_of",
]

log = logging.getLogger("lakelog")

_PRUNE_FS = pafs.LocalFileSystem()
_T = TypeVar("_T")


class Snapshot:
    """The table as of one version (an immutable value): metadata, the live files and
    their counts, resolved from the log. Reading rows is :class:`lakelog.scan.Snapshot`."""

    def __init__(
        self,
        storage: Storage,
        *,
        version: int,
        timestamp_ms: int,
        metadata: Metadata,
        files: pa.Table | None = None,
        oldest_version: int = 0,
        state: ReplayState | None = None,
    ) -> None:
        """``files``: the live files as a file table (:func:`~.files.files_from_adds`); or
        ``state``: the replayed state (a base, version-1 table or version-2 root, and the
        tail)."""
        check_readable(metadata.format_version, what="table")
        self.storage = storage
        self.version = version
        self.timestamp_ms = timestamp_ms
        self.metadata = metadata
        self.oldest_version = oldest_version
        """Oldest readable version as of this version (0: nothing expired)."""
        schema, part = mapping.physical_schema(metadata.arrow_schema()), metadata.partition_by
        if state is None:
            base = entries_block(files if files is not None else empty_files(), schema, part)
            state = ReplayState.start(metadata, base, version, timestamp_ms, oldest_version)
        elif state.base is None:
            state.base = entries_block(empty_files(), schema, part)
        self._fileset = FileSet.of_state(storage, metadata, schema, state)
        self._lock = threading.Lock()
        self._cache: dict[str, Any] = {}

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
        """The identity partition columns kept out of the data files (format.md, "Data
        files"); empty for a table with partition specs."""
        return self.metadata.partition_by

    @cached_property
    def partition_specs(self) -> tuple[PartitionSpec, ...]:
        """The table's partition specs of transforms, by id (format version 8)."""
        return tuple(PartitionSpec.of(i, t) for i, t in enumerate(self.metadata.partition_specs))

    @property
    def partition_spec(self) -> PartitionSpec | None:
        """The spec new data is written in (None: identity partitioning by
        :attr:`partition_by`, or none)."""
        specs = self.partition_specs
        return specs[-1] if specs else None

    @property
    def partition_sources(self) -> frozenset[str]:
        """Columns some partition spec (any, current or older) transforms."""
        return frozenset(f.column for spec in self.partition_specs for f in spec.fields)

    @property
    def partitioning(self) -> list[str]:
        """The table's partitioning as written: the current spec's fields (``day(ts)``,
        ``bucket(16, id)``), or the partition columns."""
        spec = self.partition_spec
        return list(spec.texts) if spec is not None else list(self.partition_by)

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.metadata.properties)

    @property
    def table_id(self) -> str:
        return self.metadata.table_id

    @property
    def app_versions(self) -> dict[str, int]:
        """The recorded version of each app id as of this version (exactly-once ingest:
        ``append(..., app_id=, app_version=)``; ``docs/format.md``, "App transactions")."""
        return dict(self._state.app_versions)

    @property
    def app_commits(self) -> dict[str, int]:
        """The version of the commit that recorded each app id's version."""
        return dict(self._state.app_commits)

    @property
    def plans(self) -> dict[str, PendingPlan]:
        """Pending maintenance plans by plan id (``docs/format.md``, "Maintenance plans
        and claims"). Shared with the snapshot: do not change them."""
        try:
            return dict(self._state.pending_plans())
        except ManifestLeafError as e:  # the base root's plans file was expired since
            log.warning("resolving version %d of %s again: %s", self.version, self.storage.uri, e)
            return dict(self._resolve_again(frozenset())._state.pending_plans())

    @property
    def num_files(self) -> int:
        return self._counts()[0]

    @property
    def num_rows(self) -> int:
        return self._counts()[1]

    @property
    def total_bytes(self) -> int:
        return self._counts()[2]

    def _counts(self) -> tuple[int, int, int]:
        """Live files, rows and bytes: from the manifest root and the tail."""
        return self._cached("counts", lambda fs: fs.counts())

    @cached_property
    def physical_schema(self) -> pa.Schema:
        """The schema under the names data files store columns by, which the log keys
        statistics by (format.md, "Column ids, renames and nested fields"); the schema
        itself without column mapping."""
        return mapping.physical_schema(self.schema)

    @cached_property
    def relabelled(self) -> bool:
        """Whether some column's physical name differs from its name (a rename, or a
        column added back after a drop): then files must be read through lakelog."""
        return mapping.relabelled(self.schema)

    @cached_property
    def _to_physical(self) -> dict[str, str]:
        return mapping.physical_names(self.schema)

    @cached_property
    def _to_logical(self) -> dict[str, str]:
        return mapping.logical_names(self.schema)

    @cached_property
    def file_schema(self) -> pa.Schema:
        """Schema of the data files: the table schema without partition columns."""
        keep = [f for f in self.schema if f.name not in self.partition_by]
        return pa.schema(keep, metadata=self.schema.metadata)

    # -- files -----------------------------------------------------------------
    @property
    def _state(self) -> ReplayState:
        """The replayed state behind the files (a base and the tail since)."""
        state = self._fileset.state
        assert state is not None  # made of a state (__init__)
        return state

    def _files(self) -> FileSet:
        return self._fileset

    def _resolve_again(self, avoid: frozenset[int]) -> Snapshot:
        """This version resolved from the log again, without the manifests ``avoid``."""
        return load_snapshot(self.storage, self.version, avoid=avoid)

    def _use(self, fn: Callable[[FileSet], _T]) -> _T:
        """``fn`` over the live files. A manifest leaf found missing or damaged makes
        its manifest unusable: the version is resolved again without it, once per
        manifest, as for any damaged manifest (``docs/format.md``). The snapshot's
        value does not change: the same files are found from an older base."""
        for _ in range(8):
            try:
                return fn(self._files())
            except ManifestLeafError as e:
                root = self._files().root
                if root is None:
                    raise
                log.warning(
                    "manifest of version %d of %s is unusable (%s); resolving version %d "
                    "without it",
                    root.version,
                    self.storage.uri,
                    e,
                    self.version,
                )
                with self._lock:  # the same files either way: whoever swaps first wins
                    if self._fileset.root is root:
                        avoid = self._fileset.avoid | {root.version}
                        self._fileset = FileSet.of_state(
                            self.storage,
                            self.metadata,
                            self.physical_schema,
                            self._resolve_again(avoid)._state,
                            avoid=avoid,
                        )
        return fn(self._files())

    def _cached(self, name: str, fn: Callable[[FileSet], _T]) -> _T:
        if name not in self._cache:
            self._cache[name] = self._use(fn)
        return self._cache[name]  # type: ignore[no-any-return]

    @property
    def file_table(self) -> pa.Table:
        """Every live file as one file table (:func:`~.files.files_from_adds`, JSON
        columns). Built on first use from every leaf: prefer :meth:`files` with a filter,
        or :meth:`paths`."""
        return self._cached("file_table", lambda fs: fs.file_table())

    @property
    def entries(self) -> pa.Table:
        """Every live file as one table of typed entries: path, sizes, typed partition
        values and statistics, tags, deletion vector (the leaf schema of
        ``docs/format.md``). What planners filter with Arrow; build :class:`DataFile`
        values for the rows kept with :meth:`FileList.of_entries`."""
        return self._cached("entries", lambda fs: fs.entries())

    def paths(self) -> list[str]:
        """Root-relative paths of the live files."""
        return list(self._cached("paths", lambda fs: fs.paths()))

    @property
    def _all_files(self) -> FileList:
        return self._cached("all_files", lambda fs: fs.files(None, None))

    @property
    def stats_columns(self) -> FileStatsColumns:
        """Typed partition values and statistics of every live file, one row per file
        in ``file_table`` order: what pruning compares."""
        return self._cached("stats_columns", lambda fs: self.logical(fs.stats_columns(None)))

    def logical(self, cols: FileStatsColumns) -> FileStatsColumns:
        """Statistics columns the log keys by physical name, by column name instead."""
        if not self.relabelled:
            return cols
        return cols.relabel(self._to_logical)

    def read_filter(self, filter: FilterLike | ReadFilter) -> ReadFilter:
        """``filter`` parsed once for a read of this snapshot: lakelog's predicate (for
        pruning) and the row expression; every step of the read takes the result."""
        return read_filter(filter, self.schema)

    def files(self, filter: FilterLike | ReadFilter = None) -> FileList:
        """Live data files, pruned by partition values and min/max stats.

        ``filter``: a :class:`pyarrow.compute.Expression`, DNF tuples, or a SQL-like
        string such as ``"day = '2026-11-02' and sensor between 10 and 20"`` (see
        :mod:`lakelog.filters`). A file is kept unless its partition values or
        statistics prove no row can match. Pruning is a few vectorized comparisons:
        over the summaries of the manifest's leaves first (only the leaves that can
        match are read), then over the files' typed columns; :class:`DataFile`
        objects are built only for the files a caller takes from the returned
        :class:`~lakelog.log.filelist.FileList` (a sequence; ``.paths()`` reads the
        paths alone).
        """
        pred, expr = self.read_filter(filter)
        if pred is None or expr is None:
            return self._all_files
        if isinstance(pred, Unknown) and not self.relabelled:
            # a shape lakelog does not model: pyarrow decides (over names as in the log)
            return self._prune(self._all_files, expr)
        logical = pred
        if self.relabelled:  # the log keys statistics by physical name
            if isinstance(pred, Unknown):
                return self._all_files
            pred = rename_columns(pred, self._to_physical)
        names = predicate_columns(pred)
        phys = pred
        kept = self._use(lambda fs: fs.files(phys, names))
        return self._prune_transforms(kept, logical)

    def _prune_transforms(self, files: FileList, pred: Predicate) -> FileList:
        """``files`` less those whose recorded transform values (format version 8) show
        that no row matches ``pred``; one decision per distinct set of values."""
        specs = self.partition_specs
        if not specs:
            return files
        schema = self.schema
        decided: dict[str | None, bool] = {}
        keep: list[int] = []
        for i, text in enumerate(files.tag_texts()):
            got = decided.get(text)
            if got is None:
                tags = _TAGS.decode(text) if text else {}
                got = decided[text] = may_match(pred, tags, specs, schema)
            if got:
                keep.append(i)
        return files if len(keep) == len(files) else files.take(keep)

    def _prune(self, files: FileList, expr: pc.Expression) -> FileList:
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
        return files.take(kept)

    def file_urls(self, filter: FilterLike = None) -> list[str]:
        """Full URLs of the live files (for engines such as Spark).

        Args:
            filter: prunes files as in :meth:`files`; default None, every live file.
        """
        if filter is None:  # straight from the paths
            prefix = self.storage.url("") + "/"
            return [prefix + p for p in self.paths()]
        return [self.storage.url(f.path) for f in self.files(filter)]


_TAGS = msgspec.json.Decoder(dict[str, str])


# -- resolution -----------------------------------------------------------------


def _empty_state() -> tuple[Metadata | None, None]:
    return None, None


def snapshot_of(storage: Storage, state: ReplayState) -> Snapshot:
    """The snapshot of a replayed state (its metadata checked)."""
    if state.metadata is None:
        raise CorruptLogError(
            f"expected a metadata action at or before version {state.version} of "
            f"{storage.uri}, found none; the log is damaged."
        )
    return Snapshot(
        storage,
        version=state.version,
        timestamp_ms=state.timestamp_ms,
        metadata=state.metadata,
        oldest_version=state.oldest_version,
        state=state,
    )


def _replay_forward(storage: Storage, state: ReplayState, upto: int | None) -> ReplayState:
    """Apply commits after ``state.version`` (up to ``upto``, or until the end), read by
    :func:`~.commits.commits_between` (a hole is :class:`LogGapError`)."""
    for commit in commits_between(storage, state.version + 1, upto):
        state.apply(commit)
    return state


def _from_manifest(storage: Storage, version: int) -> ReplayState | None:
    """The state a manifest holds (a version-1 file table or a version-2 root, whose
    leaves are read later), None if it is missing or damaged."""
    try:
        m = read_manifest(storage, version)
    except (FileNotFoundError, CorruptLogError):
        return None
    h = m.header
    base = (
        entries_block(
            m.files, mapping.physical_schema(h.metadata.arrow_schema()), h.metadata.partition_by
        )
        if isinstance(m, Manifest)
        else m
    )
    state = ReplayState.start(h.metadata, base, h.version, h.timestamp_ms, h.oldest_version)
    carry_into_state(h, state)
    if h.plans_file:
        state.set_plans_file(h.plans_file, lambda p: _read_plans_file(storage, p, h.version))
    else:
        state.set_plans_json(h.plans)
    return state


def _read_plans_file(storage: Storage, path: str, version: int) -> bytes:
    try:
        return storage.read_bytes(path)
    except FileNotFoundError as e:
        raise ManifestLeafError(
            f"expected the plans file {path} that the manifest of version {version} names, "
            f"found it missing: an expiry removed that manifest meanwhile. Open the table "
            f"again (refresh) and retry.",
            leaf=path,
        ) from e


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
    storage: Storage,
    version: int | None = None,
    *,
    listing: LogListing | None = None,
    avoid: frozenset[int] = frozenset(),
) -> Snapshot:
    """Resolve the latest snapshot, or the one at ``version``; ``avoid``: versions whose
    manifest was found unusable after it was read (a leaf missing)."""
    if version is None:
        hint = read_hint(storage)
        if hint is not None and hint not in avoid:
            state = _from_manifest(storage, hint)
            if state is not None:
                try:
                    return snapshot_of(storage, _replay_forward(storage, state, None))
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
        if m in avoid or any(v not in commits for v in range(m + 1, version + 1)):
            continue
        state = _from_manifest(storage, m)
        if state is not None:
            return snapshot_of(storage, _replay_forward(storage, state, version))
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
    return snapshot_of(storage, _replay_forward(storage, state, version))


def advance(snapshot: Snapshot, commits: Sequence[Commit]) -> Snapshot:
    """The snapshot after applying later commits (pure; O(change): the manifest and
    leaves are shared, only the tail of changes since them grows)."""
    if not commits:
        return snapshot
    state = snapshot._state.copy()
    for c in commits:
        state.apply(c)
    return snapshot_of(snapshot.storage, state)


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
