"""Optimistic concurrency: real racing writers, the conflict rules, idempotent retries.

The big race runs 4 OS processes appending 50 commits each to one table, on
local disk and on the moto S3 server (the processes get the storage options),
and 4 threads on the memory filesystem (which lives in one process).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from _races import race_at

import lakelog
from lakelog import CommitConflictError
from lakelog.io.writer import write_files
from lakelog.log.actions import (
    Action,
    AddFile,
    Commit,
    CommitHeader,
    DataFile,
    Metadata,
    RemoveFile,
)
from lakelog.log.commits import list_log, read_commit
from lakelog.log.snapshot import load_snapshot
from lakelog.storage import Storage
from lakelog.transaction import check_conflicts

SCHEMA = pa.schema([("writer", pa.int64()), ("seq", pa.int64()), ("p", pa.string())])
WRITERS, COMMITS = 4, 50

WORKER = textwrap.dedent(
    """
    import json, sys
    import pyarrow as pa
    import lakelog

    args = json.loads(sys.argv[1])
    schema = pa.schema([("writer", pa.int64()), ("seq", pa.int64()), ("p", pa.string())])
    t = lakelog.open_table(args["uri"], storage_options=args["opts"])
    print("ready", flush=True)
    sys.stdin.readline()  # wait for the start signal so all writers race
    out = []
    for i in range(args["n"]):
        batch = pa.table({"writer": [args["w"]], "seq": [i], "p": ["x"]}, schema=schema)
        r = t.append(batch)
        out.append([r.version, r.attempts, r.txn_id])
    print(json.dumps(out), flush=True)
    """
)


def _row(w: int, i: int, p: str = "x") -> pa.Table:
    return pa.table({"writer": [w], "seq": [i], "p": [p]}, schema=SCHEMA)


def _check_race_outcome(
    uri: str,
    opts: dict[str, Any],
    results: Sequence[Sequence[Sequence[Any]]],
    *,
    resolve: Sequence[int] | None = None,
    commits: int = COMMITS,
) -> None:
    """``WRITERS * commits`` new versions, none lost or duplicated, every version
    readable and right.

    Every commit is read and replayed by hand; ``table.snapshot(v)`` (manifest +
    replay) is checked against that at every version, or only at the versions
    in ``resolve`` (on the moto server, where each time-travel resolution
    costs a slow listing).
    """
    n = WRITERS * commits
    landed = sorted(r[0] for per_writer in results for r in per_writer)
    assert landed == list(range(1, n + 1))  # each writer saw its own distinct versions
    for per_writer in results:  # a writer's own commits land in increasing order
        versions = [r[0] for r in per_writer]
        assert versions == sorted(versions)
    table = lakelog.open_table(uri, storage_options=opts)
    storage = table.storage
    assert list_log(storage).commits == tuple(range(n + 1))
    assert [h.version for h in table.history(limit=3)] == [n, n - 1, n - 2]
    latest = table.snapshot()
    assert latest.version == n
    rows = latest.to_arrow()
    pairs = sorted(
        zip(rows.column("writer").to_pylist(), rows.column("seq").to_pylist(), strict=True)
    )
    assert pairs == [(w, i) for w in range(WRITERS) for i in range(commits)]
    # every version: exactly the files added by commits 1..v, one row each
    txn_ids: set[str] = set()
    live: dict[str, int] = {}
    check = set(range(1, n + 1) if resolve is None else resolve)
    for v in range(1, n + 1):
        commit = read_commit(storage, v)
        assert commit.header.read_version is not None and commit.header.read_version < v
        assert commit.header.txn_id not in txn_ids
        txn_ids.add(commit.header.txn_id)
        adds = [a for a in commit.actions if isinstance(a, AddFile)]
        assert len(adds) == 1 and adds[0].num_rows == 1 and adds[0].path not in live
        live[adds[0].path] = v
        if v in check:
            snap = table.snapshot(v)
            assert snap.num_rows == v
            assert {f.path for f in snap.files()} == set(live)
            if resolve is None and v % 40 == 0:
                assert snap.to_arrow().num_rows == v
    assert txn_ids == {r[2] for per_writer in results for r in per_writer}


def _race_processes(
    uri: str, opts: dict[str, Any], commits: int = COMMITS
) -> list[list[list[Any]]]:
    lakelog.create_table(uri, SCHEMA, storage_options=opts)
    procs = []
    for w in range(WRITERS):
        arg = json.dumps({"uri": uri, "opts": opts, "w": w, "n": commits})
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER, arg],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line.strip() == "ready", (line, p.stderr.read() if p.stderr else "")
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


@pytest.mark.processes
def test_four_processes_append_on_local_disk(local_backend: Any) -> None:
    results = _race_processes(local_backend.uri, {})
    assert sum(r[1] > 1 for per in results for r in per) > 0  # they really raced
    _check_race_outcome(local_backend.uri, {}, results)


@pytest.mark.processes
@pytest.mark.s3
def test_four_processes_append_on_s3(s3_backend: Any) -> None:
    # half the commits of the local race: each costs a dozen requests to the moto server
    # (this test was the longest of the suite at 50 each)
    commits = COMMITS // 2
    results = _race_processes(s3_backend.uri, s3_backend.storage_options, commits)
    # both ends and around manifests (one each 10 versions)
    sample = [1, 9, 10, 11, 49, 50, 51, 77, 99, 100]
    _check_race_outcome(
        s3_backend.uri, s3_backend.storage_options, results, resolve=sample, commits=commits
    )


def test_four_threads_append_on_memory(memory_backend: Any) -> None:
    uri = memory_backend.uri
    lakelog.create_table(uri, SCHEMA)
    barrier = threading.Barrier(WRITERS)
    results: list[list[list[Any]]] = [[] for _ in range(WRITERS)]
    errors: list[BaseException] = []

    def run(w: int) -> None:
        try:
            t = lakelog.open_table(uri)
            barrier.wait()
            for i in range(COMMITS):
                r = t.append(_row(w, i))
                results[w].append([r.version, r.attempts, r.txn_id])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(WRITERS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    _check_race_outcome(uri, {}, results)


# -- conflict rules (pure) -----------------------------------------------------------------


def _commit(version: int, actions: Sequence[Action], op: str = "W") -> Commit:
    header = CommitHeader(version=version, timestamp_ms=version, operation=op, txn_id=f"t{version}")
    return Commit(header, list(actions))


def _add(path: str, part: str | None = None, data_change: bool = True) -> AddFile:
    return AddFile(
        path=path,
        size_bytes=1,
        num_rows=1,
        partition={} if part is None else {"p": part},
        data_change=data_change,
    )


def _rm(path: str, part: str | None = None, data_change: bool = True) -> RemoveFile:
    return RemoveFile(
        path=path,
        deletion_ms=1,
        partition={} if part is None else {"p": part},
        data_change=data_change,
    )


META = Metadata(table_id="x", schema="")


def test_conflict_rules_table() -> None:
    append_w = _commit(5, [_add("new1", "a")])
    rewrite_w = _commit(5, [_rm("f1", "a", False), _rm("f2", "a", False), _add("c1", "a", False)])
    meta_w = _commit(5, [META])
    overwrite_b = _commit(5, [_rm("f3", "b"), _add("n3", "b")])
    my_rewrite = [_rm("f1", "a", False), _add("c2", "a", False)]
    my_other_rewrite = [_rm("f9", "a", False), _add("c3", "a", False)]
    ok: list[tuple[str, list[Action], Commit, Any]] = [
        ("append", [_add("mine")], append_w, None),
        ("append", [_add("mine")], rewrite_w, None),
        ("append", [_add("mine")], overwrite_b, None),
        ("rewrite", my_rewrite, append_w, None),
        ("rewrite", my_other_rewrite, rewrite_w, None),
        ("overwrite", [_rm("f1", "a"), _add("x", "a")], overwrite_b, [{"p": "a"}]),
        ("delete", [_rm("f1", "a")], _commit(5, [_add("n", "b")]), [{"p": "a"}]),
    ]
    for kind, actions, winner, scope in ok:
        check_conflicts(kind=kind, actions=actions, winners=[winner], replaced_partitions=scope)

    def conflict(
        kind: str, actions: list[Action], winners: list[Commit], scope: Any = None
    ) -> CommitConflictError:
        with pytest.raises(CommitConflictError) as info:
            check_conflicts(kind=kind, actions=actions, winners=winners, replaced_partitions=scope)  # type: ignore[arg-type]
        return info.value

    e = conflict("rewrite", my_rewrite, [append_w, _commit(6, rewrite_w.actions)])
    assert e.winning_version == 6 and e.conflicting_files == ("f1",)
    assert "f1" in str(e) and "version 6" in str(e)
    e = conflict("overwrite", [_rm("f1", "a")], [append_w], [{"p": "a"}])
    assert e.winning_version == 5 and e.conflicting_files == ("new1",)
    e = conflict("overwrite", [_add("x")], [_commit(5, [_add("n", "b")])])  # whole table
    assert e.conflicting_files == ("n",)
    e = conflict("delete", [_rm("f3", "b")], [overwrite_b], [{"p": "b"}])
    assert e.winning_version == 5
    for kind in ("append", "rewrite", "overwrite", "delete", "metadata"):
        assert conflict(kind, [_add("q")], [meta_w]).winning_version == 5
    assert conflict("metadata", [META], [append_w]).winning_version == 5
    check_conflicts(kind="metadata", actions=[META], winners=[])


# -- conflict rules (real races) -----------------------------------------------------------


def _rewrite_actions(table: lakelog.Table, snap: lakelog.Snapshot, f: DataFile) -> list[Action]:
    """Rewrite one live file of ``snap`` into a new file, as compaction would."""
    only = snap.file_table.filter(pc.equal(snap.file_table.column("path"), f.path))
    rows = lakelog.Snapshot(
        table.storage,
        version=snap.version,
        timestamp_ms=snap.timestamp_ms,
        metadata=snap.metadata,
        files=only,
    ).to_arrow()
    adds = write_files(
        table.storage,
        rows.to_batches(),
        schema=snap.schema,
        partition_by=snap.partition_by,
        options=table.write_options(),
    )
    assert len(adds) == 1
    return [
        f.to_remove(deletion_ms=1, data_change=False),
        AddFile(**{**_fields(adds[0]), "data_change": False}),
    ]


def _fields(a: AddFile) -> dict[str, Any]:
    return {k: getattr(a, k) for k in a.__struct_fields__}


def _two_writers(backend: Any) -> tuple[lakelog.Table, lakelog.Table]:
    t = lakelog.create_table(
        backend.uri, SCHEMA, partition_by=["p"], storage_options=backend.storage_options
    )
    for i in range(3):
        t.append(_row(0, i, "a"))
    t.append(_row(0, 9, "b"))
    other = lakelog.open_table(backend.uri, storage_options=backend.storage_options)
    return t, other


def _rewrite(table: lakelog.Table, snap: lakelog.Snapshot, f: DataFile) -> Any:
    return table.commit(
        _rewrite_actions(table, snap, f), operation="COMPACT", kind="rewrite", read_snapshot=snap
    )


def test_rewrite_vs_rewrite_of_the_same_file(backend: Any) -> None:
    t1, t2 = _two_writers(backend)
    s1, s2 = t1.snapshot(), t2.snapshot()
    assert s1.version == s2.version == 4
    target = sorted(s1.files([("p", "=", "a")]), key=lambda f: f.path)[0]
    first = _rewrite(t1, s1, target)
    assert first.version == 5
    with pytest.raises(CommitConflictError) as info:
        _rewrite(t2, s2, target)
    assert info.value.winning_version == 5
    assert info.value.conflicting_files == (target.path,)
    assert target.path in str(info.value) and "version 5" in str(info.value)
    snap = lakelog.open_table(backend.uri, storage_options=backend.storage_options).snapshot()
    assert snap.version == 5
    assert snap.to_arrow().num_rows == 4


def test_rewrites_of_different_files_both_land(backend: Any) -> None:
    t1, t2 = _two_writers(backend)
    s1, s2 = t1.snapshot(), t2.snapshot()
    a, b = sorted(s1.files([("p", "=", "a")]), key=lambda f: f.path)[:2]
    assert _rewrite(t1, s1, a).version == 5
    r = _rewrite(t2, s2, b)
    assert (r.version, r.attempts) == (6, 2)
    final = lakelog.open_table(backend.uri, storage_options=backend.storage_options).snapshot()
    assert final.num_files == 4 and final.to_arrow().num_rows == 4
    assert {a.path, b.path}.isdisjoint(f.path for f in final.files())


def test_rewrite_and_append_both_land_in_either_order(backend: Any) -> None:
    t1, t2 = _two_writers(backend)
    s1 = t1.snapshot()
    files = sorted(s1.files([("p", "=", "a")]), key=lambda f: f.path)
    r1 = _rewrite(t1, s1, files[0])
    r2 = t2.append(_row(1, 0, "a"))  # stale: rebases over the rewrite
    assert (r1.version, r2.version, r2.attempts) == (5, 6, 2)
    # now the other way: an append lands under a stale rewrite
    t3 = lakelog.open_table(backend.uri, storage_options=backend.storage_options)
    s3 = t3.snapshot()
    t1.append(_row(1, 1, "a"))
    r3 = _rewrite(t3, s3, files[1])
    assert (r3.version, r3.attempts) == (8, 2)
    final = lakelog.open_table(backend.uri, storage_options=backend.storage_options).snapshot()
    got = sorted(zip(*final.to_arrow().select(["writer", "seq"]).to_pydict().values(), strict=True))
    assert got == [(0, 0), (0, 1), (0, 2), (0, 9), (1, 0), (1, 1)]
    assert {files[0].path, files[1].path}.isdisjoint(f.path for f in final.files())


def test_overwrite_conflicts_with_an_append_into_its_partition(
    local_backend: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A real race through ``Table.overwrite``: an append lands while it writes."""
    t1, t2 = _two_writers(local_backend)
    point = "commit:before-put:OVERWRITE"  # the overwrite's files are written by then
    with pytest.raises(CommitConflictError) as info:
        race_at(
            monkeypatch,
            point,
            tmp_path / "gate-1",
            lambda: t1.overwrite(_row(3, 0, "a"), partitions=[{"p": "a"}]),
            lambda: t2.append(_row(2, 0, "a")),
        )
    assert info.value.winning_version == 5
    assert len(info.value.conflicting_files) == 1
    snap = lakelog.open_table(local_backend.uri).snapshot()
    assert snap.version == 5 and snap.num_rows == 5
    # the losing overwrite deleted its new file; what is on disk is what is live
    on_disk = {f.path for f in snap.storage.walk() if not f.path.startswith("_lakelog/")}
    assert on_disk == {f.path for f in snap.files()}
    # an append into another partition does not conflict with the overwrite
    r = race_at(
        monkeypatch,
        point,
        tmp_path / "gate-2",
        lambda: t1.overwrite(_row(3, 1, "a"), partitions=[{"p": "a"}]),
        lambda: t2.append(_row(2, 1, "b")),
    )
    assert (r.version, r.attempts) == (7, 2)
    final = lakelog.open_table(local_backend.uri).snapshot()
    assert sorted(final.to_arrow(filter=[("p", "=", "a")]).column("seq").to_pylist()) == [1]
    assert final.to_arrow(filter=[("p", "=", "b")]).num_rows == 2


def test_metadata_changes_conflict_but_appends_rebase_over_property_changes(
    backend: Any,
) -> None:
    t1, t2 = _two_writers(backend)
    stale = t2.snapshot()
    t1.set_properties({"team": "a"})  # version 5
    # properties alone do not change what an append writes: it rebases over them
    assert t2.append(_row(5, 5, "a")).version == 6
    t1.refresh().add_columns([pa.field("note", pa.string())])  # version 7
    before = {f.path for f in t1.storage.walk() if not f.path.startswith("_lakelog")}
    with pytest.raises(CommitConflictError, match="refresh") as info:
        t2.append(_row(5, 6, "a"))
    assert info.value.winning_version == 7
    after = {f.path for f in t1.storage.walk() if not f.path.startswith("_lakelog")}
    assert after == before  # the losing append removed its data file
    # a metadata change read at a stale version loses to a plain append
    t1.append(_row(6, 6, "b"), schema_mode="merge")  # version 8
    md = Metadata(
        table_id=stale.metadata.table_id,
        schema=stale.metadata.schema,
        partition_by=stale.partition_by,
        properties={"team": "b"},
    )
    with pytest.raises(CommitConflictError) as info:
        t2.commit([md], operation="SET PROPERTIES", kind="metadata", read_snapshot=stale)
    assert info.value.winning_version == 5  # the first winner it meets
    final = lakelog.open_table(backend.uri, storage_options=backend.storage_options)
    assert final.version == 8
    assert final.properties == {"team": "a", "lakelog.deletion_vectors": "true"}  # + default
    # refreshed, the writer succeeds
    assert t2.refresh().append(_row(5, 6, "a"), schema_mode="merge").version == 9


# -- idempotent retries after an unknown outcome --------------------------------------------


class FaultyStorage(Storage):
    """A table root whose commit puts and log reads a test can make fail, passed to the
    table explicitly (:func:`_on`), so no other handle is affected."""

    def __init__(self, uri: str, storage_options: Any = None) -> None:
        super().__init__(uri, storage_options)
        self.put_fault: Callable[[str, bytes], None] | None = None
        self.read_fault: Callable[[str], None] | None = None

    def put_if_absent(self, rel: str, data: bytes) -> None:
        if self.put_fault is not None:
            self.put_fault(rel, data)
        super().put_if_absent(rel, data)

    def read_bytes(self, rel: str) -> bytes:
        if self.read_fault is not None:
            self.read_fault(rel)
        return super().read_bytes(rel)


def _on(storage: Storage) -> lakelog.Table:
    """The table at ``storage``'s root, read and written through that very object."""
    return lakelog.Table(storage, load_snapshot(storage))


def _flaky_put(storage: FaultyStorage, *, land: bool, times: int = 1) -> list[str]:
    """The next ``times`` commit puts time out, after (``land``) or before writing."""
    seen: list[str] = []

    def flaky(rel: str, data: bytes) -> None:
        if rel.endswith(".json") and len(seen) < times:
            seen.append(rel)
            if land:
                Storage.put_if_absent(storage, rel, data)
            raise TimeoutError(f"simulated timeout putting {rel}")

    storage.put_fault = flaky
    return seen


def _txn_counts(table: lakelog.Table) -> dict[str, int]:
    counts: dict[str, int] = {}
    for h in table.history():
        counts[h.txn_id] = counts.get(h.txn_id, 0) + 1
    return counts


@pytest.mark.parametrize("land", [True, False], ids=["landed", "not-landed"])
def test_retry_after_unknown_outcome_commits_once(backend: Any, land: bool) -> None:
    lakelog.create_table(backend.uri, SCHEMA, storage_options=backend.storage_options)
    storage = FaultyStorage(backend.uri, backend.storage_options)
    t = _on(storage)
    t.append(_row(0, 0))
    seen = _flaky_put(storage, land=land)
    r = t.append(_row(0, 1))
    assert seen == ["_lakelog/00000000000000000002.json"]
    assert (r.version, r.attempts) == (2, 2)
    fresh = lakelog.open_table(backend.uri, storage_options=backend.storage_options)
    assert fresh.version == 2
    assert _txn_counts(fresh)[r.txn_id] == 1
    assert sorted(fresh.snapshot().to_arrow().column("seq").to_pylist()) == [0, 1]


def test_retry_after_unknown_outcome_while_another_writer_lands(local_backend: Any) -> None:
    """The put times out without landing and a rival takes the version meanwhile."""
    lakelog.create_table(local_backend.uri, SCHEMA)
    storage = FaultyStorage(local_backend.uri)
    t = _on(storage)
    rival = lakelog.open_table(local_backend.uri)
    state = {"fired": False}

    def flaky(rel: str, data: bytes) -> None:
        if rel.endswith("1.json") and not state["fired"]:
            state["fired"] = True
            rival.append(_row(1, 0))  # lands version 1 during our "timeout"
            raise TimeoutError("simulated")

    storage.put_fault = flaky
    r = t.append(_row(0, 0))
    assert r.version == 2
    storage.put_fault = None
    fresh = lakelog.open_table(local_backend.uri)
    assert _txn_counts(fresh)[r.txn_id] == 1
    assert fresh.snapshot().num_rows == 2


def test_unknown_outcome_on_the_last_attempt_finds_its_commit(local_backend: Any) -> None:
    """With no attempts left, a put that landed but reported an error is a success."""
    lakelog.create_table(local_backend.uri, SCHEMA, properties={"lakelog.commit.max_attempts": 1})
    storage = FaultyStorage(local_backend.uri)
    t = _on(storage)
    _flaky_put(storage, land=True)
    r = t.append(_row(0, 0))
    assert (r.version, r.attempts) == (1, 1)
    snap = lakelog.open_table(local_backend.uri).snapshot()
    assert snap.version == 1 and snap.to_arrow().num_rows == 1


def test_unknown_outcome_that_cannot_be_checked_keeps_the_data_files(
    local_backend: Any,
) -> None:
    """The put landed, reported an error, and the log cannot be read to check:
    the error propagates, but the new data files stay (the commit uses them)."""
    lakelog.create_table(local_backend.uri, SCHEMA, properties={"lakelog.commit.max_attempts": 1})
    storage = FaultyStorage(local_backend.uri)
    t = _on(storage)
    _flaky_put(storage, land=True)

    def unreadable_log(rel: str) -> None:
        if rel.endswith("1.json"):
            raise ConnectionError("simulated: storage unreachable")

    storage.read_fault = unreadable_log
    with pytest.raises(TimeoutError):
        t.append(_row(0, 0))
    snap = lakelog.open_table(local_backend.uri).snapshot()
    assert snap.version == 1
    assert snap.to_arrow().column("seq").to_pylist() == [0]  # every referenced file exists


def test_commit_gives_up_after_max_attempts(local_backend: Any) -> None:
    lakelog.create_table(local_backend.uri, SCHEMA, properties={"lakelog.commit.max_attempts": 3})
    storage = FaultyStorage(local_backend.uri)
    t = _on(storage)
    rival = lakelog.open_table(local_backend.uri)
    mine: list[int] = []

    def always_beaten(rel: str, data: bytes) -> None:
        if rel.endswith(".json") and len(mine) < 10:
            mine.append(1)
            rival.append(_row(1, len(mine)))  # a rival lands first, every time

    storage.put_fault = always_beaten
    with pytest.raises(CommitConflictError, match="3 attempts") as info:
        t.append(_row(0, 0))
    assert info.value.winning_version == 3
    assert len(mine) == 3  # one rival commit per attempt, then it gave up
    storage.put_fault = None
    assert lakelog.open_table(local_backend.uri).snapshot().num_rows == len(mine)
