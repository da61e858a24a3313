"""``lakelog.spark.maintain``: the decision of :meth:`lakelog.Table.maintain`, with the
compaction, purge and clustering rewrites run as Spark tasks.

The cost model, the statistics it reads, the ranking and the budget are the embedded
ones (:mod:`lakelog.maintenance.maintain`); only the executor of a rewrite differs: the
prepared plan runs through :class:`lakelog.spark.maintenance.SparkExecutor`, as
:func:`lakelog.spark.compact` and :func:`lakelog.spark.optimize` run theirs (claims on
the log, pacing shared by the tasks, one commit on the driver), with the number of
groups at once defaulting to the session's parallelism. Manifests, expiry and vacuum
run on the driver, as they do everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..core import TableCore
from ..errors import InvalidArgumentError
from ..maintenance.maintain.report import MaintainReport
from ..maintenance.maintain.run import DEFAULT_BUDGET_BYTES, maintain_tables
from ..maintenance.pipeline import Prepared, run_prepared
from ..maintenance.report import MaintenanceReport
from ..storage import Storage
from .maintenance import SparkExecutor, default_concurrency

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..core.handle import TableHandle

__all__ = ["maintain"]


def maintain(
    spark: SparkSession,
    uri_or_table: str | TableHandle,
    *,
    budget_bytes: int | None = DEFAULT_BUDGET_BYTES,
    dry_run: bool = True,
    storage_options: Mapping[str, Any] | None = None,
) -> MaintainReport:
    """:meth:`lakelog.Table.maintain` with its rewrites run by Spark tasks.

    Args:
        spark: the session whose tasks rewrite the groups.
        uri_or_table: the table's URI, or the table.
        budget_bytes: the most bytes the chosen rewrites may read and write again;
            default 1 GiB; None: no bound.
        dry_run: only rank and report; default True.
        storage_options: fsspec options of a URI, used on the driver and on every
            executor; default none.

    Returns:
        The report: the chosen actions, ranked, and those left over the budget.
    """
    storage = (
        Storage(uri_or_table, storage_options)
        if isinstance(uri_or_table, str)
        else uri_or_table.storage
    )
    if storage.protocol == "memory":
        raise InvalidArgumentError(
            f"expected a table on storage that Spark executors can reach (local disk "
            f"shared by them, S3, HDFS, ...), found {storage.uri}: fsspec's in-memory "
            f"filesystem lives in one process. Use table.maintain() instead."
        )
    table = TableCore.load(storage) if isinstance(uri_or_table, str) else uri_or_table
    executor = SparkExecutor(spark)

    def execute(prepared: Prepared[Any]) -> MaintenanceReport:
        return run_prepared(prepared, executor)

    return maintain_tables(
        [(table.storage.uri, table)],
        budget_bytes=budget_bytes,
        dry_run=dry_run,
        execute=execute,
        default_concurrency=default_concurrency(spark),
    )
