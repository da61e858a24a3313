"""Spark I/O for lakelog tables (needs pyspark; ``import lakelog`` alone does not load it).

* :func:`read` resolves a snapshot from the log, prunes its files with the
  filter, and hands the explicit file list to Spark's native Parquet reader.
* :func:`plan_read` does the same without building a DataFrame, so the
  snapshot, the pruning and the exact file URLs can be inspected.
* :func:`history` gives the commit history as a DataFrame.
* :func:`write` writes a DataFrame with Spark's native Parquet writer and
  commits it as one atomic lakelog commit.
* :func:`compact` and :func:`optimize` run compaction and clustering as Spark
  jobs: plan on the driver, rewrite groups in executor tasks, commit once
  (see ``docs/spark-maintenance.md``); they take the options objects of
  :meth:`lakelog.Table.compact` and :meth:`lakelog.Table.optimize`
  (:class:`CompactionOptions`, :class:`ClusteringOptions`, :class:`ExecutionOptions`,
  exported here too). :func:`maintain` decides which of them (and expiry, vacuum) a
  table needs, as :meth:`lakelog.Table.maintain` does, and runs its rewrites so.
* :func:`convert` turns a folder of Parquet files into a table in place, as
  :func:`lakelog.convert` does, with the footers read by Spark tasks.
* :func:`merge`, :func:`delete` and :func:`update` are the row-level changes of
  :meth:`lakelog.Table.merge` (a DataFrame as the source), ``delete`` and ``update``,
  run file by file in Spark tasks with one commit on the driver.
* :func:`read_changes` gives the change feed of :meth:`lakelog.Table.changes` as a
  DataFrame read in Spark tasks; ``spark.readStream.format("lakelog")`` streams a table
  (:mod:`lakelog.spark.source`).
* :func:`sql` runs a SQL statement over the lakelog catalog's names (``docs/sql.md``;
  needs the ``sql`` extra).
* :func:`register` makes ``spark.read.format("lakelog")`` and
  ``df.write.format("lakelog")`` available (Python data source; slower than
  :func:`read`, see ``docs/spark.md``).

Every function runs on a classic SparkSession and on Spark Connect alike: Spark's work is
expressed through the public DataFrame API (:mod:`lakelog.spark.runner`).
Spark's Python workers are made to import the driver's lakelog before the first
job that needs them (:mod:`lakelog.spark.environment`). Every function here raises
the lakelog error a Spark job, the data source or the streaming source raised, as
its own class (:mod:`lakelog.spark.errors`); :func:`typed_errors` and :func:`unwrap`
do the same for code that calls Spark itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..maintenance.options import ClusteringOptions, CompactionOptions, ExecutionOptions
from ..table import returning_table
from .convert import convert as convert_core
from .datasource import register as register_source
from .errors import raises_typed, typed_errors, unwrap
from .maintain import maintain
from .maintenance import compact, optimize
from .read import ReadPlan, history, plan_read, read, read_changes
from .rowlevel import delete, merge, update
from .sql import sql
from .write import STAGING_DIR, write

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "STAGING_DIR",
    "ClusteringOptions",
    "CompactionOptions",
    "ExecutionOptions",
    "ReadPlan",
    "compact",
    "convert",
    "delete",
    "history",
    "maintain",
    "merge",
    "optimize",
    "plan_read",
    "read",
    "read_changes",
    "register",
    "sql",
    "typed_errors",
    "unwrap",
    "update",
    "write",
]


@raises_typed
def register(spark: SparkSession) -> None:
    """Register the ``lakelog`` format: ``spark.read.format("lakelog").load(uri)``.

    Args:
        spark: the session to register the Python data source with.

    Raises:
        SparkEnvironmentError: the session's Python workers cannot import lakelog and
            lakelog cannot point them at the driver's interpreter.
    """
    register_source(spark)


# lakelog errors raised in Spark's workers reach callers as their own classes
compact = raises_typed(compact)
convert = raises_typed(returning_table(convert_core))  # the user gets a Table over the core
delete = raises_typed(delete)
history = raises_typed(history)
maintain = raises_typed(maintain)
merge = raises_typed(merge)
optimize = raises_typed(optimize)
plan_read = raises_typed(plan_read)
read = raises_typed(read)
read_changes = raises_typed(read_changes)
sql = raises_typed(sql)
update = raises_typed(update)
write = raises_typed(write)
