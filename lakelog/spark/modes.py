"""Write modes of the Spark writers: what a write replaces, and its one commit.

:func:`lakelog.spark.write` and the ``lakelog`` data source's writer (and the
streaming sink, once per micro-batch) share this module, so a mode means the same
whatever wrote the files:

* ``mode="append"`` adds the files (kind ``append``);
* ``mode="overwrite"`` replaces every file of the version the write read (kind
  ``overwrite``, the whole table in scope);
* with ``partition_overwrite="dynamic"`` only the partitions the new files are in
  (kind ``overwrite`` with those partitions as its scope, so a concurrent change in
  another partition rebases); on an unpartitioned table it is the full overwrite,
  as in Spark and Delta;
* with ``replace_where`` the rows matching the filter, through the embedded row-level
  overwrite (:func:`lakelog.rowlevel.run.run_change`, operation ``OVERWRITE``): files
  holding matching rows are rewritten without them, or removed when every row matches,
  in the commit that adds the new files; before that, every new row must match the
  filter (counted on executors), or nothing is committed;
* ``schema_mode="merge"`` puts the ``metadata`` action evolving the schema
  (:func:`lakelog.core.plan_write`) in the same commit as the files.

Options of the data source (and the streaming sink) map to the same fields:
:func:`lakelog.spark.options.write_options`.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ..core import (
    SchemaMode,
    TableCore,
    WritePlan,
    check_schema_mode,
    commit,
    create_with_files,
    landed_first,
    overwrite_removes,
    plan_write,
    staged,
    write_options_from,
)
from ..core.identity import IdentityWrite
from ..core.staged import Staged
from ..errors import (
    AppVersionCommittedError,
    InvalidArgumentError,
    SchemaMismatchError,
    TableExistsError,
)
from ..filters import FilterLike, parse_filter
from ..io.guards import guards_of, marks_of, with_marks
from ..io.schema import conform
from ..leases import Lease
from ..log import mapping
from ..log.actions import Action, AddFile, AppTransaction, encode_schema
from ..log.feed import INSERT
from ..log.snapshot import Snapshot, load_snapshot
from ..partitioning import partition_string
from ..properties import get_bool
from ..rowlevel.base import Written
from ..rowlevel.predicate import DeleteChange, Where
from ..rowlevel.read import evaluate, matched
from ..rowlevel.run import run_change
from ..storage import Storage
from ..transaction import CommitResult, app_transaction, check_app_versions
from ..transforms import parse_field
from .schema import (
    check_dataframe_schema,
    strip_nullability,
    to_arrow_type,
    to_spark_schema,
    to_spark_type,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType

    from ..rowlevel.change_files import ChangeWriter

__all__ = [
    "PARTITION_OVERWRITE_CONF",
    "same_partitioning",
    "Mode",
    "PartitionOverwrite",
    "WriteSpec",
    "as_written",
    "auto_compact_here",
    "commit_written",
    "count_outside",
    "dataframe_plan",
    "outside_rows",
    "parse_replace_where",
    "refuse_outside",
    "write_spec",
]

log = logging.getLogger("lakelog.spark")

Mode = Literal["append", "overwrite", "error"]
PartitionOverwrite = Literal["static", "dynamic"]
PARTITION_OVERWRITE_CONF = "spark.sql.sources.partitionOverwriteMode"
"""Spark's session setting; :func:`lakelog.spark.write` follows it when
``partition_overwrite`` is not given, as Spark's and Delta's writers do."""


@dataclass(frozen=True)
class WriteSpec:
    """One write's mode and options, checked (see the module docstring)."""

    mode: Mode = "append"
    replace_where: FilterLike = None
    partition_overwrite: PartitionOverwrite = "static"
    schema_mode: SchemaMode = "strict"
    app: AppTransaction | None = None
    partition_by: tuple[str, ...] = ()
    properties: Mapping[str, Any] | None = field(default=None, hash=False)

    def header(self) -> dict[str, Any]:
        """What the commit header records about the mode."""
        out: dict[str, Any] = {"mode": self.mode}
        if self.app is not None:
            out.update(app_id=self.app.app_id, app_version=self.app.app_version)
        return out


def write_spec(
    *,
    mode: Any = "append",
    replace_where: FilterLike = None,
    partition_overwrite: Any = None,
    schema_mode: Any = "strict",
    app_id: str | None = None,
    app_version: int | None = None,
    partition_by: str | Sequence[str] = (),
    properties: Mapping[str, Any] | None = None,
    session_partition_overwrite: str | None = None,
    names: Mapping[str, str] | None = None,
) -> WriteSpec:
    """Check a write's options and combine them (nothing is read or written).

    ``partition_overwrite=None`` takes ``session_partition_overwrite`` (Spark's
    :data:`PARTITION_OVERWRITE_CONF`) for an overwrite without ``replace_where``, and is
    ``"static"`` otherwise. ``names`` maps the options to the caller's spelling of them
    (``{"replace_where": "option 'replaceWhere'"}``) for messages.
    """
    said = {
        "mode": "mode",
        "replace_where": "replace_where",
        "partition_overwrite": "partition_overwrite",
        "schema_mode": "schema_mode",
        **(names or {}),
    }
    if mode not in ("append", "overwrite", "error"):
        raise InvalidArgumentError(
            f"expected {said['mode']} 'append', 'overwrite' or 'error', found {mode!r}"
        )
    check_schema_mode(schema_mode)
    given = partition_overwrite
    if given is not None and given not in ("static", "dynamic"):
        raise InvalidArgumentError(
            f"expected {said['partition_overwrite']} 'static' (an overwrite replaces the "
            f"whole table) or 'dynamic' (only the partitions the data holds), found {given!r}"
        )
    if replace_where is not None:
        if mode != "overwrite":
            raise InvalidArgumentError(
                f"expected mode 'overwrite' with {said['replace_where']} (it replaces the rows "
                f"matching it), found mode {mode!r}; write with mode 'overwrite', or drop "
                f"{said['replace_where']} to {mode}."
            )
        if given == "dynamic":
            raise InvalidArgumentError(
                f"expected {said['replace_where']} or {said['partition_overwrite']} 'dynamic', "
                f"found both; a filter on the partition columns in {said['replace_where']} "
                f"says which partitions to replace."
            )
        if schema_mode != "strict":
            raise InvalidArgumentError(
                f"expected {said['schema_mode']} 'strict' with {said['replace_where']} (rows "
                f"replaced by a filter keep the table's schema), found 'merge'; evolve the "
                f"schema first (a merge append, or add_columns()/widen_column())."
            )
    if given == "dynamic" and mode != "overwrite":
        raise InvalidArgumentError(
            f"expected mode 'overwrite' with {said['partition_overwrite']} 'dynamic' (it "
            f"replaces the partitions the data holds), found mode {mode!r}"
        )
    resolved: PartitionOverwrite = "static"
    if given is not None:
        resolved = given
    elif mode == "overwrite" and replace_where is None:
        conf = (session_partition_overwrite or "static").strip().lower()
        resolved = "dynamic" if conf == "dynamic" else "static"
    if isinstance(partition_by, str):
        partition_by = (partition_by,)
    return WriteSpec(
        mode=mode,
        replace_where=replace_where,
        partition_overwrite=resolved,
        schema_mode=schema_mode,
        app=app_transaction(app_id, app_version),
        partition_by=tuple(partition_by),
        properties=properties,
    )


def dataframe_plan(df_schema: StructType, snap: Snapshot, schema_mode: SchemaMode) -> WritePlan:
    """The schema a DataFrame of ``df_schema`` is written to the table with.

    ``strict``: the DataFrame must match the table exactly
    (:func:`~lakelog.spark.schema.check_dataframe_schema`). ``merge``
    (:func:`~lakelog.core.plan_write`): its new columns are added, columns in a
    wider type widen the table's, narrower ones convert, missing ones are nulls."""
    if schema_mode == "strict":
        check_dataframe_schema(df_schema, snap.schema)
        return WritePlan(snap.schema)
    table = snap.schema
    fields = []
    for f in df_schema.fields:
        given = strip_nullability(f.dataType)
        if f.name in table.names and _reads_as(table.field(f.name).type) == given:
            fields.append(table.field(f.name))  # the table's type Spark reads as this one
        else:
            fields.append(pa.field(f.name, to_arrow_type(f.dataType)))
    return plan_write(snap, pa.schema(fields), "merge")


def _reads_as(t: pa.DataType) -> DataType | None:
    try:
        return strip_nullability(to_spark_type(t))
    except SchemaMismatchError:
        return None


def parse_replace_where(spec: WriteSpec, schema: pa.Schema) -> Where | None:
    """``replace_where`` parsed against the table ``schema`` (None when not given); a
    filter lakelog cannot read is refused here, before anything is written."""
    if spec.replace_where is None:
        return None
    pred = parse_filter(spec.replace_where, schema, argument="replace_where")
    if pred is None:
        raise InvalidArgumentError(
            f"expected replace_where to select the rows to replace, such as "
            f"\"day = '2024-01-02'\", found {spec.replace_where!r}; to replace every row, "
            f"drop replace_where."
        )
    return Where(spec.replace_where, schema, operation="OVERWRITE")


def outside_rows(batch: pa.RecordBatch, expression: pc.Expression, schema: pa.Schema) -> int:
    """Rows of ``batch`` (columns of the table ``schema``, in any Arrow types that convert)
    where ``expression`` is not true: false or null, as the embedded overwrite counts."""
    if not batch.num_rows:
        return 0
    sub = pa.schema([schema.field(n) for n in batch.schema.names])
    mask = matched(evaluate(conform(batch, sub), {"match": expression})["match"])
    rows: int = batch.num_rows
    return rows - int(pc.sum(mask).as_py() or 0)


def _outside_counter(
    expression: pc.Expression, schema_bytes: bytes
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
        n = sum(outside_rows(b, expression, schema) for b in batches)
        yield pa.RecordBatch.from_arrays([pa.array([n], pa.int64())], names=["n"])

    return count


def count_outside(
    spark: SparkSession,
    staged_url: str,
    schema: pa.Schema,
    where: Where,
    *,
    partition_by: Sequence[str] = (),
) -> int:
    """Rows of the files a Spark job wrote under ``staged_url`` (partition folders of
    ``partition_by`` and all) that ``where`` does not match, counted by Spark tasks: the
    files are read back by Spark's reader (columns under their physical names, as they
    were written), only the filter's columns, and each task evaluates the filter with
    lakelog's semantics (Arrow's, as the embedded overwrite) on its batches."""
    from pyspark.sql import functions as F

    from .columns import logical_columns, spark_physical_schema

    columns = [c for c in where.columns if c in schema.names] or [schema.names[0]]
    stored = spark_physical_schema(schema, keep=partition_by)
    frame = spark.read.schema(stored).parquet(staged_url)
    counter = _outside_counter(where.expression, schema.serialize().to_pybytes())
    with warnings.catch_warnings():
        # PySpark warns about the installed pandas on every Arrow UDF; no pandas is used
        warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas")
        picked = frame.select(*logical_columns(schema, columns, keep=partition_by))
        counts = picked.mapInArrow(counter, "n long")
    total = counts.agg(F.sum("n")).collect()[0][0]
    return int(total or 0)


def as_written(plan: WritePlan, written: pa.Schema, snap: Snapshot | None) -> WritePlan:
    """``plan``, made again at commit time on ``snap``, with the column ids and physical
    names of ``written``, the schema the write's files were written with (by tasks, from
    a plan made before them).

    A plan gives a field it adds a physical name (``docs/format.md``, "Column ids"), a
    random ``col-<hex>`` one for a name added back after a drop, so planning twice gives
    two names while the files hold the first: for fields this plan adds (ids not in
    ``snap``), the written names are kept. A column of the table stored under another
    name than the files hold it (dropped and added back, or renamed, while the write ran)
    is refused with :class:`SchemaMismatchError`: committing would lose its values.
    """
    if not (mapping.is_mapped(plan.schema) or mapping.is_mapped(written)):
        return plan
    planned, wrote = _stored_paths(plan.schema), _stored_paths(written)
    known = set(mapping.ids_of(snap.schema)) if snap is not None else set()
    adopt = False
    for path, (pid, stored) in planned.items():
        if path not in wrote:
            continue  # the files lack it: read as nulls
        wid, held = wrote[path]
        if held == stored and (pid is None or wid is None or pid == wid):
            continue
        if pid is not None and pid == wid and pid not in known:
            adopt = True  # a field this plan adds, named again: the files' name stands
            continue
        raise SchemaMismatchError(
            f"expected the table to store column {'.'.join(path)!r} under the name the "
            f"write's files hold it ({'.'.join(held)!r}), found {'.'.join(stored)!r}: it "
            f"was dropped and added back, or renamed, while the write ran. Nothing was "
            f"committed; write again."
        )
    if not adopt:
        return plan
    if plan.metadata is None or not mapping.strip(plan.schema).equals(mapping.strip(written)):
        raise SchemaMismatchError(
            f"expected the schema the write's files were written with to be the one it "
            f"commits, found {mapping.strip(written)} vs {mapping.strip(plan.schema)}; "
            f"nothing was committed. Write again."
        )
    metadata = msgspec.structs.replace(plan.metadata, schema=encode_schema(written))
    return dataclasses.replace(plan, schema=written, metadata=metadata)


def _stored_paths(schema: pa.Schema) -> dict[tuple[str, ...], tuple[int | None, tuple[str, ...]]]:
    """Every field's path of names, to its column id and its path of physical names."""
    pairs = zip(mapping.walk(schema), mapping.walk(mapping.physical_schema(schema)), strict=True)
    return {path: (mapping.column_id(f), stored) for (path, f), (stored, _) in pairs}


def refuse_outside(where: Where, outside: int, *, what: str = "DataFrame") -> None:
    """Raise the refusal of rows outside ``replace_where`` (nothing committed)."""
    if outside:
        raise InvalidArgumentError(
            f"expected every row of the {what} to match replace_where {where.text!r} (the "
            f"write replaces exactly those rows), found {outside} row(s) outside it; filter "
            f"the {what} (df.where(...)) or widen replace_where. Nothing was committed."
        )


class _StagedOverwrite(DeleteChange):
    """The embedded ``overwrite(where=...)`` with its new rows already written (and
    checked to match the filter) by Spark."""

    operation = "OVERWRITE"

    def __init__(self, where: Where, adds: Sequence[AddFile]) -> None:
        super().__init__(where)
        self.new = Written(tuple(adds), sum(a.num_rows for a in adds))

    def parameters(self) -> dict[str, Any]:
        return {"where": self.where.text}

    def before(
        self, storage: Storage, lease_id: str, *, feed: ChangeWriter | None = None
    ) -> Written:
        if feed is not None:  # Spark's tasks wrote them: their rows are read back
            feed.add_files(self.new.adds, INSERT)
        return self.new


def _typed(value: str | None, t: pa.DataType) -> Any:
    """A partition value as its column type, so that two spellings of one value (Spark's
    folder name, lakelog's string) compare equal; the text itself if it does not parse."""
    if value is None:
        return None
    try:
        return pa.array([value], pa.string()).cast(t)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return value


def _dynamic_scope(
    snap: Snapshot, adds: Sequence[AddFile]
) -> tuple[list[dict[str, str | None]], list[Action]]:
    """The partitions the new files are in (each in the files' spelling and in lakelog's)
    and the removes of the live files in them."""
    parts = snap.partition_by
    types = [snap.schema.field(c).type for c in parts]

    def key(partition: Mapping[str, str | None]) -> tuple[Any, ...]:
        return tuple(_typed(partition.get(c), t) for c, t in zip(parts, types, strict=True))

    keys = {key(a.partition): a.partition for a in adds}
    scope: dict[tuple[tuple[str, str | None], ...], dict[str, str | None]] = {}
    for typed, given in keys.items():
        for spelling in (
            {c: given.get(c) for c in parts},
            {c: partition_string(v) for c, v in zip(parts, typed, strict=True)},
        ):
            scope[tuple(spelling.items())] = spelling
    removes: list[Action] = [*overwrite_removes(snap, lambda f: key(f.partition) in keys)]
    return list(scope.values()), removes


def auto_compact_here(storage: Storage, result: CommitResult | None, *, entry: str) -> None:
    """The auto-compaction after a data source's commit (``entry``: the writer, for the
    log), run where that commit ran. Spark calls a Python data source's ``commit`` in a
    Python worker of the driver that has no SparkSession and ends with the call, so the
    run is the embedded one (threads of this process, inline whatever
    ``lakelog.auto_compact.mode`` says), bounded by ``lakelog.auto_compact.max_bytes``,
    after the commit landed. Never raises: the outcome is logged (a failure as a
    warning, by :func:`~lakelog.maintenance.auto.run_auto_compaction`)."""
    if result is None or result.skipped or not any(isinstance(a, AddFile) for a in result.actions):
        return
    from ..maintenance.auto import run_auto_compaction

    try:
        table = TableCore.load(storage)
        if not get_bool(table.properties, "lakelog.auto_compact"):
            return
        outcome = run_auto_compaction(table, result, mode="inline")
    except Exception as e:  # noqa: BLE001 - the commit landed; the next one tries again
        log.warning(
            "%s: auto-compaction after version %d could not start (the commit stays): %r",
            entry,
            result.version,
            e,
        )
        return
    if outcome is not None:
        log.info(
            "%s: auto-compaction after version %d: %s (version %s, %d files -> %d)",
            entry,
            result.version,
            outcome.status,
            outcome.version,
            outcome.files_removed,
            outcome.files_added,
        )


def same_partitioning(snap: Snapshot, partition_by: Sequence[str]) -> bool:
    """Whether ``partition_by`` (columns, or transforms in any spelling: ``days(ts)``,
    ``bucket(16,id)``) is the table's current partitioning."""
    spec = snap.partition_spec
    if spec is None:
        return tuple(partition_by) == tuple(snap.partition_by)
    return tuple(parse_field(p).text for p in partition_by) == spec.texts


def commit_written(
    storage: Storage,
    snap: Snapshot | None,
    adds: list[AddFile],
    spec: WriteSpec,
    *,
    plan: WritePlan,
    partition_by: Sequence[str],
    properties: Mapping[str, str],
    where: Where | None = None,
    lease: Lease | None = None,
    parameters: Mapping[str, Any] | None = None,
    operation: str = "SPARK WRITE",
    create_operation: str = "SPARK CREATE TABLE AS WRITE",
    numbered: Sequence[Sequence[AddFile]] = (),
    numbered_from: pa.Schema | None = None,
    numbers: Sequence[str] = (),
) -> CommitResult:
    """Commit the data files ``adds`` (already at their final paths, under ``lease``) as
    ``spec`` says, on top of ``snap`` (None: create the table, with ``plan.schema``,
    ``partition_by`` and ``properties``). ``where``: the parsed ``replace_where``, whose
    rows the caller checked. ``parameters`` go to the commit header besides the mode's.

    A write whose app version landed first deletes ``adds`` and returns the commit that
    recorded it (``skipped=True``); a write refused before its put (a conflict, an expired
    lease) deletes ``adds`` and raises; any other failure leaves them (the commit may have
    landed; vacuum removes them if not).

    ``numbered``: per task, the files of ``adds`` whose identity columns ``numbers`` the task
    numbered from the first value of ``numbered_from`` (the schema the tasks got), as
    if it were the write's only task; the commit moves each task's values past the
    tasks' before it and the marks of ``snap`` (:func:`numbered_tasks`), records the
    mark, and moves them again past a concurrent write's (docs/constraints.md)."""
    try:
        with staged(storage) as files:
            files.add(adds)
            identity = None
            if snap is not None and numbered_from is not None and numbers:
                adds, identity = numbered_tasks(
                    storage,
                    snap,
                    plan.schema,
                    adds,
                    numbered,
                    numbered_from,
                    numbers,
                    lease=lease,
                    files=files,
                )
            return _commit(
                storage,
                snap,
                adds,
                spec,
                plan=plan,
                partition_by=tuple(partition_by),
                properties=properties,
                where=where,
                lease=lease,
                parameters=dict(parameters or {}),
                operation=operation,
                create_operation=create_operation,
                identity=identity,
            )
    except AppVersionCommittedError as e:  # the same batch landed first; files deleted
        return landed_first(storage, e, operation=operation)


def numbered_columns(schema: pa.Schema, given: Sequence[str]) -> tuple[str, ...]:
    """The identity columns of ``schema`` a DataFrame of columns ``given`` lacks: the
    write's tasks number them."""
    return tuple(c for c in guards_of(schema).identity if c not in given)


def numbered_tasks(
    storage: Storage,
    snap: Snapshot,
    schema: pa.Schema,
    adds: list[AddFile],
    numbered: Sequence[Sequence[AddFile]],
    numbered_from: pa.Schema,
    numbers: Sequence[str],
    *,
    lease: Lease | None,
    files: Staged,
) -> tuple[list[AddFile], IdentityWrite | None]:
    """``adds`` with each task's identity values moved to its place in the write, and
    the :class:`~lakelog.core.identity.IdentityWrite` whose marks the commit records
    and whose rebase moves them past a concurrent write's.

    Every task numbered its rows from the first value above the marks of
    ``numbered_from``, as if it were alone; task ``k``'s files are written again with
    their values moved by the rows of the tasks before it, plus however far ``snap``'s
    marks moved past ``numbered_from``'s (a streaming micro-batch's tasks ran on an
    older snapshot than its commit). The first task's files stay as written when
    nothing moved. A write's values are thus consecutive from ``snap``'s mark."""
    current = with_marks(schema, {c: m for c, m in marks_of(snap.schema).items() if m is not None})
    identity = IdentityWrite(
        storage,
        current,
        partition_by=snap.partition_by,
        options=write_options_from(snap.properties),
        lease_id=None if lease is None else lease.lease_id,
        files=files,
    )
    numbered = [list(t) for t in numbered if t]
    if not identity or not numbered:
        return adds, None
    now = guards_of(current).identity
    then = guards_of(numbered_from).identity
    names = [c for c in numbers if c in now and c in then]
    moved: dict[str, list[AddFile]] = {}
    before = 0
    for task in numbered:
        shifts = {c: now[c].first() - then[c].first() + before * now[c].step for c in names}
        if any(shifts.values()):
            for a in task:
                moved[a.path] = identity.shifted(a, shifts)
        before += sum(a.num_rows for a in task)
    if not before:
        return adds, None
    out = [m for a in adds for m in moved.get(a.path, [a])]
    identity.allocator.marks.update({c: now[c].first() + (before - 1) * now[c].step for c in names})
    identity.only = {m.path for t in numbered for a in t for m in moved.get(a.path, [a])}
    return out, identity


def _commit(
    storage: Storage,
    snap: Snapshot | None,
    adds: list[AddFile],
    spec: WriteSpec,
    *,
    plan: WritePlan,
    partition_by: tuple[str, ...],
    properties: Mapping[str, str],
    where: Where | None,
    lease: Lease | None,
    parameters: dict[str, Any],
    operation: str,
    create_operation: str,
    identity: IdentityWrite | None = None,
) -> CommitResult:
    app = spec.app
    metrics: dict[str, Any] = {
        "num_files": len(adds),
        "num_rows": sum(a.num_rows for a in adds),
        "num_bytes": sum(a.size_bytes for a in adds),
    }
    if snap is None:
        try:
            created = create_with_files(
                storage,
                plan.schema,
                partition_by=partition_by,
                properties=properties,
                adds=adds,
                operation=create_operation,
                lease=lease,
                app=app,
            )
            return CommitResult(version=created.version, attempts=1, operation=create_operation)
        except TableExistsError:
            if spec.mode == "error":
                raise
            snap = load_snapshot(storage)  # created concurrently: commit on top of it
            if not same_partitioning(snap, partition_by):
                raise SchemaMismatchError(
                    f"expected partition_by {snap.partitioning} of the table created "
                    f"concurrently, found {list(partition_by)}; nothing was committed."
                ) from None
            if to_spark_schema(snap.schema) != to_spark_schema(plan.schema):
                raise SchemaMismatchError(
                    f"expected the schema of the table created concurrently to match the "
                    f"data written, found {snap.schema} vs {plan.schema}; nothing was "
                    f"committed."
                ) from None
            plan = WritePlan(snap.schema)
            if where is not None:
                where = Where(spec.replace_where, snap.schema, operation="OVERWRITE")
    if where is not None:
        done = run_change(
            TableCore(storage, snap),
            _StagedOverwrite(where, adds),
            snap,
            lease=lease,
            extra_actions=[
                *[m for m in [identity and identity.metadata(snap.metadata)] if m],
                *([] if app is None else [app]),
            ],
        )
        return CommitResult(
            version=done.version,
            attempts=done.attempts,
            txn_id=done.txn_id,
            operation=done.operation,
            actions=done.actions,
            skipped=not done.committed,
        )
    metadata = plan.metadata
    if identity is not None:  # the marks of the values the tasks gave out
        metadata = identity.metadata(metadata or snap.metadata) or metadata
    actions: list[Action] = [metadata] if metadata is not None else []
    scope: list[dict[str, str | None]] | None = None
    header = {**spec.header(), **plan.parameters(), **parameters}
    if spec.mode == "overwrite":
        if spec.partition_overwrite == "dynamic" and snap.partition_by:
            scope, removes = _dynamic_scope(snap, adds)
            header.update(partition_overwrite="dynamic", partitions=scope)
        else:
            removes = [*overwrite_removes(snap)]
        actions += removes
        metrics["num_removed_files"] = len(removes)
    actions += adds
    if app is not None:
        check_app_versions([app], snap.app_versions, snap.app_commits)
        actions.append(app)
    return commit(
        storage,
        snap,
        actions,
        operation=operation,
        kind="overwrite" if spec.mode == "overwrite" else "append",
        parameters=header,
        metrics=metrics,
        replaced_partitions=scope,
        lease=lease,
        rebase=identity,
    ).result
