"""Spark Connect: ``history``, ``lakelog.spark.read`` with a pruning filter and the
``lakelog`` data source work through a real Connect server, or refuse clearly.

The client runs in its own process: ``SparkSession.builder.remote("local[2]")`` starts a
Connect server beside it, which must not share a process with the test session's classic
SparkSession.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

import lakelog

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

CLIENT = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession, functions as F
    import lakelog.spark as lspark
    from lakelog.errors import InvalidArgumentError

    uri = sys.argv[1]
    spark = (SparkSession.builder.remote("local[2]")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    out = {"connect": type(spark).__module__}
    out["history"] = [r.version for r in lspark.history(spark, uri).collect()]
    plan = lspark.plan_read(spark, uri, filter="id > 12")
    out["skipped"] = plan.skipped_files
    out["read"] = sorted(r.id for r in lspark.read(spark, uri, filter="id > 12").collect())
    try:
        lspark.read(spark, uri, filter=F.col("id") > 12)
    except InvalidArgumentError as e:
        out["column_refused"] = str(e)
    lspark.register(spark)
    df = spark.read.format("lakelog").load(uri).where("id > 12")
    out["format"] = sorted(r.id for r in df.collect())
    print("RESULT " + json.dumps(out), flush=True)
    spark.stop()
    """
)


def test_spark_connect_client(tmp_path: Path) -> None:
    pytest.importorskip("grpc", reason="pyspark[connect] is in the dev extra")
    uri = str(tmp_path / "t")
    table = lakelog.create_table(uri, pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": list(range(10))}))
    table.append(pa.table({"id": list(range(10, 20))}))
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, str(script), uri],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=Path(__file__).parents[2],
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    assert lines, done.stdout[-2000:] + done.stderr[-4000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["connect"].startswith("pyspark.sql.connect")
    assert out["history"] == [2, 1, 0]
    assert out["skipped"] == 1  # the first file (ids 0-9) pruned by lakelog's own parser
    assert out["read"] == list(range(13, 20))
    assert "SQL string" in out["column_refused"]
    assert out["format"] == list(range(13, 20))
