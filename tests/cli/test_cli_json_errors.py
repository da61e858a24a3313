"""With ``--json`` a failure is one JSON object on stderr, ``{"error": "<ClassName>",
"message": "..."}``, with the exit status of the same failure without it (1, 2 for usage
errors); stdout stays empty. Every case runs the real program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog

CLI = [sys.executable, "-m", "lakelog.cli"]


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=120)


def _json_error(proc: subprocess.CompletedProcess[str], status: int) -> dict[str, Any]:
    """The failure's one JSON object (stderr), after checking the run failed with
    ``status`` and printed nothing else."""
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    value = json.loads(lines[0])
    assert isinstance(value, dict) and sorted(value) == ["error", "message"], value
    assert isinstance(value["message"], str) and value["message"]
    return value


def _plain_error(proc: subprocess.CompletedProcess[str], status: int) -> str:
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    last = proc.stderr.splitlines()[-1]
    assert ": error: " in last and not last.startswith("{"), proc.stderr
    return last


@pytest.fixture
def table(tmp_path: Path) -> lakelog.Table:
    t = lakelog.create_table(
        str(tmp_path / "t"),
        pa.schema([("id", pa.int64()), ("day", pa.string())]),
        partition_by=["day"],
    )
    t.append(pa.table({"id": [1, 2], "day": ["d1", "d2"]}))
    return t


def test_library_errors(table: lakelog.Table, tmp_path: Path) -> None:
    """A missing table, a bad filter, an unknown property, a failed feed: the class of
    the library's error and its message in the CLI's words, exit 1 as without --json."""
    ok = _cli("info", table.uri, "--json")  # success: the result, no error
    assert ok.returncode == 0 and ok.stderr == "" and json.loads(ok.stdout)["version"] == 1
    missing = str(tmp_path / "nope")
    err = _json_error(_cli("history", missing, "--json"), 1)
    assert err["error"] == "TableNotFoundError"
    assert "expected a lakelog table" in err["message"]
    _plain_error(_cli("history", missing), 1)
    assert not os.path.exists(missing)

    err = _json_error(_cli("files", table.uri, "--filter", "nope = 1", "--json"), 1)
    assert err["error"].endswith("Error") and "nope" in err["message"]
    err = _json_error(_cli("delete", table.uri, "--filter", "nope = 1", "--json"), 1)
    assert "expected a column of the table" in err["message"]

    err = _json_error(_cli("set-properties", table.uri, "lakelog.compresion=zstd", "--json"), 1)
    assert err["error"] == "InvalidArgumentError"
    assert "did you mean 'lakelog.compression'?" in err["message"]

    # flags, not keywords, in the message (the same translation as the text line)
    err = _json_error(_cli("expire", table.uri, "--retain-last", "0", "--json"), 1)
    assert "--retain-last" in err["message"] and "retain_last" not in err["message"]

    table.delete("id = 1")  # without the change data feed
    err = _json_error(_cli("changes", table.uri, "--from", "1", "--json"), 1)
    assert err["error"] == "ChangeFeedError"
    assert f"lakelog set-properties {table.uri} lakelog.change_data_feed=true" in err["message"]
    assert table.refresh().version == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["frobnicate", "--json"],  # unknown command
        ["delete", "{uri}", "--json"],  # a required option missing
        ["history", "{uri}", "--limit", "x", "--json"],  # a bad option value
        ["history", "{uri}", "--json", "--nope"],  # an unknown option
        ["changes", "{uri}", "--from", "yesterday", "--json"],  # a bad type
        ["unset-properties", "{uri}", "--json"],  # a positional missing
        ["info", "{uri}", "--js"],  # --json abbreviated, as argparse accepts it
    ],
)
def test_usage_errors(table: lakelog.Table, argv: list[str]) -> None:
    """argparse's errors too, exit 2; the usage text stays out of a JSON error."""
    argv = [a.format(uri=table.uri) for a in argv]
    if argv[-1] == "--js":  # a valid command: make it fail on usage instead
        argv = [*argv, "--version", "x"]
    err = _json_error(_cli(*argv), 2)
    assert err["error"] == "UsageError"
    assert err["message"].startswith("lakelog")
    assert "usage:" not in err["message"]
    without = [a for a in argv if a not in ("--json", "--js")]
    _plain_error(_cli(*without), 2)


def test_usage_error_names_the_filter_once(table: lakelog.Table) -> None:
    """The message names --filter alone (not its hidden old name); a ``--json`` after
    ``--`` is an argument, not the flag, and the usage error stays text."""
    err = _json_error(_cli("delete", table.uri, "--json"), 2)
    assert err["message"] == "lakelog delete: the following arguments are required: --filter"
    _plain_error(_cli("history", "--", table.uri, "--json"), 2)


def test_unexpected_errors(table: lakelog.Table, tmp_path: Path) -> None:
    """An OS-level surprise (a commit that is a folder): its class, and the hint about
    --debug in the message; --debug adds the traceback before the object."""
    commit = tmp_path / "t" / "_lakelog" / f"{1:020d}.json"
    commit.unlink()
    commit.mkdir()
    err = _json_error(_cli("history", table.uri, "--json"), 1)
    assert err["error"] in ("IsADirectoryError", "PermissionError", "CorruptLogError")
    assert f"{1:020d}.json" in err["message"]
    proc = _cli("history", table.uri, "--json", "--debug")
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert json.loads(proc.stderr.splitlines()[-1])["error"] == err["error"]
