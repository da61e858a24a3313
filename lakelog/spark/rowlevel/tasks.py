"""The merge's tasks: its clauses as the tasks apply them, each file's rewrite with the
embedded merge, and the inserts."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import InvalidArgumentError
from ...io.schema import conform
from ...io.writer import WriteOptions, write_files
from ...log.feed import INSERT
from ...partitioning import STAGING_DIR
from ...rowlevel.clauses import (
    Clauses,
    MergeClause,
)
from ...rowlevel.execute import FileOutcome, process_file
from ...rowlevel.merge import MergeChange
from ...storage import Storage
from .jobs import MARK, Job, by_file, conformed_rows, discard_outcomes, task_record, task_records

__all__ = ["MergeSpec", "insert_task", "merge_task"]


@dataclasses.dataclass(frozen=True)
class MergeSpec:
    """A merge's clauses as its tasks apply them (picklable): every condition and value
    a literal or a pyarrow Expression over the target row and ``source.<col>``, a Spark
    Column value read from the source column Spark computed for it."""

    keys: tuple[str, ...]
    matched: tuple[MergeClause, ...]
    not_matched: tuple[MergeClause, ...]
    by_source: tuple[MergeClause, ...]
    computed: tuple[str, ...] = ()
    """The source's columns beyond the table's, then those Spark computed from Spark
    Column values."""
    missing: tuple[str, ...] = ()
    """The table's columns the source lacks (null in the rows the tasks get)."""
    numbers: tuple[str, ...] = ()
    """Identity columns among :attr:`missing`: ``UPDATE SET *`` keeps the target's
    value, the inserts are numbered by their task (:class:`IdentityRange`)."""
    reserved: int = 0
    """Values each insert task may give out per identity column (the source's row
    count: no task inserts more), so task ``p`` numbers from ``first + p * reserved``
    steps: disjoint ranges, given out before the job, with no coordination."""
    firsts: tuple[tuple[str, int, int], ...] = ()
    """Per identity column of :attr:`numbers`: its first value above the mark of the
    snapshot read, and its step."""

    def step_of(self, column: str) -> int:
        """The step of identity column ``column`` of :attr:`numbers`."""
        return next(step for c, _, step in self.firsts if c == column)

    @property
    def insert(self) -> bool:
        return bool(self.not_matched)

    def clauses(self, schema: pa.Schema, extra: pa.Schema | None) -> Clauses:
        """The clauses checked against the table (the driver, before anything runs) and
        as the tasks evaluate them."""
        return Clauses(
            schema,
            self.keys,
            self.matched,
            self.not_matched,
            self.by_source,
            extra=extra,
            missing=self.missing,
            kept=self.numbers,
        )


class _TaskMerge(MergeChange):
    """The embedded merge over one file's routed source rows (with the columns Spark
    computed beside them); inserts are Spark's."""

    def __init__(
        self,
        spec: MergeSpec,
        schema: pa.Schema,
        partition_by: tuple[str, ...],
        rows: pa.Table,
        options: WriteOptions,
    ) -> None:
        super().__init__(
            schema,
            partition_by,
            rows.select([n for n in schema.names if n not in spec.numbers]),
            spec.keys,
            when_matched=list(spec.matched),
            when_not_matched=[],
            when_not_matched_by_source=list(spec.by_source),
            duplicates="error",  # Spark kept one row per key
            options=options,
            extra=rows.select(list(spec.computed)) if spec.computed else None,
        )

    def matched_keys(self) -> pa.Table:
        return self.source.table.filter(pa.array(self.matched)).select(list(self.keys))


def merge_task(
    job: Job, spec: MergeSpec
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The body of a merge task: each of its files with the source rows routed to it."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = job.context()
        outcomes: list[FileOutcome] = []
        keys: list[pa.Table] = []
        staged: list[str] = []
        try:
            for fid, rows in by_file(batches):
                marker = rows.column(MARK).to_numpy(zero_copy_only=False)
                if bool(np.any(marker)):
                    rows = rows.filter(pa.array(~np.asarray(marker, dtype=bool)))
                source = conformed_rows(rows, job.schema, spec.computed, spec.missing)
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
            discard_outcomes(ctx, outcomes, staged)
            raise
        yield from task_records(outcomes, new, changes)
        for path in staged:
            yield task_record("matched", path.encode())

    return run


def insert_task(
    job: Job, spec: MergeSpec, extra: pa.Schema | None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The body of an insert task: the rows its ``WHEN NOT MATCHED`` clauses insert for
    its unmatched source rows, written as new files (names carry the lease)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        storage = Storage(job.uri, job.storage_options)
        feed = job.change_writer(storage) if job.feed else None
        clauses = spec.clauses(job.schema, extra)
        marks: dict[str, int] = {}
        from pyspark import TaskContext

        task = TaskContext.get() if spec.numbers else None
        given = [0]  # values given out so far by this task, per column
        offset = 0 if task is None else task.partitionId() * spec.reserved

        def numbered(row: pa.RecordBatch) -> pa.RecordBatch:
            # each source row is inserted at most once: a task never passes its range
            n = row.num_rows
            row = row.drop_columns(list(spec.numbers))
            for column, first, step in spec.firsts:
                at = first + (offset + given[0]) * step
                values = pa.array(range(at, at + n * step, step), pa.int64())
                row = row.append_column(column, values)
                marks[column] = at + (n - 1) * step
            given[0] += n
            if given[0] > spec.reserved:  # a source that changed between its reads
                raise InvalidArgumentError(
                    f"expected at most {spec.reserved} rows to insert in one task (the "
                    f"source's row count when the merge began), found more: the source "
                    f"gave other rows when read again; cache or checkpoint it and merge "
                    f"again. Nothing was committed."
                )
            return row

        def rows() -> Iterator[pa.RecordBatch]:
            for b in batches:
                if not b.num_rows:
                    continue
                source = conformed_rows(
                    pa.Table.from_batches([b]), job.schema, spec.computed, spec.missing
                )
                for row in clauses.inserts(source):
                    if spec.numbers and row.num_rows:
                        row = numbered(row)
                    row = conform(row, job.schema)
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
                spec=job.spec,
            )
            changes = feed.flush() if feed is not None else []
        except BaseException:
            if feed is not None:
                feed.discard()
            raise
        if adds:
            yield task_record("new", msgspec.json.encode(adds))
        if changes:
            yield task_record("cdc", msgspec.json.encode(changes))
        if marks:
            yield task_record("marks", msgspec.json.encode(marks))

    return run
