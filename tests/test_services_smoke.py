"""Smoke tests for the shared test services in ``tests/_services.py``.

``moto_server`` and ``spark`` are the session-scoped fixtures of conftest.py,
built on ``_services``: one SparkSession may run per process, so this module
does not start its own.
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from _services import (
    AWS_REGION,
    LOCAL_MASTER,
    LOOPBACK,
    MotoServer,
    S3AUnavailableError,
    find_s3a_jars,
    s3a_spark_conf,
    start_moto_server,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TESTS_DIR = Path(__file__).resolve().parent


@pytest.fixture
def bucket(moto_server: MotoServer) -> str:
    name = f"smoke-{uuid.uuid4().hex[:12]}"
    moto_server.create_bucket(name)
    return name


# --------------------------------------------------------------------------
# moto
# --------------------------------------------------------------------------


@pytest.mark.s3
def test_moto_runs_on_loopback(moto_server: MotoServer) -> None:
    assert moto_server.is_running()
    assert moto_server.endpoint_url == f"http://{LOOPBACK}:{moto_server.port}"
    opts = moto_server.storage_options()
    assert opts["client_kwargs"] == {
        "endpoint_url": moto_server.endpoint_url,
        "region_name": AWS_REGION,
    }
    assert os.environ["AWS_EC2_METADATA_DISABLED"] == "true"


@pytest.mark.s3
def test_moto_conditional_put_through_s3fs(moto_server: MotoServer, bucket: str) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**moto_server.storage_options())
    path = f"{bucket}/_log/00000000000000000000.json"
    fs.pipe_file(path, b"first", mode="create")
    with pytest.raises(FileExistsError):
        fs.pipe_file(path, b"second", mode="create")
    assert fs.cat_file(path) == b"first"
    # A second, independent client sees the file at once (no listing cache).
    other = moto_server.filesystem()
    assert other is not fs
    assert other.ls(f"{bucket}/_log", detail=False) == [path]


@pytest.mark.s3
def test_moto_private_server_reset_and_stop() -> None:
    # A private server: reset() wipes every bucket, so never on the shared one.
    started = time.perf_counter()
    with start_moto_server() as server:
        assert time.perf_counter() - started < 30
        server.create_bucket("smoke-reset")
        fs = server.filesystem()
        fs.pipe_file("smoke-reset/k", b"v")
        server.reset()
        assert "smoke-reset" not in fs.ls("", detail=False)
    assert not server.is_running()
    assert server.process.returncode is not None


# --------------------------------------------------------------------------
# Spark
# --------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_spark_session_settings(spark: SparkSession) -> None:
    sc = spark.sparkContext
    assert sc.master == LOCAL_MASTER
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert spark.conf.get("spark.sql.catalogImplementation") == "in-memory"
    assert sc.getConf().get("spark.driver.host") == LOOPBACK
    assert sc.getConf().get("spark.ui.enabled") == "false"
    assert sc.pythonExec == sys.executable


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_spark_parquet_roundtrip(spark: SparkSession, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    df = spark.createDataFrame([(i, f"name-{i}") for i in range(20)], "id long, name string")
    out = tmp_path / "table"
    df.repartition(2).write.parquet(str(out))
    back = spark.read.parquet(str(out))
    assert back.count() == 20
    assert sorted(r.id for r in back.collect()) == list(range(20))
    # The files are plain Parquet that pyarrow reads too.
    assert pq.read_table(out).num_rows == 20


def _fail_first_attempt(rows: Iterable[int]) -> Iterator[tuple[int, int]]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None
    if ctx.attemptNumber() == 0:
        raise RuntimeError("injected failure on first attempt")
    for row in rows:
        yield (row, ctx.attemptNumber())


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_spark_retries_failed_task_mappartitions(spark: SparkSession) -> None:
    rdd = spark.sparkContext.parallelize(range(10), 2)
    result = rdd.mapPartitions(_fail_first_attempt).collect()
    assert sorted(v for v, _ in result) == list(range(10))
    assert {attempt for _, attempt in result} == {1}


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_spark_retries_failed_task_udf(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    def plus_one_after_retry(x: int) -> int:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        if ctx.attemptNumber() == 0:
            raise RuntimeError("injected failure on first attempt")
        return x + 1

    # useArrow=False: pyspark 4 otherwise tries to infer a pandas/Arrow UDF
    # from the type hints and warns "Cannot infer the eval type from type hints".
    udf = F.udf(plus_one_after_retry, "long", useArrow=False)
    df = spark.range(6, numPartitions=2).select(udf("id").alias("v"))
    assert sorted(r.v for r in df.collect()) == [1, 2, 3, 4, 5, 6]


# --------------------------------------------------------------------------
# S3A and local-cluster
# --------------------------------------------------------------------------


@pytest.mark.s3
def test_s3a_needs_local_jars(moto_server: MotoServer) -> None:
    if find_s3a_jars():
        conf = s3a_spark_conf(moto_server)
        assert conf["spark.hadoop.fs.s3a.endpoint"] == moto_server.endpoint_url
    else:
        with pytest.raises(S3AUnavailableError, match="hadoop-aws"):
            s3a_spark_conf(moto_server)


_LOCAL_CLUSTER_SCRIPT = textwrap.dedent(
    """
    from pyspark import TaskContext
    from _services import build_spark_session, local_cluster_master

    def fail_first(rows):
        if TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("injected")
        yield from rows

    spark = build_spark_session("lakelog-local-cluster", master=local_cluster_master())
    sc = spark.sparkContext
    executors = sc._jsc.sc().getExecutorMemoryStatus().size() - 1
    total = sc.parallelize(range(10), 2).mapPartitions(fail_first).sum()
    print(f"RESULT executors={executors} total={total}")
    spark.stop()
    """
)


# local-cluster mode (separate executor JVMs) is exercised by
# tests/spark/test_spark_maintenance_cluster.py on every run.
