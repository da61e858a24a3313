"""Spark writes racing other writers on one table: every commit lands, no row is lost."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
import lakelog.spark as lspark

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema([("id", pa.int64()), ("src", pa.string())])

PYTHON_WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    import pyarrow as pa
    import lakelog

    uri, go, done, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    schema = pa.schema([("id", pa.int64()), ("src", pa.string())])
    deadline = time.monotonic() + 120
    while not os.path.exists(go):  # the Spark job is running
        if time.monotonic() > deadline:
            sys.exit("the Spark job never started")
        time.sleep(0.01)
    table = lakelog.open_table(uri)
    out = []
    for i in range(n):
        r = table.append(pa.table({"id": [1000 + i], "src": ["python"]}, schema=schema))
        out.append(r.version)
    open(done, "w").close()
    print(json.dumps(out))
    """
)


def test_spark_append_races_a_python_process(spark: Any, tmp_path: Path) -> None:
    """The Python process commits while the Spark job runs, so Spark's commit must rebase."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    uri = str(tmp_path / "t")
    lakelog.create_table(uri, SCHEMA)
    go, done = str(tmp_path / "go"), str(tmp_path / "done")
    proc = subprocess.Popen(
        [sys.executable, "-c", PYTHON_WRITER, uri, go, done, "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def gate(i: int) -> int:
        import os
        import time

        open(go, "a").close()
        deadline = time.monotonic() + 120
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.01)
        return i

    gated = F.udf(gate, returnType=T.LongType(), useArrow=False)
    df = spark.range(0, 20, numPartitions=2).select(
        gated("id").alias("id"), F.lit("spark").alias("src")
    )
    try:
        result = lspark.write(df, uri)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    python_versions = json.loads(out)
    assert python_versions == [1, 2, 3]
    # Spark read version 0, lost the race three times, rebased and landed on top
    assert result.version == 4 and result.attempts >= 2
    rows = lspark.read(spark, uri).collect()
    assert sorted(r.id for r in rows if r.src == "spark") == list(range(20))
    assert sorted(r.id for r in rows if r.src == "python") == [1000, 1001, 1002]
    ops = [h.operation for h in lakelog.open_table(uri).history()]
    assert ops == ["SPARK WRITE", "APPEND", "APPEND", "APPEND", "CREATE TABLE"]


def test_concurrent_spark_jobs_in_one_session(spark: Any, tmp_path: Path) -> None:
    """Two threads write at once: separate staging prefixes, shared session settings."""
    uri = str(tmp_path / "t")
    lakelog.create_table(uri, pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", "UTC"))]))
    results: list[Any] = []
    errors: list[BaseException] = []
    key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(key)

    def job(start: int) -> None:
        try:
            from pyspark.sql import functions as F

            df = spark.range(start, start + 50, numPartitions=2).select(
                "id", F.timestamp_seconds("id").alias("ts")
            )
            results.append(lspark.write(df, uri))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=job, args=(s,)) for s in (0, 100, 200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert sorted(r.version for r in results) == [1, 2, 3]
    ids = sorted(r.id for r in lspark.read(spark, uri).collect())
    assert ids == [*range(0, 50), *range(100, 150), *range(200, 250)]
    # the session's own Parquet settings are back to what they were
    assert spark.conf.get(key) == before
    table = lakelog.open_table(uri)
    assert not any(f.path.startswith(lspark.STAGING_DIR) for f in table.snapshot().files())
