"""The ``Table`` facade's maintenance methods (see :mod:`lakelog.maintenance`): each
hands the table core to its operation. :class:`~lakelog.table.Table` inherits them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from . import core
from .core.handle import TableCore
from .filters import PartitionFilterLike
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
from .transaction import CommitResult
from .upgrade import UpgradeReport, upgrade_table

__all__ = ["MaintenanceMethods"]


class MaintenanceMethods:
    """Expiry, vacuum, maintain, upgrade, plans and resume, clustering and compaction
    of the table whose core is ``_core``; each maintenance module adds its delegating
    method here."""

    _core: TableCore

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

        return plan_statuses(self._core.storage, self._core.refresh().cached)

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
        return core.set_properties(self._core, props)

    @property
    def clustering(self) -> DeclaredClustering | None:
        """The clustering the table declares (:meth:`set_clustering`), None if none."""

        return declared_clustering(self._core.properties)

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
