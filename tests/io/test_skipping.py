"""Skipping inside files: what every writer path puts in the files (page index, bloom
filters, truthful sorting_columns, compact row groups), the bloom filter reader
against pyarrow's writer, plan-time row-group pruning that never loses a row, and
``lakelog inspect``."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakelog
from lakelog.errors import DataFileMissingError, InvalidArgumentError
from lakelog.io.bloom import encode_value, parse_bloom_filter, xxh64
from lakelog.io.footers import describe_files
from lakelog.maintenance.clustering.sort import row_group_cut
from lakelog.scan.skipping import collect_skip_stats

BLOOM = "lakelog.parquet.bloom_filter_columns"


def _footers(uri: str) -> list[tuple[str, pq.FileMetaData]]:
    table = lakelog.open_table(uri)
    out = []
    for f in table.snapshot().files():
        with table.storage.open_input(f.path) as fh:
            out.append((f.path, pq.read_metadata(fh)))
    return out


def _column_index(md: pq.FileMetaData, name: str) -> int:
    return [md.schema.column(i).path for i in range(md.num_columns)].index(name)


def _has_bloom(md: pq.FileMetaData, name: str) -> bool:
    i = _column_index(md, name)
    return all(
        (md.row_group(r).column(i).bloom_filter_offset or 0) > 0 for r in range(md.num_row_groups)
    )


def _has_page_index(md: pq.FileMetaData) -> bool:
    return all(
        md.row_group(r).column(i).has_column_index and md.row_group(r).column(i).has_offset_index
        for r in range(md.num_row_groups)
        for i in range(md.num_columns)
    )


def _data(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "customer": rng.integers(0, n // 4 + 1, n),
            "name": pa.array([f"n{v}" for v in rng.integers(0, 10**6, n)]),
            "x": rng.random(n),
        }
    )


# -- the hash and the filter reader --------------------------------------------------


def test_xxh64_reference_vectors() -> None:
    # published XXH64 test vectors (seed 0), covering the <4, <8, <32 and >=32 byte paths
    assert xxh64(b"") == 0xEF46DB3751D8E999
    assert xxh64(b"a") == 0xD24EC4F1A98C6E5B
    assert xxh64(b"abc") == 0x44BC2CF5AD770999
    assert xxh64(b"message digest") == 0x066ED728FCEEB3BE
    assert xxh64(b"abcdefghijklmnopqrstuvwxyz") == 0xCFE1F278FA89835C
    assert (
        xxh64(b"12345678901234567890123456789012345678901234567890123456789012345678901234567890")
        == 0xE04A477F19EE145D
    )


def _filters(path: Path) -> dict[str, tuple[pq.ColumnSchema, Any]]:
    md = pq.read_metadata(path)
    data = path.read_bytes()
    out = {}
    for i in range(md.num_columns):
        col = md.row_group(0).column(i)
        if col.bloom_filter_offset:
            start = col.bloom_filter_offset
            bf, _ = parse_bloom_filter(data[start : start + col.bloom_filter_length])
            out[md.schema.column(i).path] = (md.schema.column(i), bf)
    return out


TYPED = {
    "i64": pa.int64(),
    "i32": pa.int32(),
    "i8": pa.int8(),
    "u32": pa.uint32(),
    "u64": pa.uint64(),
    "s": pa.string(),
    "ls": pa.large_string(),
    "b": pa.binary(),
    "d": pa.date32(),
    "ts_us": pa.timestamp("us"),
    "ts_s_tz": pa.timestamp("s", tz="UTC"),
    "ts_ns": pa.timestamp("ns"),
    "dec": pa.decimal128(12, 3),
    "dec38": pa.decimal128(38, 2),
    "fsb": pa.binary(6),
}


def _typed_values(rng: np.random.Generator, n: int) -> dict[str, pa.Array]:
    ints = rng.integers(-(10**12), 10**12, n)
    pos = np.abs(ints)
    return {
        "i64": pa.array(ints),
        "i32": pa.array(ints % 2**31 - 2**30, pa.int32()),
        "i8": pa.array(ints % 256 - 128, pa.int8()),
        "u32": pa.array(pos % 2**32, pa.uint32()),
        "u64": pa.array(pos.astype(np.uint64) * np.uint64(9_000_000), pa.uint64()),
        "s": pa.array([f"k{v}é" for v in ints]),
        "ls": pa.array([f"k{v}" for v in ints], pa.large_string()),
        "b": pa.array([int(v).to_bytes(8, "little", signed=True) for v in ints]),
        "d": pa.array(ints % 40_000, pa.int32()).cast(pa.date32()),
        "ts_us": pa.array(ints, pa.timestamp("us")),
        "ts_s_tz": pa.array(ints % 10**9, pa.timestamp("s", tz="UTC")),
        "ts_ns": pa.array(ints, pa.timestamp("ns")),
        "dec": pa.array(
            [decimal.Decimal(int(v) % 10**9) / 1000 for v in ints], pa.decimal128(12, 3)
        ),
        "dec38": pa.array([decimal.Decimal(int(v)) / 100 for v in ints], pa.decimal128(38, 2)),
        "fsb": pa.array(
            [int(v).to_bytes(8, "little", signed=True)[:6] for v in ints], pa.binary(6)
        ),
    }


def test_bloom_reader_matches_pyarrow_writer(tmp_path: Path) -> None:
    """Every written value is "maybe present" in the filter pyarrow wrote (a wrong hash
    or encoding would miss almost all), and absent values are mostly rejected."""
    rng = np.random.default_rng(7)
    present = _typed_values(rng, 3000)
    absent = _typed_values(np.random.default_rng(8), 1000)
    path = tmp_path / "b.parquet"
    pq.write_table(
        pa.table(present),
        path,
        bloom_filter_options={c: {"ndv": 3000, "fpp": 0.01} for c in TYPED},
    )
    filters = _filters(path)
    assert set(filters) == set(TYPED)
    for name, (descr, bf) in filters.items():
        for v in present[name]:
            enc = encode_value(v, descr)
            assert enc is not None, (name, v)
            assert bf.might_contain_hash(xxh64(enc)), (name, v)
        if name == "i8":
            continue  # 256 values: the absent ones are present too
        probes = list(absent[name].filter(pc.invert(pc.is_in(absent[name], present[name]))))
        hits = sum(bf.might_contain_hash(xxh64(encode_value(v, descr) or b"")) for v in probes)
        assert hits < 0.05 * len(probes), (name, hits, len(probes))


def test_bloom_reader_refuses_what_it_cannot_encode(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"i": [1, 2]}), path, bloom_filter_options={"i": True})
    descr = pq.read_metadata(path).schema.column(0)
    assert encode_value(pa.scalar(None, pa.int64()), descr) is None
    assert encode_value(pa.scalar("1"), descr) is None  # a string is not an INT64
    assert encode_value(pa.scalar(1.5), descr) is None


# -- what the writers put in the files ------------------------------------------------


def test_defaults_page_index_and_no_bloom(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, _data(1000))
    for _, md in _footers(uri):
        assert _has_page_index(md)
        assert not any(_has_bloom(md, c) for c in ("id", "customer", "name", "x"))


def test_properties_turn_features_on_and_off(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lakelog.write_table(
        uri,
        _data(4000),
        properties={
            BLOOM: "customer, name",
            "lakelog.parquet.page_index": "false",
            "lakelog.parquet.data_page_size": "4096",
            "lakelog.row_group_size": 1000,
        },
    )
    [(_, md)] = _footers(uri)
    assert md.num_row_groups == 4
    assert _has_bloom(md, "customer") and _has_bloom(md, "name")
    assert not _has_bloom(md, "id")
    assert not any(md.row_group(0).column(i).has_column_index for i in range(md.num_columns))
    # 4 KiB pages: an 8,000-byte id chunk per row group takes more than one page
    pages = pq.ParquetFile(uri + "/" + _footers(uri)[0][0]).metadata.row_group(0).column(0)
    assert pages.data_page_offset > 0


def test_bloom_ndv_sizes_filters_to_the_data(tmp_path: Path) -> None:
    """Automatic sizing (ndv 0) counts the first row group's distinct values: a column of
    10 distinct values gets a far smaller filter than a unique one; a fixed ndv is used
    as given (pyarrow caps it at the row group's rows)."""
    n = 20_000
    t = pa.table({"few": np.arange(n) % 10, "many": np.arange(n)})
    auto, fixed = str(tmp_path / "auto"), str(tmp_path / "fixed")
    lakelog.write_table(auto, t, properties={BLOOM: "few,many"})
    lakelog.write_table(
        fixed, t, properties={BLOOM: "few,many", "lakelog.parquet.bloom_filter_ndv": 64}
    )

    def sizes(uri: str) -> dict[str, int]:
        [(_, md)] = _footers(uri)
        return {
            name: md.row_group(0).column(_column_index(md, name)).bloom_filter_length
            for name in ("few", "many")
        }

    a, f = sizes(auto), sizes(fixed)
    assert a["few"] < 1024 < a["many"]
    assert f["few"] <= f["many"] < a["many"]


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({BLOOM: "nope"}, "name columns of the table"),
        ({BLOOM: "x"}, "bloom-filterable types"),
        ({BLOOM: "day"}, "partition column"),
        ({"lakelog.parquet.bloom_filter_fpp": "0"}, "in (0, 0.5]"),
        ({"lakelog.parquet.bloom_filter_ndv": "-1"}, ">= 0"),
        ({"lakelog.parquet.data_page_size": "10"}, ">= 1024"),
        ({"lakelog.parquet.page_index": "maybe"}, "'true' or 'false'"),
    ],
)
def test_bad_properties_are_refused_and_change_nothing(
    tmp_path: Path, props: dict[str, str], message: str
) -> None:
    uri = str(tmp_path / "t")
    data = _data(100).append_column("day", pa.array(["a"] * 100))
    lakelog.write_table(uri, data, partition_by=["day"])
    table = lakelog.open_table(uri)
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(").replace("[", r"\[")):
        table.set_properties(props)
    assert lakelog.open_table(uri).version == 0
    with pytest.raises(InvalidArgumentError):
        lakelog.write_table(str(tmp_path / "new"), data, partition_by=["day"], properties=props)
    assert not (tmp_path / "new").exists() or not any((tmp_path / "new").rglob("*.parquet"))


def _sorted_within_row_groups(path: str, md: pq.FileMetaData, columns: list[str]) -> bool:
    pf = pq.ParquetFile(path)
    for r in range(md.num_row_groups):
        t = pf.read_row_group(r, columns=columns)
        order = pc.sort_indices(t, sort_keys=[(c, "ascending", "at_end") for c in columns])
        if not t.take(order).equals(t):
            return False
    return True


def test_every_writer_path_carries_the_indexes(tmp_path: Path) -> None:
    """append, compaction, z-order clustering, linear sort, delete: page index and the
    configured bloom filters in every file; sorting_columns declared exactly where the
    rows are sorted (the linear sort), and true there."""
    uri = str(tmp_path / "t")
    props = {BLOOM: "customer,name", "lakelog.row_group_size": 500}
    lakelog.write_table(uri, _data(3000, 1), properties=props)
    table = lakelog.open_table(uri)
    for seed in (2, 3):
        table.append(_data(2000, seed))
    small = {"target_file_size": 40_000}  # several output files

    def check(label: str, *, sorted_by: list[str] | None = None, mixed: bool = False) -> None:
        footers = _footers(uri)
        assert footers, label
        for path, md in footers:
            assert _has_page_index(md), (label, path)
            assert _has_bloom(md, "customer") and _has_bloom(md, "name"), (label, path)
            declared = {
                tuple(
                    md.schema.column(s.column_index).path for s in md.row_group(r).sorting_columns
                )
                for r in range(md.num_row_groups)
            }
            allowed = {(), tuple(sorted_by or ())} if mixed else {tuple(sorted_by or ())}
            assert len(declared) == 1 and declared <= allowed, (label, declared)
            claim = next(iter(declared))
            if claim:
                assert _sorted_within_row_groups(f"{uri}/{path}", md, list(claim)), label

    check("append")
    table.compact()
    check("compact")
    table.optimize(zorder_by=["customer", "x"], **small)
    check("zorder")
    table.optimize(sort_by=["customer", "name"], incremental=False, **small)
    check("sort_by", sorted_by=["customer", "name"])
    table.delete("customer < 100")
    check("delete", sorted_by=["customer", "name"], mixed=True)
    everything = pa.concat_tables([_data(3000, 1), _data(2000, 2), _data(2000, 3)])
    expected = everything.filter(pc.field("customer") >= 100).num_rows
    assert lakelog.open_table(uri).snapshot().to_arrow().num_rows == expected


def test_row_groups_of_clustered_files_follow_key_boundaries() -> None:
    keys = np.sort(np.random.default_rng(0).integers(0, 1 << 20, 10_000).astype(np.uint64))
    cut = row_group_cut(keys, 4096)
    assert int(4096 * 0.8) <= cut <= 4096
    # no boundary in the window is coarser than the one chosen
    level = lambda a, b: int(a ^ b).bit_length()  # noqa: E731
    best = level(keys[cut - 1], keys[cut])
    lo = int(4096 * 0.8)
    assert all(level(keys[i - 1], keys[i]) <= best for i in range(lo, 4097))
    # one key throughout: cut at the size
    assert row_group_cut(np.zeros(100, dtype=np.uint64), 10) == 10
    assert row_group_cut(np.arange(5, dtype=np.uint64), 10) == 5


def test_clustered_row_groups_prune_better_than_fixed_cuts(tmp_path: Path) -> None:
    """After optimize, a narrow range on a clustering column reads fewer row groups than
    a fixed-size cut of the same key order would (row groups end at coarse key boundaries)."""
    uri = str(tmp_path / "t")
    n = 40_000
    rng = np.random.default_rng(5)

    def part() -> pa.Table:
        return pa.table(
            {"a": rng.integers(0, 10_000, n // 4), "b": rng.integers(0, 10_000, n // 4)}
        )

    lakelog.write_table(uri, part(), properties={"lakelog.row_group_size": 1000})
    table = lakelog.open_table(uri)
    for _ in range(3):
        table.append(part())
    table.optimize(zorder_by=["a", "b"])
    [(path, md)] = _footers(uri)
    sizes = [md.row_group(r).num_rows for r in range(md.num_row_groups)]
    assert max(sizes) <= 1000 and min(sizes[:-1]) >= 800
    assert len(set(sizes[:-1])) > 1  # cut at key boundaries, not every 1,000 rows
    # the same rows in the same (key) order, cut every 1,000 rows instead
    a = pq.read_table(f"{uri}/{path}", columns=["a"]).column("a").to_numpy()
    fixed = [(a[i : i + 1000].min(), a[i : i + 1000].max()) for i in range(0, len(a), 1000)]
    snap = table.snapshot()
    read_compact = read_fixed = 0
    for lo in np.random.default_rng(1).integers(0, 9_900, 20):
        hi = int(lo) + 50
        with collect_skip_stats() as stats:
            got = snap.to_arrow(filter=f"a between {lo} and {hi}")
        assert got.num_rows == int(((a >= lo) & (a <= hi)).sum())
        read_compact += stats.row_groups - stats.row_groups_by_stats
        read_fixed += sum(1 for mn, mx in fixed if mn <= hi and mx >= lo)
    assert read_compact < read_fixed


# -- plan-time pruning never loses a row --------------------------------------------


@pytest.fixture(scope="module")
def lookup_table(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pa.Table]:
    """Three files of 4 row groups each, bloom filters on ``k`` (ints) and ``s`` (strings,
    some null), ``k`` values spread so statistics cannot prune them."""
    uri = str(tmp_path_factory.mktemp("lookup") / "t")
    rng = np.random.default_rng(11)
    parts = []
    for i in range(3):
        k = rng.integers(0, 3000, 2000)
        s = pa.array([None if v % 7 == 0 else f"s{v}" for v in rng.integers(0, 5000, 2000)])
        parts.append(pa.table({"k": k, "s": s, "part": np.full(2000, i)}))
    lakelog.write_table(uri, parts[0], properties={BLOOM: "k,s", "lakelog.row_group_size": 500})
    table = lakelog.open_table(uri)
    for p in parts[1:]:
        table.append(p)
    return uri, pa.concat_tables(parts)


def _expected(data: pa.Table, expr: pc.Expression) -> int:
    return data.filter(expr).num_rows


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ks=st.lists(st.integers(-5, 3100), min_size=1, max_size=4),
    ss=st.lists(st.one_of(st.none(), st.integers(-5, 5100).map(lambda v: f"s{v}")), max_size=3),
    shape=st.sampled_from(["eq", "in", "or", "and", "in_null", "not"]),
)
def test_lookups_never_skip_a_matching_row_group(
    lookup_table: tuple[str, pa.Table], ks: list[int], ss: list[str | None], shape: str
) -> None:
    uri, data = lookup_table
    snap = lakelog.open_table(uri).snapshot()
    k, s = pc.field("k"), pc.field("s")
    svals = [v for v in ss if v is not None] or ["s1"]
    expr = {
        "eq": k == ks[0],
        "in": k.isin(ks),
        "or": (k == ks[0]) | s.isin(svals),
        "and": (k.isin(ks)) & (s == svals[0]),
        "in_null": s.isin(pa.array(ss or [None], pa.string())),
        "not": ~(k == ks[0]),
    }[shape]
    with collect_skip_stats() as stats:
        got = snap.to_arrow(filter=expr)
    assert got.num_rows == _expected(data, expr)
    assert not stats.errors


def test_lookups_skip_files_and_row_groups(lookup_table: tuple[str, pa.Table]) -> None:
    uri, data = lookup_table
    snap = lakelog.open_table(uri).snapshot()
    present = set(data.column("k").to_pylist())
    absent = [v for v in range(3000) if v not in present][:5]
    assert absent
    with collect_skip_stats() as stats:
        got = snap.to_arrow(filter=pc.field("k").isin(absent))
    assert got.num_rows == 0
    assert stats.files == 3 and stats.row_groups == 12
    # 12 row groups x 5 keys at fpp 0.01: at most a couple of false positives
    assert stats.row_groups_by_bloom >= 10
    assert stats.files_skipped >= 2
    one = int(data.column("k")[1234].as_py())
    with collect_skip_stats() as stats:
        got = snap.to_arrow(filter=f"k = {one}")
    assert got.num_rows == data.filter(pc.field("k") == one).num_rows
    assert stats.row_groups_by_bloom >= 8
    # to_batches plans the same way
    with collect_skip_stats() as stats:
        n = sum(b.num_rows for b in snap.to_batches(filter=f"k = {one}"))
    assert n == got.num_rows and stats.row_groups_by_bloom >= 8


def test_no_footer_reads_without_a_data_column_filter(lookup_table: tuple[str, pa.Table]) -> None:
    uri, _ = lookup_table
    snap = lakelog.open_table(uri).snapshot()
    with collect_skip_stats() as stats:
        snap.to_arrow()
        snap.to_arrow(filter=pc.field("k") == pc.field("k"))  # not modelled: pyarrow decides
    assert stats.files == 0


def test_filters_under_not_read_no_bloom_filter(lookup_table: tuple[str, pa.Table]) -> None:
    uri, data = lookup_table
    snap = lakelog.open_table(uri).snapshot()
    with collect_skip_stats() as stats:
        got = snap.to_arrow(filter="not (k = 5) and k < 3")
    assert stats.bloom_filters_read == 0
    assert got.num_rows == data.filter((pc.field("k") != 5) & (pc.field("k") < 3)).num_rows


def test_missing_file_found_while_planning_is_typed(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, _data(100), properties={BLOOM: "customer"})
    table = lakelog.open_table(uri)
    [f] = table.snapshot().files()
    os.remove(f"{uri}/{f.path}")
    with pytest.raises(DataFileMissingError, match="deleted outside lakelog"):
        table.snapshot().to_arrow(filter="customer = 3")


def test_s3_lookup_reads_bloom_filters_over_ranges(s3_backend: Any) -> None:
    uri, opts = s3_backend.uri, s3_backend.storage_options
    data = _data(4000, 3)
    lakelog.write_table(
        uri,
        data,
        properties={BLOOM: "name", "lakelog.row_group_size": 1000},
        storage_options=opts,
    )
    snap = lakelog.open_table(uri, storage_options=opts).snapshot()
    name = data.column("name")[2500].as_py()
    with collect_skip_stats() as stats:
        got = snap.to_arrow(filter=pc.field("name") == name)
    assert got.num_rows == data.filter(pc.field("name") == name).num_rows
    assert stats.bloom_filters_read == 4 and stats.row_groups_by_bloom >= 2


# -- lakelog inspect -----------------------------------------------------------------


def _lakelog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lakelog.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_inspect_reports_indexes_and_row_groups(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lakelog.write_table(
        uri, _data(3000), properties={BLOOM: "customer", "lakelog.row_group_size": 1000}
    )
    table = lakelog.open_table(uri)
    [layout] = describe_files(table.storage, table.snapshot().files())
    assert layout.row_groups == 3 and layout.row_group_rows == (1000, 1000, 1000)
    by_name = {c.name: c for c in layout.columns}
    assert by_name["customer"].bloom == "yes" and by_name["id"].bloom == "no"
    assert all(c.page_index == "yes" for c in layout.columns)

    r = _lakelog("inspect", uri)
    assert r.returncode == 0, r.stderr
    assert "3 row groups" in r.stdout and "customer" in r.stdout
    r = _lakelog("inspect", uri, "--json", "--filter", "customer = 5")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    [f] = out["files"]
    cols = {c["name"]: c for c in f["columns"]}
    assert cols["customer"]["bloom"] == "yes" and cols["customer"]["bloom_filter"] == 3
    assert cols["x"]["page_index"] == "yes"
    assert out["skipping"]["row_groups_read"] + out["skipping"]["row_groups_by_bloom"] == 3
    r = _lakelog("inspect", uri, "--per-column")
    assert r.returncode == 0 and r.stdout.count("yes") >= 5


def test_inspect_errors_are_one_line(tmp_path: Path) -> None:
    r = _lakelog("inspect", str(tmp_path / "none"))
    assert r.returncode == 1
    assert r.stderr.startswith("lakelog: error: ") and "Traceback" not in r.stderr
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, _data(10))
    r = _lakelog("inspect", uri, "--filter", "nope = 1")
    assert r.returncode == 1 and "nope" in r.stderr and "Traceback" not in r.stderr
    r = _lakelog("inspect", uri, "--version", "7")
    assert r.returncode == 1 and "Traceback" not in r.stderr


def test_timestamps_and_dates_in_lookups(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    n = 3000
    base = dt.datetime(2026, 1, 1)
    t = pa.table(
        {
            "ts": pa.array(
                [base + dt.timedelta(seconds=int(v)) for v in np.arange(n) * 37 % n],
                pa.timestamp("s"),
            ),
            "day": pa.array(
                [dt.date(2026, 1, 1) + dt.timedelta(days=int(v % 500)) for v in range(n)]
            ),
        }
    )
    lakelog.write_table(uri, t, properties={BLOOM: "ts,day", "lakelog.row_group_size": 500})
    snap = lakelog.open_table(uri).snapshot()
    probe = base + dt.timedelta(seconds=1234)
    with collect_skip_stats() as stats:
        got = snap.to_arrow(filter=pc.field("ts") == pa.scalar(probe, pa.timestamp("s")))
    assert got.num_rows == 1 and stats.row_groups_by_bloom >= 4
    with collect_skip_stats() as stats:
        got = snap.to_arrow(filter="day = '2026-03-01'")
    assert got.num_rows == t.filter(pc.field("day") == dt.date(2026, 3, 1)).num_rows
    assert not stats.errors


def test_files_of_single_page_chunks_are_tagged_and_no_others(tmp_path: Path) -> None:
    """The page tag is set exactly when every column chunk fits one data page and the file
    has a page index (docs/format.md, "Page tag")."""
    from lakelog.io.writer import SINGLE_PAGE_TAG

    data = pa.table(
        {"k": pa.array(range(40_000), pa.int64()), "s": [f"v{i}" for i in range(40_000)]}
    )

    def tags(name: str, props: dict[str, Any]) -> list[str | None]:
        lakelog.write_table(str(tmp_path / name), data, properties=props)
        files = lakelog.open_table(str(tmp_path / name)).snapshot().files()
        for f in files:  # the tag says what the footer says
            md = pq.ParquetFile(tmp_path / name / f.path).metadata
            biggest = max(
                md.row_group(r).column(c).total_uncompressed_size
                for r in range(md.num_row_groups)
                for c in range(md.num_columns)
            )
            page = int(props.get("lakelog.parquet.data_page_size", 1 << 20))
            assert (f.tags.get(SINGLE_PAGE_TAG) == "true") == (
                biggest <= page and props.get("lakelog.parquet.page_index") != "false"
            )
        return [f.tags.get(SINGLE_PAGE_TAG) for f in files]

    assert tags("small", {"lakelog.row_group_size": 5_000}) == ["true"]
    # optimize's files keep it beside their clustering tags
    table = lakelog.open_table(str(tmp_path / "small"))
    table.append(data)
    table.optimize(zorder_by=["k"])
    after = table.refresh().snapshot().files()
    assert after and all(f.tags.get(SINGLE_PAGE_TAG) == "true" for f in after)
    assert all("lakelog.clustering.spec" in f.tags for f in after)
    assert tags("big_chunks", {"lakelog.parquet.data_page_size": 4096}) == [None]
    assert tags(
        "no_index", {"lakelog.row_group_size": 5_000, "lakelog.parquet.page_index": "false"}
    ) == [None]
