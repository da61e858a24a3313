"""Compaction end to end: rows kept, bounds held, commits, no-ops, dry runs, reports."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import Backend

import lakelog
from lakelog import InvalidArgumentError, Table
from lakelog.storage import Storage

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("kind", pa.string()),
        pa.field("v", pa.float64()),
        pa.field("note", pa.string()),
    ]
)


def batch(start: int, n: int, *, kinds: tuple[str | None, ...] = ("a", "b", None)) -> pa.Table:
    ids = np.arange(start, start + n)
    rng = np.random.default_rng(start)
    v = rng.random(n)
    return pa.table(
        {
            "id": ids,
            "kind": pa.array([kinds[i % len(kinds)] for i in ids], pa.string()),
            "v": pa.array(np.where(ids % 7 == 0, np.nan, v)).cast(pa.float64()),
            "note": pa.array([None if i % 5 == 0 else f"n{i}" for i in ids], pa.string()),
        },
        schema=SCHEMA,
    )


def make_table(
    b: Backend,
    *,
    appends: int = 12,
    rows: int = 300,
    partition_by: tuple[str, ...] = ("kind",),
    properties: dict[str, Any] | None = None,
) -> Table:
    lakelog.write_table(
        b.uri,
        batch(0, rows),
        partition_by=partition_by,
        properties=properties,
        storage_options=b.storage_options,
    )
    t = lakelog.open_table(b.uri, storage_options=b.storage_options)
    for i in range(1, appends):
        t.append(batch(i * rows, rows))
    return t.refresh()


def rows_of(t: Table, version: int | None = None) -> Counter[tuple[Any, ...]]:
    tab = t.snapshot(version).to_arrow()
    cols = [tab.column(c).to_pylist() for c in ("id", "kind", "v", "note")]
    # NaN != NaN: compare floats by their text form
    return Counter(
        (i, k, None if v is None else repr(v), n) for i, k, v, n in zip(*cols, strict=True)
    )


def listing(storage: Storage) -> dict[str, tuple[int, int | None]]:
    return {f.path: (f.size, f.mtime_ms) for f in storage.walk("")}


def test_compaction_keeps_rows_and_bounds(backend: Backend) -> None:
    t = make_table(backend)
    before = rows_of(t)
    v0 = t.version
    old_files = {f.path for f in t.snapshot().files()}
    assert len(old_files) == 36  # 12 appends x 3 partitions (one of them null)
    report = t.compact(target_file_size=1 << 20, row_group_size=250)
    # v0 + 1 is the run's claim on the log, v0 + 2 its rewrite
    assert report.version == v0 + 2 and report.commits == [v0 + 2] and not report.abandoned_groups
    assert rows_of(t) == before
    snap = t.snapshot()
    assert snap.num_files == 3 == report.after_file_count
    assert {f.partition["kind"] for f in snap.files()} == {"a", "b", None}
    for f in snap.files():
        md = pq.ParquetFile(t.storage.open_input(f.path)).metadata
        assert md.num_rows == f.num_rows
        assert all(md.row_group(i).num_rows <= 250 for i in range(md.num_row_groups))
        assert "kind" not in md.schema.names  # partition values stay in the path
    # the commit is a data_change=false rewrite of exactly the planned files
    header = t.history(1)[0]
    assert header.operation == "COMPACT" and header.read_version == v0 + 1  # on its claim
    assert header.metrics["num_removed_files"] == 36 and header.metrics["num_added_files"] == 3
    # time travel to the version before still reads the old files and the same rows
    assert {f.path for f in t.snapshot(v0).files()} == old_files
    assert rows_of(t, v0) == before
    assert all(t.storage.exists(p) for p in old_files)  # removed, not deleted


def test_commit_actions_carry_data_change_false(local_backend: Backend) -> None:
    from lakelog.log.actions import AddFile, RemoveFile
    from lakelog.log.commits import read_commit

    t = make_table(local_backend, appends=4)
    report = t.compact()
    assert report.version is not None
    commit = read_commit(t.storage, report.version)
    kinds = Counter(type(a).__name__ for a in commit.actions)
    assert kinds == {"RemoveFile": 12, "AddFile": 3, "PlanRelease": 1}
    assert all(not a.data_change for a in commit.actions if isinstance(a, (AddFile, RemoveFile)))


def test_target_rows_and_size_cut_files(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=10, rows=300, partition_by=())
    before = rows_of(t)
    report = t.compact(target_rows=700, row_group_size=200)
    assert rows_of(t) == before
    files = t.snapshot().files()
    assert all(f.num_rows <= 700 for f in files)
    assert sum(f.num_rows for f in files) == 3000
    assert report.compacted_file_count == 10 - 0 and report.after_file_count == len(files)
    for f in files:
        md = pq.ParquetFile(t.storage.open_input(f.path)).metadata
        assert max(md.row_group(i).num_rows for i in range(md.num_row_groups)) <= 200


def test_compression_changes_codec_and_bad_codec_is_refused(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=4, partition_by=())
    with pytest.raises(InvalidArgumentError, match="codec"):
        t.compact(compression="zip")
    report = t.compact(compression="snappy")
    assert report.compression_codec == "snappy"
    (f,) = t.snapshot().files()
    md = pq.ParquetFile(t.storage.open_input(f.path)).metadata
    assert md.row_group(0).column(0).compression == "SNAPPY"


def test_dry_run_writes_nothing(backend: Backend) -> None:
    t = make_table(backend, appends=6)
    before = listing(t.storage)
    version = t.version
    report = t.compact(dry_run=True)
    assert listing(t.storage) == before
    assert t.refresh().version == version
    d = report.to_dict()
    assert d["dry_run"] is True and d["version"] is None and d["commits"] == []
    assert d["compacted_file_count"] == 18 and d["estimated_after_file_count"] == 3
    assert sorted(p for g in d["planned_groups"] for p in g) == sorted(
        f.path for f in t.snapshot().files()
    )


@pytest.mark.parametrize("case", ["one-file", "all-large", "one-per-partition", "min-input"])
def test_no_op_commits_nothing(local_backend: Backend, case: str) -> None:
    if case == "one-file":
        t = make_table(local_backend, appends=1, partition_by=())
        kwargs: dict[str, Any] = {}
    elif case == "all-large":
        t = make_table(local_backend, appends=5, partition_by=())
        kwargs = {"target_file_size": 1000}  # every file is over 75% of 1000 bytes
    elif case == "one-per-partition":
        t = make_table(local_backend, appends=1)
        kwargs = {}
    else:
        t = make_table(local_backend, appends=3)
        kwargs = {"min_input_files": 4}
    before = listing(t.storage)
    version = t.version
    report = t.compact(**kwargs)
    assert report.version is None and report.commits == [] and report.compacted_file_count == 0
    assert report.after_file_count == report.before_file_count
    assert t.refresh().version == version
    assert listing(t.storage) == before


def test_partition_filter_limits_the_work(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=5)
    before = rows_of(t)
    report = t.compact(partition_filter=[("kind", "=", "a")])
    assert rows_of(t) == before
    per_kind = Counter(f.partition["kind"] for f in t.snapshot().files())
    assert per_kind == {"a": 1, "b": 5, None: 5}
    assert report.compacted_file_count == 5
    report = t.compact(partition_filter=pc.field("kind").is_null())
    assert Counter(f.partition["kind"] for f in t.snapshot().files()) == {"a": 1, "b": 5, None: 1}
    with pytest.raises(InvalidArgumentError, match="partition columns"):
        t.compact(partition_filter=[("id", ">", 3)])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"target_file_size": 0},
        {"target_rows": -1},
        {"min_file_size": 0},
        {"min_input_files": 0},
        {"row_group_size": 0},
        {"max_concurrent_groups": 0},
        {"max_bytes_per_second": 0},
        {"max_bytes_per_second": -10.0},
        {"partition_filter": [("nope", "=", 1)]},
        {"compression": "lzo"},
        {"partial_progress": "yes"},
        {"dry_run": 1},
    ],
)
def test_invalid_options_fail_before_any_work(
    local_backend: Backend, kwargs: dict[str, Any]
) -> None:
    t = make_table(local_backend, appends=3)
    before = listing(t.storage)
    with pytest.raises(InvalidArgumentError):
        t.compact(**kwargs)
    assert listing(t.storage) == before


def test_partial_progress_commits_per_k_groups(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=4, properties={"lakelog.compaction.groups_per_commit": 2})
    before = rows_of(t)
    v0 = t.version
    report = t.compact(partial_progress=True, max_concurrent_groups=1)
    assert len(report.planned_groups) == 3
    assert report.commits == [v0 + 2, v0 + 3] and report.version == v0 + 3  # v0 + 1: claim
    assert [h.metrics["num_groups"] for h in t.history(2)] == [1, 2]
    assert rows_of(t) == before and t.snapshot().num_files == 3


def test_report_fields_and_log_line(
    local_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    t = make_table(local_backend, appends=4)
    with caplog.at_level(logging.INFO, logger="lakelog"):
        report = t.compact()
    d = report.to_dict()
    for key in (
        "before_file_count",
        "after_file_count",
        "before_total_bytes",
        "after_total_bytes",
        "compacted_file_count",
        "rewritten_bytes",
        "compression_codec",
        "dry_run",
        "planned_groups",
        "estimated_after_file_count",
        "version",
        "commits",
        "retries",
        "abandoned_groups",
        "duration_s",
    ):
        assert key in d
    snap = t.snapshot()
    assert d["after_file_count"] == snap.num_files == 3 and d["before_file_count"] == 12
    assert d["after_total_bytes"] == snap.total_bytes
    assert d["rewritten_bytes"] == d["before_total_bytes"]
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("compacted"))
    assert re.fullmatch(r"compacted 12 files; file count 12->3; bytes \d+->\d+", line)
    assert line == report.summary()
    mixed = dataclasses.replace(
        report, abandoned_groups=["g1", "g2"], extra={"failed_groups": {"g2": "boom"}}
    )
    assert mixed.summary().endswith(
        "; abandoned 1 groups (claimed by another run, or sources removed concurrently); "
        f"1 of {len(report.planned_groups)} groups failed and were not committed, first "
        "group g2: boom (all in failed_groups)"
    )


def test_pacing_slows_reads_to_the_rate(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=6, partition_by=())
    total = t.snapshot().total_bytes
    rate = total / 2  # two seconds of reading at this rate, one of them burst
    report = t.compact(max_bytes_per_second=rate)
    assert report.version is not None
    # the bucket holds back everything beyond its one-second burst
    assert report.paced_seconds >= 0.5
    assert report.duration_s >= report.paced_seconds / 2  # two threads may wait at once


def test_large_files_stay_and_small_ones_merge(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=1, rows=20000, partition_by=())
    big = t.snapshot().files()[0]
    for i in range(5):
        t.append(batch(100000 + i * 50, 50))
    before = rows_of(t)
    report = t.compact(target_file_size=big.size_bytes)
    assert rows_of(t) == before
    paths = {f.path for f in t.snapshot().files()}
    assert big.path in paths and len(paths) == 2 and report.compacted_file_count == 5


def test_output_files_roll_at_the_target_size(local_backend: Backend) -> None:
    t = make_table(local_backend, appends=12, rows=2000, partition_by=())
    before = rows_of(t)
    source = max(f.size_bytes for f in t.snapshot().files())
    target = 4 * source
    # uncompressed outputs are larger than their zstd inputs: each group rolls over
    report = t.compact(target_file_size=target, compression="none", row_group_size=500)
    assert rows_of(t) == before
    groups = len(report.planned_groups)
    files = t.snapshot().files()
    assert len(files) > groups  # the writer cut files inside groups
    for f in files:
        md = pq.ParquetFile(t.storage.open_input(f.path)).metadata
        biggest_rg = max(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
        assert all(md.row_group(i).num_rows <= 500 for i in range(md.num_row_groups))
        # a file closes at the first row group that reaches the target
        assert f.size_bytes <= target + biggest_rg + 16 * 1024
