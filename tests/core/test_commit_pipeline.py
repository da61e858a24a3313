"""The commit pipeline: one restart/rebase loop, then post-commit hooks that never decide
whether a commit landed (lakelog.transaction, lakelog.hooks)."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pytest
from _processes import spawn, wait_paused

import lakelog
from lakelog import CommitConflictError
from lakelog.hooks import HOOKS, Landed
from lakelog.io.writer import write_files
from lakelog.log.actions import Action
from lakelog.log.commits import commit_path, list_log
from lakelog.log.snapshot import Snapshot, load_snapshot
from lakelog.transaction import CommitResult, Kind, Transaction

SCHEMA = pa.schema([("id", pa.int64())])


class Recorder:
    """A hook that records what it got: the version, and the snapshot's version and files."""

    name = "recorder"
    on_failure = "nothing to catch up"

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, int]] = []

    def run(self, landed: Landed) -> None:
        snap = landed.fresh()
        self.seen.append((landed.version, snap.version, len(snap.paths())))


class Broken:
    name = "broken"
    on_failure = "a test hook: nothing to catch up"

    def run(self, landed: Landed) -> None:
        raise RuntimeError(f"hook failed after version {landed.version}")


def _adds(t: lakelog.Table, i: int) -> list[Action]:
    rows = pa.table({"id": [i]}, schema=SCHEMA)
    options = t.write_options()
    return list(
        write_files(t.storage, rows.to_batches(), schema=SCHEMA, partition_by=(), options=options)
    )


def _commit(
    t: lakelog.Table,
    actions: list[Action],
    hooks: list[Any],
    *,
    read: Snapshot | None = None,
    kind: Kind = "append",
) -> tuple[CommitResult, Transaction]:
    txn = Transaction(
        t.storage,
        read if read is not None else load_snapshot(t.storage),
        operation="TEST",
        kind=kind,
        actions=actions,
        hooks=hooks,
    )
    return txn.commit(), txn


def test_a_hook_that_raises_does_not_change_the_outcome(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    after = Recorder()
    with caplog.at_level(logging.WARNING, logger="lakelog"):
        result, txn = _commit(t, _adds(t, 1), [Broken(), after])
    # landed, and said so: the version, one attempt, the snapshot as of it
    assert (result.version, result.attempts, result.skipped) == (1, 1, False)
    assert t.storage.exists(commit_path(1))
    assert txn.landed_snapshot is not None and txn.landed_snapshot.version == 1
    # the failure is a warning naming the hook; the hooks after it still ran
    assert "commit 1 landed but its post-commit hook broken failed" in caplog.text
    assert "hook failed after version 1" in caplog.text
    assert after.seen == [(1, 1, 1)]
    # and the next commit works, through the table and with the hooks again
    assert t.refresh().append(pa.table({"id": [2]}, schema=SCHEMA)).version == 2
    assert _commit(t, _adds(t, 3), [Broken(), after])[0].version == 3
    assert after.seen == [(1, 1, 1), (3, 3, 3)]
    assert sorted(t.refresh().snapshot().to_arrow().column("id").to_pylist()) == [1, 2, 3]


def test_hooks_run_once_per_landed_commit_and_not_for_one_that_did_not(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    hook = Recorder()
    stale = load_snapshot(t.storage)  # version 0
    assert _commit(t, _adds(t, 1), [hook])[0].version == 1
    # a metadata change read at version 0 conflicts with version 1: no hook runs
    changed = msgspec.structs.replace(stale.metadata, properties={"lakelog.manifest_interval": "7"})
    with pytest.raises(CommitConflictError):
        _commit(t, [changed], [hook], read=stale, kind="metadata")
    assert hook.seen == [(1, 1, 1)]
    # an append read at version 0 loses the race for 1, rebases and lands at 2: one run,
    # on the snapshot with the winner's file and its own
    result, txn = _commit(t, _adds(t, 2), [hook], read=stale)
    assert (result.version, result.attempts) == (2, 2)
    assert hook.seen == [(1, 1, 1), (2, 2, 2)]
    assert txn.landed_snapshot is not None and txn.landed_snapshot.version == 2


def test_the_registered_hooks_write_the_manifest_of_a_due_version(tmp_path: Path) -> None:
    """The manifest hook runs first, so the landed snapshot (and the hooks after it)
    resolve from the manifest it wrote."""
    t = lakelog.create_table(
        str(tmp_path / "t"), SCHEMA, properties={"lakelog.manifest_interval": "2"}
    )
    assert [h.name for h in HOOKS][:1] == ["manifest"]
    hook = Recorder()
    _commit(t, _adds(t, 1), [*HOOKS, hook])
    assert 1 not in list_log(t.storage).manifests
    _, txn = _commit(t, _adds(t, 2), [*HOOKS, hook])
    assert 2 in list_log(t.storage).manifests
    assert txn.landed_snapshot is not None and txn.landed_snapshot.version == 2
    assert hook.seen == [(1, 1, 1), (2, 2, 2)]


# -- racing processes ------------------------------------------------------------------

CHILD = r"""
import json, sys
import msgspec
import pyarrow as pa
import lakelog
from lakelog.errors import CommitConflictError
from lakelog.hooks import HOOKS
from lakelog.io.writer import write_files
from lakelog.log.snapshot import load_snapshot
from lakelog.transaction import Transaction

uri, kind = sys.argv[1], sys.argv[2]
t = lakelog.open_table(uri)
snap = load_snapshot(t.storage)
seen = []

class Recorder:
    name = "recorder"
    on_failure = "nothing to catch up"

    def run(self, landed):
        fresh = landed.fresh()
        seen.append([landed.version, fresh.version, len(fresh.paths())])

if kind == "metadata":
    props = {**snap.metadata.properties, "lakelog.manifest_interval": "7"}
    actions = [msgspec.structs.replace(snap.metadata, properties=props)]
else:
    rows = pa.table({"id": [999]}, schema=pa.schema([("id", pa.int64())]))
    actions = write_files(
        t.storage, rows.to_batches(), schema=rows.schema, partition_by=(),
        options=t.write_options(),
    )
txn = Transaction(
    t.storage, snap, operation="RACE", kind=kind, actions=actions,
    hooks=[*HOOKS, Recorder()],
)
out = {"read": snap.version, "hooks": seen}
try:
    r = txn.commit()
    out.update(version=r.version, attempts=r.attempts)
except CommitConflictError as e:
    out.update(error=type(e).__name__)
print(json.dumps(out), flush=True)
"""


@pytest.mark.parametrize("race", ["rebase", "restart", "conflict"])
def test_a_writer_paused_before_its_put_takes_one_path_and_hooks_run_once(
    tmp_path: Path, race: str
) -> None:
    """A child process reads version 1 and pauses right before its put
    (``commit:before-put:RACE``). Meanwhile: ``rebase``, one append wins version 2, so
    the child reads it, rebases and lands at 3; ``restart``, two appends and an expiry
    delete the child's base, so its put at 2 fills a hole, is withdrawn, and it
    commits again on the latest version; ``conflict``, the child's metadata change
    conflicts with the winner. Hooks run exactly once for a commit that landed, on the
    snapshot as of it, and never for one that did not."""
    uri = str(tmp_path / "t")
    t = lakelog.create_table(uri, SCHEMA)
    t.append(pa.table({"id": [1]}, schema=SCHEMA))
    gate = tmp_path / "go"
    kind = "metadata" if race == "conflict" else "append"
    child = spawn(CHILD, uri, kind, LAKELOG_PAUSE_AT=f"commit:before-put:RACE:{gate}")
    try:
        wait_paused(gate, child)
        t.refresh().append(pa.table({"id": [2]}, schema=SCHEMA))
        if race == "restart":
            t.append(pa.table({"id": [3]}, schema=SCHEMA))
            report = t.expire_snapshots(older_than=dt.timedelta(0), retain_last=1)
            assert report.oldest_version == 3
            assert not t.storage.exists(commit_path(2))
        gate.touch()
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    got = json.loads(out.splitlines()[-1])
    assert got["read"] == 1
    latest = t.refresh().snapshot()
    if race == "conflict":
        assert got["error"] == "CommitConflictError"
        assert got["hooks"] == []
        assert latest.version == 2
        return
    ids = sorted(latest.to_arrow().column("id").to_pylist())
    assert got["version"] == latest.version and got["attempts"] == 2
    assert got["hooks"] == [[latest.version, latest.version, len(ids)]]
    if race == "rebase":
        assert (got["version"], ids) == (3, [1, 2, 999])
    else:  # withdrawn from the hole at 2, landed after the expiry's own commit
        assert got["version"] > 3 and ids == [1, 2, 3, 999]
        assert all(v >= latest.oldest_version for v in list_log(t.storage).commits)
