"""Spark work through the public DataFrame API only, so that it runs on a classic session
and on Spark Connect alike.

Spark Connect clients (PySpark 4's ``SparkSession.builder.remote(...)``, shared and
serverless clusters, the JVM-less ``pyspark-client``) have no ``SparkContext``: no RDDs,
no broadcasts, no ``setJobGroup``. What lakelog once did with those (tasks of
maintenance and ``convert``, job groups, the session's parallelism) goes through this
module instead; everything else is plain DataFrame code already:

* :func:`run_payloads` runs one Python function per payload (a JSON or msgpack task
  spec), each in its own Spark task: the payloads are rows of a DataFrame built with
  ``spark.createDataFrame``, hash-partitioned on a value chosen per row so that each
  lands in a partition of its own (:func:`partition_values`;
  one payload needs no shuffle), and run with ``mapInArrow``; the results come back in
  payload order;
* :func:`default_parallelism` is the session's parallelism (``defaultParallelism`` on
  a classic session; on Connect the setting, or the partitions of a ``spark.range``);
* :func:`job_group` labels the jobs a driver thread runs, and :func:`cancel_job_group`
  cancels them: a job group on a classic session, a job tag on Connect;
  :func:`job_description` describes them in Spark's UI (classic sessions only).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "cancel_job_group",
    "default_parallelism",
    "is_connect",
    "job_description",
    "job_group",
    "partition_values",
    "run_payloads",
    "spark_hash_int",
]

_LOCAL_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
_parallelism: dict[str, int] = {}
_lock = threading.Lock()


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext, no JVM here)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def default_parallelism(spark: SparkSession) -> int:
    """The session's default parallelism: ``sparkContext.defaultParallelism`` on a classic
    session; on Connect ``spark.default.parallelism`` if set, else the number of partitions
    Spark gives a ``spark.range`` (one small job, once per session)."""
    if not is_connect(spark):
        return max(1, int(spark.sparkContext.defaultParallelism))
    key = str(getattr(spark, "session_id", id(spark)))
    with _lock:
        if key in _parallelism:
            return _parallelism[key]
    from pyspark.sql import functions as F

    given = spark.conf.get("spark.default.parallelism", None)
    if given is not None and str(given).strip().isdigit():
        n = int(str(given).strip())
    else:
        parts = spark.range(0, 1 << 12).select(F.spark_partition_id().alias("p"))
        n = int(parts.dropDuplicates().count())
    n = max(1, n)
    with _lock:
        _parallelism[key] = n
    return n


@contextlib.contextmanager
def job_group(spark: SparkSession, group_id: str, description: str) -> Iterator[None]:
    """Label the Spark jobs this thread runs inside the block with ``group_id`` (and, on
    a classic session, ``description``, shown in Spark's UI), for
    :func:`cancel_job_group`."""
    if is_connect(spark):
        spark.addTag(group_id)
        try:
            yield
        finally:
            spark.removeTag(group_id)
        return
    sc = spark.sparkContext
    sc.setJobGroup(group_id, description, True)
    try:
        yield
    finally:
        for key in _LOCAL_PROPERTIES:
            sc.setLocalProperty(key, None)  # type: ignore[arg-type]


def cancel_job_group(spark: SparkSession, group_id: str) -> None:
    """Cancel the running jobs labelled ``group_id`` by :func:`job_group`."""
    if is_connect(spark):
        spark.interruptTag(group_id)
    else:
        spark.sparkContext.cancelJobGroup(group_id)


@contextlib.contextmanager
def job_description(spark: SparkSession, description: str) -> Iterator[None]:
    """Describe this thread's jobs in Spark's UI (a classic session; nothing on Connect,
    which has no per-thread job description)."""
    if is_connect(spark):
        yield
        return
    sc = spark.sparkContext
    sc.setJobDescription(description)
    try:
        yield
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]


class _PayloadTask:
    """The ``mapInArrow`` body of :func:`run_payloads`: ``fn`` on each row's payload."""

    def __init__(self, fn: Callable[[bytes], bytes]) -> None:
        self.fn = fn

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            index = batch.column("i").to_pylist()
            payloads = batch.column("payload").to_pylist()
            out = [self.fn(p) for p in payloads]
            yield pa.RecordBatch.from_arrays(
                [pa.array(index, pa.int32()), pa.array(out, pa.binary())],
                names=["i", "result"],
            )


def run_payloads(
    spark: SparkSession,
    payloads: Sequence[bytes],
    fn: Callable[[bytes], bytes],
    *,
    description: str = "lakelog tasks",
) -> list[bytes]:
    """``[fn(p) for p in payloads]``, each call in a Spark task of its own (see the module
    doc); ``fn`` is pickled to the executors (a module-level function or a
    ``functools.partial`` of one). A task's error propagates as Spark raises it."""
    from pyspark.sql import types as T

    if not payloads:
        return []
    n = len(payloads)
    routes = partition_values(n).tolist()
    schema = T.StructType(
        [
            T.StructField("i", T.IntegerType(), False),
            T.StructField("r", T.IntegerType(), False),
            T.StructField("payload", T.BinaryType(), False),
        ]
    )
    rows = [(i, int(routes[i]), bytes(p)) for i, p in enumerate(payloads)]
    frame = spark.createDataFrame(rows, schema)
    # one row: one partition without a shuffle; more: each row in a partition of its own
    frame = frame.coalesce(1) if n == 1 else frame.repartition(n, "r")
    frame = frame.select("i", "payload")
    with warnings.catch_warnings():
        # PySpark warns about the installed pandas on every Arrow UDF; no pandas is used
        warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas")
        tasks = frame.mapInArrow(_PayloadTask(fn), "i int, result binary")
    with job_description(spark, description):
        got = tasks.collect()
    results: list[Any] = [None] * n
    for row in got:
        results[row["i"]] = bytes(row["result"])
    return results


def spark_hash_int(values: npt.NDArray[np.int32], seed: int = 42) -> npt.NDArray[np.int32]:
    """Spark's ``hash()`` of ``int`` values (Murmur3 x86 32-bit, ``hashInt``), vectorized.

    Spark's hash partitioning sends a row to partition ``pmod(hash(value), n)``
    with this function and seed 42.
    """
    with np.errstate(over="ignore"):
        k = values.astype(np.int32).view(np.uint32) * np.uint32(0xCC9E2D51)
        k = (k << np.uint32(15)) | (k >> np.uint32(17))
        k = k * np.uint32(0x1B873593)
        h = np.uint32(seed) ^ k
        h = (h << np.uint32(13)) | (h >> np.uint32(19))
        h = h * np.uint32(5) + np.uint32(0xE6546B64)
        h = h ^ np.uint32(4)
        h = h ^ (h >> np.uint32(16))
        h = h * np.uint32(0x85EBCA6B)
        h = h ^ (h >> np.uint32(13))
        h = h * np.uint32(0xC2B2AE35)
        h = h ^ (h >> np.uint32(16))
    out: npt.NDArray[np.int32] = h.view(np.int32)
    return out


def partition_values(n: int) -> npt.NDArray[np.int32]:
    """For each ``i < n``, the smallest ``int`` that Spark's ``repartition(n, col)`` sends to
    partition ``i``: partitioning on it puts each output file in a task of its own,
    without the sampling pass of a range partitioning (which would compute the keys twice).
    """
    found = np.full(n, -1, dtype=np.int64)
    start, size = 0, max(1024, 16 * n)
    while (found < 0).any():
        values = np.arange(start, start + size, dtype=np.int32)
        target = np.mod(spark_hash_int(values).astype(np.int64), n)
        first = np.unique(target, return_index=True)
        for t, i in zip(*first, strict=True):
            if found[t] < 0:
                found[t] = values[i]
        start += size
    return found.astype(np.int32)
