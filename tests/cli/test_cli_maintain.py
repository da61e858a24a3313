"""``lakelog maintain``: the ranked table of a dry run, ``--json``, ``--no-dry-run`` within
``--budget-bytes``, ``--catalog`` without a table, and ``--every`` in a real process
until it is interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
from lakelog.cli import main

SCHEMA = pa.schema([("p", pa.string()), ("id", pa.int64())])


def _small_files(
    where: str, parts: tuple[str, ...] = ("x", "y"), batches: int = 5
) -> lakelog.Table:
    t = lakelog.create_table(where, SCHEMA, partition_by=["p"])
    for i in range(batches):
        t.append(pa.table({"p": list(parts), "id": [i] * len(parts)}, schema=SCHEMA))
    return t


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = _run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_a_dry_run_prints_the_ranked_actions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t = _small_files(str(tmp_path / "t"))
    version = t.version
    code, out, err = _run(capsys, "maintain", t.uri)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("maintain would run 2 actions")
    assert lines[1].split()[:4] == ["#", "kind", "partition", "score"]
    assert [line.split()[1] for line in lines[2:4]] == ["compact", "compact"]
    assert {line.split()[2] for line in lines[2:4]} == {"p=x", "p=y"}
    assert "--no-dry-run" in out
    assert t.refresh().version == version


def test_json_lists_each_action_with_its_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t = _small_files(str(tmp_path / "t"))
    report = _json(capsys, "maintain", t.uri)
    assert report["dry_run"] is True and report["left"] == []
    kinds = [(a["kind"], a["partition"]) for a in report["actions"]]
    assert sorted(kinds, key=str) == [("compact", {"p": "x"}), ("compact", {"p": "y"})]
    first = report["actions"][0]
    assert first["score"] > 0 and first["rewrite_bytes"] > 0 and first["benefit"] > 0
    assert first["status"] == "planned" and first["reason"]


def test_no_dry_run_runs_within_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t = _small_files(str(tmp_path / "t"))
    plan = _json(capsys, "maintain", t.uri)
    budget = plan["actions"][0]["rewrite_bytes"]
    report = _json(capsys, "maintain", t.uri, "--no-dry-run", "--budget-bytes", str(budget))
    assert [a["status"] for a in report["actions"]] == ["done"]
    assert [c["partition"] for c in report["left"]] == [plan["actions"][1]["partition"]]
    assert t.history(limit=1)[0].parameters["maintain"]["kind"] == "compact"
    code, out, _ = _run(capsys, "maintain", t.uri, "--budget-bytes", "none")
    assert code == 0 and "would run 1 action (no budget" in out


def test_catalog_without_a_table_ranks_every_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "sqlite:///" + str(tmp_path) + "/c.db"
    with lakelog.connect_catalog(url, warehouse=str(tmp_path / "wh")) as catalog:
        catalog.create_namespace("db")
        for name, batches in [("few", 1), ("many", 6)]:
            t = catalog.create_table(f"db.{name}", SCHEMA, partition_by=["p"])
            for i in range(batches):
                t.append(pa.table({"p": ["x"], "id": [i]}, schema=SCHEMA))
    report = _json(capsys, "maintain", "--catalog", url)
    assert report["tables"] == ["db.few", "db.many"]
    assert [(a["table"], a["kind"]) for a in report["actions"]] == [("db.many", "compact")]
    code, out, _ = _run(capsys, "maintain", "db.many", "--catalog", url, "--no-dry-run")
    assert code == 0 and "maintain ran 1 action " in out


def test_neither_a_table_nor_a_catalog_says_what_to_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAKELOG_CATALOG", raising=False)
    code, _, err = _run(capsys, "maintain")
    assert code == 1 and "--catalog" in err and "Traceback" not in err


def test_every_runs_rounds_until_interrupted(tmp_path: Path) -> None:
    t = _small_files(str(tmp_path / "t"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lakelog.cli",
            "maintain",
            t.uri,
            "--every",
            "1s",
            "--json",
            "--no-dry-run",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(2)]
    if not all(lines):
        proc.kill()
        raise AssertionError(f"expected two rounds, found {lines}: {proc.communicate()[1]}")
    rounds = [json.loads(line) for line in lines]
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert [a["status"] for a in rounds[0]["actions"]] == ["done", "done"]
    assert rounds[1]["actions"] == []  # the first round left nothing to do
    assert t.refresh().snapshot().num_files == 2
