"""Table: the entry point for reading, writing and maintaining one table."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from ._failpoints import failpoint
from .errors import (
    AppVersionCommittedError,
    CommitConflictError,
    InvalidArgumentError,
    LakelogError,
    LogGapError,
    SchemaMismatchError,
    TableExistsError,
    TableNotFoundError,
)
from .io.parquet_settings import check_parquet_properties, parquet_options
from .io.schema import check_data_columns, check_schema, conform, duplicate_columns, to_reader
from .io.writer import WriteOptions, check_codec, write_files
from .leases import Lease
from .log.actions import (
    Action,
    AddFile,
    AppTransaction,
    Commit,
    CommitHeader,
    Metadata,
    encode_schema,
)
from .log.commits import commit_path, decode_commit, decode_header, list_log, read_tail
from .log.manifests import read_hint
from .log.snapshot import Snapshot, advance, load_snapshot, version_as_of
from .partitioning import check_partition_columns, partition_string
from .properties import get_int, get_str, validate_properties
from .storage import Storage
from .storage_check import ensure_put_if_absent, record_created
from .transaction import (
    CommitResult,
    Kind,
    Rebase,
    Transaction,
    app_commit,
    app_transaction,
    check_app_versions,
    skipped_result,
)

__all__ = ["Table", "create_table", "open_table", "write_table"]

if TYPE_CHECKING:
    from .changes import ChangeResult, MergeReport
    from .inspect import TableInspect
    from .maintenance.claims import PlanStatus
    from .maintenance.cleanup.report import ExpireReport, VacuumReport
    from .maintenance.clustering.layout import ClusteringReport
    from .maintenance.clustering.spec import DeclaredClustering
    from .maintenance.report import MaintenanceReport
    from .upgrade import UpgradeReport

WriteMode = Literal["append", "overwrite", "error"]


class Table:
    """A lakelog table at one location.

    A ``Table`` caches the snapshot it last resolved; :meth:`refresh` reads
    the log again. Writes always commit on top of the latest version.
    """

    def __init__(self, storage: Storage, snapshot: Snapshot) -> None:
        self.storage = storage
        self._snapshot = snapshot

    def __repr__(self) -> str:
        return f"Table({self.uri!r}, version={self.version})"

    # -- state -------------------------------------------------------------------
    @property
    def uri(self) -> str:
        return self.storage.uri

    @property
    def version(self) -> int:
        """Version of the cached snapshot (call :meth:`refresh` for the newest)."""
        return self._snapshot.version

    @property
    def schema(self) -> pa.Schema:
        return self._snapshot.schema

    @property
    def partition_by(self) -> tuple[str, ...]:
        return self._snapshot.partition_by

    @property
    def properties(self) -> dict[str, str]:
        return self._snapshot.properties

    @property
    def metadata(self) -> Metadata:
        return self._snapshot.metadata

    def refresh(self) -> Table:
        """Bring the cached snapshot up to the latest version; returns self.

        Reads only the commits after the cached version; when it is far
        behind (more than two manifest intervals), resolves from scratch.
        """
        snap = self._snapshot
        limit = 2 * get_int(snap.properties, "lakelog.manifest_interval")
        new: list[Commit] = []
        try:
            for v, data in read_tail(self.storage, snap.version + 1):
                new.append(decode_commit(data, v))
                if len(new) > limit:
                    self._snapshot = load_snapshot(self.storage)
                    return self
        except LogGapError:
            # commits after the cached version were expired meanwhile, or the log is
            # damaged: resolve from scratch, which tells the two apart
            self._snapshot = load_snapshot(self.storage)
            return self
        if new:
            self._snapshot = advance(snap, new)
        elif (read_hint(self.storage) or -1) > snap.version:
            # the commits after the cached version are gone (expired): start over
            self._snapshot = load_snapshot(self.storage)
        return self

    def snapshot(self, version: int | None = None, *, as_of: dt.datetime | None = None) -> Snapshot:
        """The latest snapshot, the one at ``version``, or the latest at or before ``as_of``."""
        if version is not None and as_of is not None:
            raise InvalidArgumentError("expected version or as_of, found both")
        if as_of is not None:
            if not isinstance(as_of, dt.datetime):
                raise InvalidArgumentError(
                    f"expected as_of to be a datetime, found {type(as_of).__name__}"
                )
            version = version_as_of(self.storage, as_of)
        if version is None:
            return self.refresh()._snapshot
        if version == self._snapshot.version:
            return self._snapshot
        if not isinstance(version, int) or isinstance(version, bool):
            raise InvalidArgumentError(f"expected an integer version, found {version!r}")
        return load_snapshot(self.storage, version)

    def history(self, limit: int | None = None) -> list[CommitHeader]:
        """Commit headers, newest first (operation, parameters, metrics, time)."""
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0
        ):
            raise InvalidArgumentError(
                f"expected limit to be an integer > 0 (commits) or None, found {limit!r}; "
                f"pass a whole number such as limit=10."
            )
        versions = list_log(self.storage).commits[::-1]
        if limit is not None:
            versions = versions[:limit]
        datas = self.storage.read_many([commit_path(v) for v in versions])
        # a missing commit was expired concurrently
        return [decode_header(d, v) for v, d in zip(versions, datas, strict=True) if d is not None]

    # -- low-level commit ----------------------------------------------------------
    def commit(
        self,
        actions: Sequence[Action],
        *,
        operation: str,
        kind: Kind,
        read_snapshot: Snapshot | None = None,
        parameters: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
        replaced_partitions: Sequence[Mapping[str, str | None]] | None = None,
        rebase: Rebase | None = None,
        lease: Lease | None = None,
    ) -> CommitResult:
        """Commit actions on top of ``read_snapshot`` (default: the cached one).

        This is the one place maintenance and engines write the log through.
        ``lease`` is the writer lease the added files were written under: before
        every put it checks they are still there (see :meth:`Lease.check`).
        """
        read_snapshot = read_snapshot or self._snapshot
        # a store that ignores put-if-absent would let commits replace each other
        ensure_put_if_absent(self.storage, read_snapshot.properties, actions)
        txn = Transaction(
            self.storage,
            read_snapshot,
            operation=operation,
            kind=kind,
            actions=actions,
            parameters=parameters,
            metrics=metrics,
            replaced_partitions=replaced_partitions,
            rebase=rebase,
            before_put=None if lease is None else lease.before_put(lambda: txn.actions),
        )
        result = txn.commit()
        if txn.landed_snapshot is not None and txn.landed_snapshot.version > self.version:
            self._snapshot = txn.landed_snapshot
        return result

    # -- writes --------------------------------------------------------------------
    def write_options(
        self,
        *,
        target_file_size: int | None = None,
        row_group_size: int | None = None,
        compression: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> WriteOptions:
        props = self.properties
        return WriteOptions(
            target_file_size=target_file_size or get_int(props, "lakelog.target_file_size"),
            row_group_size=row_group_size or get_int(props, "lakelog.row_group_size"),
            compression=check_codec(compression or get_str(props, "lakelog.compression")),
            tags=dict(tags or {}),
            parquet=parquet_options(props),
        )

    def _write(
        self, data: Any, lease: Lease, *, schema: pa.Schema | None = None
    ) -> tuple[list[AddFile], int]:
        """Write ``data`` as files of ``schema`` (default: the table's, checked here;
        a given one was checked by :func:`~lakelog.changes.schema.plan_write`)."""
        reader = to_reader(data)
        if schema is None:
            schema = self.schema
            check_schema(reader.schema, schema)
        batches = (conform(b, schema) for b in reader if b.num_rows)
        adds = write_files(
            self.storage,
            batches,
            schema=schema,
            partition_by=self.partition_by,
            options=self.write_options(),
            lease_id=lease.lease_id,
        )
        return adds, sum(a.num_rows for a in adds)

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
        """
        from .changes.schema import check_schema_mode, plan_write

        check_schema_mode(schema_mode)
        app = app_transaction(app_id, app_version)
        snap = self._snapshot
        if app is not None or schema_mode != "strict":
            snap = self.refresh()._snapshot  # decide on the latest schema and app versions
        done = skipped_result(snap, app, operation="APPEND")
        if done is not None:
            return done
        with Lease.acquire(self.storage, operation="APPEND", properties=snap.properties) as lease:
            reader = to_reader(data)
            plan = plan_write(snap, reader.schema, schema_mode)
            adds, rows = self._write(reader, lease, schema=plan.schema)
            failpoint("append:before-commit")
            actions: list[Action] = [plan.metadata] if plan.metadata is not None else []
            actions += adds
            parameters = plan.parameters()
            if app is not None:
                actions.append(app)
                parameters.update(app_id=app.app_id, app_version=app.app_version)
            try:
                return self.commit(
                    actions,
                    operation="APPEND",
                    kind="append",
                    read_snapshot=snap,
                    parameters=parameters,
                    metrics={
                        "num_files": len(adds),
                        "num_rows": rows,
                        "num_bytes": sum(a.size_bytes for a in adds),
                    },
                    lease=lease,
                )
            except AppVersionCommittedError as e:  # the same batch landed first
                self.storage.delete([a.path for a in adds])
                return CommitResult(
                    version=app_commit(
                        self.storage,
                        e.app_id,
                        e.app_version,
                        recorded=e.recorded_version,
                        recorded_at=e.winning_version if e.winning_version is not None else -1,
                    ),
                    attempts=0,
                    operation="APPEND",
                    skipped=True,
                )
            except BaseException as e:
                if _not_landed(e):
                    self.storage.delete([a.path for a in adds])
                raise

    def overwrite(
        self,
        data: Any,
        *,
        partitions: Sequence[Mapping[str, Any]] | None = None,
        where: Any = None,
        schema_mode: Literal["strict", "merge"] = "strict",
    ) -> CommitResult:
        """Replace the whole table, or only the given partitions, with ``data``.

        ``partitions`` lists partition values, e.g. ``[{"date": date(2024, 1, 2)}]``;
        every row of ``data`` must belong to one of them. ``where`` (a predicate, as
        for :meth:`delete`) replaces exactly the rows it matches, partitioned or not;
        every row of ``data`` must match it (returns a :class:`~lakelog.changes.ChangeResult`).
        ``schema_mode="merge"`` evolves the schema as for :meth:`append`.
        """
        from .changes.schema import check_schema_mode, plan_write

        check_schema_mode(schema_mode)
        if where is not None:
            if partitions is not None:
                raise InvalidArgumentError(
                    "expected partitions= or where=, found both; a predicate on the "
                    "partition columns in where= says the same."
                )
            if schema_mode != "strict":
                raise InvalidArgumentError(
                    "expected schema_mode='strict' with where= (rows replaced by a "
                    "predicate keep the table's schema), found 'merge'; evolve the schema "
                    "first with add_columns() or widen_column()."
                )
            from .changes import overwrite_rows

            return overwrite_rows(self, data, where)
        snap = self.refresh()._snapshot
        scope: list[dict[str, str | None]] | None = None
        if partitions is not None:
            scope = self._partition_scope(partitions)
        with Lease.acquire(
            self.storage, operation="OVERWRITE", properties=snap.properties
        ) as lease:
            reader = to_reader(data)
            plan = plan_write(snap, reader.schema, schema_mode)
            adds, rows = self._write(reader, lease, schema=plan.schema)
            try:
                if scope is not None:
                    keys = {tuple(sorted(p.items())) for p in scope}
                    outside = [
                        a.path for a in adds if tuple(sorted(a.partition.items())) not in keys
                    ]
                    if outside:
                        raise InvalidArgumentError(
                            f"expected every row in the partitions being replaced {scope}, found "
                            f"rows for other partitions; include them in partitions= or filter "
                            f"the data."
                        )
                now = int(time.time() * 1000)
                replaced = [
                    f
                    for f in snap.files()
                    if scope is None or {k: f.partition.get(k) for k in self.partition_by} in scope
                ]
                actions: list[Action] = [plan.metadata] if plan.metadata is not None else []
                actions += [f.to_remove(deletion_ms=now) for f in replaced]
                actions.extend(adds)
                parameters = {"partitions": scope} if scope is not None else {}
                return self.commit(
                    actions,
                    operation="OVERWRITE",
                    kind="overwrite",
                    read_snapshot=snap,
                    parameters={**parameters, **plan.parameters()},
                    metrics={
                        "num_files": len(adds),
                        "num_rows": rows,
                        "num_removed_files": len(replaced),
                    },
                    replaced_partitions=scope,
                    lease=lease,
                )
            except BaseException as e:
                if _not_landed(e):
                    self.storage.delete([a.path for a in adds])
                raise

    def commit_files(
        self,
        adds: Sequence[AddFile],
        *,
        mode: Literal["append", "overwrite"],
        operation: str,
        read_snapshot: Snapshot | None = None,
        parameters: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
        lease: Lease | None = None,
        app: AppTransaction | None = None,
    ) -> CommitResult:
        """Commit data files already written: add them, or (``overwrite``) replace
        every file live in ``read_snapshot`` with them. ``lease``: the writer lease
        they were written under; ``app``: the app version they are (exactly-once:
        :class:`AppVersionCommittedError` if it is not newer than the recorded one)."""
        snap = read_snapshot or self._snapshot
        actions: list[Action] = list(adds)
        if app is not None:
            check_app_versions([app], snap.app_versions, snap.app_commits)
            actions.append(app)
        metrics = dict(metrics or {})
        if mode == "overwrite":
            now = int(time.time() * 1000)
            removed = snap.files()
            actions = [f.to_remove(deletion_ms=now) for f in removed] + actions
            metrics["num_removed_files"] = len(removed)
        return self.commit(
            actions,
            operation=operation,
            kind="overwrite" if mode == "overwrite" else "append",
            read_snapshot=snap,
            parameters=parameters,
            metrics=metrics,
            lease=lease,
        )

    def _partition_scope(
        self, partitions: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, str | None]]:
        if not self.partition_by:
            raise InvalidArgumentError(
                "expected a partitioned table for overwrite(partitions=...), found an "
                "unpartitioned one; call overwrite(data) to replace the whole table."
            )
        if isinstance(partitions, Mapping):
            partitions = [partitions]
        scope = []
        for p in partitions:
            if set(p) != set(self.partition_by):
                raise InvalidArgumentError(
                    f"expected values for exactly the partition columns {list(self.partition_by)}, "
                    f"found {sorted(p)}"
                )
            scope.append({k: partition_string(p[k]) for k in self.partition_by})
        return scope

    # -- row-level changes (see lakelog.changes) -----------------------------------
    def delete(self, where: Any, *, dry_run: bool = False) -> ChangeResult:
        """Delete the rows matching ``where`` (a pyarrow Expression, DNF tuples or a
        string such as ``"customer_id = 42"``; required: ``"true"`` deletes every row).

        Only files whose statistics can match are read and only files holding a
        matching row are rewritten, the rest of each kept row for row. Matching
        nothing commits nothing (``result.committed`` is False). ``dry_run=True``
        reports the files and rows that would change. See ``docs/changes.md``.
        """
        from .changes import delete_rows

        return delete_rows(self, where, dry_run=dry_run)

    def update(self, where: Any, *, set: Mapping[str, Any], dry_run: bool = False) -> ChangeResult:
        """Set columns of the rows matching ``where``: ``set`` maps a column to a
        value or a pyarrow Expression over the row's current values, checked against
        the schema before anything is written. Rewrites like :meth:`delete`; updated
        rows stay in place."""
        from .changes import update_rows

        return update_rows(self, where, set, dry_run=dry_run)

    def merge(
        self,
        source: Any,
        on: str | Sequence[str],
        *,
        when_matched: Literal["update", "delete", "ignore"] = "update",
        when_not_matched: Literal["insert", "ignore"] = "insert",
        when_not_matched_by_source: Literal["ignore", "delete"] = "ignore",
        duplicates: Literal["error", "last", "first"] = "error",
        dry_run: bool = False,
    ) -> MergeReport:
        """Upsert ``source`` (rows of the table's schema) by the key columns ``on``.

        Matched target rows are updated in place, deleted or left alone
        (``when_matched``); unmatched source rows are inserted or dropped
        (``when_not_matched``); ``when_not_matched_by_source="delete"`` deletes
        target rows no source row matches (and so reads every file). Source rows
        sharing a key are an error unless ``duplicates`` is ``"last"`` or
        ``"first"``. Only files that may hold a source key are read. The report
        says rows inserted, updated, deleted and files rewritten.
        """
        from .changes import merge_rows

        return merge_rows(
            self,
            source,
            on,
            when_matched=when_matched,
            when_not_matched=when_not_matched,
            when_not_matched_by_source=when_not_matched_by_source,
            duplicates=duplicates,
            dry_run=dry_run,
        )

    def set_properties(self, properties: Mapping[str, Any]) -> CommitResult:
        """Change table properties (a metadata commit that conflicts with everything).

        ``lakelog.*`` values are checked (see :mod:`lakelog.properties`); a bad value
        already stored does not block this, so setting a valid one fixes it.
        """
        changed = validate_properties(properties)
        snap = self.refresh()._snapshot
        props = dict(snap.metadata.properties)
        props.update(changed)
        check_parquet_properties(changed, snap.schema, snap.partition_by)
        if any(k.startswith("lakelog.clustering.c") for k in changed):
            from .maintenance.clustering.spec import check_declared

            check_declared(props, snap.schema, snap.partition_by)
        md = Metadata(
            table_id=snap.metadata.table_id,
            schema=snap.metadata.schema,
            partition_by=snap.metadata.partition_by,
            properties=props,
            format_version=snap.metadata.format_version,
            created_ms=snap.metadata.created_ms,
        )
        return self.commit(
            [md],
            operation="SET PROPERTIES",
            kind="metadata",
            read_snapshot=snap,
            parameters={"properties": changed},
        )

    # -- schema evolution and restore (see lakelog.changes.schema, .restore) ---------
    def add_columns(self, columns: Any) -> CommitResult:
        """Add nullable columns after the existing ones, in one metadata commit: a
        ``pa.Field``, a list of them, a ``pa.Schema`` or ``{"name": pa.type()}``. Files
        written before read them as null; nothing is rewritten."""
        from .changes.schema import add_columns

        return add_columns(self, columns)

    def drop_columns(self, names: str | Sequence[str]) -> CommitResult:
        """Remove columns (not partition columns) from the schema, in one metadata
        commit. Files keep their values unread; a dropped name can be added back only
        once no live file holds it (``docs/schema-evolution.md``)."""
        from .changes.schema import drop_columns

        return drop_columns(self, names)

    def widen_column(self, name: str, type: pa.DataType) -> CommitResult:
        """Change a column to a wider type (``int32`` -> ``int64``, ``float32`` ->
        ``float64``, ...) in one metadata commit; older files are read converted."""
        from .changes.schema import widen_column

        return widen_column(self, name, type)

    def restore(
        self, version: int | None = None, *, as_of: dt.datetime | None = None
    ) -> CommitResult:
        """Make the latest version read exactly like ``version`` (or the version current
        at ``as_of``) in one commit: its files and metadata come back, later files go.
        Refuses, committing nothing, when expiry or vacuum already deleted files it
        needs (:class:`DataFileMissingError` names them). ``skipped`` when the latest
        version already reads like it. Recorded app versions stay."""
        from .changes.restore import restore_table

        return restore_table(self, version, as_of=as_of)

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
        used. Defaults: ``lakelog.expire.older_than_seconds`` (7 days) and
        ``lakelog.expire.retain_last`` (10). See :mod:`lakelog.maintenance.cleanup.expire`.
        """
        from .maintenance.cleanup.expire import expire_snapshots

        return expire_snapshots(
            self, older_than=older_than, retain_last=retain_last, dry_run=dry_run
        )

    def vacuum(
        self,
        *,
        older_than: dt.timedelta | None = None,
        dry_run: bool = True,
        force: bool = False,
    ) -> VacuumReport:
        """List (or, with ``dry_run=False``, delete) files under the root that no
        retained version references and that are older than ``older_than``
        (default ``lakelog.vacuum.older_than_seconds``, 3 days). Values below
        ``lakelog.vacuum.min_age_seconds`` (1 hour) need ``force=True``. See
        :mod:`lakelog.maintenance.cleanup.vacuum`.
        """
        from .maintenance.cleanup.vacuum import vacuum

        return vacuum(self, older_than=older_than, dry_run=dry_run, force=force)

    def upgrade(self) -> UpgradeReport:
        """Move the table to the newest format version now: declare it (a metadata
        commit, only if the table declares an older one: version 3 lets maintenance runs
        claim their files) and write a version-2 manifest (root and leaves) at the latest
        version unless it has one. See :mod:`lakelog.upgrade` and ``docs/format.md``,
        "Upgrading a table"."""
        from .upgrade import upgrade_table

        return upgrade_table(self)

    def plans(self) -> list[PlanStatus]:
        """Pending maintenance plans: runs that claimed files on the log and have not
        landed or released all their groups, oldest first, each ``running`` (its lease is
        live) or not (it stopped: resume it with :meth:`resume`). See ``docs/format.md``,
        "Maintenance plans and claims"."""
        from .maintenance.claims import plan_statuses

        return plan_statuses(self.storage, self.refresh()._snapshot)

    def resume(
        self,
        plan_id: str,
        *,
        max_concurrent_groups: int | None = None,
        max_bytes_per_second: float | None = None,
        partial_progress: bool = False,
    ) -> MaintenanceReport:
        """Finish the pending plan ``plan_id`` of a run that stopped (crashed, or failed):
        claim its pending groups again and rewrite only those; groups it landed are not
        redone. Refused while the run's lease is live. Options as in :meth:`compact`."""
        from .maintenance.resume import resume_plan

        return resume_plan(
            self,
            plan_id,
            max_concurrent_groups=max_concurrent_groups,
            max_bytes_per_second=max_bytes_per_second,
            partial_progress=partial_progress,
        )

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
        until the next ``optimize``."""
        from .maintenance.clustering.spec import declaration_properties

        snap = self.refresh()._snapshot
        props = declaration_properties(
            snap.schema, snap.partition_by, zorder_by=zorder_by, sort_by=sort_by, curve=curve
        )
        return self.set_properties(props)

    @property
    def clustering(self) -> DeclaredClustering | None:
        """The clustering the table declares (:meth:`set_clustering`), None if none."""
        from .maintenance.clustering.spec import declared_clustering

        return declared_clustering(self.properties)

    def optimize(
        self,
        *,
        zorder_by: Sequence[str] | None = None,
        sort_by: Sequence[str] | None = None,
        curve: Literal["hilbert", "zorder"] = "hilbert",
        target_file_size: int | None = None,
        partition_filter: Any = None,
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
        See ``docs/maintenance.md``.
        """
        from .maintenance.clustering.run import optimize_table

        return optimize_table(
            self,
            zorder_by=zorder_by,
            sort_by=sort_by,
            curve=curve,
            target_file_size=target_file_size,
            partition_filter=partition_filter,
            incremental=incremental,
            max_group_bytes=max_group_bytes,
            compression=compression,
            row_group_size=row_group_size,
            max_concurrent_groups=max_concurrent_groups,
            max_bytes_per_second=max_bytes_per_second,
            partial_progress=partial_progress,
            dry_run=dry_run,
        )

    def clustering_report(
        self,
        columns: Sequence[str],
        *,
        version: int | None = None,
        selectivity: float = 0.01,
        queries: Sequence[Mapping[str, tuple[Any, Any]]] | None = None,
    ) -> ClusteringReport:
        """Overlap depth and expected fraction of bytes read by range queries, from file
        stats alone (see :func:`lakelog.maintenance.clustering.layout.clustering_report`)."""
        from .maintenance.clustering.layout import clustering_report

        return clustering_report(
            self.snapshot(version), columns, selectivity=selectivity, queries=queries
        )

    def compact(
        self,
        *,
        target_file_size: int | None = None,
        target_rows: int | None = None,
        min_file_size: int | None = None,
        min_input_files: int | None = None,
        partition_filter: Any = None,
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
        table properties. See ``docs/maintenance.md``.
        """
        from .maintenance.compaction.run import compact_table

        return compact_table(
            self,
            target_file_size=target_file_size,
            target_rows=target_rows,
            min_file_size=min_file_size,
            min_input_files=min_input_files,
            partition_filter=partition_filter,
            compression=compression,
            row_group_size=row_group_size,
            max_concurrent_groups=max_concurrent_groups,
            max_bytes_per_second=max_bytes_per_second,
            partial_progress=partial_progress,
            dry_run=dry_run,
        )

    # -- adopting files and metadata tables (lakelog.interop.convert, lakelog.inspect) --
    def add_files(self, paths: Sequence[str] | str) -> CommitResult:
        """Adopt Parquet files another tool wrote under the table's root (files, or
        folders of them) in one append commit, after checking their schema and partition
        folders; files already in the table are refused. See
        :func:`lakelog.interop.convert.add_files`."""
        from .interop.convert import add_files

        return add_files(self, paths)

    @property
    def inspect(self) -> TableInspect:
        """Metadata as pyarrow Tables: ``files()``, ``partitions()``, ``history()``,
        ``snapshots()`` (see :mod:`lakelog.inspect`)."""
        from .inspect import TableInspect

        return TableInspect(self)


def _not_landed(error: BaseException) -> bool:
    """Whether a failed write certainly committed nothing, so its new files can go.

    lakelog's own errors (conflicts, bad arguments) are raised before or instead
    of a commit; any other error (a timeout, an interrupt) may have hit after
    the commit landed, and deleting the files then would break the table. Such
    files are left for vacuum instead.
    """
    return isinstance(error, LakelogError)


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
) -> Table:
    """Create an empty table; :class:`TableExistsError` if one is there.

    ``cluster_by`` declares the table's clustering (see :meth:`Table.set_clustering`): a
    ``cluster_curve`` (``hilbert`` or ``zorder``) over those columns, or ``linear``, a
    sort by them."""
    storage = _storage(uri, storage_options, single_writer)
    if cluster_by is not None:
        from .maintenance.clustering.spec import declaration_properties

        if not isinstance(schema, pa.Schema):
            raise InvalidArgumentError(f"expected a pyarrow.Schema, found {type(schema).__name__}")
        linear = cluster_curve == "linear"
        declared = declaration_properties(
            schema,
            check_partition_columns(schema, partition_by),
            zorder_by=None if linear else cluster_by,
            sort_by=cluster_by if linear else None,
            curve="hilbert" if linear else cluster_curve,
        )
        properties = {**(properties or {}), **declared}
    return create_with_files(
        storage, schema, partition_by=partition_by, properties=properties, adds=None
    )


def create_with_files(
    storage: Storage,
    schema: pa.Schema,
    *,
    partition_by: Sequence[str],
    properties: Mapping[str, Any] | None,
    adds: list[AddFile] | None,
    operation: str = "CREATE TABLE",
    lease: Lease | None = None,
    app: AppTransaction | None = None,
) -> Table:
    """Create a table whose first version may already hold files (``adds``), under the
    writer ``lease`` and an optional ``app`` transaction. Library-internal: the Arrow and
    Spark writers' "create the table with its first write" path (not in ``lakelog.__all__``)."""
    if not isinstance(schema, pa.Schema):
        raise InvalidArgumentError(f"expected a pyarrow.Schema, found {type(schema).__name__}")
    if not len(schema):
        raise InvalidArgumentError("expected a schema with at least one column, found none")
    if duplicate_columns(schema):
        raise InvalidArgumentError(
            f"expected distinct column names in the schema, found "
            f"{duplicate_columns(schema)} more than once; rename the duplicates."
        )
    parts = check_partition_columns(schema, partition_by)
    check_parquet_properties(validate_properties(properties or {}), schema, parts)
    if properties and any(str(k).startswith("lakelog.clustering.c") for k in properties):
        from .maintenance.clustering.spec import check_declared

        check_declared(validate_properties(properties), schema, parts)
    listing = list_log(storage)
    if listing.commits or listing.manifests:
        raise TableExistsError(
            f"expected no table at {storage.uri}, found one (log versions up to "
            f"{max(listing.commits[-1:] + listing.manifests[-1:])}); open it with "
            f"lakelog.open_table() or choose another location."
        )
    now = int(time.time() * 1000)
    md = Metadata(
        table_id=uuid.uuid4().hex,
        schema=encode_schema(schema.remove_metadata()),
        partition_by=parts,
        properties=validate_properties(properties or {}),
        created_ms=now,
    )
    ensure_put_if_absent(storage, md.properties, creating=True)
    actions: list[Action] = [md, *(adds or [])]
    if app is not None:  # exactly-once ingest: the first batch creates the table
        actions.append(app)
    txn = Transaction(
        storage,
        None,
        operation=operation,
        kind="metadata",
        actions=actions,
        parameters={"partition_by": list(parts)}
        | ({} if app is None else {"app_id": app.app_id, "app_version": app.app_version}),
        before_put=None if lease is None else lease.before_put(lambda: txn.actions),
    )
    try:
        txn.commit()
    except CommitConflictError as e:
        raise TableExistsError(
            f"expected no table at {storage.uri}, found one created concurrently; open it "
            f"with lakelog.open_table()."
        ) from e
    record_created(storage)
    if txn.landed_snapshot is not None:
        return Table(storage, txn.landed_snapshot)
    return Table(storage, load_snapshot(storage))


def open_table(
    uri: str, *, storage_options: Mapping[str, Any] | None = None, single_writer: bool = False
) -> Table:
    """Open an existing table; :class:`TableNotFoundError` if there is none."""
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

    ``mode``: ``"append"`` adds rows, ``"overwrite"`` replaces all rows,
    ``"error"`` refuses to write to an existing table. ``schema_mode="merge"``
    evolves an existing table's schema to take the data (see :meth:`Table.append`).
    """
    if mode not in ("append", "overwrite", "error"):
        raise InvalidArgumentError(
            f"expected mode 'append', 'overwrite' or 'error', found {mode!r}"
        )
    from .changes.schema import check_schema_mode

    check_schema_mode(schema_mode)
    props = validate_properties(properties or {})  # refused even if the table exists
    storage = _storage(uri, storage_options, single_writer)
    try:
        table: Table | None = Table(storage, load_snapshot(storage))
    except TableNotFoundError:
        table = None
    if table is None:
        reader = to_reader(data)
        check_data_columns(reader.schema)
        schema = reader.schema.remove_metadata()
        parts = check_partition_columns(schema, partition_by)
        check_parquet_properties(props, schema, parts)
        opts_table = write_options_from(props)
        ensure_put_if_absent(storage, props, creating=True)  # before any data is written
        batches = (conform(b, schema) for b in reader if b.num_rows)
        lease = Lease.acquire(storage, operation="CREATE TABLE AS WRITE", properties=props)
        with lease:
            adds = write_files(
                storage,
                batches,
                schema=schema,
                partition_by=parts,
                options=opts_table,
                lease_id=lease.lease_id,
            )
            try:
                created = create_with_files(
                    storage,
                    schema,
                    partition_by=parts,
                    properties=props,
                    adds=adds,
                    operation="CREATE TABLE AS WRITE",
                    lease=lease,
                )
                return CommitResult(
                    version=created.version, attempts=1, operation="CREATE TABLE AS WRITE"
                )
            except TableExistsError:
                if mode == "error":
                    storage.delete([a.path for a in adds])
                    raise
            except BaseException as e:
                if _not_landed(e):  # e.g. a schema create_with_files refuses: no orphans left
                    storage.delete([a.path for a in adds])
                raise
            # created concurrently: commit the files already written on top of it (the
            # data may be a stream that cannot be read again)
            try:
                table = Table(storage, load_snapshot(storage))
                check_schema(schema, table.schema)
                if tuple(table.partition_by) != parts:
                    raise SchemaMismatchError(
                        f"expected partition_by {list(table.partition_by)} of the existing table, "
                        f"found {list(parts)}"
                    )
                return table.commit_files(
                    adds,
                    mode=mode,
                    operation="APPEND" if mode == "append" else "OVERWRITE",
                    metrics={
                        "num_files": len(adds),
                        "num_rows": sum(a.num_rows for a in adds),
                        "num_bytes": sum(a.size_bytes for a in adds),
                    },
                    lease=lease,
                )
            except BaseException as e:
                if _not_landed(e):
                    storage.delete([a.path for a in adds])
                raise
    if mode == "error":
        raise TableExistsError(
            f"expected no table at {storage.uri} (mode='error'), found one at version "
            f"{table.version}; use mode='append' or 'overwrite'."
        )
    if partition_by and tuple(partition_by) != tuple(table.partition_by):
        raise SchemaMismatchError(
            f"expected partition_by {list(table.partition_by)} of the existing table, found "
            f"{list(partition_by)}; omit partition_by when writing to an existing table."
        )
    if mode == "append":
        return table.append(data, schema_mode=schema_mode)
    return table.overwrite(data, schema_mode=schema_mode)


def write_options_from(props: Mapping[str, str]) -> WriteOptions:
    """The write options a table's properties give (library-internal: Arrow and Spark writers)."""
    return WriteOptions(
        target_file_size=get_int(props, "lakelog.target_file_size"),
        row_group_size=get_int(props, "lakelog.row_group_size"),
        compression=check_codec(get_str(props, "lakelog.compression")),
        parquet=parquet_options(props),
    )
