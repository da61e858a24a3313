"""Time travel across 100+ versions, by version and by instant, with and without manifests."""

from __future__ import annotations

import datetime as dt
import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
from lakelog import InvalidArgumentError, VersionNotFoundError
from lakelog.io.writer import write_files
from lakelog.log.commits import list_log
from lakelog.log.manifests import LAST_MANIFEST, manifest_path
from lakelog.log.snapshot import load_snapshot
from lakelog.transaction import Transaction

SCHEMA = pa.schema([("v", pa.int64()), ("k", pa.string())])
N = 120  # appends after the create: versions 0..120


def _rows(version: int) -> pa.Table:
    return pa.table({"v": [version, version], "k": ["a", None]}, schema=SCHEMA)


@pytest.fixture(scope="module")
def history_table(tmp_path_factory: pytest.TempPathFactory) -> lakelog.Table:
    """Version v (v >= 1) appended rows [v, v]; every 5th append replaced partition a."""
    uri = str(tmp_path_factory.mktemp("tt") / "t")
    t = lakelog.create_table(uri, SCHEMA, partition_by=["k"])
    for v in range(1, N + 1):
        if v % 5 == 0:
            t.overwrite(pa.table({"v": [v], "k": ["a"]}, schema=SCHEMA), partitions=[{"k": "a"}])
        else:
            t.append(_rows(v))
    assert t.version == N
    return t


def _expected(version: int) -> list[int]:
    """The sorted v values live at ``version``."""
    live_a: list[int] = []
    live_null: list[int] = []
    for v in range(1, version + 1):
        if v % 5 == 0:
            live_a = [v]
        else:
            live_a.append(v)
            live_null.append(v)
    return sorted(live_a + live_null)


def _check_every_version(t: lakelog.Table) -> None:
    for v in range(N + 1):
        snap = t.snapshot(v)
        assert snap.version == v
        got = sorted(snap.to_arrow().column("v").to_pylist())
        assert got == _expected(v), v
        assert snap.num_rows == len(got)


def test_every_version_through_manifests(history_table: lakelog.Table) -> None:
    listing = list_log(history_table.storage)
    assert listing.commits == tuple(range(N + 1))
    assert listing.manifests == tuple(range(0, N + 1, 10))  # default interval 10
    _check_every_version(history_table)
    latest = lakelog.open_table(history_table.uri).snapshot()
    assert latest.version == N
    assert sorted(latest.to_arrow().column("v").to_pylist()) == _expected(N)


def test_every_version_by_replay_alone(history_table: lakelog.Table, tmp_path: Path) -> None:
    """The same answers from a copy of the log without any manifest or hint."""
    src = Path(history_table.storage.root)
    dst = tmp_path / "copy"
    for dirpath, _, names in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for n in names:
            if n.endswith(".manifest.parquet") or n == "_last_manifest":
                continue
            os.link(Path(dirpath) / n, dst / rel / n)
    t = lakelog.open_table(str(dst))
    assert list_log(t.storage).manifests == ()
    assert not (dst / LAST_MANIFEST).exists()
    _check_every_version(t)


def test_table_without_manifests_until_interval(tmp_path: Path) -> None:
    t = lakelog.create_table(
        str(tmp_path / "t"), SCHEMA, properties={"lakelog.manifest_interval": 1000}
    )
    for v in range(1, 31):
        t.append(_rows(v))
    assert list_log(t.storage).manifests == (0,)
    for v in (0, 1, 15, 30):
        assert t.snapshot(v).num_rows == 2 * v
    # a manifest appears once the interval is lowered, and old versions stay right
    t.set_properties({"lakelog.manifest_interval": 4})  # version 31
    t.append(_rows(32))  # version 32: due
    assert (tmp_path / "t" / manifest_path(32)).exists()
    for v in (0, 17, 30, 32):
        assert t.snapshot(v).num_rows == 2 * min(v, 30) + (2 if v == 32 else 0)


def test_as_of_timestamps(history_table: lakelog.Table) -> None:
    t = history_table
    headers = sorted(t.history(), key=lambda h: h.version)
    ts = [h.timestamp_ms for h in headers]
    assert all(a < b for a, b in itertools.pairwise(ts))

    def at(ms: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)

    for v in [*list(range(0, N + 1, 7)), N]:
        assert t.snapshot(as_of=at(ts[v])).version == v
        if v > 0 and ts[v] - 1 >= ts[v - 1]:
            assert t.snapshot(as_of=at(ts[v] - 1)).version == v - 1
        snap = t.snapshot(as_of=at(ts[v]))
        assert snap.timestamp == at(ts[v])
    # naive datetimes are UTC
    naive = at(ts[50]).replace(tzinfo=None)
    assert t.snapshot(as_of=naive).version == 50
    assert t.snapshot(as_of=at(ts[-1] + 3_600_000)).version == N
    with pytest.raises(VersionNotFoundError, match="oldest"):
        t.snapshot(as_of=at(ts[0] - 1))
    with pytest.raises(InvalidArgumentError):
        t.snapshot(5, as_of=at(ts[5]))
    with pytest.raises(InvalidArgumentError):
        t.snapshot(as_of=ts[5])  # type: ignore[arg-type]


def test_versions_out_of_range(history_table: lakelog.Table) -> None:
    with pytest.raises(VersionNotFoundError, match=f"between 0 and {N}"):
        history_table.snapshot(N + 1)
    with pytest.raises(VersionNotFoundError):
        history_table.snapshot(-1)


def _fake_clock(values: list[float]) -> Callable[[], float]:
    """A wall clock that follows ``values``, then stays at the last."""
    it = iter(values)
    last = [values[-1]]

    def fake_time() -> float:
        try:
            last[0] = next(it)
        except StopIteration:
            pass
        return last[0]

    return fake_time


def _append(t: lakelog.Table, rows: pa.Table, clock: Callable[[], float]) -> None:
    """Append ``rows`` on the latest version in a commit whose timestamp comes from ``clock``."""
    adds = write_files(
        t.storage,
        rows.to_batches(),
        schema=SCHEMA,
        partition_by=t.partition_by,
        options=t.write_options(),
    )
    snap = load_snapshot(t.storage)
    Transaction(
        t.storage, snap, operation="APPEND", kind="append", actions=adds, clock=clock
    ).commit()
    t.refresh()


def test_timestamps_increase_when_the_clock_goes_backwards(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    now = t.snapshot().timestamp_ms / 1000
    # the clock jumps back an hour, stands still, then crawls back further
    clock = _fake_clock([now - 3600, now - 3600, now - 3600, now - 7200, now - 7200.5])
    for v in range(1, 8):
        _append(t, _rows(v), clock)
    # a second writer with its own (also wrong) view of the table
    other = lakelog.open_table(t.uri)
    _append(other, _rows(8), clock)
    headers = sorted(t.history(), key=lambda h: h.version)
    ts = [h.timestamp_ms for h in headers]
    assert [h.version for h in headers] == list(range(9))
    assert all(a < b for a, b in itertools.pairwise(ts)), ts
    # time travel by instant still finds each version
    for v, ms in enumerate(ts):
        assert t.snapshot(as_of=dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)).version == v


def test_timestamps_increase_across_writers_with_skewed_clocks(tmp_path: Path) -> None:
    """A writer whose clock is far ahead commits, then one on a correct clock."""
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    real_now = t.snapshot().timestamp_ms / 1000
    _append(t, _rows(1), _fake_clock([real_now + 86_400]))
    stale: Any = lakelog.open_table(t.uri)
    t.append(_rows(2))  # lands at version 2; `stale` still believes version 1 is latest
    stale.append(_rows(3))  # loses the race for version 2, rebases to 3
    ts = [h.timestamp_ms for h in sorted(t.history(), key=lambda h: h.version)]
    assert all(a < b for a, b in itertools.pairwise(ts)), ts
    assert t.snapshot().num_rows == 6


def test_commits_between_reads_a_range_and_names_a_hole(local_backend: Any) -> None:
    """The one reader of a range of commits: bounded, to the end, and a hole in a
    bounded range is a LogGapError naming the next commit that exists."""
    from lakelog.errors import LogGapError
    from lakelog.log.commits import commit_path, commits_between

    t = lakelog.create_table(local_backend.uri, pa.schema([("id", pa.int64())]))
    for i in range(5):
        t.append(pa.table({"id": [i]}))
    assert [c.header.version for c in commits_between(t.storage, 2, 4)] == [2, 3, 4]
    assert [c.header.version for c in commits_between(t.storage, 3)] == [3, 4, 5]
    assert list(commits_between(t.storage, 4, 3)) == []
    assert list(commits_between(t.storage, 6)) == []  # past the end: nothing yet
    t.storage.delete([commit_path(3)])
    with pytest.raises(LogGapError) as e:
        list(commits_between(t.storage, 1, 5))
    assert (e.value.missing, e.value.found) == (3, 4)
    with pytest.raises(LogGapError):
        list(commits_between(t.storage, 2))  # to the end: a hole is not the end
