"""A group larger than ``max_group_bytes`` is sorted in spilled runs and merged.

Peak memory is measured in child processes (``VmHWM`` from /proc/self/status):
the same optimize with a small budget must spill several runs and peak far
lower than with a budget that holds the whole group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lakelog

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path("/proc/self/status").exists(), reason="needs /proc/self/status (Linux)"
    ),
]

CHILD = """
import json, sys, lakelog

def hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

t = lakelog.open_table(sys.argv[1])
t.snapshot().files()
base = hwm()
r = t.optimize(zorder_by=["a", "b"], max_group_bytes=int(sys.argv[2]),
               target_file_size=4 * 1024 * 1024, row_group_size=8192)
print(json.dumps({"base": base, "peak": hwm(), "runs": r.to_dict()["spilled_runs"],
                  "rows": t.snapshot().num_rows, "version": r.version}))
"""


def _child(uri: str, budget: int) -> dict[str, int]:
    # the system allocator returns freed memory at once, so VmHWM shows what was needed
    # rather than what mimalloc chose to keep cached
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, uri, str(budget)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_spilled_sort_bounds_peak_memory(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    schema = pa.schema([("a", pa.int64()), ("b", pa.float64()), ("pad", pa.string())])
    uris = [str(tmp_path / "spill"), str(tmp_path / "memory")]
    for uri in uris:
        t = lakelog.create_table(uri, schema)
        for _i in range(8):
            n = 50_000
            pad = pa.array([f"{j:08d}" * 18 for j in rng.integers(0, 10**8, n)])
            t.append(
                pa.table(
                    {"a": rng.integers(0, 10**6, n), "b": rng.random(n), "pad": pad}, schema=schema
                )
            )
        rng = np.random.default_rng(3)  # same data in both tables
    group_bytes = lakelog.open_table(uris[0]).snapshot().to_arrow().nbytes
    assert group_bytes > 60 * 2**20
    spill = _child(uris[0], 8 * 2**20)
    memory = _child(uris[1], 2**30)
    assert spill["runs"] > 4 and memory["runs"] == 0
    assert spill["rows"] == memory["rows"] == 400_000
    assert spill["version"] is not None and memory["version"] is not None
    grew_spill = spill["peak"] - spill["base"]
    grew_memory = memory["peak"] - memory["base"]
    assert grew_memory > group_bytes  # the whole group was held at once
    assert grew_spill < 0.5 * grew_memory
    keys = [(c, "ascending") for c in ("pad", "a", "b")]  # pad alone has ties
    a = lakelog.open_table(uris[0]).snapshot().to_arrow().sort_by(keys)
    b = lakelog.open_table(uris[1]).snapshot().to_arrow().sort_by(keys)
    assert a.equals(b)
