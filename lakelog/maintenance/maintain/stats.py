"""What ``maintain`` reads of a table: one :class:`~.model.TableStats` (I/O lives here).

From the latest snapshot: each live file's size, rows, deleted rows and whether
clustering wrote it, per partition (the compaction planner's view); the compaction
settings resolved from the table properties; for a declared clustering, the clustering
report's expected fraction of bytes read (:func:`~..clustering.layout.clustering_report`);
the commits since the newest manifest (one listing of the log); and the dry runs of
``expire_snapshots`` and ``vacuum`` (what they would delete now, under the table's
``lakelog.expire.*`` and ``lakelog.vacuum.*`` settings).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import InvalidArgumentError
from ...log.commits import list_log
from ...properties import get_float, get_int
from ..cleanup.expire import expire_snapshots
from ..cleanup.vacuum import vacuum
from ..clustering.layout import clustering_report
from ..clustering.spec import TAG_SPEC, declared_clustering
from ..compaction.planner import resolve_options
from ..options import CompactionOptions
from .model import ClusteringStats, FileStat, PartitionStats, TableStats

if TYPE_CHECKING:
    from ...core.handle import TableHandle

__all__ = ["CLUSTER_SELECTIVITY", "table_stats"]

CLUSTER_SELECTIVITY = 0.01
"""The selectivity of the typical range query ``maintain`` measures clustering with."""


def table_stats(table: TableHandle, *, name: str | None = None) -> TableStats:
    """The statistics of ``table``'s latest version (``name``: how reports call it)."""
    snap = table.snapshot()
    settings = resolve_options(snap, CompactionOptions())
    target = settings.target_file_size or get_int(snap.properties, "lakelog.target_file_size")
    by_partition: dict[tuple[str | None, ...], list[FileStat]] = {}
    partition_by = tuple(snap.partition_by)
    clustered_bytes = 0
    for f in snap.files():
        clustered = TAG_SPEC in f.tags
        if clustered:
            clustered_bytes += f.size_bytes
        key = tuple(f.partition.get(c) for c in partition_by)
        by_partition.setdefault(key, []).append(
            FileStat(
                size=f.size_bytes,
                rows=f.num_rows,
                deleted=0 if f.deleted is None else f.deleted.rows,
                clustered=clustered,
                path=f.path,
            )
        )
    partitions = tuple(
        PartitionStats(
            partition=dict(zip(partition_by, key, strict=True)) if partition_by else None,
            files=tuple(files),
        )
        for key, files in sorted(
            by_partition.items(), key=lambda kv: tuple((v is None, v or "") for v in kv[0])
        )
    )
    clustering = None
    declared = declared_clustering(snap.properties)
    if declared is not None and snap.num_files:
        report = clustering_report(snap, declared.columns, selectivity=CLUSTER_SELECTIVITY)
        clustering = ClusteringStats(
            columns=tuple(declared.columns),
            box_fraction=float(report.box_fraction),
            selectivity=CLUSTER_SELECTIVITY,
            total_bytes=snap.total_bytes,
            clustered_bytes=clustered_bytes,
        )
    listing = list_log(table.storage)
    newest_manifest = max(listing.manifests, default=-1)
    since = sum(1 for v in listing.commits if v > newest_manifest and v <= snap.version)
    expired = expire_snapshots(table, dry_run=True)
    try:
        orphans = vacuum(table, dry_run=True)
        vacuum_files, vacuum_bytes = orphans.num_files, orphans.bytes
    except InvalidArgumentError:  # retention below the minimum age: vacuum needs force
        vacuum_files, vacuum_bytes = 0, 0
    return TableStats(
        name=name or table.storage.uri,
        target_file_size=target,
        min_file_size=settings.min_file_size or max(1, int(target * 0.75)),
        min_input_files=settings.min_input_files,
        purge_ratio=settings.purge_ratio,
        partitions=partitions,
        clustering=clustering,
        commits_since_manifest=since,
        manifest_interval=get_int(snap.properties, "lakelog.manifest_interval"),
        expirable_versions=expired.versions_expired,
        expirable_bytes=expired.data_bytes,
        expirable_log_files=expired.num_log_files,
        vacuum_files=vacuum_files,
        vacuum_bytes=vacuum_bytes,
        query_cost_ratio=get_float(snap.properties, "lakelog.maintain.query_cost_ratio"),
    )
