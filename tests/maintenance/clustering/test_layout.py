"""Layout metrics from file stats: overlap depth, expected bytes read, exact queries, plots."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lakelog
from lakelog.errors import InvalidArgumentError, LakelogError
from lakelog.maintenance.clustering.layout import FileBoxes, clustering_report, plot_layout


def _boxes(ranges: list[tuple[float, float]], sizes: list[float] | None = None) -> FileBoxes:
    n = len(ranges)
    return FileBoxes.from_arrays(
        ["a"],
        sizes=sizes or [1.0] * n,
        rows=[100.0] * n,
        mins={"a": [r[0] for r in ranges]},
        maxs={"a": [r[1] for r in ranges]},
    )


def test_overlap_depth_disjoint_identical_and_points() -> None:
    assert _boxes([(0, 1), (1.5, 2), (3, 4)]).overlap_depth("a") == (1.0, 1)
    avg, mx = _boxes([(0, 10)] * 5).overlap_depth("a")
    assert avg == pytest.approx(5.0) and mx == 5
    avg, mx = _boxes([(0, 2), (1, 3)]).overlap_depth("a")
    assert avg == pytest.approx(4 / 3) and mx == 2
    assert _boxes([(1, 1), (1, 1), (2, 2)]).overlap_depth("a")[0] == pytest.approx(1.5)


@pytest.mark.parametrize("n, s", [(10, 0.01), (10, 0.2), (37, 0.05)])
def test_expected_fraction_matches_monte_carlo_for_partitioned_data(n: int, s: float) -> None:
    edges = np.linspace(0, 1, n + 1)
    boxes = _boxes([(edges[i], edges[i + 1] - 1e-9) for i in range(n)])
    got = boxes.expected_fraction(["a"], s)
    rng = np.random.default_rng(0)
    u = rng.uniform(0, 1 - s, 20_000)
    mc = np.mean([boxes.fractions([{"a": (x, x + s)}])[0] for x in u[:2000]])
    assert got == pytest.approx(mc, abs=0.01)
    assert got == pytest.approx(1 / n + s, abs=0.02)


def test_expected_fraction_all_overlapping_is_one_and_unknown_bounds_always_read() -> None:
    assert _boxes([(0, 1)] * 4).expected_fraction(["a"], 0.01) == pytest.approx(1.0)
    b = FileBoxes.from_arrays(
        ["a"], sizes=[3.0, 1.0], rows=[10, 10], mins={"a": [0, None]}, maxs={"a": [1, None]}
    )
    assert b.fractions([{"a": (5, 6)}])[0] == pytest.approx(0.25)
    assert b.overlap_depth("a") == (1.0, 1)


def test_multi_column_box_is_the_product_per_file() -> None:
    b = FileBoxes.from_arrays(
        ["a", "b"],
        sizes=[1, 1, 1, 1],
        rows=[1, 1, 1, 1],
        mins={"a": [0, 0.5, 0, 0.5], "b": [0, 0, 0.5, 0.5]},
        maxs={"a": [0.499, 1, 0.499, 1], "b": [0.499, 0.499, 1, 1]},
    )
    pa_ = b.match_probability("a", 0.1)
    pb = b.match_probability("b", 0.1)
    assert b.expected_fraction(["a", "b"], 0.1) == pytest.approx(float((pa_ * pb).mean()))
    assert b.fractions([{"a": (0.1, 0.2), "b": (0.6, 0.7)}])[0] == pytest.approx(0.25)
    with pytest.raises(InvalidArgumentError):
        b.fractions([{"zz": (0, 1)}])


def test_strings_are_ranked() -> None:
    b = FileBoxes.from_arrays(
        ["s"],
        sizes=[1, 1],
        rows=[1, 1],
        mins={"s": ["apple", "melon"]},
        maxs={"s": ["kiwi", "zucchini"]},
    )
    assert "s" in b.ranks
    assert b.fractions([{"s": ("banana", "cherry")}])[0] == pytest.approx(0.5)
    assert b.overlap_depth("s") == (1.0, 1)


def _table(tmp_path: Path) -> lakelog.Table:
    rng = np.random.default_rng(5)
    t = lakelog.create_table(
        str(tmp_path / "t"),
        pa.schema([("a", pa.int64()), ("b", pa.float64()), ("s", pa.string())]),
        properties={"lakelog.target_file_size": str(40_000)},
    )
    for _ in range(8):
        t.append(
            pa.table(
                {
                    "a": rng.integers(0, 10_000, 5000),
                    "b": rng.random(5000),
                    "s": [f"k{i}" for i in rng.integers(0, 99, 5000)],
                }
            )
        )
    return t


def test_report_on_a_table_improves_after_optimize(tmp_path: Path) -> None:
    t = _table(tmp_path)
    before = t.clustering_report(["a", "b"], selectivity=0.02)
    assert before.file_count == 8 and before.per_column["a"]["avg_depth"] > 5
    t.optimize(zorder_by=["a", "b"])
    after = t.clustering_report(
        ["a", "b"], selectivity=0.02, queries=[{"a": (0, 100)}, {"b": (0.5, 0.51)}]
    )
    for c in ("a", "b"):
        assert after.per_column[c]["avg_depth"] < before.per_column[c]["avg_depth"]
        assert after.per_column[c]["expected_fraction"] < before.per_column[c]["expected_fraction"]
    assert after.box_fraction < before.box_fraction
    d = after.to_dict()
    assert len(d["query_fractions"]) == 2 and 0 < d["mean_query_fraction"] < 1
    assert "average overlap depth" in str(after)
    same = clustering_report(t.snapshot(before.version), ["a", "b"], selectivity=0.02)
    assert same.box_fraction == before.box_fraction


def test_report_validation(tmp_path: Path) -> None:
    t = _table(tmp_path)
    with pytest.raises(InvalidArgumentError, match="unknown"):
        t.clustering_report(["nope"])
    with pytest.raises(InvalidArgumentError):
        t.clustering_report([])
    with pytest.raises(InvalidArgumentError, match="selectivity"):
        t.clustering_report(["a"], selectivity=0)


def test_plot_writes_a_png_and_needs_matplotlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _table(tmp_path)
    v0 = t.version
    t.optimize(zorder_by=["a", "b"])
    out = tmp_path / "layout.png"
    plot_layout([("before", t.snapshot(v0)), ("after", t.snapshot())], ["a", "s"], str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(InvalidArgumentError, match="two columns"):
        plot_layout([("x", t.snapshot())], ["a"], str(out))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(LakelogError, match="matplotlib"):
        plot_layout([("x", t.snapshot())], ["a", "b"], str(tmp_path / "no.png"))
