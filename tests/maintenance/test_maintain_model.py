"""Properties of maintain's pure cost model (lakelog/maintenance/maintain/model.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.maintenance.maintain.model import (
    Candidate,
    FileStat,
    PartitionStats,
    TableStats,
    candidates,
    choose,
    compact_candidate,
    purge_candidate,
    query_file_budget,
)

TARGET = 128 << 20
SMALL = 96 << 20


def _stats(files: list[FileStat], **fields: int) -> TableStats:
    return TableStats(
        name="t",
        target_file_size=TARGET,
        min_file_size=SMALL,
        min_input_files=2,
        purge_ratio=0.2,
        partitions=(PartitionStats(partition={"p": "x"}, files=tuple(files)),),
        **fields,  # type: ignore[arg-type]
    )


small_sizes = st.lists(st.integers(1, SMALL - 1), min_size=2, max_size=40)


@settings(max_examples=200, deadline=None)
@given(sizes=small_sizes, fraction=st.floats(0.0, 1.0), larger=st.booleans())
def test_more_small_files_never_lower_a_compact_score(
    sizes: list[int], fraction: float, larger: bool
) -> None:
    files = [FileStat(size=s, rows=100, path=f"f{i}") for i, s in enumerate(sizes)]
    stats = _stats(files)
    before = compact_candidate(stats, stats.partitions[0])
    if larger:  # no smaller than the largest small file
        added = max(sizes) + int((SMALL - 1 - max(sizes)) * fraction)
    else:  # no larger than the smallest
        added = max(1, int(min(sizes) * fraction))
    more = _stats([*files, FileStat(size=added, rows=100, path="new")])
    after = compact_candidate(more, more.partitions[0])
    if before is not None:
        assert after is not None
        assert after.score >= before.score * (1 - 1e-12)


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(1 << 10, 1 << 20), min_size=3, max_size=20))
def test_a_large_earlier_output_is_left_out_when_copying_it_costs_more_than_it_saves(
    sizes: list[int],
) -> None:
    big = FileStat(size=SMALL - 1, rows=100, path="big")  # an earlier run's output
    files = [big, *(FileStat(size=s, rows=100, path=f"f{i}") for i, s in enumerate(sizes))]
    stats = _stats(files)
    chosen = compact_candidate(stats, stats.partitions[0])
    assert chosen is not None and "big" not in chosen.paths
    assert len(chosen.paths) >= 2


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(10, 10_000),
    deleted=st.integers(0, 10_000),
    more=st.integers(0, 10_000),
    size=st.integers(SMALL, 4 * TARGET),
)
def test_more_deleted_rows_never_lower_a_purge_score(
    rows: int, deleted: int, more: int, size: int
) -> None:
    deleted = min(deleted, rows)
    heavier = min(rows, deleted + more)

    def score(d: int) -> float:
        s = _stats([FileStat(size=size, rows=rows, deleted=d)])
        c = purge_candidate(s, s.partitions[0])
        return 0.0 if c is None else c.score

    assert score(heavier) >= score(deleted)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(SMALL, 4 * TARGET), max_size=30),
    commits=st.integers(0, 9),
)
def test_a_healthy_table_yields_no_action(sizes: list[int], commits: int) -> None:
    files = [FileStat(size=s, rows=1000) for s in sizes]
    assert candidates(_stats(files, commits_since_manifest=commits)) == []


def _candidate(i: int, score: float, rewrite: int) -> Candidate:
    return Candidate(
        kind="compact",
        table=f"t{i}",
        partition=None,
        score=score,
        rewrite_bytes=rewrite,
        benefit=score * rewrite,
        reason="",
    )


@settings(max_examples=200, deadline=None)
@given(
    found=st.lists(st.tuples(st.floats(0.01, 100.0), st.integers(0, 1 << 30)), max_size=20),
    budget=st.one_of(st.none(), st.integers(0, 4 << 30)),
)
def test_choose_keeps_rank_order_and_never_exceeds_the_budget(
    found: list[tuple[float, int]], budget: int | None
) -> None:
    ranked = sorted((_candidate(i, s, r) for i, (s, r) in enumerate(found)), key=lambda c: -c.score)
    chosen, left = choose(ranked, budget)
    assert sorted(chosen + left, key=ranked.index) == ranked
    assert sorted(chosen, key=ranked.index) == chosen
    if budget is None:
        assert left == []
    else:
        assert sum(c.rewrite_bytes for c in chosen) <= budget
        spent = 0
        for c in ranked:  # greedy: whatever was left did not fit when its turn came
            if c in chosen:
                spent += c.rewrite_bytes
            else:
                assert spent + c.rewrite_bytes > budget


def _stream_stats(partitions: int, big: int, small: list[int]) -> TableStats:
    """Partitions that each hold an earlier run's output of ``big`` bytes and new small
    files of ``small`` bytes, as a stream of micro-batches leaves them."""
    parts = tuple(
        PartitionStats(
            partition={"p": str(i)},
            files=(
                FileStat(size=big, rows=1000, path=f"{i}/big"),
                *(FileStat(size=s, rows=40, path=f"{i}/s{j}") for j, s in enumerate(small)),
            ),
        )
        for i in range(partitions)
    )
    return TableStats(
        name="t",
        target_file_size=TARGET,
        min_file_size=SMALL,
        min_input_files=2,
        purge_ratio=0.2,
        partitions=parts,
    )


def test_the_snowball_rule_leaves_an_earlier_output_until_new_files_add_up() -> None:
    # one partition: a 60 KiB output and three 1.3 KiB batches; a query over it is far
    # within budget, so the batches are merged together and the output is left alone
    stats = _stream_stats(1, 60 << 10, [1330, 1340, 1350])
    (c,) = candidates(stats)
    assert c.kind == "compact" and "0/big" not in c.paths and len(c.paths) == 3
    # once the new files add up to a third of it, it joins the rewrite
    stats = _stream_stats(1, 11 << 10, [1330, 1340, 1350])
    (c,) = candidates(stats)
    assert "0/big" in c.paths and len(c.paths) == 4


def test_the_query_budget_compacts_fully_just_enough_partitions() -> None:
    # 20 partitions of (output + 3 batches): the snowball rule alone would leave 40 files;
    # the budget for a query within 1.3x of 20 fully compacted files is about 30.8
    stats = _stream_stats(20, 60 << 10, [1330, 1340, 1350])
    budget = query_file_budget(stats)
    assert 30 < budget < 31
    chosen = [c for c in candidates(stats) if c.kind == "compact"]
    assert len(chosen) == 20
    full = [c for c in chosen if any(p.endswith("/big") for p in c.paths)]
    files_after = 20 * 2 - len(full)
    assert files_after <= budget < files_after + 1  # no more full rewrites than needed
    assert all(c.figures["full"] for c in full)
