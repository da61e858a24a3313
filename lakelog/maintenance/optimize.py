"""``Table.optimize``: cluster a table by a curve (or a linear sort), incrementally.

Steps: :func:`lakelog.maintenance.cluster_plan.prepare_optimize` checks every
argument, resolves the clustering spec and plans each partition; each group
is ordered and written here (:func:`cluster_group`, on a thread pool), then
one ``rewrite`` commit through
:func:`lakelog.maintenance.commit.commit_rewrite` (rebases over appends; a
group whose sources were removed concurrently is abandoned). The result is
the compaction :class:`MaintenanceReport` with clustering fields in ``extra``.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec
import pyarrow as pa

from ..errors import CorruptLogError
from ..io.writer import RollingWriter, WriteOptions
from ..leases import Lease
from ..properties import get_int
from ..storage import Storage
from ..table import Table
from .cluster import (
    FOOTER_KEY,
    ROW_SAMPLE,
    ClusterSpec,
    encoded_row_bytes,
    sized_segments,
    spec_tags,
)
from .cluster_plan import ClusterOptions, dataset_of, optimize_report, prepare_optimize
from .commit import commit_rewrite, delete_outputs
from .plan import FileGroup, positive_int
from .report import MaintenanceReport
from .rewrite import GroupResult, dictionary_columns, file_schema_of, read_ahead, read_group
from .sort import ExternalSorter, Segment, file_cuts, write_segments

__all__ = ["cluster_group", "optimize_table"]


# -- executing one group -------------------------------------------------------------------


def cluster_group(
    storage: Storage,
    schema: pa.Schema,
    partition_by: Sequence[str],
    group: FileGroup,
    segments: Sequence[Segment],
    spec: ClusterSpec,
    options: ClusterOptions,
    *,
    lease_id: str | None = None,
) -> tuple[GroupResult, int]:
    """Order one group's rows by key and write its segments; returns the result and
    the number of sorted runs spilled to disk. Output names carry ``lease_id``, the
    run's writer lease."""
    started = time.monotonic()
    file_schema = file_schema_of(schema, partition_by)
    footer = file_schema.with_metadata({FOOTER_KEY.encode(): spec.to_footer()})
    write_options = WriteOptions(
        target_file_size=2 * options.target_file_size,  # a safety net; segments cut files
        row_group_size=options.row_group_size,
        compression=options.compression,
    )

    def make_writer() -> RollingWriter:
        return RollingWriter(
            storage,
            file_schema=footer,
            partition=group.partition,
            partition_by=partition_by,
            options=write_options,
            prefix="cluster",
            lease_id=lease_id,
        )

    row = max(1, 3 * group.total_bytes // max(1, group.num_rows))  # in memory, roughly
    scan: Iterable[pa.RecordBatch]
    if row * group.num_rows <= options.max_group_bytes:
        # fits: a multi-threaded scan of exactly these files (the row count is checked below)
        scan = dataset_of(storage, group.files, file_schema).to_batches(
            batch_size=65_536, use_threads=True, fragment_readahead=4
        )
    else:  # sorted runs: read one row group at a time so the budget holds
        batch = max(1024, min(65_536, options.max_group_bytes // (16 * row)))
        scan = read_ahead(read_group(storage, file_schema, group.files, batch_size=batch))
    source = iter(scan)
    first = next(source, None)
    batches = itertools.chain([] if first is None else [first], source)
    write_options = dataclasses.replace(write_options, use_dictionary=dictionary_columns(first))
    with ExternalSorter(
        file_schema, spec.keys, max_bytes=options.max_group_bytes, key_bits=spec.key_bits
    ) as sorter:
        sorter.add(batches)
        row_bytes = encoded_row_bytes(sorter.row_sample(ROW_SAMPLE), spec, write_options)
        segments = sized_segments(segments, row_bytes, options.target_file_size, spec)
        distinct, counts = sorter.key_counts()
        cuts = file_cuts(segments, distinct, counts=counts)
        ordered = sorter.ordered([c.key_start for c in cuts])
        written = write_segments(ordered, cuts, make_writer, delete=storage.delete)
        runs = sorter.stats.runs
    added = tuple(
        msgspec.structs.replace(
            w.add,
            data_change=False,
            tags=spec_tags(spec, tier=w.tier, key_min=w.key_min, key_max=w.key_max),
        )
        for w in written
    )
    got = sum(a.num_rows for a in added)
    if got != group.num_rows:
        storage.delete([a.path for a in added])
        raise CorruptLogError(
            f"expected {group.num_rows} rows from the {len(group.files)} files of group "
            f"{group.group_id} (as the log records), found {got}; a data file does not match "
            f"the log. Nothing was committed; check the files with `lakelog files`."
        )
    result = GroupResult(
        group_id=group.group_id,
        added=added,
        bytes_read=group.total_bytes,
        bytes_written=sum(a.size_bytes for a in added),
        num_rows=got,
        duration_s=time.monotonic() - started,
    )
    return result, runs


# -- the whole run ---------------------------------------------------------------------------


def optimize_table(
    table: Table,
    *,
    zorder_by: Sequence[str] | str | None = None,
    sort_by: Sequence[str] | str | None = None,
    curve: str = "hilbert",
    target_file_size: int | None = None,
    partition_filter: Any = None,
    incremental: bool = True,
    max_group_bytes: int | None = None,
    compression: str | None = None,
    row_group_size: int | None = None,
    max_concurrent_groups: int | None = None,
    dry_run: bool = False,
) -> MaintenanceReport:
    """Cluster the table (see :meth:`lakelog.Table.optimize`)."""
    if max_concurrent_groups is not None:  # every argument is checked before any work
        positive_int("max_concurrent_groups", max_concurrent_groups, unit="groups")
    prep = prepare_optimize(
        table,
        zorder_by=zorder_by,
        sort_by=sort_by,
        curve=curve,
        target_file_size=target_file_size,
        partition_filter=partition_filter,
        incremental=incremental,
        max_group_bytes=max_group_bytes,
        compression=compression,
        row_group_size=row_group_size,
        dry_run=dry_run,
    )
    snap, plan, spec, options = prep.snapshot, prep.plan, prep.spec, prep.options
    workers = (
        get_int(snap.properties, "lakelog.compaction.max_concurrent_groups")
        if max_concurrent_groups is None
        else max_concurrent_groups
    )
    positive_int("max_concurrent_groups", workers, unit="groups")
    extra = prep.extra()
    if dry_run or not plan.groups:
        report = optimize_report(plan, [], None, [], prep.started, extra, dry_run=dry_run)
        report.emit()
        return report
    lease = Lease.acquire(table.storage, operation="OPTIMIZE", properties=snap.properties)
    with lease:
        results: list[GroupResult] = []
        spilled = 0
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(plan.groups)))) as pool:
            futures = [
                pool.submit(
                    cluster_group,
                    table.storage,
                    snap.schema,
                    snap.partition_by,
                    g,
                    plan.segments[g.group_id],
                    spec,
                    options,
                    lease_id=lease.lease_id,
                )
                for g in sorted(plan.groups, key=lambda g: -g.total_bytes)
            ]
            try:
                for fut in futures:
                    r, runs = fut.result()
                    results.append(r)
                    spilled += runs
            except BaseException:
                for fut in futures:
                    fut.cancel()
                done = [
                    f.result()[0]
                    for f in futures
                    if f.done() and not f.cancelled() and f.exception() is None
                ]
                delete_outputs(table.storage, done)
                raise
        extra["spilled_runs"] = spilled
        commit, abandoned = commit_rewrite(
            table,
            plan,
            results,
            operation="OPTIMIZE",
            parameters=prep.commit_parameters(),
            read_snapshot=snap,
            lease=lease,
        )
    report = optimize_report(plan, results, commit, abandoned, prep.started, extra, dry_run=False)
    report.emit()
    return report
