"""Row-level changes from Spark: merge a DataFrame, delete and update, on the executors.

:func:`merge`, :func:`delete` and :func:`update` mean what :meth:`lakelog.Table.merge`,
:meth:`~lakelog.Table.delete` and :meth:`~lakelog.Table.update` mean (``docs/changes.md``),
and run the embedded change code (:mod:`lakelog.changes`) file by file inside Spark tasks:

1. **Plan on the driver.** The latest snapshot; for a merge, ONE aggregate over the
   source (row count, duplicates, min/max of each key column, the distinct values of key
   columns that partition the table) prunes the target files. The driver never holds
   source or target rows.
2. **Route (merge).** A Spark job sends every source row (its key non-null) to each
   candidate file whose partition values and min/max statistics hold its key, so a file
   no source key can be in is never read; files are spread over a few tasks by size.
3. **Rewrite in tasks.** Each task reads its files with lakelog's deletion-vector-aware
   row reader, matches them with the source rows routed to them (:class:`MergeChange`,
   :class:`DeleteChange`, :class:`UpdateChange`, the embedded classes) and rewrites only
   the files with a row to change, or, with ``lakelog.deletion_vectors=true``, marks the
   changed rows in vectors and writes updated rows to new files (:mod:`.execute`'s
   ``process_file``), under the run's writer lease. Only file actions and row counts go
   back to the driver; a merge's tasks stage the keys they matched as Parquet.
4. **Insert (merge).** The source rows whose key matched nothing (an anti-join with the
   staged keys) are written by Spark tasks with lakelog's file writer.
5. **Commit on the driver.** One ``rowlevel`` commit through
   :func:`lakelog.changes.run.commit_outcomes`, the embedded path, with the embedded
   :class:`~lakelog.changes.conflicts.RowLevelRebase`: the conflict rules are the same.
   For a merge, whether a concurrently added file holds a source key is answered by a
   Spark job (the source lives on the executors), not by reading the source on the driver.

A failed job or a refused commit commits nothing and deletes the files it knows of; a
task killed mid-write leaves files under the expired lease for ``vacuum``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..changes.base import Counts, RowChange, Written
from ..changes.conflicts import RowLevelRebase
from ..changes.execute import Context, FileOutcome, RowSink, process_file
from ..changes.feed import ChangeWriter, feed_enabled
from ..changes.merge import (
    MergeChange,
    SourceKeys,
    check_keys,
    put_values,
    slice_within,
    sortable_keys,
)
from ..changes.predicate import DeleteChange, UpdateChange, Where, check_assignments
from ..changes.read import evaluate, matched, read_rows
from ..changes.result import ChangeResult, MergeReport
from ..changes.run import commit_outcomes
from ..core import TableCore, write_options_from
from ..errors import InvalidArgumentError, LakelogError
from ..filters import FileStatsColumns, FilterLike
from ..io.schema import conform
from ..io.writer import WriteOptions, write_files
from ..leases import Lease
from ..log.actions import AddFile, ChangeFile, DataFile
from ..log.changes import INSERT
from ..log.file_index import stats_columns
from ..log.files import files_from_adds
from ..log.snapshot import Snapshot
from ..partitioning import STAGING_DIR
from ..stats import referenced_columns
from ..storage import Storage
from .errors import carry, lakelog_error
from .filters import analysis_error, exact_expression, is_spark_column, spark_expression
from .read import columns_of, spark_url
from .schema import check_dataframe_schema, to_spark_schema
from .write import discard_staging

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from ..table import Table

__all__ = ["delete", "merge", "update"]

log = logging.getLogger("lakelog.spark")

TASKS_PER_CORE = 2
"""Tasks a change's files are spread over, per core of the session (each task keeps one
sink of updated rows, so fewer tasks write fewer small files with deletion vectors)."""
MAX_PARTITION_VALUES = 1000
"""Distinct values of a partition key column the source aggregate returns at most (more:
its min/max prune instead)."""

_RECORDS = "kind string, payload binary"
_FID = "__lakelog_file"
_ROUTE = "__lakelog_route"
_MARK = "__lakelog_marker"
_ORDER = "__lakelog_order"
_COUNT = "__lakelog_count"
_SOURCE = "source."
"""Prefix of the source row's columns in merge expressions (``pc.field("source.amount")``)."""


# -- what tasks send back ------------------------------------------------------------------


class _Outcome(msgspec.Struct, frozen=True):
    """One file a task probed or changed (a :class:`FileOutcome` as JSON)."""

    file: DataFile
    deleted: int
    updated: int
    kept: int
    adds: list[AddFile]


def _record(kind: str, payload: bytes) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([kind], pa.string()), pa.array([payload], pa.binary())], names=["kind", "payload"]
    )


def _records(
    outcomes: Sequence[FileOutcome], new: Sequence[AddFile], changes: Sequence[ChangeFile] = ()
) -> Iterator[pa.RecordBatch]:
    for o in outcomes:
        c = o.counts
        yield _record(
            "file", msgspec.json.encode(_Outcome(o.file, c.deleted, c.updated, c.kept, o.adds))
        )
    if new:
        yield _record("new", msgspec.json.encode(list(new)))
    if changes:
        yield _record("cdc", msgspec.json.encode(list(changes)))


@dataclasses.dataclass(frozen=True)
class _Job:
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

    def context(self) -> Context:
        ctx = Context(
            storage=Storage(self.uri, self.storage_options),
            schema=self.schema,
            partition_by=self.partition_by,
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


def _discard(ctx: Context, outcomes: Sequence[FileOutcome], extra: Sequence[str] = ()) -> None:
    paths = [p for o in outcomes for p in o.written] + list(extra)
    if ctx.sink is not None:
        paths += ctx.sink.written()
    if ctx.feed is not None:
        paths += ctx.feed.written()
    try:
        ctx.storage.delete(list(dict.fromkeys(paths)))
    except Exception:  # noqa: BLE001 - vacuum removes what this cannot
        pass


# -- delete and update -------------------------------------------------------------------------


def _predicate_task(
    job: _Job, change: RowChange
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The body of a delete/update task: the files of the slots it is given."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        slots = [int(v) for b in batches for v in b.column(0).to_pylist()]
        ctx = job.context()
        outcomes: list[FileOutcome] = []
        try:
            for s in slots:
                for fid in job.slots[s]:
                    outcomes.append(process_file(ctx, change, job.files[fid], write=True))
            new = ctx.sink.flush() if ctx.sink is not None else []
            changes = ctx.feed.flush() if ctx.feed is not None else []
        except BaseException:
            _discard(ctx, outcomes)
            raise
        yield from _records(outcomes, new, changes)

    return run


def delete(
    spark: SparkSession,
    uri: str,
    where: str | Column | FilterLike,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> ChangeResult:
    """:meth:`lakelog.Table.delete` with the candidate files read and rewritten (or marked,
    with deletion vectors) by Spark tasks; one commit on the driver.

    Args:
        spark: the session that runs the tasks.
        uri: the table's URI.
        where: the rows to delete: a Spark Column (``F.col("id") == 5``) or a Spark SQL
            string (``"day = '2026-11-02' and amount > 25"``), as ``lakelog.spark.read``'s
            filter takes it, meaning what it means in Spark; lakelog evaluates it in its
            tasks (comparisons, AND/OR/NOT, IN, IS NULL, arithmetic, CASE WHEN, casts:
            anything else is refused up front). DNF tuples or a pyarrow Expression are
            taken as the embedded delete takes them.
        storage_options: fsspec options for the table; default none.

    Returns:
        The change's figures and commit.
    """
    table = _open(uri, storage_options)
    snap = table.snapshot()
    change = DeleteChange(_where(spark, where, snap.schema, "DELETE"))
    return _run_predicate(spark, table, snap, change)


def update(
    spark: SparkSession,
    uri: str,
    where: str | Column | FilterLike,
    *,
    set: Mapping[str, Any],
    storage_options: Mapping[str, Any] | None = None,
) -> ChangeResult:
    """:meth:`lakelog.Table.update` run by Spark tasks (see :func:`delete`).

    Args:
        spark: the session that runs the tasks.
        uri: the table's URI.
        where: the rows to update, as for :func:`delete`.
        set: columns to new values over the row's current values: a Spark Column
            (``F.col("amount") * 2``) or a Spark SQL string (``"amount * 2"``; a string
            value is SQL, so a text literal is ``"'closed'"`` or ``F.lit("closed")``),
            evaluated by lakelog as :func:`delete`'s ``where``; or a Python literal or a
            pyarrow Expression as the embedded update takes it.
        storage_options: fsspec options for the table; default none.

    Returns:
        The change's figures and commit.
    """
    table = _open(uri, storage_options)
    snap = table.snapshot()
    where_ = _where(spark, where, snap.schema, "UPDATE")
    change = UpdateChange(where_, snap.schema, _assignments(spark, snap.schema, set))
    return _run_predicate(spark, table, snap, change)


def _where(spark: SparkSession, where: Any, schema: pa.Schema, operation: str) -> Where:
    """The rows a delete or update changes. A Spark Column or SQL string means what it
    means in Spark (:func:`exact_expression`); a string Spark's side refuses a part of
    that lakelog's own SQL-like filter reads (and on Spark Connect, where lakelog cannot
    see a plan) is taken as the embedded change takes it; DNF tuples and pyarrow
    Expressions as well."""
    if not (isinstance(where, str) or is_spark_column(where)):
        try:
            return Where(where, schema, operation=operation)
        except InvalidArgumentError as e:
            if isinstance(where, (pc.Expression, list, tuple)):
                raise
            raise InvalidArgumentError(
                f"expected where= to be a Spark Column (F.col('id') == 5) or a Spark SQL "
                f'string ("id = 5"), or DNF tuples or a pyarrow Expression, found '
                f"{type(where).__name__} {where!r}"
            ) from e
    try:
        expression = exact_expression(spark, schema, where, "where=")
    except InvalidArgumentError as refused:
        if not isinstance(where, str):
            raise
        try:
            return Where(where, schema, operation=operation)
        except InvalidArgumentError:
            raise refused from None
    if expression is None:  # Spark Connect: no plan to see
        if isinstance(where, str):
            return Where(where, schema, operation=operation)
        raise InvalidArgumentError(
            f"expected where= as a SQL string on Spark Connect (lakelog cannot see a "
            f"Column's plan there to evaluate it in its tasks), found the Column {where}; "
            f'pass the same condition as a string such as "id = 5".'
        )
    chosen = Where(expression, schema, operation=operation)
    chosen.text = where.strip() if isinstance(where, str) else str(where)
    return chosen


def _assignments(spark: SparkSession, schema: pa.Schema, assignments: Any) -> Any:
    """``update``'s ``set=`` with each Spark Column or SQL string value turned into the
    pyarrow expression lakelog evaluates (:func:`exact_expression`); other values as
    they are (:func:`check_assignments` checks them all)."""
    if not isinstance(assignments, Mapping):
        return assignments
    out: dict[Any, Any] = {}
    for name, value in assignments.items():
        if not (isinstance(value, str) or is_spark_column(value)):
            out[name] = value
            continue
        parameter = f"set={{{name!r}: ...}}"
        expression = exact_expression(spark, schema, value, parameter)
        if expression is None and isinstance(value, str):
            # Spark Connect: no plan to see; the SQL text is read by lakelog's own reader
            from ..sql.values import from_text

            out[name] = from_text(value, parameter, schema.names)
            continue
        if expression is None:
            raise InvalidArgumentError(
                f"expected {parameter} to be a SQL string, a literal or a pyarrow Expression "
                f"on Spark Connect (lakelog cannot see the plan of a Column there to "
                f"evaluate it in its tasks), found {value!r}; pass the same value as a SQL "
                f'string such as "v * 2".'
            )
        out[name] = expression
    return out


def _run_predicate(
    spark: SparkSession, table: Table, snap: Snapshot, change: RowChange
) -> ChangeResult:
    start = time.monotonic()
    candidates = change.candidates(snap)
    with Lease.acquire(
        table.storage, operation=change.operation, properties=snap.properties
    ) as lease:
        job = _job(table, snap, lease, candidates, _parallelism(spark))
        outcomes: list[FileOutcome] = []
        new: list[AddFile] = []
        changes: list[ChangeFile] = []
        try:
            if candidates:
                _check_executors(spark)
                n = len(job.slots)
                slots = spark.range(0, n, 1, numPartitions=n)
                tasks = _map_in_arrow(slots, _predicate_task(job, change), _RECORDS)
                done = _decode(_collect(tasks, f"lakelog {change.operation.lower()}"))
                outcomes, new, changes = done.outcomes, done.new, done.changes
        except BaseException:
            _delete(table.storage, outcomes, new, changes)
            raise
        return commit_outcomes(
            table,
            change,
            snap,
            _driver_context(table, snap),
            outcomes,
            Written(tuple(new)),
            lease=lease,
            start=start,
            changes=changes,
        )


# -- merge ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _MergeSpec:
    """A merge's options as its tasks apply them (picklable)."""

    keys: tuple[str, ...]
    when_matched: str
    """``update``, ``delete``, ``ignore`` or ``assign`` (``when_matched={col: value}``)."""
    by_source: str
    insert: bool
    assignments: tuple[tuple[str, str, Any], ...] = ()
    """(column, kind, value): kind ``literal`` (a pa.Scalar), ``expr`` (a pyarrow
    Expression over the target row and ``source.<col>``) or ``column`` (the name of a
    source column Spark computed)."""
    condition: tuple[str, Any] | None = None
    """(``expr``, a pyarrow Expression) or (``column``, a computed boolean source column)."""
    computed: tuple[str, ...] = ()
    """The source columns Spark computed from Spark Column expressions."""
    probe_columns: tuple[str, ...] | None = None
    split_columns: tuple[str, ...] | None = None


class _TaskMerge(MergeChange):
    """The embedded merge over one file's routed source rows, plus a matched condition
    and column assignments (``when_matched={...}``); inserts are Spark's."""

    def __init__(
        self,
        spec: _MergeSpec,
        schema: pa.Schema,
        partition_by: tuple[str, ...],
        rows: pa.Table,
        options: WriteOptions,
    ) -> None:
        super().__init__(
            schema,
            partition_by,
            rows.select(schema.names),
            spec.keys,
            when_matched="update" if spec.when_matched == "assign" else spec.when_matched,
            when_not_matched="ignore",
            when_not_matched_by_source=spec.by_source,
            duplicates="error",  # Spark kept one row per key
            options=options,
        )
        self.spec = spec
        # the source's rows are unique by key, so SourceKeys kept them in this order
        self.computed = rows.select(list(spec.computed)).combine_chunks()
        if self.by_source != "delete":
            self.probe_columns = spec.probe_columns
        self.split_columns = spec.split_columns

    def matched_keys(self) -> pa.Table:
        return self.source.table.filter(pa.array(self.matched)).select(list(self.keys))

    def _combined(self, rows: pa.RecordBatch, sidx: np.ndarray) -> pa.RecordBatch:
        """Target rows beside their source rows (``source.<col>``) and computed columns."""
        src = self.source.table.take(pa.array(sidx)).combine_chunks()
        arrays = list(rows.columns)
        names = list(rows.schema.names)
        for f in self.schema:
            arrays.append(src.column(f.name).combine_chunks())
            names.append(_SOURCE + f.name)
        extra = self.computed.take(pa.array(sidx))
        for name in self.spec.computed:
            arrays.append(extra.column(name).combine_chunks())
            names.append(name)
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def _classify(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        idx = self._index.match(batch)
        hit = idx >= 0
        if hit.any():
            with self._lock:
                self.matched[idx[hit]] = True
        act = hit
        cond = self.spec.condition
        if cond is not None and hit.any():
            both = self._combined(batch.filter(pa.array(hit)), idx[hit])
            if cond[0] == "column":
                mask = matched(both.column(cond[1]))
            else:
                mask = matched(evaluate(both, {"c": cond[1]})["c"])
            act = np.zeros_like(hit)
            act[hit] = np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
        elif cond is not None:
            act = np.zeros_like(hit)
        none = np.zeros_like(hit)
        updated = act if self.when_matched == "update" else none
        deleted = act if self.when_matched == "delete" else none
        if self.by_source == "delete":
            deleted = deleted | ~hit
        return idx, updated, deleted

    def _assigned(self, rows: pa.RecordBatch, sidx: np.ndarray) -> pa.RecordBatch:
        """``rows`` (every target column) with the assignments computed."""
        both = self._combined(rows, sidx)
        exprs = {c: v for c, kind, v in self.spec.assignments if kind == "expr"}
        values = evaluate(both, exprs) if exprs else {}
        new: dict[str, Any] = {}
        for c, kind, v in self.spec.assignments:
            if kind == "literal":
                new[c] = pa.repeat(v, rows.num_rows)
            elif kind == "column":
                new[c] = both.column(v)
            else:
                new[c] = values[c]
        arrays = []
        for f in self.schema:
            col = new.get(f.name, rows.column(f.name))
            if col.type != f.type:
                try:
                    col = col.cast(f.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
                    raise InvalidArgumentError(
                        f"expected the new values of column {f.name!r} in when_matched= to "
                        f"fit its type {f.type}, found: {e}. Nothing was committed."
                    ) from e
            arrays.append(col)
        return conform(pa.RecordBatch.from_arrays(arrays, schema=self.schema), self.schema)

    def _updated(
        self, batch: pa.RecordBatch, idx: np.ndarray, updated: np.ndarray
    ) -> pa.RecordBatch:
        if self.spec.when_matched != "assign":
            return super()._updated(batch, idx, updated)
        if not updated.any():
            return batch
        mask = pa.array(updated)
        new = self._assigned(batch.filter(mask), idx[updated])
        names = {c for c, _, _ in self.spec.assignments}
        arrays = [
            put_values(batch.column(f.name), mask, new.column(f.name))
            if f.name in names
            else batch.column(f.name)
            for f in self.schema
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _new_rows(
        self, batch: pa.RecordBatch, idx: np.ndarray, updated: np.ndarray
    ) -> pa.RecordBatch:
        if self.spec.when_matched != "assign":
            return super()._new_rows(batch, idx, updated)
        return self._assigned(batch.filter(pa.array(updated)), idx[updated])


def _conformed(rows: pa.Table, schema: pa.Schema, computed: Sequence[str]) -> pa.Table:
    """Rows as Spark sent them, the table's columns converted to the table's types."""
    batches = [conform(b.select(schema.names), schema) for b in rows.to_batches() if b.num_rows]
    table = pa.Table.from_batches(batches, schema=schema)
    for name in computed:
        table = table.append_column(name, rows.column(name))
    return table


def _by_file(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, pa.Table]]:
    """Consecutive rows of one file (the rows arrive sorted by file)."""
    current: int | None = None
    parts: list[pa.RecordBatch] = []
    for b in batches:
        if not b.num_rows:
            continue
        fids = np.asarray(b.column(_FID).to_numpy(zero_copy_only=False))
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


def _merge_task(
    job: _Job, spec: _MergeSpec
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The body of a merge task: each of its files with the source rows routed to it."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = job.context()
        outcomes: list[FileOutcome] = []
        keys: list[pa.Table] = []
        staged: list[str] = []
        try:
            for fid, rows in _by_file(batches):
                marker = rows.column(_MARK).to_numpy(zero_copy_only=False)
                if bool(np.any(marker)):
                    rows = rows.filter(pa.array(~np.asarray(marker, dtype=bool)))
                source = _conformed(rows, job.schema, spec.computed)
                change = _TaskMerge(spec, job.schema, job.partition_by, source, job.options)
                outcomes.append(process_file(ctx, change, job.files[fid], write=True))
                if spec.insert and change.matched.any():
                    keys.append(change.matched_keys())
            new = ctx.sink.flush() if ctx.sink is not None else []
            changes = ctx.feed.flush() if ctx.feed is not None else []
            if keys:
                path = f"{STAGING_DIR}/merge-{job.lease_id}/matched-{uuid.uuid4().hex}.parquet"
                with ctx.storage.open_output(path) as fh:
                    pq.write_table(pa.concat_tables(keys), fh)
                staged.append(path)
        except BaseException:
            _discard(ctx, outcomes, staged)
            raise
        yield from _records(outcomes, new, changes)
        for path in staged:
            yield _record("matched", path.encode())

    return run


def _insert_task(job: _Job) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The body of an insert task: its rows written as new files (names carry the lease)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        storage = Storage(job.uri, job.storage_options)
        feed = job.change_writer(storage) if job.feed else None

        def rows() -> Iterator[pa.RecordBatch]:
            for b in batches:
                if b.num_rows:
                    row = conform(b.select(job.schema.names), job.schema)
                    if feed is not None:
                        feed.add(row, INSERT)
                    yield row

        try:
            adds = write_files(
                storage,
                rows(),
                schema=job.schema,
                partition_by=job.partition_by,
                options=job.options,
                lease_id=job.lease_id,
            )
            changes = feed.flush() if feed is not None else []
        except BaseException:
            if feed is not None:
                feed.discard()
            raise
        if adds:
            yield _record("new", msgspec.json.encode(adds))
        if changes:
            yield _record("cdc", msgspec.json.encode(changes))

    return run


def _probe_task(
    job: _Job, keys: tuple[str, ...]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The body of a rebase probe task: whether each file holds a key of its routed rows
    (a file that cannot be read counts: the safe side)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        storage = Storage(job.uri, job.storage_options)
        for fid, rows in _by_file(batches):
            f = job.files[fid]
            source = SourceKeys(_conformed(rows, job.schema, ()).select(list(keys)), keys, "error")
            index = source.index_for(f, job.schema)
            try:
                hit = any(
                    bool((index.match(b) >= 0).any())
                    for b in read_rows(storage, f, job.schema, job.partition_by, columns=keys)
                )
            except (FileNotFoundError, LakelogError, OSError):
                hit = True
            if hit:
                yield _record("hit", f.path.encode())

    return run


class _Router:
    """Sends each source row with a key to every file whose partition values and
    min/max statistics hold that key (those of the embedded merge's per-file index)."""

    def __init__(
        self,
        schema: pa.Schema,
        keys: tuple[str, ...],
        files: Sequence[tuple[int, int, DataFile]],
    ) -> None:
        self.schema = schema
        self.keys = keys
        self.sortable = not pa.types.is_floating(schema.field(keys[0]).type)
        self.files = [
            (fid, route, [SourceKeys.bounds(f, schema, k) for k in keys]) for fid, route, f in files
        ]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            if b.num_rows:
                out = self._route(b)
                if out is not None:
                    yield out

    def _route(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        keyed = {k: batch.column(k).cast(self.schema.field(k).type) for k in self.keys}
        valid = np.ones(batch.num_rows, dtype=bool)
        for col in keyed.values():
            valid &= np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        rows = np.flatnonzero(valid)
        if not len(rows):
            return None
        lead: np.ndarray | list[Any] | None = None
        if self.sortable:
            values = keyed[self.keys[0]].take(pa.array(rows))
            order = pc.sort_indices(values).to_numpy()
            rows = rows[order]
            ordered = sortable_keys(values.take(pa.array(order)))
            lead = ordered.tolist() if ordered.dtype == object else ordered
        columns = {k: keyed[k].take(pa.array(rows)) for k in self.keys}
        picked: list[np.ndarray] = []
        fids: list[np.ndarray] = []
        routes: list[np.ndarray] = []
        for fid, route, bounds in self.files:
            start, stop = 0, len(rows)
            if lead is not None and bounds[0] is not None:
                start, stop = slice_within(lead, *bounds[0])
            if stop <= start:
                continue
            keep = np.ones(stop - start, dtype=bool)
            for i, k in enumerate(self.keys):
                bound = bounds[i]
                if bound is None or (i == 0 and lead is not None):
                    continue
                lo, hi = bound
                col = columns[k].slice(start, stop - start)
                hit = pc.and_(pc.greater_equal(col, lo), pc.less_equal(col, hi))
                keep &= np.asarray(hit.fill_null(False).to_numpy(zero_copy_only=False), bool)
            chosen = rows[start:stop][keep]
            if len(chosen):
                picked.append(chosen)
                fids.append(np.full(len(chosen), fid, dtype=np.int32))
                routes.append(np.full(len(chosen), route, dtype=np.int32))
        if not picked:
            return None
        take = np.concatenate(picked)
        out = batch.take(pa.array(take))
        n = len(take)
        arrays = [
            *out.columns,
            pa.array(np.concatenate(fids), pa.int32()),
            pa.array(np.concatenate(routes), pa.int32()),
            pa.array(np.zeros(n, dtype=bool)),
        ]
        return pa.RecordBatch.from_arrays(arrays, names=[*out.schema.names, _FID, _ROUTE, _MARK])


@dataclasses.dataclass
class _SourceFacts:
    """The merge source's one aggregate: counts and the bounds of its keys."""

    given: int = 0
    kept: int = 0
    repeated: int = 0
    keyed: int = 0
    """rows (after dedupe) whose every key is set: only they can match"""
    low: dict[str, Any] = dataclasses.field(default_factory=dict)
    high: dict[str, Any] = dataclasses.field(default_factory=dict)
    values: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    """Distinct values of key columns that partition the table (when few enough)."""


class _DriverMerge(RowChange):
    """The merge as the driver sees it: its options, its source's key bounds, and what
    the tasks reported; for the commit header, the result and the rebase's pruning."""

    operation = "MERGE"
    rebase_rewrites = False

    def __init__(
        self,
        spec: _MergeSpec,
        schema: pa.Schema,
        facts: _SourceFacts,
        parameters: dict[str, Any],
    ) -> None:
        self.spec = spec
        self.schema = schema
        self.facts = facts
        self._parameters = parameters
        self.probe_columns = spec.keys
        self.conflict_columns = spec.keys
        self.inserted = 0

    def parameters(self) -> dict[str, Any]:
        return dict(self._parameters)

    def metrics(self) -> dict[str, Any]:
        return {
            "num_source_rows": self.facts.given,
            "num_source_duplicates": self.facts.given - self.facts.kept,
            "num_inserted_rows": self.inserted,
            "engine": "spark",
        }

    def candidates(self, snapshot: Snapshot) -> Sequence[DataFile]:
        files = list(snapshot.files())
        if self.spec.by_source == "delete":
            return files
        if not self.facts.keyed:
            return []
        keep = self.prune(snapshot.stats_columns)
        return [f for f, k in zip(files, keep.tolist(), strict=True) if k]

    def prune(self, files: FileStatsColumns) -> np.ndarray:
        """Per file: whether its partition values and statistics may hold a source key
        (min/max overlap per key column; a partition key's values among the source's)."""
        n = len(files.num_rows)
        if self.spec.by_source == "delete":
            return np.ones(n, dtype=bool)
        if not self.facts.keyed:
            return np.zeros(n, dtype=bool)
        keep = np.ones(n, dtype=bool)
        for k in self.spec.keys:
            t = self.schema.field(k).type
            if pa.types.is_floating(t):
                continue  # bounds never hold NaN
            if k in files.partition and k in self.facts.values:
                values = pa.array(self.facts.values[k], t)
                hit = pc.is_in(files.partition[k], value_set=values)
                keep &= np.asarray(hit.fill_null(False).to_numpy(zero_copy_only=False), bool)
                continue
            low, high = _scalar(self.facts.low.get(k), t), _scalar(self.facts.high.get(k), t)
            if low is None or high is None:
                continue
            if k in files.partition:
                lo = hi = files.partition[k]
            else:
                lo, hi = files.min.get(k), files.max.get(k)
            if lo is None or hi is None:
                continue
            overlap = pc.and_kleene(pc.greater_equal(hi, low), pc.less_equal(lo, high))
            keep &= np.asarray(overlap.fill_null(True).to_numpy(zero_copy_only=False), bool)
            if k in files.partition:  # a null partition value holds no key
                keep &= np.asarray(lo.is_valid().to_numpy(zero_copy_only=False), bool)
        return keep

    def conflicts(self, batch: pa.RecordBatch) -> bool:
        # only with when_not_matched_by_source="delete" (any row): key probes run in Spark
        return bool(batch.num_rows > 0)

    def probe(self, batch: pa.RecordBatch) -> Counts:
        raise NotImplementedError("the Spark merge probes files in its tasks")

    def apply(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, Counts]:
        raise NotImplementedError("the Spark merge rewrites files in its tasks")

    def split(self, batch: pa.RecordBatch) -> tuple[np.ndarray, pa.RecordBatch | None, Counts]:
        raise NotImplementedError("the Spark merge marks files in its tasks")


def _scalar(value: Any, t: pa.DataType) -> pa.Scalar | None:
    """A source bound from the aggregate as a scalar of the key's type (timestamps and
    dates arrive as microseconds and days since the epoch)."""
    if value is None:
        return None
    try:
        if pa.types.is_timestamp(t):
            return pa.scalar(int(value), pa.timestamp("us", tz=t.tz)).cast(t, safe=False)
        if pa.types.is_date(t):
            return pa.scalar(int(value), pa.int32()).cast(pa.date32()).cast(t)
        return pa.scalar(value, t)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None


class _SparkRebase(RowLevelRebase):
    """The embedded rebase; whether a concurrently added file holds a source key is
    answered by a Spark job over the source, which only the executors hold."""

    probe: Callable[[list[AddFile]], set[str]]

    def conflicting(self, added: Sequence[AddFile]) -> list[AddFile]:
        change = self.change
        assert isinstance(change, _DriverMerge)
        if change.spec.by_source == "delete":
            return super().conflicting(added)
        adds = [a for a in added if a.data_change and a.num_rows > 0]
        if not adds:
            return []
        files = stats_columns(files_from_adds(adds), self.ctx.schema, self.ctx.partition_by)
        adds = [a for a, k in zip(adds, change.prune(files).tolist(), strict=True) if k]
        if not adds:
            return []
        hits = self.probe(adds)
        return [a for a in adds if a.path in hits]


def merge(
    spark: SparkSession,
    uri: str,
    source: DataFrame,
    on: str | Sequence[str],
    *,
    when_matched: str | Mapping[str, Any] | None = "update",
    when_not_matched: str | None = "insert",
    when_not_matched_by_source: str | None = None,
    matched_condition: Any = None,
    duplicates: str = "error",
    storage_options: Mapping[str, Any] | None = None,
) -> MergeReport:
    """:meth:`lakelog.Table.merge` of a Spark DataFrame, run by Spark tasks (see the
    module doc); the driver never collects the source or the target rows.

    Args:
        spark: the session that runs the tasks.
        uri: the target table's URI.
        source: the rows to merge, with the table's columns and types.
        on: the key column(s) matching source rows to target rows.
        when_matched: ``"update"`` (default: every column from the source row),
            ``"delete"``, None (or ``"ignore"``), or a mapping of columns to new values,
            each a Spark Column or a Spark SQL string over the source DataFrame's columns
            (computed by Spark: ``F.col("amount") * 2`` or ``"amount * 2"``; a string is
            SQL, so a text literal is ``"'closed'"`` or ``F.lit("closed")``), a Python
            literal, or a pyarrow Expression over the target row (its column names) and
            the source row (``pc.field("source.<col>")``).
        when_not_matched: ``"insert"`` (default) or None.
        when_not_matched_by_source: ``"delete"`` or None (default).
        matched_condition: only matched rows where it is true are updated or deleted (the
            others stay, and count as matched: they are not inserted); a Spark SQL string
            over the target's columns and the source's as ``source.<col>``
            (``"status != 'closed' and source.amount > amount"``, evaluated by lakelog as
            :func:`delete`'s ``where``), a pyarrow Expression over the same, or a Spark
            Column over the source DataFrame's columns (computed by Spark). Default None.
        duplicates: what several source rows with one key mean: ``"error"`` (default,
            before anything is written), ``"last"`` or ``"first"`` (in the DataFrame's
            order).
        storage_options: fsspec options for the table; default none.

    Returns:
        The merge's figures and commit.
    """
    start = time.monotonic()
    from pyspark.sql import functions as F

    table = _open(uri, storage_options)
    snap = table.snapshot()
    schema, parts = snap.schema, snap.partition_by
    keys = check_keys(on, schema)
    matched_action = _matched_action(when_matched)
    by_source = _option(
        "when_not_matched_by_source", when_not_matched_by_source, ("delete",), ("ignore",)
    )
    insert = _option("when_not_matched", when_not_matched, ("insert",), ("ignore",)) == "insert"
    if duplicates not in ("error", "last", "first"):
        raise InvalidArgumentError(
            f"expected duplicates to be one of 'error', 'last', 'first', found {duplicates!r}"
        )
    check_dataframe_schema(source.schema, schema)
    computed: list[tuple[str, Column]] = []
    both = pa.schema([*schema, *(pa.field(_SOURCE + f.name, f.type) for f in schema)])
    assignments: list[tuple[str, str, Any]] = []
    shown: dict[str, Any] = {}
    if isinstance(when_matched, Mapping):
        plain: dict[str, Any] = {}
        for name, value in when_matched.items():
            if not isinstance(name, str) or name not in schema.names:
                raise InvalidArgumentError(
                    f"expected columns of the table in when_matched=, found {name!r}; the "
                    f"table's columns are {schema.names}"
                )
            if name in keys:
                raise InvalidArgumentError(
                    f"expected when_matched= to leave the key columns {list(keys)} alone "
                    f"(a matched row keeps its key), found {name!r}"
                )
            parameter = f"when_matched={{{name!r}: ...}}"
            column = spark_expression(value, parameter)
            if column is not None:  # over the source's columns, computed by Spark
                _check_source_expression(source, column, parameter, value)
                hidden = f"__lakelog_set_{len(computed)}"
                computed.append((hidden, column))
                assignments.append((name, "column", hidden))
                shown[name] = value if isinstance(value, str) else str(value)
            else:
                plain[name] = value
        if plain:
            values, texts = check_assignments(both, plain, argument="when_matched")
            shown.update(texts)
            for name, v in values.items():
                kind = "expr" if isinstance(v, pc.Expression) else "literal"
                assignments.append((name, kind, v))
    condition: tuple[str, Any] | None = None
    cond_text: str | None = None
    if matched_condition is not None:
        if is_spark_column(matched_condition):
            _check_source_expression(
                source, matched_condition, "matched_condition=", matched_condition
            )
            computed.append(("__lakelog_condition", matched_condition))
            condition = ("column", "__lakelog_condition")
        else:
            cond = _merge_where(spark, matched_condition, schema, both)
            condition = ("expr", cond.expression)
        cond_text = str(matched_condition)
    target_cols: tuple[str, ...] = ()
    if condition is not None and condition[0] == "expr":
        target_cols = tuple(c for c in referenced_columns(condition[1], schema.names))
    probe = tuple(dict.fromkeys([*keys, *target_cols]))
    spec = _MergeSpec(
        keys=keys,
        when_matched=matched_action,
        by_source=by_source,
        insert=insert,
        assignments=tuple(assignments),
        condition=condition,
        computed=tuple(c for c, _ in computed),
        probe_columns=probe,
        split_columns=None if matched_action == "assign" else probe,
    )
    parameters: dict[str, Any] = {
        "on": list(keys),
        "when_matched": shown if matched_action == "assign" else matched_action,
        "when_not_matched": "insert" if insert else "ignore",
        "when_not_matched_by_source": by_source,
        "duplicates": duplicates,
        "engine": "spark",
    }
    if cond_text is not None:
        parameters["matched_condition"] = cond_text

    # the source as the tasks see it; Spark reads it again in each job (route, inserts)
    prepared = source.select(*columns_of(schema.names), *(c.alias(name) for name, c in computed))
    if duplicates != "error":
        prepared = prepared.withColumn(_ORDER, F.monotonically_increasing_id())
    facts = _source_facts(prepared, keys, parts, schema)
    if facts.repeated and duplicates == "error":
        _raise_duplicates(prepared, keys, facts.repeated)
    deduped = _dedupe(prepared, keys, duplicates) if facts.repeated else prepared
    if duplicates != "error":
        deduped = deduped.drop(_ORDER)
    change = _DriverMerge(spec, schema, facts, parameters)
    noop = matched_action == "ignore" and not insert and by_source == "ignore"
    candidates = [] if noop else change.candidates(snap)
    return _run_merge(spark, table, snap, change, candidates, deduped, insert and not noop, start)


def _merge_where(spark: SparkSession, value: Any, schema: pa.Schema, both: pa.Schema) -> Where:
    """``matched_condition`` given as anything but a Column: over the target row's columns
    and the source row's as ``source.<col>``. A string is Spark SQL, evaluated by lakelog
    (:func:`exact_expression` over the target's columns and a ``source`` struct), or,
    where Spark's side refuses a part of it that lakelog's own SQL-like filter reads (and
    on Spark Connect), that filter; DNF tuples and pyarrow Expressions as the embedded
    merge takes them."""
    if not isinstance(value, str) or "source" in schema.names:
        return Where(value, both, operation="MERGE")
    from pyspark.sql import types as T

    target = to_spark_schema(schema)
    with_source = T.StructType([*target.fields, T.StructField("source", target)])
    try:
        expression = exact_expression(
            spark, both, value, "matched_condition=", spark_schema=with_source
        )
    except InvalidArgumentError as refused:
        try:
            return Where(value, both, operation="MERGE")
        except InvalidArgumentError:
            raise refused from None
    if expression is None:  # Spark Connect: lakelog's own SQL-like filter
        try:
            return Where(value, both, operation="MERGE")
        except InvalidArgumentError as e:
            raise InvalidArgumentError(
                f"expected matched_condition= as a filter lakelog's SQL-like parser reads "
                f"on Spark Connect (a column or source.<col> compared with a literal, "
                f"IN, BETWEEN, IS [NOT] NULL, AND/OR/NOT; lakelog cannot see a plan "
                f"there), found {value!r}: {e}. Pass a Column over the source instead."
            ) from e
    chosen = Where(expression, both, operation="MERGE")
    chosen.text = value.strip()
    return chosen


def _check_source_expression(source: DataFrame, column: Column, parameter: str, value: Any) -> None:
    """Refuse (:class:`InvalidArgumentError`, naming ``parameter``) an expression Spark
    cannot evaluate over the source's columns (an unknown column, a type mismatch) before
    anything runs; on Spark Connect Spark answers when the merge's first job runs."""
    from pyspark.errors import AnalysisException

    from .filters import quiet_analysis

    try:
        with quiet_analysis():
            source.select(column)
    except AnalysisException as e:
        raise analysis_error(e, parameter, value, source.columns) from e


def _valid(keys: Sequence[str]) -> Column:
    """Whether every key of a row is set (only such rows can match)."""
    from pyspark.sql import functions as F

    valid = F.lit(True)
    for k in keys:
        valid = valid & F.col(f"`{k}`").isNotNull()
    return valid


def _dedupe(prepared: DataFrame, keys: tuple[str, ...], duplicates: str) -> DataFrame:
    """One row per key: the last or first in the DataFrame's order (``_ORDER``); rows
    with a null key are all kept (they match nothing)."""
    from pyspark.sql import functions as F

    others = [c for c in prepared.columns if c not in keys and c != _ORDER]
    pick = F.max_by if duplicates == "last" else F.min_by
    row = "__lakelog_row"
    kept = (
        prepared.filter(_valid(keys))
        .groupBy(*columns_of(keys))
        .agg(pick(F.struct(*columns_of([*others, _ORDER])), F.col(_ORDER)).alias(row))
        .select(*columns_of(keys), f"{row}.*")
    )
    return kept.unionByName(prepared.filter(~_valid(keys)))


def _matched_action(value: Any) -> str:
    if isinstance(value, Mapping):
        if not value:
            raise InvalidArgumentError(
                "expected when_matched= to map columns to new values, such as "
                "{'status': 'closed'}, found an empty mapping; pass None to leave "
                "matched rows alone"
            )
        return "assign"
    return _option("when_matched", value, ("update", "delete"), ("ignore",))


def _option(name: str, value: Any, allowed: tuple[str, ...], ignore: tuple[str, ...]) -> str:
    if value is None or value in ignore:
        return "ignore"
    if isinstance(value, str) and value in allowed:
        return value
    listed = ", ".join(repr(a) for a in (*allowed, None))
    raise InvalidArgumentError(f"expected {name} to be one of {listed}, found {value!r}")


def _source_facts(
    prepared: DataFrame, keys: tuple[str, ...], parts: Sequence[str], schema: pa.Schema
) -> _SourceFacts:
    """One aggregate over the source, grouped by key: rows, rows kept after dedupe,
    duplicated keys, and the bounds of the keys (nothing per key reaches the driver)."""
    from pyspark.sql import functions as F

    valid = _valid(keys)
    count = F.col(_COUNT)
    groups = prepared.groupBy(*columns_of(keys)).agg(F.count(F.lit(1)).alias(_COUNT))
    aggs = [
        F.sum(count).alias("given"),
        F.sum(F.when(valid, 1).otherwise(count)).alias("kept"),
        F.sum(F.when(valid & (count > 1), 1).otherwise(0)).alias("repeated"),
        F.sum(F.when(valid, 1).otherwise(0)).alias("keyed"),
    ]
    for i, k in enumerate(keys):
        t = schema.field(k).type
        col = F.col(f"`{k}`")
        if pa.types.is_floating(t) or (pa.types.is_timestamp(t) and t.tz is None):
            continue  # NaN is no bound; a Spark aggregate of wall-clock times shifts them
        if pa.types.is_timestamp(t):
            col = F.unix_micros(col.cast("timestamp"))
        elif pa.types.is_date(t):
            col = F.unix_date(col)
        aggs += [F.min(col).alias(f"lo{i}"), F.max(col).alias(f"hi{i}")]
        if k in parts and not pa.types.is_temporal(t):
            distinct = F.array_sort(F.collect_set(F.col(f"`{k}`")))
            aggs.append(F.slice(distinct, 1, MAX_PARTITION_VALUES + 1).alias(f"set{i}"))
    row = groups.agg(*aggs).collect()[0].asDict()
    facts = _SourceFacts(
        given=int(row["given"] or 0),
        kept=int(row["kept"] or 0),
        repeated=int(row["repeated"] or 0),
        keyed=int(row["keyed"] or 0),
    )
    for i, k in enumerate(keys):
        if f"lo{i}" in row:
            facts.low[k], facts.high[k] = row[f"lo{i}"], row[f"hi{i}"]
        found = row.get(f"set{i}")
        if found is not None and len(found) <= MAX_PARTITION_VALUES:
            facts.values[k] = list(found)
    return facts


def _raise_duplicates(prepared: DataFrame, keys: tuple[str, ...], repeated: int) -> None:
    from pyspark.sql import functions as F

    first = (
        prepared.filter(_valid(keys))
        .groupBy(*columns_of(keys))
        .agg(F.count(F.lit(1)).alias(_COUNT))
        .filter(F.col(_COUNT) > 1)
        .select(*columns_of(keys))
        .limit(3)
        .collect()
    )
    shown = [r[0] if len(keys) == 1 else r.asDict() for r in first]
    raise InvalidArgumentError(
        f"expected one source row per key of on={list(keys)}, found {repeated} key(s) "
        f"more than once (e.g. {shown}); pass duplicates='last' or duplicates='first' "
        f"to keep one row per key, or deduplicate the source. Nothing was written."
    )


def _run_merge(
    spark: SparkSession,
    table: Table,
    snap: Snapshot,
    change: _DriverMerge,
    candidates: Sequence[DataFile],
    deduped: DataFrame,
    insert: bool,
    start: float,
) -> MergeReport:
    from pyspark.sql import types as T

    spec = change.spec
    storage = table.storage
    with Lease.acquire(storage, operation="MERGE", properties=snap.properties) as lease:
        staging = f"{STAGING_DIR}/merge-{lease.lease_id}"
        job = _job(table, snap, lease, candidates, _parallelism(spark))
        outcomes: list[FileOutcome] = []
        new: list[AddFile] = []
        changes: list[ChangeFile] = []
        try:
            _check_executors(spark)
            matched_paths: list[str] = []
            if candidates:
                routed = _routed(spark, deduped, job, spec.keys)
                if spec.by_source == "delete":  # every file, with or without source rows
                    marks = spark.createDataFrame(
                        [(fid, _route_of(job, fid), True) for fid in job.files],
                        T.StructType(
                            [
                                T.StructField(_FID, T.IntegerType()),
                                T.StructField(_ROUTE, T.IntegerType()),
                                T.StructField(_MARK, T.BooleanType()),
                            ]
                        ),
                    )
                    routed = routed.unionByName(marks, allowMissingColumns=True)
                grouped = routed.repartition(len(job.slots), _ROUTE).sortWithinPartitions(_FID)
                tasks = _map_in_arrow(grouped, _merge_task(job, spec), _RECORDS)
                done = _decode(_collect(tasks, "lakelog merge"))
                outcomes, new, changes = done.outcomes, done.new, done.changes
                matched_paths = done.matched
            if insert:
                rows = deduped.drop(*spec.computed)
                if matched_paths:
                    # the tasks staged the matched keys under the table's (logical) names
                    # (not data files: no physical names); read exactly those columns
                    keyed = pa.schema([snap.schema.field(k) for k in spec.keys])
                    hit = spark.read.schema(to_spark_schema(keyed)).parquet(
                        *(spark_url(storage, p) for p in matched_paths)
                    )
                    rows = rows.join(hit, on=list(spec.keys), how="left_anti")
                # a few files (two tasks per core), not one per shuffle partition; a
                # partition's rows in one task
                files = TASKS_PER_CORE * _parallelism(spark)
                if snap.partition_by:
                    rows = rows.repartition(files, *columns_of(snap.partition_by))
                else:
                    rows = rows.coalesce(files)
                rows = rows.select(*columns_of(snap.schema.names))
                written = _map_in_arrow(rows, _insert_task(job), _RECORDS)
                inserted = _decode(_collect(written, "lakelog merge: inserts"))
                new += inserted.new
                changes += inserted.changes
                change.inserted = sum(a.num_rows for a in inserted.new)
        except BaseException:
            _delete(storage, outcomes, new, changes)
            discard_staging(storage, staging)
            raise
        probe_lock = threading.Lock()

        def probe(adds: list[AddFile]) -> set[str]:
            with probe_lock:
                return _probe(spark, deduped, job, spec.keys, adds)

        def rebase(ctx: Context, ch: RowChange, metrics: Any) -> RowLevelRebase:
            r = _SparkRebase(ctx, ch, metrics)
            r.probe = probe
            return r

        try:
            result = commit_outcomes(
                table,
                change,
                snap,
                _driver_context(table, snap),
                outcomes,
                Written(tuple(new), change.inserted),
                lease=lease,
                start=start,
                rebase=rebase,
                changes=changes,
            )
        finally:
            discard_staging(storage, staging)
        fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
        return MergeReport(
            **fields,
            source_rows=change.facts.given,
            source_duplicates=change.facts.given - change.facts.kept,
        )


def _routed(spark: SparkSession, deduped: DataFrame, job: _Job, keys: tuple[str, ...]) -> DataFrame:
    """The source rows, each with the candidate file(s) its key may be in."""
    from pyspark.sql import types as T

    files = [(fid, _route_of(job, fid), f) for fid, f in job.files.items()]
    schema = T.StructType(
        [
            *deduped.schema.fields,
            T.StructField(_FID, T.IntegerType()),
            T.StructField(_ROUTE, T.IntegerType()),
            T.StructField(_MARK, T.BooleanType()),
        ]
    )
    return _map_in_arrow(deduped, _Router(job.schema, keys, files), schema)


def _probe(
    spark: SparkSession,
    deduped: DataFrame,
    job: _Job,
    keys: tuple[str, ...],
    adds: list[AddFile],
) -> set[str]:
    """The paths of ``adds`` holding a key of the source: a Spark job (the rebase's probe)."""
    files = [DataFile.from_add(a) for a in adds]
    probe_job = dataclasses.replace(
        job,
        files=dict(enumerate(files)),
        slots=_slots(files, len(job.slots) or 1),
    )
    routed = _routed(spark, deduped, probe_job, keys)
    grouped = routed.repartition(len(probe_job.slots), _ROUTE).sortWithinPartitions(_FID)
    tasks = _map_in_arrow(grouped, _probe_task(probe_job, keys), _RECORDS)
    return {bytes(r.payload).decode() for r in _collect(tasks, "lakelog merge: rebase probe")}


# -- shared -----------------------------------------------------------------------------------


def _open(uri: str, storage_options: Mapping[str, Any] | None) -> Table:
    storage = Storage(uri, storage_options)
    spark_url(storage)  # refuses filesystems the executors cannot reach
    from ..table import Table  # until this module moves onto the handle (issue 38)

    return Table.from_core(TableCore.load(storage))


def _parallelism(spark: SparkSession) -> int:
    from .runner import default_parallelism

    return default_parallelism(spark)


def _check_executors(spark: SparkSession) -> None:
    from .environment import check_executors

    check_executors(spark)


def _slots(files: Sequence[DataFile], n: int) -> tuple[tuple[int, ...], ...]:
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


def _route_of(job: _Job, fid: int) -> int:
    """The value whose Spark hash partition is the task of ``fid``'s slot."""
    from .cluster_job import partition_values

    n = len(job.slots)
    values = _ROUTES.get(n)
    if values is None:
        values = _ROUTES[n] = partition_values(n)
    slot = next(i for i, s in enumerate(job.slots) if fid in s)
    return int(values[slot])


def _job(table: Table, snap: Snapshot, lease: Lease, files: Sequence[DataFile], cores: int) -> _Job:
    return _Job(
        uri=table.storage.uri,
        storage_options=dict(table.storage.storage_options),
        schema=snap.schema,
        partition_by=tuple(snap.partition_by),
        version=snap.version,
        options=write_options_from(snap.properties),
        lease_id=lease.lease_id,
        vectors=Context.vector_settings(snap.properties),
        files=dict(enumerate(files)),
        slots=_slots(files, TASKS_PER_CORE * cores) if files else (),
        feed=feed_enabled(snap.properties),
    )


def _driver_context(table: Table, snap: Snapshot) -> Context:
    """What the rebase reads and (for delete and update) rewrites winners' files with."""
    return Context(
        storage=table.storage,
        schema=snap.schema,
        partition_by=snap.partition_by,
        version=snap.version,
        options=write_options_from(snap.properties),
        lease_id=None,
        **Context.vector_settings(snap.properties),
    )


def _map_in_arrow(df: DataFrame, fn: Any, schema: Any) -> DataFrame:
    """``df.mapInArrow(fn, schema)``, without PySpark's warning about pandas 3: these
    functions take and give Arrow batches, pandas is never involved."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas")
        return df.mapInArrow(carry(fn), schema)  # its lakelog errors keep their class


def _collect(df: DataFrame, what: str) -> list[Any]:
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


def _decode(rows: Sequence[Any]) -> _Decoded:
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
    return out


def _delete(
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
