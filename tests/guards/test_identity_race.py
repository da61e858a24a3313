"""Identity values and a CHECK constraint under four real processes appending at once,
one of them SIGKILLed mid-way (docs/constraints.md, "Identity columns").

Each writer appends numbered batches (no identity values given) and, every third round,
a batch holding a row the CHECK constraint refuses. At the end: every identity value is
unique, each writer's values increase with its rounds, every batch a writer saw land is
there whole (the killed one's too), no refused row landed, and the high-water mark covers
every value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakelog

pytestmark = pytest.mark.processes

ROWS = 5

WRITER = r"""
import json, sys
import pyarrow as pa
import lakelog
from lakelog import CommitConflictError, ConstraintViolationError
uri, wid, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = lakelog.open_table(uri)
print("ready", flush=True)
sys.stdin.readline()
for seq in range(rounds):
    bad = seq % 3 == 2
    amounts = [float(seq + i) for i in range(5)]
    if bad:
        amounts[3] = -1.0
    batch = pa.table({"writer": [wid] * 5, "seq": [seq] * 5, "i": list(range(5)),
                      "amount": amounts})
    while True:
        try:
            r = t.append(batch)
            print(json.dumps({"landed": seq, "version": r.version}), flush=True)
            break
        except ConstraintViolationError:
            print(json.dumps({"refused": seq}), flush=True)
            break
        except CommitConflictError:
            t.refresh()
print("done", flush=True)
"""


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, *args],
        env=dict(os.environ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_four_racing_writers_and_a_kill_never_repeat_an_identity_value(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("writer", pa.int64()),
            ("seq", pa.int64()),
            ("i", pa.int64()),
            ("amount", pa.float64()),
        ]
    )
    lakelog.create_table(
        uri,
        schema,
        identity={"id": {"start": 10, "step": 3}},
        constraints={"non_negative": "amount >= 0"},
        properties={"lakelog.commit.max_attempts": "200"},
    )
    rounds = 12
    procs = [_spawn(uri, str(w), str(rounds)) for w in range(4)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    # writer 3 is killed once it has seen four of its batches land
    landed: dict[int, list[int]] = {w: [] for w in range(4)}
    refused: dict[int, list[int]] = {w: [] for w in range(4)}
    victim = procs[3]
    assert victim.stdout is not None
    deadline = time.monotonic() + 240
    while len(landed[3]) < 4 and time.monotonic() < deadline:
        line = victim.stdout.readline().strip()
        if not line:
            break
        msg = json.loads(line)
        (landed[3] if "landed" in msg else refused[3]).append(msg.get("landed", msg.get("refused")))
    victim.kill()
    victim.communicate(timeout=30)  # (closes its pipes)
    for w, p in enumerate(procs[:3]):
        stdout, stderr = p.communicate(timeout=240)
        assert p.returncode == 0, stderr[-3000:]
        for line in stdout.splitlines():
            if line.startswith("{"):
                msg = json.loads(line)
                if "landed" in msg:
                    landed[w].append(msg["landed"])
                else:
                    refused[w].append(msg["refused"])
    rows = lakelog.open_table(uri).snapshot().to_arrow()

    # no refused row landed, and every landed batch is there whole (the killed writer's
    # last batch, in flight when it died, is there whole or not at all)
    assert pc.min(rows["amount"]).as_py() >= 0
    batches = Counter(zip(rows["writer"].to_pylist(), rows["seq"].to_pylist(), strict=True))
    assert all(n == ROWS for n in batches.values()), batches
    for w in range(3):
        assert sorted(s for (ww, s) in batches if ww == w) == sorted(landed[w])
        assert sorted(refused[w]) == [s for s in range(rounds) if s % 3 == 2]
        assert len(landed[w]) == rounds - len(refused[w])
    assert set(landed[3]) <= {s for (w, s) in batches if w == 3}

    # identity values: unique, on the grid of start and step, increasing per writer
    ids = rows["id"].to_pylist()
    assert len(set(ids)) == len(ids)
    assert all(v >= 10 and (v - 10) % 3 == 0 for v in ids)
    for w in range(4):
        mine = rows.filter(pc.equal(rows["writer"], w)).sort_by(
            [("seq", "ascending"), ("i", "ascending")]
        )
        values = mine["id"].to_pylist()
        assert values == sorted(values) and len(set(values)) == len(values), (w, values)
    # the mark covers every value given out, so the next write continues above them
    t = lakelog.open_table(uri)
    t.append(pa.table({"writer": [9], "seq": [0], "i": [0], "amount": [1.0]}))
    after = t.snapshot().to_arrow().filter(pc.equal(pc.field("writer"), 9))["id"][0].as_py()
    assert after > max(ids)
