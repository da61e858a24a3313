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
from .errors import InvalidArgumentError, TableNotFoundError
from .evolution.rename import rename_column
from .evolution.schema import add_columns, drop_columns, widen_column
from .filters import FilterLike, PartitionFilterLike
from .inspect import TableInspect
from .interop.convert import add_files
from .interop.convert import convert as convert_in_place
from .io.guards import constraints_of, guards_of
from .io.writer import WriteOptions
from .log.actions import CommitHeader, Metadata
from .log.snapshot import Snapshot, load_snapshot
from .maintenance.auto import attach_auto_compaction
from .maintenance.claims import PlanStatus, plan_statuses
from .maintenance.cleanup.expire import expire_snapshots
from .maintenance.cleanup.report import ExpireReport, VacuumReport
from .maintenance.cleanup.vacuum import vacuum
from .maintenance.clustering.layout import ClusteringReport, clustering_report
from .maintenance.clustering.run import optimize_table
from .maintenance.clustering.spec import (
    DeclaredClustering,
    declaration_properties,
    declared_clustering,
)
from .maintenance.compaction.run import compact_table
from .maintenance.maintain.report import MaintainReport
from .maintenance.maintain.run import maintain_table
from .maintenance.options import (
    ClusteringOptions,
    CompactionOptions,
    ExecutionOptions,
    execution_from_arguments,
    from_arguments,
)
from .maintenance.report import MaintenanceReport
from .maintenance.resume import resume_plan
from .partitioning import check_partition_columns
from .properties import get_bool, validate_properties
from .rowlevel import (
    ChangeResult,
    MergeClause,
    MergeReport,
    delete_rows,
    merge_rows,
    overwrite_rows,
    update_rows,
)
from .scan import Snapshot as ReadableSnapshot
from .scan.feed import ChangeFeed, open_feed
from .storage import Storage
from .transaction import CommitResult
from .upgrade import UpgradeReport, upgrade_table

__all__ = ["Table", "convert", "create_table", "open_table", "returning_table", "write_table"]

WriteMode = Literal["append", "overwrite", "error"]
_Result = TypeVar("_Result", bound=CommitResult)
_Args = ParamSpec("_Args")


class Table:
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
        nothing commits nothing (``result.committed`` is False). See ``docs/changes.md``.

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
        if any(_has_text(f) for f in forms):
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

    # -- maintenance (see lakelog.maintenance) -------------------------------------
    # MAINTENANCE-METHODS (each maintenance module adds its delegating method here)
    def expire_snapshots(
        self,
        *,
        older_than: dt.timedelta | None = None,
        retain_last: int | None = None,
        dry_run: bool = False,
    ) -> ExpireReport:
        """Make versions older than ``older_than`` and not among the newest
        ``retain_last`` unreadable, and delete the data and log files only they
        used. See :mod:`lakelog.maintenance.cleanup.expire`.

        Args:
            older_than: the age of the versions to expire; default None,
                ``lakelog.expire.older_than_seconds`` (7 days).
            retain_last: the newest versions always kept; default None,
                ``lakelog.expire.retain_last`` (10).
            dry_run: only report what would be expired and deleted; default False.

        Raises:
            CleanupRunningError: another expiry or vacuum is running on the table.
        """

        return expire_snapshots(
            self._core, older_than=older_than, retain_last=retain_last, dry_run=dry_run
        )

    def vacuum(
        self,
        *,
        older_than: dt.timedelta | None = None,
        dry_run: bool = True,
        force: bool = False,
    ) -> VacuumReport:
        """List (or, with ``dry_run=False``, delete) files under the root that no
        retained version references and that are older than ``older_than``. See
        :mod:`lakelog.maintenance.cleanup.vacuum`.

        Args:
            older_than: the age of the files to delete; default None,
                ``lakelog.vacuum.older_than_seconds`` (3 days).
            dry_run: only list the files; default True.
            force: accept ``older_than`` below ``lakelog.vacuum.min_age_seconds`` (1 hour),
                when no writer runs; default False.

        Raises:
            CleanupRunningError: another expiry or vacuum is running on the table.
        """

        return vacuum(self._core, older_than=older_than, dry_run=dry_run, force=force)

    def maintain(
        self, *, budget_bytes: int | None = 1 << 30, dry_run: bool = True
    ) -> MaintainReport:
        """Decide what the table needs from a cost model, and (with ``dry_run=False``) do
        the best of it within ``budget_bytes``: compact a partition, cluster, purge
        deletion vectors, write a manifest, expire, vacuum. Each action is ranked by its
        expected benefit per byte rewritten and runs through its usual operation; its
        commit records why (``maintain`` in the commit's parameters). See
        :mod:`lakelog.maintenance.maintain` and ``docs/maintenance.md``.

        Args:
            budget_bytes: the most bytes the chosen rewrites may read and write again;
                default 1 GiB; None: no bound. Actions beyond it are reported as left.
            dry_run: only rank and report; default True.
        """

        return maintain_table(self._core, budget_bytes=budget_bytes, dry_run=dry_run)

    def upgrade(self) -> UpgradeReport:
        """Move the table to the newest format version now: declare it (a metadata
        commit, only if the table declares an older one: version 3 lets maintenance runs
        claim their files) and write a version-2 manifest (root and leaves) at the latest
        version unless it has one. See :mod:`lakelog.upgrade` and ``docs/format.md``,
        "Upgrading a table"."""

        return upgrade_table(self._core)

    def plans(self) -> list[PlanStatus]:
        """Pending maintenance plans: runs that claimed files on the log and have not
        landed or released all their groups, oldest first, each ``running`` (its lease is
        live) or not (it stopped: resume it with :meth:`resume`). See ``docs/format.md``,
        "Maintenance plans and claims"."""

        return plan_statuses(self.storage, self._core.refresh().cached)

    def resume(
        self,
        plan_id: str,
        *,
        execution: ExecutionOptions | None = None,
        max_concurrent_groups: int | None = None,
        max_bytes_per_second: float | None = None,
        partial_progress: bool = False,
    ) -> MaintenanceReport:
        """Finish the pending plan ``plan_id`` of a run that stopped (crashed, or failed):
        claim its pending groups again and rewrite only those; groups it landed are not
        redone. Refused while the run's lease is live.

        Args:
            plan_id: the plan to finish, as :meth:`plans` lists it.
            execution: how to run it (:class:`lakelog.ExecutionOptions`); default None,
                the keyword arguments below. A keyword beside it must agree with it.
            max_concurrent_groups: groups rewritten at once; default None,
                ``lakelog.compaction.max_concurrent_groups`` (2).
            max_bytes_per_second: the run's total read rate; default None, unpaced.
            partial_progress: commit every ``lakelog.compaction.groups_per_commit``
                groups; default False, one commit.
        """

        return resume_plan(self._core, plan_id, execution_from_arguments(execution, locals()))

    def set_clustering(
        self,
        *,
        zorder_by: Sequence[str] | None = None,
        sort_by: Sequence[str] | None = None,
        curve: Literal["hilbert", "zorder"] = "hilbert",
    ) -> CommitResult:
        """Declare how the table is clustered, so :meth:`optimize` with no columns keeps
        that layout run after run (a curve over ``zorder_by``, or a linear sort by
        ``sort_by``; checked as ``optimize`` checks them). With neither, the table
        declares none. A property change (``lakelog.clustering.columns`` and
        ``lakelog.clustering.curve``): one metadata commit. Files are not rewritten
        until the next ``optimize``.

        Args:
            zorder_by: the columns of a space-filling curve; default None.
            sort_by: instead, the columns of a linear sort; default None.
            curve: the curve over ``zorder_by``, ``"hilbert"`` (default) or ``"zorder"``.
        """

        snap = self._core.refresh().cached
        props = declaration_properties(
            snap.schema, snap.partition_by, zorder_by=zorder_by, sort_by=sort_by, curve=curve
        )
        return self.set_properties(props)

    @property
    def clustering(self) -> DeclaredClustering | None:
        """The clustering the table declares (:meth:`set_clustering`), None if none."""

        return declared_clustering(self.properties)

    def optimize(
        self,
        *,
        options: ClusteringOptions | None = None,
        execution: ExecutionOptions | None = None,
        zorder_by: Sequence[str] | None = None,
        sort_by: Sequence[str] | None = None,
        curve: Literal["hilbert", "zorder"] = "hilbert",
        target_file_size: int | None = None,
        partition_filter: PartitionFilterLike = None,
        incremental: bool = True,
        max_group_bytes: int | None = None,
        compression: str | None = None,
        row_group_size: int | None = None,
        max_concurrent_groups: int | None = None,
        max_bytes_per_second: float | None = None,
        partial_progress: bool = False,
        dry_run: bool = False,
    ) -> MaintenanceReport:
        """Cluster rows by a space-filling curve (``zorder_by``) or a linear sort (``sort_by``);
        with neither, by the clustering the table declares (:meth:`set_clustering`), so
        the layout is kept run after run (an explicit spec different from the declared
        one reclusters with it once; the declaration stays).

        Keys come from each column's rank against quantile boundaries kept with
        the clustered files. Incremental by default: new files are clustered and
        merged into the key ranges where they accumulate, within a rewrite budget
        proportional to the new bytes; ``incremental=False`` reclusters everything
        with fresh boundaries. Groups larger than ``max_group_bytes`` are sorted
        in spilled runs and merged. Runs and commits like :meth:`compact`
        (``data_change=false``; ``max_concurrent_groups``, ``max_bytes_per_second``,
        ``partial_progress``, ``partition_filter`` and ``dry_run`` mean the same).
        ``options`` (:class:`lakelog.ClusteringOptions`) and ``execution``
        (:class:`lakelog.ExecutionOptions`) hold the same settings as objects; a keyword
        argument beside them must agree with the object where both set a field.
        See ``docs/maintenance.md``.

        Args:
            options: what to cluster, as an object; default None, the keywords below.
            execution: how to run, as an object; default None, the keywords below.
            zorder_by: the columns of a space-filling curve; default None.
            sort_by: instead, the columns of a linear sort; default None.
            curve: the curve over ``zorder_by``, ``"hilbert"`` (default) or ``"zorder"``.
            target_file_size: output file size in bytes; default None,
                ``lakelog.target_file_size`` (128 MiB).
            partition_filter: only the partitions it matches, a
                :data:`~lakelog.filters.PartitionFilterLike`; default None, all.
            incremental: cluster new files within a rewrite budget; default True. False
                reclusters everything.
            max_group_bytes: in-memory sort budget in bytes; default None,
                ``lakelog.clustering.max_group_bytes`` (1 GiB).
            compression: Parquet codec of the new files; default None,
                ``lakelog.compression``.
            row_group_size: rows per row group of the new files; default None, the
                smaller of ``lakelog.row_group_size`` and ``lakelog.clustering.row_group_size``.
            max_concurrent_groups: groups rewritten at once; default None,
                ``lakelog.compaction.max_concurrent_groups`` (2).
            max_bytes_per_second: the run's total read rate; default None, unpaced.
            partial_progress: commit every ``lakelog.compaction.groups_per_commit``
                groups; default False, one commit.
            dry_run: only plan; default False.
        """

        request, run = from_arguments(ClusteringOptions, options, execution, locals())
        return optimize_table(self._core, request, run, dry_run=dry_run)

    def clustering_report(
        self,
        columns: Sequence[str],
        *,
        version: int | None = None,
        selectivity: float = 0.01,
        queries: Sequence[Mapping[str, tuple[Any, Any]]] | None = None,
    ) -> ClusteringReport:
        """Overlap depth and expected fraction of bytes read by range queries, from file
        stats alone (see :func:`lakelog.maintenance.clustering.layout.clustering_report`).

        Args:
            columns: the columns to measure.
            version: the version to measure; default None, the latest.
            selectivity: the fraction of each column's range a query covers, in (0, 1];
                default 0.01.
            queries: range queries, each ``{column: (low, high)}``, whose exact
                fractions of bytes read are reported too; default None.
        """

        return clustering_report(
            self._core.snapshot(version), columns, selectivity=selectivity, queries=queries
        )

    def compact(
        self,
        *,
        options: CompactionOptions | None = None,
        execution: ExecutionOptions | None = None,
        target_file_size: int | None = None,
        target_rows: int | None = None,
        min_file_size: int | None = None,
        min_input_files: int | None = None,
        partition_filter: PartitionFilterLike = None,
        compression: str | None = None,
        row_group_size: int | None = None,
        max_concurrent_groups: int | None = None,
        max_bytes_per_second: float | None = None,
        partial_progress: bool = False,
        dry_run: bool = False,
    ) -> MaintenanceReport:
        """Rewrite small files into files of the target size, beside live writers.

        Plans on the latest snapshot (files below ``min_file_size``, default 75%
        of ``target_file_size``, bin-packed per partition; ``target_rows`` packs
        and cuts by rows), rewrites the groups in up to ``max_concurrent_groups``
        threads (reads paced to ``max_bytes_per_second``), and commits the swap
        with ``data_change=false`` in one commit (one per
        ``lakelog.compaction.groups_per_commit`` groups with ``partial_progress``).
        Concurrent appends are rebased over; a group whose source a concurrent
        commit removed is abandoned and reported. ``partition_filter`` (DNF
        tuples or an Expression over partition columns) limits the work;
        ``dry_run=True`` only plans and writes nothing. Unset options come from
        table properties. ``options`` (:class:`lakelog.CompactionOptions`) and
        ``execution`` (:class:`lakelog.ExecutionOptions`) hold the same settings as
        objects; a keyword argument beside them must agree with the object where both
        set a field. See ``docs/maintenance.md``.

        Args:
            options: what to compact, as an object; default None, the keywords below.
            execution: how to run, as an object; default None, the keywords below.
            target_file_size: output file size in bytes; default None,
                ``lakelog.target_file_size`` (128 MiB) unless ``target_rows`` alone bounds files.
            target_rows: rows per output file; default None, not bounded by rows.
            min_file_size: files below this many bytes are candidates; default None,
                the target size times ``lakelog.compaction.min_file_size_ratio`` (0.75).
            min_input_files: fewest files in a group worth rewriting; default None,
                ``lakelog.compaction.min_input_files`` (2).
            partition_filter: only the partitions it matches, a
                :data:`~lakelog.filters.PartitionFilterLike`; default None, all.
            compression: Parquet codec of the new files; default None,
                ``lakelog.compression``.
            row_group_size: rows per row group of the new files; default None,
                ``lakelog.row_group_size``.
            max_concurrent_groups: groups rewritten at once; default None,
                ``lakelog.compaction.max_concurrent_groups`` (2).
            max_bytes_per_second: the run's total read rate; default None, unpaced.
            partial_progress: commit every ``lakelog.compaction.groups_per_commit``
                groups; default False, one commit.
            dry_run: only plan, write nothing; default False.
        """

        request, run = from_arguments(CompactionOptions, options, execution, locals())
        return compact_table(self._core, request, run, dry_run=dry_run)

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


convert = returning_table(convert_in_place)


def _storage(uri: str, storage_options: Mapping[str, Any] | None, single_writer: bool) -> Storage:
    return Storage(uri, storage_options, single_writer=single_writer)


def create_table(
    uri: str,
    schema: pa.Schema,
    *,
    partition_by: Sequence[str] = (),
    properties: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    single_writer: bool = False,
    cluster_by: Sequence[str] | None = None,
    cluster_curve: Literal["hilbert", "zorder", "linear"] = "hilbert",
    constraints: Mapping[str, str] | None = None,
    generated: Mapping[str, str] | None = None,
    identity: Mapping[str, Mapping[str, Any]] | None = None,
) -> Table:
    """Create an empty table.

    Its rules (docs/constraints.md): a non-nullable field of ``schema``, at any depth,
    is NOT NULL; ``constraints``, ``generated`` and ``identity`` declare the rest.

    Args:
        uri: where the table's root goes (a path or an fsspec URL).
        schema: the table's columns.
        partition_by: the partition columns, in order; default none.
        properties: table properties (``lakelog.*`` values are checked); default none.
        storage_options: passed to the fsspec filesystem; default none.
        single_writer: allow a store without put-if-absent, promising that no other
            process writes the table; default False.
        cluster_by: columns to declare the table's clustering by (see
            :meth:`Table.set_clustering`); default None, none.
        cluster_curve: the clustering over ``cluster_by``: ``"hilbert"`` (default) or
            ``"zorder"`` curves, or ``"linear"``, a sort.
        constraints: CHECK constraints, name to SQL text (``{"positive": "amount >
            0"}``); default none.
        generated: generated columns, column to the SQL text of its expression
            (``{"day": "CAST(ts AS DATE)"}``): computed when a write lacks the column,
            checked when it gives it; default none.
        identity: identity columns, column to its options ``start`` (default 1),
            ``step`` (default 1) and ``always`` (default True: given values are
            refused; False: BY DEFAULT, given values are kept); default none.

    Returns:
        The table, at version 0.

    Raises:
        TableExistsError: a table is already there.
    """
    schema = core.declare_rules(
        schema, constraints=constraints, generated=generated, identity=identity
    )
    storage = _storage(uri, storage_options, single_writer)
    if cluster_by is not None:
        properties = {
            **(properties or {}),
            **_clustering_properties(schema, partition_by, cluster_by, cluster_curve),
        }
    created = core.create_with_files(
        storage, schema, partition_by=partition_by, properties=properties, adds=None
    )
    return Table(storage, created)


def _clustering_properties(
    schema: pa.Schema,
    partition_by: Sequence[str],
    cluster_by: Sequence[str],
    cluster_curve: Literal["hilbert", "zorder", "linear"],
) -> dict[str, str]:
    """The properties declaring ``create_table``'s ``cluster_by``."""
    if not isinstance(schema, pa.Schema):
        raise InvalidArgumentError(f"expected a pyarrow.Schema, found {type(schema).__name__}")
    linear = cluster_curve == "linear"
    return declaration_properties(
        schema,
        check_partition_columns(schema, partition_by),
        zorder_by=None if linear else cluster_by,
        sort_by=cluster_by if linear else None,
        curve="hilbert" if linear else cluster_curve,
    )


def open_table(
    uri: str, *, storage_options: Mapping[str, Any] | None = None, single_writer: bool = False
) -> Table:
    """Open an existing table at its latest version.

    Args:
        uri: the table's root (a path or an fsspec URL).
        storage_options: passed to the fsspec filesystem; default none.
        single_writer: allow a store without put-if-absent, promising that no other
            process writes the table; default False.

    Raises:
        TableNotFoundError: there is no table at ``uri``.
    """
    storage = _storage(uri, storage_options, single_writer)
    return Table(storage, load_snapshot(storage))


def write_table(
    uri: str,
    data: Any,
    *,
    mode: WriteMode = "append",
    partition_by: Sequence[str] = (),
    properties: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    single_writer: bool = False,
    schema_mode: Literal["strict", "merge"] = "strict",
) -> CommitResult:
    """Write data to a table, creating it (with the data's schema) if needed.

    Args:
        uri: the table's root (a path or an fsspec URL).
        data: the rows, in any form :meth:`Table.append` takes.
        mode: ``"append"`` (default) adds rows, ``"overwrite"`` replaces all rows,
            ``"error"`` refuses to write to an existing table.
        partition_by: the partition columns of a new table; an existing table's must be
            the same. Default none.
        properties: table properties of a new table (checked either way); default none.
        storage_options: passed to the fsspec filesystem; default none.
        single_writer: allow a store without put-if-absent, promising that no other
            process writes the table; default False.
        schema_mode: ``"strict"`` (default) or ``"merge"``, which evolves an existing
            table's schema to take the data (see :meth:`Table.append`).

    Raises:
        TableExistsError: ``mode="error"`` and a table is there.
    """
    core.check_write_mode(mode)
    core.check_schema_mode(schema_mode)
    props = validate_properties(properties or {})  # refused even if the table exists
    storage = _storage(uri, storage_options, single_writer)
    try:
        table = Table(storage, load_snapshot(storage))
    except TableNotFoundError:
        return core.write_new_table(
            storage, data, mode=mode, partition_by=partition_by, properties=props
        )
    core.check_write_to(table.cached, mode=mode, partition_by=partition_by)
    if mode == "append":
        return table.append(data, schema_mode=schema_mode)
    return table.overwrite(data, schema_mode=schema_mode)


def _has_text(clauses: Any) -> bool:
    """Whether a merge option's clauses hold SQL text (conditions or values)."""
    from .rowlevel import MergeClause

    if isinstance(clauses, MergeClause):
        clauses = [clauses]
    if isinstance(clauses, str) or not isinstance(clauses, (list, tuple)):
        return False
    for c in clauses:
        if isinstance(c, MergeClause) and (
            isinstance(c.condition, str)
            or any(isinstance(v, str) for v in (c.values or {}).values())
        ):
            return True
    return False
