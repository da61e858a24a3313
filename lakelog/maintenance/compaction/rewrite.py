"""Rewrite one compaction group: stream its files into new bounded files.

:func:`rewrite_group` needs only the group, the table schema and a
:class:`~lakelog.storage.Storage`, so any worker can run it: a thread of the
embedded executor, a Spark task. It reads the sources one row group at a time
(paced by an optional :class:`~lakelog.maintenance.pacing.Pacer`) and streams
the batches into a :class:`~lakelog.io.writer.RollingWriter`, so memory holds
about one input row group and one output row group, never a whole file or
group. It writes files only; committing them is
:func:`lakelog.maintenance.commit.commit_rewrite`'s job.

Rows are written in the order they are read; clustering, which orders them,
has its own rewrite (:mod:`lakelog.maintenance.clustering.rewrite`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Sequence

import msgspec
import pyarrow as pa

from ...io.writer import ParquetOptions, RollingWriter, SpecWriter, WriteOptions, check_codec
from ...storage import Storage
from ...transforms import PartitionSpec
from ..groups import FileGroup, GroupResult, check_group_rows
from ..pacing import Pacer
from ..sources import dictionary_columns, file_schema_of, read_ahead, read_group
from .planner import CompactionSettings

__all__ = ["RewriteOptions", "rewrite_group"]

_UNBOUNDED = 1 << 62
"""File-size bound used when only ``target_rows`` cuts files."""


class RewriteOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How a group's output files are cut and encoded."""

    target_file_size: int | None = None
    target_rows: int | None = None
    row_group_size: int
    compression: str
    tags: dict[str, str] = {}
    batch_size: int = 65536
    batch_bytes: int = 2 * 1024 * 1024
    prefix: str = "part"
    lease_id: str | None = None
    """The writer lease of the run: output file names carry it (see lakelog.leases)."""
    auto_dictionary: bool = True
    """Dictionary-encode only columns whose values repeat (judged on a sample of
    the group's first batch): near-unique columns gain nothing from a dictionary
    and cost a hash of every value until the writer falls back."""
    partition_spec: tuple[str, ...] = ()
    partition_spec_id: int = -1
    """The table's current spec of transforms (-1: none): output files are split by
    its values, so a rewrite moves a partition of an older spec into it."""
    parquet: ParquetOptions = ParquetOptions()
    """Page index, bloom filters and page size of the output files."""

    @classmethod
    def from_compaction(cls, options: CompactionSettings) -> RewriteOptions:
        return cls(
            target_file_size=options.target_file_size,
            target_rows=options.target_rows,
            row_group_size=options.row_group_size,
            compression=options.compression,
            parquet=options.parquet,
            partition_spec=options.partition_spec,
            partition_spec_id=options.partition_spec_id,
        )

    def write_options(self, *, use_dictionary: bool | tuple[str, ...] = True) -> WriteOptions:
        return WriteOptions(
            target_file_size=self.target_file_size or _UNBOUNDED,
            target_rows=self.target_rows,
            row_group_size=self.row_group_size,
            compression=check_codec(self.compression),
            tags=dict(self.tags),
            use_dictionary=use_dictionary,
            parquet=self.parquet,
        )


def rewrite_group(
    storage: Storage,
    schema: pa.Schema,
    partition_by: Sequence[str],
    group: FileGroup,
    options: RewriteOptions,
    *,
    pacer: Pacer | None = None,
) -> GroupResult:
    """Rewrite one group's files into new files; returns them (``data_change=False``).

    Output files keep the table's schema and the group's partition. The rows
    written are checked against the row counts the log records for the
    sources. On any failure every file written so far is deleted before the
    error propagates.
    """
    started = time.monotonic()
    file_schema = file_schema_of(schema, partition_by)
    writer: RollingWriter | SpecWriter | None = None
    try:
        stream = read_ahead(
            read_group(
                storage,
                file_schema,
                group.files,
                batch_size=options.batch_size,
                batch_bytes=options.batch_bytes,
                pacer=pacer,
            )
        )
        first = next(stream, None)
        write_options = options.write_options(
            use_dictionary=dictionary_columns(first) if options.auto_dictionary else True
        )
        if options.partition_spec_id >= 0:
            writer = SpecWriter(
                storage,
                file_schema=file_schema,
                spec=PartitionSpec.of(options.partition_spec_id, options.partition_spec),
                options=write_options,
                prefix=options.prefix,
                lease_id=options.lease_id,
            )
        else:
            writer = RollingWriter(
                storage,
                file_schema=file_schema,
                partition=group.partition,
                partition_by=partition_by,
                options=write_options,
                prefix=options.prefix,
                lease_id=options.lease_id,
            )
        batches: Iterable[pa.RecordBatch] = (
            itertools.chain([first], stream) if first is not None else stream
        )
        for batch in batches:
            writer.write(batch)
        written = writer.close()
        check_group_rows(group, written)
    except BaseException:
        if writer is not None:
            try:
                storage.delete(writer.abort())
            except Exception:  # noqa: BLE001 - vacuum removes what this cannot
                pass
        raise
    added = [msgspec.structs.replace(a, data_change=False) for a in written]
    return GroupResult.of(group, added, duration_s=time.monotonic() - started)
