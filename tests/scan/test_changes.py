"""``Table.changes``: the change feed of a range of versions (``docs/format.md``, "Change
data feed"): appends as inserts, nothing for maintenance, deletes of removed files,
deletion-vector differences, refusals (an incomplete range, an expired start), time
ranges, projection and filters, schema changes inside the range, and the row-level
changes recorded in change files when the table property is on."""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
from lakelog.log.actions import ChangeFile
from lakelog.log.commits import read_commit

SCHEMA = pa.schema([("id", pa.int64()), ("g", pa.string()), ("v", pa.int64())])
FEED = "lakelog.change_data_feed"
ZERO = dt.timedelta(0)


def _rows(ids: list[int], g: str = "a") -> pa.Table:
    return pa.table({"id": ids, "g": [g] * len(ids), "v": [i * 10 for i in ids]}, schema=SCHEMA)


def _table(
    path: Path, *, partitioned: bool = False, properties: dict[str, str] | None = None
) -> lakelog.Table:
    return lakelog.create_table(
        str(path / "t"), SCHEMA, partition_by=("g",) if partitioned else (), properties=properties
    )


def _changes(feed: pa.Table) -> list[tuple[str, int, int]]:
    """(change type, version, id) of each row, in feed order."""
    return [
        (r["_change_type"], r["_commit_version"], r["id"])
        for r in feed.select(["_change_type", "_commit_version", "id"]).to_pylist()
    ]


def _has_change_files(t: lakelog.Table, version: int) -> bool:
    return any(isinstance(a, ChangeFile) for a in read_commit(t.storage, version).actions)


def _require_change_files(t: lakelog.Table) -> None:
    """The row-level change just committed recorded its rows in change files."""
    version = t.refresh().version
    assert _has_change_files(t, version), f"commit {version} lists no change file"


# -- appends, maintenance, overwrites -----------------------------------------------------


@pytest.mark.parametrize("partitioned", [False, True])
def test_appends_are_inserts_with_their_version_and_time(tmp_path: Path, partitioned: bool) -> None:
    t = _table(tmp_path, partitioned=partitioned)
    t.append(_rows([1, 2]))
    t.append(_rows([3], g="b"))
    feed = t.changes(1)
    assert feed.schema.names == [
        "id",
        "g",
        "v",
        "_change_type",
        "_commit_version",
        "_commit_timestamp",
    ]
    got = feed.to_arrow()
    assert got.schema == feed.schema
    assert got.schema.field("_commit_timestamp").type == pa.timestamp("ms", tz="UTC")
    assert _changes(got) == [("insert", 1, 1), ("insert", 1, 2), ("insert", 2, 3)]
    assert got.column("g").to_pylist() == ["a", "a", "b"]
    times = {h.version: h.timestamp_ms for h in t.history()}
    stamps = got.column("_commit_timestamp").cast(pa.int64()).to_pylist()
    assert stamps == [times[1], times[1], times[2]]
    assert _changes(t.changes(2).to_arrow()) == [("insert", 2, 3)]
    assert _changes(t.changes(0, 1).to_arrow()) == [("insert", 1, 1), ("insert", 1, 2)]


def test_the_create_commit_is_in_the_feed(tmp_path: Path) -> None:
    lakelog.write_table(str(tmp_path / "t"), _rows([1, 2]))
    t = lakelog.open_table(str(tmp_path / "t"))
    assert _changes(t.changes(0).to_arrow()) == [("insert", 0, 1), ("insert", 0, 2)]


def test_maintenance_gives_no_rows(tmp_path: Path) -> None:
    t = _table(tmp_path)
    for i in range(4):
        t.append(_rows([i]))
    before = t.version
    t.compact(min_input_files=2)
    t.optimize(sort_by=["v"], incremental=False)
    t.set_properties({"team": "x"})
    assert t.refresh().version > before + 2
    assert t.changes(before + 1).to_arrow().num_rows == 0
    t.expire_snapshots(older_than=ZERO, retain_last=2)
    oldest = t.refresh().snapshot().oldest_version
    assert oldest > before
    assert t.changes(oldest + 1).to_arrow().num_rows == 0  # the expiry's own commit too


def test_an_overwrite_deletes_the_rows_of_the_files_it_removes(tmp_path: Path) -> None:
    t = _table(tmp_path, partitioned=True)
    t.append(_rows([1, 2]))
    t.append(_rows([3], g="b"))
    t.overwrite(_rows([7]), partitions=[{"g": "a"}])
    t.overwrite(_rows([8], g="b"))
    got = _changes(t.changes(3).to_arrow())
    assert sorted(got[:2]) == [("delete", 3, 1), ("delete", 3, 2)]
    assert got[2:] == [("insert", 3, 7), ("delete", 4, 3), ("delete", 4, 7), ("insert", 4, 8)]


def test_a_removed_file_gives_its_live_rows_of_the_version_before(tmp_path: Path) -> None:
    """A file with a deletion vector: only its rows still live are deleted by a later
    overwrite (the ones gone before are not deleted twice)."""
    t = _table(tmp_path, properties={"lakelog.deletion_vectors": "true"})
    t.append(_rows([1, 2, 3, 4]))
    t.delete("id = 2")
    deleted_at = t.version
    t.overwrite(_rows([9]))
    got = _changes(t.changes(deleted_at + 1).to_arrow())
    assert sorted(got) == [
        ("delete", deleted_at + 1, 1),
        ("delete", deleted_at + 1, 3),
        ("delete", deleted_at + 1, 4),
        ("insert", deleted_at + 1, 9),
    ]


def test_restore_of_a_deletion_vector_gives_the_positions_that_differ(tmp_path: Path) -> None:
    t = _table(tmp_path, properties={"lakelog.deletion_vectors": "true"})
    t.append(_rows([1, 2, 3, 4]))
    t.delete("id in (2, 3)")
    t.restore(1)  # the same file, back with no vector: 2 and 3 live again
    assert _changes(t.changes(3).to_arrow()) == [("insert", 3, 2), ("insert", 3, 3)]
    t.delete("id = 1")
    t.restore(2)  # from the vector deleting id 1 back to the one deleting 2 and 3
    got = _changes(t.changes(5).to_arrow())
    assert sorted(got) == [("delete", 5, 2), ("delete", 5, 3), ("insert", 5, 1)]


def test_restore_without_vectors_deletes_and_inserts_whole_files(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.append(_rows([1]))
    t.append(_rows([2]))
    t.overwrite(_rows([3]))
    t.restore(1)
    assert sorted(_changes(t.changes(4).to_arrow())) == [("delete", 4, 3), ("insert", 4, 1)]


# -- refusals -------------------------------------------------------------------------


def test_a_delete_without_change_files_refuses_every_range_holding_it(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.append(_rows([1, 2]))
    t.delete("id = 1")
    t.append(_rows([3]))
    for start, end in [(0, None), (2, 2), (1, 3)]:
        with pytest.raises(lakelog.ChangeFeedError) as e:
            t.changes(start, end)
        assert e.value.version == 2
        text = str(e.value)
        assert "commit 2" in text and "DELETE" in text
        assert f"{FEED}=true" in text and "set_properties" in text
    assert _changes(t.changes(3).to_arrow()) == [("insert", 3, 3)]
    assert _changes(t.changes(1, 1).to_arrow()) == [("insert", 1, 1), ("insert", 1, 2)]


def test_an_overwrite_with_where_without_change_files_is_refused(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.append(_rows([1, 2]))
    t.overwrite(_rows([1]), where="id = 1")
    with pytest.raises(lakelog.ChangeFeedError, match=r"commit 2 .*OVERWRITE"):
        t.changes(1)


def test_an_expired_start_names_the_oldest_version_and_the_first_start(tmp_path: Path) -> None:
    t = _table(tmp_path)
    for i in range(6):
        t.append(_rows([i]))
    t.expire_snapshots(older_than=ZERO, retain_last=2)
    oldest = t.refresh().snapshot().oldest_version
    assert oldest > 0
    for start in (0, oldest):
        with pytest.raises(lakelog.VersionExpiredError) as e:
            t.changes(start)
        assert e.value.oldest_version == oldest
        text = str(e.value)
        assert f"oldest readable version of {t.uri} is {oldest}" in text
        assert f"at or after version {oldest + 1}" in text
    got = _changes(t.changes(oldest + 1).to_arrow())
    assert [v for _, v, _ in got] == list(range(oldest + 1, 7))


def test_bad_ranges(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.append(_rows([1]))
    for bad in (-1, "1", 1.5, True):
        with pytest.raises(lakelog.InvalidArgumentError, match="expected start to be a version"):
            t.changes(bad)  # type: ignore[arg-type]
    with pytest.raises(lakelog.InvalidArgumentError, match="expected end to be a version"):
        t.changes(0, "x")  # type: ignore[arg-type]
    with pytest.raises(lakelog.VersionNotFoundError, match="at most 2"):
        t.changes(3)
    with pytest.raises(lakelog.VersionNotFoundError, match="at most 1"):
        t.changes(0, 2)
    t.append(_rows([2]))
    with pytest.raises(lakelog.InvalidArgumentError, match="end >= start - 1"):
        t.changes(2, 0)
    assert t.changes(3).to_arrow().num_rows == 0  # nothing new since the latest
    assert t.changes(1, 0).to_arrow().num_rows == 0
    with pytest.raises(lakelog.InvalidArgumentError, match="unknown"):
        t.changes(0, columns=["nope"])
    with pytest.raises(lakelog.InvalidArgumentError):
        t.changes(0, filter="nope = 1")
    with pytest.raises(lakelog.InvalidArgumentError, match="batch_size"):
        t.changes(0).to_batches(0)


def test_a_column_named_like_a_change_column_is_refused(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), pa.schema([("_change_type", pa.string())]))
    with pytest.raises(lakelog.InvalidArgumentError, match="_change_type"):
        t.changes(0)


# -- by time --------------------------------------------------------------------------


def test_start_and_end_by_time(tmp_path: Path) -> None:
    t = _table(tmp_path)
    for i in range(4):
        t.append(_rows([i]))
        time.sleep(0.005)
    ts = {h.version: h.timestamp_ms for h in t.history()}

    def at(ms: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)

    def versions(start: Any, end: Any = None) -> list[int]:
        return sorted({v for _, v, _ in _changes(t.changes(start, end).to_arrow())})

    assert versions(at(ts[2])) == [2, 3, 4]  # committed exactly then: included
    assert versions(at(ts[2] + 1)) == [3, 4]  # the first committed after
    assert versions(at(ts[1]), at(ts[3])) == [1, 2, 3]
    assert versions(at(ts[1]), at(ts[3] - 1)) == [1, 2]
    assert versions(at(ts[0] - 60_000)) == [1, 2, 3, 4]  # before the first commit: from 0
    assert versions(at(ts[4] + 60_000)) == []  # after the latest: nothing yet
    naive = at(ts[3]).replace(tzinfo=None)  # naive means UTC
    assert versions(naive) == [3, 4]
    assert versions(1, at(ts[2])) == [1, 2]


def test_a_start_time_before_the_oldest_readable_version_is_expired(tmp_path: Path) -> None:
    t = _table(tmp_path)
    for i in range(5):
        t.append(_rows([i]))
    first = t.history()[-1].timestamp_ms
    t.expire_snapshots(older_than=ZERO, retain_last=2)
    when = dt.datetime.fromtimestamp(first / 1000, tz=dt.timezone.utc)
    with pytest.raises(lakelog.VersionExpiredError, match="oldest readable version"):
        t.changes(when)


# -- columns, filters, batches --------------------------------------------------------


def test_columns_and_filter(tmp_path: Path) -> None:
    t = _table(tmp_path, partitioned=True)
    t.append(_rows([1, 2, 3]))
    t.append(_rows([4, 5], g="b"))
    t.overwrite(_rows([6]), partitions=[{"g": "a"}])
    feed = t.changes(1, columns=["v"], filter="id >= 2 and g = 'a'")
    assert feed.schema.names == ["v", "_change_type", "_commit_version", "_commit_timestamp"]
    got = feed.to_arrow().to_pylist()
    assert sorted((r["_change_type"], r["_commit_version"], r["v"]) for r in got) == [
        ("delete", 3, 20),
        ("delete", 3, 30),
        ("insert", 1, 20),
        ("insert", 1, 30),
        ("insert", 3, 60),
    ]
    assert t.changes(1, filter=[("g", "=", "b")]).to_arrow().column("id").to_pylist() == [4, 5]
    assert t.changes(1, filter="v > 1000").to_arrow().num_rows == 0


def test_a_filter_skips_files_by_their_statistics(tmp_path: Path) -> None:
    t = _table(tmp_path)
    for i in range(5):
        t.append(_rows([10 * i, 10 * i + 1]))
    feed = t.changes(1, filter="id = 21")
    assert feed.to_arrow().column("id").to_pylist() == [21]
    assert len(list(feed.parts())) == 1  # the other appends' files are never read


def test_batches_are_bounded(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.append(_rows(list(range(25))))
    t.append(_rows(list(range(25, 30))))
    batches = list(t.changes(1).to_batches(batch_size=10))
    assert all(b.num_rows <= 10 for b in batches)
    assert sum(b.num_rows for b in batches) == 30
    feed = t.changes(1)
    assert feed.to_arrow().equals(feed.to_arrow())  # read again: the same rows


def test_many_commits_are_read_again_when_they_do_not_fit_the_cache(tmp_path: Path) -> None:
    from lakelog.scan.feed import open_feed

    t = _table(tmp_path)
    for i in range(3):
        t.append(_rows([i]))
    cached = t.changes(1).to_arrow()
    assert open_feed(t.storage, 1, cache_bytes=1).to_arrow().equals(cached)


# -- schema changes inside the range ------------------------------------------------------


def test_rows_before_a_schema_change_read_in_the_latest_schema(tmp_path: Path) -> None:
    t = lakelog.create_table(
        str(tmp_path / "t"), pa.schema([("id", pa.int32()), ("x", pa.string())])
    )
    t.append(pa.table({"id": pa.array([1], pa.int32()), "x": ["gone"]}))
    t.drop_columns("x")
    t.widen_column("id", pa.int64())
    t.append(pa.table({"id": [2]}))
    t.overwrite(pa.table({"id": [3]}))
    t.add_columns({"x": pa.int64()})  # the name back, another type: old values do not show
    t.append(pa.table({"id": [4], "x": [7]}))
    t.overwrite(pa.table({"id": [5], "x": [8]}))
    feed = t.changes(1)
    assert feed.schema.field("id").type == pa.int64()
    assert feed.schema.field("x").type == pa.int64()
    got = [
        (r["_change_type"], r["_commit_version"], r["id"], r["x"])
        for r in feed.to_arrow().to_pylist()
    ]
    assert got[:2] == [("insert", 1, 1, None), ("insert", 4, 2, None)]
    assert sorted(got[2:5]) == [
        ("delete", 5, 1, None),
        ("delete", 5, 2, None),
        ("insert", 5, 3, None),
    ]
    assert got[5] == ("insert", 7, 4, 7)
    assert sorted(got[6:]) == [("delete", 8, 3, None), ("delete", 8, 4, 7), ("insert", 8, 5, 8)]


# -- row-level changes recorded in change files (the table property on) --------------------


def _state(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter((r["id"], r["g"], r["v"]) for r in rows)


@pytest.mark.parametrize("vectors", [False, True], ids=["copy-on-write", "deletion-vectors"])
@pytest.mark.parametrize("partitioned", [False, True])
def test_deletes_updates_and_merges_with_the_property_on(
    tmp_path: Path, vectors: bool, partitioned: bool
) -> None:
    props = {FEED: "true", "lakelog.deletion_vectors": str(vectors).lower()}
    t = _table(tmp_path, partitioned=partitioned, properties=props)
    t.append(_rows([1, 2, 3]))
    t.append(_rows([4, 5], g="b"))
    t.delete("id = 2")
    _require_change_files(t)
    t.update("id >= 4", set={"v": 0})
    t.merge(_rows([1, 9], g="a"), on="id", when_not_matched_by_source="delete")
    t.overwrite(_rows([20], g="b"), where="g = 'b'")
    got = t.changes(3).to_arrow().to_pylist()
    by_version: dict[int, list[tuple[str, int, int]]] = {}
    for r in got:
        by_version.setdefault(r["_commit_version"], []).append((r["_change_type"], r["id"], r["v"]))
    assert by_version[3] == [("delete", 2, 20)]
    assert sorted(by_version[4]) == [
        ("update_postimage", 4, 0),
        ("update_postimage", 5, 0),
        ("update_preimage", 4, 40),
        ("update_preimage", 5, 50),
    ]
    assert sorted(by_version[5]) == [
        ("delete", 3, 30),
        ("delete", 4, 0),
        ("delete", 5, 0),
        ("insert", 9, 90),
        ("update_postimage", 1, 10),
        ("update_preimage", 1, 10),
    ]
    assert sorted(by_version[6]) == [("insert", 20, 200)]
    # the feed turns version 2 into the latest, commit by commit
    state = _state(t.snapshot(2).to_arrow().to_pylist())
    for v in sorted({r["_commit_version"] for r in got}):
        rows = [r for r in got if r["_commit_version"] == v]
        for r in rows:
            if r["_change_type"] in ("delete", "update_preimage"):
                assert state[(r["id"], r["g"], r["v"])] > 0, r
                state[(r["id"], r["g"], r["v"])] -= 1
        for r in rows:
            if r["_change_type"] in ("insert", "update_postimage"):
                state[(r["id"], r["g"], r["v"])] += 1
    assert +state == _state(t.snapshot().to_arrow().to_pylist())


def test_the_feed_is_complete_from_the_commit_after_the_property_is_set(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.append(_rows([1, 2]))
    t.delete("id = 1")
    t.set_properties({FEED: "true"})
    on = t.version
    t.delete("id = 2")
    _require_change_files(t)
    with pytest.raises(lakelog.ChangeFeedError):
        t.changes(1)
    assert t.changes(on, on).to_arrow().num_rows == 0  # the metadata commit: no rows
    assert _changes(t.changes(on + 1).to_arrow()) == [("delete", on + 1, 2)]
