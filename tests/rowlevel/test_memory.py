"""A change holds the source plus a few batches in memory, never the table.

Measured in a fresh child process from ``/proc/self/status``: ``VmHWM`` (the peak
resident set) is reset through ``/proc/self/clear_refs`` before each operation,
so each figure is that operation's own growth. Each operation runs in its own child
on its own copy of the tables (in one process, memory the allocator kept from one
operation would hide part of the next one's). Reading the whole table is the
yardstick, so the test can fail.
"""

from __future__ import annotations

import json
import shutil
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
        not Path("/proc/self/status").exists(), reason="needs Linux /proc for VmHWM"
    ),
]

MiB = 1024 * 1024
FILES, ROWS = 16, 4_000  # rows of ~1 KiB: 16 files of ~4 MiB

CHILD = r"""
import json, re, sys
import pyarrow as pa
import lakelog
from lakelog.rowlevel import execute
execute.MAX_WORKERS = 1

def status(key):
    text = open("/proc/self/status").read()
    return int(re.search(key + r":\s+(\d+)", text).group(1)) * 1024

def growth(fn):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = status("VmRSS")
    fn()
    return status("VmHWM") - base

def source(t, n):
    ids = list(range(0, n, 100))  # keys in every file
    return pa.table({"id": ids, "blob": ["x" * 1000] * len(ids), "k": [i % 7 for i in ids]},
                    schema=t.schema)

# warm up on a small table first (modules, allocator arenas, thread pools), so the
# figures below are what the size of the table costs
small = lakelog.open_table(sys.argv[1])
small.delete("k = 3")
small.merge(source(small, int(sys.argv[2])), on="id")
small.snapshot().to_arrow()
t = lakelog.open_table(sys.argv[3])
t.snapshot().files()
src = source(t, int(sys.argv[4]))
run = {
    "delete": lambda: t.delete("k = 3"),
    "merge": lambda: t.merge(src, on="id"),
    "whole": lambda: t.snapshot().to_arrow(),
}[sys.argv[5]]
print(json.dumps(growth(run)))
"""


def _table(uri: str, files: int) -> None:
    rng = np.random.default_rng(0)
    for i in range(files):
        ids = np.arange(i * ROWS, (i + 1) * ROWS)
        blob = pa.array([rng.bytes(500).hex() for _ in range(ROWS)])  # 1 KiB, incompressible
        data = pa.table({"id": ids, "blob": blob, "k": ids % 7})
        lakelog.write_table(uri, data, properties={"lakelog.row_group_size": "1000"})


def test_delete_and_merge_memory_stays_far_below_the_table(tmp_path: Path) -> None:
    small, big = tmp_path / "small", tmp_path / "big"
    _table(str(small), 2)
    _table(str(big), FILES)
    got = {}
    for op in ("delete", "merge", "whole"):
        s, b = tmp_path / f"{op}-small", tmp_path / f"{op}-big"
        shutil.copytree(small, s)
        shutil.copytree(big, b)
        p = subprocess.run(
            [sys.executable, "-c", CHILD, str(s), str(2 * ROWS), str(b), str(FILES * ROWS), op],
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert p.returncode == 0, p.stderr[-3000:]
        got[op] = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["whole"] > 40 * MiB  # the yardstick: the table is ~64 MiB of rows
    # every file holds rows with k = 3 and source keys: all 16 files are rewritten by
    # each, one batch at a time
    assert got["delete"] < got["whole"] / 3, got
    assert got["merge"] < got["whole"] / 2, got  # + the source and its matched rows
