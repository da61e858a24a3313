"""What the row-level jobs share: the records tasks send back, a job's picklable
description, and the driver's helpers to run and collect tasks."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pyarrow as pa

from ...core import TableCore, write_options_from
from ...io.schema import conform
from ...io.writer import WriteOptions
from ...leases import Lease
from ...log.actions import AddFile, ChangeFile, DataFile
from ...log.snapshot import Snapshot
from ...rowlevel.base import Counts
from ...rowlevel.change_files import ChangeWriter, feed_enabled
from ...rowlevel.execute import Context, FileOutcome, RowSink
from ...storage import Storage
from ...transforms import PartitionSpec
from ..errors import carry, lakelog_error
from ..read import spark_url

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ...core import TableHandle

__all__ = [
    "FID",
    "Job",
    "MARK",
    "RECORDS",
    "ROUTE",
    "TASKS_PER_CORE",
    "by_file",
    "collect_records",
    "conformed_rows",
    "decode_records",
    "discard_files",
    "discard_outcomes",
    "driver_context",
    "make_job",
    "map_in_arrow",
    "open_target",
    "require_executors",
    "route_of",
    "session_cores",
    "spread_files",
    "task_record",
    "task_records",
]

TASKS_PER_CORE = 2
"""Tasks a change's files are spread over, per core of the session (each task keeps one
sink of updated rows, so fewer tasks write fewer small files with deletion vectors)."""

RECORDS = "kind string, payload binary"
FID = "__lakelog_file"
ROUTE = "__lakelog_route"
MARK = "__lakelog_marker"


class _Outcome(msgspec.Struct, frozen=True):
    """One file a task probed or changed (a :class:`FileOutcome` as JSON)."""

    file: DataFile
    deleted: int
    updated: int
    kept: int
    adds: list[AddFile]


def task_record(kind: str, payload: bytes) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([kind], pa.string()), pa.array([payload], pa.binary())], names=["kind", "payload"]
    )


def task_records(
    outcomes: Sequence[FileOutcome], new: Sequence[AddFile], changes: Sequence[ChangeFile] = ()
) -> Iterator[pa.RecordBatch]:
    for o in outcomes:
        c = o.counts
        yield task_record(
            "file", msgspec.json.encode(_Outcome(o.file, c.deleted, c.updated, c.kept, o.adds))
        )
    if new:
        yield task_record("new", msgspec.json.encode(list(new)))
    if changes:
        yield task_record("cdc", msgspec.json.encode(list(changes)))


@dataclasses.dataclass(frozen=True)
class Job:
    """What every task of one change needs (shipped in its closure)."""

    uri: str
    storage_options: dict[str, Any]
    schema: pa.Schema
    partition_by: tuple[str, ...]
    version: int
    options: WriteOptions
    lease_id: str
    vectors: dict[str, Any]
    """:meth:`Context.vector_settings` of the table."""
    files: dict[int, DataFile] = dataclasses.field(default_factory=dict)
    slots: tuple[tuple[int, ...], ...] = ()
    feed: bool = False
    """Whether tasks record change files (``lakelog.change_data_feed``)."""
    spec: PartitionSpec | None = None
    """The table's current spec of transforms: the files tasks write record its values
    in their tags, as the embedded change's do."""

    def context(self) -> Context:
        ctx = Context(
            storage=Storage(self.uri, self.storage_options),
            schema=self.schema,
            partition_by=self.partition_by,
            spec=self.spec,
            version=self.version,
            options=self.options,
            lease_id=self.lease_id,
            **self.vectors,
        )
        if self.feed:
            ctx = dataclasses.replace(ctx, feed=self.change_writer(ctx.storage))
        return dataclasses.replace(ctx, sink=RowSink(ctx)) if ctx.vectors else ctx

    def change_writer(self, storage: Storage) -> ChangeWriter:
        """The writer of a task's change files (named with the run's lease)."""
        return ChangeWriter(
            storage,
            schema=self.schema,
            partition_by=self.partition_by,
            options=self.options,
            lease_id=self.lease_id,
        )


def discard_outcomes(
    ctx: Context, outcomes: Sequence[FileOutcome], extra: Sequence[str] = ()
) -> None:
    paths = [p for o in outcomes for p in o.written] + list(extra)
    if ctx.sink is not None:
        paths += ctx.sink.written()
    if ctx.feed is not None:
        paths += ctx.feed.written()
    try:
        ctx.storage.delete(list(dict.fromkeys(paths)))
    except Exception:  # noqa: BLE001 - vacuum removes what this cannot
        pass


def conformed_rows(
    rows: pa.Table, schema: pa.Schema, computed: Sequence[str], missing: Sequence[str] = ()
) -> pa.Table:
    """Rows as Spark sent them, the table's columns converted to the table's types (those
    the source lacks stay null: no clause reads them)."""
    own = pa.schema([f for f in schema if f.name not in missing])
    batches = []
    for b in rows.to_batches():
        if b.num_rows:
            mine = conform(b.select(own.names), own)
            arrays = [
                mine.column(f.name) if f.name in own.names else pa.nulls(b.num_rows, f.type)
                for f in schema
            ]
            batches.append(pa.RecordBatch.from_arrays(arrays, schema=schema))
    table = pa.Table.from_batches(batches, schema=schema)
    for name in computed:
        table = table.append_column(name, rows.column(name))
    return table


def by_file(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, pa.Table]]:
    """Consecutive rows of one file (the rows arrive sorted by file)."""
    current: int | None = None
    parts: list[pa.RecordBatch] = []
    for b in batches:
        if not b.num_rows:
            continue
        fids = np.asarray(b.column(FID).to_numpy(zero_copy_only=False))
        cuts = np.flatnonzero(fids[1:] != fids[:-1]) + 1
        start = 0
        for stop in [*cuts.tolist(), len(fids)]:
            fid = int(fids[start])
            if fid != current and parts:
                assert current is not None
                yield current, pa.Table.from_batches(parts)
                parts = []
            current = fid
            parts.append(b.slice(start, stop - start))
            start = stop
    if parts and current is not None:
        yield current, pa.Table.from_batches(parts)


def open_target(uri: str, storage_options: Mapping[str, Any] | None) -> TableHandle:
    storage = Storage(uri, storage_options)
    spark_url(storage)  # refuses filesystems the executors cannot reach
    return TableCore.load(storage)


def session_cores(spark: SparkSession) -> int:
    from ..runner import default_parallelism

    return default_parallelism(spark)


def require_executors(spark: SparkSession) -> None:
    from ..environment import check_executors

    check_executors(spark)


def spread_files(files: Sequence[DataFile], n: int) -> tuple[tuple[int, ...], ...]:
    """File numbers spread over ``n`` tasks, largest first onto the least loaded."""
    n = max(1, min(n, len(files)))
    load = [0] * n
    out: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(range(len(files)), key=lambda i: -files[i].size_bytes):
        s = load.index(min(load))
        out[s].append(i)
        load[s] += files[i].size_bytes + 1
    return tuple(tuple(sorted(s)) for s in out)


_ROUTES: dict[int, np.ndarray] = {}


def route_of(job: Job, fid: int) -> int:
    """The value whose Spark hash partition is the task of ``fid``'s slot."""
    from ..cluster_job import partition_values

    n = len(job.slots)
    values = _ROUTES.get(n)
    if values is None:
        values = _ROUTES[n] = partition_values(n)
    slot = next(i for i, s in enumerate(job.slots) if fid in s)
    return int(values[slot])


def make_job(
    table: TableHandle, snap: Snapshot, lease: Lease, files: Sequence[DataFile], cores: int
) -> Job:
    return Job(
        uri=table.storage.uri,
        storage_options=dict(table.storage.storage_options),
        schema=snap.schema,
        partition_by=tuple(snap.partition_by),
        version=snap.version,
        options=write_options_from(snap.properties),
        lease_id=lease.lease_id,
        vectors=Context.vector_settings(snap.properties),
        files=dict(enumerate(files)),
        slots=spread_files(files, TASKS_PER_CORE * cores) if files else (),
        feed=feed_enabled(snap.properties),
        spec=snap.partition_spec,
    )


def driver_context(table: TableHandle, snap: Snapshot) -> Context:
    """What the rebase reads and (for delete and update) rewrites winners' files with."""
    return Context(
        storage=table.storage,
        schema=snap.schema,
        partition_by=snap.partition_by,
        spec=snap.partition_spec,
        version=snap.version,
        options=write_options_from(snap.properties),
        lease_id=None,
        **Context.vector_settings(snap.properties),
    )


def map_in_arrow(df: DataFrame, fn: Any, schema: Any) -> DataFrame:
    """``df.mapInArrow(fn, schema)``, without PySpark's warning about pandas 3: these
    functions take and give Arrow batches, pandas is never involved."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas")
        return df.mapInArrow(carry(fn), schema)  # its lakelog errors keep their class


def collect_records(df: DataFrame, what: str) -> list[Any]:
    """Run a job of task records; a lakelog error raised in a task is raised again here
    as the same class."""
    try:
        return df.collect()
    except Exception as e:
        found = lakelog_error(e)
        if found is None:
            raise
        raise found from None


@dataclasses.dataclass
class _Decoded:
    """What a job's tasks sent back: file outcomes, new files, change files, and the
    staged files of the keys a merge matched."""

    outcomes: list[FileOutcome] = dataclasses.field(default_factory=list)
    new: list[AddFile] = dataclasses.field(default_factory=list)
    changes: list[ChangeFile] = dataclasses.field(default_factory=list)
    matched: list[str] = dataclasses.field(default_factory=list)
    marks: list[dict[str, int]] = dataclasses.field(default_factory=list)
    """Per insert task: the last identity value it gave out, per column."""


def decode_records(rows: Sequence[Any]) -> _Decoded:
    out = _Decoded()
    for r in rows:
        payload = bytes(r.payload)
        if r.kind == "file":
            o = msgspec.json.decode(payload, type=_Outcome)
            out.outcomes.append(FileOutcome(o.file, Counts(o.deleted, o.updated, o.kept), o.adds))
        elif r.kind == "new":
            out.new += msgspec.json.decode(payload, type=list[AddFile])
        elif r.kind == "cdc":
            out.changes += msgspec.json.decode(payload, type=list[ChangeFile])
        elif r.kind == "matched":
            out.matched.append(payload.decode())
        elif r.kind == "marks":
            out.marks.append(msgspec.json.decode(payload, type=dict[str, int]))
    return out


def discard_files(
    storage: Storage,
    outcomes: Sequence[FileOutcome],
    new: Sequence[AddFile],
    changes: Sequence[ChangeFile] = (),
) -> None:
    paths = [p for o in outcomes for p in o.written] + [a.path for a in new]
    paths += [c.path for c in changes]
    if paths:
        try:
            storage.delete(list(dict.fromkeys(paths)))
        except Exception:  # noqa: BLE001 - vacuum removes what this cannot
            pass
