"""Rewrite one clustering group: order its rows by key and write them cut into segments.

:func:`cluster_group` needs only the group, its segments, the spec, the options
and a :class:`~lakelog.storage.Storage`, so any worker can run it: a thread of
the embedded executor, a Spark task. A group that fits ``max_group_bytes`` in
memory is scanned with Arrow's threaded reader and sorted at once; a larger one
is read one row group at a time and sorted in spilled runs
(:class:`~lakelog.maintenance.clustering.sort.ExternalSorter`). Output files
carry the spec in their footer and their tier and key range in their tags. It
writes files only; committing them is :func:`lakelog.maintenance.commit.commit_rewrite`'s job.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Iterable, Iterator, Sequence

import msgspec
import pyarrow as pa

from ...errors import CorruptLogError
from ...io.writer import RollingWriter, SpecWriter, WriteOptions
from ...storage import Storage
from ...transforms import SPEC_TAG, TAG_PREFIX, PartitionSpec
from ..groups import FileGroup, GroupResult, check_group_rows
from ..pacing import Pacer
from ..sources import dictionary_columns, file_schema_of, read_ahead, read_group, scan_batches
from .planner import ClusterSettings
from .sort import ExternalSorter, Segment, file_cuts, write_segments
from .spec import ROW_SAMPLE, ClusterSpec, encoded_row_bytes, sized_segments, spec_tags

__all__ = ["cluster_group"]


SIZE_CAP_FACTOR = 1.08
"""Clustered files are capped at this times the target size (the writer's footer estimate
may be a few percent short), so none passes 1.1x the target, the bound a reader can plan on."""


def cluster_group(
    storage: Storage,
    schema: pa.Schema,
    partition_by: Sequence[str],
    group: FileGroup,
    segments: Sequence[Segment],
    spec: ClusterSpec,
    options: ClusterSettings,
    *,
    lease_id: str | None = None,
    pacer: Pacer | None = None,
) -> GroupResult:
    """Order one group's rows by key and write its segments (the result counts the
    sorted runs spilled to disk). Output names carry ``lease_id``, the run's writer
    lease; reads go through ``pacer`` (the threaded scan of a group that fits in
    memory acquires each batch's share of the group's bytes)."""
    started = time.monotonic()
    file_schema = file_schema_of(schema, partition_by)
    footer = spec.footer_schema(file_schema)
    write_options = WriteOptions(
        # segments cut the files; an estimate that was low cannot make one pass 1.1x
        target_file_size=int(SIZE_CAP_FACTOR * options.target_file_size),
        size_cap=True,
        row_group_size=options.row_group_size,
        compression=options.compression,
        # a linear sort orders rows by its columns: each row group then says so
        parquet=msgspec.structs.replace(
            options.parquet, sorting_columns=spec.columns if spec.curve == "linear" else ()
        ),
    )

    # a group holds one partition of one spec of transforms: a group of the current spec
    # keeps its values; one of an older spec is split into the current spec's partitions
    kept = {k: v for k, v in group.files[0].tags.items() if k.startswith(TAG_PREFIX)}
    current = options.partition_spec_id
    moving = current >= 0 and kept.get(SPEC_TAG) != str(current)
    if kept and not moving:
        write_options = dataclasses.replace(write_options, tags={**write_options.tags, **kept})

    def make_writer() -> RollingWriter | SpecWriter:
        if moving:
            return SpecWriter(
                storage,
                file_schema=footer,
                spec=PartitionSpec.of(current, options.partition_spec),
                options=write_options,
                prefix="cluster",
                lease_id=lease_id,
            )
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
    marked = any(f.deleted is not None for f in group.files)  # read_group drops their rows
    if row * group.num_rows <= options.max_group_bytes and not marked:
        # fits: a multi-threaded scan of exactly these files (the row count is checked below)
        scan = scan_batches(
            storage,
            group.files,
            file_schema,
            batch_size=65_536,
            use_threads=True,
            fragment_readahead=4,
        )
        if pacer is not None:
            scan = _paced(scan, pacer, group)
    else:  # sorted runs: read one row group at a time so the budget holds
        batch = max(1024, min(65_536, options.max_group_bytes // (16 * row)))
        scan = read_ahead(
            read_group(storage, file_schema, group.files, batch_size=batch, pacer=pacer)
        )
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
            tags={
                **w.add.tags,
                **spec_tags(spec, tier=w.tier, key_min=w.key_min, key_max=w.key_max),
            },
        )
        for w in written
    )
    try:
        check_group_rows(group, added)
    except CorruptLogError:
        storage.delete([a.path for a in added])
        raise
    return GroupResult.of(group, added, duration_s=time.monotonic() - started, spilled_runs=runs)


def _paced(
    batches: Iterable[pa.RecordBatch], pacer: Pacer, group: FileGroup
) -> Iterator[pa.RecordBatch]:
    """Acquire, for each batch, its rows' share of the group's source bytes."""
    per_row = group.total_bytes / max(1, group.num_rows)
    counted = 0
    rows = 0
    for b in batches:
        rows += b.num_rows
        share = min(group.total_bytes, round(rows * per_row)) - counted
        if share > 0:
            pacer.acquire(share)
            counted += share
        yield b
