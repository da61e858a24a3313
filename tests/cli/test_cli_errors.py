"""The CLI speaks to a shell user: one ``lakelog: error:`` line per failure, flags not
keywords, exit statuses a script can rely on. Every case runs the real program."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa

import lakelog
from lakelog.cli import build_parser
from lakelog.cli.messages import translate

CLI = [sys.executable, "-m", "lakelog.cli"]


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _one_error_line(proc: subprocess.CompletedProcess[str], status: int = 1) -> str:
    """The single error line of a failed run (and nothing on stdout)."""
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lakelog: error: "), proc.stderr
    assert proc.stdout == ""
    return lines[0]


def _table(path: Path) -> lakelog.Table:
    t = lakelog.create_table(
        str(path),
        pa.schema([("id", pa.int64()), ("day", pa.date32())]),
        partition_by=["day"],
    )
    for i in range(3):
        t.append(pa.table({"id": [i], "day": [dt.date(2026, 11, 1 + i % 2)]}))
    return t


def test_info_on_a_file(tmp_path: Path) -> None:
    f = tmp_path / "data.csv"
    f.write_text("a,b\n")
    line = _one_error_line(_cli("info", str(f)))
    assert "data.csv" in line
    _one_error_line(_cli("history", str(f / "below")))


def test_missing_table(tmp_path: Path) -> None:
    line = _one_error_line(_cli("history", str(tmp_path / "nope")))
    assert "expected a lakelog table" in line
    assert not (tmp_path / "nope").exists()


def test_plan_files_that_cannot_be_read_or_written(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    line = _one_error_line(_cli("compact", t.uri, "--plan", str(tmp_path / "none.json")))
    assert "--plan" in line and "none.json" in line
    out = tmp_path / "no-folder" / "plan.json"
    line = _one_error_line(_cli("compact", t.uri, "--dry-run", "--plan-out", str(out)))
    assert "--plan-out" in line and "plan.json" in line


def test_bad_partition_value(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    before = sorted(os.listdir(tmp_path / "t" / "_lakelog"))
    line = _one_error_line(_cli("compact", t.uri, "--partition", "day=2026-11-99"))
    assert "--partition day=VALUE" in line and "'2026-11-99'" in line and "date32" in line
    assert sorted(os.listdir(tmp_path / "t" / "_lakelog")) == before
    line = _one_error_line(_cli("compact", t.uri, "--partition", "id=3"))
    assert "--partition on a partition column ['day']" in line


def test_messages_name_flags_not_keywords(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    line = _one_error_line(_cli("vacuum", t.uri, "--older-than", "0s", "--no-dry-run"))
    assert "Pass --force if no writer" in line and "expected --older-than >= " in line
    assert "force=True" not in line and "older_than " not in line
    assert "lakelog.vacuum.min_age_seconds" in line  # property keys stay as they are
    line = _one_error_line(_cli("expire", t.uri, "--retain-last", "0"))
    assert "expected --retain-last to be an integer >= 1" in line and "retain_last" not in line
    line = _one_error_line(_cli("compact", t.uri, "--target-file-size", "100000000TiB"))
    assert "--target-file-size" in line and "target_file_size" not in line
    assert t.refresh().version == 3


def test_translation_of_library_keywords() -> None:
    parser = build_parser()
    commands = parser.get_default("cli_flags")
    vacuum, optimize, compact = commands["vacuum"], commands["optimize"], commands["compact"]
    assert translate("pass dry_run=False to delete", vacuum) == "pass --no-dry-run to delete"
    assert translate("Pass force=True.", vacuum) == "Pass --force."
    assert translate("expected older_than >= 5s", vacuum) == "expected --older-than >= 5s"
    # property keys, paths, file names, unknown and plain words stay as they are
    for text in (
        "property lakelog.vacuum.older_than_seconds",
        "table at /data/older_than/t",
        "file older_than.parquet",
        "the filesystem name limit, the table version, retain_last_n",
    ):
        assert translate(text, vacuum) == text
    assert translate("retain_last=1", commands["expire"]) == "--retain-last 1"
    assert translate("(property lakelog.expire.retain_last)", commands["expire"]).endswith(
        "lakelog.expire.retain_last)"
    )
    assert translate("drop partition_filter to compact all", compact) == (
        "drop --partition to compact all"
    )
    assert translate("open it with single_writer=True.", compact) == (
        "open it with --single-writer."
    )
    assert translate("recluster with optimize(incremental=False).", compact, commands) == (
        "recluster with `lakelog optimize --full`."
    )
    assert translate("zorder_by=[...] or sort_by=[...]", optimize) == (
        "--zorder-by [...] or --sort-by [...]"
    )
    assert translate("expired by expire_snapshots.", compact) == "expired by `lakelog expire`."


def test_version_and_usage_errors(tmp_path: Path) -> None:
    proc = _cli("--version")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == f"lakelog {lakelog.__version__}\n"
    for argv in (["frobnicate"], ["info"], ["history", str(tmp_path), "--limit", "x"]):
        proc = _cli(*argv)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.splitlines()[-1].startswith("lakelog")
        assert ": error: " in proc.stderr.splitlines()[-1]


def test_output_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    """More output than a pipe holds, and a reader that stops after one line: the
    writer gets EPIPE, which ends the command quietly with status 0."""
    t = lakelog.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    for i in range(40):  # ~1 MB of history, far beyond a 64 KiB pipe
        t.set_properties({"note": f"{i}:" + "x" * 25_000})
    script = f"set -o pipefail; {' '.join(CLI)} history {t.uri} | head -1"
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.split()[:3] == ["version", "timestamp", "operation"]
    assert len(proc.stdout.splitlines()) == 1


def test_unexpected_errors_are_one_line_with_debug_for_the_traceback(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    commit = tmp_path / "t" / "_lakelog" / f"{1:020d}.json"
    commit.unlink()
    commit.mkdir()  # an OS-level surprise: the commit is a folder
    line = _one_error_line(_cli("history", t.uri))
    assert f"{1:020d}.json" in line
    for proc in (
        _cli("history", t.uri, "--debug"),
        _cli("history", t.uri, env={"LAKELOG_DEBUG": "1"}),
    ):
        assert proc.returncode == 1
        assert "Traceback" in proc.stderr
        assert proc.stderr.splitlines()[-1] == line.removesuffix(
            " (run with --debug or LAKELOG_DEBUG=1 for the traceback)"
        )


def test_interrupt_exits_130_with_one_line(tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    gate = tmp_path / "gate"
    proc = subprocess.Popen(
        [*CLI, "compact", t.uri],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LAKELOG_PAUSE_AT": f"commit:before-put:{gate}"},
    )
    try:
        deadline = time.monotonic() + 60
        while not Path(f"{gate}.paused").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _one_error_line(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), 130)
    assert err == "lakelog: error: interrupted\n"
    assert t.refresh().version == 3
