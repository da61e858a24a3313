"""Table: the entry point for reading, writing and maintaining one table."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from . import core
from .core.handle import TableCore, TableHandle
from .core.restore import restore_table
from .evolution.rename import rename_column
from .evolution.schema import add_columns, drop_columns, widen_column
from .filters import FilterLike
from .inspect import TableInspect
from .interop.convert import add_files
from .io.guards import constraints_of, guards_of
from .io.writer import WriteOptions
from .log.actions import CommitHeader, Metadata
from .log.snapshot import Snapshot
from .maintenance.auto import attach_auto_compaction
from .properties import get_bool
from .rowlevel import (
    ChangeResult,
    MergeClause,
    MergeReport,
    delete_rows,
    merge_rows,
    overwrite_rows,
    update_rows,
)
from .rowlevel.clauses import has_sql_text
from .scan import Snapshot as ReadableSnapshot
from .scan.feed import ChangeFeed, open_feed
from .storage import Storage
from .table_maintenance import MaintenanceMethods
from .transaction import CommitResult

__all__ = ["Table", "WriteMode", "returning_table"]

WriteMode = Literal["append", "overwrite", "error"]
_Result = TypeVar("_Result", bound=CommitResult)
_Args = ParamSpec("_Args")


class Table(MaintenanceMethods):
    """A lakelog table at one location.

    A ``Table`` caches the snapshot it last resolved; :meth:`refresh` reads
    the log again. Writes always commit on top of the latest version.
    """

    def __init__(self, storage: Storage, snapshot: Snapshot) -> None:
        """A table with ``snapshot`` cached (:func:`open_table` and :func:`create_table`
        make one from a URI).

        Args:
            storage: the table's storage: its root URI and filesystem.
            snapshot: the resolved snapshot to cache, a version of that table.
        """
        self._core = TableCore(storage, snapshot)

    @classmethod
    def from_core(cls, core: TableCore) -> Table:
        """The facade over ``core`` (sharing its cached snapshot): how an entry point
        hands the user the table an operation opened or created."""
        table = cls.__new__(cls)
        table._core = core
        return table

    def __repr__(self) -> str:
        return f"Table({self.uri!r}, version={self.version})"

    # -- state -------------------------------------------------------------------
    @property
    def storage(self) -> Storage:
        """The table's storage: its root URI and filesystem."""
        return self._core.storage

    @property
    def cached(self) -> Snapshot:
        """The snapshot last resolved or committed, without reading the log (see
        :meth:`refresh`)."""
        return self._core.cached

    @property
    def uri(self) -> str:
        """The URI of the table's root."""
        return self._core.uri

    @property
    def version(self) -> int:
        """Version of the cached snapshot (call :meth:`refresh` for the newest)."""
        return self._core.version

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the cached snapshot."""
        return self._core.schema

    @property
    def partition_by(self) -> tuple[str, ...]:
        """The identity partition columns kept out of the data files, in order (empty:
        not partitioned, or partitioned by transforms: see :attr:`partitioning`)."""
        return self._core.partition_by

    @property
    def partitioning(self) -> list[str]:
        """The partitioning new data is written in: the fields of the current spec
        (``["day(ts)", "bucket(16, id)"]``) or the partition columns."""
        return self._core.cached.partitioning

    @property
    def properties(self) -> dict[str, str]:
        """The table properties of the cached snapshot."""
        return self._core.properties

    @property
    def metadata(self) -> Metadata:
        """The ``metadata`` action of the cached snapshot (id, schema, partitioning,
        properties, format version)."""
        return self._core.metadata

    def refresh(self) -> Table:
        """Bring the cached snapshot up to the latest version; returns self.

        Reads only the commits after the cached version; when it is far
        behind (more than two manifest intervals), resolves from scratch.
        """
        self._core.refresh()
        return self

    def snapshot(
        self, version: int | None = None, *, as_of: dt.datetime | None = None
    ) -> ReadableSnapshot:
        """The latest snapshot, the one at ``version``, or the latest at or before ``as_of``.

        Args:
            version: the version to read; default None, the latest (the cache is
                refreshed).
            as_of: instead of ``version``, the latest version committed at or before
                this datetime (naive means UTC); default None.

        Raises:
            InvalidArgumentError: both ``version`` and ``as_of``, or a value of another type.
            VersionNotFoundError: no such version (:class:`VersionExpiredError` when
                it was expired).
        """
        return self._core.snapshot(version, as_of=as_of)

    def history(self, limit: int | None = None) -> list[CommitHeader]:
        """Commit headers, newest first (operation, parameters, metrics, time).

        Args:
            limit: at most this many commits (an integer > 0), the newest; default None,
                all of them.
        """
        return core.commit_history(self.storage, limit)

    def changes(
        self,
        start: int | dt.datetime,
        end: int | dt.datetime | None = None,
        *,
        columns: Sequence[str] | None = None,
        filter: FilterLike = None,
    ) -> ChangeFeed:
        """The rows that changed in versions ``start..end``: the change feed
        (``docs/format.md``, "Change data feed"), ordered by commit version, with the
        columns ``_change_type`` (``insert``, ``delete``, ``update_preimage``,
        ``update_postimage``), ``_commit_version`` and ``_commit_timestamp``. Appends
        give their rows as inserts; commits without data changes (compaction,
        clustering, expiry) give nothing. Deletes, updates, merges and overwrites with
        ``where`` are in the feed when the table property ``lakelog.change_data_feed``
        was true when they committed; a range holding one committed without it raises
        :class:`~lakelog.errors.ChangeFeedError`. A ``start`` before the oldest readable
        version + 1 raises :class:`~lakelog.errors.VersionExpiredError`.

        Args:
            start: the first version, or a datetime: the first version committed at or
                after it.
            end: the last version, or a datetime: the last version committed at or
                before it; default None, the latest version.
            columns: the table's columns to return, in this order; default None, all.
            filter: rows to keep, a :data:`~lakelog.FilterLike` over the table's
                columns; it also skips files whose statistics cannot match. Default None.

        Returns:
            A :class:`~lakelog.scan.feed.ChangeFeed`: ``to_arrow()``,
            ``to_batches(batch_size)``, ``schema``.
        """

        latest = self._core.refresh().cached
        return open_feed(self.storage, start, end, columns=columns, filter=filter, latest=latest)

    # -- low-level commit ----------------------------------------------------------
    commit = core.delegated(TableCore.commit)

    # -- writes --------------------------------------------------------------------
    def write_options(
        self,
        *,
        target_file_size: int | None = None,
        row_group_size: int | None = None,
        compression: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> WriteOptions:
        """The options data files are written with: each given one, else the table
        properties' (see :func:`lakelog.core.write_options_from`).

        Args:
            target_file_size: bytes at which a file rolls to the next; default None,
                ``lakelog.target_file_size``.
            row_group_size: rows per Parquet row group; default None,
                ``lakelog.row_group_size``.
            compression: the Parquet codec; default None, ``lakelog.compression``.
            tags: string tags recorded with each file written; default none.
        """
        return core.write_options_from(
            self.properties,
            target_file_size=target_file_size,
            row_group_size=row_group_size,
            compression=compression,
            tags=tags,
        )

    def append(
        self,
        data: Any,
        *,
        schema_mode: Literal["strict", "merge"] = "strict",
        app_id: str | None = None,
        app_version: int | None = None,
    ) -> CommitResult:
        """Add rows (a Table, RecordBatch, RecordBatchReader or batches) in one commit.

        ``schema_mode="merge"`` evolves the schema in the same commit: the data's new
        columns are added (nullable), columns it holds in a wider type are widened, and
        columns it lacks are written as nulls (see ``docs/schema-evolution.md``).

        ``app_id``/``app_version`` make the append exactly-once: it commits only if
        ``app_version`` is newer than the version recorded for ``app_id``, atomically with
        the rows; otherwise (a retried batch, or the same batch racing) nothing is written
        and the result is the commit that recorded it, with ``skipped=True``.

        Args:
            data: the rows: a pyarrow Table, RecordBatch, RecordBatchReader, an Arrow
                stream or an iterable of batches.
            schema_mode: ``"strict"`` (default: the data must match the schema) or
                ``"merge"`` (evolve it).
            app_id: the writing application, for an exactly-once append; default None.
            app_version: the batch's version for ``app_id`` (with it); default None.

        Raises:
            SchemaMismatchError: the data does not fit the schema (in ``strict`` mode).
        """
        return self._after_write(
            core.append(
                self._core,
                self._core.cached,
                data,
                schema_mode=schema_mode,
                app_id=app_id,
                app_version=app_version,
            )
        )

    def overwrite(
        self,
        data: Any,
        *,
        partitions: Sequence[Mapping[str, Any]] | None = None,
        where: FilterLike = None,
        schema_mode: Literal["strict", "merge"] = "strict",
    ) -> CommitResult:
        """Replace the whole table, or only the given partitions, with ``data``.

        ``partitions`` lists partition values, e.g. ``[{"date": date(2024, 1, 2)}]``;
        every row of ``data`` must belong to one of them. ``where`` (a predicate, as
        for :meth:`delete`) replaces exactly the rows it matches, partitioned or not;
        every row of ``data`` must match it (returns a :class:`~lakelog.rowlevel.ChangeResult`).
        ``schema_mode="merge"`` evolves the schema as for :meth:`append`.

        Args:
            data: the new rows, in any form :meth:`append` takes.
            partitions: the partitions to replace, one mapping of partition column to
                value each; default None, the whole table.
            where: the rows to replace, a :data:`~lakelog.FilterLike`; default None. Not
                with ``partitions`` or ``schema_mode="merge"``.
            schema_mode: ``"strict"`` (default) or ``"merge"``, as for :meth:`append`.
        """
        if where is not None:
            core.check_overwrite_where(partitions=partitions, schema_mode=schema_mode)
            return self._after_write(overwrite_rows(self._core, data, where))
        return self._after_write(
            core.overwrite(self._core, data, partitions=partitions, schema_mode=schema_mode)
        )

    def _after_write(self, result: _Result) -> _Result:
        """``result`` with the auto-compaction its commit triggered, if the table has
        ``lakelog.auto_compact`` on (see :mod:`lakelog.maintenance.auto`)."""
        if result.skipped or not get_bool(self.properties, "lakelog.auto_compact"):
            return result

        return attach_auto_compaction(self._core, result)

    commit_files = core.delegated(TableCore.commit_files)

    # -- row-level changes (see lakelog.rowlevel) -----------------------------------
    def delete(self, where: FilterLike, *, dry_run: bool = False) -> ChangeResult:
        """Delete the rows matching ``where`` (a pyarrow Expression, DNF tuples or a
        string such as ``"customer_id = 42"``; required: ``"true"`` deletes every row).

        Only files whose statistics can match are read and only files holding a
        matching row are rewritten, the rest of each kept row for row. Matching
        nothing commits nothing (``result.committed`` is False). See ``docs/row-level-changes.md``.

        Args:
            where: the rows to delete, a :data:`~lakelog.FilterLike`; required.
            dry_run: only report the files and rows that would change; default False.
        """

        return self._after_write(delete_rows(self._core, where, dry_run=dry_run))

    def update(
        self, where: FilterLike, *, set: Mapping[str, Any], dry_run: bool = False
    ) -> ChangeResult:
        """Set columns of the rows matching ``where``, checked against the schema before
        anything is written. Rewrites like :meth:`delete`; updated rows stay in place.

        Args:
            where: the rows to update, a :data:`~lakelog.FilterLike`; required.
            set: each column to set, to a value or a pyarrow Expression over the row's
                current values.
            dry_run: only report the files and rows that would change; default False.
        """

        return self._after_write(update_rows(self._core, where, set, dry_run=dry_run))

    def merge(
        self,
        source: Any,
        on: str | Sequence[str],
        *,
        when_matched: Literal["update", "delete", "ignore"] | Sequence[MergeClause] = "update",
        when_not_matched: Literal["insert", "ignore"] | Sequence[MergeClause] = "insert",
        when_not_matched_by_source: Literal["ignore", "delete"] | Sequence[MergeClause] = "ignore",
        duplicates: Literal["error", "last", "first"] = "error",
        dry_run: bool = False,
    ) -> MergeReport:
        """Upsert ``source`` (rows of the table's schema) by the key columns ``on``.

        Matched target rows are updated in place, deleted or left alone
        (``when_matched``); unmatched source rows are inserted or dropped
        (``when_not_matched``); ``when_not_matched_by_source="delete"`` deletes
        target rows no source row matches (and so reads every file). Each option also
        takes a list of clauses (:func:`lakelog.when_matched_update` and its kin, Delta's
        ``WHEN`` clauses): the first of a kind whose condition holds applies, and only
        the last may lack a condition. Source rows sharing a key are an error unless
        ``duplicates`` is ``"last"`` or ``"first"``. Only files that may hold a source
        key are read. The report says rows inserted, updated, deleted and files
        rewritten.

        Args:
            source: the rows to merge, in any form :meth:`append` takes.
            on: the key column, or columns, matching source rows to target rows.
            when_matched: ``"update"`` (default), ``"delete"``, ``"ignore"``, or a list of
                ``when_matched_update`` / ``when_matched_delete`` clauses.
            when_not_matched: ``"insert"`` (default), ``"ignore"``, or a list of
                ``when_not_matched_insert`` clauses.
            when_not_matched_by_source: ``"ignore"`` (default), ``"delete"``, or a list of
                ``when_not_matched_by_source_update`` / ``..._delete`` clauses.
            duplicates: ``"error"`` (default), or keep the ``"last"`` or ``"first"``
                source row of a key.
            dry_run: only report what would change; default False.
        """

        text = None
        forms = (when_matched, when_not_matched, when_not_matched_by_source)
        if any(has_sql_text(f) for f in forms):
            from .scan.engines import require

            require("sqlglot", purpose="SQL text in merge clauses")
            from .sql.values import merge_text

            text = merge_text
        return self._after_write(
            merge_rows(
                self._core,
                source,
                on,
                when_matched=when_matched,
                when_not_matched=when_not_matched,
                when_not_matched_by_source=when_not_matched_by_source,
                duplicates=duplicates,
                dry_run=dry_run,
                text=text,
            )
        )

    def set_properties(self, properties: Mapping[str, Any]) -> CommitResult:
        """Change table properties (a metadata commit that conflicts with everything).

        ``lakelog.*`` values are checked (see :mod:`lakelog.properties`); a bad value
        already stored does not block this, so setting a valid one fixes it.

        Args:
            properties: the properties to set; the others keep their values.
        """
        return core.set_properties(self._core, properties)

    def set_partitioning(self, partition_by: Sequence[str] | str) -> CommitResult:
        """Change how new data is partitioned (partition evolution, format version 8):
        one metadata commit, nothing rewritten. Files written before keep their spec,
        filters prune across specs, and compaction and clustering write what they
        rewrite in the new spec.

        Args:
            partition_by: the new fields: column names (identity), ``"year(ts)"``,
                ``"month(ts)"``, ``"day(ts)"``, ``"hour(ts)"``, ``"bucket(N, col)"``,
                ``"truncate(W, col)"``; an empty list stops partitioning new data.

        Raises:
            InvalidArgumentError: a field is malformed or does not fit its column's
                type, or the table is partitioned by columns its files do not hold
                (created with column names only: its layout is fixed).
        """
        return core.set_partitioning(self._core, partition_by)

    def unset_properties(
        self, keys: str | Sequence[str], *, missing_ok: bool = False
    ) -> CommitResult:
        """Remove table properties (a metadata commit that conflicts with everything):
        a ``lakelog.*`` property reads as its default again.

        Args:
            keys: the property names to remove; an unknown ``lakelog.*`` name is refused
                with the closest declared one.
            missing_ok: skip names that are not set instead of refusing them; default
                False. With nothing to remove nothing is committed (``skipped``).
        """
        return core.unset_properties(self._core, keys, missing_ok=missing_ok)

    # -- constraints (see lakelog.evolution.constraints, docs/constraints.md) -----------
    @property
    def constraints(self) -> dict[str, str]:
        """The table's CHECK constraints (name to SQL text), as of the cached snapshot."""
        return constraints_of(self.snapshot().schema)

    @property
    def computed_columns(self) -> tuple[str, ...]:
        """The generated and identity columns: what lakelog writes when a write lacks
        them (docs/constraints.md)."""
        guards = guards_of(self.snapshot().schema)
        return tuple(c for c in self.schema.names if c in guards.generated or c in guards.identity)

    def add_constraint(self, name: str, expr: str | pc.Expression) -> CommitResult:
        """Add the CHECK constraint ``name``, after reading every live row (one file at a
        time) and finding none that breaks it; from then on every write refuses rows
        for which ``expr`` is false (null passes, as in SQL). A metadata commit.

        Args:
            name: the constraint's name (letters, digits, ``_``).
            expr: a boolean SQL expression over the columns (``"amount >= 0 AND
                currency IN ('EUR', 'USD')"``) or a pyarrow Expression.

        Raises:
            ConstraintViolationError: a live row breaks it (nothing is committed).
        """
        from .evolution.constraints import add_constraint

        return add_constraint(self._core, name, expr)

    def drop_constraint(self, name: str, *, missing_ok: bool = False) -> CommitResult:
        """Drop the CHECK constraint ``name`` (a metadata commit).

        Args:
            name: the constraint (case-insensitive).
            missing_ok: commit nothing (``skipped``) when there is no such constraint
                instead of refusing; default False.
        """
        from .evolution.constraints import drop_constraint

        return drop_constraint(self._core, name, missing_ok=missing_ok)

    def set_not_null(self, column: str) -> CommitResult:
        """Declare ``column`` NOT NULL (a nested field as ``"s.x"``, a list's element
        ``"tags[]"``, a map's value ``"m{}"``), after reading every live row and finding
        no null there. A metadata commit.

        Raises:
            ConstraintViolationError: a live row holds a null there.
        """
        from .evolution.constraints import set_not_null

        return set_not_null(self._core, column)

    # -- schema evolution and restore (see lakelog.evolution.schema, .restore) ---------
    def add_columns(self, columns: Any) -> CommitResult:
        """Add nullable columns after the existing ones, or nullable fields at the end
        of a struct, in one metadata commit. Files written before read them as null;
        nothing is rewritten. A nested field turns column ids on (format version 7).

        Args:
            columns: a ``pa.Field``, a list of them, a ``pa.Schema`` or
                ``{"name": pa.type()}``; a key may be a path to a struct's new field,
                ``{("s", "z"): pa.int64()}`` (a list's element is ``"element"``, a
                map's value ``"value"``: ``("events", "element", "score")``).
        """

        return add_columns(self._core, columns)

    def drop_columns(self, names: str | Sequence[str | Sequence[str]]) -> CommitResult:
        """Remove columns (not partition columns), or fields of a struct, from the
        schema, in one metadata commit. Files keep their values unread; a dropped name
        can be added back only once no live file holds it, or, with column ids, under
        a new physical name (``docs/schema-evolution.md``).

        Args:
            names: the column, or columns, to drop; paths (tuples) for nested fields,
                e.g. ``[("s", "x")]`` (the struct keeps at least one field).
        """

        return drop_columns(self._core, names)

    def rename_column(self, old: str, new: str) -> CommitResult:
        """Rename a column, in one metadata commit; nothing is rewritten. The column
        keeps its id and the name its files store it under, so files written before
        read under the new name, and statistics keep pruning. The first rename turns
        column ids on (format version 7: older lakelog refuses the table). Partition
        columns keep their names (``docs/schema-evolution.md``).

        Args:
            old: the column's name.
            new: its new name, one no column has.
        """

        return rename_column(self._core, old, new)

    def widen_column(self, name: str | Sequence[str], type: pa.DataType) -> CommitResult:
        """Change a column, or a nested field, to a wider type (``int32`` -> ``int64``,
        ``float32`` -> ``float64``, a struct with new fields at its end, ...) in one
        metadata commit; older files are read converted.

        Args:
            name: the column, or the path of a nested field, e.g. ``("s", "x")``.
            type: its new type, one the old type widens to.
        """

        return widen_column(self._core, name, type)

    def restore(
        self, version: int | None = None, *, as_of: dt.datetime | None = None
    ) -> CommitResult:
        """Make the latest version read exactly like ``version`` (or the version current
        at ``as_of``) in one commit: its files and metadata come back, later files go.
        Refuses, committing nothing, when expiry or vacuum already deleted files it
        needs (:class:`DataFileMissingError` names them). ``skipped`` when the latest
        version already reads like it. Recorded app versions stay.

        Args:
            version: the version to bring back; one of it and ``as_of`` is required.
            as_of: instead, the version current at this datetime; default None.
        """

        return restore_table(self._core, version, as_of=as_of)

    # -- adopting files and metadata tables (lakelog.interop.convert, lakelog.inspect) --
    def add_files(self, paths: Sequence[str] | str) -> CommitResult:
        """Adopt Parquet files another tool wrote under the table's root (files, or
        folders of them) in one append commit, after checking their schema and partition
        folders; files already in the table are refused. See
        :func:`lakelog.interop.convert.add_files`.

        Args:
            paths: the files or folders (every Parquet file below them): paths relative
                to the root, absolute paths or URLs under it.
        """

        return add_files(self._core, paths)

    @property
    def inspect(self) -> TableInspect:
        """Metadata as pyarrow Tables: ``files()``, ``partitions()``, ``history()``,
        ``snapshots()`` (see :mod:`lakelog.inspect`)."""

        return TableInspect(self._core)


if TYPE_CHECKING:  # mypy checks that the facade is a handle, by delegation to its core
    _FACADE_IS_A_HANDLE: type[TableHandle] = Table


def returning_table(operation: Callable[_Args, TableCore]) -> Callable[_Args, Table]:
    """``operation``, an entry point that opens or creates a table below the facade and
    returns its core, handing the user a :class:`Table` over that core instead (same
    arguments, same docstring): the one way a ``Table`` reaches the user from below.
    """

    @functools.wraps(operation)
    def entry(*args: _Args.args, **kwargs: _Args.kwargs) -> Table:
        return Table.from_core(operation(*args, **kwargs))

    entry.__annotations__ = {**entry.__annotations__, "return": "Table"}
    return entry
