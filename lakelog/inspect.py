"""A table's metadata as pyarrow Tables: files, partitions, history, snapshots.

``table.inspect`` answers from the log alone (no data file is opened), as
pyiceberg's ``table.inspect`` does, so the answers can be queried with any Arrow
engine (``duckdb.sql("select * from files where ...")``) or printed by the CLI
(``lakelog files|partitions|history|snapshots URI --json|--csv``).

Statistics are the log's: bounds are what the files' footers recorded (a string
minimum may be a 256-character prefix, NaN is never a bound) and are null where
unknown; a partition's bound is null as soon as one of its files' is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from .core import commit_history
from .filters import FileStatsColumns, FilterLike
from .log.actions import AddFile, CommitHeader, RemoveFile
from .log.commits import commits_between, list_log, read_header
from .log.file_index import stats_columns
from .log.files import files_from_adds
from .log.snapshot import Snapshot, load_snapshot, oldest_readable_version

if TYPE_CHECKING:
    from .core.handle import TableHandle

__all__ = ["TIMESTAMP", "TableInspect", "flatten"]

TIMESTAMP = pa.timestamp("ms", tz="UTC")
"""Type of every time column (commit times, file modification times)."""

_JSON = msgspec.json.Encoder()
_AGGREGATES: tuple[tuple[str, Any, str], ...] = (
    ("min", lambda c: c.min, "min"),
    ("max", lambda c: c.max, "max"),
    ("null_count", lambda c: c.null_count, "sum"),
)
"""Per column statistic: its label, where :class:`FileStatsColumns` keeps it, and how a
partition's value combines its files'."""


class TableInspect:
    """Metadata tables of one table (``table.inspect``)."""

    def __init__(self, table: TableHandle) -> None:
        self._table = table

    def files(self, *, version: int | None = None, filter: FilterLike = None) -> pa.Table:
        """One row per live data file of ``version`` (default: the latest), pruned by
        ``filter`` as :meth:`Snapshot.files` prunes: ``path``, ``partition`` (a struct
        of typed values; partitioned tables only), ``num_rows`` (physical rows),
        ``deleted_rows`` (those its deletion vector marks; 0 without one),
        ``size_bytes``, ``modification_time``, ``stats`` (per column a struct of ``min``,
        ``max``, ``null_count``: of the physical rows) and ``tags``."""
        snap = self._table.snapshot(version)
        table, cols = _files_and_stats(snap, filter)
        out: dict[str, pa.Array] = {"path": table.column("path").combine_chunks()}
        if snap.partition_by:
            out["partition"] = _struct({c: cols.partition[c] for c in snap.partition_by})
        out["num_rows"] = table.column("num_rows").combine_chunks()
        out["deleted_rows"] = pc.fill_null(table.column("deleted_rows"), 0).combine_chunks()
        out["size_bytes"] = table.column("size_bytes").combine_chunks()
        out["modification_time"] = _times(table.column("modification_ms"))
        stats = _column_stats(snap, cols)
        if stats is not None:
            out["stats"] = stats
        out["tags"] = _tags(table.column("tags"))
        return pa.table(out)

    def partitions(self, *, version: int | None = None, filter: FilterLike = None) -> pa.Table:
        """One row per partition of ``version`` (one row in all for an unpartitioned
        table): ``partition``, ``file_count``, ``num_rows``, ``total_bytes``,
        ``last_modified`` and ``stats``: per column the ``min``, ``max`` and
        ``null_count`` over its files (null where one file's is unknown)."""
        snap = self._table.snapshot(version)
        table, cols = _files_and_stats(snap, filter)
        keys = [f"p{i}" for i in range(len(snap.partition_by))]
        work = {k: cols.partition[c] for k, c in zip(keys, snap.partition_by, strict=True)}
        work["rows"] = pc.subtract(  # live rows: deletion vectors' rows not counted
            table.column("num_rows"), pc.fill_null(table.column("deleted_rows"), 0)
        ).combine_chunks()
        work["bytes"] = table.column("size_bytes").combine_chunks()
        work["mtime"] = table.column("modification_ms").combine_chunks()
        aggs: list[tuple[Any, ...]] = [("rows", "count"), ("rows", "sum"), ("bytes", "sum")]
        aggs.append(("mtime", "max"))
        names = _stats_names(snap, cols)
        wanted: dict[str, list[tuple[str, str]]] = {}
        for i, name in enumerate(names):
            for label, arrays, fn in _AGGREGATES:
                if name in arrays(cols):
                    key = f"{label}{i}"
                    work[key] = arrays(cols)[name]
                    aggs += [(key, fn), (key, "count", pc.CountOptions(mode="only_null"))]
                    wanted.setdefault(name, []).append((label, f"{key}_{fn}"))
        grouped = pa.table(work).group_by(keys, use_threads=False).aggregate(aggs)
        if keys:
            grouped = grouped.sort_by([(k, "ascending") for k in keys])
        n = grouped.num_rows
        out: dict[str, pa.Array] = {}
        if keys:
            parts = {c: grouped.column(k) for k, c in zip(keys, snap.partition_by, strict=True)}
            out["partition"] = _struct(parts)
        out["file_count"] = grouped.column("rows_count")
        out["num_rows"] = pc.fill_null(grouped.column("rows_sum"), 0)
        out["total_bytes"] = pc.fill_null(grouped.column("bytes_sum"), 0)
        out["last_modified"] = _times(grouped.column("mtime_max"))
        per: dict[str, pa.Array] = {}
        for name, columns in wanted.items():
            fields: dict[str, pa.Array] = {}
            for label, column in columns:
                value = grouped.column(column).combine_chunks()
                unknown = grouped.column(column.rsplit("_", 1)[0] + "_count").combine_chunks()
                fields[label] = pc.if_else(pc.greater(unknown, 0), pa.nulls(n, value.type), value)
            per[name] = _struct(fields)
        if per:
            out["stats"] = _struct(per)
        return pa.table(out)

    def history(self, *, limit: int | None = None) -> pa.Table:
        """One row per commit, newest first (at most ``limit``): ``version``,
        ``timestamp``, ``operation``, ``read_version``, ``txn_id``, ``engine``,
        ``format_version``, and ``parameters`` and ``metrics`` as JSON text."""
        return _history_table(commit_history(self._table.storage, limit))

    def snapshots(self) -> pa.Table:
        """One row per readable version, newest first: ``version``, ``timestamp``,
        ``operation``, the table it resolves to (``num_files``, ``num_rows``,
        ``total_bytes``), what its commit changed (``files_added``, ``files_removed``,
        ``rows_added``, ``rows_removed``, ``bytes_added``, ``bytes_removed``) and
        whether a manifest was written at it. Reads the manifest at the oldest readable
        version and every commit after it once."""
        return _snapshots(self._table)


# -- files -----------------------------------------------------------------------------


def _files_and_stats(snap: Snapshot, filter: FilterLike) -> tuple[pa.Table, FileStatsColumns]:
    if filter is None:
        return snap.file_table, snap.stats_columns
    files = list(snap.files(filter))
    table = files_from_adds(files)
    return table, stats_columns(table, snap.schema, snap.partition_by)


def _stats_names(snap: Snapshot, cols: FileStatsColumns) -> list[str]:
    return [
        f.name
        for f in snap.schema
        if f.name not in snap.partition_by and (f.name in cols.min or f.name in cols.null_count)
    ]


def _column_stats(snap: Snapshot, cols: FileStatsColumns) -> pa.StructArray | None:
    per: dict[str, pa.Array] = {}
    for name in _stats_names(snap, cols):
        fields: dict[str, pa.Array] = {}
        if name in cols.min and name in cols.max:
            fields["min"] = cols.min[name]
            fields["max"] = cols.max[name]
        if name in cols.null_count:
            fields["null_count"] = cols.null_count[name]
        per[name] = _struct(fields)
    return _struct(per) if per else None


def _struct(children: Mapping[str, pa.Array | pa.ChunkedArray]) -> pa.StructArray:
    arrays = [
        a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in children.values()
    ]
    return pa.StructArray.from_arrays(arrays, names=list(children))


def _times(ms: pa.ChunkedArray | pa.Array) -> pa.Array:
    arr = ms.combine_chunks() if isinstance(ms, pa.ChunkedArray) else ms
    arr = pc.if_else(pc.greater(pc.fill_null(arr, 0), 0), arr, pa.scalar(None, pa.int64()))
    return arr.cast(pa.int64()).cast(TIMESTAMP)


def _tags(column: pa.ChunkedArray) -> pa.Array:
    decode = msgspec.json.Decoder(dict[str, str])
    values = [
        list(decode.decode(raw).items()) if raw and raw != b"{}" else []
        for raw in column.cast(pa.binary()).to_pylist()
    ]
    return pa.array(values, pa.map_(pa.string(), pa.string()))


# -- history and snapshots ---------------------------------------------------------------


def _history_table(headers: Sequence[CommitHeader]) -> pa.Table:
    return pa.table(
        {
            "version": pa.array([h.version for h in headers], pa.int64()),
            "timestamp": pa.array([h.timestamp_ms for h in headers], pa.int64()).cast(TIMESTAMP),
            "operation": pa.array([h.operation for h in headers], pa.string()),
            "read_version": pa.array([h.read_version for h in headers], pa.int64()),
            "txn_id": pa.array([h.txn_id for h in headers], pa.string()),
            "engine": pa.array([h.engine for h in headers], pa.string()),
            "format_version": pa.array([h.format_version for h in headers], pa.int32()),
            "parameters": pa.array([_JSON.encode(h.parameters).decode() for h in headers]),
            "metrics": pa.array([_JSON.encode(h.metrics).decode() for h in headers]),
        }
    )


class _Change(msgspec.Struct):
    version: int
    timestamp_ms: int
    operation: str | None
    files_added: int = 0
    files_removed: int = 0
    rows_added: int = 0
    rows_removed: int = 0
    bytes_added: int = 0
    bytes_removed: int = 0
    pending: list[str] = []
    """Removed paths whose rows and size the base manifest must tell."""


def _snapshots(table: TableHandle) -> pa.Table:
    storage = table.storage
    listing = list_log(storage)
    oldest = oldest_readable_version(storage, listing)
    base = load_snapshot(storage, oldest, listing=listing)
    try:
        first_op: str | None = read_header(storage, oldest).operation
    except FileNotFoundError:
        first_op = None
    live: dict[str, tuple[int, int]] = {}
    """Files added after the base and still live: path -> (rows, bytes)."""
    changes: list[_Change] = [_Change(base.version, base.timestamp_ms, first_op)]
    if oldest == 0:  # version 0 only adds: what it changed is the table it makes
        changes[0].files_added = base.num_files
        changes[0].rows_added = base.num_rows
        changes[0].bytes_added = base.total_bytes
    for commit in commits_between(storage, oldest + 1):
        v = commit.header.version
        ch = _Change(v, commit.header.timestamp_ms, commit.header.operation, pending=[])
        for a in commit.actions:
            if isinstance(a, AddFile):
                old = live.get(a.path)
                if old is not None:  # added again: the later add replaces it
                    ch.files_removed += 1
                    ch.rows_removed += old[0]
                    ch.bytes_removed += old[1]
                live[a.path] = (a.live_rows, a.size_bytes)
                ch.files_added += 1
                ch.rows_added += a.live_rows
                ch.bytes_added += a.size_bytes
            elif isinstance(a, RemoveFile):
                got = live.pop(a.path, None)
                ch.files_removed += 1
                if got is None:
                    ch.pending.append(a.path)
                else:
                    ch.rows_removed += got[0]
                    ch.bytes_removed += got[1]
        changes.append(ch)
    _resolve_pending(base, changes)
    manifests = set(listing.manifests)
    files, rows, size = base.num_files, base.num_rows, base.total_bytes
    counts: list[tuple[int, int, int]] = [(files, rows, size)]
    for ch in changes[1:]:
        files += ch.files_added - ch.files_removed
        rows += ch.rows_added - ch.rows_removed
        size += ch.bytes_added - ch.bytes_removed
        counts.append((files, rows, size))
    changes.reverse()
    counts.reverse()
    first = [ch is changes[-1] and ch.version > 0 for ch in changes]
    return pa.table(
        {
            "version": pa.array([c.version for c in changes], pa.int64()),
            "timestamp": pa.array([c.timestamp_ms for c in changes], pa.int64()).cast(TIMESTAMP),
            "operation": pa.array([c.operation for c in changes], pa.string()),
            "num_files": pa.array([c[0] for c in counts], pa.int64()),
            "num_rows": pa.array([c[1] for c in counts], pa.int64()),
            "total_bytes": pa.array([c[2] for c in counts], pa.int64()),
            **{
                name: pa.array(
                    [None if f else getattr(c, name) for c, f in zip(changes, first, strict=True)],
                    pa.int64(),
                )
                for name in (
                    "files_added",
                    "files_removed",
                    "rows_added",
                    "rows_removed",
                    "bytes_added",
                    "bytes_removed",
                )
            },
            "manifest": pa.array([c.version in manifests for c in changes], pa.bool_()),
        }
    )


def _resolve_pending(base: Snapshot, changes: Sequence[_Change]) -> None:
    """Rows and bytes of removed files that were live in the base, in one lookup."""
    wanted = {p for ch in changes for p in ch.pending}
    if not wanted:
        return
    ft = base.file_table
    hit = pc.is_in(ft.column("path"), value_set=pa.array(sorted(wanted), pa.string()))
    sub = ft.filter(hit)
    known = dict(
        zip(
            sub.column("path").to_pylist(),
            zip(
                pc.subtract(
                    sub.column("num_rows"), pc.fill_null(sub.column("deleted_rows"), 0)
                ).to_pylist(),
                sub.column("size_bytes").to_pylist(),
                strict=True,
            ),
            strict=True,
        )
    )
    for ch in changes:
        for p in ch.pending:
            rows, size = known.pop(p, (0, 0))
            ch.rows_removed += rows
            ch.bytes_removed += size


# -- output ------------------------------------------------------------------------------


def flatten(table: pa.Table) -> pa.Table:
    """Struct columns as dotted columns (``stats.x.min``), maps as JSON text: a table a
    CSV writer takes."""
    while any(pa.types.is_struct(f.type) for f in table.schema):
        table = table.flatten()
    cols: dict[str, pa.Array] = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_map(col.type):
            cols[name] = pa.array(
                [None if v is None else _JSON.encode(dict(v)).decode() for v in col.to_pylist()],
                pa.string(),
            )
        else:
            cols[name] = col.combine_chunks()
    return pa.table(cols)
