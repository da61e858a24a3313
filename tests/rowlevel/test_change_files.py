"""Change files written by row-level changes (docs/format.md, "Change data feed").

With ``lakelog.change_data_feed=true`` every delete, update, merge and overwrite with
``where`` lists ``cdc`` actions whose files hold exactly the rows it changed, with their
``_change_type``; each test computes what that must be from the table before and after
the commit and compares. Without the property nothing is recorded. Change files of a
commit that does not land are deleted; expiry and vacuum treat them as data files of
their commit.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _rowlevel_helpers import SCHEMA, rows, table_rows

import lakelog
from lakelog import CommitConflictError
from lakelog.errors import UnsupportedFormatError
from lakelog.log.actions import ChangeFile
from lakelog.log.commits import read_commit
from lakelog.log.feed import (
    CHANGE_DIR,
    CHANGE_TYPE,
    DELETE,
    INSERT,
    UPDATE_POST,
    UPDATE_PRE,
    needs_change_files,
)
from lakelog.rowlevel.change_files import ChangeWriter
from lakelog.rowlevel.merge import MergeChange
from lakelog.rowlevel.predicate import DeleteChange, Where
from lakelog.rowlevel.run import run_change

FEED = "lakelog.change_data_feed"


def _table(root: Path, *, vectors: bool, feed: bool = True) -> lakelog.Table:
    """Partitioned by ``day``; four files of ten rows (ids 0..39), a fifth of ids 40..41
    (a delete of both removes it whole), a sixth of 100 rows (with vectors, a change of
    a third of them or more encodes past the vector limit: the file is rewritten)."""
    t = lakelog.create_table(
        str(root),
        SCHEMA,
        partition_by=("day",),
        properties={
            FEED: str(feed).lower(),
            "lakelog.deletion_vectors": str(vectors).lower(),
            "lakelog.deletion_vectors.max_vector_bytes": "18",
        },
    )
    for i in range(4):
        t.append(rows(list(range(i * 10, (i + 1) * 10)), day=f"d{i % 2}"))
    t.append(rows([40, 41], day="d0"))
    t.append(rows(list(range(1000, 1200, 2)), day="d1"))  # ids 1000, 1002, ..., 1198
    return t


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(r.items()))


def _recorded(t: lakelog.Table, version: int) -> Counter[tuple[Any, ...]]:
    """The rows of the change files version ``version`` lists, partition values put back."""
    out: Counter[tuple[Any, ...]] = Counter()
    for a in read_commit(t.storage, version).actions:
        if not isinstance(a, ChangeFile):
            continue
        assert a.path.startswith(f"{CHANGE_DIR}/")
        with t.storage.open_input(a.path) as f:
            got = pq.read_table(f)
        assert got.num_rows == a.num_rows and got.schema.names[-1] == CHANGE_TYPE
        assert "day" not in got.schema.names  # partition columns are in the action
        for r in got.to_pylist():
            out[_key({**r, **a.partition})] += 1
    return out


def _model(
    before: list[dict[str, Any]], after: list[dict[str, Any]], replaced: set[int] | None = None
) -> Counter[tuple[Any, ...]]:
    """What a commit from ``before`` to ``after`` (rows keyed by ``id``) changed: rows
    only before are deleted, rows only after inserted, rows in both with other values
    updated. ``replaced``: ids an overwrite removed and wrote again (delete + insert)."""
    old = {r["id"]: r for r in before}
    new = {r["id"]: r for r in after}
    out: Counter[tuple[Any, ...]] = Counter()
    for i, r in old.items():
        if i not in new or (replaced and i in replaced):
            out[_key({**r, CHANGE_TYPE: DELETE})] += 1
        elif new[i] != r:
            out[_key({**r, CHANGE_TYPE: UPDATE_PRE})] += 1
            out[_key({**new[i], CHANGE_TYPE: UPDATE_POST})] += 1
    for i, r in new.items():
        if i not in old or (replaced and i in replaced):
            out[_key({**r, CHANGE_TYPE: INSERT})] += 1
    return out


def _among(ids: range | list[int]) -> str:
    return f"id in ({', '.join(str(i) for i in ids)})"


def _change(t: lakelog.Table, op: str) -> tuple[Any, set[int] | None]:
    if op == "delete":  # scattered rows, a whole file (40, 41), a third of the big file
        return t.delete(_among([*range(0, 42, 3), 40, 41, *range(1002, 1200, 6)])), None
    if op == "update":  # some rows move to another partition
        scattered = _among([*range(1, 40, 4), *range(1000, 1200, 4)])
        return t.update(scattered, set={"note": "changed", "day": "d9"}), None
    if op.startswith("merge"):
        src = pa.table(
            {
                "id": [2, 13, 27, 40, 500, 501],
                "day": ["d0", "d1", "d1", "d0", "d0", "d1"],
                "v": [-2.0, -13.0, -27.0, -40.0, 500.0, 501.0],
                "note": ["m"] * 6,
            },
            schema=SCHEMA,
        )
        # "merge-by-source" deletes the rows no source row matches and updates the others
        by_source = "delete" if op == "merge-by-source" else "ignore"
        return t.merge(src, on="id", when_not_matched_by_source=by_source), None
    data = rows([10, 12, 77], day="d1", note="o")
    return t.overwrite(data, where="id >= 10 and id < 14 or id = 77"), {10, 12}


@pytest.mark.parametrize("vectors", [False, True], ids=["copy-on-write", "vectors"])
@pytest.mark.parametrize("op", ["delete", "update", "merge", "merge-by-source", "overwrite-where"])
def test_a_change_records_exactly_the_rows_it_changed(
    tmp_path: Path, op: str, vectors: bool
) -> None:
    t = _table(tmp_path / "t", vectors=vectors)
    before = table_rows(t)
    result, replaced = _change(t, op)
    assert result.committed
    after = table_rows(t)
    want = _model(before, after, replaced)
    assert want  # the change changed something
    assert _recorded(t, result.version) == want
    commit = read_commit(t.storage, result.version)
    assert needs_change_files(commit) and commit.header.format_version == 6
    cdc = [a for a in commit.actions if isinstance(a, ChangeFile)]
    # one file per partition changed (the few rows fit one buffer)
    assert len({tuple(a.partition.items()) for a in cdc}) == len(cdc)
    # a reader of version 5 refuses the commit instead of missing its change files
    with pytest.raises(UnsupportedFormatError):
        read_commit(t.storage, result.version, reader_version=5)
    # change files add no live file
    assert table_rows(t) == after


@pytest.mark.parametrize("vectors", [False, True], ids=["copy-on-write", "vectors"])
@pytest.mark.parametrize("op", ["delete", "update", "merge", "overwrite-where"])
def test_without_the_property_nothing_is_recorded(tmp_path: Path, op: str, vectors: bool) -> None:
    t = _table(tmp_path / "t", vectors=vectors, feed=False)
    result, _ = _change(t, op)
    assert result.committed
    commit = read_commit(t.storage, result.version)
    assert not [a for a in commit.actions if isinstance(a, ChangeFile)]
    assert commit.header.format_version <= 5
    assert not (tmp_path / "t" / CHANGE_DIR).exists()


def test_the_property_turned_on_later_records_from_then_on(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", vectors=False, feed=False)
    first = t.delete("id = 1")
    t.set_properties({FEED: "true"})
    assert t.snapshot().metadata.format_version == 6
    second = t.delete("id = 2")
    assert _recorded(t, first.version) == Counter()
    assert sum(_recorded(t, second.version).values()) == 1


def _change_files(root: Path) -> set[str]:
    folder = root / CHANGE_DIR
    return (
        {str(p.relative_to(root)) for p in folder.rglob("*.parquet")} if folder.exists() else set()
    )


def test_a_change_that_does_not_land_leaves_no_change_file(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", vectors=False)
    snap = t.snapshot()
    t.append(rows([2], day="d0"))  # a source key: the merge conflicts
    change = MergeChange(
        snap.schema,
        snap.partition_by,
        rows([2, 3, 500], day="d0", note="m"),
        "id",
        when_matched="update",
        when_not_matched="insert",
        when_not_matched_by_source="ignore",
        duplicates="error",
        options=t.write_options(),
    )
    with pytest.raises(CommitConflictError):
        run_change(t, change, snap)
    assert _change_files(tmp_path / "t") == set()


def test_a_rebased_delete_records_the_rows_it_rewrote_while_rebasing(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", vectors=False)
    snap = t.snapshot()
    t.append(rows([3000, 3001], day="d1", note="late"))  # a matching row, concurrently
    before = table_rows(t)
    where = Where("id = 3 or id = 3000", snap.schema, operation="DELETE")
    r = run_change(t, DeleteChange(where), snap)
    assert r.committed and r.attempts == 2
    assert _recorded(t, r.version) == _model(before, table_rows(t))
    listed = {
        a.path
        for v in range(t.version + 1)
        for a in read_commit(t.storage, v).actions
        if isinstance(a, ChangeFile)
    }
    assert _change_files(tmp_path / "t") == listed


def test_expiry_deletes_change_files_of_expired_commits_and_vacuum_keeps_the_rest(
    tmp_path: Path,
) -> None:
    root = tmp_path / "t"
    t = _table(root, vectors=True)
    old = t.delete("id = 1")
    mid = t.delete("id = 2")
    new = t.update("id = 3", set={"note": "x"})
    files = {
        v: {a.path for a in read_commit(t.storage, v).actions if isinstance(a, ChangeFile)}
        for v in (old.version, mid.version, new.version)
    }
    assert all(files.values()) and _change_files(root) == set().union(*files.values())
    orphan = root / CHANGE_DIR / "day=d0" / "cdc-00000-orphan.parquet"
    pq.write_table(pa.table({"id": [1]}), orphan)
    report = t.expire_snapshots(older_than=dt.timedelta(0), retain_last=2)
    assert report.oldest_version == mid.version  # the feed starts after it
    assert files[old.version] | files[mid.version] <= set(report.data_files)
    assert _change_files(root) == files[new.version] | {str(orphan.relative_to(root))}
    dry = t.vacuum(older_than=dt.timedelta(0), force=True)
    assert set(dry.files) == {str(orphan.relative_to(root))}
    t.vacuum(older_than=dt.timedelta(0), force=True, dry_run=False)
    assert _change_files(root) == files[new.version]


def test_the_writer_is_bounded_and_names_files_with_its_lease(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", vectors=False)
    lease_id = "ab" * 16
    writer = ChangeWriter(
        t.storage,
        schema=SCHEMA,
        partition_by=("day",),
        options=t.write_options(),
        lease_id=lease_id,
        buffer_bytes=4096,
    )
    for i in range(40):
        writer.add(rows(list(range(i * 100, i * 100 + 100)), day=f"d{i % 2}"), DELETE)
    written = writer.written()
    assert len(written) > 2  # written while the rows came, not all at the end
    files = writer.flush()
    assert sorted(f.path for f in files) == sorted(writer.written())
    assert sum(f.num_rows for f in files) == 4000
    assert all(lease_id in f.path and f.path.startswith(f"{CHANGE_DIR}/day=d") for f in files)
    assert {f.partition["day"] for f in files} == {"d0", "d1"}
    writer.discard()
    assert _change_files(tmp_path / "t") == set()
