"""optimize beside other writers: appends land too; a rival rewrite of the same files wins.

The rival is a real OS process (``sys.executable -c``) that commits after the
optimize has read its snapshot and written its files, while the optimize waits at
the ``rewrite:before-commit`` pausepoint (:mod:`lakelog._failpoints`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lakelog
from lakelog.errors import CommitConflictError

pytestmark = pytest.mark.processes

APPEND = """
import sys, numpy as np, pyarrow as pa, lakelog
t = lakelog.open_table(sys.argv[1])
t.append(pa.table({"a": np.arange(1_000_000, 1_000_500), "b": np.linspace(0, 1, 500)}))
"""
COMPACT = """
import sys, lakelog
r = lakelog.open_table(sys.argv[1]).compact(target_file_size=10**9)
assert r.version is not None, r
"""
SET_PROPERTIES = """
import sys, lakelog
lakelog.open_table(sys.argv[1]).set_properties({"owner": "rival"})
"""


def _run(code: str, uri: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LAKELOG_PAUSE_AT"}  # the rival runs on
    out = subprocess.run(
        [sys.executable, "-c", code, uri], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr


def _table(uri: str) -> lakelog.Table:
    rng = np.random.default_rng(0)
    t = lakelog.create_table(
        uri,
        pa.schema([("a", pa.int64()), ("b", pa.float64())]),
        properties={"lakelog.target_file_size": str(20_000)},
    )
    for _ in range(6):
        t.append(pa.table({"a": rng.integers(0, 100_000, 2000), "b": rng.random(2000)}))
    return t


@contextlib.contextmanager
def _rival_before_commit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, code: str, uri: str
) -> Iterator[None]:
    """Within the block, the first rewrite commit of this process waits until ``code``
    has run in another process."""
    gate = tmp_path / "gate"
    monkeypatch.setenv("LAKELOG_PAUSE_AT", f"rewrite:before-commit:{gate}")
    errors: list[BaseException] = []

    def rival() -> None:
        try:
            deadline = time.monotonic() + 60
            while not Path(f"{gate}.paused").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            _run(code, uri)
        except BaseException as e:  # noqa: BLE001 - raised in the test's thread
            errors.append(e)
        finally:
            gate.touch()

    thread = threading.Thread(target=rival)
    thread.start()
    try:
        yield
    finally:
        gate.touch()
        thread.join()
    if errors:
        raise errors[0]


def _data_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_lakelog" not in p.parts}


def test_concurrent_append_lands_and_optimize_rebases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri)
    rows = t.snapshot().num_rows
    with _rival_before_commit(monkeypatch, tmp_path, APPEND, uri):
        rep = t.optimize(zorder_by=["a", "b"])
    assert rep.version is not None and not rep.abandoned_groups
    snap = t.snapshot()
    assert snap.num_rows == rows + 500
    got = snap.to_arrow().column("a").to_numpy()
    assert np.sum(got >= 1_000_000) == 500  # the appended rows, exactly once
    assert rep.version == snap.version  # landed after the append (rebased)
    appended = [f for f in snap.files() if "lakelog.clustering.spec" not in f.tags]
    assert len(appended) == 1


def test_concurrent_compaction_of_the_same_files_wins_and_optimize_abandons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri)
    # without claims the rival picks the same files; the commit rules alone keep it safe
    # (with claims it skips them: tests/maintenance/test_claims.py)
    t.set_properties({"lakelog.maintenance.claims": "false"})
    before = sorted(t.snapshot().to_arrow().column("a").to_pylist())
    with _rival_before_commit(monkeypatch, tmp_path, COMPACT, uri):
        rep = t.optimize(zorder_by=["a", "b"])
    assert rep.version is None and len(rep.abandoned_groups) == 1
    snap = t.snapshot()
    assert t.history(limit=1)[0].operation != "OPTIMIZE"
    assert sorted(snap.to_arrow().column("a").to_pylist()) == before  # no duplicates
    live = {f.path for f in snap.files()}
    assert all(Path(uri, p).exists() for p in live)
    # the abandoned group's outputs were deleted: only files of some version remain
    referenced = set(live)
    for v in range(snap.version + 1):
        referenced |= {f.path for f in t.snapshot(v).files()}
    assert _data_files(Path(uri)) <= referenced


def test_concurrent_metadata_change_raises_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri)
    files_before = _data_files(Path(uri))
    with (
        _rival_before_commit(monkeypatch, tmp_path, SET_PROPERTIES, uri),
        pytest.raises(CommitConflictError),
    ):
        t.optimize(zorder_by=["a", "b"])
    assert _data_files(Path(uri)) == files_before
