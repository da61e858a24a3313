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
A failed or killed job commits nothing. Its files are never referenced by
the log; this module deletes what it can and ``vacuum`` removes the rest
once they are older than its age guard and the lease expired.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import (
    AppVersionCommittedError,
    CommitConflictError,
    InvalidArgumentError,
    LeaseExpiredError,
    SchemaMismatchError,
    TableExistsError,
    TableNotFoundError,
)
from ..io.parquet_settings import check_parquet_properties, parquet_options
from ..leases import Lease
from ..log.actions import AddFile, AppTransaction
from ..log.snapshot import Snapshot, load_snapshot
from ..partitioning import STAGING_DIR, check_partition_columns, hidden_name, parse_partition_dir
from ..properties import get_str, validate_properties
from ..stats import stats_from_metadata
from ..storage import Storage
from ..table import Table, create_with_files
from ..transaction import CommitResult, app_commit, app_transaction, skipped_result
from .read import columns_of, session_conf, spark_url
from .schema import (
    check_dataframe_schema,
    check_file_schema,
    output_timestamp_type,
    to_arrow_schema,
    to_spark_schema,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["STAGING_DIR", "discard_staging", "write"]

log = logging.getLogger("lakelog.spark")


_SPARK_CODECS = {
    "none": "uncompressed",
    "snappy": "snappy",
    "gzip": "gzip",
    "zstd": "zstd",
    "lz4": "lz4_raw",
}

Mode = Literal["append", "overwrite", "error"]


def write(
    df: DataFrame,
    uri: str,
    *,
    mode: Mode = "append",
    partition_by: Sequence[str] = (),
    properties: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    app_id: str | None = None,
    app_version: int | None = None,
) -> CommitResult:
    """Write ``df`` to the table at ``uri`` in one commit, creating the table if needed.

    ``mode``: ``"append"`` adds rows, ``"overwrite"`` replaces every row of
    the version the write started from (it fails with
    :class:`CommitConflictError` if rows were added meanwhile), ``"error"``
    refuses an existing table. ``partition_by`` and ``properties`` apply
    when the table is created. ``storage_options`` reach lakelog's fsspec
    access; Spark writes through its own Hadoop settings (S3A for s3://).

    ``app_id``/``app_version`` make the write exactly-once (in ``foreachBatch``, the
    query's name and the batch id): it commits only if ``app_version`` is newer than
    the version recorded for ``app_id``; otherwise Spark runs nothing (or, when the
    same batch landed meanwhile, its files are deleted) and the result is the commit
    that recorded it, with ``skipped=True``.
    """
    if mode not in ("append", "overwrite", "error"):
        raise InvalidArgumentError(
            f"expected mode 'append', 'overwrite' or 'error', found {mode!r}"
        )
    app = app_transaction(app_id, app_version)
    if isinstance(partition_by, str):
        partition_by = (partition_by,)
    storage = Storage(uri, storage_options)
    staging_root = spark_url(storage)  # refuses filesystems Spark cannot reach
    try:
        snap: Snapshot | None = load_snapshot(storage)
    except TableNotFoundError:
        snap = None
    if snap is not None:
        if mode == "error":
            raise TableExistsError(
                f"expected no table at {storage.uri} (mode='error'), found one at version "
                f"{snap.version}; use mode='append' or 'overwrite'."
            )
        done = skipped_result(snap, app, operation="SPARK WRITE")
        if done is not None:  # a retried batch: already in the table
            return done
        if partition_by and tuple(partition_by) != snap.partition_by:
            raise SchemaMismatchError(
                f"expected partition_by {list(snap.partition_by)} of the existing table, "
                f"found {list(partition_by)}; omit partition_by when writing to an "
                f"existing table."
            )
        check_dataframe_schema(df.schema, snap.schema)
        schema, parts = snap.schema, snap.partition_by
        props = snap.properties
    else:
        schema = to_arrow_schema(df.schema)
        parts = check_partition_columns(schema, partition_by)
        props = validate_properties(properties or {})
        check_dataframe_schema(df.schema, schema)
        check_parquet_properties(props, schema, parts)
    file_schema = pa.schema([f for f in schema if f.name not in parts])
    codec = get_str(props, "lakelog.compression")
    if codec not in _SPARK_CODECS:
        raise InvalidArgumentError(
            f"expected lakelog.compression among {sorted(_SPARK_CODECS)} for Spark writes, "
            f"found {codec!r}; change the table property or write from Arrow."
        )
    settings = {"spark.sql.parquet.writeLegacyFormat": "false"}
    ts_type = output_timestamp_type(file_schema)
    if ts_type is not None:
        settings["spark.sql.parquet.outputTimestampType"] = ts_type

    # the lease covers the staging folder and the published names until the commit
    with Lease.acquire(storage, operation="SPARK WRITE", properties=props) as lease:
        write_id = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{lease.lease_id}"
        staging = f"{STAGING_DIR}/{write_id}"
        target = f"{staging_root}/{staging}"
        ordered = df.select(*columns_of(schema.names))
        writer = ordered.write.mode("errorifexists").option("compression", _SPARK_CODECS[codec])
        writer = writer.options(**spark_parquet_options(props, schema, parts))
        if parts:
            writer = writer.partitionBy(*parts)
        spark = df.sparkSession
        try:
            with session_conf(spark, settings):
                writer.parquet(target)
        except BaseException:
            discard_staging(storage, staging)
            raise

        moved: list[str] = []
        try:
            adds = _collect(storage, staging, file_schema, parts)
            moved = _publish(storage, staging, adds, lease.lease_id)
            adds = [_moved(a, staging, lease.lease_id) for a in adds]
        except BaseException:
            storage.delete(moved)
            discard_staging(storage, staging)
            raise
        try:
            result = _commit(
                storage,
                snap,
                adds,
                mode=mode,
                schema=schema,
                parts=parts,
                props=props,
                lease=lease,
                app=app,
            )
        except AppVersionCommittedError as e:  # the same batch landed first
            storage.delete(moved)
            discard_staging(storage, staging)
            return CommitResult(
                version=app_commit(
                    storage,
                    e.app_id,
                    e.app_version,
                    recorded=e.recorded_version,
                    recorded_at=e.winning_version if e.winning_version is not None else -1,
                ),
                attempts=0,
                operation="SPARK WRITE",
                skipped=True,
            )
        except (CommitConflictError, LeaseExpiredError, SchemaMismatchError, TableExistsError):
            # certainly not committed (any other error may hide a landed commit: keep the files)
            storage.delete(moved)
            discard_staging(storage, staging)
            raise
        discard_staging(storage, staging)
        return result


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
    for name in opts.bloom_filter_columns:
        if name not in schema.names or name in parts:
            continue
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
    """AddFiles (staging paths) for exactly the data files this job wrote."""
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

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(found)))) as pool:
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
        with ThreadPoolExecutor(max_workers=min(16, max(1, len(moves)))) as pool:
            list(pool.map(move, moves))
    except BaseException:
        storage.delete(done)
        raise
    return done


def _commit(
    storage: Storage,
    snap: Snapshot | None,
    adds: list[AddFile],
    *,
    mode: Mode,
    schema: pa.Schema,
    parts: Sequence[str],
    props: Mapping[str, str],
    lease: Lease,
    app: AppTransaction | None = None,
) -> CommitResult:
    metrics = {
        "num_files": len(adds),
        "num_rows": sum(a.num_rows for a in adds),
        "num_bytes": sum(a.size_bytes for a in adds),
    }
    if snap is None:
        try:
            created = create_with_files(
                storage,
                schema,
                partition_by=parts,
                properties=props,
                adds=adds,
                operation="SPARK CREATE TABLE AS WRITE",
                lease=lease,
                app=app,
            )
            return CommitResult(
                version=created.version, attempts=1, operation="SPARK CREATE TABLE AS WRITE"
            )
        except TableExistsError:
            if mode == "error":
                raise
            snap = load_snapshot(storage)  # created concurrently: commit on top of it
            if tuple(snap.partition_by) != tuple(parts):
                raise SchemaMismatchError(
                    f"expected partition_by {list(snap.partition_by)} of the table created "
                    f"concurrently, found {list(parts)}; nothing was committed."
                ) from None
            _same_schema(snap.schema, schema)
    return Table(storage, snap).commit_files(
        adds,
        mode="overwrite" if mode == "overwrite" else "append",
        operation="SPARK WRITE",
        read_snapshot=snap,
        parameters={"mode": mode}
        | ({} if app is None else {"app_id": app.app_id, "app_version": app.app_version}),
        metrics=metrics,
        lease=lease,
        app=app,
    )


def _same_schema(table_schema: pa.Schema, written: pa.Schema) -> None:
    if to_spark_schema(table_schema) != to_spark_schema(written):
        raise SchemaMismatchError(
            f"expected the schema of the table created concurrently to match the data "
            f"written, found {table_schema} vs {written}; nothing was committed."
        )


def discard_staging(storage: Storage, staging: str) -> None:
    """Best-effort removal of a Spark job's staging folder (a root-relative path): used by
    the writer here and by large clustering groups; vacuum removes what remains."""
    try:
        full = storage.full(staging)
        if storage.fs.exists(full):
            storage.fs.rm(full, recursive=True)
    except Exception as e:  # noqa: BLE001 - leftovers are orphans for vacuum
        log.warning("could not remove Spark staging folder %s: %r", staging, e)
