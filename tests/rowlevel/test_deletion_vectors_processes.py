"""Row-level changes with deletion vectors (format version 5) racing in real OS processes.

Every table here sets ``lakelog.deletion_vectors=true``, so a delete or an update marks
rows in the vector of the file holding them (a ``remove`` and an ``add`` of the same path)
instead of rewriting it (docs/format.md, "Deletion vectors"). The interleavings are
forced with pause points (``lakelog._failpoints``): one process waits right before its
put (``commit:before-put:<OPERATION>``, or ``rewrite:before-commit`` for a compaction)
while the other commits. ``change:before-commit`` is a crash point only (no pause), so
the pauses sit at the commit's put, the next step.

* Two vector deletes of disjoint rows of one file: one lands, the other conflicts (rule
  2), and a retry lands the union of both vectors.
* A vector delete beside a compaction of the same file, both orders, of unmarked files
  and of files already carrying a vector: the later one loses (the compaction abandons
  its group, the delete raises CommitConflictError).
* A delete or update SIGKILLed before its commit: the table and its files stay as they
  were; a retry lands.
* A delete beside a live appender of matching rows: every matching row appended before
  the delete landed is gone at that version (rule 3), every other row is there once.
* An update racing a merge of overlapping keys: the later one conflicts; no key is lost
  or doubled, before and after the loser's retry.

Each test checks the rows of every version (``t.snapshot(v)``) against a model built
from what the processes reported, so a row that a landed commit deleted and that comes
back later (a resurrected row) or a row that goes missing fails it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _processes import spawn, wait_paused

import lakelog
from lakelog.log.actions import AddFile, RemoveFile
from lakelog.log.commits import read_commit

pytestmark = pytest.mark.processes

SCHEMA = pa.schema([("id", pa.int64()), ("grp", pa.int64()), ("v", pa.int64())])
VECTORS = {"lakelog.deletion_vectors": "true"}
PER_FILE = 100

Row = tuple[int, int, int]  # (id, grp, v)
Rows = list[Row]

# One change or compaction in a child process; what it reports goes to a JSON file. A
# CommitConflictError is an outcome to report; any other error fails the child (and the
# test, which asserts its exit code).
CHILD = r"""
import json, sys
import pyarrow as pa
import lakelog
uri, spec, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
t = lakelog.open_table(uri)
op = spec["op"]
try:
    if op == "compact":
        d = t.compact(**spec.get("kw", {})).to_dict()
        res = {"version": d["version"], "read_version": d["read_version"],
               "abandoned": d["abandoned_groups"], "planned": d["planned_groups"]}
    else:
        if op == "delete":
            r = t.delete(spec["where"])
        elif op == "update":
            r = t.update(spec["where"], set=spec["set"])
        elif op == "merge":
            r = t.merge(pa.Table.from_pylist(spec["rows"], schema=t.schema), on="id")
        else:
            raise ValueError(op)
        res = {"version": r.version if r.committed else None, "read_version": r.read_version,
               "attempts": r.attempts, "marked": r.files_marked, "removed": r.files_removed}
    res["ok"] = True
except lakelog.CommitConflictError as e:
    res = {"ok": False, "error": type(e).__name__, "message": str(e)}
with open(out, "w") as f:
    json.dump(res, f)
"""


_STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _reap_children() -> Iterator[None]:
    """Kill the children a failed test left running (one waiting at its pause point)."""
    yield
    while _STARTED:
        p = _STARTED.pop()
        if p.poll() is None:
            p.kill()
        p.communicate()


class Child:
    """One :data:`CHILD` process, optionally paused at ``point`` until :meth:`release`."""

    def __init__(self, t: lakelog.Table, tmp: Path, name: str, spec: dict[str, Any], **env: str):
        self.out = tmp / f"{name}.json"
        self.gate = tmp / f"{name}.gate"
        self.proc = spawn(CHILD, t.uri, json.dumps(spec), str(self.out), **env)
        _STARTED.append(self.proc)

    @classmethod
    def paused(
        cls, t: lakelog.Table, tmp: Path, name: str, spec: dict[str, Any], point: str
    ) -> Child:
        c = cls(t, tmp, name, spec, LAKELOG_PAUSE_AT=f"{point}:{tmp / f'{name}.gate'}")
        wait_paused(c.gate, c.proc)
        return c

    def release(self) -> None:
        self.gate.touch()

    def result(self, timeout: float = 60) -> dict[str, Any]:
        _, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err[-3000:]
        res: dict[str, Any] = json.loads(self.out.read_text())
        return res


def make_table(root: Path, files: int = 3) -> tuple[lakelog.Table, Rows, list[str]]:
    """``files`` appends of :data:`PER_FILE` rows (ids ``[i*100, (i+1)*100)``, grp
    ``id % 10``, v 0), one file each: the table, its rows and the file of each block."""
    t = lakelog.create_table(str(root), SCHEMA, properties=VECTORS)
    model: Rows = []
    paths: list[str] = []
    for i in range(files):
        block = [(k, k % 10, 0) for k in range(i * PER_FILE, (i + 1) * PER_FILE)]
        r = t.append(to_table(block))
        (add,) = [a for a in r.actions if isinstance(a, AddFile)]
        paths.append(add.path)
        model += block
    assert t.snapshot().metadata.format_version == 5
    return t, sorted(model), paths


def to_table(rows: Iterable[Row]) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "grp": g, "v": v} for i, g, v in rows], schema=SCHEMA)


def rows_at(t: lakelog.Table, version: int | None = None) -> Rows:
    snap = t.refresh().snapshot(version)
    return sorted((r["id"], r["grp"], r["v"]) for r in snap.to_arrow().to_pylist())


def deleting(pred: Callable[[Row], bool]) -> Callable[[Rows], Rows]:
    return lambda rows: [r for r in rows if not pred(r)]


def updating(pred: Callable[[Row], bool], v: int) -> Callable[[Rows], Rows]:
    return lambda rows: sorted((i, g, v) if pred((i, g, w)) else (i, g, w) for i, g, w in rows)


def merging(src: Rows) -> Callable[[Rows], Rows]:
    def apply(rows: Rows) -> Rows:
        new = {r[0]: r for r in src}
        return sorted([new.pop(r[0], r) for r in rows] + list(new.values()))

    return apply


ROWS_KEPT = {"CLAIM", "RELEASE", "COMPACT", "APPEND"}
"""Operations that change no row already in the table (an APPEND's own rows are
modelled by its event)."""


def check_versions(
    t: lakelog.Table,
    base: int,
    base_rows: Rows,
    events: dict[int, Callable[[Rows], Rows]],
) -> Rows:
    """Each version after ``base`` holds the rows of the one before with its event
    applied (a version without one must be an operation that keeps every row): no row a
    landed commit deleted comes back, none goes missing. Returns the latest rows."""
    latest = t.refresh().version
    assert all(v <= latest for v in events), (events, latest)
    rows = base_rows
    assert rows_at(t, base) == rows
    for v in range(base + 1, latest + 1):
        op = read_commit(t.storage, v).header.operation
        if v in events:
            rows = events[v](rows)
        else:
            assert op in ROWS_KEPT, (v, op)
        assert rows_at(t, v) == rows, (v, op)
        ids = [r[0] for r in rows]
        assert len(ids) == len(set(ids)), f"a key doubled at version {v}"
    return rows


def vector_adds(t: lakelog.Table, version: int) -> dict[str, int]:
    """The files of ``version`` re-added under the path it removes, with the rows their
    new vector deletes: the commit marked them rather than rewriting them."""
    actions = read_commit(t.storage, version).actions
    removed = {a.path for a in actions if isinstance(a, RemoveFile)}
    return {
        a.path: a.deleted.rows
        for a in actions
        if isinstance(a, AddFile) and a.path in removed and a.deleted is not None
    }


def data_files_on_disk(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_lakelog" not in p.parts}


def in_range(lo: int, hi: int) -> Callable[[Row], bool]:
    return lambda r: lo <= r[0] < hi


# -- 1. two vector deletes of one file -----------------------------------------------------


@pytest.mark.parametrize("interleave", ["one-waits", "both-released-at-once"])
def test_two_vector_deletes_of_one_file(tmp_path: Path, interleave: str) -> None:
    # Breaks if a vector change were not a remove of its file for the conflict rules (rule
    # 2): the loser would land its vector of the read version ({10..19}) over the winner's,
    # and rows 50..59 would come back, failing check_versions at the loser's version.
    t, initial, paths = make_table(tmp_path / "t")
    v0 = t.version
    first_file = {paths[0]}
    a_spec = {"op": "delete", "where": "id >= 10 and id < 20"}
    b_spec = {"op": "delete", "where": "id >= 50 and id < 60"}
    a = Child.paused(t, tmp_path, "a", a_spec, "commit:before-put:DELETE")
    if interleave == "one-waits":
        b = Child(t, tmp_path, "b", b_spec)
        rb = b.result()
        a.release()
        ra = a.result()
    else:  # both read version v0 and wait at their put; then both go at once
        b = Child.paused(t, tmp_path, "b", b_spec, "commit:before-put:DELETE")
        a.release()
        b.release()
        ra, rb = a.result(), b.result()
    results = {"a": ra, "b": rb}
    preds = {"a": in_range(10, 20), "b": in_range(50, 60)}
    specs = {"a": a_spec, "b": b_spec}
    landed = {k: r for k, r in results.items() if r["ok"]}
    assert landed, results
    assert all(r["read_version"] == v0 for r in landed.values())
    for r in results.values():
        assert r["ok"] or r["error"] == "CommitConflictError", r
    events = {r["version"]: deleting(preds[k]) for k, r in landed.items()}
    for r in landed.values():
        assert r["marked"] == 1 and r["removed"] == 0  # a vector, not a copy
        assert vector_adds(t, r["version"]).keys() == first_file
    if len(landed) == 2:  # lakelog rebased the second: its vector must hold both deletes
        second = max(landed.values(), key=lambda r: r["version"])
        assert list(vector_adds(t, second["version"]).values()) == [20]
    check_versions(t, v0, initial, events)
    # the loser runs again (re-reading the table) and lands on top of the winner's vector
    for k in results.keys() - landed.keys():
        r = t.refresh().delete(specs[k]["where"])
        assert r.committed and r.files_marked == 1
        assert list(vector_adds(t, r.version).values()) == [20]
        events[r.version] = deleting(preds[k])
    final = check_versions(t, v0, initial, events)
    assert final == [r for r in initial if not (10 <= r[0] < 20 or 50 <= r[0] < 60)]
    assert first_file <= data_files_on_disk(tmp_path / "t")


# -- 2. a vector delete beside a compaction of the same files -------------------------------


def test_compaction_paused_while_a_vector_delete_lands(tmp_path: Path) -> None:
    # Breaks if the compaction's commit ignored that the delete removed (re-added with a
    # vector) one of its sources: its output, read before the delete, would bring rows
    # 10..19 back (check_versions at the compaction's version), and the file it removes
    # would drop the delete's vector with it.
    t, initial, _ = make_table(tmp_path / "t")
    v0 = t.version
    comp = Child.paused(t, tmp_path, "compact", {"op": "compact"}, "rewrite:before-commit")
    v_claim = t.refresh().version  # the compaction's claim landed before its rewrite
    d = Child(t, tmp_path, "delete", {"op": "delete", "where": "id >= 10 and id < 20"})
    rd = d.result()
    assert rd["ok"] and rd["marked"] == 1 and rd["version"] > v_claim
    comp.release()
    rc = comp.result()
    # the compaction lost its only group (all of its sources were small): nothing landed
    assert rc["ok"] and rc["version"] is None, rc
    assert len(rc["abandoned"]) == len(rc["planned"]) == 1
    events = {rd["version"]: deleting(in_range(10, 20))}
    final = check_versions(t, v0, initial, events)
    assert final == [r for r in initial if not 10 <= r[0] < 20]
    assert "COMPACT" not in [h.operation for h in t.history()]
    live = {f.path for f in t.snapshot().files()}
    assert live <= data_files_on_disk(tmp_path / "t")


def test_vector_delete_paused_while_a_compaction_lands(tmp_path: Path) -> None:
    # Breaks if a change's conflict check let a compaction's removes (data_change=false)
    # pass: the delete would re-add the compacted source with its vector beside the
    # compaction's output, doubling every row of the table (check_versions).
    t, initial, _ = make_table(tmp_path / "t")
    v0 = t.version
    spec = {"op": "delete", "where": "id >= 10 and id < 20"}
    d = Child.paused(t, tmp_path, "delete", spec, "commit:before-put:DELETE")
    rc = Child(t, tmp_path, "compact", {"op": "compact"}).result()
    assert rc["ok"] and rc["version"] is not None and not rc["abandoned"], rc
    d.release()
    rd = d.result()
    assert not rd["ok"] and rd["error"] == "CommitConflictError", rd
    check_versions(t, v0, initial, {})  # the compaction moved rows; the delete left none
    # run again, the delete marks the compaction's output
    r = t.refresh().delete(spec["where"])
    assert r.committed and r.files_marked == 1 and r.version == rc["version"] + 1
    final = check_versions(t, v0, initial, {r.version: deleting(in_range(10, 20))})
    assert final == [row for row in initial if not 10 <= row[0] < 20]


@pytest.mark.parametrize("paused", ["compaction", "delete"])
def test_compaction_of_marked_files_beside_a_second_vector_delete(
    tmp_path: Path, paused: str
) -> None:
    # The compaction reads file 0 with its vector (rows 0..4) applied; a second delete
    # marks rows 30..39 of the same file. Breaks if both landed: after the delete the
    # compaction's output would bring 30..39 back; after the compaction the delete's
    # re-added file would double rows. check_versions fails at the second commit.
    t, initial, _ = make_table(tmp_path / "t")
    first = t.delete("id < 5")
    assert first.files_marked == 1
    v0 = t.version
    # planned in this process first: a planner error is raised here, not as an exit code
    planned = t.compact(dry_run=True)
    assert [len(g) for g in planned.to_dict()["planned_groups"]] == [3]
    base = [r for r in initial if r[0] >= 5]
    spec = {"op": "delete", "where": "id >= 30 and id < 40"}
    if paused == "compaction":
        comp = Child.paused(t, tmp_path, "compact", {"op": "compact"}, "rewrite:before-commit")
        rd = Child(t, tmp_path, "delete", spec).result()
        comp.release()
        rc = comp.result()
        assert rd["ok"] and rd["marked"] == 1
        assert rc["ok"] and rc["version"] is None and rc["abandoned"], rc
        events = {rd["version"]: deleting(in_range(30, 40))}
    else:
        d = Child.paused(t, tmp_path, "delete", spec, "commit:before-put:DELETE")
        rc = Child(t, tmp_path, "compact", {"op": "compact"}).result()
        d.release()
        rd = d.result()
        assert rc["ok"] and rc["version"] is not None, rc
        assert not rd["ok"] and rd["error"] == "CommitConflictError", rd
        r = t.refresh().delete(spec["where"])
        assert r.committed
        events = {r.version: deleting(in_range(30, 40))}
    final = check_versions(t, v0, base, events)
    assert final == [r for r in base if not 30 <= r[0] < 40]


# -- 3. a vector change killed before its commit --------------------------------------------


@pytest.mark.parametrize("op", ["delete", "update"])
def test_killed_vector_change_leaves_table_and_files(tmp_path: Path, op: str) -> None:
    # Breaks if a vector change deleted or replaced the file it marks before its commit
    # landed (the original files must all still be on disk, and live), or if anything of
    # it were visible after the kill.
    root = tmp_path / "t"
    t, initial, _ = make_table(root)
    v0 = t.version
    files_before = data_files_on_disk(root)
    spec: dict[str, Any] = {"op": op, "where": "id >= 10 and id < 20"}
    if op == "update":
        spec["set"] = {"v": 5}
    c = Child(t, tmp_path, "killed", spec, LAKELOG_CRASH_AT="change:before-commit")
    c.proc.communicate(timeout=60)
    assert c.proc.returncode == -9  # SIGKILL at the failpoint: no cleanup ran
    assert t.refresh().version == v0 and rows_at(t) == initial
    on_disk = data_files_on_disk(root)
    assert files_before <= on_disk  # the file it was marking is still there
    assert {f.path for f in t.snapshot().files()} == files_before
    # a delete writes nothing but its vector (in the commit); an update, its rows' new file
    assert len(on_disk - files_before) == (0 if op == "delete" else 1)
    # the retry lands, marking the same file
    if op == "delete":
        r = t.delete(spec["where"])
        event = deleting(in_range(10, 20))
    else:
        r = t.update(spec["where"], set={"v": 5})
        event = updating(in_range(10, 20), 5)
    assert r.committed and r.files_marked == 1 and r.version == v0 + 1
    assert list(vector_adds(t, r.version).values()) == [10]
    check_versions(t, v0, initial, {r.version: event})
    assert files_before <= data_files_on_disk(root)


# -- 4. a vector delete beside a live appender of matching rows ----------------------------

APPENDER = r"""
import os, sys, time
import pyarrow as pa
import lakelog
uri, stop, out = sys.argv[1:4]
schema = pa.schema([("id", pa.int64()), ("grp", pa.int64()), ("v", pa.int64())])
t = lakelog.open_table(uri)
seq = 0
with open(out, "a") as log:
    while not os.path.exists(stop):
        # ids 10000 + 4 * seq ...: grp 2 rows match the delete, grp 7 rows never do
        ids = [10000 + 4 * seq + i for i in range(4)]
        batch = pa.table({"id": ids, "grp": [2, 7, 2, 7], "v": [seq] * 4}, schema=schema)
        r = t.append(batch)
        log.write(f"{seq} {r.version}\n")
        log.flush()
        seq += 1
        time.sleep(0.1)
"""


def _appended(log: Path) -> list[tuple[int, int]]:
    """``(seq, version)`` of every append the appender logged (whole lines only)."""
    if not log.exists():
        return []
    *done, _ = log.read_text().split("\n")  # the text after the last newline may be partial
    return [(int(s), int(v)) for s, v in (line.split() for line in done)]


def _batch(seq: int) -> Rows:
    return [(10000 + 4 * seq + i, (2, 7, 2, 7)[i], seq) for i in range(4)]


def test_vector_delete_beside_a_live_appender_of_matching_rows(tmp_path: Path) -> None:
    # Breaks if the delete's rebase skipped appended files (rule 3): grp 2 rows appended
    # while it waited would survive at its version, and those files would be missing from
    # its marks; or if the marks it puts on them lost or doubled a grp 7 row
    # (check_versions models every append and the delete).
    t, initial, paths = make_table(tmp_path / "t")  # grp 2: ten rows of every file
    v0 = t.version
    stop, log = tmp_path / "stop", tmp_path / "appended.log"
    appender = spawn(APPENDER, t.uri, str(stop), str(log))
    _STARTED.append(appender)

    def wait_for(done: Callable[[list[tuple[int, int]]], bool]) -> None:
        while not done(_appended(log)):
            assert time.monotonic() < deadline, "the appender made no progress"
            assert appender.poll() is None, appender.communicate()[1][-3000:]
            time.sleep(0.01)

    try:
        deadline = time.monotonic() + 120
        wait_for(lambda a: len(a) >= 2)  # the appender is committing
        d = Child.paused(
            t, tmp_path, "delete", {"op": "delete", "where": "grp = 2"}, "commit:before-put:DELETE"
        )
        target = len(_appended(log)) + 3
        wait_for(lambda a: len(a) >= target)  # appends land while the delete waits at its put
        d.release()
        rd = d.result()
        assert rd["ok"], rd
        wait_for(lambda a: len([v for _, v in a if v > rd["version"]]) >= 2)  # and go on
    finally:
        stop.touch()
        _, err = appender.communicate(timeout=120)
    assert appender.returncode == 0, err[-3000:]
    assert rd["attempts"] >= 2  # it lost its first put to the appends and rebased
    appended = _appended(log)
    assert [s for s, _ in appended] == list(range(len(appended)))
    before = [(s, v) for s, v in appended if v < rd["version"]]
    after = [s for s, v in appended if v > rd["version"]]
    assert len(before) >= 5 and len(after) >= 2
    # it marked the initial files (ten rows each) and, in the same commit, every file
    # appended before it landed, those appended after its read included (two rows each)
    appended_files = {
        a.path: 2
        for _, v in before
        for a in read_commit(t.storage, v).actions
        if isinstance(a, AddFile)
    }
    assert vector_adds(t, rd["version"]) == {**dict.fromkeys(paths, 10), **appended_files}
    assert [v for _, v in before if v > rd["read_version"]]  # some landed while it ran
    events: dict[int, Callable[[Rows], Rows]] = {
        v: (lambda rows, s=s: sorted(rows + _batch(s))) for s, v in appended
    }
    events[rd["version"]] = deleting(lambda r: r[1] == 2)
    final = check_versions(t, v0, initial, events)
    assert not [r for r in rows_at(t, rd["version"]) if r[1] == 2]
    sevens = sorted(r for r in final if r[1] == 7 and r[0] >= 10000)
    assert sevens == sorted(r for s, _ in appended for r in _batch(s) if r[1] == 7)
    later = sorted(r for r in final if r[1] == 2)  # appended after the delete: kept
    assert later == sorted(r for s in after for r in _batch(s) if r[1] == 2)


# -- 5. an update with vectors racing a merge of overlapping keys --------------------------

UPDATE = {"op": "update", "where": "id >= 40 and id < 60", "set": {"v": 1}}
MERGE_ROWS: Rows = [(k, k % 10, 2) for k in range(50, 70)] + [(k, 3, 2) for k in range(1000, 1005)]
MERGE = {"op": "merge", "rows": [{"id": i, "grp": g, "v": v} for i, g, v in MERGE_ROWS]}


@pytest.mark.parametrize("paused", ["update", "merge"])
def test_vector_update_racing_a_merge_of_overlapping_keys(tmp_path: Path, paused: str) -> None:
    # Breaks if both landed: the merge after the update would re-add the update's file with
    # keys 50..59 still live beside their updated copies (a doubled key), or the update
    # after the merge would bring the merged-away rows back; check_versions fails.
    t, initial, _ = make_table(tmp_path / "t")
    v0 = t.version
    specs = {"update": UPDATE, "merge": MERGE}
    events_of = {"update": updating(in_range(40, 60), 1), "merge": merging(MERGE_ROWS)}
    other = "merge" if paused == "update" else "update"
    waiting = Child.paused(
        t, tmp_path, paused, specs[paused], f"commit:before-put:{paused.upper()}"
    )
    won = Child(t, tmp_path, other, specs[other]).result()
    waiting.release()
    lost = waiting.result()
    assert won["ok"] and won["version"] == v0 + 1 and won["marked"] == 1, won
    assert not lost["ok"] and lost["error"] == "CommitConflictError", lost
    events = {won["version"]: events_of[other]}
    check_versions(t, v0, initial, events)
    # the loser runs again on the winner's outcome, and lands on its vector
    if paused == "update":
        r = t.refresh().update(UPDATE["where"], set=UPDATE["set"])
    else:
        r = t.refresh().merge(to_table(MERGE_ROWS), on="id")
    assert r.committed and r.files_marked >= 1
    events[r.version] = events_of[paused]
    final = check_versions(t, v0, initial, events)
    keys = [row[0] for row in final]
    assert sorted(keys) == list(range(300)) + list(range(1000, 1005))
