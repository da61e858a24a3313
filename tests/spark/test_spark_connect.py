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
    marked = sys.argv[2]  # a table with deletion vectors: both readers drop their rows
    out["dv_read"] = sorted(r.id for r in lspark.read(spark, marked).collect())
    dv = lspark.read(spark, marked, filter="id < 70")
    out["dv_filtered"] = sorted(r.id for r in dv.collect())
    out["dv_format"] = sorted(r.id for r in spark.read.format("lakelog").load(marked).collect())
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
    marked = str(tmp_path / "dv")
    dv = lakelog.create_table(
        marked,
        pa.schema([("id", pa.int64()), ("p", pa.string())]),
        partition_by=["p"],
        properties={"lakelog.deletion_vectors": "true", "lakelog.row_group_size": "8"},
    )
    dv.append(pa.table({"id": list(range(100)), "p": [f"p{i % 3}" for i in range(100)]}))
    dv.delete("id < 10 or id = 55")
    dv.update("id = 60", set={"id": 600})
    assert any(f.deleted is not None for f in dv.snapshot().files())
    want = sorted(dv.snapshot().to_arrow().column("id").to_pylist())
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, str(script), uri, marked],
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
    # deletion vectors over Spark Connect (one Connect server per test session: its port)
    assert out["dv_read"] == out["dv_format"] == want and len(want) == 89
    assert out["dv_filtered"] == [i for i in want if i < 70]
