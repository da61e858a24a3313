"""No ``lakelog`` run may abort at exit.

Reading a manifest with ``pq.read_table(pa.BufferReader(...))`` went through Arrow's
dataset scanner, whose pool threads could drop the last reference to the
Python-owned buffer while the interpreter was exiting: the thread then needed the
GIL, was ended by Python, and the process died with SIGABRT ("terminate called
without an active exception") after printing its output, a few runs in a hundred
under load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

import pyarrow as pa
import pytest

import lakelog

CLI = [sys.executable, "-m", "lakelog.cli"]


@pytest.fixture
def table(tmp_path: Path) -> lakelog.Table:
    """A table whose snapshot comes from a manifest (plus a few commits after it)."""
    t = lakelog.create_table(
        str(tmp_path / "t"),
        pa.schema([("id", pa.int64()), ("day", pa.string())]),
        partition_by=["day"],
        properties={"lakelog.manifest_interval": "2"},
    )
    for i in range(5):
        t.append(pa.table({"id": [i, i + 10], "day": [f"d{i % 3}", "d9"]}))
    assert any(n.endswith(".manifest.parquet") for n in os.listdir(tmp_path / "t" / "_lakelog"))
    return t


@pytest.mark.slow
def test_cli_never_aborts_at_exit(table: lakelog.Table) -> None:
    """32 real runs of ``info --json`` and ``history --json``, four at a time. Before
    the fix about 1 run in 30-100 aborted (a pool thread late behind the exiting main
    thread), so this catches a regression often, not always; the thread count below
    is the deterministic check of the cause."""
    runs = [["info", table.uri, "--json"], ["history", table.uri, "--json"]] * 16
    results = []
    for start in range(0, len(runs), 4):
        procs = [
            (argv[0], subprocess.Popen([*CLI, *argv], stdout=PIPE, stderr=PIPE, text=True))
            for argv in runs[start : start + 4]
        ]
        for command, proc in procs:
            out, err = proc.communicate(timeout=120)
            results.append((command, proc.returncode, err))
            if proc.returncode == 0:
                value = json.loads(out)
                shown = value["version"] if isinstance(value, dict) else value[0]["version"]
                assert shown == 5
    assert [r for r in results if "terminate called" in r[2]] == []
    assert [r for r in results if r[1] != 0 or r[2]] == []


def test_reading_a_table_leaves_no_arrow_threads(table: lakelog.Table) -> None:
    """The read path of ``info``/``history`` (manifest, commits) runs in the calling
    thread: no pool thread exists that could outlive the interpreter."""
    if not Path("/proc/self/task").is_dir():
        pytest.skip("needs /proc to count threads")
    script = f"""
import os, lakelog, lakelog.cli
def threads(): return len(os.listdir("/proc/self/task"))
before = threads()
t = lakelog.open_table({table.uri!r})
s = t.snapshot()
assert s.num_files == {table.snapshot().num_files}
h = t.history()
t.snapshot(3).files()
print(before, threads())
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    before, after = map(int, proc.stdout.split())
    assert after == before
