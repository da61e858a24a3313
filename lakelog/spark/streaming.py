"""``df.writeStream.format("lakelog")``: a Structured Streaming sink, exactly once.

Spark runs a micro-batch's tasks, then calls the sink's commit on the driver, and
records the batch as done in its checkpoint (``commits/<batch id>``) only after that
commit returned. A driver killed in between runs the batch again when the query
restarts from the checkpoint: the same batch id over the same input. So each
micro-batch is one lakelog commit that carries an app transaction
(``docs/format.md``, "App transactions"): ``app_id`` the query's id, ``app_version``
the batch id. A batch whose version the table already records commits nothing, and
the replay's files are deleted.

* **The query's id** is the one Spark keeps in the checkpoint (``query.id``, the
  same after a restart from the same ``checkpointLocation``; a new checkpoint is a new
  query). The sink's Python objects are not given it, but Spark's tasks carry it as a
  local property, so each task sends it back with its files. Option ``txnAppId``
  replaces it (it must then change whenever the checkpoint is reset: batch ids start
  again at 0 and would be skipped as already written).
* **Executors**: each task writes its rows with lakelog's Parquet writer
  (:func:`~lakelog.spark.batch.write_task_files`) and returns the ``add``
  actions. Its files carry the micro-batch's writer lease id (Spark builds the tasks'
  writer once per batch, which draws it); the task announces the lease before its
  first file and renews it while it writes, without naming its process (the lease
  outlives the task: it is judged by its expiry alone, ``docs/format.md``, "Writer
  leases").
* **The driver** takes the lease over (renews it as its own; if a task's last renewal
  expired before that, the lease check verifies the files still exist before the
  put), commits every task's files in one commit through
  :func:`~lakelog.spark.modes.commit_written` (the batch writer's commit: append,
  or for ``outputMode("complete")`` an overwrite of the whole table; a
  ``mergeSchema`` evolution in the same commit), and releases the lease. ``abort``
  deletes the batch's files when a task failed, and keeps them when every task
  succeeded: Spark also aborts a batch whose commit failed, which may have landed.

An append micro-batch without rows commits nothing.

On a table with ``lakelog.auto_compact`` on, the commit call runs the auto-compaction of
the partitions the batch touched once the batch's commit landed
(:func:`~lakelog.spark.modes.auto_compact_here`: embedded, inline, within
``lakelog.auto_compact.max_bytes``); it never raises, so it never fails the batch or makes
Spark run it again.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from itertools import chain
from types import TracebackType
from typing import TYPE_CHECKING

import msgspec
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from ..core import WritePlan, staged
from ..errors import (
    InvalidArgumentError,
    SchemaMismatchError,
    TableNotFoundError,
)
from ..io.parquet_settings import check_parquet_properties
from ..io.schema import readable_as
from ..leases import Lease, LeaseRecord, lease_path
from ..log.actions import AddFile
from ..log.snapshot import Snapshot, load_snapshot
from ..properties import get_float, validate_properties
from ..storage import Storage
from ..transaction import CommitResult, app_transaction, skipped_result
from ..transforms import PartitionSpec, partition_layout
from .batch import TaskFiles, decode_adds, write_task_files
from .errors import carry
from .modes import (
    as_written,
    auto_compact_here,
    commit_written,
    dataframe_plan,
    numbered_columns,
    same_partitioning,
)
from .options import stream_write_options
from .schema import to_arrow_schema

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["CREATE_OPERATION", "OPERATION", "QUERY_ID_PROPERTY", "StreamWriter"]

log = logging.getLogger("lakelog.spark")

OPERATION = "SPARK STREAMING WRITE"
"""The commit operation of a micro-batch (and its writer lease's)."""
CREATE_OPERATION = "SPARK STREAMING CREATE TABLE"
"""The commit operation of the micro-batch that creates the table."""
QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The local property in which Spark's tasks carry the query's (checkpointed) id."""


class _BatchFiles(TaskFiles):
    """A task's commit message: its files (``adds``, as the batch writer's), the
    query's id, and the lease its files were written under with the expiry of its
    last renewal (None: the task wrote no file)."""

    def __init__(
        self,
        adds: bytes,
        *,
        query_id: str | None,
        lease_id: str | None = None,
        expires_ms: int = 0,
        schema: bytes = b"",
        partition_by: tuple[str, ...] = (),
    ) -> None:
        super().__init__(adds)
        self.query_id = query_id
        self.lease_id = lease_id
        self.expires_ms = expires_ms
        self.schema = schema
        self.partition_by = partition_by


class _TaskLease:
    """The micro-batch's writer lease as one task holds it: announced before the task's
    first file and renewed every ``ttl / 4`` while it writes, then left in place for the
    driver to take over. The record names no process (``process`` absent): several
    tasks share the lease and it outlives each of them, so vacuum judges it by its
    expiry alone, never by a task's process having ended."""

    def __init__(self, storage: Storage, lease_id: str, ttl_ms: int) -> None:
        self.storage = storage
        self.lease_id = lease_id
        self.ttl_ms = ttl_ms
        self.created_ms = int(time.time() * 1000)
        self.expires_ms = 0
        """Expiry of the last renewal that reached the storage."""
        self._stop = threading.Event()

    def renew(self) -> None:
        now = int(time.time() * 1000)
        record = LeaseRecord(
            lease_id=self.lease_id,
            operation=OPERATION,
            host=socket.gethostname(),
            pid=os.getpid(),
            created_ms=self.created_ms,
            expires_ms=now + self.ttl_ms,
            ttl_ms=self.ttl_ms,
        )
        self.storage.write_bytes(lease_path(self.lease_id), msgspec.json.encode(record))
        self.expires_ms = record.expires_ms

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl_ms / 4000):
            try:
                self.renew()
            except Exception as e:  # noqa: BLE001 - retried next beat; the driver's check sees a lapse
                log.warning("could not renew writer lease %s: %r", self.lease_id, e)

    def __enter__(self) -> _TaskLease:
        self.renew()
        threading.Thread(target=self._beat, name="lakelog-stream-lease", daemon=True).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()  # the lease file stays: the driver takes it over, or it expires


def _take_over(storage: Storage, lease_id: str, expires_ms: int, ttl_ms: int) -> Lease:
    """The micro-batch's lease held by this (the committing) process. ``expires_ms``:
    the earliest expiry a task left it with; renewing later than that counts as a lapse,
    so the check before the put waits out any vacuum that saw it expired and verifies
    that every file still exists (:meth:`~lakelog.leases.Lease.check`)."""
    lease = Lease(storage, operation=OPERATION, ttl_s=ttl_ms / 1000)
    lease.lease_id = lease_id
    lease.expires_ms = expires_ms
    lease.renew()
    return lease


def _table(storage: Storage) -> Snapshot | None:
    try:
        return load_snapshot(storage)
    except TableNotFoundError:
        return None


@carry
class StreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    """The sink's writer. Spark builds one on the driver when it plans a micro-batch
    (pickled to the tasks, which call :meth:`write`) and another for the batch's
    :meth:`commit` or :meth:`abort`; both read the table and check the options then."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        opts = stream_write_options(options, overwrite=overwrite)  # by name, first
        self.overwrite = overwrite
        self.spark_schema = schema
        self.spec, self.app_id = opts.spec, opts.app_id
        storage = opts.storage()
        self.uri = storage.uri
        self.storage_options = storage.storage_options
        table = _table(storage)
        self.partition_spec = None if table is None else table.partition_spec
        plan, parts, props = self._plan(table)
        self.schema_bytes = plan.schema.serialize().to_pybytes()
        self.partition_by = parts
        self.props = props
        self.ttl_ms = max(1, int(get_float(props, "lakelog.lease.ttl_seconds") * 1000))
        self.lease_id = uuid.uuid4().hex  # the micro-batch's writer lease (tasks take it)

    def _plan(self, snap: Snapshot | None) -> tuple[WritePlan, tuple[str, ...], dict[str, str]]:
        """The schema the batch's files are written with, the partition columns and the
        table properties: the table's (evolved by ``mergeSchema``), or the DataFrame's
        for a table the batch creates."""
        spec = self.spec
        if snap is None:
            schema = to_arrow_schema(self.spark_schema)
            parts, specs = partition_layout(schema, spec.partition_by)
            # a spec of transforms: the tasks split rows by it, the table is created with it
            self.partition_spec = PartitionSpec.of(0, specs[0]) if specs else None
            props = validate_properties(spec.properties or {})
            check_parquet_properties(props, schema, parts)
            return WritePlan(schema), tuple(parts), props
        if spec.partition_by and not same_partitioning(snap, spec.partition_by):
            raise SchemaMismatchError(
                f"expected option partitionBy {','.join(snap.partitioning)!r} of the "
                f"existing table, found {','.join(spec.partition_by)!r}; omit partitionBy "
                f"when writing to an existing table."
            )
        plan = dataframe_plan(self.spark_schema, snap, spec.schema_mode)
        return plan, tuple(snap.partition_by), dict(snap.properties)

    # -- executors -----------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None
        batches = (b for b in iterator if b.num_rows)
        first = next(batches, None)
        if first is None:  # no rows: no file, no lease
            return _BatchFiles(b"[]", query_id=query_id)
        storage = Storage(self.uri, self.storage_options)
        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_bytes))
        with _TaskLease(storage, self.lease_id, self.ttl_ms) as lease:
            adds = write_task_files(
                storage,
                chain([first], batches),
                schema=schema,
                partition_by=self.partition_by,
                properties=self.props,
                lease_id=self.lease_id,
                spec=self.partition_spec,
            )
        return _BatchFiles(
            msgspec.json.encode(adds),
            query_id=query_id,
            lease_id=self.lease_id,
            expires_ms=lease.expires_ms,
            schema=self.schema_bytes,
            partition_by=self.partition_by,
        )

    # -- the driver ----------------------------------------------------------------
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent = [m for m in messages if isinstance(m, _BatchFiles)]
        adds = [a for m in sent for a in decode_adds(m.adds)]
        storage = Storage(self.uri, self.storage_options)
        leased = [m for m in sent if m.lease_id is not None]
        lease = None
        if leased:
            ids = {m.lease_id for m in leased}
            if len(ids) > 1:  # one writer object per micro-batch: cannot happen
                raise InvalidArgumentError(
                    f"expected the tasks of micro-batch {batchId} to write under one lease, "
                    f"found {sorted(str(i) for i in ids)}; nothing was committed."
                )
            lease = _take_over(
                storage, leased[0].lease_id or "", min(m.expires_ms for m in leased), self.ttl_ms
            )
        try:
            result = self._commit(storage, sent, adds, batchId, lease)
        finally:
            if lease is not None:
                lease.release()
        if result is not None and result.skipped:
            log.info(
                "micro-batch %d of %s already committed at version %d: skipped",
                batchId,
                self.uri,
                result.version,
            )
        # the batch landed; Spark records it done when this call returns
        auto_compact_here(storage, result, entry=f"micro-batch {batchId}")

    def _commit(
        self,
        storage: Storage,
        sent: list[_BatchFiles],
        adds: list[AddFile],
        batch_id: int,
        lease: Lease | None,
    ) -> CommitResult | None:
        if not adds and not self.overwrite:
            return None  # an append without rows: nothing to record
        with staged(storage) as files:  # refused before any commit: the files go
            files.add(adds)
            app_id = self.app_id or self._query_id(sent, batch_id)
            app = None if app_id is None else app_transaction(app_id, batch_id)
            snap = _table(storage)
            done = skipped_result(snap, app, operation=OPERATION)
            if done is not None:  # a replayed micro-batch: already in the table
                files.discard()
                return done
            plan, parts, props = self._plan(snap)
            written = next((m for m in sent if m.lease_id is not None), None)
            numbered_from = None
            if written is not None:
                _check_written(written, plan.schema, parts)
                # the files hold columns under the physical names of the plan they were
                # written with (format.md, "Column ids"): keep those, or refuse
                numbered_from = pa.ipc.read_schema(pa.py_buffer(written.schema))
                plan = as_written(plan, numbered_from, snap)
        return commit_written(
            storage,
            snap,
            adds,
            dataclasses.replace(self.spec, app=app),
            plan=plan,
            partition_by=parts
            if snap is not None or self.partition_spec is None
            else self.partition_spec.texts,
            properties=props,
            lease=lease,
            parameters={"output_mode": "complete" if self.overwrite else "append"},
            operation=OPERATION,
            create_operation=CREATE_OPERATION,
            # the identity values the tasks gave out, moved past snap's (modes.py)
            numbered=[decode_adds(m.adds) for m in sent],
            numbered_from=numbered_from,
            numbers=()
            if numbered_from is None
            else numbered_columns(numbered_from, self.spark_schema.fieldNames()),
        )

    def _query_id(self, sent: list[_BatchFiles], batch_id: int) -> str | None:
        ids = {m.query_id for m in sent if m.query_id}
        if len(ids) > 1:
            raise InvalidArgumentError(
                f"expected the tasks of micro-batch {batch_id} to belong to one streaming "
                f"query, found ids {sorted(str(i) for i in ids)}; nothing was committed."
            )
        if ids:
            return ids.pop()
        if sent:  # tasks ran but Spark did not tell them their query
            raise InvalidArgumentError(
                f"expected Spark to give the writer tasks the streaming query's id (local "
                f"property {QUERY_ID_PROPERTY}), found none; set "
                f".option('txnAppId', '<a name unique to this query>') for exactly-once "
                f"micro-batches. Nothing was committed."
            )
        return None  # no task at all: an empty complete-mode result, idempotent anyway

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Delete the micro-batch's files when a task failed. Spark also aborts when the
        commit itself failed, and then the commit may have landed (a driver killed after
        its put): those files stay (vacuum removes them if they are orphans). A failed
        task leaves its slot empty (None), and Spark never commits such a batch."""
        sent = [m for m in messages if isinstance(m, _BatchFiles)]
        if not sent:
            return
        if len(sent) == len(messages):
            log.warning(
                "micro-batch %d of %s aborted after its tasks succeeded: its files stay "
                "(the commit may have landed; vacuum removes them otherwise)",
                batchId,
                self.uri,
            )
            return
        storage = Storage(self.uri, self.storage_options)
        storage.delete([a.path for m in sent for a in decode_adds(m.adds)])
        storage.delete(sorted({lease_path(m.lease_id) for m in sent if m.lease_id}))


def _check_written(sent: _BatchFiles, schema: pa.Schema, parts: tuple[str, ...]) -> None:
    """Refuse files the table cannot take any more: it changed while the micro-batch ran
    (another partitioning, or a column dropped or narrowed)."""
    written = pa.ipc.read_schema(pa.py_buffer(sent.schema))
    if written.equals(schema) and sent.partition_by == parts:
        return
    problems = []
    if sent.partition_by != parts:
        problems.append(f"partition_by {list(sent.partition_by)} vs {list(parts)}")
    for f in written:
        if f.name not in schema.names:
            problems.append(f"column {f.name!r} is gone")
        elif not readable_as(f.type, schema.field(f.name).type, dropped=False):
            problems.append(f"column {f.name!r}: {f.type} vs {schema.field(f.name).type}")
    missing = [f.name for f in schema if f.name not in written.names and not f.nullable]
    problems += [f"non-nullable column {n!r} is new" for n in missing]
    if problems:
        raise SchemaMismatchError(
            f"expected the table to take the micro-batch's files as written, found it "
            f"changed while the batch ran ({'; '.join(problems)}); nothing was committed. "
            f"Restart the query: the batch is written again against the new table."
        )
