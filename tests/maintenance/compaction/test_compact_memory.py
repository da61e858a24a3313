"""Peak memory of compacting a group far larger than a row group stays bounded.

Measured in fresh child processes from ``/proc/self/status``: ``VmHWM`` (the
peak resident set) is reset through ``/proc/self/clear_refs`` just before the
compaction, so the figure is the compaction's own (``ru_maxrss`` would not do:
a child inherits its parent's high-water mark across fork/exec). A group five
times larger must not need more memory, and the bound must be far below what
reading the group whole takes (measured in the same child, so the test can
fail).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakelog

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path("/proc/self/status").exists(), reason="needs Linux /proc for VmHWM"
    ),
]

MiB = 1024 * 1024
ROWS = 20_000
ROW_GROUP = 2_000  # rows of ~1 KiB: 2 MiB row groups
BOUND = 128 * MiB

CHILD = r"""
import json, re, sys
import lakelog

def status(key):
    text = open("/proc/self/status").read()
    return int(re.search(key + r":\s+(\d+)", text).group(1)) * 1024

def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

table = lakelog.open_table(sys.argv[1])
table.snapshot().files()
reset_peak()
base = status("VmRSS")
report = table.compact(
    target_file_size=1 << 32, row_group_size=int(sys.argv[2]), max_concurrent_groups=1
)
compact_growth = status("VmHWM") - base
reset_peak()
base = status("VmRSS")
whole = table.snapshot().to_arrow()
print(json.dumps({
    "compact_growth": compact_growth,
    "materialize_growth": status("VmHWM") - base,
    "decoded_bytes": whole.nbytes,
    "groups": len(report.planned_groups),
    "compacted": report.compacted_file_count,
    "files_after": table.snapshot().num_files,
}))
"""


def _batch(i: int) -> pa.Table:
    ids = pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64())
    # ~1 KiB values: almost nothing on disk, large in memory
    payload = pc.binary_join_element_wise(pa.scalar("x" * 1000), ids.cast(pa.string()), "")
    return pa.table({"id": ids, "payload": payload})


def _measure(uri: str, appends: int) -> dict[str, Any]:
    lakelog.write_table(uri, _batch(0))
    t = lakelog.open_table(uri)
    for i in range(1, appends):
        t.append(_batch(i))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, uri, str(ROW_GROUP)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    m: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    assert m["groups"] == 1 and m["compacted"] == appends and m["files_after"] == 1
    return m


def test_peak_memory_does_not_grow_with_the_group(tmp_path: Path) -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pytest.skip("cannot reset VmHWM here (/proc/self/clear_refs not writable)")
    small = _measure(str(tmp_path / "small"), 4)
    big = _measure(str(tmp_path / "big"), 20)
    assert big["decoded_bytes"] > 3 * BOUND  # the group is far larger than the bound
    assert big["compact_growth"] < BOUND, big
    # five times the data, about the same memory
    assert big["compact_growth"] < small["compact_growth"] + 48 * MiB, (small, big)
    # while reading the group whole would not fit the bound at all
    assert big["materialize_growth"] > 2 * BOUND, big
