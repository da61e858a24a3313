"""``lakelog compact``: options, dry runs, saved plans, JSON, the progress bar on a terminal."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import Backend
from test_compact import listing, make_table, rows_of

from lakelog.cli import main
from lakelog.cli.maintenance import ProgressBar
from lakelog.maintenance.compaction.planner import CompactionPlan
from lakelog.maintenance.executor import Progress


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_json_writes_nothing(
    local_backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    t = make_table(local_backend, appends=4)
    before = listing(t.storage)
    code, out, err = run_cli(capsys, "compact", t.uri, "--dry-run", "--json")
    assert code == 0 and "\r[" not in err
    report = json.loads(out)
    assert report["dry_run"] is True and report["version"] is None
    assert report["compacted_file_count"] == 12 and len(report["planned_groups"]) == 3
    assert any("compaction plan at version" in line for line in report["plan"])
    assert listing(t.storage) == before


def test_compact_with_options_prints_the_summary(
    local_backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    t = make_table(local_backend, appends=4)
    before = rows_of(t)
    code, out, _ = run_cli(
        capsys,
        "compact",
        t.uri,
        "--target-file-size",
        "1MiB",
        "--row-group-size",
        "100",
        "--partition",
        "kind=a",
        "--partition",
        "kind=b",
        "--compression",
        "snappy",
        "--max-concurrent-groups",
        "1",
        "--max-bytes-per-second",
        "64MiB",
    )
    assert code == 0
    assert out.startswith("compacted 8 files; file count 12->6; bytes ")
    assert rows_of(t) == before
    assert Counter(f.partition["kind"] for f in t.refresh().snapshot().files()) == {
        "a": 1,
        "b": 1,
        None: 4,
    }
    header = t.history(1)[0]
    assert header.parameters["target_file_size"] == 1 << 20
    assert header.parameters["compression"] == "snappy"


def test_saved_plan_round_trip(
    local_backend: Backend, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    t = make_table(local_backend, appends=4)
    plan_file = tmp_path / "plan.json"
    before = listing(t.storage)
    code, out, _ = run_cli(
        capsys, "compact", t.uri, "--dry-run", "--plan-out", str(plan_file), "--verbose"
    )
    assert code == 0 and listing(t.storage) == before
    plan = CompactionPlan.from_json(plan_file.read_text())
    assert plan.read_version == t.version and len(plan.groups) == 3
    assert all(p in out for p in plan.groups[0].paths)  # --verbose lists the files
    # planning options cannot be changed when executing a saved plan
    code, _, err = run_cli(capsys, "compact", t.uri, "--plan", str(plan_file), "--target-rows", "5")
    assert code == 1 and "--target-rows" in err and "plan fixes them" in err
    code, out, _ = run_cli(capsys, "compact", t.uri, "--plan", str(plan_file), "--json")
    assert code == 0
    report = json.loads(out)
    # the claim, then the rewrite
    assert report["version"] == plan.read_version + 2 and report["compacted_file_count"] == 12


@pytest.mark.parametrize(
    "args, message",
    [
        (["--target-file-size", "0"], "size > 0"),
        (["--target-file-size", "lots"], "size like"),
        (["--min-input-files", "0"], "number > 0"),
        (["--max-concurrent-groups", "-2"], "number > 0"),
    ],
)
def test_bad_arguments_are_refused(
    local_backend: Backend, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    t = make_table(local_backend, appends=2)
    with pytest.raises(SystemExit) as e:
        main(["compact", t.uri, *args])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--partition", "nope=1"], "partition column"),
        (["--partition", "kind"], "COL=VALUE"),
        (["--compression", "zip"], "codec"),
    ],
)
def test_library_errors_exit_1(
    local_backend: Backend, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    t = make_table(local_backend, appends=2)
    code, _, err = run_cli(capsys, "compact", t.uri, *args)
    assert code == 1 and message in err


def test_progress_bar_rendering() -> None:
    stream = io.StringIO()
    bar = ProgressBar(stream, width=10, interval=0)
    bar(Progress(0, 2, 0, 1000))
    bar(Progress(1, 2, 500, 1000))
    bar(Progress(2, 2, 1000, 1000))
    bar.close()
    text = stream.getvalue()
    assert text.count("\r[") == 3 and text.endswith("\n")
    assert "[#####.....]  50%  groups 1/2" in text and "[##########] 100%  groups 2/2" in text


def test_progress_bar_only_on_a_terminal(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=4)
    code = "import sys; from lakelog.cli import main; sys.exit(main(sys.argv[1:]))"
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen(
            [sys.executable, "-c", code, "compact", t.uri],
            stdout=subprocess.PIPE,
            stderr=slave,
            env={**os.environ, "COLUMNS": "120"},
        )
        os.close(slave)
        err = b""
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            err += chunk
        out, _ = p.communicate(timeout=60)
    finally:
        os.close(master)
    assert p.returncode == 0, err.decode(errors="replace")
    assert b"\r[" in err and b"groups 3/3" in err
    assert out.decode().startswith("compacted 12 files")
