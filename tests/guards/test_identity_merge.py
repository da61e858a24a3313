"""Identity values given out by a merge's inserts (docs/constraints.md, "Identity
columns"): ``INSERT *`` and explicit insert values number the new rows from the table's
high-water mark, ``UPDATE SET *`` keeps the target's value, and merges racing appenders
in real processes never repeat a value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import lakelog
from lakelog import ConstraintViolationError

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.string())])


def _table(path: Path) -> lakelog.Table:
    return lakelog.create_table(
        str(path / "t"), SCHEMA, identity={"id": {"start": 100, "step": 10}}
    )


def test_merge_inserts_get_unique_increasing_identity_values(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.append(pa.table({"k": [1, 2], "v": ["a", "b"]}))
    t.merge(
        pa.table({"k": [2, 3, 4], "v": ["B", "c", "d"]}),
        on="k",
        when_matched="update",
        when_not_matched="insert",
    )
    t.merge(
        pa.table({"k": [5, 1], "v": ["e", "A"]}),
        on="k",
        when_matched=lakelog.when_matched_update({"v": "source.v"}),
        when_not_matched=lakelog.when_not_matched_insert({"k": "source.k", "v": "source.v"}),
    )
    rows = t.snapshot().to_arrow().sort_by("k").to_pylist()
    assert [(r["k"], r["id"], r["v"]) for r in rows] == [
        (1, 100, "A"),  # updated rows keep their value
        (2, 110, "B"),
        (3, 120, "c"),
        (4, 130, "d"),
        (5, 140, "e"),
    ]
    t.append(pa.table({"k": [6], "v": ["f"]}))  # the mark covers the merge's values
    assert t.snapshot().to_arrow().sort_by("k")["id"][-1].as_py() == 150


def test_merge_refuses_values_for_an_always_identity_column_in_its_clauses(
    tmp_path: Path,
) -> None:
    t = _table(tmp_path)
    with pytest.raises(ConstraintViolationError, match="GENERATED ALWAYS AS IDENTITY"):
        t.merge(
            pa.table({"k": [1], "v": ["a"]}),
            on="k",
            when_not_matched=lakelog.when_not_matched_insert({"id": 7, "k": "source.k"}),
        )
    assert t.snapshot().to_arrow().num_rows == 0


WRITER = r"""
import json, sys
import pyarrow as pa
import lakelog
from lakelog import CommitConflictError
uri, wid, mode, rounds = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
t = lakelog.open_table(uri)
print("ready", flush=True)
sys.stdin.readline()
for seq in range(rounds):
    keys = [wid * 1000 + seq * 10 + i for i in range(3)]
    batch = pa.table({"k": keys, "v": [f"{wid}-{seq}"] * 3})
    while True:
        try:
            if mode == "append":
                t.append(batch)
            else:  # a key an earlier round inserted is updated, the others inserted
                src = pa.table({"k": [keys[1] - 10, *keys[1:]] if seq else keys,
                                "v": [f"{wid}-{seq}"] * 3})
                t.merge(src, on="k", when_matched="update", when_not_matched="insert")
            break
        except CommitConflictError:
            t.refresh()
print("done", flush=True)
"""


@pytest.mark.processes
def test_two_appenders_and_two_merges_racing_never_repeat_an_identity_value(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "t")
    lakelog.create_table(
        uri,
        SCHEMA,
        identity={"id": {"start": 1, "step": 1}},
        properties={"lakelog.commit.max_attempts": "200"},
    )
    rounds = 8
    modes = ["append", "append", "merge", "merge"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, uri, str(w), m, str(rounds)],
            env=dict(os.environ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w, m in enumerate(modes)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        _, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-3000:]
    rows = lakelog.open_table(uri).snapshot().to_arrow()
    ids = rows["id"].to_pylist()
    assert None not in ids
    assert len(set(ids)) == len(ids), json.dumps(sorted(ids))
    # appenders: 3 rows a round; merges: 3, then 2 inserted and 1 updated a round
    assert rows.num_rows == 2 * 3 * rounds + 2 * (3 + 2 * (rounds - 1))
    t = lakelog.open_table(uri)
    t.append(pa.table({"k": [-1], "v": ["after"]}))
    assert t.snapshot().to_arrow().sort_by("id")["id"][-1].as_py() > max(ids)


MERGER = r"""
import sys
import time
import pyarrow as pa
import lakelog
t = lakelog.open_table(sys.argv[1])
t.merge(pa.table({"k": [1, 7, 8], "v": ["A", "g", "h"]}), on="k",
        when_matched="update", when_not_matched="insert")
"""


@pytest.mark.processes
def test_a_merge_that_loses_to_an_append_moves_its_inserted_values(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.append(pa.table({"k": [1, 2], "v": ["a", "b"]}))  # ids 100, 110
    gate = tmp_path / "go"
    env = {**os.environ, "LAKELOG_PAUSE_AT": f"commit:before-put:MERGE:{gate}"}
    child = subprocess.Popen(
        [sys.executable, "-c", MERGER, t.uri], env=env, stderr=subprocess.PIPE, text=True
    )
    paused = Path(f"{gate}.paused")
    deadline = time.monotonic() + 60
    while not paused.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert paused.exists()
    t.append(pa.table({"k": [5, 6], "v": ["e", "f"]}))  # takes 120, 130 first
    gate.touch()
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 0, stderr[-3000:]
    t.refresh()
    rows = t.snapshot().to_arrow().sort_by("k")
    assert [(r["k"], r["id"]) for r in rows.to_pylist()] == [
        (1, 100),
        (2, 110),
        (5, 120),
        (6, 130),
        (7, 140),  # given out as 120, 130, moved past the append's mark
        (8, 150),
    ]
    merge = t.history(1)[0]
    assert merge.operation == "MERGE" and merge.read_version == merge.version - 2
