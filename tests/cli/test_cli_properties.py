"""``lakelog set-properties`` and ``lakelog unset-properties``: one metadata commit
through the library's property API (and ``Table.unset_properties`` under it), what
changed printed as text or JSON, typos refused with the closest name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
from lakelog.errors import InvalidArgumentError

CLI = [sys.executable, "-m", "lakelog.cli"]


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=120)


def _json(*argv: str) -> Any:
    proc = _cli(*argv, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def table(tmp_path: Path) -> lakelog.Table:
    t = lakelog.create_table(
        str(tmp_path / "t"), pa.schema([("id", pa.int64())]), properties={"team": "ingest"}
    )
    t.append(pa.table({"id": [1, 2, 3]}))
    return t


def test_set_properties(table: lakelog.Table) -> None:
    proc = _cli("set-properties", table.uri, "lakelog.change_data_feed=TRUE", "owner=ana")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "lakelog.change_data_feed  (unset) -> true",
        "owner                     (unset) -> ana",
        "committed version 2",
    ]
    t = table.refresh()
    assert t.version == 2
    assert t.properties["lakelog.change_data_feed"] == "true"  # stored as checked
    assert t.properties["owner"] == "ana" and t.properties["team"] == "ingest"
    (h, *_) = t.history(limit=1)
    assert h.operation == "SET PROPERTIES"
    # the feed is on: the next delete is in it
    t.delete("id = 2")
    assert [r["id"] for r in t.changes(3).to_arrow().to_pylist()] == [2]


def test_set_properties_json_and_no_op(table: lakelog.Table) -> None:
    out = _json("set-properties", table.uri, "team=etl")
    assert out == {
        "uri": table.uri,
        "version": 2,
        "committed": True,
        "changes": [{"key": "team", "before": "ingest", "after": "etl"}],
    }
    # the values the table has: nothing to commit (a metadata commit conflicts with
    # every concurrent writer)
    out = _json("set-properties", table.uri, "team=etl")
    assert out["committed"] is False and out["version"] == 2
    assert out["changes"] == [{"key": "team", "before": "etl", "after": "etl"}]
    assert table.refresh().version == 2


def test_set_properties_refuses_typos_and_bad_values(table: lakelog.Table) -> None:
    proc = _cli("set-properties", table.uri, "lakelog.change_data_fed=true")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "did you mean 'lakelog.change_data_feed'?" in proc.stderr
    proc = _cli("set-properties", table.uri, "lakelog.deletion_vectors=maybe")
    assert proc.returncode == 1 and "lakelog.deletion_vectors" in proc.stderr
    proc = _cli("set-properties", table.uri, "no-equals-sign")
    assert proc.returncode == 1 and "expected KEY=VALUE" in proc.stderr
    proc = _cli("set-properties", table.uri, "a=1", "a=2")
    assert proc.returncode == 1 and "'a' twice" in proc.stderr
    assert table.refresh().version == 1


def test_unset_properties(table: lakelog.Table) -> None:
    table.set_properties({"lakelog.deletion_vectors": "false"})
    proc = _cli("unset-properties", table.uri, "team", "lakelog.deletion_vectors")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "team                      ingest -> (unset)",
        "lakelog.deletion_vectors  false -> (unset)",
        "committed version 3",
    ]
    t = table.refresh()
    assert "team" not in t.properties and "lakelog.deletion_vectors" not in t.properties
    assert t.history(limit=1)[0].operation == "UNSET PROPERTIES"


def test_unset_properties_missing_and_typos(table: lakelog.Table) -> None:
    proc = _cli("unset-properties", table.uri, "teem")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "['teem'] not set" in proc.stderr and "did you mean 'team'?" in proc.stderr
    assert "--missing-ok" in proc.stderr and "missing_ok" not in proc.stderr
    proc = _cli("unset-properties", table.uri, "lakelog.delta_veiw", "--json")
    assert proc.returncode == 1
    err = json.loads(proc.stderr)
    assert err["error"] == "InvalidArgumentError"
    assert "did you mean 'lakelog.delta_view'?" in err["message"]
    out = _json("unset-properties", table.uri, "teem", "--missing-ok")
    assert out["committed"] is False and out["version"] == 1
    assert out["changes"] == [{"key": "teem", "before": None, "after": None}]
    assert table.refresh().version == 1


def test_table_unset_properties(table: lakelog.Table) -> None:
    """The library call under the command."""
    table.set_properties({"a": "1", "b": "2"})
    result = table.unset_properties(["a"])
    assert not result.skipped and result.version == 3
    assert table.refresh().properties.get("a") is None and table.properties["b"] == "2"
    with pytest.raises(InvalidArgumentError, match="missing_ok=True"):
        table.unset_properties("a")
    skipped = table.unset_properties("a", missing_ok=True)
    assert skipped.skipped and skipped.version == 3 and table.refresh().version == 3
    with pytest.raises(InvalidArgumentError, match=r"did you mean 'lakelog\.compression'"):
        table.unset_properties(["lakelog.compresion"])


def test_help_and_hint_name_the_commands() -> None:
    proc = _cli("changes", "--help")
    assert "set-properties URI" in proc.stdout  # not cut at the hyphen
    assert "set-properties URI lakelog.change_data_feed=true" in " ".join(proc.stdout.split())
    proc = _cli("--help")
    assert "set-properties" in proc.stdout and "unset-properties" in proc.stdout
