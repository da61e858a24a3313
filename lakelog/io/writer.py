"""Rolling Parquet writer: bounded files, bounded row groups, stats from footers.

Memory is bounded by one row group per open partition: batches are buffered
until ``row_group_size`` rows, written as one row group, and a file is closed
once its size reaches ``target_file_size`` (or its row count ``target_rows``,
when given: then row groups are also cut so no file exceeds it). A caller that
knows better where a row group should end (clustering cuts them at key
boundaries) ends one early with :meth:`RollingWriter.end_row_group`.

What makes readers skip data inside a file is set by :class:`ParquetOptions`:
the page index, bloom filters, the data page size, and ``sorting_columns``,
which the writer makes true by sorting each row group before writing it.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import IO, Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import threads
from ..errors import InvalidArgumentError
from ..log import mapping
from ..log.actions import AddFile
from ..partitioning import check_partition_dir, partition_dir, partition_string
from ..stats import stats_from_metadata
from ..storage import Storage
from ..transforms import PartitionSpec
from .guards import Guards, check_rows, guards_of

__all__ = [
    "BLOOM_TYPES",
    "CODECS",
    "DATA_PAGE_SIZE",
    "ParquetOptions",
    "SINGLE_PAGE_TAG",
    "RollingWriter",
    "WriteOptions",
    "check_codec",
    "single_page_chunks",
    "SpecWriter",
    "split_partitions",
    "split_spec",
    "write_files",
]

CODECS = ("none", "snappy", "gzip", "brotli", "lz4", "zstd")
DATA_PAGE_SIZE = 1024 * 1024
"""pyarrow's default target size of a data page (bytes, encoded)."""
BLOOM_NDV_HEADROOM = 1.25
"""Automatic bloom filter sizing: distinct values of a file's first row group times this."""


def bloom_type_ok(t: pa.DataType) -> bool:
    """Whether lakelog writes and reads bloom filters for a column of type ``t``.

    Floats are left out: ``0.0 = -0.0`` holds but their bytes hash apart, so a
    filter could answer "absent" for a matching row.
    """
    if pa.types.is_dictionary(t):
        t = t.value_type  # type: ignore[attr-defined]
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_date32(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_decimal(t)
    )


BLOOM_TYPES = "integers, strings, binary, dates (date32), timestamps and decimals"
"""The column types :func:`bloom_type_ok` accepts, in words for messages."""


SINGLE_PAGE_TAG = "lakelog.parquet.single_page_chunks"
"""A file's tag when every column chunk is one data page (docs/format.md, "Page tag")."""


def single_page_chunks(md: pq.FileMetaData, data_page_size: int) -> bool:
    """True if every column chunk of the file is at most one data page: its uncompressed
    size (dictionary page included) is within the page size the writer cut pages at."""
    for r in range(md.num_row_groups):
        group = md.row_group(r)
        for c in range(group.num_columns):
            if group.column(c).total_uncompressed_size > data_page_size:
                return False
    return bool(md.num_row_groups > 0)


class ParquetOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What a file carries so readers can skip inside it (see docs/skipping.md).

    Filled from the ``lakelog.parquet.*`` table properties
    (:func:`lakelog.io.parquet_settings.parquet_options`); a maintenance plan
    carries it, so its files are written the same wherever the plan runs.
    """

    page_index: bool = True
    """Write the column index and offset index (per-page min/max and locations)."""
    data_page_size: int = DATA_PAGE_SIZE
    """Target encoded size of a data page in bytes."""
    bloom_filter_columns: tuple[str, ...] = ()
    """Columns with a split-block bloom filter in every row group (those of the file
    whose type :func:`bloom_type_ok` accepts; others are ignored)."""
    bloom_filter_fpp: float = 0.01
    """False-positive probability each filter is sized for."""
    bloom_filter_ndv: int = 0
    """Distinct values per row group each filter is sized for; 0: the distinct
    values of the file's first row group (times 1.25), so filters fit the data."""
    sorting_columns: tuple[str, ...] = ()
    """Sort every row group by these columns (ascending, nulls last) and declare
    them as the row group's ``sorting_columns``: the writer makes the claim true."""

    def __post_init__(self) -> None:
        if isinstance(self.data_page_size, bool) or self.data_page_size <= 0:
            raise InvalidArgumentError(
                f"expected data_page_size > 0 bytes, found {self.data_page_size}"
            )
        if not 0 < self.bloom_filter_fpp < 1:
            raise InvalidArgumentError(
                f"expected a bloom filter false-positive probability in (0, 1), found "
                f"{self.bloom_filter_fpp}"
            )
        if self.bloom_filter_ndv < 0:
            raise InvalidArgumentError(
                f"expected a bloom filter distinct count >= 0 (0: automatic), found "
                f"{self.bloom_filter_ndv}"
            )


@dataclass(frozen=True)
class WriteOptions:
    """How data files are cut and encoded."""

    target_file_size: int
    row_group_size: int
    compression: str = "zstd"
    tags: Mapping[str, str] = field(default_factory=dict)
    target_rows: int | None = None
    use_dictionary: bool | tuple[str, ...] = True
    """Dictionary-encode every column (True), none (False) or only these."""
    parquet: ParquetOptions = field(default_factory=ParquetOptions)
    """Page index, bloom filters, page size and sorting of the files."""
    size_cap: bool = False
    """Treat ``target_file_size`` as a cap: a row group is cut short where the file's
    bytes per row so far say it would cross it, so a file ends within about one page
    of the size (otherwise a file ends once a whole row group reached the size)."""

    def __post_init__(self) -> None:
        if self.target_file_size <= 0:
            raise InvalidArgumentError(
                f"expected target_file_size > 0 bytes, found {self.target_file_size}"
            )
        if self.row_group_size <= 0:
            raise InvalidArgumentError(
                f"expected row_group_size > 0 rows, found {self.row_group_size}"
            )
        if self.target_rows is not None and self.target_rows <= 0:
            raise InvalidArgumentError(
                f"expected target_rows > 0 (or None), found {self.target_rows}"
            )
        check_codec(self.compression)


def check_codec(codec: str) -> str:
    if not isinstance(codec, str) or codec.lower() not in CODECS:
        raise InvalidArgumentError(
            f"expected a Parquet codec among {list(CODECS)}, found {codec!r}"
        )
    return codec.lower()


FOOTER_BYTES_PER_CHUNK = 600
"""A first guess of the footer bytes per column chunk (its metadata and page index
entries), until a file of the writer closed and measured it."""


class RollingWriter:
    """Writes batches of one partition into files of about the target size."""

    def __init__(
        self,
        storage: Storage,
        *,
        file_schema: pa.Schema,
        partition: Mapping[str, str | None],
        partition_by: Sequence[str],
        options: WriteOptions,
        prefix: str = "part",
        lease_id: str | None = None,
    ) -> None:
        self.storage = storage
        self.logical_schema = file_schema
        """The schema of the batches given to :meth:`write`."""
        self.schema = mapping.physical_schema(file_schema)
        """The schema of the files: columns under their physical names (format.md,
        "Column ids"); the same as :attr:`logical_schema` without column mapping."""
        self._mapped = mapping.is_mapped(file_schema)
        self._physical = mapping.physical_names(file_schema)
        self.partition = dict(partition)
        self.folder = partition_dir(partition_by, partition) if partition_by else ""
        self.options = options
        self.prefix = prefix
        # file names carry the writer's lease id, so vacuum keeps them until it commits
        unique = uuid.uuid4().hex
        self.run_id = unique if lease_id is None else f"{lease_id}-{unique[:16]}"
        self.written: list[AddFile] = []
        self._buffer: list[pa.RecordBatch] = []
        self._buffered_rows = 0
        self._sink: IO[bytes] | None = None
        self._writer: pq.ParquetWriter | None = None
        self._path = ""
        self._rows_in_file = 0
        self._seq = 0
        self._groups_in_file = 0
        self._footer_fixed = sum(len(k) + len(v) for k, v in (file_schema.metadata or {}).items())
        """Footer bytes of every file: its key-value metadata (a clustering spec, ...)."""
        self._footer_per_group = float(FOOTER_BYTES_PER_CHUNK * len(file_schema))
        """Footer bytes per row group: a guess until a file closed, then measured."""

    def _row_group_limit(self) -> int:
        """Rows the current row group may hold (less near a ``target_rows`` cut, or, with
        ``size_cap``, near the size)."""
        limit = self.options.row_group_size
        target_rows = self.options.target_rows
        if target_rows is not None:
            limit = min(limit, target_rows - self._rows_in_file)
        if self.options.size_cap and self._sink is not None and self._rows_in_file:
            data = self._sink.tell()
            per_row = data / self._rows_in_file
            # the footer (metadata, page index, bloom filters) grows with the row groups
            footer = self._footer_fixed + self._footer_per_group * (self._groups_in_file + 1)
            room = int((self.options.target_file_size - data - footer) / max(per_row, 1e-9))
            if room < self._buffered_rows + 1 and self._buffered_rows == 0:
                self._close_file()  # full: the next rows start a new file
                return self._row_group_limit()
            limit = min(limit, max(self._buffered_rows + 1, room))
        return limit

    def write(self, batch: pa.RecordBatch) -> None:
        if self._mapped:
            batch = mapping.to_physical(batch, self.logical_schema)
        while batch.num_rows:
            limit = self._row_group_limit()
            take = min(batch.num_rows, limit - self._buffered_rows)
            self._buffer.append(batch.slice(0, take))
            self._buffered_rows += take
            batch = batch.slice(take)
            if self._buffered_rows >= limit:
                self._flush_row_group()

    def _open(self, first: pa.Table) -> None:
        """Open the next file; ``first`` (its first row group) sizes the bloom filters."""
        name = f"{self.prefix}-{self._seq:05d}-{self.run_id}.parquet"
        self._seq += 1
        self._path = f"{self.folder}/{name}" if self.folder else name
        codec = self.options.compression
        pq_opts = self.options.parquet
        sorting = self._sort_keys()
        blooms = self._bloom_options(first)
        self._sink = self.storage.open_output(self._path)
        self._writer = pq.ParquetWriter(
            self._sink,
            self.schema,
            compression=None if codec == "none" else codec,
            write_statistics=True,
            use_dictionary=(
                list(self.options.use_dictionary)
                if isinstance(self.options.use_dictionary, tuple)
                else self.options.use_dictionary
            ),
            write_page_index=pq_opts.page_index,
            data_page_size=pq_opts.data_page_size,
            sorting_columns=(
                pq.SortingColumn.from_ordering(self.schema, sorting, null_placement="at_end")
                if sorting
                else None
            ),
            bloom_filter_options=blooms or None,
        )
        self._rows_in_file = 0

    def _sort_keys(self) -> list[tuple[str, str]]:
        names = self.schema.names
        wanted = (self._physical.get(c, c) for c in self.options.parquet.sorting_columns)
        return [(c, "ascending") for c in wanted if c in names]

    def _bloom_options(self, first: pa.Table) -> dict[str, dict[str, float | int]]:
        """pyarrow's ``bloom_filter_options`` for the bloom filter columns of this file."""
        pq_opts = self.options.parquet
        out: dict[str, dict[str, float | int]] = {}
        for column in pq_opts.bloom_filter_columns:
            name = self._physical.get(column, column)
            i = self.schema.get_field_index(name)
            if i < 0 or not bloom_type_ok(self.schema.field(i).type):
                continue
            ndv = pq_opts.bloom_filter_ndv
            if ndv == 0:
                distinct = pc.count_distinct(first.column(i), mode="only_valid").as_py()
                ndv = max(1, math.ceil(int(distinct or 0) * BLOOM_NDV_HEADROOM))
            # a row group holds at most its rows' distinct values (pyarrow's ndv is 32-bit)
            ndv = min(ndv, self.options.row_group_size, 2**31 - 1)
            out[name] = {"ndv": ndv, "fpp": pq_opts.bloom_filter_fpp}
        return out

    def end_row_group(self) -> None:
        """End the current row group here (it is written at once, however few rows)."""
        self._flush_row_group()

    def _flush_row_group(self) -> None:
        if not self._buffered_rows:
            return
        table = pa.Table.from_batches(self._buffer, schema=self.schema)
        sorting = self._sort_keys()
        if sorting:
            keys = [(name, order, "at_end") for name, order in sorting]
            table = table.take(pc.sort_indices(table, sort_keys=keys))
        if self._writer is None:
            self._open(table)
        assert self._writer is not None and self._sink is not None
        self._writer.write_table(table, row_group_size=self._buffered_rows)
        self._rows_in_file += self._buffered_rows
        self._groups_in_file += 1
        self._buffer, self._buffered_rows = [], 0
        target_rows = self.options.target_rows
        if self._sink.tell() >= self.options.target_file_size or (
            target_rows is not None and self._rows_in_file >= target_rows
        ):
            self._close_file()

    def _close_file(self) -> None:
        if self._writer is None:
            return
        assert self._sink is not None
        writer, sink = self._writer, self._sink
        self._writer, self._sink = None, None
        self._rows_in_file = 0
        data = sink.tell()
        writer.close()
        sink.close()
        md = writer.writer.metadata
        size = int(self.storage.fs.size(self.storage.full(self._path)))
        if self._groups_in_file:
            footer = max(0, size - data - self._footer_fixed)
            self._footer_per_group = footer / self._groups_in_file
        self._groups_in_file = 0
        tags = {k: v for k, v in self.options.tags.items() if k != SINGLE_PAGE_TAG}
        if self.options.parquet.page_index and single_page_chunks(
            md, self.options.parquet.data_page_size
        ):
            tags[SINGLE_PAGE_TAG] = "true"
        self.written.append(
            AddFile(
                path=self._path,
                size_bytes=size,
                num_rows=md.num_rows,
                partition=self.partition,
                stats=stats_from_metadata(md, self.schema),
                data_change=True,
                modification_ms=int(time.time() * 1000),
                tags=tags,
            )
        )

    def close(self) -> list[AddFile]:
        """Flush and close; returns the files written."""
        self._flush_row_group()
        self._close_file()
        return self.written

    def abort(self) -> list[str]:
        """Close without recording; returns the paths of every file touched."""
        paths = [a.path for a in self.written]
        if self._writer is not None:
            paths.append(self._path)
            try:
                self._writer.close()
                if self._sink is not None:
                    self._sink.close()
            except Exception:  # noqa: BLE001 - best effort on an already failing path
                pass
            self._writer, self._sink = None, None
        return paths


def _group(
    batch: pa.RecordBatch, keys: Sequence[pa.Array]
) -> list[tuple[list[Any], pa.RecordBatch]]:
    """Split a batch by the values of ``keys`` (arrays as long as the batch): one slice
    per distinct combination, with its key values."""
    if batch.num_rows == 0:
        return []
    codes = np.zeros(batch.num_rows, dtype=np.int64)
    for key in keys:
        enc = pc.dictionary_encode(key, null_encoding="encode")
        idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        codes = codes * (len(enc.dictionary) + 1) + idx
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    ends = np.r_[starts[1:], len(order)]
    taken = batch.take(pa.array(order))
    out = []
    for s, e in zip(starts, ends, strict=True):
        first = int(order[s])
        out.append(([k[first].as_py() for k in keys], taken.slice(int(s), int(e - s))))
    return out


def split_partitions(
    batch: pa.RecordBatch, partition_by: Sequence[str]
) -> list[tuple[dict[str, str | None], pa.RecordBatch]]:
    """Split a batch by the values of the partition columns (one slice each)."""
    if not partition_by:
        return [({}, batch)]
    return [
        ({c: partition_string(v) for c, v in zip(partition_by, values, strict=True)}, part)
        for values, part in _group(batch, [batch.column(c) for c in partition_by])
    ]


def split_spec(
    batch: pa.RecordBatch, spec: PartitionSpec | None
) -> list[tuple[dict[str, str], pa.RecordBatch]]:
    """Split a batch by the values of a spec of transforms (format.md, "Partition
    transforms"): one slice per file group, with the tags its files record."""
    if spec is None or not spec.fields:
        return [({}, batch)]
    return [(spec.tags(values), part) for values, part in _group(batch, spec.keys(batch))]


class SpecWriter:
    """Writes batches into files of a spec of transforms (format version 8): one
    :class:`RollingWriter` per set of the spec's values, with the :meth:`RollingWriter`
    interface (``options``, ``write``, ``end_row_group``, ``close``, ``abort``). Rewrites
    (compaction, clustering) write their rows into the table's current spec through it."""

    def __init__(
        self,
        storage: Storage,
        *,
        file_schema: pa.Schema,
        spec: PartitionSpec,
        options: WriteOptions,
        prefix: str = "part",
        lease_id: str | None = None,
    ) -> None:
        self.storage = storage
        self.file_schema = file_schema
        self.spec = spec
        self.options = options
        """Options of the files it starts from now on (set before the first write to
        change them, as for :class:`RollingWriter`)."""
        self.prefix = prefix
        self.lease_id = lease_id
        self._writers: dict[tuple[tuple[str, str], ...], RollingWriter] = {}

    def end_row_group(self) -> None:
        """End the current row group of every file being written."""
        for w in self._writers.values():
            w.end_row_group()

    def write(self, batch: pa.RecordBatch) -> None:
        for tags, part in split_spec(batch, self.spec):
            key = tuple(sorted(tags.items()))
            w = self._writers.get(key)
            if w is None:
                w = self._writers[key] = RollingWriter(
                    self.storage,
                    file_schema=self.file_schema,
                    partition={},
                    partition_by=(),
                    options=replace(self.options, tags={**self.options.tags, **tags}),
                    prefix=self.prefix,
                    lease_id=self.lease_id,
                )
            w.write(part)

    def close(self) -> list[AddFile]:
        out: list[AddFile] = []
        for w in self._writers.values():
            out.extend(w.close())
        return out

    def abort(self) -> list[str]:
        out: list[str] = []
        for w in self._writers.values():
            out.extend(w.abort())
        return out


def _split(
    batch: pa.RecordBatch, partition_by: Sequence[str], spec: PartitionSpec | None
) -> list[tuple[dict[str, str | None], dict[str, str], pa.RecordBatch]]:
    out = []
    for values, part in split_partitions(batch, partition_by):
        for tags, piece in split_spec(part, spec):
            out.append((values, tags, piece))
    return out


def write_files(
    storage: Storage,
    batches: Iterable[pa.RecordBatch],
    *,
    schema: pa.Schema,
    partition_by: Sequence[str],
    options: WriteOptions,
    prefix: str = "part",
    lease_id: str | None = None,
    spec: PartitionSpec | None = None,
) -> list[AddFile]:
    """Write conforming batches (full table schema) as data files, each checked first
    against the rules ``schema`` holds (:func:`~lakelog.io.guards.check_rows`); with a
    ``spec`` of transforms (format version 8), split by its values, recorded in each
    file's tags.

    On error every file this call wrote is deleted before the error
    propagates, so a failed write leaves nothing behind it can know of. A
    partition folder name too long for a filesystem is refused before any of a
    batch's rows are written (:func:`~lakelog.partitioning.check_partition_dir`).
    """
    file_schema = pa.schema([f for f in schema if f.name not in partition_by])
    writers: dict[tuple[tuple[str, str | None], ...], RollingWriter] = {}
    guards = guards_of(schema)
    try:
        for batch in _checked(batches, guards) if guards else batches:
            # a writer per new partition first (its folder name checked), then write
            todo: list[tuple[RollingWriter, pa.RecordBatch]] = []
            for values, tags, part in _split(batch, partition_by, spec):
                key = tuple(sorted({**values, **tags}.items(), key=lambda kv: kv[0]))
                w = writers.get(key)
                if w is None:
                    check_partition_dir(partition_by, values)
                    w = writers[key] = RollingWriter(
                        storage,
                        file_schema=file_schema,
                        partition=values,
                        partition_by=partition_by,
                        options=replace(options, tags={**options.tags, **tags})
                        if tags
                        else options,
                        prefix=prefix,
                        lease_id=lease_id,
                    )
                todo.append((w, part.select(file_schema.names) if partition_by else part))
            for w, part in todo:
                w.write(part)
        out: list[AddFile] = []
        for w in writers.values():
            out.extend(w.close())
        return out
    except BaseException:
        leftovers: list[str] = []
        for w in writers.values():
            leftovers.extend(w.abort())
        try:
            storage.delete(leftovers)
        except Exception:  # noqa: BLE001 - vacuum removes what this cannot
            pass
        raise


CHECK_ROWS = 1 << 20
"""Rows checked against the table's rules at a time (a slice of a larger batch)."""


def _checked(batches: Iterable[pa.RecordBatch], guards: Guards) -> Iterator[pa.RecordBatch]:
    """``batches`` in slices of at most :data:`CHECK_ROWS` rows, each yielded only once
    it passed the table's rules (:func:`~lakelog.io.guards.check_rows`). The next slice
    is checked on a thread while the caller writes this one (Arrow's kernels release
    the GIL), so the rules cost little beyond the write itself; a slice that breaks a
    rule raises before it is yielded, and the caller's error path deletes what it wrote."""

    def slices() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for start in range(0, batch.num_rows, CHECK_ROWS):
                yield batch.slice(start, CHECK_ROWS)
            if not batch.num_rows:
                yield batch

    with threads.pool("lakelog-check", 1) as pool:
        ahead: tuple[pa.RecordBatch, Future[None]] | None = None
        for part in slices():
            checking = pool.submit(check_rows, part, guards)
            if ahead is not None:
                ahead[1].result()
                yield ahead[0]
            ahead = (part, checking)
        if ahead is not None:
            ahead[1].result()
            yield ahead[0]
