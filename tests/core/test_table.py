"""Tables from Arrow: create/open/write modes, partitions, bounded files, pruned reads."""

from __future__ import annotations

import datetime as dt
import decimal
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lakelog
from lakelog import (
    InvalidArgumentError,
    SchemaMismatchError,
    TableExistsError,
    TableNotFoundError,
)

SCHEMA = pa.schema(
    [("id", pa.int64()), ("p", pa.string()), ("x", pa.float64()), ("s", pa.string())]
)


def _data(n: int, start: int = 0, parts: tuple[str | None, ...] = ("a", "b", None)) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": ids,
            "p": [parts[i % len(parts)] for i in ids],
            "x": [None if i % 7 == 0 else i / 2 for i in ids],
            "s": [f"s{i:05d}" if i % 5 else None for i in ids],
        },
        schema=SCHEMA,
    )


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by("id").select(sorted(t.column_names))


def _data_files_on_disk(root: str) -> set[str]:
    out = set()
    for dirpath, _, names in os.walk(root):
        if "_lakelog" in dirpath:
            continue
        out.update(os.path.relpath(os.path.join(dirpath, n), root) for n in names)
    return out


# -- create / open / write_table ------------------------------------------------------


def test_create_open_and_refuse_twice(backend: Any) -> None:
    t = lakelog.create_table(
        backend.uri,
        SCHEMA,
        partition_by=["p"],
        properties={"owner": "team", "lakelog.manifest_interval": 3},
        storage_options=backend.storage_options,
    )
    assert t.version == 0
    assert t.partition_by == ("p",)
    assert t.schema.equals(SCHEMA)
    assert t.properties == {
        "owner": "team",
        "lakelog.manifest_interval": "3",
        "lakelog.deletion_vectors": "true",  # the default of new tables
    }
    t.append(_data(30))
    t2 = lakelog.open_table(backend.uri, storage_options=backend.storage_options)
    assert t2.version == 1
    assert t2.uri == t.uri
    assert _sorted(t2.snapshot().to_arrow()).equals(_sorted(_data(30)))
    with pytest.raises(TableExistsError, match="open_table"):
        lakelog.create_table(backend.uri, SCHEMA, storage_options=backend.storage_options)


def test_create_validates_arguments(tmp_path: Path) -> None:
    with pytest.raises(SchemaMismatchError, match="'nope'"):
        lakelog.create_table(str(tmp_path / "a"), SCHEMA, partition_by=["nope"])
    with pytest.raises(InvalidArgumentError):
        lakelog.create_table(str(tmp_path / "b"), SCHEMA, partition_by=["x"])  # float
    with pytest.raises(InvalidArgumentError):
        lakelog.create_table(str(tmp_path / "c"), pa.schema([]))
    with pytest.raises(InvalidArgumentError):
        lakelog.create_table(
            str(tmp_path / "d"), SCHEMA, properties={"lakelog.target_file_size": 0}
        )
    with pytest.raises(TableNotFoundError):
        lakelog.open_table(str(tmp_path / "a"))  # nothing was created by the failures


def test_write_table_modes(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    r0 = lakelog.write_table(uri, _data(10), partition_by=["p"])
    assert r0.version == 0
    t = lakelog.open_table(uri)
    assert t.history()[0].operation == "CREATE TABLE AS WRITE"
    assert t.partition_by == ("p",)
    assert lakelog.write_table(uri, _data(5, 10)).version == 1
    assert lakelog.open_table(uri).snapshot().num_rows == 15
    with pytest.raises(TableExistsError, match="mode='append'"):
        lakelog.write_table(uri, _data(5), mode="error")
    with pytest.raises(SchemaMismatchError, match="partition_by"):
        lakelog.write_table(uri, _data(5), partition_by=["s"])
    with pytest.raises(InvalidArgumentError):
        lakelog.write_table(uri, _data(5), mode="upsert")  # type: ignore[arg-type]
    r = lakelog.write_table(uri, _data(4, 100), mode="overwrite")
    snap = lakelog.open_table(uri).snapshot()
    assert snap.version == r.version == 2
    assert sorted(snap.to_arrow().column("id").to_pylist()) == [100, 101, 102, 103]
    # mode="error" on a new location creates it
    assert lakelog.write_table(str(tmp_path / "new"), _data(3), mode="error").version == 0


def test_append_accepts_every_input_form(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    d = _data(40)
    t.append(d.slice(0, 10))
    t.append(d.slice(10, 10).to_batches()[0])
    t.append(pa.RecordBatchReader.from_batches(SCHEMA, d.slice(20, 10).to_batches()))
    t.append(d.slice(30, 10).to_batches(max_chunksize=3))
    # columns in another order and large_string are converted
    shuffled = d.slice(0, 2).select(["s", "x", "p", "id"])
    shuffled = shuffled.set_column(0, "s", shuffled.column("s").cast(pa.large_string()))
    r = t.append(shuffled)
    assert r.version == 5 and r.attempts == 1
    got = t.snapshot().to_arrow()
    assert got.schema.equals(SCHEMA)
    assert got.num_rows == 42
    assert sorted(got.column("id").to_pylist()) == sorted([*list(range(40)), 0, 1])
    empty = t.append(SCHEMA.empty_table())
    assert t.snapshot(empty.version).num_rows == 42


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (_data(3).drop_columns(["s"]), "missing column 's'"),
        (_data(3).append_column("extra", pa.array([1, 2, 3])), "unexpected columns"),
        (_data(3).set_column(0, "id", pa.array(["1", "2", "3"])), "column 'id'"),
    ],
)
def test_schema_mismatch_commits_and_leaves_nothing(
    tmp_path: Path, bad: pa.Table, match: str
) -> None:
    root = tmp_path / "t"
    t = lakelog.create_table(str(root), SCHEMA, partition_by=["p"])
    t.append(_data(6))
    before = _data_files_on_disk(str(root))
    with pytest.raises(SchemaMismatchError, match=match):
        t.append(bad)
    with pytest.raises(SchemaMismatchError):
        t.overwrite(bad)
    assert lakelog.open_table(str(root)).version == 1
    assert _data_files_on_disk(str(root)) == before


def test_nulls_in_non_nullable_column_rejected_after_partial_write(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
    root = tmp_path / "t"
    t = lakelog.create_table(str(root), schema, properties={"lakelog.row_group_size": 2})
    good = pa.record_batch({"id": [1, 2, 3, 4, 5], "v": [1, 2, 3, 4, 5]}, schema=schema)
    nullable = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    bad = pa.record_batch({"id": [6, None], "v": [6, 7]}, schema=nullable)
    with pytest.raises(SchemaMismatchError, match="non-nullable"):
        t.append([good.cast(nullable), bad])  # the first batch is written before the bad one
    assert _data_files_on_disk(str(root)) == set()
    assert lakelog.open_table(str(root)).snapshot().num_rows == 0


# -- overwrite -------------------------------------------------------------------------


def test_overwrite_whole_table_and_partitions(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["p"])
    t.append(_data(30))  # partitions a, b, null
    v1 = t.version
    new_a = _data(4, 1000, parts=("a",))
    r = t.overwrite(new_a, partitions=[{"p": "a"}])
    snap = t.snapshot()
    assert snap.version == r.version == v1 + 1
    ids_by_p = {
        p: sorted(snap.to_arrow(filter=pc.field("p") == p).column("id").to_pylist())
        for p in ("a", "b")
    }
    assert ids_by_p["a"] == [1000, 1001, 1002, 1003]
    assert ids_by_p["b"] == [i for i in range(30) if i % 3 == 1]
    nulls = snap.to_arrow(filter=pc.field("p").is_null())
    assert sorted(nulls.column("id").to_pylist()) == [i for i in range(30) if i % 3 == 2]
    # the null partition can be replaced too
    t.overwrite(_data(2, 2000, parts=(None,)), partitions=[{"p": None}])
    nulls = t.snapshot().to_arrow(filter=pc.field("p").is_null())
    assert sorted(nulls.column("id").to_pylist()) == [2000, 2001]
    assert t.history(limit=1)[0].parameters == {"partitions": [{"p": None}]}
    # the old version is untouched
    assert t.snapshot(v1).num_rows == 30
    t.overwrite(_data(3, 500))
    assert sorted(t.snapshot().to_arrow().column("id").to_pylist()) == [500, 501, 502]
    assert t.snapshot().num_files == 3  # one per partition


def test_overwrite_partitions_refuses_rows_outside_scope(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = lakelog.create_table(str(root), SCHEMA, partition_by=["p"])
    t.append(_data(9))
    before = _data_files_on_disk(str(root))
    with pytest.raises(InvalidArgumentError, match="partitions being replaced"):
        t.overwrite(_data(6), partitions=[{"p": "a"}])
    with pytest.raises(InvalidArgumentError, match="exactly the partition columns"):
        t.overwrite(_data(3, parts=("a",)), partitions=[{"q": "a"}])
    assert _data_files_on_disk(str(root)) == before
    assert lakelog.open_table(str(root)).version == 1
    flat = lakelog.create_table(str(tmp_path / "flat"), SCHEMA)
    with pytest.raises(InvalidArgumentError, match="unpartitioned"):
        flat.overwrite(_data(3), partitions=[{"p": "a"}])


# -- partitions and files ------------------------------------------------------------


def test_partitioned_write_with_nulls_and_typed_partition_values(tmp_path: Path) -> None:
    schema = pa.schema([("day", pa.date32()), ("flag", pa.bool_()), ("v", pa.int64())])
    days = [dt.date(2024, 1, 1), None, dt.date(2024, 1, 2)]
    data = pa.table(
        {
            "day": [days[i % 3] for i in range(12)],
            "flag": [None if i % 4 == 0 else i % 2 == 0 for i in range(12)],
            "v": list(range(12)),
        },
        schema=schema,
    )
    root = tmp_path / "t"
    t = lakelog.create_table(str(root), schema, partition_by=["day", "flag"])
    t.append(data)
    snap = t.snapshot()
    folders = {os.path.dirname(f.path) for f in snap.files()}
    assert "day=__HIVE_DEFAULT_PARTITION__/flag=__HIVE_DEFAULT_PARTITION__" in folders
    assert "day=2024-01-01/flag=true" in folders
    for f in snap.files():
        assert set(f.partition) == {"day", "flag"}
        assert (root / f.path).stat().st_size == f.size_bytes
        assert pq.ParquetFile(root / f.path).schema_arrow.names == ["v"]  # not stored in files
    got = snap.to_arrow()
    assert got.schema.equals(schema)
    assert _sorted_by(got, "v").equals(_sorted_by(data, "v"))
    for expr in [
        pc.field("day").is_null(),
        pc.field("day") == dt.date(2024, 1, 2),
        pc.field("flag").is_null() | (pc.field("day") < dt.date(2024, 1, 2)),
        ~pc.field("flag").is_null(),
        pc.field("flag") != True,  # noqa: E712 - an Arrow expression, not a Python comparison
    ]:
        want = data.filter(expr)
        assert _sorted_by(snap.to_arrow(filter=expr), "v").equals(_sorted_by(want, "v")), expr
        kept = snap.files(expr)
        # pruning by partition is exact: every kept file has matching rows
        assert sum(f.num_rows for f in kept) == want.num_rows, expr


def _sorted_by(t: pa.Table, col: str) -> pa.Table:
    return t.sort_by(col)


def test_target_file_size_yields_bounded_files_and_row_groups(tmp_path: Path) -> None:
    target, rg = 64 * 1024, 2_000
    root = tmp_path / "t"
    t = lakelog.create_table(
        str(root),
        SCHEMA,
        properties={
            "lakelog.target_file_size": target,
            "lakelog.row_group_size": rg,
            "lakelog.compression": "none",
        },
    )
    n = 50_000
    rng = np.random.default_rng(0)
    data = pa.table(
        {
            "id": np.arange(n),
            "p": pa.array(rng.choice(["a", "b"], n)),
            "x": rng.random(n),
            "s": pa.array([f"v{v}" for v in rng.integers(0, 10**9, n)]),
        },
        schema=SCHEMA,
    ).to_batches(max_chunksize=777)  # odd batch sizes: row groups are re-cut
    t.append(data)
    files = t.snapshot().files()
    assert len(files) >= 5
    assert sum(f.num_rows for f in files) == n
    sizes = []
    for f in files:
        md = pq.ParquetFile(root / f.path).metadata
        assert f.size_bytes == (root / f.path).stat().st_size
        assert md.num_rows == f.num_rows
        assert all(md.row_group(i).num_rows <= rg for i in range(md.num_row_groups))
        # a file closes once it reaches the target: it overshoots by < 1 row group
        one_rg = max(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
        assert f.size_bytes < target + 2 * one_rg
        sizes.append(f.size_bytes)
        # stats come from the footer and are true bounds
        ids = pq.read_table(root / f.path, columns=["id", "x"])
        assert f.stats is not None
        assert f.stats.min["id"] == pc.min(ids.column("id")).as_py()
        assert f.stats.max["id"] == pc.max(ids.column("id")).as_py()
        assert f.stats.null_count["id"] == 0
    assert sum(s >= target for s in sizes) >= len(sizes) - 1  # only the last is short


def test_write_options_override_properties(tmp_path: Path) -> None:
    t = lakelog.create_table(
        str(tmp_path / "t"), SCHEMA, properties={"lakelog.compression": "gzip"}
    )
    o = t.write_options()
    assert (o.compression, o.target_file_size) == ("gzip", 128 * 1024 * 1024)
    assert t.write_options(target_file_size=10, compression="ZSTD").compression == "zstd"
    with pytest.raises(InvalidArgumentError):
        t.write_options(compression="lzo-nope")


# -- reads and pruning ---------------------------------------------------------------


@pytest.fixture(scope="module")
def many_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[lakelog.Table, pa.Table]:
    """20 files with disjoint id ranges; nulls in x and s; partitions a/b/null."""
    uri = str(tmp_path_factory.mktemp("many") / "t")
    t = lakelog.create_table(uri, SCHEMA, partition_by=["p"])
    chunks = [_data(30, start=30 * i, parts=("a", "b", None)[i % 3 : i % 3 + 1]) for i in range(20)]
    for c in chunks:
        t.append(c)
    return t, pa.concat_tables(chunks)


FILTERS: list[Any] = [
    [("id", ">=", 90), ("id", "<", 120)],
    [[("id", "<", 10)], [("id", ">", 590)]],
    [("p", "=", "a"), ("id", "<", 200)],
    [("p", "in", ["b", "zz"])],
    [("id", "not in", list(range(0, 600, 2)))],
    pc.field("x").is_null(),
    pc.field("s").is_null() & (pc.field("id") < 300),
    ~pc.field("x").is_null() & (pc.field("id") > 550),
    pc.field("p").is_null(),
    pc.field("p") != "a",
    pc.field("x") > 250.0,
    pc.field("s") >= "s00590",
    pc.field("s").is_valid() & (pc.field("s") < "s00005"),
    (pc.field("id") == 5) | pc.field("x").is_null(),
    pc.field("id") > 10_000,
]


@pytest.mark.parametrize("flt", FILTERS, ids=[str(i) for i in range(len(FILTERS))])
def test_filters_return_exactly_the_matching_rows(
    many_files: tuple[lakelog.Table, pa.Table], flt: Any
) -> None:
    t, full = many_files
    snap = t.snapshot()
    expr = pq.filters_to_expression(flt) if isinstance(flt, list) else flt
    want = full.filter(expr)
    got = snap.to_arrow(filter=flt)
    assert _sorted(got).equals(_sorted(want))
    kept = snap.files(flt)
    kept_paths = {f.path for f in kept}
    # sound: a file that was pruned holds no matching row
    for f in snap.files():
        if f.path not in kept_paths:
            one = pq.read_table(t.storage.full(f.path))
            for k, v in f.partition.items():
                one = one.append_column(k, pa.array([v] * one.num_rows, pa.string()))
            assert one.filter(expr).num_rows == 0, f.path
    # and it prunes: ranges on sorted ids keep only the files that overlap
    if flt is FILTERS[0]:
        assert len(kept) == 1
    if flt is FILTERS[-1]:
        assert kept == [] and got.num_rows == 0


def test_files_dataset_and_columns(many_files: tuple[lakelog.Table, pa.Table]) -> None:
    t, full = many_files
    snap = t.snapshot()
    files = snap.files()
    assert len(files) == snap.num_files == 20
    assert snap.num_rows == full.num_rows
    assert all(not f.path.startswith("/") and "://" not in f.path for f in files)
    f0 = next(f for f in files if f.partition == {"p": "a"})
    assert f0.stats is not None and f0.stats.null_count["x"] >= 1
    assert snap.to_arrow(columns=["id"]).column_names == ["id"]
    got = snap.to_arrow(columns=["s", "p"], filter=[("id", "<", 3)])
    assert got.column_names == ["s", "p"] and got.num_rows == 3
    assert sorted(snap.dataset().to_table().column("id").to_pylist()) == list(range(600))
    assert sorted(snap.file_urls()) == sorted(t.storage.url(f.path) for f in files)
    batches = list(snap.to_batches(columns=["id"], batch_size=50))
    assert sum(b.num_rows for b in batches) == 600
    assert snap.file_urls([("id", "<", 30)]) == [
        t.storage.url(snap.files([("id", "<", 30)])[0].path)
    ]
    with pytest.raises(InvalidArgumentError, match="unknown"):
        snap.to_arrow(columns=["id", "nope"])
    with pytest.raises(InvalidArgumentError):
        snap.to_arrow(filter=pc.field("nope") == 1)
    assert snap.files(filter="id < 30") == snap.files([("id", "<", 30)])  # SQL-like text
    with pytest.raises(InvalidArgumentError):
        snap.files(filter=42)
    with pytest.raises(InvalidArgumentError, match="nope"):
        snap.files(filter="nope > 3")


def test_reads_never_list_folders(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = lakelog.create_table(str(root), SCHEMA)
    t.append(_data(5))
    pq.write_table(_data(100, 1000), root / "stray.parquet")  # not in the log
    assert t.snapshot().to_arrow().num_rows == 5


@settings(max_examples=25, deadline=None)
@given(
    values=st.lists(
        st.tuples(st.none() | st.integers(-50, 50), st.none() | st.floats(allow_nan=True)),
        min_size=1,
        max_size=60,
    ),
    cut=st.integers(1, 20),
    lo=st.integers(-60, 60),
    kind=st.sampled_from(["lt", "ge", "eq", "ne", "null", "valid", "nan", "or_null", "fge"]),
)
def test_pruned_reads_match_in_memory_filter(
    tmp_path_factory: pytest.TempPathFactory,
    values: list[tuple[int | None, float | None]],
    cut: int,
    lo: int,
    kind: str,
) -> None:
    schema = pa.schema([("k", pa.int64()), ("f", pa.float64()), ("row", pa.int64())])
    data = pa.table(
        {
            "k": [v[0] for v in values],
            "f": [v[1] for v in values],
            "row": list(range(len(values))),
        },
        schema=schema,
    )
    t = lakelog.create_table(str(tmp_path_factory.mktemp("prop") / "t"), schema)
    for start in range(0, len(values), cut):
        t.append(data.slice(start, cut))
    k, f = pc.field("k"), pc.field("f")
    expr = {
        "lt": k < lo,
        "ge": k >= lo,
        "eq": k == lo,
        "ne": k != lo,
        "null": k.is_null(),
        "valid": k.is_valid() & (k < lo),
        "nan": pc.is_nan(f),
        "or_null": (k > lo) | k.is_null(),
        "fge": f >= float(lo),
    }[kind]
    got = t.snapshot().to_arrow(filter=expr)
    # rows are identified by "row" (Table.equals would fail on NaN != NaN)
    assert sorted(got.column("row").to_pylist()) == data.filter(expr).column("row").to_pylist()


def test_stats_types_prune_dates_timestamps_decimals(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            ("d", pa.date32()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("dec", pa.decimal128(10, 2)),
            ("b", pa.bool_()),
        ]
    )
    t = lakelog.create_table(str(tmp_path / "t"), schema)
    base = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    for i in range(4):
        t.append(
            pa.table(
                {
                    "d": [dt.date(2024, 1, 1) + dt.timedelta(days=10 * i + j) for j in range(3)],
                    "ts": [base + dt.timedelta(days=10 * i, hours=j) for j in range(3)],
                    "dec": [decimal.Decimal(f"{i}.{j}5") for j in range(3)],
                    "b": [i % 2 == 0] * 3,
                },
                schema=schema,
            )
        )
    snap = t.snapshot()
    cases = [
        (pc.field("d") >= dt.date(2024, 1, 31), 1),
        (pc.field("ts") < base + dt.timedelta(days=5), 1),
        (pc.field("dec") > decimal.Decimal("2.5"), 1),
        (pc.field("b") == False, 2),  # noqa: E712 - an Arrow expression
    ]
    for expr, n_files in cases:
        assert len(snap.files(expr)) == n_files, expr
        assert snap.to_arrow(filter=expr).equals(snap.to_arrow().filter(expr)), expr


# -- history and properties ----------------------------------------------------------


def test_history_and_set_properties(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["p"])
    t.append(_data(6))
    t.overwrite(_data(3, parts=("a",)), partitions=[{"p": "a"}])
    t.set_properties({"lakelog.manifest_interval": 2, "team": "x"})
    h = t.history()
    assert [c.version for c in h] == [3, 2, 1, 0]
    assert [c.operation for c in h] == ["SET PROPERTIES", "OVERWRITE", "APPEND", "CREATE TABLE"]
    assert h[2].metrics["num_rows"] == 6 and h[2].metrics["num_files"] == 3
    assert h[1].metrics["num_removed_files"] == 1
    assert h[2].read_version == 0
    assert len({c.txn_id for c in h}) == 4
    assert all(a.timestamp_ms < b.timestamp_ms for a, b in zip(h[1:], h, strict=False))
    assert [c.version for c in t.history(limit=2)] == [3, 2]
    with pytest.raises(InvalidArgumentError):
        t.history(limit=0)
    assert t.properties["lakelog.manifest_interval"] == "2"
    assert lakelog.open_table(t.uri).properties == {
        "lakelog.manifest_interval": "2",
        "team": "x",
        "lakelog.deletion_vectors": "true",  # the default of new tables
    }
    with pytest.raises(InvalidArgumentError):
        t.set_properties({"lakelog.manifest_interval": -1})
    t.append(_data(1))  # version 4: due a manifest with the new interval
    assert (tmp_path / "t" / "_lakelog" / f"{4:020d}.manifest.parquet").exists()


def test_filters_that_select_nan_keep_nan_rows(tmp_path: Path) -> None:
    """Arrow's Parquet scan prunes row groups by statistics that leave NaN out, so
    ``f != 0`` over ``[0.0, NaN]`` given to the scan returns nothing (pyarrow 26);
    lakelog's readers must still return the NaN row."""
    schema = pa.schema([("f", pa.float64()), ("row", pa.int64())])
    t = lakelog.create_table(str(tmp_path / "t"), schema)
    t.append(pa.table({"f": [0.0, float("nan")], "row": [0, 1]}, schema=schema))
    f = pc.field("f")
    for expr in [pc.is_nan(f), f != 0.0, ~(f == 0.0), ~(f <= 0.0)]:
        snap = t.snapshot()
        assert snap.to_arrow(filter=expr).column("row").to_pylist() == [1], expr
        assert snap.to_arrow(columns=["row"], filter=expr).column("row").to_pylist() == [1]
        batches = list(snap.to_batches(columns=["row"], filter=expr))
        assert [r for b in batches for r in b.column("row").to_pylist()] == [1], expr
    assert t.snapshot().to_arrow(filter=f > 1.0).num_rows == 0
