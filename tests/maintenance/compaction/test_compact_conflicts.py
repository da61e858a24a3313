"""Plan / rewrite / commit as separate steps: abandoned groups, conflicts, failures, saved plans."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import Backend
from test_compact import batch, listing, make_table, rows_of

import lakelog
from lakelog import CommitConflictError, CorruptLogError, Table
from lakelog.errors import DataFileMissingError
from lakelog.maintenance.commit import commit_rewrite
from lakelog.maintenance.compaction.planner import CompactionPlan, plan_compaction
from lakelog.maintenance.compaction.rewrite import RewriteOptions, rewrite_group
from lakelog.maintenance.compaction.run import execute_plan
from lakelog.maintenance.groups import GroupResult


def run_all(t: Table, plan: CompactionPlan) -> list[GroupResult]:
    opts = RewriteOptions.from_compaction(plan.options)
    return [
        rewrite_group(t.storage, plan.arrow_schema(), plan.partition_by, g, opts)
        for g in plan.groups
    ]


def data_files_on_disk(t: Table) -> set[str]:
    return {p for p in listing(t.storage) if p.endswith(".parquet") and not p.startswith("_")}


def assert_log_files_exist(t: Table) -> None:
    snap = t.refresh().snapshot()
    missing = [f.path for f in snap.files() if not t.storage.exists(f.path)]
    assert not missing


def test_group_whose_source_was_removed_is_abandoned(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=5)
    before = rows_of(t)
    plan = plan_compaction(t.snapshot())
    results = run_all(t, plan)
    # a concurrent overwrite of partition "a" removes that group's sources
    a_rows = t.snapshot().to_arrow(filter=[("kind", "=", "a")])
    t.overwrite(a_rows, partitions=[{"kind": "a"}])
    a_group = next(g for g in plan.groups if g.partition == {"kind": "a"})
    a_outputs = [p.path for r in results if r.group_id == a_group.group_id for p in r.added]
    result, abandoned = commit_rewrite(t, plan, results)
    assert result is not None and abandoned == [a_group.group_id]
    assert not any(t.storage.exists(p) for p in a_outputs)  # its outputs are deleted
    assert rows_of(t) == before
    per_kind = Counter(f.partition["kind"] for f in t.snapshot().files())
    assert per_kind == {"a": 1, "b": 1, None: 1}
    header = t.history(1)[0]
    assert header.metrics["num_groups"] == 2 and header.metrics["num_removed_files"] == 10
    assert_log_files_exist(t)


def test_every_group_abandoned_commits_nothing(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=4)
    plan = plan_compaction(t.snapshot())
    results = run_all(t, plan)
    other = t.compact()  # a second compaction of the same files wins
    assert other.version is not None
    outputs = [a.path for r in results for a in r.added]
    before = rows_of(t)
    result, abandoned = commit_rewrite(t, plan, results)
    assert result is None and sorted(abandoned) == sorted(g.group_id for g in plan.groups)
    assert not any(t.storage.exists(p) for p in outputs)
    assert t.refresh().version == other.version and rows_of(t) == before


def test_rebases_over_appends(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=4)
    plan = plan_compaction(t.snapshot())
    results = run_all(t, plan)
    appender = lakelog.open_table(t.uri)
    for i in range(3):
        appender.append(batch(10_000 + i * 10, 10))
    before = rows_of(appender.refresh())
    result, abandoned = commit_rewrite(t, plan, results)
    assert result is not None and abandoned == [] and result.version == plan.read_version + 4
    assert result.attempts >= 2
    assert rows_of(t) == before


def test_concurrent_metadata_change_raises_and_cleans_up(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=4)
    plan = plan_compaction(t.snapshot())
    results = run_all(t, plan)
    lakelog.open_table(t.uri).set_properties({"owner": "someone"})
    version = t.refresh().version
    with pytest.raises(CommitConflictError, match="metadata"):
        commit_rewrite(t, plan, results)
    assert not any(t.storage.exists(a.path) for r in results for a in r.added)
    assert t.refresh().version == version


def test_unknown_group_result_is_refused(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=3)
    plan = plan_compaction(t.snapshot())
    (r, *_) = run_all(t, plan)
    fake = GroupResult(group_id="g-other", added=r.added, bytes_read=0, bytes_written=0, num_rows=0)
    with pytest.raises(lakelog.InvalidArgumentError, match="does not have"):
        commit_rewrite(t, plan, [fake])
    with pytest.raises(lakelog.InvalidArgumentError, match="twice"):
        commit_rewrite(t, plan, [r, r])
    assert commit_rewrite(t, plan, []) == (None, [])


def test_failing_group_leaves_no_outputs_and_no_commit(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=5)
    version = t.version
    snap = t.snapshot()
    # damage one source behind the log's back: its group's read fails
    victim = next(f for f in snap.files() if f.partition == {"kind": "b"})
    os.remove(t.storage.full(victim.path))
    on_disk = data_files_on_disk(t)
    with pytest.raises(DataFileMissingError, match="deleted outside lakelog") as e:
        t.compact(max_concurrent_groups=2)
    assert e.value.path == victim.path  # a lakelog error naming the file, not a raw OSError
    assert data_files_on_disk(t) == on_disk  # every output deleted, nothing else touched
    # only the run's claim landed, and the run ended it on its error (as a Spark run
    # does): no plan is left pending, no data file changed
    assert t.refresh().version == version + 2
    assert [h.operation for h in t.history(limit=2)] == ["RELEASE", "CLAIM"]
    assert t.snapshot().num_files == snap.num_files
    assert t.plans() == []


def test_row_count_mismatch_is_caught(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=3, partition_by=())
    plan = plan_compaction(t.snapshot())
    (group,) = plan.groups
    opts = RewriteOptions.from_compaction(plan.options)
    # a source that does not match the log: one row short (same schema, same path)
    victim = group.files[0]
    short = pa.parquet.read_table(t.storage.open_input(victim.path)).slice(1)
    with t.storage.open_output(victim.path) as out:
        pa.parquet.write_table(short, out)
    on_disk = data_files_on_disk(t)
    with pytest.raises(CorruptLogError, match="rows"):
        rewrite_group(t.storage, plan.arrow_schema(), (), group, opts)
    assert data_files_on_disk(t) == on_disk


def test_saved_plan_executes_later_and_skips_stale_groups(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=4)
    plan = CompactionPlan.from_json(plan_compaction(t.snapshot()).to_json())
    # meanwhile: an append (harmless) and a compaction of partition "b" (makes b's group stale)
    t.append(batch(50_000, 30))
    t.compact(partition_filter=[("kind", "=", "b")])
    before = rows_of(t)
    on_disk = data_files_on_disk(t)
    report = execute_plan(lakelog.open_table(t.uri), plan)
    b_group = next(g.group_id for g in plan.groups if g.partition == {"kind": "b"})
    assert report.abandoned_groups == [b_group] and report.version is not None
    assert report.compacted_file_count == 8
    assert rows_of(t) == before
    written = data_files_on_disk(t) - on_disk
    assert len(written) == 2  # nothing was written for the stale group
    assert_log_files_exist(t)


def test_plan_for_another_table_is_refused(local_backend: Backend, tmp_path: Path) -> None:
    t = make_table(local_backend, appends=3)
    other = make_table(Backend("local", str(tmp_path / "other")), appends=3)
    plan = plan_compaction(other.snapshot())
    with pytest.raises(lakelog.InvalidArgumentError, match="plan made for table"):
        execute_plan(t, plan)
