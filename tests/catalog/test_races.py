"""Real OS processes racing creates, renames and drops of one name, on SQLite and on
PostgreSQL: the database's constraints give exactly one winner per name, the losers a
one-line typed error, and no folder is left behind."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _processes import race, spawn

import lakelog

pytestmark = pytest.mark.processes

RACERS = 4

CHILD = """
import json, sys
import pyarrow as pa
import lakelog
from lakelog.errors import LakelogError

url, warehouse, op, name, arg = sys.argv[1:6]
if op != "namespace":
    catalog = lakelog.connect_catalog(url, warehouse=warehouse)
print("ready", flush=True)
sys.stdin.readline()
try:
    if op == "namespace":  # the first connects of a new catalog database race too
        catalog = lakelog.connect_catalog(url, warehouse=warehouse)
    if op == "create":
        table = catalog.create_table(name, pa.schema([("id", pa.int64())]))
        table.append(pa.table({"id": [int(arg)]}))
    elif op == "rename":
        catalog.rename_table(name, arg)
    elif op == "drop":
        catalog.drop_table(name, purge=True)
    elif op == "namespace":
        catalog.create_namespace(arg)
    out = {"ok": True, "arg": arg}
except LakelogError as e:
    out = {"ok": False, "arg": arg, "error": type(e).__name__, "lines": len(str(e).splitlines())}
catalog.close()
print(json.dumps(out))
"""


def run_race(place: Any, op: str, name: str, args: list[str]) -> list[dict[str, Any]]:
    procs = [
        spawn(CHILD, place.url, str(place.warehouse), op, name, arg, gated=True) for arg in args
    ]
    return race(procs)


def folders(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.glob("*/*") if p.is_dir())


def one_winner(results: list[dict[str, Any]], loser_error: str) -> str:
    winners = [r["arg"] for r in results if r["ok"]]
    assert len(winners) == 1, results
    losers = [r for r in results if not r["ok"]]
    assert {r["error"] for r in losers} == {loser_error}, losers
    assert all(r["lines"] == 1 for r in losers)
    return str(winners[0])


def test_racing_creates_of_one_name_make_one_table(catalog: Any, place: Any) -> None:
    catalog.create_namespace("sales")
    results = run_race(place, "create", "sales.orders", [str(i) for i in range(RACERS)])
    winner = one_winner(results, "TableAlreadyExistsError")
    assert catalog.list_tables() == ["sales.orders"]
    table = catalog.load_table("sales.orders")
    assert table.version == 1
    assert table.snapshot().to_arrow().column("id").to_pylist() == [int(winner)]
    assert folders(place.warehouse) == ["sales/orders"]


def test_racing_renames_of_one_name_move_it_once(catalog: Any, place: Any) -> None:
    catalog.create_namespace("sales")
    table = catalog.create_table("sales.orders", pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2]}))
    targets = [f"sales.moved_{i}" for i in range(RACERS)]
    results = run_race(place, "rename", "sales.orders", targets)
    winner = one_winner(results, "NoSuchTableError")
    assert catalog.list_tables() == [winner]
    moved = catalog.load_table(winner)
    assert moved.uri == table.uri and moved.snapshot().num_rows == 2
    assert folders(place.warehouse) == ["sales/orders"]


def test_racing_purging_drops_of_one_name_drop_it_once(catalog: Any, place: Any) -> None:
    catalog.create_namespace("sales")
    catalog.create_table("sales.orders", pa.schema([("id", pa.int64())])).append(
        pa.table({"id": [1]})
    )
    catalog.create_table("sales.kept", pa.schema([("id", pa.int64())]))
    results = run_race(place, "drop", "sales.orders", [str(i) for i in range(RACERS)])
    one_winner(results, "NoSuchTableError")
    assert catalog.list_tables() == ["sales.kept"]
    assert folders(place.warehouse) == ["sales/kept"]
    assert lakelog.open_table(str(place.warehouse / "sales" / "kept")).version == 0


def test_racing_first_connects_set_the_catalog_up_once(place: Any) -> None:
    results = run_race(place, "namespace", "-", [f"ns{i}" for i in range(RACERS)])
    assert all(r["ok"] for r in results), results
    with place.connect() as catalog:
        assert catalog.list_namespaces() == [f"ns{i}" for i in range(RACERS)]
        assert catalog.warehouse == f"file://{place.warehouse}"


CRASH = """
import sys
import pyarrow as pa
import lakelog

url, warehouse, op = sys.argv[1:4]
catalog = lakelog.connect_catalog(url, warehouse=warehouse)
if op == "create":
    catalog.create_table("sales.orders", pa.schema([("id", pa.int64())]))
else:
    catalog.drop_table("sales.orders", purge=True)
"""


def age_names(place: Any, seconds: int) -> None:
    """Make every name's last change ``seconds`` old (as time passing after a crash)."""
    import sqlalchemy as sa

    engine = sa.create_engine(place.url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        stale = int((time.time() - seconds) * 1000)
        conn.execute(sa.text(f"UPDATE lakelog_tables SET updated_ms = {stale}"))
    engine.dispose()


@pytest.mark.parametrize(
    ("point", "state", "folder_left"),
    [
        ("catalog:create:after-insert", "being created", False),
        ("catalog:create:after-table", "being created", True),
        ("catalog:drop:after-claim", "being dropped", True),
    ],
)
def test_a_crash_mid_change_leaves_a_name_no_one_loads_and_drop_clears_it(
    catalog: Any, place: Any, point: str, state: str, folder_left: bool
) -> None:
    catalog.create_namespace("sales")
    if point.startswith("catalog:drop"):
        catalog.create_table("sales.orders", pa.schema([("id", pa.int64())]))
    op = "create" if point.startswith("catalog:create") else "drop"
    child = spawn(CRASH, place.url, str(place.warehouse), op, LAKELOG_CRASH_AT=point)
    child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL
    assert (place.warehouse / "sales" / "orders").exists() == folder_left
    with pytest.raises(lakelog.NoSuchTableError, match=state):
        catalog.load_table("sales.orders")
    assert catalog.list_tables() == []
    with pytest.raises(lakelog.TableAlreadyExistsError):
        catalog.create_table("sales.orders", pa.schema([("id", pa.int64())]))
    with pytest.raises(lakelog.NoSuchTableError, match="10 minutes old"):
        catalog.drop_table("sales.orders", purge=True)  # may still be under way
    age_names(place, 11 * 60)
    catalog.drop_table("sales.orders", purge=True)
    assert folders(place.warehouse) == [] and catalog.count_tables() == 0
    catalog.create_table("sales.orders", pa.schema([("id", pa.int64())]))
    assert catalog.load_table("sales.orders").version == 0
