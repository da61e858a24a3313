"""The one retry rule: a transaction that lost the race re-plans from the winners through
its rebuild step (``lakelog.transaction.Rebuild``), inside the one transaction.

* Forced interleavings of real processes: a schema change and an expiry each pause
  right before their put, after reading the table; another process commits; the paused
  one goes on and rebuilds from the winner (one transaction, two attempts).
* In process (a writer thread paused at the same point): a rebuild that leaves nothing
  to commit ends the transaction as skipped; a rebuild sees the winners and the
  snapshot they made.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pyarrow as pa
import pytest
from _processes import spawn, wait_paused
from _races import race_at

import lakelog
from lakelog.errors import InvalidArgumentError
from lakelog.log.actions import Action, Commit, Metadata
from lakelog.log.snapshot import Snapshot, load_snapshot
from lakelog.transaction import CommitResult, Replan, Transaction

SCHEMA = pa.schema([("id", pa.int64())])

_ADD_COLUMN = r"""
import json, sys
import msgspec
import pyarrow as pa
import lakelog
t = lakelog.open_table(sys.argv[1])
r = t.add_columns({"note": pa.string()})
print(json.dumps({"version": r.version, "attempts": r.attempts, "txn": r.txn_id}), flush=True)
"""

_APPEND = r"""
import sys
import msgspec
import pyarrow as pa
import lakelog
t = lakelog.open_table(sys.argv[1])
t.append(pa.table({"id": [int(sys.argv[2])]}))
"""

_SET = r"""
import json, sys
import lakelog
t = lakelog.open_table(sys.argv[1])
t.set_properties(json.loads(sys.argv[2]))
"""

_EXPIRE = r"""
import json, sys
import lakelog
t = lakelog.open_table(sys.argv[1])
r = t.expire_snapshots()
print(json.dumps({"oldest": r.oldest_version, "commit": r.expire_commit_version}), flush=True)
"""


def _run(script: str, *args: str) -> None:
    p = spawn(script, *args)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-3000:]


@pytest.mark.processes
def test_a_schema_change_that_lost_the_race_is_rebuilt_on_the_winner(tmp_path: Path) -> None:
    """The schema change read version 0 and paused before its put; an append took
    version 1. The change is built again on version 1 inside the same transaction (two
    attempts, one transaction id, read version 1), not by a second transaction."""
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    gate = tmp_path / "gate"
    paused = spawn(_ADD_COLUMN, t.uri, LAKELOG_PAUSE_AT=f"commit:before-put:ADD COLUMNS:{gate}")
    wait_paused(gate, paused)
    _run(_APPEND, t.uri, "7")
    gate.touch()
    out, err = paused.communicate(timeout=120)
    assert paused.returncode == 0, err[-3000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got["version"] == 2
    assert got["attempts"] == 2  # one transaction: the lost race is its second attempt
    header = t.refresh().history(limit=1)[0]
    assert (header.operation, header.txn_id, header.read_version) == (
        "ADD COLUMNS",
        got["txn"],
        1,
    )
    snap = t.snapshot()
    assert snap.schema.names == ["id", "note"]
    assert snap.to_arrow().to_pylist() == [{"id": 7, "note": None}]


@pytest.mark.processes
def test_an_expiry_whose_settings_changed_meanwhile_is_planned_again(tmp_path: Path) -> None:
    """The expiry planned on retain_last=1 and paused before its put; another process
    raised retain_last to 3. The expiry plans again on the winner: it keeps the newest
    three versions, not one."""
    t = lakelog.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        properties={"lakelog.expire.older_than_seconds": "0", "lakelog.expire.retain_last": "1"},
    )
    for i in range(5):
        t.append(pa.table({"id": [i]}))  # versions 1..5
    gate = tmp_path / "gate"
    paused = spawn(_EXPIRE, t.uri, LAKELOG_PAUSE_AT=f"commit:before-put:EXPIRE SNAPSHOTS:{gate}")
    wait_paused(gate, paused)
    _run(_SET, t.uri, json.dumps({"lakelog.expire.retain_last": "3"}))  # version 6
    gate.touch()
    out, err = paused.communicate(timeout=120)
    assert paused.returncode == 0, err[-3000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"oldest": 4, "commit": 7}
    snap = t.refresh().snapshot()
    assert snap.oldest_version == 4
    assert sorted(snap.to_arrow().column("id").to_pylist()) == [0, 1, 2, 3, 4]
    assert sorted(t.snapshot(4).to_arrow().column("id").to_pylist()) == [0, 1, 2, 3]


def _flagged(md: Metadata) -> Metadata:
    return msgspec.structs.replace(md, properties={**md.properties, "custom.flag": "on"})


def test_a_rebuild_that_leaves_nothing_ends_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild step that finds its work done by the winners (here: the property it
    sets, set by the rival) returns no actions: the transaction commits nothing and says
    so, at the winner's version."""
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    read = load_snapshot(t.storage)
    seen: list[tuple[int, list[int] | None]] = []

    def rebuild(fresh: Snapshot, winners: Sequence[Commit] | None) -> Replan:
        seen.append(
            (fresh.version, None if winners is None else [w.header.version for w in winners])
        )
        if fresh.properties.get("custom.flag") == "on":
            return Replan([])
        return Replan([_flagged(fresh.metadata)])

    def writer() -> object:
        actions: list[Action] = [_flagged(read.metadata)]
        return Transaction(
            t.storage, read, operation="FLAG", kind="metadata", actions=actions, rebuild=rebuild
        ).commit()

    result = race_at(
        monkeypatch,
        "commit:before-put:FLAG",
        tmp_path / "gate",
        writer,
        lambda: lakelog.open_table(t.uri).set_properties({"custom.flag": "on"}),
    )
    assert seen == [(1, [1])]
    assert isinstance(result, CommitResult)
    assert (result.skipped, result.version, result.attempts) == (True, 1, 1)  # one put tried
    assert t.refresh().version == 1


def test_rebuild_and_rebase_are_one_or_the_other(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    with pytest.raises(InvalidArgumentError, match="one of rebase and rebuild"):
        Transaction(
            t.storage,
            load_snapshot(t.storage),
            operation="X",
            kind="append",
            actions=[],
            rebase=lambda winners, actions: actions,
            rebuild=lambda fresh, winners: Replan([]),
        )
