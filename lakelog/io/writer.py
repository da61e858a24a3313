"""Rolling Parquet writer: bounded files, bounded row groups, stats from footers.

Memory is bounded by one row group per open partition: batches are buffered
until ``row_group_size`` rows, written as one row group, and a file is closed
once its size reaches ``target_file_size`` (or its row count ``target_rows``,
when given: then row groups are also cut so no file exceeds it).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InvalidArgumentError
from ..log.actions import AddFile
from ..partitioning import check_partition_dir, partition_dir, partition_string
from ..stats import stats_from_metadata
from ..storage import Storage

__all__ = [
    "CODECS",
    "RollingWriter",
    "WriteOptions",
    "check_codec",
    "split_partitions",
    "write_files",
]

CODECS = ("none", "snappy", "gzip", "brotli", "lz4", "zstd")


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
        self.schema = file_schema
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

    def _row_group_limit(self) -> int:
        """Rows the current row group may hold (less near a ``target_rows`` cut)."""
        limit = self.options.row_group_size
        target_rows = self.options.target_rows
        if target_rows is not None:
            limit = min(limit, target_rows - self._rows_in_file)
        return limit

    def write(self, batch: pa.RecordBatch) -> None:
        while batch.num_rows:
            limit = self._row_group_limit()
            take = min(batch.num_rows, limit - self._buffered_rows)
            self._buffer.append(batch.slice(0, take))
            self._buffered_rows += take
            batch = batch.slice(take)
            if self._buffered_rows >= limit:
                self._flush_row_group()

    def _open(self) -> None:
        name = f"{self.prefix}-{self._seq:05d}-{self.run_id}.parquet"
        self._seq += 1
        self._path = f"{self.folder}/{name}" if self.folder else name
        self._sink = self.storage.open_output(self._path)
        codec = self.options.compression
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
        )
        self._rows_in_file = 0

    def _flush_row_group(self) -> None:
        if not self._buffered_rows:
            return
        if self._writer is None:
            self._open()
        assert self._writer is not None and self._sink is not None
        table = pa.Table.from_batches(self._buffer, schema=self.schema)
        self._writer.write_table(table, row_group_size=self._buffered_rows)
        self._rows_in_file += self._buffered_rows
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
        writer.close()
        sink.close()
        md = writer.writer.metadata
        size = int(self.storage.fs.size(self.storage.full(self._path)))
        self.written.append(
            AddFile(
                path=self._path,
                size_bytes=size,
                num_rows=md.num_rows,
                partition=self.partition,
                stats=stats_from_metadata(md, self.schema),
                data_change=True,
                modification_ms=int(time.time() * 1000),
                tags=dict(self.options.tags),
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


def split_partitions(
    batch: pa.RecordBatch, partition_by: Sequence[str]
) -> list[tuple[dict[str, str | None], pa.RecordBatch]]:
    """Split a batch by the values of the partition columns (one slice each)."""
    if not partition_by:
        return [({}, batch)]
    if batch.num_rows == 0:
        return []
    codes = np.zeros(batch.num_rows, dtype=np.int64)
    for col in partition_by:
        enc = pc.dictionary_encode(batch.column(col), null_encoding="encode")
        idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        codes = codes * (len(enc.dictionary) + 1) + idx
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    ends = np.r_[starts[1:], len(order)]
    taken = batch.take(pa.array(order))
    out = []
    for s, e in zip(starts, ends, strict=True):
        part = taken.slice(int(s), int(e - s))
        values = {c: partition_string(part.column(c)[0].as_py()) for c in partition_by}
        out.append((values, part))
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
) -> list[AddFile]:
    """Write conforming batches (full table schema) as data files.

    On error every file this call wrote is deleted before the error
    propagates, so a failed write leaves nothing behind it can know of. A
    partition folder name too long for a filesystem is refused before any of a
    batch's rows are written (:func:`~lakelog.partitioning.check_partition_dir`).
    """
    file_schema = pa.schema([f for f in schema if f.name not in partition_by])
    writers: dict[tuple[tuple[str, str | None], ...], RollingWriter] = {}
    try:
        for batch in batches:
            # a writer per new partition first (its folder name checked), then write
            todo: list[tuple[RollingWriter, pa.RecordBatch]] = []
            for values, part in split_partitions(batch, partition_by):
                key = tuple(sorted(values.items(), key=lambda kv: kv[0]))
                w = writers.get(key)
                if w is None:
                    check_partition_dir(partition_by, values)
                    w = writers[key] = RollingWriter(
                        storage,
                        file_schema=file_schema,
                        partition=values,
                        partition_by=partition_by,
                        options=options,
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
