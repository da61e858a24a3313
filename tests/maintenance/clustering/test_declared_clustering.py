"""Clustering declared once: ``optimize()`` with no columns keeps the table's layout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lakelog
from lakelog.errors import InvalidArgumentError

SCHEMA = pa.schema([("p", pa.string()), ("a", pa.int64()), ("b", pa.float64()), ("ts", pa.int64())])


def _table(uri: str, **kwargs: object) -> lakelog.Table:
    rng = np.random.default_rng(1)
    t = lakelog.create_table(
        uri,
        SCHEMA,
        partition_by=["p"],
        properties={"lakelog.target_file_size": str(64 << 10)},
        **kwargs,  # type: ignore[arg-type]
    )
    for _ in range(4):
        _append(t, rng)
    return t


def _append(t: lakelog.Table, rng: np.random.Generator, n: int = 2000) -> None:
    t.append(
        pa.table(
            {
                "p": ["x"] * n,
                "a": rng.integers(0, 10**6, n),
                "b": rng.random(n),
                "ts": rng.integers(0, 10**9, n),
            },
            schema=SCHEMA,
        )
    )


def test_optimize_with_no_columns_keeps_the_declared_layout(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    version = t.set_clustering(zorder_by=["a", "b"], curve="zorder").version
    assert t.history(limit=1)[0].operation == "SET PROPERTIES" and t.version == version
    assert t.clustering is not None and t.clustering.columns == ("a", "b")
    first = t.optimize()
    assert first.version is not None
    assert first.extra["zorder_columns"] == ["a", "b"] and first.extra["curve"] == "zorder"
    _append(t, np.random.default_rng(2))
    again = t.optimize()  # incremental, same spec: the layout is kept
    assert again.version is not None and again.extra["spec_id"] == first.extra["spec_id"]
    assert again.extra["incremental"] is True
    assert t.optimize().version is None  # nothing new: nothing to do


def test_a_sort_declared_at_creation(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"), cluster_by=["ts"], cluster_curve="linear")
    assert t.clustering is not None and t.clustering.curve == "linear"
    assert t.clustering.describe() == "sorted by ts"
    report = t.optimize()
    assert report.extra["sort_columns"] == ["ts"]
    for f in t.snapshot().files():  # sorted: the files' ts ranges do not overlap
        others = [g for g in t.snapshot().files() if g.path != f.path]
        assert f.stats is not None
        assert all(
            g.stats is not None
            and (g.stats.max["ts"] < f.stats.min["ts"] or g.stats.min["ts"] > f.stats.max["ts"])
            for g in others
        )


def test_an_explicit_spec_reclusters_once_and_the_declaration_stays(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    t.set_clustering(sort_by=["ts"])
    t.optimize()
    other = t.optimize(zorder_by=["a", "b"])
    assert other.version is not None and other.extra["zorder_columns"] == ["a", "b"]
    assert t.clustering is not None and t.clustering.columns == ("ts",)
    back = t.optimize()  # the declared sort again: a different spec, so everything moves
    assert back.version is not None and back.extra["sort_columns"] == ["ts"]


def test_without_a_declaration_optimize_says_what_to_do(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    version = t.version
    with pytest.raises(InvalidArgumentError, match=r"set_clustering"):
        t.optimize()
    assert t.refresh().version == version


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: t.set_clustering(zorder_by=["nope"]), "unknown 'nope'"),
        (lambda t: t.set_clustering(sort_by=["p"]), "partition columns"),
        (
            lambda t: t.set_properties({"lakelog.clustering.columns": "a,nope"}),
            re.escape("lakelog.clustering.columns='a,nope'"),
        ),
        (lambda t: t.set_properties({"lakelog.clustering.curve": "spiral"}), "spiral"),
        (lambda t: t.set_clustering(zorder_by=["a"], sort_by=["b"]), "both"),
    ],
)
def test_bad_declarations_are_refused_and_change_nothing(
    tmp_path: Path, call: object, message: str
) -> None:
    t = _table(str(tmp_path / "t"))
    version = t.version
    with pytest.raises(InvalidArgumentError, match=message):
        call(t)  # type: ignore[operator]
    assert t.refresh().version == version and t.clustering is None


def test_a_bad_declaration_at_creation_creates_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    with pytest.raises(InvalidArgumentError, match="unknown 'nope'"):
        lakelog.create_table(uri, SCHEMA, cluster_by=["nope"])
    with pytest.raises(InvalidArgumentError, match=r"lakelog\.clustering\.columns"):
        lakelog.create_table(uri, SCHEMA, properties={"lakelog.clustering.columns": "nope"})
    assert not Path(uri, "_lakelog").exists() or not any(Path(uri, "_lakelog").iterdir())


def test_a_declared_column_cannot_be_dropped_until_the_declaration_changes(
    tmp_path: Path,
) -> None:
    t = _table(str(tmp_path / "t"))
    t.set_clustering(zorder_by=["a", "b"])
    with pytest.raises(InvalidArgumentError, match="declared clustering"):
        t.drop_columns("b")
    t.set_clustering(sort_by=["a"])
    t.drop_columns("b")
    assert "b" not in t.schema.names and t.optimize().extra["sort_columns"] == ["a"]
    t.set_clustering()  # none
    assert t.clustering is None


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lakelog.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_")},
    )


@pytest.mark.slow
def test_cli_declares_shows_and_optimizes_with_the_declaration(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _table(uri)
    out = _cli("optimize", uri)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "--zorder-by" in out.stderr and "lakelog clustering URI" in out.stderr
    out = _cli("clustering", uri)
    assert out.returncode == 0 and out.stdout.strip() == "clustering: none"
    out = _cli("clustering", uri, "--zorder-by", "a,b", "--curve", "zorder")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("clustering: zorder curve over a, b (committed version")
    out = _cli("optimize", uri, "--json")
    assert out.returncode == 0, out.stderr
    assert '"zorder_columns": [\n    "a",\n    "b"\n  ]' in out.stdout
    out = _cli("clustering", uri, "--curve", "hilbert")
    assert out.returncode == 1 and "--curve only with --zorder-by" in out.stderr
    out = _cli("clustering", uri, "--none", "--json")
    assert out.returncode == 0 and '"columns": null' in out.stdout
