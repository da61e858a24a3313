"""``lakelog info``, ``history`` and ``files``: text and JSON output, errors, a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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
        properties={"team": "ingest"},
    )
    t.append(pa.table({"id": [1, 2, 3], "day": ["d1", "d1", "d2"]}))
    t.append(pa.table({"id": [4], "day": ["d2"]}))
    return t


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = _run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_info(table: lakelog.Table, capsys: pytest.CaptureFixture[str]) -> None:
    info = _json(capsys, "info", table.uri)
    assert info["version"] == 2
    assert info["num_files"] == 3 and info["num_rows"] == 4
    assert info["partition_by"] == ["day"]
    # lakelog.deletion_vectors: the default of new tables
    assert info["properties"] == {"team": "ingest", "lakelog.deletion_vectors": "true"}
    assert [c["name"] for c in info["schema"]] == ["id", "day"]
    assert info["table_id"] == table.metadata.table_id
    assert _json(capsys, "info", table.uri, "--version", "1")["num_rows"] == 3
    code, out, _ = _run(capsys, "info", table.uri)
    assert code == 0
    assert "version       2" in out and "num_rows      4" in out
    assert "partition_by  day" in out and "team = ingest" in out and "id: int64" in out


def test_history(table: lakelog.Table, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _json(capsys, "history", table.uri)
    assert [r["version"] for r in rows] == [2, 1, 0]
    assert [r["operation"] for r in rows] == ["APPEND", "APPEND", "CREATE TABLE"]
    assert rows[0]["metrics"]["num_rows"] == 1 and rows[0]["read_version"] == 1
    assert rows[-1]["parameters"] == {"partition_by": ["day"]}
    assert len(_json(capsys, "history", table.uri, "--limit", "1")) == 1
    code, out, _ = _run(capsys, "history", table.uri)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:3] == ["version", "timestamp", "operation"]
    assert [line.split()[0] for line in lines[1:]] == ["2", "1", "0"]


def test_files(table: lakelog.Table, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _json(capsys, "files", table.uri)
    assert sorted(r["path"] for r in rows) == sorted(f.path for f in table.snapshot().files())
    assert sum(r["num_rows"] for r in rows) == 4
    assert {r["partition"]["day"] for r in rows} == {"d1", "d2"}
    old = _json(capsys, "files", table.uri, "--version", "1")
    assert len(old) == 2
    code, out, _ = _run(capsys, "files", table.uri)
    assert code == 0 and out.strip().splitlines()[-1].startswith("3 files, ")
    empty = lakelog.create_table(table.uri + "-empty", pa.schema([("id", pa.int64())]))
    code, out, _ = _run(capsys, "files", empty.uri)
    assert code == 0 and "(none)" in out and "0 files" in out


def test_errors_exit_1_with_a_message(
    tmp_path: Path, table: lakelog.Table, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "info", str(tmp_path / "missing"))
    assert code == 1 and out == ""
    assert err.startswith("lakelog: error: expected a lakelog table")
    code, _, err = _run(capsys, "files", table.uri, "--version", "9")
    assert code == 1 and "between 0 and 2" in err
    code, _, err = _run(capsys, "info", table.uri, "-o", "novalue")
    assert code == 1 and "KEY=VALUE" in err
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2
    capsys.readouterr()


def test_storage_options_reach_s3(s3_backend: Any, capsys: pytest.CaptureFixture[str]) -> None:
    lakelog.write_table(
        s3_backend.uri, pa.table({"id": [1, 2]}), storage_options=s3_backend.storage_options
    )
    opts = s3_backend.storage_options
    args = [
        "-o",
        f"key={opts['key']}",
        "-o",
        f"secret={opts['secret']}",
        "-o",
        f"endpoint_url={opts['client_kwargs']['endpoint_url']}",
    ]
    info = _json(capsys, "info", s3_backend.uri, *args)
    assert info["num_rows"] == 2 and info["uri"] == s3_backend.uri


def test_real_process(table: lakelog.Table) -> None:
    for argv in (["info", table.uri, "--json"], ["history", table.uri], ["files", table.uri]):
        proc = subprocess.run(
            [sys.executable, "-m", "lakelog.cli", *argv],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
        if argv[0] == "info":
            assert json.loads(proc.stdout)["version"] == 2
        else:
            assert len(proc.stdout.splitlines()) >= 4
    proc = subprocess.run(
        [sys.executable, "-m", "lakelog.cli", "info", table.uri + "-nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and proc.stderr.startswith("lakelog: error:")
