"""Two Spark applications maintaining one table at once pick disjoint files.

Each application is its own OS process with its own SparkSession (``local[1]``): one
compacts partition ``a`` and pauses right after its claim landed (``rewrite:claimed``,
:mod:`lakelog._failpoints`); the other clusters the table by its declared clustering
meanwhile, skipping the claimed files; then the first goes on. Both land, no group is
abandoned, no row changes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lakelog
from lakelog.log.actions import RemoveFile
from lakelog.log.commits import read_commit

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

TESTS = str(Path(__file__).resolve().parents[1])
SCHEMA = pa.schema([("kind", pa.string()), ("a", pa.int64()), ("b", pa.float64())])

APP = """
import json, sys
sys.path.insert(0, sys.argv[1])
from _services import build_spark_session
import lakelog.spark as lspark
spark = build_spark_session(sys.argv[3], master="local[1]")
try:
    if sys.argv[3] == "compact-a":
        r = lspark.compact(spark, sys.argv[2], partition_filter=[("kind", "=", "a")])
    else:
        r = lspark.optimize(spark, sys.argv[2])  # the table's declared clustering
    print(json.dumps({"version": r.version, "abandoned": r.abandoned_groups}))
finally:
    spark.stop()
"""


def _app(name: str, uri: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_")}
    return subprocess.Popen(
        [sys.executable, "-c", APP, TESTS, uri, name],
        env={**clean, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(p: subprocess.Popen[str]) -> dict[str, object]:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
    got: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return got


def _rows(t: lakelog.Table) -> Counter[tuple[object, ...]]:
    return Counter(tuple(r.values()) for r in t.refresh().snapshot().to_arrow().to_pylist())


def _removed_by(t: lakelog.Table, operation: str) -> set[str]:
    out: set[str] = set()
    for v in range(t.refresh().version + 1):
        c = read_commit(t.storage, v)
        if c.header.operation == operation:
            out |= {a.path for a in c.actions if isinstance(a, RemoveFile)}
    return out


def test_two_spark_applications_pick_disjoint_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    rng = np.random.default_rng(0)
    t = lakelog.create_table(
        uri, SCHEMA, partition_by=["kind"], properties={"lakelog.target_file_size": str(1 << 20)}
    )
    for i in range(6):
        n = 400
        t.append(
            pa.table(
                {
                    "kind": [["a", "b"][i % 2]] * n,
                    "a": rng.integers(0, 10**6, n),
                    "b": rng.random(n),
                },
                schema=SCHEMA,
            )
        )
    t.set_clustering(zorder_by=["a", "b"])  # Spark's optimize() keeps it too
    rows = _rows(t)
    gate = tmp_path / "gate"
    compactor = _app("compact-a", uri, {"LAKELOG_PAUSE_AT": f"rewrite:claimed:{gate}"})
    deadline = time.monotonic() + 240
    while not Path(f"{gate}.paused").exists():
        assert compactor.poll() is None, compactor.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the compaction never claimed its files"
        time.sleep(0.1)
    (claim,) = t.plans()
    assert claim.operation == "COMPACT" and claim.running
    optimized = _result(_app("optimize", uri))  # a second application, while A holds its claim
    gate.touch()
    compacted = _result(compactor)
    for r in (compacted, optimized):
        assert r["version"] is not None and r["abandoned"] == [], r
    by_compact, by_optimize = _removed_by(t, "COMPACT"), _removed_by(t, "OPTIMIZE")
    assert by_compact and by_optimize and by_compact.isdisjoint(by_optimize)
    assert {p.split("/")[0] for p in by_optimize} == {"kind=b"}
    (header,) = [h for h in t.history() if h.operation == "OPTIMIZE"]
    assert header.parameters["columns"] == ["a", "b"]
    assert _rows(t) == rows
    assert t.plans() == []
