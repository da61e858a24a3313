"""``lakelog delete`` and ``lakelog history`` as a shell user runs them: real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from _rowlevel_helpers import make_table, table_rows

CLI = [sys.executable, "-m", "lakelog.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def test_dry_run_lists_files_and_rows_and_changes_nothing(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=3)
    v = t.version
    p = run("delete", t.uri, "--where", "id < 15", "--dry-run")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["path", "rows", "deleted"]
    assert [line.split()[1:] for line in lines[1:3]] == [["10", "10"], ["10", "5"]]
    assert "rows to delete         15" in p.stdout
    assert "dry run: nothing was changed" in p.stdout
    assert t.refresh().version == v


def test_delete_commits_and_history_shows_it(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=3)
    p = run("delete", t.uri, "--where", "note = 'n12' or id >= 25")
    assert p.returncode == 0, p.stderr
    assert "rows deleted           6" in p.stdout and "version                4" in p.stdout
    assert len(table_rows(t)) == 24
    p = run("history", t.uri, "--json", "--limit", "1")
    (h,) = json.loads(p.stdout)
    assert h["operation"] == "DELETE"
    assert h["parameters"] == {"predicate": "note = 'n12' or id >= 25"}
    assert h["metrics"]["num_deleted_rows"] == 6 and h["metrics"]["num_removed_files"] == 2
    p = run("history", t.uri, "--limit", "1")
    assert "DELETE" in p.stdout and "num_deleted_rows" in p.stdout
    # matching nothing: exit 0, nothing committed
    p = run("delete", t.uri, "--where", "id = 12345", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["committed"] is False
    assert t.refresh().version == 4


def test_errors_are_one_line_in_the_users_words(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=1)
    p = run("delete", t.uri, "--filter", "nope = 1")
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.startswith("lakelog: error: expected a column of the table")
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    p = run("delete", t.uri, "--filter", "")
    assert p.returncode == 1 and 'pass "true"' in p.stderr
    p = run("delete", t.uri)  # --filter (or its old name --where) is required
    assert p.returncode == 2 and "required: --filter\n" in p.stderr
    p = run("delete", str(tmp_path / "missing"), "--where", "true")
    assert p.returncode == 1 and "expected a lakelog table" in p.stderr
    assert t.refresh().snapshot().num_rows == 10
