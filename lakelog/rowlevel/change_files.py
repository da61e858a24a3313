"""Change files: the rows a row-level change deleted, inserted or updated, written as it runs.

With ``lakelog.change_data_feed=true`` on the snapshot a change reads, the executor hands
every row it deletes (``delete``), every updated row before and after (``update_preimage``,
``update_postimage``) and every row it inserts (``insert``) to one :class:`ChangeWriter`,
which the change's commit lists as ``cdc`` actions (``docs/format.md``, "Change data
feed"). The rows come from the batches the executor reads anyway to rewrite or mark a
file: recording them reads no file twice (except a file a copy-on-write change removes
whole, whose rows it would not read otherwise).

Memory is bounded: rows are buffered per partition and written as one Parquet file under
``_change_data/`` once the partition holds :data:`BUFFER_BYTES`, or all of them once
every partition together holds four times that. File names carry the writer's lease id,
as data files do, so vacuum keeps them until the change committed or gave up, and the
change stages them (:mod:`lakelog.core.staged`) so that a change that did not land
deletes them.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InvalidArgumentError
from ..io.writer import WriteOptions, split_partitions
from ..log import mapping
from ..log.actions import AddFile, ChangeFile, DataFile
from ..log.feed import CHANGE_DIR, CHANGE_TYPE, CHANGE_TYPES, PROPERTY
from ..partitioning import check_partition_dir
from ..properties import get_bool
from ..storage import Storage
from .read import read_rows

if TYPE_CHECKING:
    from .execute import Context

__all__ = ["BUFFER_BYTES", "ChangeWriter", "change_writer", "feed_enabled"]

BUFFER_BYTES: Final = 4 * 1024 * 1024
"""Rows of one partition buffered before they are written as a change file."""
_TOTAL_FACTOR: Final = 4
"""All partitions together buffer at most this many times :data:`BUFFER_BYTES`."""


def feed_enabled(properties: Mapping[str, str]) -> bool:
    """Whether a change on a table with ``properties`` records change files."""
    return get_bool(properties, PROPERTY)


def change_writer(ctx: Context, properties: Mapping[str, str]) -> ChangeWriter | None:
    """The writer of the change files of a change run with ``ctx`` on a snapshot with
    ``properties``, or None when the table does not record the feed."""
    if not feed_enabled(properties):
        return None
    return ChangeWriter(
        ctx.storage,
        schema=ctx.schema,
        partition_by=ctx.partition_by,
        options=ctx.options,
        lease_id=ctx.lease_id,
    )


PartitionKey = tuple[tuple[str, str | None], ...]


class ChangeWriter:
    """Buffers change rows per partition and writes them as change files (thread-safe).

    Rows given to :meth:`add` have the table's columns (``schema``, partition columns
    included); a file holds them without the partition columns, then
    :data:`~lakelog.log.feed.CHANGE_TYPE`. :meth:`flush` writes what is buffered and
    returns the ``cdc`` actions of every file written; :meth:`written` lists their paths
    at any time (for staging)."""

    def __init__(
        self,
        storage: Storage,
        *,
        schema: pa.Schema,
        partition_by: Sequence[str],
        options: WriteOptions,
        lease_id: str | None,
        buffer_bytes: int = BUFFER_BYTES,
    ) -> None:
        self.storage = storage
        self.schema = schema
        self.partition_by = tuple(partition_by)
        self.options = options
        self.buffer_bytes = buffer_bytes
        self.lease_id = lease_id
        unique = uuid.uuid4().hex
        # names carry the writer's lease id, so vacuum keeps them until the commit
        self.run_id = unique if lease_id is None else f"{lease_id}-{unique[:16]}"
        self.file_schema = pa.schema(
            [f for f in schema if f.name not in self.partition_by]
            + [pa.field(CHANGE_TYPE, pa.string(), nullable=False)]
        )
        self._lock = threading.Lock()
        self._buffers: dict[PartitionKey, list[pa.RecordBatch]] = {}
        self._sizes: dict[PartitionKey, int] = {}
        self._total = 0
        self._seq = 0
        self._files: list[ChangeFile] = []
        self._paths: list[str] = []

    def sibling(self) -> ChangeWriter:
        """A new writer with the same settings (files of its own: a rebase's)."""
        return ChangeWriter(
            self.storage,
            schema=self.schema,
            partition_by=self.partition_by,
            options=self.options,
            lease_id=self.lease_id,
            buffer_bytes=self.buffer_bytes,
        )

    # -- recording -----------------------------------------------------------------------

    def add(self, rows: pa.RecordBatch | pa.Table, change_type: str) -> None:
        """Record ``rows`` (the table's columns) as changes of ``change_type``."""
        if change_type not in CHANGE_TYPES:
            raise InvalidArgumentError(
                f"expected a change type among {CHANGE_TYPES}, found {change_type!r}"
            )
        batches = rows.to_batches() if isinstance(rows, pa.Table) else [rows]
        todo: list[tuple[PartitionKey, list[pa.RecordBatch]]] = []
        for batch in batches:
            if not batch.num_rows:
                continue
            typed = pa.repeat(pa.scalar(change_type, pa.string()), batch.num_rows)
            for values, part in split_partitions(batch, self.partition_by):
                key = tuple((c, values.get(c)) for c in self.partition_by)
                cols = [part.column(f.name) for f in self.file_schema if f.name != CHANGE_TYPE]
                out = pa.RecordBatch.from_arrays(
                    [*cols, typed.slice(0, part.num_rows)], schema=self.file_schema
                )
                with self._lock:
                    todo += self._buffer(key, out)
        for key, parts in todo:
            self._write(key, parts)

    def add_files(
        self, files: Iterable[AddFile | DataFile], change_type: str, *, version: int | None = None
    ) -> None:
        """Record every live row of ``files`` (data files of this table) as
        ``change_type``: the rows of files written elsewhere (by Spark tasks), or of a
        file a change removes whole without reading it."""
        for f in files:
            for batch in read_rows(
                self.storage, f, self.schema, self.partition_by, version=version
            ):
                self.add(batch, change_type)

    def _buffer(
        self, key: PartitionKey, batch: pa.RecordBatch
    ) -> list[tuple[PartitionKey, list[pa.RecordBatch]]]:
        """Buffer ``batch`` (under the lock); the buffers now due to be written, taken."""
        self._buffers.setdefault(key, []).append(batch)
        self._sizes[key] = self._sizes.get(key, 0) + batch.nbytes
        self._total += batch.nbytes
        if self._total >= _TOTAL_FACTOR * self.buffer_bytes:
            return [self._take(k) for k in list(self._buffers)]
        if self._sizes[key] >= self.buffer_bytes:
            return [self._take(key)]
        return []

    def _take(self, key: PartitionKey) -> tuple[PartitionKey, list[pa.RecordBatch]]:
        parts = self._buffers.pop(key)
        self._total -= self._sizes.pop(key)
        return key, parts

    # -- writing -------------------------------------------------------------------------

    def _write(self, key: PartitionKey, parts: list[pa.RecordBatch]) -> None:
        """One change file of ``parts`` (rows of the partition ``key``)."""
        partition = dict(key)
        folder = check_partition_dir(self.partition_by, partition) if self.partition_by else ""
        with self._lock:
            seq, self._seq = self._seq, self._seq + 1
        name = f"cdc-{seq:05d}-{self.run_id}.parquet"
        path = "/".join(p for p in (CHANGE_DIR, folder, name) if p)
        with self._lock:
            self._paths.append(path)  # staged before it exists: a failed write is removed
        # columns under their physical names, as in data files (format.md, "Column ids")
        physical = [mapping.to_physical(b, self.file_schema) for b in parts]
        table = pa.Table.from_batches(physical, schema=mapping.physical_schema(self.file_schema))
        codec = self.options.compression
        with self.storage.open_output(path) as sink:
            pq.write_table(
                table,
                sink,
                compression=None if codec == "none" else codec,
                row_group_size=self.options.row_group_size,
            )
        size = int(self.storage.fs.size(self.storage.full(path)))
        done = ChangeFile(path=path, size_bytes=size, num_rows=table.num_rows, partition=partition)
        with self._lock:
            self._files.append(done)

    def flush(self) -> list[ChangeFile]:
        """Write every buffered row; the ``cdc`` actions of all files written so far."""
        with self._lock:
            todo = [self._take(k) for k in list(self._buffers)]
        for key, parts in todo:
            self._write(key, parts)
        with self._lock:
            return sorted(self._files, key=lambda f: f.path)

    def written(self) -> list[str]:
        """Paths of every change file written or being written."""
        with self._lock:
            return list(self._paths)

    def discard(self) -> None:
        """Delete every file written and forget the buffered rows (a result not kept)."""
        with self._lock:
            paths, self._paths, self._files = self._paths, [], []
            self._buffers.clear()
            self._sizes.clear()
            self._total = 0
        if paths:
            try:
                self.storage.delete(paths)
            except Exception:  # noqa: BLE001 - vacuum removes what this cannot
                pass
