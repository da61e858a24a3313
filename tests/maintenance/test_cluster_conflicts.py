"""optimize beside other writers: appends land too; a rival rewrite of the same files wins.

The rival is a real OS process (``sys.executable -c``) that commits after the
optimize has read its snapshot and written its files, right before it commits.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import lakelog
import lakelog.maintenance.optimize as optimize_mod
from lakelog.errors import CommitConflictError

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
    out = subprocess.run(
        [sys.executable, "-c", code, uri], capture_output=True, text=True, timeout=120
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


def _before_commit(monkeypatch: pytest.MonkeyPatch, code: str, uri: str) -> None:
    real = optimize_mod.commit_rewrite

    def racing(*args: Any, **kwargs: Any) -> Any:
        _run(code, uri)
        return real(*args, **kwargs)

    monkeypatch.setattr(optimize_mod, "commit_rewrite", racing)


def _data_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_lakelog" not in p.parts}


def test_concurrent_append_lands_and_optimize_rebases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri)
    rows = t.snapshot().num_rows
    _before_commit(monkeypatch, APPEND, uri)
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
    before = sorted(t.snapshot().to_arrow().column("a").to_pylist())
    _before_commit(monkeypatch, COMPACT, uri)
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
    _before_commit(monkeypatch, SET_PROPERTIES, uri)
    with pytest.raises(CommitConflictError):
        t.optimize(zorder_by=["a", "b"])
    assert _data_files(Path(uri)) == files_before
