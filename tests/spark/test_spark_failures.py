"""Maintenance on Spark that cannot do its work says so instead of reporting success.

Against the session-wide ``local[2,3]`` SparkSession: executors whose Python
cannot import lakelog (or imports another version) are found by one small
check job before any work is shipped; a run in which every group failed raises
``MaintenanceFailedError``; and the report has the same keys whatever happened.

Executors without lakelog are real Python workers started with a
``sitecustomize`` that hides the package: Spark starts separate workers when a
job's executor environment (``sc.environment``, here ``PYTHONPATH``) changes,
so the shared session's other workers are untouched.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_spark_maintenance import _build, _data_files_on_disk, _rows

import lakelog
import lakelog.spark as lspark
from lakelog.errors import LakelogError, MaintenanceFailedError, SparkEnvironmentError
from lakelog.maintenance.compaction.planner import plan_compaction

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

HIDE_LAKELOG = """
import sys

class HideLakelog:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "lakelog" or name.startswith("lakelog."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, HideLakelog)
"""

OTHER_LAKELOG = """
import importlib.machinery, sys

class OtherLakelog:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "lakelog":
            return importlib.machinery.PathFinder.find_spec(name, [{shadow!r}])
        return None

sys.meta_path.insert(0, OtherLakelog)
"""


@contextlib.contextmanager
def executors_like(spark: Any, tmp_path: Path, case: str) -> Iterator[None]:
    """Start the executors' Python workers of the jobs run inside as ``case`` says: with a
    ``sitecustomize`` first on their path that hides lakelog (``missing``) or finds an old
    one first (``other-version``), or with an interpreter that does not exist
    (``no-python``, as a wrong ``PYSPARK_PYTHON``)."""
    sc = spark.sparkContext
    env, python = sc.environment, sc.pythonExec
    old = env.get("PYTHONPATH")
    site = tmp_path / "site"
    site.mkdir()
    if case == "missing":
        (site / "sitecustomize.py").write_text(HIDE_LAKELOG)
    elif case == "other-version":
        shadow = tmp_path / "other"
        (shadow / "lakelog").mkdir(parents=True)
        (shadow / "lakelog" / "__init__.py").write_text('__version__ = "0.0.1"\n')
        (site / "sitecustomize.py").write_text(OTHER_LAKELOG.format(shadow=str(shadow)))
    else:
        sc.pythonExec = str(tmp_path / "no-such-python")
    env["PYTHONPATH"] = os.pathsep.join([str(site), *([old] if old else [])])
    try:
        yield
    finally:
        sc.pythonExec = python
        if old is None:
            env.pop("PYTHONPATH", None)
        else:
            env["PYTHONPATH"] = old


@pytest.mark.parametrize("case", ["missing", "other-version", "no-python"])
def test_executors_without_lakelog_are_refused_before_any_work(
    spark: Any, tmp_path: Path, case: str
) -> None:
    uri = str(tmp_path / "t")
    _build(uri, 3)
    before, on_disk = _rows(uri), _data_files_on_disk(uri)
    version = lakelog.open_table(uri).version

    with executors_like(spark, tmp_path, case), pytest.raises(SparkEnvironmentError) as e:
        lspark.compact(spark, uri)

    message = str(e.value)
    assert isinstance(e.value, LakelogError)
    assert f"import lakelog {lakelog.__version__}" in message  # what was expected
    found = {
        "missing": "No module named 'lakelog'",
        "other-version": "lakelog 0.0.1",
        "no-python": "no-such-python",
    }
    assert found[case] in message
    assert "PYSPARK_PYTHON" in message and "spark.archives" in message  # what to do
    assert "venv-pack" in message
    assert lakelog.open_table(uri).version == version
    assert _rows(uri) == before and _data_files_on_disk(uri) == on_disk
    # the shared workers still import lakelog: the same table compacts afterwards
    assert lspark.compact(spark, uri).version == version + 2  # its claim, then the rewrite


def test_every_group_failing_raises(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = _build(uri, 3)
    plan = plan_compaction(table.snapshot())
    assert len(plan.groups) == 2
    for group in plan.groups:  # a source of every group deleted outside lakelog
        (Path(uri) / group.files[0].path).unlink()
    on_disk = _data_files_on_disk(uri)

    with pytest.raises(MaintenanceFailedError) as e:
        lspark.compact(spark, uri)

    report = e.value.report
    assert report.operation == "compact" and report.version is None and report.commits == []
    assert sorted(e.value.failed_groups) == sorted(g.group_id for g in plan.groups)
    assert sorted(report.abandoned_groups) == sorted(e.value.failed_groups)
    first_group, first_cause = next(iter(e.value.failed_groups.items()))
    message = str(e.value)
    assert "2 of them failed and none was committed" in message
    assert f"group {first_group}: {first_cause}" in message and first_cause
    assert "run again" in message and "PYSPARK_PYTHON" not in message
    # no data changed: the run claimed its groups and, as they all failed, released them
    after = lakelog.open_table(uri)
    assert after.version == table.version + 2 and after.plans() == []
    assert [h.operation for h in after.history(limit=2)] == ["RELEASE", "CLAIM"]
    assert after.snapshot().num_files == table.snapshot().num_files
    assert _data_files_on_disk(uri) == on_disk  # the failed tasks left nothing behind


def test_report_has_the_same_keys_whatever_happened(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _build(uri, 3)
    dry = lspark.compact(spark, uri, dry_run=True)
    done = lspark.compact(spark, uri)
    nothing = lspark.compact(spark, uri)
    assert done.version is not None and nothing.version is None and not nothing.planned_groups
    assert dry.to_dict().keys() == done.to_dict().keys() == nothing.to_dict().keys()
    for report in (dry, done, nothing):
        # what the scheduled script of docs/spark-maintenance.md reads
        assert report.failed_groups == {} and report.extra["failed_groups"] == {}
        assert "failed" not in report.summary()

    opts: dict[str, Any] = {"zorder_by": ["a", "x"], "target_file_size": 4_000}
    clustered = lspark.optimize(spark, uri, **opts)
    again = lspark.optimize(spark, uri, **opts)
    assert clustered.version is not None and again.version is None
    assert clustered.to_dict().keys() == again.to_dict().keys()
    assert again.failed_groups == {} and again.extra["task_runs"] == []
