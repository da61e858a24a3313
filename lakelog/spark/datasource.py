"""``spark.read.format("lakelog")`` / ``df.write.format("lakelog")``: a Python data source.

Convenience for code that expects a format name. Both directions move data
through Python workers as Arrow batches, so they are slower than
:func:`lakelog.spark.read` (Spark's native vectorized Parquet reader) and
:func:`lakelog.spark.write` (Spark's native Parquet writer):

* reads: the filters Spark pushes down prune files through lakelog's pruning
  (``spark.sql.python.filterPushdown.enabled``, which :func:`register` turns on;
  Spark still applies every filter to the rows); each Spark task reads a bin of
  files (``maxPartitionBytes``, default 128 MiB, each file counting 4 MiB more for
  opening it, as Spark's own reader does) with pyarrow through fsspec, so it needs
  no Hadoop filesystem: ``s3://`` tables work with ``storageOptions``;
  ``versionAsOf`` / ``timestampAsOf`` select a version; rows that a file's deletion
  vector deletes (format version 5) are dropped as each file is read;
* writes: each task writes its rows with lakelog's own Parquet writer; the
  driver commits every task's files in one commit, or deletes them on abort;
* ``readChangeFeed``: the change feed of a range of versions
  (:mod:`lakelog.spark.feed`, :func:`lakelog.spark.read_changes`);
* ``spark.readStream.format("lakelog")``: the streaming source
  (:mod:`lakelog.spark.source`), with its own options (``startingVersion``,
  ``maxFilesPerTrigger``, ``skipChangeCommits``, ``readChangeFeed``, ...).

This is the one registration module: it wires the batch reader and writer
(:mod:`lakelog.spark.batch`), the change feed's reader (:mod:`lakelog.spark.feed`), the
streaming source and sink (:mod:`lakelog.spark.source`, :mod:`lakelog.spark.streaming`)
into the ``lakelog`` format; none of them imports it back.

Options: one registry per entry point (:mod:`lakelog.spark.options`), checked by name
before anything is read or written (an unknown name is
:class:`~lakelog.errors.UnknownOptionError`): ``versionAsOf``, ``timestampAsOf``,
``maxPartitionBytes``, ``storageOptions`` (JSON object for fsspec); for writes, the write
modes of :func:`lakelog.spark.write` (``replaceWhere``, ``partitionOverwriteMode``,
``mergeSchema`` / ``schema_mode``, ``txnAppId`` with ``txnVersion``), ``partitionBy``
(comma-separated, when a write creates the table) and table properties (``lakelog.*``,
for a table the write creates). Spark refuses ``df.write.partitionBy(...)`` for a Python
data source and hands it no session settings, so those are options here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
)

from .batch import BatchReader, BatchWriter
from .environment import check_executors
from .errors import carry
from .feed import FeedReader, options_schema
from .options import (
    load_options,
    read_options,
    resolve_snapshot,
    stream_read_options,
    write_options,
)
from .schema import to_spark_schema
from .source import stream_reader
from .streaming import StreamWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["LakelogDataSource", "register"]

_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: SparkSession) -> None:
    """Register the ``lakelog`` format with a session, and turn on Spark's filter
    pushdown for Python data sources (without it, Spark refuses a source that prunes).
    The session's workers are checked first: the source keeps the interpreter it was
    registered with (:mod:`lakelog.spark.environment`)."""
    check_executors(spark)
    spark.conf.set(_PUSHDOWN_CONF, "true")
    spark.dataSource.register(LakelogDataSource)


@carry
class LakelogDataSource(DataSource):
    """The ``lakelog`` format."""

    @classmethod
    def name(cls) -> str:
        return "lakelog"

    # Spark builds the source on the driver and asks it for the schema (at load()), then
    # for a reader or writer (before any task runs): each checks the options by name first.

    def schema(self) -> StructType:
        opts = load_options(self.options)
        if opts.change_feed:
            return to_spark_schema(options_schema(opts.storage(), opts))
        return to_spark_schema(
            resolve_snapshot(opts.storage(), opts.version, opts.timestamp).schema
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = read_options(self.options)
        if opts.change_feed:
            return FeedReader(opts)
        return BatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The streaming source (:mod:`lakelog.spark.source`)."""
        return stream_reader(stream_read_options(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return BatchWriter(write_options(self.options, overwrite=overwrite), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """The streaming sink (:mod:`lakelog.spark.streaming`): ``overwrite`` is Spark's
        ``complete`` output mode."""
        return StreamWriter(dict(self.options), schema, overwrite)
