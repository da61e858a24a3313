"""Tilings of the rank grid: boxes that cover the grid once, equal rows, tight file boxes."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakelog
from lakelog.errors import InvalidArgumentError
from lakelog.maintenance.clustering import curves
from lakelog.maintenance.clustering.sort import KEY_MAX, Segment
from lakelog.maintenance.clustering.spec import (
    TAG_SPEC,
    TILE_FILL,
    ClusterSpec,
    boundaries_from_sample,
    load_spec,
    sized_segments,
)
from lakelog.maintenance.clustering.tiling import Tiling, build_tiling, layout_widths

U64 = npt.NDArray[np.uint64]


def _sample(kind: str, rows: int, bits: int, seed: int, ndim: int = 2) -> list[U64]:
    rng = np.random.default_rng(seed)
    top = (1 << bits) - 1  # ranks 0 .. top - 1; top is the null rank
    if kind == "uniform":
        cols = [rng.random(rows) for _ in range(ndim)]
    elif kind == "correlated":
        base = rng.random(rows)
        cols = [np.clip(base + 0.1 * rng.standard_normal(rows), 0, 0.999) for _ in range(ndim)]
    elif kind == "skewed":
        cols = [rng.random(rows) ** 4 for _ in range(ndim)]
    else:  # few distinct values in the first column, nulls in the last
        cols = [rng.integers(0, 3, rows) / 3 for _ in range(ndim)]
        cols[-1] = np.where(rng.random(rows) < 0.1, 1.0, rng.random(rows))
    return [np.minimum((c * top).astype(np.uint64), np.uint64(top)) for c in cols]


def _grid(bits: int, ndim: int) -> list[U64]:
    cells = np.arange(1 << (bits * ndim), dtype=np.uint64)
    mask = np.uint64((1 << bits) - 1)
    return [(cells >> np.uint64((ndim - 1 - i) * bits)) & mask for i in range(ndim)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["uniform", "correlated", "skewed", "few"]),
    n=st.integers(2, 70),
    ndim=st.sampled_from([2, 3]),
    curve=st.sampled_from(["hilbert", "zorder"]),
    seed=st.integers(0, 2**16),
)
def test_tiles_are_boxes_covering_the_grid_once_with_keys_tile_by_tile(
    kind: str, n: int, ndim: int, curve: str, seed: int
) -> None:
    bits = 6 if ndim == 2 else 4
    sample = _sample(kind, 4000, bits, seed, ndim)
    tiling = build_tiling(sample, bits, n, curve)
    if tiling is None:
        return
    assert 2 <= tiling.n_tiles <= n
    cells = _grid(bits, ndim)
    tile = tiling.tile_of(cells)
    # every cell in exactly one tile, and each tile is a box: its cells fill its min/max
    for t in range(tiling.n_tiles):
        inside = tile == t
        widths = [int(c[inside].max()) - int(c[inside].min()) + 1 for c in cells]
        assert int(inside.sum()) == int(np.prod(widths)), (t, widths)
    # keys: tile first (high bits), then the curve over the tile's box; below 2**key_bits
    fn = curves.hilbert_keys if curve == "hilbert" else curves.morton_keys
    keys = tiling.keys(cells, fn)
    assert int(keys.max()) < 1 << tiling.key_bits
    assert np.array_equal(keys >> np.uint64(tiling.low_bits), tile.astype(np.uint64))
    lo, width = tiling.boxes
    for t in range(0, tiling.n_tiles, max(1, tiling.n_tiles // 4)):
        inside = np.flatnonzero(tile == t)
        local = [
            ((c[inside] - lo[t, j]) << np.uint64(bits)) // width[t, j] for j, c in enumerate(cells)
        ]
        local = local[t % ndim :] + local[: t % ndim]  # columns rotated by the tile
        order = np.argsort(fn(local, bits), kind="stable")
        k = keys[inside][order]
        assert np.all(k[1:] >= k[:-1])
    # the sample's rows spread over the tiles about evenly
    if kind == "uniform":
        counts = np.bincount(tiling.tile_of(sample), minlength=tiling.n_tiles)
        assert counts.min() > 0


@pytest.mark.parametrize("n", [20, 24, 32, 40, 45, 100])
def test_tiles_are_tighter_than_curve_cuts_and_hold_equal_rows(n: int) -> None:
    bits = 9
    sample = _sample("uniform", 200_000, bits, 1)
    tiling = build_tiling(sample, bits, n, "hilbert")
    assert tiling is not None and tiling.n_tiles == n
    fresh = _sample("uniform", 400_000, bits, 2)
    tiled = layout_widths(fresh, bits, tiling.tile_of(fresh))
    keys = curves.hilbert_keys(fresh, bits)
    ranks = np.argsort(np.argsort(keys, kind="stable"))
    plain = layout_widths(fresh, bits, (ranks * n // len(keys)).astype(np.int64))
    assert tiled.max() < 0.97 * plain.max(), (tiled, plain)
    assert tiled.max() < 1.06 / np.sqrt(n)  # within 6% of square files
    counts = np.bincount(tiling.tile_of(fresh), minlength=n) / (len(fresh[0]) / n)
    assert counts.min() > 0.85 and counts.max() < 1.15, counts


@pytest.mark.parametrize("n", [1, 4, 16, 64])
def test_no_tiling_where_the_curve_cuts_squares_already(n: int) -> None:
    sample = _sample("uniform", 200_000, 9, 3)
    assert build_tiling(sample, 9, n, "hilbert") is None


def test_spec_round_trips_and_untiled_specs_keep_their_id() -> None:
    sample = pa.table({"a": np.arange(50_000) % 977, "b": np.linspace(0, 1, 50_000) ** 2})
    plain = boundaries_from_sample(sample, ["a", "b"], "hilbert")
    assert plain.to_json()["version"] == 1 and "tiling" not in plain.to_json()
    tiling = build_tiling(plain.ranks(sample), plain.bits, 24, "hilbert")
    assert tiling is not None
    spec = plain.with_tiling(tiling)
    assert spec.spec_id != plain.spec_id
    back = ClusterSpec.from_footer(spec.to_footer(), sample.schema)
    assert back.spec_id == spec.spec_id and back.tiling == tiling
    assert np.array_equal(back.keys(sample), spec.keys(sample))
    # the fast path (a table of every cell) and the per-row path agree
    small = sample.slice(0, 100)
    assert np.array_equal(spec.keys(small), tiling.keys(spec.ranks(small), spec.curve_fn))
    assert np.array_equal(spec.keys(sample)[:100], spec.keys(small))
    assert spec.key_bits <= 20


def test_damaged_tiling_is_a_clear_error() -> None:
    sample = pa.table({"a": np.arange(50_000) % 977, "b": np.linspace(0, 1, 50_000)})
    plain = boundaries_from_sample(sample, ["a", "b"], "hilbert")
    tiling = build_tiling(plain.ranks(sample), plain.bits, 20, "hilbert")
    assert tiling is not None
    d = plain.with_tiling(tiling).to_json()
    d["tiling"]["slabs"]["parts"][0] = 99
    with pytest.raises(InvalidArgumentError, match="damaged"):
        ClusterSpec.from_json(json.loads(json.dumps(d)), sample.schema)
    d["tiling"] = {"tiles": 3}
    with pytest.raises(InvalidArgumentError, match="expected a tiling"):
        ClusterSpec.from_json(d, sample.schema)
    d["version"] = 3
    with pytest.raises(InvalidArgumentError, match="newer lakelog"):
        ClusterSpec.from_json(d, sample.schema)


def test_tiles_about_the_target_size_become_one_file_each_larger_ones_equal_parts() -> None:
    sample = pa.table({"a": np.arange(50_000) % 977, "b": np.linspace(0, 1, 50_000)})
    plain = boundaries_from_sample(sample, ["a", "b"], "hilbert")
    tiling = build_tiling(plain.ranks(sample), plain.bits, 20, "hilbert")
    assert tiling is not None
    spec = plain.with_tiling(tiling)
    whole = Segment(key_start=0, key_end=KEY_MAX, rows=20_000, files=1)
    # 20,000 rows of 100 bytes in 20 tiles: 100 KB per tile
    for target, files in [(100_000, 20), (95_000, 20), (80_000, 40), (40_000, 60), (200_000, 10)]:
        assert sized_segments([whole], 100.0, target, spec)[0].files == files, target
    assert sized_segments([whole], 100.0, 95_000, plain)[0].files == 22  # untiled: by size
    # a segment of ten tiles (an incremental merge)
    half = Segment(key_start=3, key_end=10 << tiling.low_bits, rows=10_000, files=1)
    assert tiling.tiles_between(half.key_start, half.key_end) == 10
    assert sized_segments([half], 100.0, 95_000, spec)[0].files == 10
    assert sized_segments([half], 100.0, 60_000, spec)[0].files == 20
    delta = msgspec.structs.replace(half, tier="delta")
    assert sized_segments([delta], 100.0, 60_000, spec)[0].files == 1
    assert TILE_FILL[0] < 1 < TILE_FILL[1]


def _boxes(t: lakelog.Table) -> list[tuple[float, float, float, float]]:
    out = []
    for f in t.snapshot().files():
        with t.storage.open_input(f.path) as src:
            data = pq.read_table(src, columns=["a", "b"])
        a, b = data.column("a").to_numpy(), data.column("b").to_numpy()
        out.append((float(a.min()), float(a.max()), float(b.min()), float(b.max())))
    return out


def test_optimize_writes_one_disjoint_box_per_tile(tmp_path: Path) -> None:
    """About 18 files: a Hilbert curve cut into 18 runs gives ragged shapes whose boxes
    overlap; the tiles are boxes, so the files' min/max boxes do not."""
    rng = np.random.default_rng(7)
    schema = pa.schema([("a", pa.int64()), ("b", pa.float64()), ("pad", pa.binary())])
    t = lakelog.create_table(str(tmp_path / "t"), schema)
    for _ in range(8):
        n = 5_000
        t.append(
            pa.table(
                {
                    "a": rng.integers(0, 1_000_000, n),
                    "b": rng.random(n),
                    "pad": [rng.bytes(40) for _ in range(n)],
                },
                schema=schema,
            )
        )
    before = t.snapshot().to_arrow().sort_by([("a", "ascending"), ("b", "ascending")])
    probe = lakelog.open_table(str(tmp_path / "t"))
    report = probe.optimize(zorder_by=["a", "b"], target_file_size=120_000)
    snap = t.snapshot()
    spec = load_spec(t.storage, snap.files()[0], snap.schema)
    assert spec is not None and spec.tiling is not None
    assert snap.num_files == spec.tiling.n_tiles == report.output_file_count
    assert snap.to_arrow().sort_by([("a", "ascending"), ("b", "ascending")]).equals(before)
    boxes = _boxes(t)
    for (a0, a1, b0, b1), (c0, c1, d0, d1) in itertools.combinations(boxes, 2):
        assert a1 < c0 or c1 < a0 or b1 < d0 or d1 < b0, ((a0, a1, b0, b1), (c0, c1, d0, d1))

    # a late append in one corner: the next run keeps the tiling and rewrites little
    n = 600
    late = pa.table(
        {
            "a": rng.integers(0, 30_000, n),
            "b": rng.random(n) * 0.03,
            "pad": [rng.bytes(40) for _ in range(n)],
        },
        schema=schema,
    )
    t.append(late)
    again = probe.optimize(zorder_by=["a", "b"], target_file_size=120_000)
    assert again.extra["spec_id"] == spec.spec_id
    assert 1 < again.compacted_file_count <= 4, again.summary()
    assert {f.tags[TAG_SPEC] for f in t.snapshot().files()} == {spec.spec_id}
    assert t.snapshot().to_arrow().num_rows == before.num_rows + n


def test_tiling_json_is_checked_for_tile_ids() -> None:
    with pytest.raises(InvalidArgumentError, match="numbered"):
        Tiling.from_json(
            {"tiles": 2, "slabs": {"dim": 0, "cuts": [3], "parts": [0, 0]}}, ndim=2, bits=4
        )
    with pytest.raises(InvalidArgumentError, match="increasing cuts"):
        Tiling.from_json(
            {"tiles": 3, "slabs": {"dim": 0, "cuts": [5, 3], "parts": [0, 1, 2]}}, ndim=2, bits=4
        )
