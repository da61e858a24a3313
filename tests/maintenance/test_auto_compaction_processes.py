"""Auto-compaction beside real OS processes: appenders that auto-compact racing a
deleter with deletion vectors, a user's compaction and an expiry; a writer killed
inside its auto-compaction; an async run when its process exits."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from _processes import race, spawn

import lakelog
from lakelog.log.commits import read_commit

pytestmark = pytest.mark.processes

SCHEMA = pa.schema([("p", pa.int64()), ("id", pa.int64()), ("v", pa.float64())])

APPENDER = r"""
import json, sys
import pyarrow as pa
import lakelog
uri, wid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = lakelog.open_table(uri)
print("ready", flush=True)
sys.stdin.readline()
out = []
for seq in range(n):
    ids = [wid * 10**6 + seq * 100 + i for i in range(8)]
    data = pa.table({"p": [i % 4 for i in range(8)], "id": ids, "v": [float(wid)] * 8},
                    schema=t.schema)
    r = t.append(data)
    a = r.auto_compaction
    out.append([seq, r.version, None if a is None else a.status])
print(json.dumps(out))
"""

DELETER = r"""
import json, sys
import lakelog
from lakelog.errors import CommitConflictError
uri = sys.argv[1]
t = lakelog.open_table(uri)
print("ready", flush=True)
sys.stdin.readline()
deleted, conflicts = [], 0
for lo in range(0, 200, 40):
    while True:  # a conflict with a rewrite that removed a marked file first: run again
        try:
            r = t.delete(f"id >= {lo} and id < {lo + 20}")
            break
        except CommitConflictError:
            conflicts += 1
    assert r.committed and r.deleted_rows == 20, r
    deleted.extend(range(lo, lo + 20))
print(json.dumps({"deleted": deleted, "conflicts": conflicts}))
"""

COMPACTOR = r"""
import json, sys, time
import lakelog
uri = sys.argv[1]
t = lakelog.open_table(uri)
print("ready", flush=True)
sys.stdin.readline()
versions = []
for _ in range(3):
    versions.append(t.compact().version)
    time.sleep(0.2)
print(json.dumps(versions))
"""

EXPIRER = r"""
import datetime as dt, json, sys, time
import lakelog
uri = sys.argv[1]
t = lakelog.open_table(uri)
print("ready", flush=True)
sys.stdin.readline()
expired = []
for _ in range(3):
    time.sleep(0.3)
    r = t.expire_snapshots(older_than=dt.timedelta(0), retain_last=5)
    expired.append(r.to_dict().get("oldest_version"))
print(json.dumps(expired))
"""

ONE_APPEND = r"""
import json, sys
import pyarrow as pa
import lakelog
uri, seq = sys.argv[1], int(sys.argv[2])
t = lakelog.open_table(uri)
ids = [seq * 100 + i for i in range(5)]
r = t.append(pa.table({"p": [1] * 5, "id": ids, "v": [1.0] * 5}, schema=t.schema))
a = r.auto_compaction
print(json.dumps([r.version, None if a is None else a.status]))
"""


def _ids(t: lakelog.Table) -> Counter[int]:
    return Counter(t.refresh().snapshot().to_arrow(columns=["id"]).column("id").to_pylist())


def _batch(seq: int) -> pa.Table:
    return pa.table(
        {"p": [1] * 5, "id": [seq * 100 + i for i in range(5)], "v": [1.0] * 5}, schema=SCHEMA
    )


def test_auto_compaction_races_appenders_a_deleter_a_compaction_and_an_expiry(
    tmp_path: Path,
) -> None:
    seed = pa.table(
        {"p": [i % 4 for i in range(200)], "id": list(range(200)), "v": [0.0] * 200},
        schema=SCHEMA,
    )
    t = lakelog.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        partition_by=["p"],
        properties={
            "lakelog.auto_compact": "true",
            "lakelog.auto_compact.min_files": "4",
            "lakelog.deletion_vectors": "true",
        },
    )
    t.append(seed)
    procs = [
        spawn(APPENDER, t.uri, "1", "25", gated=True),
        spawn(APPENDER, t.uri, "2", "25", gated=True),
        spawn(DELETER, t.uri, gated=True),
        spawn(COMPACTOR, t.uri, gated=True),
        spawn(EXPIRER, t.uri, gated=True),
    ]
    first, second, deleter, _, _ = race(procs)
    # every writer finished (race() asserts each exited 0): none failed or was blocked
    appended: set[int] = set()
    statuses: Counter[str | None] = Counter()
    for wid, out in ((1, first), (2, second)):
        assert [seq for seq, _, _ in out] == list(range(25))
        for seq, _, status in out:
            appended |= {wid * 10**6 + seq * 100 + i for i in range(8)}
            statuses[status] += 1
    assert set(statuses) <= {"compacted", "below_threshold", "lost"}, statuses
    assert statuses["compacted"] >= 1
    expected = (set(range(200)) - set(deleter["deleted"])) | appended
    ids = _ids(t)
    # no acknowledged append missing, no deleted row back, nothing twice
    assert set(ids) == expected and max(ids.values()) == 1
    snap = t.snapshot()
    assert all(t.storage.exists(f.path) for f in snap.files())
    autos = [h for h in t.history() if h.operation == "AUTO COMPACT"]
    assert autos and all(h.parameters["trigger_version"] < h.version for h in autos)


@pytest.mark.parametrize("then", ["next_auto_compaction", "resume"])
def test_a_writer_killed_inside_its_auto_compaction(tmp_path: Path, then: str) -> None:
    t = lakelog.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        partition_by=["p"],
        properties={"lakelog.auto_compact": "true", "lakelog.auto_compact.min_files": "3"},
    )
    t.append(_batch(0))
    t.append(_batch(1))
    child = spawn(ONE_APPEND, t.uri, "2", LAKELOG_CRASH_AT="rewrite:group-written")
    child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL
    # its batch committed before the auto-compaction started: it stays
    t.refresh()
    assert read_commit(t.storage, t.version).header.operation == "CLAIM"
    assert read_commit(t.storage, t.version - 1).header.operation == "APPEND"
    assert set(_ids(t)) == {s * 100 + i for s in range(3) for i in range(5)}
    (plan,) = t.plans()
    assert plan.operation == "AUTO COMPACT" and not plan.running  # its holder is dead
    if then == "resume":
        report = t.resume(plan.plan_id)
        assert report.version is not None and report.compacted_file_count == 3
    else:  # the next writer's auto-compaction takes the files over
        result = t.append(_batch(3))
        auto = result.auto_compaction
        assert auto is not None and auto.status == "compacted", auto
        assert auto.files_removed == 4
    assert t.plans() == []
    expected = {s * 100 + i for s in range(4 if then != "resume" else 3) for i in range(5)}
    ids = _ids(t)
    assert set(ids) == expected and max(ids.values()) == 1
    assert t.snapshot().num_files == 1


def test_an_async_run_finishes_before_its_process_exits(tmp_path: Path) -> None:
    t = lakelog.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        partition_by=["p"],
        properties={
            "lakelog.auto_compact": "true",
            "lakelog.auto_compact.min_files": "3",
            "lakelog.auto_compact.mode": "async",
        },
    )
    for seq in range(2):  # this process's own async runs end first (below the threshold)
        auto = t.append(_batch(seq)).auto_compaction
        assert auto is not None and auto.wait(60).status == "below_threshold"
    child = spawn(ONE_APPEND, t.uri, "2")  # appends, then exits without waiting
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err[-3000:]
    version, status = json.loads(out.strip().splitlines()[-1])
    assert status == "running"
    autos = [h for h in t.history() if h.operation == "AUTO COMPACT"]
    assert len(autos) == 1 and autos[0].parameters["trigger_version"] == version
    assert autos[0].parameters["mode"] == "async"
    assert t.refresh().snapshot().num_files == 1 and t.plans() == []
    assert len(_ids(t)) == 15


ASYNC_APPEND = r"""
import json, sys
import pyarrow as pa
import lakelog
uri, seq = sys.argv[1], int(sys.argv[2])
t = lakelog.open_table(uri)
ids = [seq * 100 + i for i in range(5)]
r = t.append(pa.table({"p": [1] * 5, "id": ids, "v": [1.0] * 5}, schema=t.schema))
end = r.auto_compaction.wait(120)
print(json.dumps([r.version, end.status, end.error]))
"""


def test_the_async_worker_killed_mid_compaction_leaves_data_and_a_resumable_claim(
    tmp_path: Path,
) -> None:
    t = lakelog.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        partition_by=["p"],
        properties={
            "lakelog.auto_compact": "true",
            "lakelog.auto_compact.min_files": "3",
            "lakelog.auto_compact.mode": "async",
            "lakelog.auto_compact.worker": "process",
        },
    )
    for seq in range(2):
        auto = t.append(_batch(seq)).auto_compaction
        assert auto is not None and auto.wait(60).status == "below_threshold"
    # the writer appends; its worker process (which inherits the crash point, the writer
    # never rewrites) is SIGKILLed once it has written the group, before its commit
    child = spawn(ASYNC_APPEND, t.uri, "2", LAKELOG_CRASH_AT="rewrite:group-written")
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err[-3000:]  # the writer itself is fine
    version, status, error = json.loads(out.strip().splitlines()[-1])
    assert status == "failed" and "signal 9" in error, error
    t.refresh()
    assert read_commit(t.storage, version).header.operation == "APPEND"
    assert read_commit(t.storage, t.version).header.operation == "CLAIM"
    assert set(_ids(t)) == {s * 100 + i for s in range(3) for i in range(5)}
    (plan,) = t.plans()
    assert plan.operation == "AUTO COMPACT" and not plan.running  # its holder is dead
    report = t.resume(plan.plan_id)
    assert report.version is not None and report.compacted_file_count == 3
    assert t.plans() == []
    ids = _ids(t)
    assert set(ids) == {s * 100 + i for s in range(3) for i in range(5)}
    assert max(ids.values()) == 1 and t.snapshot().num_files == 1
