"""Spark maintenance on ``local-cluster[2,1,1024]``: executors are separate JVMs with their
own Python workers, so nothing may rely on the driver's memory or process.

Runs in a subprocess (pyspark keeps one JVM per process, and this process may
already run the shared ``local[2,3]`` session). Costs about 20-40 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import lakelog
from lakelog.maintenance.clustering.spec import TAG_SPEC

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.xdist_group("spark")]

TESTS_DIR = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import lakelog.spark as lspark
    from _services import build_spark_session, local_cluster_master

    uri = sys.argv[1]
    spark = build_spark_session("lakelog-maintenance-local-cluster", master=local_cluster_master())
    sc = spark.sparkContext
    executors = sc._jsc.sc().getExecutorMemoryStatus().size() - 1
    compacted = lspark.compact(spark, uri)
    clustered = lspark.optimize(
        spark, uri, zorder_by=["a", "x"], target_file_size=16_000, max_group_bytes=1_000
    )
    spark.stop()
    print("RESULT " + json.dumps({
        "driver_pid": os.getpid(),
        "executors": executors,
        "compact": compacted.to_dict(),
        "optimize": clustered.to_dict(),
    }))
    """
)


def _data(i: int, n: int = 1_000) -> pa.Table:
    rng = np.random.default_rng(i)
    return pa.table(
        {
            "part": pa.array(["p0", "p1"] * (n // 2), pa.string()),
            "id": pa.array(np.arange(i * n, (i + 1) * n), pa.int64()),
            "a": pa.array(rng.integers(0, 10_000, n), pa.int64()),
            "x": pa.array(rng.random(n), pa.float64()),
        }
    )


def _ids(uri: str) -> list[int]:
    return sorted(lakelog.open_table(uri).snapshot().to_arrow().column("id").to_pylist())


def test_compact_and_optimize_on_separate_executor_processes(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, _data(0), partition_by=["part"])
    table = lakelog.open_table(uri)
    for i in range(1, 4):
        table.append(_data(i))
    before = _ids(uri)

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, uri],
        cwd=TESTS_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    out: dict[str, Any] = json.loads(line[len("RESULT ") :])

    assert out["executors"] == 2
    compact, optimize = out["compact"], out["optimize"]
    assert compact["version"] is not None and compact["after_file_count"] == 2
    assert optimize["version"] is not None and optimize["large_groups"] == 2
    assert compact["failed_groups"] == {} and optimize["failed_groups"] == {}
    # every group ran in an executor's Python worker, not in the driver process
    pids = {int(r["host"].rsplit(":", 1)[1]) for r in compact["task_runs"]}
    assert out["driver_pid"] not in pids
    assert {r["mode"] for r in optimize["task_runs"]} == {"spark-job"}
    assert _ids(uri) == before
    files = lakelog.open_table(uri).snapshot().files()
    assert all(f.tags.get(TAG_SPEC) == optimize["spec_id"] for f in files)
