"""A layout that is already optimal is left alone: no commit, a report that says so."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

import lakelog
from lakelog.cli import main


def _batch(day: dt.date, start: int, n: int = 50) -> pa.Table:
    return pa.table(
        {
            "day": pa.array([day] * n),
            "sensor": list(range(start + n, start, -1)),
            "value": [float(i % 7) for i in range(n)],
        }
    )


def _one_file_per_partition(uri: str, days: int = 1) -> lakelog.Table:
    data = pa.concat_tables(_batch(dt.date(2026, 11, 1 + d), 100 * d) for d in range(days))
    lakelog.write_table(uri, data, partition_by=["day"])
    return lakelog.open_table(uri)


def test_optimize_of_one_file_commits_nothing(tmp_path: Path) -> None:
    table = _one_file_per_partition(str(tmp_path / "t"))
    before = table.snapshot()
    for kwargs in ({"zorder_by": ["sensor", "value"]}, {"sort_by": ["sensor"]}):
        report = table.optimize(**kwargs)  # type: ignore[arg-type]
        assert table.refresh().version == before.version
        assert report.version is None and report.commits == []
        assert report.planned_groups == [] and report.output_file_count == 0
        assert report.summary().startswith("nothing to optimize"), report.summary()
        assert {f.path for f in table.snapshot().files()} == {f.path for f in before.files()}
    full = table.optimize(zorder_by=["sensor", "value"], incremental=False)
    assert full.version is None and table.refresh().version == before.version


def test_one_file_per_partition_is_optimal_but_a_large_file_is_split(tmp_path: Path) -> None:
    table = _one_file_per_partition(str(tmp_path / "t"), days=3)
    assert table.snapshot().num_files == 3
    assert table.optimize(zorder_by=["sensor", "value"]).version is None
    # a file far above the target is not optimal: clustering cuts it into files of the target
    size = max(f.size_bytes for f in table.snapshot().files())
    report = table.optimize(zorder_by=["sensor", "value"], target_file_size=max(1, size // 4))
    assert report.version == table.refresh().version == 2  # version 1: the run's claim
    assert report.after_file_count > 3


def test_optimize_again_after_clustering_is_a_noop(tmp_path: Path) -> None:
    table = _one_file_per_partition(str(tmp_path / "t"))
    table.append(_batch(dt.date(2026, 11, 1), 1000))
    first = table.optimize(zorder_by=["sensor", "value"])
    assert first.version == 3 and first.compacted_file_count == 2  # 2: the run's claim
    again = table.optimize(zorder_by=["sensor", "value"])
    assert again.version is None and table.refresh().version == 3
    assert again.summary().startswith("nothing to optimize")


def test_compact_of_one_file_says_nothing_to_do(tmp_path: Path) -> None:
    table = _one_file_per_partition(str(tmp_path / "t"))
    report = table.compact()
    assert report.version is None and table.refresh().version == 0
    assert report.summary().startswith("nothing to compact"), report.summary()


def test_cli_optimize_of_one_file_prints_nothing_to_optimize(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "t")
    _one_file_per_partition(uri)
    assert main(["optimize", uri, "--zorder-by", "sensor,value"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nothing to optimize"), out
    assert lakelog.open_table(uri).version == 0
