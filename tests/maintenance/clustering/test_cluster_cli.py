"""``lakelog optimize`` and ``lakelog inspect``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lakelog
from lakelog.cli import main


def _table(uri: str) -> lakelog.Table:
    rng = np.random.default_rng(1)
    t = lakelog.create_table(
        uri,
        pa.schema([("a", pa.int64()), ("b", pa.float64())]),
        properties={"lakelog.target_file_size": str(30_000)},
    )
    for _ in range(5):
        t.append(pa.table({"a": rng.integers(0, 10_000, 3000), "b": rng.random(3000)}))
    return t


def test_optimize_dry_run_then_run_and_inspect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri)
    v = t.version
    assert main(["optimize", uri, "--zorder-by", "a,b", "--dry-run", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["dry_run"] and d["zorder_columns"] == ["a", "b"] and d["curve"] == "hilbert"
    assert t.refresh().version == v
    assert main(["optimize", uri, "--zorder-by", "a,b", "--curve", "zorder"]) == 0
    out = capsys.readouterr().out
    assert "clustered 5 files" in out and "zorder over a, b" in out
    assert "version None" not in out and "commits [" in out
    assert main(["optimize", uri, "--sort-by", "b", "--full", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["sort_columns"] == ["b"] and d["curve"] == "linear" and not d["incremental"]

    png = tmp_path / "layout.png"
    assert (
        main(["inspect", uri, "--columns", "a,b", "--plot", str(png), "--before-version", str(v)])
        == 0
    )
    out = capsys.readouterr().out
    assert "average overlap depth" in out and png.read_bytes()[:4] == b"\x89PNG"
    assert (
        main(
            [
                "inspect",
                uri,
                "--columns",
                "a",
                "--version",
                str(v),
                "--json",
                "--selectivity",
                "0.05",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["version"] == v and d["per_column"]["a"]["avg_depth"] > 3


def test_cli_errors_are_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    _table(uri)
    assert main(["optimize", uri, "--zorder-by", "a,zz"]) == 1
    assert "unknown 'zz'" in capsys.readouterr().err
    assert main(["inspect", uri, "--columns", "a", "--before-version", "1"]) == 1
    assert "--plot" in capsys.readouterr().err
    assert main(["optimize", uri]) == 1  # --zorder-by or --sort-by is required
    assert "--zorder-by" in capsys.readouterr().err
