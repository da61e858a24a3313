"""Plans on the log: maintenance runs claim their files, so concurrent runs pick disjoint ones.

Real OS processes (``sys.executable -c``) race on one table; ``rewrite:claimed``
pauses a run right after its claim landed (or kills it there), and
``rewrite:committed`` kills a run after its first batch landed
(:mod:`lakelog._failpoints`). See ``docs/format.md``, "Maintenance plans and claims".
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lakelog
from lakelog.log.actions import (
    ClaimGroup,
    Commit,
    CommitHeader,
    Metadata,
    PlanClaim,
    PlanRelease,
    RemoveFile,
)
from lakelog.log.commits import read_commit
from lakelog.log.plans import PendingPlan, apply_plan_actions

SCHEMA = pa.schema([("kind", pa.string()), ("a", pa.int64()), ("b", pa.float64())])

COMPACT_A = """
import json, sys, lakelog
r = lakelog.open_table(sys.argv[1]).compact(partition_filter=[("kind", "=", "a")])
print(json.dumps(r.to_dict()))
"""
OPTIMIZE = """
import json, sys, lakelog
r = lakelog.open_table(sys.argv[1]).optimize(zorder_by=["a", "b"])
print(json.dumps(r.to_dict()))
"""
COMPACT_PARTIAL = """
import json, sys, lakelog
r = lakelog.open_table(sys.argv[1]).compact(max_concurrent_groups=1, partial_progress=True)
print(json.dumps(r.to_dict()))
"""


def _table(uri: str, *, ttl: str = "600", files: int = 6, vectors: bool = True) -> lakelog.Table:
    """``vectors=False``: created without deletion vectors (on by default), as a table
    of a format version before them."""
    rng = np.random.default_rng(0)
    t = lakelog.create_table(
        uri,
        SCHEMA,
        partition_by=["kind"],
        properties={
            "lakelog.target_file_size": str(1 << 20),
            "lakelog.lease.ttl_seconds": ttl,
            "lakelog.compaction.groups_per_commit": "1",
            **({} if vectors else {"lakelog.deletion_vectors": "false"}),
        },
    )
    for i in range(files):
        kind = ["a", "b"][i % 2]
        t.append(
            pa.table(
                {"kind": [kind] * 500, "a": rng.integers(0, 10**6, 500), "b": rng.random(500)},
                schema=SCHEMA,
            )
        )
    return t


def _spawn(code: str, uri: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_")}
    return subprocess.Popen(
        [sys.executable, "-c", code, uri],
        env={**clean, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _report(p: subprocess.Popen[str]) -> dict[str, object]:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-3000:]
    report: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return report


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the process never reached its pause point"
        time.sleep(0.02)


def _rows(t: lakelog.Table) -> Counter[tuple[object, ...]]:
    tbl = t.refresh().snapshot().to_arrow()
    return Counter(zip(*(tbl.column(c).to_pylist() for c in SCHEMA.names), strict=True))


def _removed_by(t: lakelog.Table, operation: str) -> set[str]:
    out: set[str] = set()
    for v in range(t.refresh().version + 1):
        c = read_commit(t.storage, v)
        if c.header.operation == operation:
            out |= {a.path for a in c.actions if isinstance(a, RemoveFile)}
    return out


def _wait_stopped(t: lakelog.Table) -> None:
    deadline = time.monotonic() + 30
    while any(p.running for p in t.plans()):
        assert time.monotonic() < deadline, t.plans()
        time.sleep(0.1)


@pytest.mark.processes
def test_compaction_and_clustering_in_two_processes_pick_disjoint_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri)
    before = _rows(t)
    gate = tmp_path / "gate"
    compactor = _spawn(COMPACT_A, uri, {"LAKELOG_PAUSE_AT": f"rewrite:claimed:{gate}"})
    _wait_for(Path(f"{gate}.paused"), compactor)
    (pending,) = t.plans()
    assert pending.operation == "COMPACT" and pending.running
    # while the compaction holds its claim, optimize clusters the other partition only
    optimized = _report(_spawn(OPTIMIZE, uri))
    gate.touch()
    compacted = _report(compactor)
    for r in (compacted, optimized):
        assert r["version"] is not None and not r["abandoned_groups"], r
    assert _removed_by(t, "COMPACT") and _removed_by(t, "OPTIMIZE")
    assert _removed_by(t, "COMPACT").isdisjoint(_removed_by(t, "OPTIMIZE"))
    assert {p.split("/")[0] for p in _removed_by(t, "OPTIMIZE")} == {"kind=b"}
    assert _rows(t) == before
    assert t.plans() == []  # both released their claims


@pytest.mark.processes
def test_without_claims_the_same_race_costs_the_later_run_its_work(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri)
    t.set_properties({"lakelog.maintenance.claims": "false"})
    before = _rows(t)
    gate = tmp_path / "gate"
    compactor = _spawn(
        COMPACT_A.replace("compact(", "compact(max_concurrent_groups=1, "),
        uri,
        {"LAKELOG_PAUSE_AT": f"rewrite:before-commit:{gate}"},
    )
    _wait_for(Path(f"{gate}.paused"), compactor)
    optimized = _report(_spawn(OPTIMIZE, uri))  # takes kind=a's files too, and lands first
    gate.touch()
    compacted = _report(compactor)
    assert optimized["version"] is not None
    assert compacted["version"] is None and compacted["abandoned_groups"]
    assert _rows(t) == before
    assert t.history(limit=1)[0].operation != "CLAIM"


@pytest.mark.processes
def test_a_killed_runs_files_are_eligible_again(tmp_path: Path) -> None:
    """Killed on this host: its claim ends with the process (the owner is dead)."""
    uri = str(tmp_path / "t")
    t = _table(uri)
    before = _rows(t)
    killed = _spawn(COMPACT_A, uri, {"LAKELOG_CRASH_AT": "rewrite:claimed"})
    killed.communicate(timeout=120)
    assert killed.returncode == -9
    (plan,) = t.plans()
    assert not plan.running
    claimed = t.snapshot().plans[plan.plan_id].paths()
    report = t.compact(partition_filter=[("kind", "=", "a")])
    assert report.version is not None and not report.abandoned_groups
    assert _removed_by(t, "COMPACT") == claimed
    assert t.plans() == []  # the new claim took the stopped plan's group over
    assert _rows(t) == before


@pytest.mark.processes
def test_a_stalled_runs_claims_expire_with_its_lease(tmp_path: Path) -> None:
    """Alive but stalled (no heartbeat): its files are claimed until the lease expires,
    then another run takes them over; the stalled run's commit then abandons the group."""
    uri = str(tmp_path / "t")
    t = _table(uri, ttl="1")
    before = _rows(t)
    gate = tmp_path / "gate"
    stalled = _spawn(
        COMPACT_A,
        uri,
        {"LAKELOG_PAUSE_AT": f"rewrite:claimed:{gate}", "LAKELOG_TEST_NO_LEASE_HEARTBEAT": "1"},
    )
    try:
        _wait_for(Path(f"{gate}.paused"), stalled)
        (plan,) = t.plans()
        claimed = t.snapshot().plans[plan.plan_id].paths()
        if plan.running:  # until the lease's TTL passes, its files are not eligible
            assert t.compact(partition_filter=[("kind", "=", "a")]).version is None
        _wait_stopped(t)
        report = t.compact(partition_filter=[("kind", "=", "a")])
        assert report.version is not None and not report.abandoned_groups
        assert _removed_by(t, "COMPACT") == claimed
        assert t.plans() == []  # the new claim took the stalled plan's group over
        assert _rows(t) == before
    finally:
        stalled.kill()
        stalled.communicate(timeout=60)


@pytest.mark.processes
def test_resume_after_a_kill_lands_only_the_remaining_groups(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri, ttl="1", files=12)
    before = _rows(t)
    killed = _spawn(COMPACT_PARTIAL, uri, {"LAKELOG_CRASH_AT": "rewrite:committed"})
    killed.communicate(timeout=120)
    assert killed.returncode == -9
    landed = [
        read_commit(t.storage, v)
        for v in range(t.refresh().version + 1)
        if read_commit(t.storage, v).header.operation == "COMPACT"
    ]
    assert len(landed) == 1  # one group landed before the kill
    (plan,) = t.plans()
    assert plan.groups == 1
    _wait_stopped(t)
    out = subprocess.run(
        [sys.executable, "-m", "lakelog.cli", "resume", uri, plan.plan_id, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_")},
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["version"] is not None and not report["abandoned_groups"]
    assert len(report["planned_groups"]) == 1 and report["compacted_file_count"] == 6
    assert t.plans() == []
    compacts = [
        c
        for c in (read_commit(t.storage, v) for v in range(t.refresh().version + 1))
        if c.header.operation == "COMPACT"
    ]
    removed = [a.path for c in compacts for a in c.actions if isinstance(a, RemoveFile)]
    assert len(removed) == len(set(removed)) == 12  # every file rewritten exactly once
    assert _rows(t) == before
    assert t.snapshot().num_files == 2


@pytest.mark.processes
def test_resume_refuses_unknown_and_running_plans(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri)
    with pytest.raises(lakelog.InvalidArgumentError, match="pending plan"):
        t.resume("0" * 32)
    gate = tmp_path / "gate"
    compactor = _spawn(COMPACT_A, uri, {"LAKELOG_PAUSE_AT": f"rewrite:claimed:{gate}"})
    try:
        _wait_for(Path(f"{gate}.paused"), compactor)
        (plan,) = t.plans()
        with pytest.raises(lakelog.InvalidArgumentError, match="live lease"):
            t.resume(plan.plan_id)
        out = subprocess.run(
            [sys.executable, "-m", "lakelog.cli", "plans", uri],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert plan.plan_id in out.stdout and "running" in out.stdout
        out = subprocess.run(
            [sys.executable, "-m", "lakelog.cli", "resume", uri, "nope"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 1
        assert out.stderr.startswith("lakelog: error: expected the id of a pending plan")
        assert "Traceback" not in out.stderr
    finally:
        gate.touch()
        _report(compactor)


@pytest.mark.processes
def test_appends_and_a_row_level_change_beside_a_claim(tmp_path: Path) -> None:
    """An append never conflicts with a claim; a delete of a claimed file wins and the
    claiming group is abandoned at its commit."""
    uri = str(tmp_path / "t")
    t = _table(uri)
    gate = tmp_path / "gate"
    compactor = _spawn(COMPACT_A, uri, {"LAKELOG_PAUSE_AT": f"rewrite:before-commit:{gate}"})
    try:
        _wait_for(Path(f"{gate}.paused"), compactor)
        t.append(pa.table({"kind": ["a"], "a": [-1], "b": [0.5]}, schema=SCHEMA))
        t.delete("kind = 'a' and a >= 0")  # rewrites every claimed file
    finally:
        gate.touch()
    report = _report(compactor)
    assert report["version"] is None and report["abandoned_groups"]
    assert t.plans() == []
    assert -1 in t.refresh().snapshot().to_arrow().column("a").to_pylist()


def test_older_tables_take_no_claims_until_upgraded(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri, vectors=False)  # version 2 had no vectors: a table of it has none
    md = t.snapshot().metadata
    t.commit(
        [Metadata(**{**_fields(md), "format_version": 2})],
        operation="TEST DOWNGRADE",
        kind="metadata",
    )
    t.compact()
    assert "CLAIM" not in {h.operation for h in t.history()}
    report = t.upgrade()
    assert report.declared_before == 2 and report.declared == 3
    t.append(pa.table({"kind": ["a"] * 3, "a": [1, 2, 3], "b": [0.0] * 3}, schema=SCHEMA))
    t.append(pa.table({"kind": ["a"] * 3, "a": [4, 5, 6], "b": [0.0] * 3}, schema=SCHEMA))
    t.compact()
    assert t.history(limit=2)[1].operation == "CLAIM"


def _fields(md: Metadata) -> dict[str, object]:
    return {f: getattr(md, f) for f in md.__struct_fields__}


# -- the state: Hypothesis ---------------------------------------------------------------

_PATHS = [f"p{i}" for i in range(8)]
_PLANS = ["plan-x", "plan-y", "plan-z"]


@st.composite
def _actions(draw: st.DrawFn) -> list[object]:
    kind = draw(st.sampled_from(["claim", "release", "done", "remove"]))
    pid = draw(st.sampled_from(_PLANS))
    if kind == "claim":
        paths = draw(st.lists(st.sampled_from(_PATHS), min_size=1, max_size=6, unique=True))
        cut = draw(st.integers(1, len(paths)))
        groups = [ClaimGroup(group_id=f"{pid}-g0", paths=paths[:cut])]
        if cut < len(paths):
            groups.append(ClaimGroup(group_id=f"{pid}-g1", paths=paths[cut:]))
        return [
            PlanClaim(
                plan_id=pid,
                operation="COMPACT",
                owner="o",
                lease_id="l",
                claimed_ms=0,
                groups=groups,
            )
        ]
    if kind in ("release", "done"):
        return [PlanRelease(plan_id=pid, group_ids=[f"{pid}-g0"], done=kind == "done")]
    return [RemoveFile(path=p, deletion_ms=0) for p in draw(st.lists(st.sampled_from(_PATHS)))]


def _commit(version: int, actions: list[object]) -> Commit:
    header = CommitHeader(version=version, timestamp_ms=version, operation="T", txn_id="t")
    return Commit(header, actions)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.lists(_actions(), max_size=25))
def test_pending_plans_never_share_a_path_and_copies_stay_apart(
    commits: list[list[object]],
) -> None:
    plans: dict[str, PendingPlan] = {}
    history: list[tuple[dict[str, PendingPlan], dict[str, dict[str, list[str]]]]] = []
    for v, actions in enumerate(commits):
        history.append((dict(plans), {k: dict(p.groups) for k, p in plans.items()}))
        apply_plan_actions(plans, _commit(v, actions))
        held = [p for plan in plans.values() for paths in plan.groups.values() for p in paths]
        assert len(held) == len(set(held))  # a path is under at most one pending group
        assert all(plan.groups for plan in plans.values())  # empty plans are gone
        removed = {a.path for a in actions if isinstance(a, RemoveFile)}
        assert removed.isdisjoint(held)  # a removed file is claimed by no one
    for copy, groups in history:  # earlier copies (snapshots) never changed
        assert {k: dict(p.groups) for k, p in copy.items()} == groups


@pytest.mark.processes
def test_pending_plans_survive_a_checkpoint(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri, ttl="1")
    killed = _spawn(COMPACT_A, uri, {"LAKELOG_CRASH_AT": "rewrite:claimed"})
    killed.communicate(timeout=120)
    (plan,) = t.plans()
    t.set_properties({"lakelog.manifest_interval": "1"})
    t.append(pa.table({"kind": ["b"], "a": [7], "b": [0.0]}, schema=SCHEMA))  # writes a manifest
    fresh = lakelog.open_table(uri)
    assert [p.plan_id for p in fresh.plans()] == [plan.plan_id]
    assert fresh.snapshot().plans == t.snapshot().plans


@pytest.mark.processes
def test_vacuum_deletes_the_plan_files_of_finished_plans_only(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri, ttl="1")
    killed = _spawn(COMPACT_A, uri, {"LAKELOG_CRASH_AT": "rewrite:claimed"})
    killed.communicate(timeout=120)
    (stopped,) = t.plans()
    done = t.compact(partition_filter=[("kind", "=", "b")])
    assert done.version is not None
    plan_dir = Path(uri, "_lakelog", "_plans")
    assert len(list(plan_dir.iterdir())) == 2
    time.sleep(2.1)  # past the grace of two lease TTLs
    report = t.vacuum(older_than=dt.timedelta(0), dry_run=False, force=True)
    assert len(report.finished_plans) == 1
    assert [p.name for p in plan_dir.iterdir()] == [f"{stopped.plan_id}.json"]  # still pending
    assert t.resume(stopped.plan_id).version is not None  # and so still resumable
    assert t.plans() == []


V2_COMMIT = "ff02a0f"  # the last commit of format version 2
REPO = str(Path(__file__).resolve().parents[2])

_V2_READER = """
import json, sys, lakelog
from lakelog.log.snapshot import load_snapshot
from lakelog.storage import Storage
assert lakelog.log.actions.FORMAT_VERSION == 2
try:
    snap = load_snapshot(Storage(sys.argv[1]))
    print(json.dumps({"rows": snap.num_rows}))
except lakelog.LakelogError as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)}))
"""


@pytest.mark.slow
def test_a_version_2_reader_refuses_a_table_with_claims_clearly(tmp_path: Path) -> None:
    out = tmp_path / "v2"
    out.mkdir()
    archive = out / "v2.tar"
    subprocess.run(
        ["git", "-C", REPO, "archive", "-o", str(archive), V2_COMMIT, "lakelog"], check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(out, filter="data")
    uri = str(tmp_path / "t")
    t = _table(uri, vectors=False)  # version 2 had no vectors: a table of it has none
    md = t.snapshot().metadata
    t.commit([Metadata(**{**_fields(md), "format_version": 2})], operation="T", kind="metadata")
    env = {**os.environ, "PYTHONPATH": str(out)}

    def read() -> dict[str, object]:
        proc = subprocess.run(
            [sys.executable, "-c", _V2_READER, uri],
            capture_output=True,
            text=True,
            env=env,
            cwd=out,  # not this checkout: "-c" puts the working directory first
        )
        assert proc.returncode == 0, proc.stderr
        got: dict[str, object] = json.loads(proc.stdout)
        return got

    assert read() == {"rows": t.snapshot().num_rows}  # a version-2 table: read as before
    t.upgrade()  # declares version 3: compaction now claims
    t.compact()
    refused = read()
    assert refused["error"] == "UnsupportedFormatError"
    assert "found 3" in str(refused["message"]) and "upgrade lakelog" in str(refused["message"])


@pytest.mark.processes
def test_two_runs_racing_to_claim_the_same_files_rewrite_them_once(tmp_path: Path) -> None:
    """Both plan the same files; each waits before putting its claim until both are
    there. One claim lands; the other rebases over it, drops every group, rewrites
    nothing and commits nothing."""
    uri = str(tmp_path / "t")
    t = _table(uri)
    before = _rows(t)
    gates = [tmp_path / "gate-1", tmp_path / "gate-2"]
    procs = [
        _spawn(COMPACT_A, uri, {"LAKELOG_PAUSE_AT": f"commit:before-put:CLAIM:{g}"}) for g in gates
    ]
    for g, p in zip(gates, procs, strict=True):
        _wait_for(Path(f"{g}.paused"), p)
    for g in gates:
        g.touch()
    reports = [_report(p) for p in procs]
    landed = [r for r in reports if r["version"] is not None]
    idle = [r for r in reports if r["version"] is None]
    assert len(landed) == len(idle) == 1
    assert len(idle[0]["abandoned_groups"]) == len(idle[0]["planned_groups"])
    assert idle[0]["commits"] == [] and idle[0]["written_bytes"] == 0  # it rewrote nothing
    ops = [h.operation for h in reversed(t.history())]
    assert ops.count("CLAIM") == 1 and ops.count("COMPACT") == 1
    assert _rows(t) == before and t.plans() == []
    on_disk = {f"kind=a/{p.name}" for p in Path(uri, "kind=a").iterdir()}
    live = {f.path for f in t.snapshot().files() if f.partition == {"kind": "a"}}
    assert on_disk == live | _removed_by(t, "COMPACT")  # no output of the idle run


OPTIMIZE_PARTIAL = """
import json, sys, lakelog
r = lakelog.open_table(sys.argv[1]).optimize(
    zorder_by=["a", "b"], max_concurrent_groups=1, partial_progress=True
)
print(json.dumps(r.to_dict()))
"""


@pytest.mark.processes
def test_resume_finishes_a_killed_clustering_run(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri, files=12)
    before = _rows(t)
    killed = _spawn(OPTIMIZE_PARTIAL, uri, {"LAKELOG_CRASH_AT": "rewrite:committed"})
    killed.communicate(timeout=120)
    assert killed.returncode == -9
    (plan,) = t.plans()
    assert plan.operation == "OPTIMIZE" and plan.groups == 1 and not plan.running
    report = t.resume(plan.plan_id)
    assert report.version is not None and not report.abandoned_groups
    assert report.extra["zorder_columns"] == ["a", "b"]
    assert t.plans() == [] and _rows(t) == before
    ops = [h.operation for h in reversed(t.history())]
    assert ops.count("OPTIMIZE") == 2 and ops.count("CLAIM") == 2  # the run's, the resume's
    assert all("lakelog.clustering.spec" in f.tags for f in t.snapshot().files())


@pytest.mark.processes
@pytest.mark.parametrize("run", ["compact", "optimize"])
def test_resume_after_the_plans_version_was_expired(tmp_path: Path, run: str) -> None:
    """A plan outlives the version it was made from: resume reads from the latest version
    (its remaining groups' files are the same files there) instead of failing."""
    uri = str(tmp_path / "t")
    t = _table(uri, ttl="1", files=12)
    before = _rows(t)
    code = COMPACT_PARTIAL if run == "compact" else OPTIMIZE_PARTIAL
    killed = _spawn(code, uri, {"LAKELOG_CRASH_AT": "rewrite:committed"})
    killed.communicate(timeout=120)
    assert killed.returncode == -9
    (plan,) = t.plans()
    _wait_stopped(t)
    extra = pa.table({"kind": ["b"] * 3, "a": [1, 2, 3], "b": [0.5, 1.5, 2.5]}, schema=SCHEMA)
    for _ in range(3):
        t.append(extra)
    t.refresh().expire_snapshots(older_than=dt.timedelta(0), retain_last=1)
    with pytest.raises(lakelog.VersionExpiredError):
        t.snapshot(plan.claim_version - 1)  # the version the plan was made from
    report = t.refresh().resume(plan.plan_id)
    assert report.version is not None and not report.abandoned_groups
    assert t.plans() == []
    ops = [h.operation for h in t.history()]
    assert ops.index(run.upper()) < ops.index("APPEND")  # the resume landed after expiry
    want = before + Counter({tuple(r.values()): 3 for r in extra.to_pylist()})
    assert _rows(t) == want
