"""Properties of the incremental clustering planner (pure: files and keys in, plan out)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.log.actions import DataFile, FileStats
from lakelog.maintenance.clustering.planner import plan_partition
from lakelog.maintenance.clustering.sampling import SPREAD_SAMPLE_ROWS, spread_files
from lakelog.maintenance.clustering.sort import KEY_MAX
from lakelog.maintenance.clustering.spec import TAG_KEY_MAX, TAG_KEY_MIN, TAG_SPEC, TAG_TIER

SPEC = "spec0"
BITS = 18


def _file(name: str, rows: int, tier: str | None, lo: int = 0, hi: int = 0) -> DataFile:
    tags = {}
    if tier is not None:
        tags = {TAG_SPEC: SPEC, TAG_TIER: tier, TAG_KEY_MIN: str(lo), TAG_KEY_MAX: str(hi)}
    return DataFile(path=name, size_bytes=rows * 10, num_rows=rows, tags=tags)


@st.composite
def layouts(draw: st.DrawFn) -> tuple[list[DataFile], np.ndarray]:
    nbase = draw(st.integers(1, 12))
    cuts = sorted(draw(st.sets(st.integers(1, 2**BITS - 2), min_size=nbase, max_size=nbase)))
    edges = [0, *cuts, 2**BITS - 1]
    files = []
    for i in range(len(edges) - 1):
        lo, hi = edges[i], max(edges[i], edges[i + 1] - 1)
        files.append(_file(f"base-{i}", draw(st.integers(50, 1000)), "base", lo, hi))
    for j in range(draw(st.integers(0, 6))):
        lo = draw(st.integers(0, 2**BITS - 1))
        hi = draw(st.integers(lo, 2**BITS - 1))
        files.append(_file(f"delta-{j}", draw(st.integers(1, 300)), "delta", lo, hi))
    nfresh = draw(st.integers(1, 3))
    rows = [draw(st.integers(1, 400)) for _ in range(nfresh)]
    files.extend(_file(f"new-{k}", r, None) for k, r in enumerate(rows))
    keys = np.sort(
        np.array(
            draw(st.lists(st.integers(0, 2**BITS - 1), min_size=sum(rows), max_size=sum(rows))),
            dtype=np.uint64,
        )
    )
    return files, keys


@settings(max_examples=60, deadline=None)
@given(layout=layouts(), ratio=st.sampled_from([3.0, 8.0, 50.0]), incremental=st.booleans())
def test_plan_invariants(
    layout: tuple[list[DataFile], np.ndarray], ratio: float, incremental: bool
) -> None:
    files, keys = layout
    calls: list[Sequence[DataFile]] = []

    def fresh_keys(fs: Sequence[DataFile]) -> np.ndarray:
        calls.append(fs)
        return keys

    plan = plan_partition(
        {},
        files,
        SPEC,
        target_file_size=2000,
        incremental=incremental,
        max_rewrite_ratio=ratio,
        min_delta_bytes=200,
        key_bits=BITS,
        fresh_keys=fresh_keys,
    )
    assert plan is not None  # there are always fresh files here
    inputs = [f.path for f in plan.group.files]
    assert len(inputs) == len(set(inputs))
    fresh = {f.path for f in files if not f.tags}
    assert fresh <= set(inputs)  # every new file is consumed
    segs = plan.segments
    assert segs[0].key_start == 0 and segs[-1].key_end == KEY_MAX
    assert all(a.key_end == b.key_start for a, b in itertools.pairwise(segs))
    assert all(s.key_start < s.key_end and s.files >= 1 for s in segs)
    if plan.full or not incremental:
        assert set(inputs) == {f.path for f in files}
        assert [s.tier for s in segs] == ["base"]
        return
    assert calls == [[f for f in files if not f.tags]]
    by_path = {f.path: f for f in files}
    base_segs = [s for s in segs if s.tier == "base"]
    for p in inputs:
        f = by_path[p]
        if f.tags.get(TAG_TIER) == "delta":
            # a delta file is rewritten with a merged (base) key range it overlaps, or,
            # piled up with others, within one delta segment
            lo, hi = int(f.tags[TAG_KEY_MIN]), int(f.tags[TAG_KEY_MAX])
            merged = [s for s in base_segs if s.key_start <= hi and lo < s.key_end]
            within = [s for s in segs if s.tier == "delta" and s.key_start <= lo and hi < s.key_end]
            assert merged or within
    # the key range of every rewritten base file lies in a base segment
    for p in inputs:
        f = by_path[p]
        if f.tags.get(TAG_TIER) == "base":
            lo = int(f.tags[TAG_KEY_MIN])
            assert any(
                s.key_start <= lo < s.key_end or s.key_end == KEY_MAX
                for s in base_segs
                if s.key_start <= lo
            )
    # base files not rewritten keep their key ranges out of the merged segments
    kept = [f for f in files if f.tags.get(TAG_TIER) == "base" and f.path not in inputs]
    for f in kept:
        lo = int(f.tags[TAG_KEY_MIN])
        assert not any(s.key_start < lo < s.key_end for s in base_segs)


def test_spread_rows_pile_up_as_delta_then_merge() -> None:
    base = [_file(f"b{i}", 1000, "base", i * 1000, i * 1000 + 999) for i in range(10)]
    rng = np.random.default_rng(0)

    def plan(new_rows: int, delta: list[DataFile]) -> tuple[set[str], list[str]]:
        keys = np.sort(rng.integers(0, 10_000, new_rows).astype(np.uint64))
        p = plan_partition(
            {},
            [*base, *delta, _file("new", new_rows, None)],
            SPEC,
            target_file_size=10_000,
            incremental=True,
            max_rewrite_ratio=8.0,
            min_delta_bytes=500,
            key_bits=14,
            fresh_keys=lambda fs: keys,
        )
        assert p is not None
        return {f.path for f in p.group.files}, [s.tier for s in p.segments]

    inputs, tiers = plan(100, [])  # 1% spread: only the new file, written as delta
    assert inputs == {"new"} and set(tiers) == {"delta"}
    delta = [_file(f"d{i}", 100, "delta", i * 1000, i * 1000 + 999) for i in range(10)]
    inputs, tiers = plan(100, delta)  # 10% pending + 1%: below 1/6, no merge into the base
    assert "new" in inputs and not any(p.startswith("b") for p in inputs)
    assert set(tiers) == {"delta"}  # (delta files of one segment may be combined)
    delta2 = [_file(f"e{i}", 80, "delta", i * 1000, i * 1000 + 999) for i in range(10)]
    inputs, tiers = plan(100, delta + delta2)  # 19% pending: merged, a quarter per run
    assert "base" in tiers
    merged = {p for p in inputs if p.startswith("b")}
    assert 1 <= len(merged) <= 3
    # the delta files of the merged ranges go with them (others may be combined)
    assert {f"{c}{p[1:]}" for p in merged for c in "de"} <= {p for p in inputs if p[0] in "de"}


def _stat_file(i: int, lo: float, hi: float, rows: int) -> DataFile:
    return DataFile(
        path=f"f{i}.parquet",
        size_bytes=rows * 10,
        num_rows=rows,
        stats=FileStats(min={"a": lo, "b": 0}, max={"a": hi, "b": 100}),
    )


def test_sample_reads_a_subset_only_when_every_file_spreads_over_the_range() -> None:
    rng = np.random.default_rng(0)
    ingest = [_stat_file(i, 0.0 + i % 3, 100.0 - i % 5, 100_000) for i in range(40)]
    subset = spread_files(ingest, ["a", "b"], rng)
    assert subset is not None
    assert SPREAD_SAMPLE_ROWS <= sum(f.num_rows for f in subset) < SPREAD_SAMPLE_ROWS + 100_000
    assert len({f.path for f in subset}) == len(subset)
    assert subset == spread_files(ingest, ["a", "b"], np.random.default_rng(0))  # seeded
    # one narrow file (a region of the key space, as clustered files are): read them all
    regional = [*ingest[:-1], _stat_file(99, 10.0, 20.0, 100_000)]
    assert spread_files(regional, ["a", "b"], rng) is None
    # too few rows to bother, or no stats to judge by
    assert spread_files(ingest[:20], ["a"], rng) is None
    no_stats = [*ingest[:-1], DataFile(path="x", size_bytes=1, num_rows=100_000)]
    assert spread_files(no_stats, ["a"], rng) is None
