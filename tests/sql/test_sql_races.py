"""Real OS processes racing SQL statements on one catalog table, on SQLite and on the
test session's PostgreSQL server: ``lakelog.sql.execute("MERGE INTO ...")`` from four
processes at once with disjoint and overlapping keys (updates of the same rows, inserts
of the same new key) loses no row and doubles none; every acknowledged MERGE is one
commit of the table's history, each applied on the rows the one before it left, so the
final rows are exactly those merges replayed in commit order. ``CREATE TABLE``, ``ALTER
TABLE ... RENAME TO`` and ``DROP TABLE`` of one name raced through SQL leave one winner,
the losers one typed line each."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from _processes import race, spawn

pytestmark = pytest.mark.processes

WRITERS = 4
ROUNDS = 3
INITIAL = 100  # ids 0..99, v = 0

MERGE_CHILD = """
import json, sys
import lakelog
from lakelog.errors import LakelogError
from lakelog.sql import execute

url, warehouse, writer, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sources = json.loads(sys.argv[5])
catalog = lakelog.connect_catalog(url, warehouse=warehouse)
print("ready", flush=True)
sys.stdin.readline()
done = []
for r in range(rounds):
    values = ", ".join(f"({i}, {v}, '{tag}')" for i, v, tag in sources[r])
    statement = (
        "MERGE INTO ns.t AS t USING (SELECT * FROM VALUES " + values + " AS s(id, v, tag)) AS s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    try:
        out = execute(statement, catalog=catalog).to_pylist()[0]
        done.append({"round": r, "ok": True, "metrics": out})
    except LakelogError as e:
        done.append({"round": r, "ok": False, "error": type(e).__name__, "text": str(e)})
catalog.close()
print(json.dumps({"writer": writer, "merges": done}))
"""


def source(writer: int, r: int) -> list[tuple[int, int, str]]:
    """The rows writer ``writer`` merges in round ``r``: its own rows to update and to
    insert (disjoint from every other writer's), rows every writer updates, and a new key
    every writer inserts in that round."""
    tag = f"w{writer}r{r}"
    v = 100 * (writer + 1) + r
    own_updates = [writer * 10 + r * 3 + k for k in range(3)]
    shared_updates = [90, 91, 92]
    own_inserts = [1000 + writer * 100 + r * 10 + k for k in range(3)]
    shared_insert = [5000 + r]
    return [(i, v, tag) for i in own_updates + shared_updates + own_inserts + shared_insert]


def test_racing_sql_merges_lose_and_double_no_row(catalog: Any, place: Any) -> None:
    catalog.create_namespace("ns")
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("tag", pa.string())])
    table = catalog.create_table("ns.t", schema, properties={"lakelog.change_data_feed": "true"})
    table.append(
        pa.table(
            {"id": list(range(INITIAL)), "v": [0] * INITIAL, "tag": ["init"] * INITIAL},
            schema=schema,
        )
    )
    start = table.version
    sources = {w: [source(w, r) for r in range(ROUNDS)] for w in range(WRITERS)}
    procs = [
        spawn(
            MERGE_CHILD,
            place.url,
            str(place.warehouse),
            str(w),
            str(ROUNDS),
            json.dumps(sources[w]),
            gated=True,
        )
        for w in range(WRITERS)
    ]
    results = race(procs)
    acknowledged = {
        f"w{res['writer']}r{m['round']}": m["metrics"]
        for res in results
        for m in res["merges"]
        if m["ok"]
    }
    refused = [m for res in results for m in res["merges"] if not m["ok"]]
    assert all(m["error"] == "CommitConflictError" for m in refused), refused
    assert len(acknowledged) >= WRITERS  # the race let merges through, not just refusals

    # each MERGE commit is one acknowledged statement, found by its rows' tag
    table.refresh()
    merges = [h for h in reversed(table.history()) if h.version > start]
    assert all(h.operation == "MERGE" for h in merges), [h.operation for h in merges]
    feed = table.changes(start + 1).to_arrow().to_pylist()
    order = []
    for h in merges:
        written = {
            c["tag"]
            for c in feed
            if c["_commit_version"] == h.version
            and c["_change_type"] in ("insert", "update_postimage")
        }
        assert len(written) == 1, (h.version, written)
        order.append(written.pop())
    assert sorted(order) == sorted(acknowledged), (order, acknowledged)  # none lost, none twice

    # the final rows: the acknowledged merges replayed in commit order, nothing more
    expected = {i: (0, "init") for i in range(INITIAL)}
    inserted_by: dict[str, int] = {}
    for tag in order:
        w, r = int(tag[1 : tag.index("r")]), int(tag[tag.index("r") + 1 :])
        inserted_by[tag] = sum(1 for i, _, _ in source(w, r) if i not in expected)
        for i, v, t in source(w, r):
            expected[i] = (v, t)
    rows = table.snapshot().to_arrow().to_pylist()
    assert len(rows) == len({r["id"] for r in rows})  # no key twice
    assert {r["id"]: (r["v"], r["tag"]) for r in rows} == expected
    for tag, metrics in acknowledged.items():
        assert metrics["num_inserted_rows"] == inserted_by[tag], (tag, metrics)
        n = len(source(int(tag[1 : tag.index("r")]), 0))
        assert metrics["num_updated_rows"] + metrics["num_inserted_rows"] == n


DDL_CHILD = """
import json, sys
import lakelog
from lakelog.errors import LakelogError
from lakelog.sql import execute

url, warehouse, statement, arg = sys.argv[1:5]
catalog = lakelog.connect_catalog(url, warehouse=warehouse)
print("ready", flush=True)
sys.stdin.readline()
try:
    execute(statement, catalog=catalog)
    out = {"ok": True, "arg": arg}
except LakelogError as e:
    out = {"ok": False, "arg": arg, "error": type(e).__name__, "lines": len(str(e).splitlines())}
catalog.close()
print(json.dumps(out))
"""


def ddl_race(place: Any, statements: dict[str, str]) -> str:
    procs = [
        spawn(DDL_CHILD, place.url, str(place.warehouse), text, arg, gated=True)
        for arg, text in statements.items()
    ]
    results = race(procs)
    winners = [r["arg"] for r in results if r["ok"]]
    assert len(winners) == 1, results
    losers = [r for r in results if not r["ok"]]
    assert len({r["error"] for r in losers}) == 1 and all(r["lines"] == 1 for r in losers)
    return str(winners[0])


def test_racing_sql_creates_renames_and_drops_leave_one_winner(catalog: Any, place: Any) -> None:
    catalog.create_namespace("ns")
    winner = ddl_race(
        place,
        {
            str(i): f"CREATE TABLE ns.t USING lakelog AS SELECT CAST({i} AS BIGINT) AS id"
            for i in range(WRITERS)
        },
    )
    t = catalog.load_table("ns.t")
    assert t.snapshot().to_arrow().column("id").to_pylist() == [int(winner)]
    moved = ddl_race(
        place, {f"ns.m{i}": f"ALTER TABLE ns.t RENAME TO ns.m{i}" for i in range(WRITERS)}
    )
    assert catalog.list_tables("ns") == [moved]
    assert catalog.load_table(moved).uri == t.uri
    ddl_race(place, {str(i): f"DROP TABLE {moved}" for i in range(WRITERS)})
    assert catalog.list_tables("ns") == []
