"""``delete`` and ``update`` of a Spark job: the predicate and values as lakelog evaluates
them, the tasks and the commit."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ...errors import InvalidArgumentError
from ...filters import FilterLike
from ...leases import Lease
from ...log.actions import AddFile, ChangeFile
from ...log.snapshot import Snapshot
from ...rowlevel.base import RowChange, Written
from ...rowlevel.execute import FileOutcome, process_file
from ...rowlevel.predicate import DeleteChange, UpdateChange, Where
from ...rowlevel.result import ChangeResult
from ...rowlevel.run import commit_outcomes
from ..filters import exact_expression, is_spark_column
from .jobs import (
    RECORDS,
    Job,
    collect_records,
    decode_records,
    discard_files,
    discard_outcomes,
    driver_context,
    make_job,
    map_in_arrow,
    open_target,
    require_executors,
    session_cores,
    task_records,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

    from ...core import TableHandle

__all__ = ["delete", "update"]


def _predicate_task(
    job: Job, change: RowChange
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
            discard_outcomes(ctx, outcomes)
            raise
        yield from task_records(outcomes, new, changes)

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
    table = open_target(uri, storage_options)
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
    table = open_target(uri, storage_options)
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
            from ...sql.values import from_text

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
    spark: SparkSession, table: TableHandle, snap: Snapshot, change: RowChange
) -> ChangeResult:
    start = time.monotonic()
    candidates = change.candidates(snap)
    with Lease.acquire(
        table.storage, operation=change.operation, properties=snap.properties
    ) as lease:
        job = make_job(table, snap, lease, candidates, session_cores(spark))
        outcomes: list[FileOutcome] = []
        new: list[AddFile] = []
        changes: list[ChangeFile] = []
        try:
            if candidates:
                require_executors(spark)
                n = len(job.slots)
                slots = spark.range(0, n, 1, numPartitions=n)
                tasks = map_in_arrow(slots, _predicate_task(job, change), RECORDS)
                done = decode_records(collect_records(tasks, f"lakelog {change.operation.lower()}"))
                outcomes, new, changes = done.outcomes, done.new, done.changes
        except BaseException:
            discard_files(table.storage, outcomes, new, changes)
            raise
        return commit_outcomes(
            table,
            change,
            snap,
            driver_context(table, snap),
            outcomes,
            Written(tuple(new)),
            lease=lease,
            start=start,
            changes=changes,
        )
