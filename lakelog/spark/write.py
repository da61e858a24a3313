"""Writing a DataFrame with Spark's native Parquet writer as one atomic lakelog commit.

1. The DataFrame schema is checked against the table (or the table's schema
   is derived from it) before Spark runs anything.
2. Executors write under ``<root>/_spark_staging/<write-id>/``: a prefix no
   other job uses, so the driver knows exactly which files this job wrote.
   Spark's file index skips names starting with ``_``, so a directory read
   of the table never sees staged files.
3. The driver reads the new files' footers in parallel (row counts, stats,
   and a check that the file columns are exactly the table's), moves each
   file to ``<root>/<col>=<value>/...`` (the folder names Spark wrote,
   which Spark reads back exactly), and commits one ``add`` commit, or an
   ``overwrite`` that removes every file of the version the write started
   from, with the core's compare-and-swap retries.

From before Spark runs until the commit landed, the write holds a writer
lease (:mod:`lakelog.leases`): the staging folder's name and every published
file name carry its id, so ``vacuum`` keeps them however long the job runs.
With ``optimize_write`` (or ``lakelog.optimize_write``) the rows are shuffled by
partition before step 2 (:func:`optimized_frame`). After the commit, a table with
``lakelog.auto_compact`` on gets its auto-compaction as a Spark job (:func:`auto_compact`).

A failed or killed job commits nothing. Its files are never referenced by
the log; this module deletes what it can and ``vacuum`` removes the rest
once they are older than its age guard and the lease expired.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from .. import threads
from ..core import SchemaMode, TableCore, WritePlan
from ..errors import (
    CommitConflictError,
    InvalidArgumentError,
    SchemaMismatchError,
    TableExistsError,
    TableNotFoundError,
)
from ..io.parquet_settings import check_parquet_properties, parquet_options
from ..leases import Lease
from ..log import mapping
from ..log.actions import AddFile
from ..log.snapshot import Snapshot, load_snapshot
from ..maintenance.auto import run_auto_compaction
from ..maintenance.clustering.spec import declared_clustering
from ..partitioning import STAGING_DIR, hidden_name, parse_partition_dir
from ..properties import get_bool, get_int, get_str, validate_properties
from ..rowlevel.predicate import Where
from ..stats import stats_from_metadata
from ..storage import Storage
from ..transaction import CommitResult, skipped_result
from ..transforms import PartitionSpec, partition_layout
from .columns import conformed, physical_columns
from .guards import filled_columns, guarded
from .modes import (
    PARTITION_OVERWRITE_CONF,
    Mode,
    PartitionOverwrite,
    WriteSpec,
    commit_written,
    count_outside,
    dataframe_plan,
    numbered_columns,
    outside_rows,
    parse_replace_where,
    refuse_outside,
    same_partitioning,
    write_spec,
)
from .read import columns_of, session_conf, spark_url
from .schema import (
    check_dataframe_schema,
    check_file_schema,
    output_timestamp_type,
    to_arrow_schema,
    to_spark_type,
)
from .tasks import discard_staging

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..filters import FilterLike

__all__ = [
    "STAGING_DIR",
    "auto_compact",
    "discard_staging",  # lakelog.spark.tasks', where the Spark merge also finds it
    "optimized_frame",
    "write",
    "write_dataframe",
]

log = logging.getLogger("lakelog.spark")


_SPARK_CODECS = {
    "none": "uncompressed",
    "snappy": "snappy",
    "gzip": "gzip",
    "zstd": "zstd",
    "lz4": "lz4_raw",
}


def write(
    df: DataFrame,
    uri: str,
    *,
    mode: Mode = "append",
    replace_where: FilterLike = None,
    partition_overwrite: PartitionOverwrite | None = None,
    schema_mode: SchemaMode = "strict",
    partition_by: Sequence[str] = (),
    properties: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    app_id: str | None = None,
    app_version: int | None = None,
    optimize_write: bool | None = None,
) -> CommitResult:
    """Write ``df`` to the table at ``uri`` in one commit, creating the table if needed.

    Args:
        df: the rows to write.
        uri: the table's URI.
        mode: ``"append"`` (default) adds rows; ``"overwrite"`` replaces every row of the
            version the write started from (:class:`CommitConflictError` if rows were
            added meanwhile); ``"error"`` refuses an existing table.
        replace_where: with ``mode="overwrite"``, a lakelog filter (SQL-like string, DNF
            tuples or pyarrow Expression): replace exactly the rows matching it, as
            ``Table.overwrite(where=...)`` does (commit operation ``OVERWRITE``); every
            row of ``df`` must match it, counted by Spark before the commit, or
            :class:`InvalidArgumentError` and nothing committed. Default None.
        partition_overwrite: with ``mode="overwrite"``, ``"dynamic"`` replaces only the
            partitions ``df`` has rows in (the whole table when unpartitioned, as in
            Spark and Delta), ``"static"`` the whole table; default None follows the
            session's ``spark.sql.sources.partitionOverwriteMode`` (default ``static``).
        schema_mode: ``"merge"`` adds the DataFrame's new columns to the table and widens
            columns it holds in a wider type, in the same commit as the rows (columns it
            lacks are written as nulls), as ``Table.append(schema_mode="merge")`` does;
            default ``"strict"``.
        partition_by: partition columns or transforms (``"day(ts)"``, ``"bucket(16, id)"``)
            if the table is created; default none.
        properties: table properties if the table is created (checked by name and value
            whatever the table: an unknown ``lakelog.*`` name is refused); default none.
        storage_options: fsspec options for lakelog's access; Spark writes through its
            own Hadoop settings (S3A for s3://). Default none.
        app_id: with ``app_version``, makes the write exactly-once (in ``foreachBatch``,
            the query's name); default None.
        app_version: commit only if newer than the version recorded for ``app_id`` (in
            ``foreachBatch``, the batch id); otherwise Spark runs nothing (or, when the
            same batch landed meanwhile, its files are deleted) and the result is the
            commit that recorded it, with ``skipped=True``. Default None.
        optimize_write: shuffle the rows by partition (and by the declared clustering's
            key range) before writing, so the write makes about one file of
            ``lakelog.target_file_size`` per partition instead of one per task and
            partition (:func:`optimized_frame`); default None, the table property
            ``lakelog.optimize_write`` (of ``properties`` for a table the write creates).

    Returns:
        The commit. On a table with ``lakelog.auto_compact`` on, its
        ``auto_compaction`` says what the auto-compaction after it did (run as a Spark
        job, :func:`auto_compact`); the commit landed whatever that says.
    """
    if properties is not None:  # a typo'd name is refused even when the table exists
        properties = validate_properties(properties)
    session: str | None = None
    if partition_overwrite is None and mode == "overwrite" and replace_where is None:
        session = df.sparkSession.conf.get(PARTITION_OVERWRITE_CONF, None)
    spec = write_spec(
        mode=mode,
        replace_where=replace_where,
        partition_overwrite=partition_overwrite,
        schema_mode=schema_mode,
        app_id=app_id,
        app_version=app_version,
        partition_by=partition_by,
        properties=properties,
        session_partition_overwrite=session,
    )
    if replace_where is not None:  # Python workers count its rows: check them first
        from .environment import check_executors

        check_executors(df.sparkSession)
    result = write_dataframe(
        df, uri, spec, storage_options=storage_options, optimize_write=optimize_write
    )
    return auto_compact(df.sparkSession, uri, result, storage_options=storage_options)


def auto_compact(
    spark: SparkSession,
    uri: str,
    result: CommitResult,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> CommitResult:
    """``result`` with the outcome of the auto-compaction after it
    (:func:`lakelog.maintenance.auto.run_auto_compaction`: the same selection as the
    embedded writers', the groups rewritten by Spark tasks,
    :class:`~lakelog.spark.maintenance.SparkExecutor`) in ``auto_compaction``; ``result``
    unchanged when the table's ``lakelog.auto_compact`` is off or the commit added no
    data files. Never raises for the run: the commit landed (a failure is logged and
    reported as ``status="failed"``)."""
    if result.skipped or not any(isinstance(a, AddFile) for a in result.actions):
        return result
    try:
        table = TableCore.load(Storage(uri, storage_options))
    except Exception as e:  # noqa: BLE001 - the commit landed; the next one tries again
        log.warning("auto-compaction could not open %s (the commit stays): %r", uri, e)
        return result
    if not get_bool(table.properties, "lakelog.auto_compact"):
        return result
    from .maintenance import SparkExecutor

    outcome = run_auto_compaction(table, result, executor=SparkExecutor(spark))
    return result if outcome is None else dataclasses.replace(result, auto_compaction=outcome)


def optimized_frame(
    frame: DataFrame, schema: pa.Schema, parts: Sequence[str], props: Mapping[str, str]
) -> DataFrame:
    """``frame`` shuffled for an optimized write: rows of one partition together, so each
    write task holds few partitions and each partition few tasks.

    * a table that declares a clustering: ``repartitionByRange`` on the partition
      columns then the clustering columns, so each task writes one contiguous key range;
    * otherwise Spark's ``REBALANCE`` hint on the partition columns (none: rows spread
      evenly), which hashes each partition's rows to one task and lets adaptive query
      execution split a skewed partition and merge small ones.

    With adaptive execution (Spark's default) the tasks are sized to
    ``spark.sql.adaptive.advisoryPartitionSizeInBytes``, which the writer sets to the
    table's ``lakelog.target_file_size`` for the write. DataFrame API only: the same
    on classic Spark and Spark Connect.
    """
    from pyspark.sql import functions as F

    declared = declared_clustering(props)
    if declared is not None:
        names = [c for c in declared.columns if c in schema.names and c not in parts]
        if names:
            stored = [mapping.physical_name(schema.field(c)) for c in names]
            return frame.repartitionByRange(*[F.col(c) for c in (*parts, *stored)])
    return frame.hint("rebalance", *parts) if parts else frame.hint("rebalance")


def write_dataframe(
    df: DataFrame,
    uri: str,
    spec: WriteSpec,
    *,
    storage_options: Mapping[str, Any] | None = None,
    operation: str = "SPARK WRITE",
    parameters: Mapping[str, Any] | None = None,
    optimize_write: bool | None = None,
) -> CommitResult:
    """:func:`write` with its options checked (:func:`~lakelog.spark.modes.write_spec`):
    the one Spark write path, also for callers that get options from elsewhere (a
    streaming sink's micro-batch). ``operation`` and ``parameters`` go to the commit
    header, with the mode's own parameters (a ``replace_where`` write commits as the
    embedded ``OVERWRITE``, whose header records only its ``where``). ``optimize_write``:
    as :func:`write`'s."""
    storage = Storage(uri, storage_options)
    staging_root = spark_url(storage)  # refuses filesystems Spark cannot reach
    try:
        snap: Snapshot | None = load_snapshot(storage)
    except TableNotFoundError:
        snap = None
    if snap is not None:
        done = _check_existing(storage, snap, spec, operation)
        if done is not None:  # a retried batch: already in the table
            return done
        filled = filled_columns(snap.schema, df.columns)
        numbers = numbered_columns(snap.schema, df.columns)
        frame, plan = _aligned(df, snap, spec.schema_mode, [*filled, *numbers])
        # the table's rules, checked in the tasks that write the rows (guards.py); with
        # identity columns to number, lakelog's writer in the tasks numbers and checks
        frame = frame.drop(*numbers, *filled) if numbers else guarded(frame, plan.schema, filled)
        parts, props = snap.partition_by, snap.properties
        transforms = snap.partition_spec
    else:
        frame, plan, parts, props, transforms = _new_table_frame(df, spec)
        numbers = ()
    where = parse_replace_where(spec, plan.schema)  # a bad filter fails before Spark runs
    if transforms is not None or numbers:  # Spark's writer cannot: lakelog's tasks do
        return _write_in_tasks(
            storage,
            snap,
            frame,
            spec,
            plan=plan,
            transforms=transforms,
            parts=parts,
            numbers=numbers,
            properties=props,
            where=where,
            operation=operation,
            parameters=parameters,
        )
    frame, settings, optimized = _spark_frame(frame, plan.schema, parts, props, optimize_write)
    if optimized:
        parameters = {**(parameters or {}), "optimize_write": True}
    return _write_with_spark(
        storage,
        snap,
        frame,
        spec,
        session=df.sparkSession,
        staging_root=staging_root,
        plan=plan,
        parts=parts,
        props=props,
        settings=settings,
        where=where,
        operation=operation,
        parameters=parameters,
    )


def _check_existing(
    storage: Storage, snap: Snapshot, spec: WriteSpec, operation: str
) -> CommitResult | None:
    """Refuse a write the existing table ``snap`` cannot take (``mode="error"``, another
    partitioning); the commit that already holds the write's app version, if any."""
    if spec.mode == "error":
        raise TableExistsError(
            f"expected no table at {storage.uri} (mode='error'), found one at version "
            f"{snap.version}; use mode='append' or 'overwrite'."
        )
    done = skipped_result(snap, spec.app, operation=operation)
    if done is not None:
        return done
    if spec.partition_by and not same_partitioning(snap, spec.partition_by):
        raise SchemaMismatchError(
            f"expected partition_by {snap.partitioning} of the existing table, "
            f"found {list(spec.partition_by)}; omit partition_by when writing to an "
            f"existing table."
        )
    return None


def _new_table_frame(
    df: DataFrame, spec: WriteSpec
) -> tuple[DataFrame, WritePlan, tuple[str, ...], dict[str, str], PartitionSpec | None]:
    """The frame to write, its plan, partition columns, properties and partition
    transforms of a table the write creates (with ``df``'s schema), checked."""
    created = to_arrow_schema(df.schema)
    parts, specs = partition_layout(created, spec.partition_by)
    transforms = PartitionSpec.of(0, specs[0]) if specs else None
    props = validate_properties(spec.properties or {})
    check_dataframe_schema(df.schema, created)
    check_parquet_properties(props, created, parts)
    frame = df.select(*columns_of(created.names))
    return frame, WritePlan(created), parts, props, transforms


def _spark_frame(
    frame: DataFrame,
    schema: pa.Schema,
    parts: Sequence[str],
    props: Mapping[str, str],
    optimize_write: bool | None,
) -> tuple[DataFrame, dict[str, str], bool]:
    """The frame Spark's Parquet writer writes (physical column names, clustered by
    optimized writes), the session settings it writes under, and whether the write is
    optimized; refuses a codec Spark cannot write."""
    file_schema = pa.schema([f for f in schema if f.name not in parts])
    # files hold their columns under physical names, with ids as Parquet field ids, and
    # the log keys their statistics by those names (format.md, "Column ids")
    if mapping.is_mapped(schema):
        frame = frame.select(*physical_columns(schema, keep=parts))
    codec = get_str(props, "lakelog.compression")
    if codec not in _SPARK_CODECS:
        raise InvalidArgumentError(
            f"expected lakelog.compression among {sorted(_SPARK_CODECS)} for Spark writes, "
            f"found {codec!r}; change the table property or write from Arrow."
        )
    settings = {"spark.sql.parquet.writeLegacyFormat": "false"}
    optimize = (
        get_bool(props, "lakelog.optimize_write") if optimize_write is None else optimize_write
    )
    if optimize:
        frame = optimized_frame(frame, schema, parts, props)
        size = get_int(props, "lakelog.target_file_size")
        settings["spark.sql.adaptive.advisoryPartitionSizeInBytes"] = str(size)
    ts_type = output_timestamp_type(file_schema)
    if ts_type is not None:
        settings["spark.sql.parquet.outputTimestampType"] = ts_type
    return frame, settings, optimize


def _write_with_spark(
    storage: Storage,
    snap: Snapshot | None,
    frame: DataFrame,
    spec: WriteSpec,
    *,
    session: SparkSession,
    staging_root: str,
    plan: WritePlan,
    parts: Sequence[str],
    props: Mapping[str, str],
    settings: Mapping[str, str],
    where: Where | None,
    operation: str,
    parameters: Mapping[str, Any] | None,
) -> CommitResult:
    """Write ``frame`` with Spark's Parquet writer into a staging folder under a lease,
    publish the files and commit them; a failure removes what was written."""
    schema = plan.schema
    stored_schema = mapping.physical_schema(pa.schema([f for f in schema if f.name not in parts]))
    codec = get_str(props, "lakelog.compression")
    # the lease covers the staging folder and the published names until the commit
    with Lease.acquire(storage, operation=operation, properties=props) as lease:
        write_id = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{lease.lease_id}"
        staging = f"{STAGING_DIR}/{write_id}"
        target = f"{staging_root}/{staging}"
        writer = frame.write.mode("error").option("compression", _SPARK_CODECS[codec])
        writer = writer.options(**spark_parquet_options(props, schema, parts))
        if parts:
            writer = writer.partitionBy(*parts)
        moved: list[str] = []
        try:
            with session_conf(session, settings):
                writer.parquet(target)
            adds = _collect(storage, staging, stored_schema, parts)
            if where is not None and adds:
                # Spark counts, on the files it wrote, the rows the filter does not match
                refuse_outside(
                    where, count_outside(session, target, schema, where, partition_by=parts)
                )
            moved = _publish(storage, staging, adds, lease.lease_id)
            adds = [_moved(a, staging, lease.lease_id) for a in adds]
        except BaseException:
            storage.delete(moved)
            discard_staging(storage, staging)
            raise
        try:
            return commit_written(
                storage,
                snap,
                adds,
                spec,
                plan=plan,
                partition_by=parts,
                properties=props,
                where=where,
                lease=lease,
                parameters=parameters,
                operation=operation,
            )
        finally:
            discard_staging(storage, staging)


def _write_in_tasks(
    storage: Storage,
    snap: Snapshot | None,
    frame: DataFrame,
    spec: WriteSpec,
    *,
    plan: WritePlan,
    transforms: PartitionSpec | None,
    parts: Sequence[str],
    numbers: Sequence[str],
    properties: Mapping[str, str],
    where: Where | None,
    operation: str,
    parameters: Mapping[str, Any] | None,
) -> CommitResult:
    """A write into a table partitioned by transforms (or creating one): Spark's tasks
    write their rows with lakelog's writer, which splits them by the spec's values and
    records them in each file's tags (as ``df.write.format("lakelog")`` does); the files
    carry the write's lease; one commit on the driver. Also a write into a table with
    identity columns ``numbers`` the DataFrame lacks: each task numbers its rows, the
    commit moves each task's values to its place (:func:`~.modes.numbered_tasks`)."""
    from .batch import write_task_files
    from .environment import check_executors
    from .rowlevel.jobs import RECORDS, collect_records, decode_records, map_in_arrow, task_record

    check_executors(frame.sparkSession)
    uri, options = storage.uri, dict(storage.storage_options)
    schema_bytes = plan.schema.serialize().to_pybytes()
    props = dict(properties)
    condition = spec.replace_where
    lease_id = ""  # set below, before Spark ships the task

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        here = Storage(uri, options)
        schema = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
        expression = (
            None
            if condition is None
            else Where(condition, schema, operation="OVERWRITE").expression
        )
        outside = 0

        def rows() -> Iterator[pa.RecordBatch]:
            nonlocal outside
            for b in batches:
                if expression is not None:
                    outside += outside_rows(b, expression, schema)
                    if outside:  # refused: count the rest, write nothing
                        continue
                yield b

        adds = write_task_files(
            here,
            rows(),
            schema=schema,
            partition_by=() if transforms is not None else tuple(parts),
            properties=props,
            lease_id=lease_id,
            spec=transforms,
        )
        if outside:
            here.delete([a.path for a in adds])
            yield task_record("outside", str(outside).encode())
        elif adds:
            yield task_record("new", msgspec.json.encode(adds))

    with Lease.acquire(storage, operation=operation, properties=props) as lease:
        lease_id = lease.lease_id
        records = collect_records(map_in_arrow(frame, run, RECORDS), operation)
        adds = decode_records(records).new
        tasks = [decode_records([r]).new for r in records if r.kind == "new"]
        outside = sum(int(bytes(r.payload)) for r in records if r.kind == "outside")
        if where is not None and outside:
            storage.delete([a.path for a in adds])
            refuse_outside(where, outside)
        return commit_written(
            storage,
            snap,
            adds,
            spec,
            plan=plan,
            partition_by=snap.partition_by
            if snap is not None
            else (transforms.texts if transforms is not None else ()),
            properties=props,
            where=where,
            lease=lease,
            parameters=parameters,
            operation=operation,
            numbered=tasks,
            numbered_from=plan.schema,
            numbers=numbers,
        )


def _aligned(
    df: DataFrame, snap: Snapshot, schema_mode: SchemaMode, filled: Sequence[str] = ()
) -> tuple[DataFrame, WritePlan]:
    """``df`` as the columns of the schema it is written with, in order (:func:`dataframe_plan`):
    a column cast where the table's type is wider, nulls for a column it lacks (and for
    the generated columns ``filled``, which the guard computes)."""
    from pyspark.sql import functions as F

    plan = dataframe_plan(df.schema, snap, schema_mode)
    if schema_mode == "strict":
        if not filled:
            return df.select(*columns_of(plan.schema.names)), plan
        return df.select(
            *[
                F.lit(None).cast(to_spark_type(f.type)).alias(f.name)
                if f.name in filled
                else columns_of([f.name])[0]
                for f in plan.schema
            ]
        ), plan

    given = {f.name: f.dataType for f in df.schema.fields}
    columns = []
    for field in plan.schema:
        want = to_spark_type(field.type)
        if field.name not in given:
            column = F.lit(None).cast(want)
        else:
            # struct fields by name, not by position as Spark's cast takes them
            column = conformed(columns_of([field.name])[0], given[field.name], want)
        columns.append(column.alias(field.name))
    frame = df.select(*columns)
    check_dataframe_schema(frame.schema, plan.schema)
    return frame, plan


def spark_parquet_options(
    props: Mapping[str, str], schema: pa.Schema, parts: Sequence[str]
) -> dict[str, str]:
    """Spark (parquet-mr) writer options for the ``lakelog.parquet.*`` properties.

    parquet-mr always writes the column and offset index, so
    ``lakelog.parquet.page_index=false`` has no Spark equivalent; an automatic bloom
    filter size (``bloom_filter_ndv=0``) is parquet-mr's adaptive sizing.
    """
    opts = parquet_options(props)
    out = {"parquet.page.size": str(opts.data_page_size)}
    for column in opts.bloom_filter_columns:
        if column not in schema.names or column in parts:
            continue
        # parquet-mr names the column as the file stores it (format.md, "Column ids")
        name = mapping.physical_name(schema.field(column))
        out[f"parquet.bloom.filter.enabled#{name}"] = "true"
        out[f"parquet.bloom.filter.fpp#{name}"] = repr(opts.bloom_filter_fpp)
        if opts.bloom_filter_ndv:
            out[f"parquet.bloom.filter.expected.ndv#{name}"] = str(opts.bloom_filter_ndv)
        else:
            out[f"parquet.bloom.filter.adaptive.enabled#{name}"] = "true"
    return out


def _collect(
    storage: Storage, staging: str, file_schema: pa.Schema, parts: Sequence[str]
) -> list[AddFile]:
    """AddFiles (staging paths) for exactly the data files this job wrote, checked
    against and with statistics keyed by ``file_schema``, the *physical* schema of the
    table's file columns (:func:`lakelog.log.mapping.physical_schema`)."""
    found = []
    for info in storage.walk(staging):
        rel = info.path[len(staging) + 1 :]
        segments = rel.split("/")
        if any(hidden_name(s) for s in segments) or not segments[-1].endswith(".parquet"):
            continue  # _SUCCESS, .crc checksums, _temporary leftovers
        found.append((info.path, rel, info.size))

    def footer(item: tuple[str, str, int]) -> AddFile:
        path, rel, size = item
        with storage.open_input(path) as fh:
            md = pq.read_metadata(fh)
        check_file_schema(path, md.schema.to_arrow_schema(), file_schema)
        values = parse_partition_dir(rel)
        if set(values) != set(parts):
            raise SchemaMismatchError(
                f"expected Spark to write {path} under folders for the partition columns "
                f"{list(parts)}, found {sorted(values)}; nothing was committed."
            )
        return AddFile(
            path=path,
            size_bytes=size,
            num_rows=md.num_rows,
            partition={c: values[c] for c in parts},
            stats=stats_from_metadata(md, file_schema),
            modification_ms=int(time.time() * 1000),
        )

    with threads.pool("lakelog-spark-footers", min(16, max(1, len(found)))) as pool:
        adds = list(pool.map(footer, found))
    empty = [a.path for a in adds if a.num_rows == 0]
    storage.delete(empty)  # Spark writes a schema-only file for an empty DataFrame
    return [a for a in adds if a.num_rows > 0]


def _destination(staged: str, staging: str, lease_id: str) -> str:
    """Where a staged file is published: its partition folders below the root, the
    writer's lease id added to the name Spark gave it (so vacuum keeps it until the
    commit)."""
    folder, _, name = staged[len(staging) + 1 :].rpartition("/")
    stem, dot, ext = name.partition(".")
    leased = f"{stem}-{lease_id}{dot}{ext}"
    return f"{folder}/{leased}" if folder else leased


def _moved(add: AddFile, staging: str, lease_id: str) -> AddFile:
    return AddFile(
        path=_destination(add.path, staging, lease_id),
        size_bytes=add.size_bytes,
        num_rows=add.num_rows,
        partition=add.partition,
        stats=add.stats,
        modification_ms=add.modification_ms,
    )


def _publish(storage: Storage, staging: str, adds: Sequence[AddFile], lease_id: str) -> list[str]:
    """Move staged files to their partition folders (names carry the job's UUID and
    the writer's lease id)."""
    moves = [(a.path, _destination(a.path, staging, lease_id)) for a in adds]
    clashes = [dst for _, dst in moves if storage.exists(dst)]
    if clashes:
        raise CommitConflictError(
            f"expected new file names, found {clashes[:3]} already in the table; "
            f"nothing was committed. Retry the write.",
            conflicting_files=tuple(clashes),
        )
    for parent in {dst.rsplit("/", 1)[0] for _, dst in moves if "/" in dst}:
        storage.fs.makedirs(storage.full(parent), exist_ok=True)
    done: list[str] = []

    def move(item: tuple[str, str]) -> None:
        src, dst = item
        storage.fs.mv(storage.full(src), storage.full(dst))
        done.append(dst)

    try:
        with threads.pool("lakelog-spark-move", min(16, max(1, len(moves)))) as pool:
            list(pool.map(move, moves))
    except BaseException:
        storage.delete(done)
        raise
    return done
