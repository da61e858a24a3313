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
import logging
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from ..errors import (
    CorruptLogError,
    DataFileMissingError,
    DeletedRowsError,
    InvalidArgumentError,
    LakelogError,
    LogGapError,
    ManifestLeafError,
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
    to_expression,
)
from ..io.rows import live_batches
from ..io.skipping import prune_fragments, wants_footers
from ..stats import (
    file_guarantee,
    filter_is_null_sensitive,
    filter_may_select_nan,
    referenced_columns,
)
from ..storage import Storage
from .actions import FORMAT_VERSION, Commit, DataFile, ExpireVersions, Metadata
from .checkpoint import (
    carried_fields,
    checkpoint,
    missing_leaves,
    rewrite_root,
    snapshot_state,
)
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
from .files import FILES_SCHEMA, ReplayState
from .fileset import FileSet, FlatBlock
from .manifests import (
    Manifest,
    Root,
    read_hint,
    read_hint_oldest,
    read_manifest,
    read_manifest_header,
    root_leaves,
)
from .plans import PendingPlan

__all__ = [
    "Snapshot",
    "advance",
    "keep_whole",
    "load_snapshot",
    "oldest_readable_version",
    "rebuild_root",
    "repair_roots",
    "version_as_of",
    "write_checkpoint",
]

log = logging.getLogger("lakelog")

_PRUNE_FS = pafs.LocalFileSystem()
_T = TypeVar("_T")


class Snapshot:
    """The table as of one version: immutable."""

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
        """``files``: the live files as a :data:`FILES_SCHEMA` table; or ``state``: the
        replayed state (a base, version-1 table or version-2 root, and the tail)."""
        if metadata.format_version > FORMAT_VERSION:
            raise UnsupportedFormatError(
                f"expected table format version <= {FORMAT_VERSION}, found "
                f"{metadata.format_version}; upgrade lakelog to read this table."
            )
        self.storage = storage
        self.version = version
        self.timestamp_ms = timestamp_ms
        self.metadata = metadata
        self.oldest_version = oldest_version
        """Oldest readable version as of this version (0: nothing expired)."""
        if state is None:
            base = FlatBlock(files if files is not None else FILES_SCHEMA.empty_table())
            state = ReplayState.start(metadata, base, version, timestamp_ms, oldest_version)
        elif isinstance(state.base, pa.Table):
            state.base = FlatBlock(state.base)
        self._state = state
        self._fileset: FileSet | None = None
        self._cache: dict[str, Any] = {}
        self._avoid: frozenset[int] = frozenset()
        """Manifests found unusable (a leaf missing) after they were read."""

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
            fresh = load_snapshot(self.storage, self.version)
            return dict(fresh._state.pending_plans())

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
    def file_schema(self) -> pa.Schema:
        """Schema of the data files: the table schema without partition columns."""
        keep = [f for f in self.schema if f.name not in self.partition_by]
        return pa.schema(keep, metadata=self.schema.metadata)

    # -- files -----------------------------------------------------------------
    def _files(self) -> FileSet:
        if self._fileset is None:
            st = self._state
            self._fileset = FileSet(
                self.storage, self.metadata, self.schema, st.base, st.added, st.removed
            )
        return self._fileset

    def _use(self, fn: Callable[[FileSet], _T]) -> _T:
        """``fn`` over the live files. A manifest leaf found missing or damaged makes
        its manifest unusable: the version is resolved again without it, once per
        manifest, as for any damaged manifest (``docs/format.md``)."""
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
                self._avoid |= {root.version}
                fresh = load_snapshot(self.storage, self.version, avoid=self._avoid)
                self._state, self._fileset = fresh._state, None
        return fn(self._files())

    def _cached(self, name: str, fn: Callable[[FileSet], _T]) -> _T:
        if name not in self._cache:
            self._cache[name] = self._use(fn)
        return self._cache[name]  # type: ignore[no-any-return]

    @property
    def file_table(self) -> pa.Table:
        """Every live file as one :data:`FILES_SCHEMA` table (JSON columns). Built on
        first use from every leaf: prefer :meth:`files` with a filter, or :meth:`paths`."""
        return self._cached("file_table", lambda fs: fs.file_table())

    def paths(self) -> list[str]:
        """Root-relative paths of the live files."""
        return list(self._cached("paths", lambda fs: fs.paths()))

    @property
    def _all_files(self) -> tuple[DataFile, ...]:
        return self._cached("all_files", lambda fs: tuple(fs.files(None, None)))

    @property
    def stats_columns(self) -> FileStatsColumns:
        """Typed partition values and statistics of every live file, one row per file
        in ``file_table`` order: what pruning compares."""
        return self._cached("stats_columns", lambda fs: fs.stats_columns(None))

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
        statistics prove no row can match. Pruning is a few vectorized comparisons:
        over the summaries of the manifest's leaves first (only the leaves that can
        match are read), then over the files' typed columns; :class:`DataFile`
        objects are built only for the files returned.
        """
        pred, expr = self._filter(filter)
        if pred is None or expr is None:
            return list(self._all_files)
        if isinstance(pred, Unknown):  # a shape lakelog does not model: pyarrow decides
            return self._prune(self._all_files, expr)
        names = predicate_columns(pred)
        return self._use(lambda fs: fs.files(pred, names))

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
        if filter is None:  # straight from the paths
            prefix = self.storage.url("") + "/"
            return [prefix + p for p in self.paths()]
        return [self.storage.url(f.path) for f in self.files(filter)]

    # -- reading ---------------------------------------------------------------
    def dataset(self, filter: Any = None, *, deleted: str = "refuse") -> ds.FileSystemDataset:
        """A pyarrow Dataset over exactly this snapshot's files.

        Each fragment carries its partition values and (null-safe) min/max
        ranges, so pyarrow prunes too; ``filter`` pre-prunes the file list, and,
        when it constrains a data column, the row groups inside the files by their
        statistics and bloom filters (:mod:`lakelog.io.skipping`; a file gone
        missing is then a :class:`DataFileMissingError`). Reading it directly gives
        pyarrow's own errors (a missing file is a bare ``FileNotFoundError``);
        :meth:`to_arrow` and :meth:`to_batches` type them.

        A plain Dataset cannot drop the rows a deletion vector marks (format.md,
        "Deletion vectors"): when a selected file has one, this refuses with
        :class:`DeletedRowsError` (``deleted="refuse"``, the default) or, with
        ``deleted="include"``, returns every physical row, deleted ones too. Read such
        a table with :meth:`to_arrow`, :meth:`to_batches`, :meth:`scanner` or the
        engine readers, which drop them.
        """
        if deleted not in ("refuse", "include"):
            raise InvalidArgumentError(
                f"expected deleted to be 'refuse' or 'include', found {deleted!r}"
            )
        files = self.files(filter)
        if deleted == "refuse":
            marked = [f.path for f in files if f.deleted is not None]
            if marked:
                raise DeletedRowsError(
                    f"expected files without deleted rows for a plain pyarrow Dataset of "
                    f"version {self.version} of {self.storage.uri}, found {len(marked)} with "
                    f"a deletion vector (e.g. {marked[0]!r}), whose deleted rows a Dataset "
                    f"would return. Read with snapshot.to_arrow(), to_batches() or "
                    f"scanner() (or to_duckdb/to_polars/to_pandas), which drop them; or "
                    f"compact the table to rewrite those files; or pass deleted='include' "
                    f"to see every physical row."
                )
        return self._dataset_of(files, filter)

    def _dataset_of(self, files: Sequence[DataFile], filter: Any) -> ds.FileSystemDataset:
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
        pred, expr = self._filter(filter)
        if expr is not None and wants_footers(pred, self.partition_by):
            try:
                frags = prune_fragments(self.storage, frags, pred, expr, schema)  # type: ignore[arg-type]
            except FileNotFoundError as e:
                raise self._missing_file(e) from e
        return ds.FileSystemDataset(frags, schema, fmt, fs)

    def to_arrow(self, columns: Sequence[str] | None = None, filter: Any = None) -> pa.Table:
        """Read the snapshot (or the matching rows and columns) into a Table.

        A referenced data file deleted outside lakelog is a :class:`DataFileMissingError`.
        """
        _, expr = self._filter(filter)
        cols = self._check_columns(columns)
        files = self.files(expr)
        if any(f.deleted is not None for f in files):
            out = self._out_schema(cols)
            with self._reading():  # in this thread: no pyarrow thread holds the generator
                got = list(self._live_batches(files, cols, expr, 65536))
            return pa.Table.from_batches(got, schema=out)
        dataset = self._dataset_of(files, expr)
        with self._reading():
            if expr is not None and filter_may_select_nan(expr, self.schema):
                wide = _with_filter_columns(cols, expr, self.schema)
                got = dataset.to_table(columns=wide).filter(expr)
                return got if cols is None else got.select(cols)
            return dataset.to_table(columns=cols, filter=expr)

    def to_batches(
        self, columns: Sequence[str] | None = None, filter: Any = None, *, batch_size: int = 65536
    ) -> Iterator[pa.RecordBatch]:
        """Stream the snapshot as record batches of up to ``batch_size`` rows (bounded
        memory). Arguments are checked on the call, errors are typed as in :meth:`to_arrow`."""
        _check_batch_size(batch_size)
        _, expr = self._filter(filter)
        cols = self._check_columns(columns)
        files = self.files(expr)
        if any(f.deleted is not None for f in files):
            return self._typed(self._live_batches(files, cols, expr, batch_size))
        return self._stream(self._dataset_of(files, expr), cols, expr, batch_size)

    def scanner(
        self, columns: Sequence[str] | None = None, filter: Any = None, *, batch_size: int = 65536
    ) -> ds.Scanner:
        """A pyarrow Scanner over the live rows of the snapshot that match ``filter``
        (files and row groups pruned as in :meth:`dataset`; rows deletion vectors mark
        dropped): what DuckDB and polars read through :meth:`to_duckdb` and
        :meth:`to_polars`. Errors while scanning are pyarrow's, as for :meth:`dataset`."""
        _check_batch_size(batch_size)
        _, expr = self._filter(filter)
        cols = self._check_columns(columns)
        files = self.files(expr)
        if any(f.deleted is not None for f in files):
            return ds.Scanner.from_batches(
                self._live_batches(files, cols, expr, batch_size),
                schema=self._out_schema(cols),
                batch_size=batch_size,
                use_threads=False,
            )
        return self._dataset_of(files, expr).scanner(
            columns=cols, filter=expr, batch_size=batch_size
        )

    def _out_schema(self, columns: list[str] | None) -> pa.Schema:
        if columns is None:
            return self.schema
        return pa.schema([self.schema.field(n) for n in columns])

    def _live_batches(
        self,
        files: Sequence[DataFile],
        columns: list[str] | None,
        expr: pc.Expression | None,
        batch_size: int,
    ) -> Iterator[pa.RecordBatch]:
        """The matching rows of ``files``, some with deletion vectors: those are read
        through :func:`lakelog.io.rows.live_batches` (positions dropped, several files at
        once), the rest through a Dataset as usual; both filtered and projected."""
        plain = [f for f in files if f.deleted is None]
        marked = [f for f in files if f.deleted is not None]
        if plain:
            yield from self._stream(self._dataset_of(plain, expr), columns, expr, batch_size)
        yield from live_batches(
            self.storage,
            marked,
            self.schema,
            self.partition_by,
            columns=columns,
            filter=expr,
            version=self.version,
            batch_size=batch_size,
        )

    def _typed(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with self._reading():
            yield from batches

    def _stream(
        self,
        dataset: ds.FileSystemDataset,
        columns: list[str] | None,
        expr: pc.Expression | None,
        batch_size: int,
    ) -> Iterator[pa.RecordBatch]:
        with self._reading():
            if expr is None or not filter_may_select_nan(expr, self.schema):
                yield from dataset.to_batches(columns=columns, filter=expr, batch_size=batch_size)
                return
            wide = _with_filter_columns(columns, expr, self.schema)
            for batch in dataset.to_batches(columns=wide, batch_size=batch_size):
                got = pa.Table.from_batches([batch]).filter(expr)
                if columns is not None:
                    got = got.select(columns)
                yield from got.to_batches()

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

    # -- other engines (lakelog.interop.engines; docs/reading.md) -----------------
    def to_duckdb(self, con: Any = None, *, name: str, filter: Any = None) -> Any:
        """Register this snapshot on a DuckDB connection (None: DuckDB's default one) as
        the view ``name`` and return its relation. Filters of queries on it prune files
        and row groups through lakelog; ``filter`` limits the view to matching rows."""
        from ..interop.engines import to_duckdb

        return to_duckdb(self, con, name=name, filter=filter)

    def to_polars(self, *, columns: Sequence[str] | None = None, filter: Any = None) -> Any:
        """This snapshot as a polars LazyFrame whose filters prune through lakelog."""
        from ..interop.engines import to_polars

        return to_polars(self, columns=columns, filter=filter)

    def to_pandas(
        self, *, columns: Sequence[str] | None = None, filter: Any = None, **options: Any
    ) -> Any:
        """The matching rows as a pandas DataFrame (``options``: ``Table.to_pandas``)."""
        from ..interop.engines import to_pandas

        return to_pandas(self, columns=columns, filter=filter, **options)


def _check_batch_size(batch_size: Any) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise InvalidArgumentError(
            f"expected batch_size to be an integer > 0 (rows), found {batch_size!r}; "
            f"pass a whole number of rows such as batch_size=65536."
        )


def _with_filter_columns(
    columns: list[str] | None, expr: pc.Expression, schema: pa.Schema
) -> list[str] | None:
    """``columns`` plus those ``expr`` may refer to (to filter after the scan)."""
    if columns is None:
        return None
    return [*columns, *(c for c in referenced_columns(expr, schema.names) if c not in columns)]


# -- resolution -----------------------------------------------------------------


def _empty_state() -> tuple[Metadata | None, pa.Table]:
    return None, FILES_SCHEMA.empty_table()


def _finish(storage: Storage, state: ReplayState) -> Snapshot:
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
    """The state a manifest holds (a version-1 file table or a version-2 root, whose
    leaves are read later), None if it is missing or damaged."""
    try:
        m = read_manifest(storage, version)
    except (FileNotFoundError, CorruptLogError):
        return None
    h = m.header
    base = FlatBlock(m.files) if isinstance(m, Manifest) else m
    state = ReplayState.start(h.metadata, base, h.version, h.timestamp_ms, h.oldest_version)
    for name in carried_fields():
        setattr(state, name, getattr(h, name))
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
        if m in avoid or any(v not in commits for v in range(m + 1, version + 1)):
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
    """The snapshot after applying later commits (pure; O(change): the manifest and
    leaves are shared, only the tail of changes since them grows)."""
    if not commits:
        return snapshot
    state = snapshot._state.copy()
    for c in commits:
        state.apply(c)
    return _finish(snapshot.storage, state)


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
    return _finish(storage, snapshot_state(snap._state, root))


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
