"""Ordering by key in bounded memory (in memory and with spilled runs), file cuts, writing."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lakelog.errors import InvalidArgumentError
from lakelog.io.writer import RollingWriter, WriteOptions
from lakelog.maintenance.clustering.sort import (
    KEY_MAX,
    ExternalSorter,
    FileCut,
    Segment,
    file_cuts,
    sorted_keys,
    stable_argsort,
    write_segments,
)
from lakelog.storage import Storage

SCHEMA = pa.schema([("k", pa.uint64()), ("id", pa.int64()), ("s", pa.string())])


def _batches(keys: np.ndarray, rows_per_batch: int) -> list[pa.RecordBatch]:
    ids = np.arange(len(keys))
    out = []
    for i in range(0, len(keys), rows_per_batch):
        k = keys[i : i + rows_per_batch]
        out.append(
            pa.record_batch(
                [
                    pa.array(k, pa.uint64()),
                    pa.array(ids[i : i + rows_per_batch]),
                    pa.array([f"row-{j}" for j in ids[i : i + rows_per_batch]]),
                ],
                schema=SCHEMA,
            )
        )
    return out


def _key(batch: pa.RecordBatch) -> np.ndarray:
    return batch.column("k").to_numpy().astype(np.uint64)


def _drain(sorter: ExternalSorter, cuts: list[int] | None = None) -> tuple[pa.Table, np.ndarray]:
    parts, keys = [], []
    for t, k in sorter.ordered(cuts):
        parts.append(t)
        keys.append(k)
        assert np.array_equal(_key(t.combine_chunks().to_batches()[0]), k) if t.num_rows else True
    return pa.concat_tables(parts), np.concatenate(keys)


@settings(max_examples=25, deadline=None)
@given(
    keys=st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 20), min_size=1, max_size=600),
    per_batch=st.integers(1, 97),
    max_bytes=st.sampled_from([1, 2_000, 10**9]),
    cuts=st.none() | st.lists(st.integers(1, 2**64 - 1), max_size=6),
    key_bits=st.none() | st.sampled_from([5, 20, 24]),
)
def test_sorted_output_is_a_permutation_in_key_order(
    keys: list[int],
    per_batch: int,
    max_bytes: int,
    cuts: list[int] | None,
    key_bits: int | None,
    tmp_path_factory: Any,
) -> None:
    arr = np.array(keys, dtype=np.uint64)
    spill = tmp_path_factory.mktemp("spill")
    with ExternalSorter(
        SCHEMA, _key, max_bytes=max_bytes, spill_dir=str(spill), key_bits=key_bits
    ) as s:
        s.add(_batches(arr, per_batch))
        # cuts (file starts) switch the in-memory path to per-file buckets
        table, out_keys = _drain(s, None if cuts is None else [0, *sorted(set(cuts))])
        if max_bytes == 1 and len(keys) > per_batch:
            assert s.stats.runs > 1
        if max_bytes == 10**9:
            assert s.stats.runs == 0
        sample, step = s.key_sample()
        assert step >= 1 and np.all(np.diff(sample.astype(np.float64)) >= 0)
        distinct, counts = s.key_counts()
        if key_bits is not None and key_bits <= 20 and arr.max() < 2**key_bits:  # exact
            assert np.array_equal(np.repeat(distinct, counts), np.sort(arr))
        else:
            assert np.array_equal(np.repeat(distinct, counts), sample)
    assert not list(spill.iterdir())  # runs removed on exit
    assert np.all(out_keys[1:] >= out_keys[:-1])
    assert np.array_equal(np.sort(out_keys), np.sort(arr))
    assert sorted(table.column("id").to_pylist()) == list(range(len(keys)))
    # each row keeps its own key and payload
    assert np.array_equal(table.column("k").to_numpy().astype(np.uint64), out_keys)
    assert table.column("s").to_pylist() == [f"row-{i}" for i in table.column("id").to_pylist()]


def test_stable_order_for_equal_keys() -> None:
    arr = np.zeros(1000, dtype=np.uint64)
    with ExternalSorter(SCHEMA, _key, max_bytes=10**9) as s:
        s.add(_batches(arr, 100))
        table, _ = _drain(s)
    assert table.column("id").to_pylist() == list(range(1000))


def test_max_bytes_must_be_positive() -> None:
    with pytest.raises(InvalidArgumentError, match="max_bytes"):
        ExternalSorter(SCHEMA, _key, max_bytes=0)


def test_file_cuts_equal_rows_and_snap_to_coarse_boundaries() -> None:
    keys = np.sort(np.random.default_rng(1).integers(0, 2**20, 10_000).astype(np.uint64))
    segs = [Segment(key_start=0, key_end=KEY_MAX, rows=len(keys), files=4)]
    exact = file_cuts(segs, keys, slack=0.0)
    assert next(c.key_start for c in exact) == 0 and len(exact) == 4
    counts = np.diff(np.searchsorted(keys, [c.key_start for c in exact] + [2**63]))
    assert counts.min() >= 2400 and counts.max() <= 2600
    snapped = file_cuts(segs, keys, slack=0.2)
    starts = [c.key_start for c in snapped]
    assert starts == sorted(set(starts)) and len(starts) == 4
    # uniform keys: every quarter cut crosses a 2**18 block boundary (coarsest in reach)
    for k in starts[1:]:
        prev = int(keys[np.searchsorted(keys, k) - 1])
        assert prev >> 18 != k >> 18
    counts = np.diff(np.searchsorted(keys, [*starts, 2**63]))
    assert counts.min() >= 2000 and counts.max() <= 3000


def _reference_cuts(segments: list[Segment], keys: np.ndarray, slack: float) -> list[FileCut]:
    """The cut rule row by row: near equal rows, snapped to the coarsest key boundary."""
    out: list[FileCut] = []
    for seg in segments:
        out.append(FileCut(seg.key_start, seg.tier))
        a = int(np.searchsorted(keys, np.uint64(seg.key_start)))
        b = len(keys) if seg.key_end == KEY_MAX else int(np.searchsorted(keys, seg.key_end))
        n = b - a
        if seg.files <= 1 or n < 2 * seg.files:
            continue
        per, last = n / seg.files, seg.key_start
        half = max(1, int(per * slack))
        for j in range(1, seg.files):
            target = a + round(j * per)
            best: tuple[int, int, int] | None = None  # (level, -distance, -row)
            for q in range(max(a + 1, target - half), min(b - 1, target + half) + 1):
                if keys[q - 1] == keys[q]:
                    continue
                level = (int(keys[q - 1]) ^ int(keys[q])).bit_length() - 1
                cand = (level, -abs(q - target), -q)
                best = cand if best is None or cand > best else best
            if best is not None and int(keys[-best[2]]) > last:
                last = int(keys[-best[2]])
                out.append(FileCut(last, seg.tier))
    return out


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.integers(0, 2**12) | st.integers(0, 2**64 - 1), min_size=1, max_size=400),
    splits=st.lists(st.integers(1, 2**64 - 2), max_size=3),
    files=st.lists(st.integers(1, 9), min_size=4, max_size=4),
    slack=st.sampled_from([0.0, 0.2, 0.5]),
)
@example(keys=[3, 4, 5, 6], splits=[], files=[2, 1, 1, 1], slack=0.0)  # best cut at window start
@example(keys=[1, 2, 3, 4], splits=[], files=[2, 1, 1, 1], slack=0.0)  # ... and at its end
def test_file_cuts_from_distinct_keys_and_counts_match_the_row_rule(
    keys: list[int], splits: list[int], files: list[int], slack: float
) -> None:
    arr = np.sort(np.array(keys, dtype=np.uint64))
    bounds = [0, *sorted(set(splits)), KEY_MAX]
    segs = [
        Segment(key_start=lo, key_end=hi, rows=0, files=f)
        for lo, hi, f in zip(bounds, bounds[1:], files, strict=False)
    ]
    want = _reference_cuts(segs, arr, slack)
    assert file_cuts(segs, arr, slack=slack) == want
    distinct, counts = np.unique(arr, return_counts=True)
    assert file_cuts(segs, distinct, counts=counts, slack=slack) == want


def test_file_cuts_respect_segments_and_skip_impossible_cuts() -> None:
    keys = np.array([5] * 100 + [50] * 100 + [500] * 100, dtype=np.uint64)
    segs = [
        Segment(key_start=0, key_end=40, rows=100, files=3, tier="delta"),
        Segment(key_start=40, key_end=KEY_MAX, rows=200, files=2),
    ]
    cuts = file_cuts(segs, keys)
    assert cuts == [FileCut(0, "delta"), FileCut(40, "base"), FileCut(500, "base")]


def _writer_factory(storage: Storage) -> Any:
    opts = WriteOptions(target_file_size=1 << 30, row_group_size=128)
    schema = SCHEMA

    def make() -> RollingWriter:
        return RollingWriter(
            storage, file_schema=schema, partition={}, partition_by=(), options=opts, prefix="t"
        )

    return make


def test_write_segments_one_file_per_cut_in_key_order(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    keys = np.sort(np.random.default_rng(2).integers(0, 1000, 3000).astype(np.uint64))
    with ExternalSorter(SCHEMA, _key, max_bytes=10**9, slice_rows=250) as s:
        s.add(_batches(np.random.default_rng(3).permutation(keys), 300))
        cuts = [
            FileCut(0, "base"),
            FileCut(100, "delta"),
            FileCut(101, "base"),
            FileCut(700, "base"),
        ]
        written = write_segments(s.ordered(), cuts, _writer_factory(storage))
    ranges = [(w.key_min, w.key_max, w.tier) for w in written]
    assert [r[2] for r in ranges] == ["base", "delta", "base", "base"][: len(ranges)]
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))
    total = 0
    for w in written:
        t = pq.read_table(str(tmp_path / w.add.path))
        k = t.column("k").to_numpy()
        assert np.all(np.diff(k.astype(np.int64)) >= 0)
        assert k.min() == w.key_min and k.max() == w.key_max
        total += t.num_rows
    assert total == 3000


def test_write_segments_rejects_bad_cuts_and_cleans_up_on_error(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    with pytest.raises(InvalidArgumentError):
        write_segments([], [FileCut(5, "base")], _writer_factory(storage))
    with pytest.raises(InvalidArgumentError):
        write_segments([], [FileCut(0, "base"), FileCut(0, "base")], _writer_factory(storage))

    def broken() -> Any:
        t = pa.table({"k": pa.array([1, 2], pa.uint64()), "id": [1, 2], "s": ["a", "b"]})
        yield t, np.array([1, 2], dtype=np.uint64)
        yield t, np.array([3, 4], dtype=np.uint64)
        raise RuntimeError("reader failed")

    with pytest.raises(RuntimeError, match="reader failed"):
        write_segments(
            broken(),
            [FileCut(0, "base"), FileCut(3, "base")],
            _writer_factory(storage),
            delete=storage.delete,
        )
    assert not list(tmp_path.glob("*.parquet"))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 9000),
    span_bits=st.sampled_from([0, 1, 8, 16, 17, 24, 31, 32, 33, 64]),
    base=st.integers(0, 2**64 - 1),
    seed=st.integers(0, 2**32 - 1),
)
def test_radix_argsort_and_counting_sort_match_numpy(
    n: int, span_bits: int, base: int, seed: int
) -> None:
    """The fast paths (16-bit radix passes, counting sort) give numpy's stable results for
    every key span, including spans at the thresholds and keys near 2**64."""
    rng = np.random.default_rng(seed)
    span = (1 << span_bits) - 1
    lo = min(base, 2**64 - 1 - span)
    keys = (rng.integers(0, span, n, dtype=np.uint64, endpoint=True) + np.uint64(lo)).astype(
        np.uint64
    )
    order = stable_argsort(keys)
    np.testing.assert_array_equal(order, np.argsort(keys, kind="stable"))
    got = sorted_keys(keys)
    assert got.dtype == np.uint64
    np.testing.assert_array_equal(got, np.sort(keys))


def test_row_sample_takes_evenly_spaced_rows_across_batches() -> None:
    arr = np.arange(10_000, dtype=np.uint64)
    with ExternalSorter(SCHEMA, _key, max_bytes=10**9) as s:
        s.add(_batches(arr, 333))
        sample = s.row_sample(100)
    assert sample is not None and sample.num_rows == 100
    want = np.linspace(0, 9_999, 100).astype(np.int64)
    assert sample.column("id").to_pylist() == want.tolist()


@pytest.mark.parametrize("lo", [0, 2**64 - 2**21])
@pytest.mark.parametrize("span", [1, 2**16, 2**20, 2**23 + 5])
def test_counting_sort_on_large_inputs(lo: int, span: int) -> None:
    rng = np.random.default_rng(span)
    keys = rng.integers(0, span, 300_000, dtype=np.uint64) + np.uint64(lo)
    np.testing.assert_array_equal(sorted_keys(keys), np.sort(keys))
    np.testing.assert_array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))
    schema = pa.schema([("k", pa.uint64())])
    batches = [
        pa.record_batch([pa.array(keys[i : i + 70_000])], schema=schema) for i in (0, 70_000)
    ]
    batches.append(pa.record_batch([pa.array(keys[140_000:])], schema=schema))
    with ExternalSorter(schema, _key, max_bytes=10**9) as s:
        s.add(batches)
        distinct, counts = s.key_counts()
    want, want_counts = np.unique(keys, return_counts=True)
    np.testing.assert_array_equal(distinct, want)
    np.testing.assert_array_equal(counts, want_counts)
