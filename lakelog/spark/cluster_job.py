"""Clustering one group too large for one task, as Spark jobs with bounded memory per task.

A group whose rows would not fit ``max_group_bytes`` in memory (estimated,
as the embedded executor does, at 3x its Parquet bytes) is not sorted by one
worker; Spark does it:

0. The group's files are read by Spark's Parquet reader; rows that a file's
   deletion vector deletes are dropped (:mod:`lakelog.spark.deleted`), so the
   output holds only live rows, as many as the log counts (checked at the end).
1. The driver samples the clustering columns of the group's files through
   Spark, computes the sample's curve keys with the run's spec (its quantile
   boundaries are shared by every group of the run) and chooses the first
   key of every output file with the same cuts as the embedded executor
   (:func:`lakelog.maintenance.clustering.sort.file_cuts`), so files are about the
   target size and start at coarse curve boundaries.
2. The spec and the cuts are shipped with an Arrow UDF that computes each row's key
   and output-file number on the executors (vectorized, no pandas needed).
3. Rows are partitioned by output file (hash partitioning on a value chosen
   per file so that each file lands in a task of its own: one pass over the
   data, where a range partitioning would first sample it, computing every
   key twice) and sorted by key within each partition (Spark's shuffle and
   external sort: memory per task stays bounded), and Spark's native writer
   writes one file per output file under ``_spark_staging/<id>/`` inside
   the table.
4. One Spark task per staged file streams it into the final table file
   (:func:`lakelog.spark.tasks.finalize_staged_file`): the clustering spec
   goes into the footer and the key range into the tags, which later
   incremental runs read, and row groups and codec follow the table. Spark's
   writer cannot put custom metadata in a Parquet footer, hence this pass.

The staging folder is deleted at the end, whether the group succeeds or not.
"""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pyarrow as pa

from ..errors import CorruptLogError, LakelogError
from ..io.writer import WriteOptions
from ..log import mapping
from ..log.actions import AddFile, DataFile, encode_schema
from ..maintenance.clustering.planner import ClusterSettings
from ..maintenance.clustering.sort import FileCut, Segment, file_cuts
from ..maintenance.clustering.spec import (
    ROW_SAMPLE,
    ClusterSpec,
    encoded_row_bytes,
    sized_segments,
)
from ..maintenance.groups import FileGroup, GroupResult, check_group_rows
from ..maintenance.sources import dictionary_columns, file_schema_of, read_group
from ..partitioning import STAGING_DIR
from ..storage import FileInfo, Storage
from .columns import logical_columns, spark_physical_schema
from .deleted import drop_deleted, scan_layers
from .read import columns_of, session_conf, spark_url
from .runner import partition_values, run_payloads
from .schema import check_dataframe_schema, output_timestamp_type, to_spark_schema
from .tasks import (
    StagedFile,
    TaskOutcome,
    decode_added,
    discard_staging,
    finalize_staged_file,
    key_function,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "KEY_SAMPLE_ROWS",
    "cluster_large_group",
    "is_large",
    "large_path_problem",
    "partition_values",  # lakelog.spark.runner's, where the Spark merge routes its tasks
]

log = logging.getLogger("lakelog.spark")

KEY_SAMPLE_ROWS = 200_000
"""Keys sampled on the driver to choose where output files start."""
_UDF_BATCH_ROWS = 65_536
"""Rows per Arrow batch sent to the key UDF (Spark's default, 10,000, costs more calls)."""
_LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
"""Spark's setting above which it lists paths with a Spark job; raised while reading
the group's explicit file list (as :mod:`lakelog.spark.read` does)."""
_STAGED_ROW_GROUP_BYTES = 32 * 1024 * 1024
"""Row-group size of the staged files, so the finalizing pass holds one small row group."""


def is_large(group: FileGroup, options: ClusterSettings) -> bool:
    """Whether a group would not fit ``max_group_bytes`` in memory (about 3x its bytes)."""
    return 3 * group.total_bytes > options.max_group_bytes


def large_path_problem(storage: Storage, schema: pa.Schema, partition_by: Sequence[str]) -> str:
    """Why the large-group path cannot run on this table ('' if it can).

    It needs Spark's own filesystem to reach the table, Spark to write every
    column exactly, and PySpark >= 4.1 (Arrow UDFs without pandas).
    """
    try:
        spark_url(storage)
        file_schema = file_schema_of(schema, partition_by)
        check_dataframe_schema(to_spark_schema(file_schema), file_schema)
    except LakelogError as e:
        return str(e)
    try:
        from pyspark.sql.pandas.functions import arrow_udf  # noqa: F401
    except ImportError:
        return "PySpark >= 4.1 is needed for Arrow UDFs without pandas"
    return ""


def _unused_name(base: str, taken: Sequence[str]) -> str:
    name = base
    while name in taken:
        name = f"{base}_{uuid.uuid4().hex[:6]}"
    return name


def _sample_keys(
    df: DataFrame, spec: ClusterSpec, schema: pa.Schema, file_schema: pa.Schema, rows: int
) -> np.ndarray:  # type: ignore[type-arg]
    """Sorted curve keys of about :data:`KEY_SAMPLE_ROWS` rows, sampled by Spark from
    ``df`` (the group's rows under the physical names of ``file_schema``)."""
    fraction = min(1.0, 1.2 * KEY_SAMPLE_ROWS / max(1, rows))
    cols = list(spec.columns)
    picked = df.select(*logical_columns(file_schema, cols))
    if fraction < 1.0:
        picked = picked.sample(withReplacement=False, fraction=fraction, seed=20240611)
    sample = picked.toArrow()
    arrays = []
    for name in cols:
        want = schema.field(name).type
        if pa.types.is_dictionary(want):
            want = want.value_type
        col = sample.column(name)
        arrays.append(col if col.type == want else col.cast(want))
    if not sample.num_rows:
        return np.zeros(0, np.uint64)
    return np.sort(spec.keys(pa.table(arrays, names=cols)))


def _segments_for_size(
    storage: Storage,
    group: FileGroup,
    segments: Sequence[Segment],
    spec: ClusterSpec,
    file_schema: pa.Schema,
    options: ClusterSettings,
) -> list[Segment]:
    """Base segments re-counted in files of the target size, from the encoded size of a
    sample of the rows ordered by key, as the embedded executor does."""
    batches, rows = [], 0
    by_size = sorted(group.files, key=lambda f: -f.size_bytes)
    for batch in read_group(storage, file_schema, by_size, batch_size=ROW_SAMPLE):
        batches.append(batch)
        rows += batch.num_rows
        if rows >= ROW_SAMPLE:
            break
    if not batches:
        return list(segments)
    sample = pa.Table.from_batches(batches).combine_chunks()
    write_options = WriteOptions(
        target_file_size=2 * options.target_file_size,
        row_group_size=options.row_group_size,
        compression=options.compression,
        use_dictionary=dictionary_columns(sample.to_batches()[0]),
    )
    row_bytes = encoded_row_bytes(sample, spec, write_options)
    return sized_segments(segments, row_bytes, options.target_file_size, spec)


def _group_rows(
    spark: SparkSession, storage: Storage, file_schema: pa.Schema, files: Sequence[DataFile]
) -> DataFrame:
    """The live rows of a group's files as a DataFrame of ``file_schema`` under its
    physical names, as the files store them (format.md, "Column ids"): one Spark scan
    of the files without a deletion vector, and scans whose deleted rows are dropped
    (:mod:`lakelog.spark.deleted`) for those with one."""

    def scan(chosen: Sequence[DataFile]) -> DataFrame:
        with session_conf(spark, {_LISTING_THRESHOLD: str(2**31 - 1)}):
            return (
                spark.read.schema(spark_physical_schema(file_schema))
                .option("__globPaths__", "false")
                .parquet(*(spark_url(storage, f.path) for f in chosen))
            )

    plain = [f for f in files if f.deleted is None]
    frames = [scan(plain)] if plain else []
    for layer in scan_layers([f for f in files if f.deleted is not None]):
        frames.append(drop_deleted(spark, scan(layer), layer))
    out = frames[0]
    for other in frames[1:]:
        out = out.unionByName(other)
    return out


def cluster_large_group(
    spark: SparkSession,
    storage: Storage,
    schema: pa.Schema,
    partition_by: Sequence[str],
    group: FileGroup,
    segments: Sequence[Segment],
    spec: ClusterSpec,
    spec_json: str,
    options: ClusterSettings,
    *,
    storage_options: Mapping[str, Any] | None = None,
    lease_id: str | None = None,
) -> TaskOutcome:
    """Cluster one large group with Spark jobs (see the module doc); nothing is committed.
    The staging folder's and the table files' names carry ``lease_id``, the run's
    writer lease."""
    started = time.time()
    file_schema = file_schema_of(schema, partition_by)
    staging = f"{STAGING_DIR}/cluster-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-"
    staging += uuid.uuid4().hex if lease_id is None else f"{lease_id}-{uuid.uuid4().hex[:12]}"
    added: list[AddFile] = []
    try:
        # 1. sample the keys on the driver and cut the group's key range into files
        df = _group_rows(spark, storage, file_schema, group.files)
        keys = _sample_keys(df, spec, schema, file_schema, group.num_rows)
        sized = _segments_for_size(storage, group, segments, spec, file_schema, options)
        cuts = file_cuts(sized, keys)
        sampled = time.time()
        # 2. route each row to its file's task, sort there, write the staged files
        file_col = _sort_into_staging(
            spark, storage, df, schema, file_schema, spec, spec_json, cuts, staging
        )
        sorted_at = time.time()
        # 3. finalize each staged file into a table file (footer, row groups, stats)
        items = [
            msgspec.json.encode(
                StagedFile(
                    uri=storage.uri,
                    path=info.path,
                    size_bytes=info.size,
                    num_rows=0,  # unknown here; the finalizing task reads the footer
                    schema=encode_schema(schema),
                    partition_by=tuple(partition_by),
                    partition=dict(group.partition),
                    spec=spec_json,
                    tier=cuts[number].tier,
                    target_file_size=options.target_file_size,
                    row_group_size=options.row_group_size,
                    compression=options.compression,
                    lease_id=lease_id,
                    parquet=options.parquet,
                )
            )
            for number, info in _staged_files(storage, staging, file_col)
        ]
        fn = functools.partial(finalize_staged_file, storage_options=dict(storage_options or {}))
        for raw in run_payloads(spark, items, fn, description="lakelog: finalize clustered files"):
            added.extend(decode_added(raw))
        log.debug(
            "group %s: %d file cuts from %d sampled keys in %.2f s, Spark sort and write "
            "%.2f s, finalizing %d files %.2f s",
            group.group_id,
            len(cuts),
            len(keys),
            sampled - started,
            sorted_at - sampled,
            len(items),
            time.time() - sorted_at,
        )
        check_group_rows(group, added, where=" after the Spark job")
    except BaseException:
        storage.delete([a.path for a in added])
        raise
    finally:
        discard_staging(storage, staging)
    result = GroupResult.of(group, added, duration_s=time.time() - started)
    return TaskOutcome(
        result=result, started=started, finished=time.time(), host="driver", mode="spark-job"
    )


def _sort_into_staging(
    spark: SparkSession,
    storage: Storage,
    df: DataFrame,
    schema: pa.Schema,
    file_schema: pa.Schema,
    spec: ClusterSpec,
    spec_json: str,
    cuts: Sequence[FileCut],
    staging: str,
) -> str:
    """Key every row of ``df`` (a UDF: its output file, its curve key, its route), send
    each output file's rows to a task of its own, sort them by key there and write them
    with Spark's Parquet writer under ``staging``, one folder per output file. Returns the
    name of the folders' column (``<name>=<file number>``)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    from pyspark.sql.pandas.functions import arrow_udf

    # the job works in the files' physical names throughout (format.md, "Column ids"):
    # it reads them, and its staged files hold them, which the finalizing pass reads
    names = mapping.physical_schema(file_schema).names
    file_col = _unused_name("lakelog_file", names)
    key_col = _unused_name("lakelog_key", names)
    route_col = _unused_name("lakelog_route", names)
    struct_col = _unused_name("lakelog_fk", names)
    settings = {
        "spark.sql.parquet.writeLegacyFormat": "false",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(_UDF_BATCH_ROWS),
    }
    ts_type = output_timestamp_type(file_schema)
    if ts_type is not None:
        settings["spark.sql.parquet.outputTimestampType"] = ts_type
    key_schema = pa.schema(
        [
            pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f
            for f in (schema.field(c) for c in spec.columns)
        ]
    )
    # shipped with the UDF (a few KB: the spec and a key per output file); no broadcast,
    # which Spark Connect lacks
    setup = json.dumps(
        {
            "spec": spec_json,
            "schema": encode_schema(key_schema),
            "starts": [c.key_start for c in cuts],
            "route": partition_values(len(cuts)).tolist(),
        }
    )
    udf = arrow_udf(  # type: ignore[call-overload]  # scalar; no hints (they warn)
        key_function(setup),
        T.StructType(
            [
                T.StructField("f", T.IntegerType()),
                T.StructField("k", T.LongType()),
                T.StructField("p", T.IntegerType()),
            ]
        ),
    )
    keyed = df.select(
        *columns_of(names), udf(*logical_columns(file_schema, spec.columns)).alias(struct_col)
    ).select(
        *columns_of(names),
        F.col(struct_col).getField("f").alias(file_col),
        F.col(struct_col).getField("k").alias(key_col),
        F.col(struct_col).getField("p").alias(route_col),
    )
    ordered = (
        keyed.repartition(len(cuts), route_col)
        .sortWithinPartitions(file_col, key_col)
        .drop(key_col, route_col)
    )
    writer = (
        ordered.write.mode("error")
        .partitionBy(file_col)
        .option("compression", "snappy")
        .option("parquet.block.size", str(_STAGED_ROW_GROUP_BYTES))
    )
    with session_conf(spark, settings):
        writer.parquet(spark_url(storage, staging))
    return file_col


def _staged_files(storage: Storage, staging: str, file_col: str) -> Iterator[tuple[int, FileInfo]]:
    """The Parquet files Spark wrote under ``staging``, each with its output file's number
    (its ``<file_col>=<n>`` folder)."""
    for info in storage.walk(staging):
        rel = info.path[len(staging) + 1 :]
        parts = rel.split("/")
        if len(parts) != 2 or not parts[1].endswith(".parquet"):
            continue  # _SUCCESS, checksums
        if not parts[0].startswith(file_col + "="):
            raise CorruptLogError(
                f"expected Spark to write {info.path} under a {file_col}=<n> folder, found "
                f"{parts[0]!r}; nothing was committed."
            )
        yield int(parts[0].split("=", 1)[1]), info
