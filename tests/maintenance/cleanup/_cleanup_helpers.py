"""Helpers shared by the expiry and vacuum tests: tables, a compaction stand-in,
a model of the rows of every version, and the invariants checked after each step."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
from lakelog.io.writer import write_files
from lakelog.log.actions import Action, AddFile
from lakelog.log.snapshot import Snapshot, load_snapshot
from lakelog.scan import readable

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
ZERO = dt.timedelta(0)
REPO = str(Path(__file__).resolve().parents[3])


def rows(start: int, n: int = 3, p: str = "a") -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "p": [p] * n}, schema=SCHEMA)


def make_table(
    uri: str,
    storage_options: Mapping[str, Any] | None = None,
    *,
    partition_by: tuple[str, ...] = (),
    properties: Mapping[str, Any] | None = None,
) -> lakelog.Table:
    return lakelog.create_table(
        uri,
        SCHEMA,
        partition_by=partition_by,
        properties=dict(properties or {}),
        storage_options=storage_options,
    )


def ids(snapshot: Snapshot) -> list[int]:
    rows = readable(snapshot).to_arrow(columns=["id"])
    return sorted(rows.column("id").to_pylist())


class Model:
    """Expected sorted ids of every version committed through it."""

    def __init__(self, table: lakelog.Table) -> None:
        self.table = table
        self.versions: dict[int, list[int]] = {table.version: ids(table.snapshot())}

    def record(self) -> int:
        snap = self.table.snapshot()
        # versions committed by others in between (e.g. an expiry) change no rows
        last = max(self.versions)
        for v in range(last + 1, snap.version):
            self.versions[v] = self.versions[last]
        self.versions[snap.version] = ids(snap)
        return snap.version

    def append(self, start: int, n: int = 3, p: str = "a") -> int:
        self.table.append(rows(start, n, p))
        return self.record()


def rewrite(table: lakelog.Table) -> lakelog.CommitResult | None:
    """A compaction: every live file rewritten into one file per partition,
    committed as remove+add with ``data_change=False``."""
    snap = table.snapshot()
    if snap.num_files < 2:
        return None
    actions = rewrite_actions(table, snap)
    return table.commit(actions, operation="COMPACT", kind="rewrite", read_snapshot=snap)


def rewrite_actions(table: lakelog.Table, snap: lakelog.Snapshot) -> list[Action]:
    """Write the combined files of ``snap``; the remove+add actions to commit."""
    files = snap.files()
    data = snap.to_arrow()
    adds = write_files(
        table.storage,
        data.to_batches(),
        schema=snap.schema,
        partition_by=snap.partition_by,
        options=table.write_options(),
    )
    now = int(time.time() * 1000)
    actions: list[Action] = [f.to_remove(deletion_ms=now, data_change=False) for f in files]
    actions += [
        AddFile(**{**{k: getattr(a, k) for k in a.__struct_fields__}, "data_change": False})
        for a in adds
    ]
    return actions


def write_adds(table: lakelog.Table, data: pa.Table) -> list[AddFile]:
    """Data files for ``data``, written but not committed."""
    return write_files(
        table.storage,
        data.to_batches(),
        schema=table.schema,
        partition_by=table.partition_by,
        options=table.write_options(),
    )


def check_table(table: lakelog.Table, model: Model) -> int:
    """Every retained version resolves, every file it references exists, and it
    reads the rows the model expects; every older version raises
    VersionExpiredError naming the oldest readable version. Returns that version."""
    storage = table.storage
    latest = load_snapshot(storage)
    oldest = latest.oldest_version
    for v, want in sorted(model.versions.items()):
        if v < oldest:
            with pytest.raises(lakelog.VersionExpiredError) as info:
                load_snapshot(storage, v)
            assert info.value.oldest_version == oldest
            continue
        snap = load_snapshot(storage, v)
        missing = [f.path for f in snap.files() if not storage.exists(f.path)]
        assert not missing, f"version {v} references deleted files {missing}"
        assert ids(snap) == want, f"version {v}"
    return oldest


def referenced_by_any(table: lakelog.Table, versions: range) -> set[str]:
    out: set[str] = set()
    for v in versions:
        out.update(f.path for f in load_snapshot(table.storage, v).files())
    return out


def run_child(
    code: str, *args: str, crash_at: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (argv = args), optionally SIGKILLed at
    the named failpoint."""
    env = {**os.environ, "PYTHONPATH": REPO}
    env.pop("LAKELOG_CRASH_AT", None)
    if crash_at:
        env["LAKELOG_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def assert_killed(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)


def age(path: str | Path, seconds: float) -> None:
    """Make a local file look ``seconds`` old."""
    t = time.time() - seconds
    os.utime(path, (t, t))
