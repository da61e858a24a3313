"""Auto-compaction after data commits (``lakelog.auto_compact``), in one process: the
bound a stream of micro-batches keeps, what the write's result says when the run
compacts, loses a race or fails, async mode, clustering, and what never triggers it."""

from __future__ import annotations

import logging
import sys
import threading
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from _races import race_at
from conftest import Backend

import lakelog
from lakelog import threads, transaction
from lakelog.errors import InvalidArgumentError
from lakelog.log.commits import list_log, read_commit
from lakelog.maintenance import auto
from lakelog.maintenance.auto import AUTO_OPERATIONS, run_auto_compaction, size_tier
from lakelog.transaction import CommitResult

SCHEMA = pa.schema([("p", pa.int64()), ("id", pa.int64()), ("v", pa.float64())])


def _table(where: Path | str, *, min_files: int = 4, **props: str) -> lakelog.Table:
    return lakelog.create_table(
        str(where if isinstance(where, str) else where / "t"),
        SCHEMA,
        partition_by=["p"],
        properties={
            "lakelog.auto_compact": "true",
            "lakelog.auto_compact.min_files": str(min_files),
            **props,
        },
    )


def _batch(seq: int, parts: list[int], rows: int = 5) -> pa.Table:
    ps = [p for p in parts for _ in range(rows)]
    ids = [seq * 1000 + i for i in range(len(ps))]
    return pa.table({"p": ps, "id": ids, "v": [float(seq)] * len(ps)}, schema=SCHEMA)


def _ids(t: lakelog.Table) -> Counter[int]:
    return Counter(t.refresh().snapshot().to_arrow(columns=["id"]).column("id").to_pylist())


def _tiers(t: lakelog.Table, fanout: int) -> Counter[tuple[str | None, int]]:
    """Small files per (partition, size tier) of the latest version."""
    snap = t.refresh().snapshot()
    small = int(snap.properties.get("lakelog.target_file_size", 128 << 20)) * 3 // 4
    return Counter(
        (f.partition["p"], size_tier(f.size_bytes, small, fanout))
        for f in snap.files()
        if f.size_bytes < small
    )


def test_a_stream_of_200_micro_batches_keeps_the_file_count_bounded(
    memory_backend: Backend,
) -> None:
    # 200 commits of 2 partitions each into 20 partitions: 400 files without maintenance.
    # The bound: after each commit (inline mode) every size tier of a partition holds
    # fewer than min_files small files, so a partition keeps at most
    # (min_files - 1) x (tiers between a batch and the target) of them; here batches of
    # about 1 KiB reach 3 tiers at most in 20 batches a partition: <= 20 x 3 x 3 files.
    fanout = 4
    t = _table(memory_backend.uri, min_files=fanout)
    expected: Counter[int] = Counter()
    statuses: Counter[str] = Counter()
    for seq in range(200):
        parts = [seq % 20, (seq * 7 + 3) % 20]
        data = _batch(seq, parts)
        result = t.append(data)
        expected.update(data.column("id").to_pylist())
        auto = result.auto_compaction
        assert auto is not None and auto.trigger_version == result.version
        assert auto.status in ("compacted", "below_threshold"), auto
        statuses[auto.status] += 1
        tiers = _tiers(t, fanout)
        assert max(tiers.values(), default=0) < fanout, tiers
    files = t.snapshot().num_files
    assert files <= 20 * (fanout - 1) * 3
    assert files < 400 // 4  # far below the 400 of no maintenance
    assert statuses["compacted"] >= 40
    assert _ids(t) == expected  # no row lost, none doubled
    history = t.history()
    ops = Counter(h.operation for h in history)
    assert ops["APPEND"] == 200  # every acknowledged commit is in the log, once
    autos = [h for h in history if h.operation == "AUTO COMPACT"]
    assert len(autos) >= statuses["compacted"]  # a run may carry into the next tier
    for h in autos:  # each names the data commit that started it, never another rewrite
        trigger = read_commit(t.storage, h.parameters["trigger_version"]).header
        assert trigger.operation == "APPEND"
        assert h.parameters["auto"] is True and h.parameters["mode"] == "inline"


def test_off_by_default_and_never_for_commits_without_new_data_files(tmp_path: Path) -> None:
    plain = lakelog.create_table(str(tmp_path / "plain"), SCHEMA, partition_by=["p"])
    assert plain.append(_batch(0, [1])).auto_compaction is None
    t = _table(tmp_path, min_files=2, **{"lakelog.deletion_vectors": "true"})
    for seq in range(3):
        t.append(_batch(seq, [1]))
    # a property change, a delete that only marks rows: no new data file, no run
    assert t.set_properties({"user.note": "x"}).auto_compaction is None
    marked = t.delete("id = 1")
    assert marked.committed and marked.files_marked == 1
    assert marked.auto_compaction is None
    # its own rewrite commits do not start another one (no recursion)
    rewrites = [h for h in t.history() if h.operation in AUTO_OPERATIONS]
    assert rewrites
    commit = read_commit(t.storage, rewrites[0].version)
    as_result = CommitResult(
        version=commit.header.version,
        attempts=1,
        operation=commit.header.operation,
        actions=tuple(commit.actions),
    )
    assert run_auto_compaction(t, as_result) is None


def test_a_lost_race_is_reported_and_the_write_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _table(tmp_path, min_files=3)
    t.append(_batch(0, [1]))
    t.append(_batch(1, [1]))
    other = lakelog.open_table(t.uri)

    def rival() -> None:
        # while the auto-compaction holds its claim, a delete rewrites one of its sources
        assert other.delete("id = 1000").committed

    result = race_at(
        monkeypatch, "rewrite:claimed", tmp_path / "gate", lambda: t.append(_batch(2, [1])), rival
    )
    auto = result.auto_compaction
    assert auto is not None and auto.status == "lost", auto
    assert auto.abandoned_groups == 1 and auto.version is None and auto.error
    assert read_commit(t.storage, result.version).header.operation == "APPEND"
    ids = _ids(t)
    assert 1000 not in ids and len(ids) == 14 and max(ids.values()) == 1
    assert not t.plans() or all(not p.running for p in t.plans())


def test_a_failing_auto_compaction_leaves_the_write_ok(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t = _table(tmp_path, min_files=3)
    t.append(_batch(0, [1]))
    t.append(_batch(1, [1]))
    lost = t.snapshot().files()[0].path
    t.storage.delete([lost])  # damage: a live file is gone, so its rewrite fails
    with caplog.at_level(logging.WARNING, logger="lakelog"):
        result = t.append(_batch(2, [1]))
    auto = result.auto_compaction
    assert auto is not None and auto.status == "failed", auto
    assert auto.error is not None and lost in auto.error
    assert "auto-compaction after version" in caplog.text
    # the write landed and is acknowledged: its commit, its files
    commit = read_commit(t.storage, result.version)
    assert commit.header.operation == "APPEND"
    live = set(t.refresh().snapshot().paths())
    assert {a.path for a in result.actions if hasattr(a, "data_change")} <= live
    assert all(not p.running for p in t.plans())  # its claim ended with its lease


def test_async_mode_reports_through_the_result(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t = _table(tmp_path, min_files=3, **{"lakelog.auto_compact.mode": "async"})
    results = [t.append(_batch(seq, [1, 2])) for seq in range(3)]
    outcomes = [r.auto_compaction for r in results]
    assert all(o is not None and o.mode == "async" for o in outcomes)
    done = [o.wait(60) for o in outcomes if o is not None]
    assert all(d.status != "running" for d in done)
    # a run may cover several commits (those that landed while the one before ran)
    assert any(d.status == "compacted" for d in done), done
    assert [d.trigger_version for d in done] == [r.version for r in results]
    assert t.refresh().snapshot().num_files == 2
    assert len(_ids(t)) == 30
    # an async run that fails says so through wait() and in the log; the run after it
    # does not plan the failed group again at once (its files wait out a backoff)
    lost = next(f for f in t.snapshot().files() if f.partition["p"] == "1").path
    t.append(_batch(3, [1]))
    fourth = t.append(_batch(4, [1]))
    t.storage.delete([lost])
    with caplog.at_level(logging.WARNING, logger="lakelog"):
        result = t.append(_batch(5, [1]))
        ends = [r.auto_compaction.wait(60) for r in (fourth, result) if r.auto_compaction]
    # the run fails and says so (both commits may wait on the same run: it then reports
    # to both); whether a later run had started before it recorded the failure depends
    # on timing: the backoff itself is tested inline below
    failed = [e for e in ends if e.status == "failed"]
    assert failed and lost in (failed[0].error or ""), ends
    assert failed[0].failed_groups == 1
    assert "auto-compaction after version" in caplog.text
    assert read_commit(t.storage, result.version).header.operation == "APPEND"


def test_a_declared_clustering_is_kept_incrementally(tmp_path: Path) -> None:
    t = lakelog.create_table(
        str(tmp_path / "c"),
        SCHEMA,
        partition_by=["p"],
        cluster_by=["id"],
        cluster_curve="linear",
        properties={"lakelog.auto_compact": "true", "lakelog.auto_compact.min_files": "3"},
    )
    expected: Counter[int] = Counter()
    outcomes = []
    for seq in range(6):
        data = _batch(seq, [1], rows=50)
        expected.update(data.column("id").to_pylist())
        outcomes.append(t.append(data).auto_compaction)
    assert any(o is not None and o.status == "compacted" for o in outcomes), outcomes
    ops = [h.operation for h in t.history()]
    assert "AUTO OPTIMIZE" in ops and "AUTO COMPACT" not in ops
    assert _ids(t) == expected


def test_properties_are_validated() -> None:
    with pytest.raises(InvalidArgumentError, match=r"lakelog\.auto_compact\.mode"):
        lakelog.properties.validate_properties({"lakelog.auto_compact.mode": "later"})
    with pytest.raises(InvalidArgumentError, match=r"lakelog\.auto_compact\.min_files"):
        lakelog.properties.validate_properties({"lakelog.auto_compact.min_files": "1"})


def test_null_partition_values_and_column_ids(tmp_path: Path) -> None:
    t = lakelog.create_table(
        str(tmp_path / "n"),
        pa.schema([("day", pa.string()), ("x", pa.int64())]),
        partition_by=["day"],
        properties={
            "lakelog.auto_compact": "true",
            "lakelog.auto_compact.min_files": "3",
            "lakelog.column_mapping": "true",
        },
    )
    t.rename_column("x", "y")
    for i in range(3):
        result = t.append(pa.table({"day": [None, "a"], "y": [i, i]}))
    auto = result.auto_compaction
    assert auto is not None and auto.status == "compacted" and auto.files_removed == 6, auto
    snap = t.refresh().snapshot()
    assert snap.num_files == 2 and snap.num_rows == 6
    assert sorted(snap.to_arrow().column("y").to_pylist()) == [0, 0, 1, 1, 2, 2]


def test_async_runs_draw_from_the_one_thread_budget(tmp_path: Path) -> None:
    # with the budget spent, an async run runs in the writer's thread: done on return
    t = _table(tmp_path, min_files=2, **{"lakelog.auto_compact.mode": "async"})
    first = t.append(_batch(0, [1])).auto_compaction
    assert first is not None
    first.wait(60)  # its background run is over: the next one starts afresh
    with threads.limited(0):
        result = t.append(_batch(1, [1]))
        auto = result.auto_compaction
        assert auto is not None and auto.status == "running"
        done = auto.wait(0)
        assert done.status == "compacted", done  # no thread: finished already
    seen: list[str] = []
    future = threads.spawn("lakelog-test", lambda: seen.append(threading.current_thread().name))
    future.result(10)
    assert seen and seen[0].startswith("lakelog-test")


def _damaged(where: Path, parts: list[int], **props: str) -> tuple[lakelog.Table, str]:
    """A table (min_files 3) with two commits into ``parts``, then the first file of
    partition 1 deleted from storage behind the log's back: its rewrite fails."""
    t = _table(where, min_files=3, **props)
    t.append(_batch(0, parts))
    t.append(_batch(1, parts))
    lost = next(f for f in t.snapshot().files() if f.partition["p"] == "1").path
    t.storage.delete([lost])
    return t, lost


def test_a_failing_group_is_not_planned_again_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t, lost = _damaged(tmp_path / "a", [1])
    first = t.append(_batch(2, [1])).auto_compaction
    assert first is not None and first.status == "failed" and first.failed_groups == 1
    assert lost in (first.error or "")
    # the next commits to the partition leave the failed group's files alone for the
    # backoff: only the new files are candidates, below the threshold
    for seq in (3, 4):
        after = t.append(_batch(seq, [1])).auto_compaction
        assert after is not None and after.status == "below_threshold", after
    # without a backoff the same group is planned (and fails) on every commit
    monkeypatch.setattr(auto, "BACKOFF_S", 0.0)
    u, _ = _damaged(tmp_path / "b", [1])
    for seq in (2, 3):
        again = u.append(_batch(seq, [1])).auto_compaction
        assert again is not None and again.status == "failed", again


def test_a_failure_beside_landed_work_reports_both(tmp_path: Path) -> None:
    # one commit into partitions 1 (damaged) and 2: partition 2's group lands, 1's fails
    t, lost = _damaged(tmp_path, [1, 2])
    result = t.append(_batch(2, [1, 2]))
    auto_ = result.auto_compaction
    assert auto_ is not None and auto_.status == "compacted", auto_
    assert auto_.failed_groups == 1 and lost in (auto_.error or "")
    assert auto_.versions == (auto_.version,) and auto_.files_removed == 3
    landed = read_commit(t.storage, auto_.versions[0]).header
    assert landed.operation == "AUTO COMPACT"
    snap = t.refresh().snapshot()
    assert len([f for f in snap.files() if f.partition["p"] == "2"]) == 1
    assert t.plans() == []  # the failed group's claim was released, not left to expire


def test_an_embedded_failure_releases_its_claim(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["p"])
    for seq in range(3):
        t.append(_batch(seq, [1]))
    lost = t.snapshot().files()[0].path
    t.storage.delete([lost])
    with pytest.raises(Exception, match=lost.rsplit("/", 1)[-1]):
        t.compact()
    # the run's claim is ended by a RELEASE commit at once (as a Spark run does), not
    # left pending until its lease expires
    assert t.refresh().plans() == []
    ops = [h.operation for h in t.history()]
    assert ops[:2] == ["RELEASE", "CLAIM"], ops


@pytest.mark.parametrize("rival", ["compact", "append"])
def test_a_commit_that_loses_to_a_rewrite_rebases_without_backing_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rival: str
) -> None:
    # an ingest beside an auto-compaction loses races to its claim and rewrite commits;
    # those change no data, so the ingest rebases and puts again at once. Against
    # another data writer it still backs off.
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["p"])
    for seq in range(3):
        t.append(_batch(seq, [1]))
    other = lakelog.open_table(t.uri)
    slept: list[float] = []
    real_sleep = transaction.time.sleep

    def spy(seconds: float) -> None:  # records the commit's pauses, still sleeps
        if sys._getframe(1).f_code.co_name == "backoff":  # the commit's backoff
            slept.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(transaction.time, "sleep", spy)

    def win() -> None:
        if rival == "compact":
            assert other.compact().version is not None
        else:
            other.append(_batch(9, [2]))

    result = race_at(
        monkeypatch, "commit:before-put:APPEND", tmp_path / "gate",
        lambda: t.append(_batch(3, [1])), win,
    )  # fmt: skip
    assert result.attempts == 2
    assert (slept == []) is (rival == "compact"), slept
    assert len(_ids(t)) == 20 + (5 if rival == "append" else 0)


def test_an_async_run_that_compacts_leaves_a_manifest_at_its_rewrite(tmp_path: Path) -> None:
    t = _table(tmp_path, min_files=3, **{"lakelog.auto_compact.mode": "async"})
    ends = [t.append(_batch(seq, [1])).auto_compaction for seq in range(3)]
    done = [e.wait(60) for e in ends if e is not None]
    (compacted,) = [d for d in done if d.status == "compacted"]
    assert compacted.version in list_log(t.storage).manifests


def test_async_runs_on_a_thread_where_no_worker_process_can_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    t = _table(tmp_path, min_files=2, **{"lakelog.auto_compact.mode": "async"})
    with caplog.at_level(logging.WARNING, logger="lakelog"):
        ends = [t.append(_batch(seq, [1])).auto_compaction for seq in range(2)]
        done = [e.wait(60) for e in ends if e is not None]
    # one of the two runs compacts: the first if it starts after the second append landed
    assert [d.status for d in done].count("compacted") == 1, done
    assert "runs on a thread" in caplog.text
    assert t.refresh().snapshot().num_files == 1


def test_a_failed_group_waits_out_a_backoff(tmp_path: Path) -> None:
    # inline runs: the run after a failure leaves the failed group's files alone
    t = _table(tmp_path, min_files=3)
    t.append(_batch(0, [1]))
    t.append(_batch(1, [1]))
    lost = next(f for f in t.snapshot().files() if f.partition["p"] == "1").path
    t.storage.delete([lost])
    first = t.append(_batch(2, [1])).auto_compaction  # 3 files: a group, one missing
    assert first is not None and first.status == "failed", first
    assert first.failed_groups == 1 and lost in (first.error or "")
    after = t.append(_batch(3, [1])).auto_compaction  # the 3 wait: 1 file is left
    assert after is not None and after.status == "below_threshold", after
    assert t.snapshot().num_files == 4  # every acknowledged batch stays, nothing rewritten
