"""Table.optimize: same rows, files ordered by the key, specs, validation, layout quality."""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog.errors import InvalidArgumentError
from lakelog.maintenance.clustering.layout import FileBoxes
from lakelog.maintenance.clustering.spec import (
    TAG_KEY_MAX,
    TAG_KEY_MIN,
    TAG_SPEC,
    TAG_TIER,
    load_spec,
)

SCHEMA = pa.schema(
    [
        ("a", pa.int64()),
        ("b", pa.float64()),
        ("s", pa.string()),
        ("d", pa.date32()),
        ("p", pa.string()),
        ("l", pa.list_(pa.int64())),
    ]
)


def _batch(seed: int, n: int, *, nulls: bool = False) -> pa.Table:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 100_000, n)
    b = rng.random(n)
    mask = rng.random(n) < 0.05 if nulls else np.zeros(n, dtype=bool)
    return pa.table(
        {
            "a": pa.array(a, mask=mask),
            "b": pa.array(b, mask=mask[::-1].copy()),
            "s": [f"prefix-shared-{i:06d}" for i in rng.integers(0, 10**6, n)],
            "d": pa.array(rng.integers(18_000, 19_000, n).astype(np.int32)).cast(pa.date32()),
            "p": ["x" if i % 3 else "y" for i in range(n)],
            "l": [[1]] * n,
        },
        schema=SCHEMA,
    )


def _table(
    uri: str,
    *,
    batches: int = 6,
    rows: int = 3000,
    nulls: bool = False,
    partition_by: tuple[str, ...] = (),
    target: int = 60_000,
    storage_options: dict[str, Any] | None = None,
) -> lakelog.Table:
    t = lakelog.create_table(
        uri,
        SCHEMA,
        partition_by=partition_by,
        storage_options=storage_options,
        properties={"lakelog.target_file_size": str(target)},
    )
    for i in range(batches):
        t.append(_batch(i, rows, nulls=nulls))
    return t


def _rows(t: lakelog.Table, version: int | None = None) -> list[tuple[Any, ...]]:
    tbl = t.snapshot(version).to_arrow(columns=["a", "b", "s", "d", "p"])
    return sorted(
        zip(*(tbl.column(c).to_pylist() for c in tbl.column_names), strict=True), key=repr
    )


def _check_files_sorted(t: lakelog.Table) -> None:
    snap = t.snapshot()
    for f in snap.files():
        assert TAG_SPEC in f.tags, f.path
        spec = load_spec(t.storage, f, snap.schema)
        assert spec is not None and spec.spec_id == f.tags[TAG_SPEC]
        with t.storage.open_input(f.path) as src:
            data = pq.read_table(src)
        keys = spec.keys(data)
        assert np.all(keys[1:] >= keys[:-1]), f.path
        assert int(keys[0]) == int(f.tags[TAG_KEY_MIN])
        assert int(keys[-1]) == int(f.tags[TAG_KEY_MAX])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"zorder_by": ["a", "b"]},
        {"zorder_by": ["a", "b", "s"], "curve": "zorder"},
        {"sort_by": ["d", "a"]},
    ],
)
def test_same_rows_and_each_file_ordered_by_its_key(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    t = _table(str(tmp_path / "t"), nulls=True)
    before = _rows(t)
    rep = t.optimize(**kwargs)
    assert rep.version == t.version and rep.commits == [t.version]
    assert _rows(t) == before
    assert _rows(t, rep.read_version) == before  # time travel still sees the old files
    _check_files_sorted(t)
    d = rep.to_dict()
    assert d["curve"] == kwargs.get("curve", "hilbert" if "zorder_by" in kwargs else "linear")
    assert (d["zorder_columns"] or d["sort_columns"]) == kwargs.get(
        "zorder_by", kwargs.get("sort_by")
    )
    assert d["compacted_file_count"] == 6 and d["rewritten_bytes"] > 0
    header = t.history(limit=1)[0]
    assert header.operation == "OPTIMIZE"
    commit_actions = [a for a in lakelog.log.commits.read_commit(t.storage, t.version).actions]
    assert all(not a.data_change for a in commit_actions if hasattr(a, "data_change"))


def test_every_backend_and_base_key_ranges_disjoint(backend: Any) -> None:
    t = _table(backend.uri, batches=4, storage_options=backend.storage_options)
    before = _rows(t)
    t.optimize(zorder_by=["a", "b"])
    assert _rows(t) == before
    files = t.snapshot().files()
    assert len(files) > 1
    ranges = sorted((int(f.tags[TAG_KEY_MIN]), int(f.tags[TAG_KEY_MAX])) for f in files)
    assert all(x[1] < y[0] for x, y in itertools.pairwise(ranges))
    assert {f.tags[TAG_TIER] for f in files} == {"base"}


def test_partitioned_table_with_nulls_clusters_each_partition(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"), nulls=True, partition_by=("p",), target=30_000)
    before = _rows(t)
    rep = t.optimize(zorder_by=["b", "a"])
    assert _rows(t) == before
    _check_files_sorted(t)
    assert len(rep.planned_groups) == 2
    assert {f.partition["p"] for f in t.snapshot().files()} == {"x", "y"}
    # a partition filter limits the work to one partition
    t.append(_batch(50, 500))
    rep2 = t.optimize(zorder_by=["b", "a"], partition_filter=[("p", "=", "y")])
    assert all("p=y" in p for g in rep2.planned_groups for p in g)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"zorder_by": ["a", "nope"]}, "unknown"),
        ({"zorder_by": ["p", "a"]}, "partition"),
        ({"zorder_by": []}, "at least one"),
        ({"sort_by": []}, "at least one"),
        ({"zorder_by": ["l"]}, "curve clustering"),
        ({"zorder_by": ["a", "a"]}, "distinct"),
        ({}, "neither"),
        ({"zorder_by": ["a"], "sort_by": ["b"]}, "both"),
        ({"zorder_by": ["a", "b"], "curve": "peano"}, "curve"),
        ({"zorder_by": ["a"], "target_file_size": 0}, "target_file_size"),
        ({"zorder_by": ["a"], "max_group_bytes": -1}, "max_group_bytes"),
        ({"zorder_by": ["a"], "compression": "zip"}, "codec"),
        ({"zorder_by": ["a"], "incremental": "yes"}, "incremental"),
        ({"zorder_by": ["a"], "partition_filter": [("a", "=", 1)]}, "partition"),
    ],
)
def test_invalid_requests_fail_before_any_work(
    tmp_path: Path, kwargs: dict[str, Any], match: str
) -> None:
    t = _table(str(tmp_path / "t"), batches=2, partition_by=("p",))
    version = t.version
    files_before = sorted(p.name for p in (tmp_path / "t").rglob("*.parquet"))
    with pytest.raises(InvalidArgumentError, match=match):
        t.optimize(**kwargs)
    assert t.refresh().version == version
    assert sorted(p.name for p in (tmp_path / "t").rglob("*.parquet")) == files_before


def test_dry_run_writes_nothing_and_reports_the_plan(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    listing = sorted(str(p) for p in (tmp_path / "t").rglob("*"))
    rep = t.optimize(zorder_by=["a", "b"], dry_run=True)
    assert rep.dry_run and rep.version is None and rep.compacted_file_count == 6
    assert rep.estimated_after_file_count >= 1 and len(rep.planned_groups) == 1
    assert sorted(str(p) for p in (tmp_path / "t").rglob("*")) == listing
    assert t.refresh().version == rep.read_version


def test_nothing_to_do_commits_nothing(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    t.optimize(zorder_by=["a", "b"])
    v = t.version
    rep = t.optimize(zorder_by=["a", "b"])
    assert rep.version is None and rep.compacted_file_count == 0 and t.refresh().version == v
    empty = lakelog.create_table(str(tmp_path / "e"), SCHEMA)
    assert empty.optimize(zorder_by=["a"]).version is None


# -- layout quality ----------------------------------------------------------------------


def _queries(seed: int = 7) -> dict[str, list[dict[str, tuple[float, float]]]]:
    rng = np.random.default_rng(seed)
    out: dict[str, list[dict[str, tuple[float, float]]]] = {"A": [], "B": [], "AB": []}
    for _ in range(100):
        a = float(rng.integers(0, 99_000))
        out["A"].append({"a": (a, a + 999)})
        b = float(rng.uniform(0, 0.99))
        out["B"].append({"b": (b, b + 0.01)})
        a, b = float(rng.integers(0, 90_000)), float(rng.uniform(0, 0.9))
        out["AB"].append({"a": (a, a + 9_999), "b": (b, b + 0.1)})
    return out


def _quality(t: lakelog.Table) -> dict[str, float]:
    boxes = FileBoxes.from_snapshot(t.snapshot(), ["a", "b"])
    return {k: float(boxes.fractions(q).mean()) for k, q in _queries().items()}


def test_curves_beat_linear_sort_on_two_columns_and_no_clustering_everywhere(
    tmp_path: Path,
) -> None:
    results = {}
    for name, kwargs in [
        ("none", None),
        ("linear", {"sort_by": ["a", "b"]}),
        ("zorder", {"zorder_by": ["a", "b"], "curve": "zorder"}),
        ("hilbert", {"zorder_by": ["a", "b"]}),
    ]:
        t = _table(str(tmp_path / name), batches=10, rows=4000, target=25_000)
        if kwargs is not None:
            t.optimize(**kwargs)
        results[name] = _quality(t)
    for curve in ("zorder", "hilbert"):
        assert results[curve]["AB"] < results["linear"]["AB"]
        assert results[curve]["B"] < results["linear"]["B"]
        for q in ("A", "B", "AB"):
            assert results[curve][q] < results["none"][q]
        assert max(results[curve].values()) < 0.5
    assert results["linear"]["A"] < results["hilbert"]["A"]  # the first sort column wins


# -- incremental runs -------------------------------------------------------------------


def test_late_append_in_one_region_rewrites_only_the_files_it_overlaps(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"), batches=10, rows=4000, target=25_000)
    t.optimize(zorder_by=["a", "b"])
    base = {f.path: f for f in t.snapshot().files()}
    spec = load_spec(t.storage, next(iter(base.values())), t.schema)
    assert spec is not None and len(base) > 20
    late = _batch(99, 800)
    late = late.set_column(0, "a", pa.array(np.arange(800) % 3000, pa.int64()))
    late = late.set_column(1, "b", pa.array(np.linspace(0.0, 0.02, 800)))
    new_keys = spec.keys(late)
    t.append(late)
    before = _rows(t)
    rep = t.optimize(zorder_by=["a", "b"])
    assert _rows(t) == before
    removed = {p for g in rep.planned_groups for p in g} - {f.path for f in t.snapshot().files()}
    removed_base = [base[p] for p in removed if p in base]
    assert 0 < len(removed_base) < len(base) // 4
    # every rewritten base file owns (by key range) some of the late rows
    starts = sorted(int(f.tags[TAG_KEY_MIN]) for f in base.values())
    for f in removed_base:
        lo = int(f.tags[TAG_KEY_MIN])
        nxt = next((s for s in starts if s > lo), 2**64)
        lo = 0 if lo == starts[0] else lo
        assert np.any((new_keys >= lo) & (new_keys < nxt)), f.path
    _check_files_sorted(t)
    assert rep.rewritten_bytes < sum(f.size_bytes for f in base.values()) / 4


def test_small_spread_append_becomes_delta_files_without_touching_base(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"), batches=10, rows=4000, target=25_000)
    t.optimize(zorder_by=["a", "b"])
    base = {f.path for f in t.snapshot().files()}
    res = t.append(_batch(123, 400))
    appended = {a.path for a in res.actions if isinstance(a, lakelog.log.actions.AddFile)}
    rep = t.optimize(zorder_by=["a", "b"])
    assert {p for g in rep.planned_groups for p in g} == appended
    live = t.snapshot().files()
    assert base <= {f.path for f in live}
    assert {f.tags[TAG_TIER] for f in live if f.path not in base} == {"delta"}
    _check_files_sorted(t)


def test_repeated_small_appends_do_not_snowball(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"), batches=10, rows=4000, target=100_000)
    t.optimize(zorder_by=["a", "b"])
    base_count = t.snapshot().num_files
    appended = rewritten = 0
    merged_base = False
    for r in range(25):
        res = t.append(_batch(1000 + r, 400))
        appended += sum(
            a.size_bytes for a in res.actions if isinstance(a, lakelog.log.actions.AddFile)
        )
        rep = t.optimize(zorder_by=["a", "b"])
        rewritten += rep.rewritten_bytes
        merged_base |= rep.rewritten_bytes > 5 * rep.to_dict()["new_bytes"]
        # bounded: delta files (>= 1/16 target) fold back once 1/6 of the base is pending
        assert t.snapshot().num_files < 5 * base_count
    assert merged_base  # delta rows were merged into the base at least once
    assert rewritten / appended < 10
    assert t.snapshot().num_rows == 40_000 + 25 * 400  # every row exactly once
    ids = t.snapshot().to_arrow(columns=["s", "a", "b"])
    assert ids.group_by(["s", "a", "b"]).aggregate([]).num_rows == ids.num_rows


def test_full_run_recomputes_boundaries_and_rewrites_everything(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    first = t.optimize(zorder_by=["a", "b"])
    t.append(_batch(77, 3000))
    rep = t.optimize(zorder_by=["a", "b"], incremental=False)
    assert rep.to_dict()["spec_id"] != first.to_dict()["spec_id"]
    assert rep.compacted_file_count == first.output_file_count + 1
    assert {f.tags[TAG_SPEC] for f in t.snapshot().files()} == {rep.to_dict()["spec_id"]}
    # other columns make another spec: every file is rewritten again
    rep2 = t.optimize(zorder_by=["b", "a"])
    assert rep2.compacted_file_count == rep.output_file_count


def test_saved_plan_round_trips(tmp_path: Path) -> None:
    from lakelog.maintenance.clustering.planner import ClusterPlan, cluster_options, plan_clustering
    from lakelog.maintenance.clustering.sampling import fresh_keys_reader
    from lakelog.maintenance.clustering.spec import boundaries_from_sample

    t = _table(str(tmp_path / "t"))
    snap = t.snapshot()
    spec = boundaries_from_sample(snap.to_arrow(columns=["a", "b"]), ["a", "b"], "hilbert")
    opts = cluster_options(snap)
    keys = fresh_keys_reader(t.storage, snap.schema, spec)
    plan = plan_clustering(snap, spec, opts, incremental=True, fresh_keys=keys)
    again = ClusterPlan.from_json(plan.to_json())
    assert again == plan and again.cluster_spec(snap.schema).spec_id == spec.spec_id
    assert "optimize plan at version" in str(again)
    with pytest.raises(InvalidArgumentError):
        ClusterPlan.from_json("{not json")


def test_dates_and_timestamps_cluster(tmp_path: Path) -> None:
    ts = pa.array(
        [dt.datetime(2024, 1, 1) + dt.timedelta(minutes=i * 7) for i in range(4000)],
        pa.timestamp("us"),
    )
    t = lakelog.write_table(str(tmp_path / "ts"), pa.table({"ts": ts, "v": np.arange(4000)}))
    del t
    table = lakelog.open_table(str(tmp_path / "ts"))
    table.append(pa.table({"ts": ts, "v": np.arange(4000)}))
    table.optimize(zorder_by=["ts", "v"], target_file_size=10_000)
    snap = table.snapshot()
    assert snap.num_rows == 8000 and snap.num_files > 2
    assert all(TAG_SPEC in f.tags for f in snap.files())
