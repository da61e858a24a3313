"""The compaction planner: pure, deterministic, bounded groups (property-based and examples)."""

from __future__ import annotations

import datetime as dt
import math
import random
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog import InvalidArgumentError, UnsupportedFormatError
from lakelog.log.actions import DataFile, Metadata, encode_schema
from lakelog.log.files import files_from_adds
from lakelog.log.snapshot import Snapshot
from lakelog.maintenance.compaction.planner import CompactionPlan, bin_pack, plan_compaction
from lakelog.storage import Storage

MiB = 1024 * 1024
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("day", pa.date32()),
        pa.field("kind", pa.string()),
        pa.field("v", pa.float64()),
    ]
)


def snapshot_of(
    files: Sequence[DataFile],
    *,
    partition_by: Sequence[str] = (),
    properties: dict[str, str] | None = None,
    version: int = 7,
) -> Snapshot:
    md = Metadata(
        table_id="t-123",
        schema=encode_schema(SCHEMA),
        partition_by=tuple(partition_by),
        properties=properties or {},
    )
    return Snapshot(
        Storage("memory://plan-tests/t"),
        version=version,
        timestamp_ms=1,
        metadata=md,
        files=files_from_adds(list(files)),
    )


def df(path: str, size: int, rows: int = 100, **partition: str | None) -> DataFile:
    return DataFile(path=path, size_bytes=size, num_rows=rows, partition=dict(partition))


# -- strategies ---------------------------------------------------------------------

PARTS = [("a", "2024-01-01"), ("a", None), ("b", "2024-01-02"), (None, "2024-01-01")]


@st.composite
def tables(draw: st.DrawFn) -> list[DataFile]:
    n = draw(st.integers(0, 60))
    out = []
    for i in range(n):
        kind, day = draw(st.sampled_from(PARTS))
        size = draw(st.integers(1, 3000))
        rows = draw(st.integers(1, 500))
        out.append(df(f"f{i:03d}.parquet", size, rows, kind=kind, day=day))
    return out


def _key(f: DataFile) -> tuple[str | None, ...]:
    return tuple(sorted(f.partition.items(), key=lambda kv: kv[0]))  # type: ignore[arg-type]


# -- properties -----------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    files=tables(),
    target=st.integers(100, 5000),
    target_rows=st.one_of(st.none(), st.integers(50, 1500)),
    min_input_files=st.integers(1, 5),
    claimed=st.sets(st.integers(0, 60), max_size=20),
)
def test_plan_properties(
    files: list[DataFile],
    target: int,
    target_rows: int | None,
    min_input_files: int,
    claimed: set[int],
) -> None:
    snap = snapshot_of(files, partition_by=["kind", "day"])
    exclude = {files[i].path for i in claimed if i < len(files)}  # under another run's claim
    plan = plan_compaction(
        snap,
        target_file_size=target,
        target_rows=target_rows,
        min_input_files=min_input_files,
        exclude=exclude,
    )
    min_size = int(target * 0.75)
    min_rows = None if target_rows is None else int(target_rows * 0.75)
    seen: set[str] = set()
    for g in plan.groups:
        # never across partitions, and the group's partition is its files' partition
        assert all(f.partition == g.partition for f in g.files)
        # only candidates, each in at most one group
        for f in g.files:
            assert f.path not in exclude
            assert f.size_bytes < min_size
            assert min_rows is None or f.num_rows < min_rows
            assert f.path not in seen
            seen.add(f.path)
        # bounded (a group has >= 2 files, so no single file is over on its own)
        assert len(g.files) >= max(2, min_input_files)
        assert g.total_bytes <= target
        assert target_rows is None or g.num_rows <= target_rows
        assert g.estimated_output_files == 1
    assert len(plan.groups) <= max(1, plan.source_file_count // 2)
    assert plan.source_file_count == len(seen)
    assert plan.read_version == 7 and plan.snapshot_file_count == len(files)
    # deterministic: the same files in another order give the same plan
    shuffled = list(files)
    random.Random(1).shuffle(shuffled)
    again = plan_compaction(
        snapshot_of(shuffled, partition_by=["kind", "day"]),
        target_file_size=target,
        target_rows=target_rows,
        min_input_files=min_input_files,
        exclude=exclude,
    )
    assert [g.group_id for g in again.groups] == [g.group_id for g in plan.groups]
    # JSON round trip
    assert CompactionPlan.from_json(plan.to_json()) == plan


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 400), st.integers(1, 400)), max_size=80),
    max_bytes=st.one_of(st.none(), st.integers(1, 1000)),
    max_rows=st.one_of(st.none(), st.integers(1, 1000)),
)
def test_ffd_bin_pack_properties(
    sizes: list[tuple[int, int]], max_bytes: int | None, max_rows: int | None
) -> None:
    if max_bytes is None and max_rows is None:
        max_bytes = 500
    files = [df(f"f{i}", b, r) for i, (b, r) in enumerate(sizes)]
    bins = bin_pack(files, max_bytes=max_bytes, max_rows=max_rows)
    cap_b = math.inf if max_bytes is None else max_bytes
    cap_r = math.inf if max_rows is None else max_rows
    # a partition of the input: every file exactly once
    assert sorted(f.path for b in bins for f in b) == sorted(f.path for f in files)
    assert len(bins) <= len(files)
    for b in bins:
        total_b = sum(f.size_bytes for f in b)
        total_r = sum(f.num_rows for f in b)
        if len(b) > 1:  # only a file over the bound on its own may exceed it, alone
            assert total_b <= cap_b and total_r <= cap_r
    # first fit: no two bins could have been one
    for i in range(len(bins)):
        for j in range(i + 1, len(bins)):
            b = sum(f.size_bytes for f in bins[i]) + sum(f.size_bytes for f in bins[j])
            r = sum(f.num_rows for f in bins[i]) + sum(f.num_rows for f in bins[j])
            assert b > cap_b or r > cap_r
    # never more bins than the trivial lower bound needs by more than 2x (FFD <= 11/9 OPT + 1)
    if max_rows is None and all(s <= cap_b for s, _ in sizes) and sizes:
        lower = math.ceil(sum(s for s, _ in sizes) / cap_b)
        assert len(bins) <= 2 * lower + 1


# -- examples ------------------------------------------------------------------------


def test_defaults_come_from_table_properties() -> None:
    files = [df(f"f{i}", 10 * MiB) for i in range(30)] + [df("big", 100 * MiB)]
    plan = plan_compaction(snapshot_of(files))
    assert plan.options.target_file_size == 128 * MiB
    assert plan.options.min_file_size == 96 * MiB
    assert plan.options.compression == "zstd" and plan.options.row_group_size == 256 * 1024
    assert "big" not in {p for g in plan.groups for p in g.paths}
    assert [len(g.files) for g in plan.groups] == [12, 12, 6]
    props = {
        "lakelog.target_file_size": str(40 * MiB),
        "lakelog.compression": "snappy",
        "lakelog.compaction.min_input_files": "4",
    }
    plan = plan_compaction(snapshot_of(files, properties=props))
    assert plan.options.target_file_size == 40 * MiB and plan.options.compression == "snappy"
    assert [len(g.files) for g in plan.groups] == [4, 4, 4, 4, 4, 4, 4]  # 30 -> 7x4, 2 left


def test_rows_only_and_both_bounds() -> None:
    files = [df(f"f{i}", 1000, rows=300) for i in range(10)]
    plan = plan_compaction(snapshot_of(files), target_rows=1000)
    assert plan.options.target_file_size is None
    assert [len(g.files) for g in plan.groups] == [3, 3, 3]
    # both given: the byte bound closes groups first here
    plan = plan_compaction(snapshot_of(files), target_rows=1000, target_file_size=2500)
    assert [len(g.files) for g in plan.groups] == [2, 2, 2, 2, 2]
    # a file at 75% of target_rows is not a candidate, even if small in bytes
    files.append(df("many-rows", 10, rows=800))
    plan = plan_compaction(snapshot_of(files), target_rows=1000)
    assert "many-rows" not in {p for g in plan.groups for p in g.paths}


def test_no_op_cases_plan_nothing() -> None:
    assert plan_compaction(snapshot_of([])).groups == ()
    assert plan_compaction(snapshot_of([df("one", 10)])).groups == ()
    large = [df(f"f{i}", 100 * MiB) for i in range(5)]
    assert plan_compaction(snapshot_of(large)).groups == ()
    # one small file per partition: nothing to merge anywhere
    spread = [df(f"f{i}", 10, kind=k, day=None) for i, k in enumerate("abc")]
    assert plan_compaction(snapshot_of(spread, partition_by=["kind", "day"])).groups == ()
    # min_input_files above what a partition has
    few = [df(f"f{i}", 10) for i in range(3)]
    assert plan_compaction(snapshot_of(few), min_input_files=4).groups == ()
    assert len(plan_compaction(snapshot_of(few), min_input_files=3).groups) == 1


def test_partition_filter_limits_work() -> None:
    files = [
        df(f"{k}-{d}-{i}", 10, kind=k, day=d)
        for k in ("a", "b", None)
        for d in ("2024-01-01", "2024-01-02", None)
        for i in range(3)
    ]
    snap = snapshot_of(files, partition_by=["kind", "day"])
    assert len(plan_compaction(snap).groups) == 9

    def parts(plan: CompactionPlan) -> list[tuple[str | None, str | None]]:
        return sorted(((g.partition["kind"], g.partition["day"]) for g in plan.groups), key=str)

    plan = plan_compaction(snap, partition_filter=[("kind", "=", "a")])
    assert parts(plan) == sorted([("a", "2024-01-01"), ("a", "2024-01-02"), ("a", None)], key=str)
    # date strings in DNF are cast to the column's type; Expressions work too
    plan = plan_compaction(snap, partition_filter=[("day", "=", "2024-01-02"), ("kind", "!=", "a")])
    assert parts(plan) == [("b", "2024-01-02")]
    plan = plan_compaction(snap, partition_filter=pc.field("day").is_null())
    assert {d for _, d in parts(plan)} == {None}
    plan = plan_compaction(
        snap, partition_filter=[[("kind", "=", "b")], [("day", "=", dt.date(2024, 1, 1))]]
    )
    assert len(plan.groups) == 5
    assert plan.partition_filter is not None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"target_file_size": 0}, "target_file_size"),
        ({"target_file_size": -5}, "target_file_size"),
        ({"target_file_size": True}, "target_file_size"),
        ({"target_file_size": 1.5}, "target_file_size"),
        ({"target_rows": 0}, "target_rows"),
        ({"min_file_size": 0}, "min_file_size"),
        ({"min_input_files": 0}, "min_input_files"),
        ({"row_group_size": -1}, "row_group_size"),
        ({"compression": "zip"}, "codec"),
        ({"partition_filter": [("nope", "=", "x")]}, "partition columns"),
        ({"partition_filter": [("id", "=", 3)]}, "partition columns"),
        ({"partition_filter": pc.field("v") > 1}, "partition columns"),
        ({"partition_filter": [("day", "=", "not-a-date")]}, "date32"),
        ({"partition_filter": "kind = a"}, "DNF"),
    ],
)
def test_invalid_options_are_clear_errors(kwargs: dict[str, object], message: str) -> None:
    snap = snapshot_of([], partition_by=["kind", "day"])
    with pytest.raises(InvalidArgumentError, match=message):
        plan_compaction(snap, **kwargs)  # type: ignore[arg-type]


def test_partition_filter_on_unpartitioned_table_is_an_error() -> None:
    with pytest.raises(InvalidArgumentError, match="unpartitioned"):
        plan_compaction(snapshot_of([df("a", 1), df("b", 1)]), partition_filter=[("id", "=", 1)])


def test_plan_json_and_description() -> None:
    files = [df(f"f{i}", 10, kind="a", day="2024-01-01") for i in range(4)]
    plan = plan_compaction(snapshot_of(files, partition_by=["kind", "day"]), target_file_size=1000)
    text = plan.to_json()
    loaded = CompactionPlan.from_json(text.encode())
    assert loaded == plan and loaded.arrow_schema() == SCHEMA
    g = plan.groups[0]
    assert g.group_id.startswith("g-") and plan.group(g.group_id) == g
    desc = str(plan)
    assert g.group_id in desc and "kind=a/day=2024-01-01" in desc and "4 files" in desc
    assert "f0" not in desc and "f0" in plan.describe(files=True)
    with pytest.raises(InvalidArgumentError, match="group id"):
        plan.group("g-nope")
    with pytest.raises(InvalidArgumentError, match="compaction plan"):
        CompactionPlan.from_json("{not json")
    with pytest.raises(InvalidArgumentError, match="compaction plan"):
        CompactionPlan.from_json('{"kind": "compact"}')
    with pytest.raises(UnsupportedFormatError, match="newer lakelog"):
        CompactionPlan.from_json(text.replace('"plan_format":1', '"plan_format":99'))
