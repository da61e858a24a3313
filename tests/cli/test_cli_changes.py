"""``lakelog changes``: the change feed in the shell, as text, JSON and CSV; errors in the
words of its flags."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import lakelog
from lakelog.cli import main


@pytest.fixture
def table(tmp_path: Path) -> lakelog.Table:
    t = lakelog.create_table(
        str(tmp_path / "t"),
        pa.schema([("id", pa.int64()), ("day", pa.string())]),
        partition_by=["day"],
    )
    t.append(pa.table({"id": [1, 2], "day": ["d1", "d2"]}))  # version 1
    t.append(pa.table({"id": [3], "day": ["d1"]}))  # version 2
    t.overwrite(pa.table({"id": [4], "day": ["d2"]}), partitions=[{"day": "d2"}])  # 3
    return t


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json(table: lakelog.Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "changes", table.uri, "--from", "2", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["_change_type"], r["_commit_version"], r["id"], r["day"]) for r in rows] == [
        ("insert", 2, 3, "d1"),
        ("delete", 3, 2, "d2"),
        ("insert", 3, 4, "d2"),
    ]
    ts = {h.version: h.timestamp_ms for h in table.history()}
    assert rows[0]["_commit_timestamp"].startswith(
        str(pa.scalar(ts[2], pa.timestamp("ms", tz="UTC")).as_py())[:19]
    )


@pytest.mark.parametrize("flag", ["--filter", "--where"])  # --where: its old name
def test_to_columns_and_filter(
    table: lakelog.Table, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    code, out, err = _run(capsys, "changes", table.uri, "--from", "1", "--to", "2", "--json")
    assert code == 0, err
    assert sorted(r["id"] for r in json.loads(out)) == [1, 2, 3]
    argv = ["changes", table.uri, "--from", "1", "--columns", "id", flag, "day = 'd2'"]
    code, out, err = _run(capsys, *argv, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [sorted(r) for r in rows[:1]] == [
        ["_change_type", "_commit_timestamp", "_commit_version", "id"]
    ]
    assert [(r["_change_type"], r["id"]) for r in rows] == [
        ("insert", 2),
        ("delete", 2),
        ("insert", 4),
    ]
    code, out, _ = _run(capsys, "changes", table.uri, "--from", "4", "--json")
    assert code == 0 and json.loads(out) == []


def test_csv(table: lakelog.Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "changes", table.uri, "--from", "1", "--csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == ["id", "day", "_change_type", "_commit_version", "_commit_timestamp"]
    assert [(r["_change_type"], r["_commit_version"], r["id"]) for r in rows] == [
        ("insert", "1", "1"),
        ("insert", "1", "2"),
        ("insert", "2", "3"),
        ("delete", "3", "2"),
        ("insert", "3", "4"),
    ]
    code, out, _ = _run(capsys, "changes", table.uri, "--from", "4", "--csv")
    assert code == 0 and out.strip() == (
        '"id","day","_change_type","_commit_version","_commit_timestamp"'
    )


def test_text(table: lakelog.Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "changes", table.uri, "--from", "3")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["id", "day", "_change_type", "_commit_version", "_commit_timestamp"]
    assert [line.split()[:4] for line in lines[1:]] == [
        ["2", "d2", "delete", "3"],
        ["4", "d2", "insert", "3"],
    ]


def test_a_start_by_time(table: lakelog.Table, capsys: pytest.CaptureFixture[str]) -> None:
    ts = {h.version: h.timestamp_ms for h in table.history()}
    when = pa.scalar(ts[3], pa.timestamp("ms", tz="UTC")).as_py().isoformat()
    code, out, err = _run(capsys, "changes", table.uri, "--from", when, "--json")
    assert code == 0, err
    assert {r["_commit_version"] for r in json.loads(out)} == {3}


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lakelog.cli", *argv], capture_output=True, text=True, timeout=120
    )


def test_errors_name_the_flags(table: lakelog.Table, tmp_path: Path) -> None:
    bad = _cli("changes", table.uri, "--from", "yesterday")
    assert bad.returncode == 2 and bad.stdout == ""
    assert "argument --from: expected a version" in bad.stderr and "'yesterday'" in bad.stderr
    missing = _cli("changes", table.uri)
    assert missing.returncode == 2 and "--from" in missing.stderr
    table.expire_snapshots(older_than=dt.timedelta(0), retain_last=1)
    expired = _cli("changes", table.uri, "--from", "1")
    assert expired.returncode == 1 and expired.stdout == ""
    line = expired.stderr.strip()
    assert line.startswith("lakelog: error: ") and "\n" not in line
    assert "found --from 1" in line and "start=" not in line
    too_far = _cli("changes", table.uri, "--from", "4", "--to", "99")
    assert too_far.returncode == 1 and "found --to 99" in too_far.stderr


def test_an_incomplete_range_says_how_to_turn_the_feed_on(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": [1, 2]}))
    t.delete("id = 1")
    proc = _cli("changes", t.uri, "--from", "1")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "commit 2" in proc.stderr and "lakelog.change_data_feed=true" in proc.stderr
    # the advice is the command that turns the feed on, for this table, runnable as written
    hint = proc.stderr.split("`")[1]
    assert hint == f"lakelog set-properties {t.uri} lakelog.change_data_feed=true"
    assert "table.set_properties" not in proc.stderr
    turned_on = _cli(*shlex.split(hint)[1:])
    assert turned_on.returncode == 0, turned_on.stderr
    assert t.refresh().properties["lakelog.change_data_feed"] == "true"
    t.delete("id = 2")
    after = _cli("changes", t.uri, "--from", "4", "--json")
    assert after.returncode == 0, after.stderr
    assert [(r["_change_type"], r["id"]) for r in json.loads(after.stdout)] == [("delete", 2)]
