"""A rewrite never lands unless every source is live with exactly the vector it read.

Compaction and clustering read their sources with the deletion vectors their plan
recorded (``docs/format.md``, "Deletion vectors"). Two paths used to swap the plan's
read snapshot for a later one without checking those vectors, so rows deleted (or the
old images of updated rows) after the plan was made came back:

* a plan saved with ``lakelog compact --dry-run --plan-out`` and run later, after its
  read version was expired: the executor fell back to the latest snapshot;
* a run's CLAIM commit whose base was expired while it waited to put: the transaction
  restarted on the latest version without looking at the winners it could no longer
  read, and the claim's version became the rewrite's read snapshot.

With copy-on-write the second path crashed ``compact()`` on a source an expiry had
deleted. Each case runs with vectors on and off and checks the rows of the latest
version against what the deletes left.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from _processes import spawn, wait_paused

import lakelog
from lakelog.cli import main as cli_run

SCHEMA = pa.schema([("key", pa.int64()), ("v", pa.int64())])
ZERO = dt.timedelta(0)


def _batch(keys: range) -> pa.Table:
    return pa.table({"key": list(keys), "v": [k * 10 for k in keys]}, schema=SCHEMA)


def _table(path: Path, *, vectors: bool) -> lakelog.Table:
    props = {"lakelog.deletion_vectors": "true"} if vectors else {}
    t = lakelog.create_table(str(path), SCHEMA, properties=props)
    for i in range(3):
        t.append(_batch(range(i * 10, i * 10 + 10)))
    return t


def _keys(t: lakelog.Table) -> list[int]:
    return sorted(t.refresh().snapshot().to_arrow(columns=["key"]).column("key").to_pylist())


def _expected(deleted: set[int], extra: range) -> list[int]:
    return sorted([k for k in range(30) if k not in deleted] + list(extra))


@pytest.mark.parametrize("vectors", [True, False], ids=["vectors", "copy-on-write"])
def test_saved_plan_after_expiry_keeps_deleted_rows_deleted(
    tmp_path: Path, vectors: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "t")
    t = _table(tmp_path / "t", vectors=vectors)
    plan = tmp_path / "plan.json"
    assert (
        cli_run(["compact", uri, "--dry-run", "--plan-out", str(plan), "--min-input-files", "2"])
        == 0
    )
    capsys.readouterr()
    t.refresh().delete("key = 1 or key = 2")
    t.refresh().append(_batch(range(100, 105)))
    t.refresh().expire_snapshots(older_than=ZERO, retain_last=1)
    assert cli_run(["compact", uri, "--plan", str(plan), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert _keys(t) == _expected({1, 2}, range(100, 105))
    # the group holding the changed file is abandoned, never rewritten with the old vector
    assert len(report["abandoned_groups"]) >= 1


@pytest.mark.parametrize("vectors", [True, False], ids=["vectors", "copy-on-write"])
def test_saved_plan_after_update_and_expiry_has_no_duplicate_keys(
    tmp_path: Path, vectors: bool
) -> None:
    uri = str(tmp_path / "t")
    t = _table(tmp_path / "t", vectors=vectors)
    plan = tmp_path / "plan.json"
    assert (
        cli_run(["compact", uri, "--dry-run", "--plan-out", str(plan), "--min-input-files", "2"])
        == 0
    )
    t.refresh().update("key = 5", set={"v": -1})
    t.refresh().append(_batch(range(100, 101)))  # the update's own commit is expired too
    t.refresh().expire_snapshots(older_than=ZERO, retain_last=1)
    assert cli_run(["compact", uri, "--plan", str(plan)]) == 0
    rows = t.refresh().snapshot().to_arrow().to_pylist()
    assert sorted(r["key"] for r in rows) == [*range(30), 100]
    assert [r["v"] for r in rows if r["key"] == 5] == [-1]


COMPACT = r"""
import json, sys
import lakelog
t = lakelog.open_table(sys.argv[1])
r = t.compact(min_input_files=2).to_dict()
print(json.dumps({"abandoned": r["abandoned_groups"], "version": r["version"]}))
"""


def _compact_paused_at(
    point: str, uri: str, gate: Path, meanwhile: Callable[[], object]
) -> dict[str, object]:
    """Run a compaction in another process paused at ``point``; run ``meanwhile`` in that
    window, let it go on, and return its report (it must exit cleanly, no traceback)."""
    proc = spawn(COMPACT, uri, LAKELOG_PAUSE_AT=f"{point}:{gate}")
    try:
        wait_paused(gate, proc)
        meanwhile()
        gate.touch()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    return json.loads(out.splitlines()[-1])  # type: ignore[no-any-return]


def _delete_append_expire(t: lakelog.Table) -> None:
    t.refresh().delete("key = 1 or key = 2")
    t.refresh().append(_batch(range(100, 105)))
    t.refresh().expire_snapshots(older_than=ZERO, retain_last=1)


@pytest.mark.processes
@pytest.mark.parametrize("vectors", [True, False], ids=["vectors", "copy-on-write"])
def test_claim_restarted_after_expiry_never_rewrites_changed_sources(
    tmp_path: Path, vectors: bool
) -> None:
    """The compaction pauses right before its CLAIM put; meanwhile a delete lands, an
    append lands and an expiry (``retain_last=1``) makes the claim's base unreadable, so
    the claim restarts on the latest version."""
    uri = str(tmp_path / "t")
    t = _table(tmp_path / "t", vectors=vectors)
    _compact_paused_at(
        "commit:before-put:CLAIM", uri, tmp_path / "gate", lambda: _delete_append_expire(t)
    )
    assert _keys(t) == _expected({1, 2}, range(100, 105))


@pytest.mark.processes
def test_claim_restart_scenario_rows_survive_a_second_compaction(tmp_path: Path) -> None:
    """After the restarted claim, a plain compaction of everything keeps the rows."""
    uri = str(tmp_path / "t")
    t = _table(tmp_path / "t", vectors=True)

    def meanwhile() -> None:
        t.refresh().delete("key = 3")
        t.refresh().expire_snapshots(older_than=ZERO, retain_last=1)

    _compact_paused_at("commit:before-put:CLAIM", uri, tmp_path / "gate", meanwhile)
    t.refresh().compact(min_input_files=2)
    assert _keys(t) == _expected({3}, range(0))


@pytest.mark.processes
@pytest.mark.parametrize("vectors", [True, False], ids=["vectors", "copy-on-write"])
def test_source_removed_and_deleted_after_the_claim_abandons_its_group(
    tmp_path: Path, vectors: bool
) -> None:
    """The compaction pauses after its claim landed; a delete removes a claimed source
    (copy-on-write) or marks rows in it (vectors), and an expiry deletes the replaced
    file. The run abandons the group instead of failing on the missing file or landing
    the old rows."""
    uri = str(tmp_path / "t")
    t = _table(tmp_path / "t", vectors=vectors)
    report = _compact_paused_at(
        "rewrite:claimed", uri, tmp_path / "gate", lambda: _delete_append_expire(t)
    )
    assert report["abandoned"]
    assert _keys(t) == _expected({1, 2}, range(100, 105))


@pytest.mark.processes
@pytest.mark.parametrize("vectors", [True, False], ids=["vectors", "copy-on-write"])
def test_resume_after_vector_change_and_expiry_keeps_deleted_rows_deleted(
    tmp_path: Path, vectors: bool
) -> None:
    """A compaction killed right after its claim; its sources change and the claim's
    version is expired: the plan stops being pending (a new vector removes the file), so
    ``resume`` refuses it, and the next compaction plans the files as they are."""
    uri = str(tmp_path / "t")
    t = _table(tmp_path / "t", vectors=vectors)
    proc = spawn(COMPACT, uri, LAKELOG_CRASH_AT="rewrite:claimed")
    proc.communicate(timeout=120)
    assert proc.returncode == -9
    (plan_id,) = t.refresh().snapshot().plans
    _delete_append_expire(t)
    # a new vector removes the file: the plan is no longer pending, never resumed
    with pytest.raises(lakelog.InvalidArgumentError, match="pending plan"):
        t.refresh().resume(plan_id)
    t.refresh().compact(min_input_files=2)
    assert _keys(t) == _expected({1, 2}, range(100, 105))
