"""``optimize`` runs on compaction's pipeline: progress, pacing, partial progress,
partition filters, dry runs and saved plans, and a report that says "clustered"."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lakelog
from lakelog.cli import main
from lakelog.errors import InvalidArgumentError
from lakelog.maintenance.clustering.planner import ClusterPlan
from lakelog.maintenance.clustering.run import (
    execute_cluster_plan,
    optimize_table,
    prepare_clustering,
)
from lakelog.maintenance.compaction.planner import CompactionPlan, plan_compaction
from lakelog.maintenance.executor import Progress
from lakelog.maintenance.options import ClusteringOptions

KINDS = ("x", "y", "z")


def _table(uri: str, properties: dict[str, str] | None = None) -> lakelog.Table:
    """Three partitions of four small files each: one clustering group per partition."""
    rng = np.random.default_rng(7)
    t = lakelog.create_table(
        uri,
        pa.schema([("a", pa.int64()), ("b", pa.float64()), ("kind", pa.string())]),
        partition_by=["kind"],
        properties={"lakelog.target_file_size": str(200_000), **(properties or {})},
    )
    for _ in range(4):
        n = 1500
        t.append(
            pa.table(
                {
                    "a": rng.integers(0, 10_000, n),
                    "b": rng.random(n),
                    "kind": pa.array([KINDS[i % 3] for i in range(n)]),
                }
            )
        )
    return t


def _rows(t: lakelog.Table) -> list[tuple[int, float, str]]:
    d = t.refresh().snapshot().to_arrow().to_pydict()
    return sorted(zip(d["a"], d["b"], d["kind"], strict=True))


def _files_of(t: lakelog.Table, kind: str) -> set[str]:
    return {f.path for f in t.refresh().snapshot().files() if f.partition["kind"] == kind}


def test_progress_reaches_every_group_and_byte(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    seen: list[Progress] = []
    report = optimize_table(t, ClusteringOptions(zorder_by=["a", "b"]), progress=seen.append)
    assert report.version is not None and len(report.planned_groups) == 3
    last = seen[-1]
    assert last.groups_done == last.groups_total == 3
    assert last.bytes_done == last.bytes_total == report.rewritten_bytes
    assert [p.groups_done for p in seen] == sorted(p.groups_done for p in seen)


def test_pacing_slows_reads_to_the_rate(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    before = _rows(t)
    total = t.snapshot().total_bytes
    report = t.optimize(zorder_by=["a", "b"], max_bytes_per_second=total / 2)
    assert report.version is not None and _rows(t) == before
    assert report.paced_seconds >= 0.5  # beyond the bucket's one-second burst


def test_partial_progress_commits_per_k_groups(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"), {"lakelog.compaction.groups_per_commit": "2"})
    before = _rows(t)
    v0 = t.version
    report = t.optimize(zorder_by=["a", "b"], partial_progress=True, max_concurrent_groups=1)
    assert report.commits == [v0 + 2, v0 + 3] and report.version == v0 + 3  # v0 + 1: claim
    assert [h.metrics["num_groups"] for h in t.history(2)] == [1, 2]
    assert all(h.operation == "OPTIMIZE" for h in t.history(2))
    assert _rows(t) == before and report.summary().startswith("clustered 12 files")


def test_partition_filter_limits_the_work(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    untouched = {k: _files_of(t, k) for k in ("y", "z")}
    report = t.optimize(zorder_by=["a", "b"], partition_filter=[("kind", "=", "x")])
    assert len(report.planned_groups) == 1 and report.compacted_file_count == 4
    assert {k: _files_of(t, k) for k in ("y", "z")} == untouched
    assert t.history(1)[0].parameters["partition_filter"] == "[('kind', '=', 'x')]"
    with pytest.raises(InvalidArgumentError, match="partition"):
        t.optimize(zorder_by=["a", "b"], partition_filter=[("a", "=", 1)])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_concurrent_groups": 0},
        {"max_bytes_per_second": -1},
        {"partial_progress": "yes"},
        {"dry_run": 1},
    ],
)
def test_invalid_execution_options_fail_before_any_work(
    tmp_path: Path, kwargs: dict[str, object]
) -> None:
    t = _table(str(tmp_path / "t"))
    v = t.version
    with pytest.raises(InvalidArgumentError):
        t.optimize(zorder_by=["a", "b"], **kwargs)  # type: ignore[arg-type]
    assert t.refresh().version == v


def test_saved_plan_executes_later_and_skips_stale_groups(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    before = _rows(t)
    prep = prepare_clustering(t, ClusteringOptions(zorder_by=["a", "b"]))
    plan = ClusterPlan.from_json(prep.plan.to_json())
    assert plan == prep.plan
    # meanwhile: a compaction of partition y makes its group stale
    t.compact(partition_filter=[("kind", "=", "y")], target_file_size=10**9)
    report = execute_cluster_plan(lakelog.open_table(t.uri), plan)
    y_group = next(g.group_id for g in plan.groups if g.partition["kind"] == "y")
    assert report.abandoned_groups == [y_group]
    assert report.compacted_file_count == 8 and len(report.commits) == 1
    assert _rows(t) == before


def test_plans_are_refused_by_the_other_operation(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    compaction = plan_compaction(t.snapshot(), target_file_size=10**9).to_json()
    with pytest.raises(InvalidArgumentError, match="kind 'compact'"):
        ClusterPlan.from_json(compaction)
    prep = prepare_clustering(t, ClusteringOptions(sort_by=["a"]))
    with pytest.raises(InvalidArgumentError, match="kind 'optimize'"):
        CompactionPlan.from_json(prep.plan.to_json())


def test_cli_dry_run_plan_out_then_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri)
    before, v = _rows(t), t.version
    plan_file = tmp_path / "plan.json"
    args = ["optimize", uri, "--zorder-by", "a,b", "--partition", "kind=x", "--partition"]
    args += ["kind=z", "--dry-run", "-v", "--plan-out", str(plan_file)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("optimize plan at version") and "partition filter:" in out
    assert "dry run: would cluster 8 files in 2 groups" in out and ".parquet" in out
    assert t.refresh().version == v
    # planning options are fixed by the plan; execution options are not
    assert main(["optimize", uri, "--plan", str(plan_file), "--sort-by", "a"]) == 1
    assert "--sort-by" in capsys.readouterr().err
    assert main(["optimize", uri, "--plan", str(plan_file), "--partial-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("clustered 8 files") and "commits [" in out
    assert "version None" not in out
    assert _rows(t) == before and _files_of(t, "y") and t.refresh().version > v


def test_cli_json_report_of_a_no_op(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    _table(uri)
    assert main(["optimize", uri, "--sort-by", "a", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["commits"] and first["operation"] == "optimize"
    assert main(["optimize", uri, "--sort-by", "a"]) == 0
    assert capsys.readouterr().out.startswith("nothing to optimize")
