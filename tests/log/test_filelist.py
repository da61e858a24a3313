"""FileList: the live files of a snapshot as typed columns, DataFile values on access."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lakelog


def _table(tmp_path: Path, appends: int) -> lakelog.Table:
    t = lakelog.create_table(
        str(tmp_path / "t"),
        pa.schema([("day", pa.string()), ("id", pa.int64())]),
        partition_by=["day"],
        properties={"lakelog.manifest_interval": 3, "lakelog.manifest.leaf_files": 4},
    )
    for i in range(appends):
        t.append(pa.table({"day": [f"d{i % 3}"], "id": [i]}))
    return t


def test_indexing_slicing_taking_and_iterating_agree(tmp_path: Path) -> None:
    files = _table(tmp_path, 11).snapshot().files()  # leaves of a root, plus the tail
    listed = list(files)
    assert len(files) == len(listed) == 11
    assert [files[i] for i in range(len(files))] == listed
    assert files[-1] == listed[-1] and files[1:4] == listed[1:4]
    assert list(files.take([0, 5, 10])) == [listed[0], listed[5], listed[10]]
    assert files.paths() == [f.path for f in listed]
    assert files.total_bytes == sum(f.size_bytes for f in listed)
    assert files == listed and files != listed[:-1]
    with pytest.raises(IndexError):
        files[11]


def test_a_sparse_plan_holds_copies_of_the_rows_it_keeps(tmp_path: Path) -> None:
    snap = _table(tmp_path, 12).snapshot()
    kept = snap.files("id = 7")
    assert [f.path for f in kept] == [
        f.path for f in snap.files() if f.stats and f.stats.min["id"] == 7
    ]
    assert len(kept) == 1 and kept[0] == next(f for f in snap.files() if f.path == kept[0].path)
