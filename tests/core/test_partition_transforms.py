"""Partition transforms and evolution (format version 8) through the table API: the
writers record Iceberg's values per file, every read entry point prunes on the source
column, specs evolve without rewriting, and bad fields fail before anything is written.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakelog
from lakelog.errors import InvalidArgumentError, SchemaMismatchError, UnsupportedFormatError
from lakelog.log import format as fmt
from lakelog.scan.engines import duckdb_view_sql
from lakelog.transforms import SPEC_TAG, parse_field

duckdb = pytest.importorskip("duckdb")
pl = pytest.importorskip("polars")

SCHEMA = pa.schema(
    [("ts", pa.timestamp("us")), ("id", pa.int64()), ("name", pa.string()), ("v", pa.float64())]
)
START = dt.datetime(2024, 1, 1)


def _events(first_day: int, days: int, per_day: int = 24) -> pa.Table:
    ts = [
        START + dt.timedelta(days=first_day + d, hours=h)
        for d in range(days)
        for h in range(per_day)
    ]
    n = len(ts)
    ids = [first_day * 1000 + i for i in range(n)]
    return pa.table(
        {
            "ts": ts,
            "id": ids,
            "name": [f"n{i % 7}-{i}" for i in ids],
            "v": [i / 2 for i in range(n)],
        },
        schema=SCHEMA,
    )


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by([("id", "ascending")])


def test_day_and_bucket_partitions_are_hidden_and_prune_on_the_source_columns(
    tmp_path: Path,
) -> None:
    table = lakelog.create_table(
        str(tmp_path / "t"), SCHEMA, partition_by=["day(ts)", "bucket(4, id)"]
    )
    data = _events(0, 5)
    table.append(data)
    snap = table.snapshot()
    assert snap.metadata.format_version == fmt.PARTITION_TRANSFORMS.version
    assert table.partitioning == ["day(ts)", "bucket(4, id)"] and table.partition_by == ()
    # rows read back have the table's columns only, and every one of them
    got = snap.to_arrow()
    assert got.column_names == SCHEMA.names
    assert _sorted(got).equals(_sorted(data))
    files = list(snap.files())
    assert {f.tags[SPEC_TAG] for f in files} == {"0"}
    day, bucket = parse_field("day(ts)"), parse_field("bucket(4, id)")
    for f in files:  # every row of a file has the file's recorded values
        rows = pa.parquet.read_table(str(tmp_path / "t" / f.path))
        assert {day.to_string(v) for v in day.apply(rows["ts"]).to_pylist()} == {
            f.tags["partition.ts_day"]
        }
        assert {str(v) for v in bucket.apply(rows["id"]).to_pylist()} == {
            f.tags["partition.id_bucket_4"]
        }
    one_day = "ts >= '2024-01-03' and ts < '2024-01-04'"
    on_day = [f for f in files if f.tags["partition.ts_day"] == "2024-01-03"]
    # every entry point: SQL string, Arrow expression, DNF, DuckDB, polars
    expr = (pc.field("ts") >= pa.scalar(dt.datetime(2024, 1, 3), pa.timestamp("us"))) & (
        pc.field("ts") < pa.scalar(dt.datetime(2024, 1, 4), pa.timestamp("us"))
    )
    dnf = [("ts", ">=", dt.datetime(2024, 1, 3)), ("ts", "<", dt.datetime(2024, 1, 4))]
    for f in (one_day, expr, dnf):
        assert sorted(x.path for x in snap.files(f)) == sorted(x.path for x in on_day)
    assert snap.to_arrow(filter=one_day).num_rows == 24
    con = duckdb.connect()
    sql = duckdb_view_sql(snap, con, name="t", filter=one_day)
    assert sql is not None and len(re.findall(r"\.parquet'", sql)) == len(on_day)
    snap.to_duckdb(con, name="t", filter=one_day)
    assert con.sql("select count(*) from t").fetchone() == (24,)
    assert snap.to_polars(filter=one_day).select(pl.len()).collect().item() == 24
    # equality and IN on the bucketed column keep only files of those buckets
    ids = [int(data["id"][3].as_py()), int(data["id"][50].as_py())]
    buckets = {str(b) for b in bucket.apply(pa.array(ids)).to_pylist()}
    kept = list(snap.files(f"id in ({ids[0]}, {ids[1]})"))
    assert kept and {f.tags["partition.id_bucket_4"] for f in kept} <= buckets
    assert snap.to_arrow(filter=f"id in ({ids[0]}, {ids[1]})").num_rows == 2


def test_pruning_uses_the_recorded_values_without_statistics(tmp_path: Path) -> None:
    """Bucket pruning needs the recorded values: a bucket file's min/max span the ids."""
    table = lakelog.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["bucket(8, id)"])
    table.append(_events(0, 2))
    snap = table.snapshot()
    assert len(snap.files()) == 8
    assert len(snap.files("id = 5")) == 1
    assert len(snap.files("id = 5 or id = 6")) <= 2
    assert len(snap.files("not (id != 5)")) == 1
    assert len(snap.files("id is null")) == 0


def test_truncate_prunes_equality_in_and_integer_ranges(tmp_path: Path) -> None:
    schema = pa.schema([("k", pa.int64()), ("s", pa.string())])
    table = lakelog.create_table(
        str(tmp_path / "t"), schema, partition_by=["truncate(10, k)", "truncate(2, s)"]
    )
    table.append(
        pa.table({"k": list(range(-20, 40)), "s": [f"{c}{c}x" for c in "abc" * 20]}, schema=schema)
    )
    snap = table.snapshot()
    assert {f.tags["partition.k_trunc_10"] for f in snap.files("k = -13")} == {"-20"}
    assert {f.tags["partition.s_trunc_2"] for f in snap.files("s = 'bbx'")} == {"bb"}
    assert {f.tags["partition.s_trunc_2"] for f in snap.files("s in ('aax', 'ccx')")} == {
        "aa",
        "cc",
    }
    assert snap.to_arrow(filter="k >= 25 and k < 31").num_rows == 6


def test_identity_only_partitioning_keeps_the_old_layout(tmp_path: Path) -> None:
    schema = pa.schema([("kind", pa.string()), ("n", pa.int64())])
    table = lakelog.create_table(str(tmp_path / "t"), schema, partition_by=["kind"])
    assert table.partition_by == ("kind",)
    assert table.metadata.partition_specs == ()
    assert table.metadata.format_version < fmt.PARTITION_TRANSFORMS.version
    with pytest.raises(InvalidArgumentError, match="its partitioning cannot change") as e:
        table.set_partitioning(["bucket(4, n)"])
    assert "\n" not in str(e.value)


def test_a_reader_older_than_version_8_refuses_a_table_with_transforms(tmp_path: Path) -> None:
    table = lakelog.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["day(ts)"])
    with pytest.raises(UnsupportedFormatError, match="<= 7, found 8"):
        fmt.check_readable(
            table.metadata.format_version,
            what="table",
            reader_version=fmt.COLUMN_MAPPING.version,
        )


@pytest.mark.parametrize(
    ("partition_by", "error", "words"),
    [
        (["bucket(16, v)"], InvalidArgumentError, "found column 'v' of type double"),
        (["day(name)"], InvalidArgumentError, "expected a date or timestamp column"),
        (["week(ts)"], InvalidArgumentError, "found 'week'"),
        (["truncate(0, name)"], InvalidArgumentError, "between 1 and 2147483647"),
        (["day(when)"], SchemaMismatchError, "no column 'when'"),
    ],
)
def test_bad_fields_are_refused_and_nothing_is_written(
    tmp_path: Path, partition_by: list[str], error: type, words: str
) -> None:
    root = tmp_path / "t"
    with pytest.raises(error) as got:
        lakelog.create_table(str(root), SCHEMA, partition_by=partition_by)
    assert words in str(got.value) and "\n" not in str(got.value)
    assert not root.exists() or not any(root.rglob("*"))
    with pytest.raises(error):
        lakelog.write_table(str(root), _events(0, 1), partition_by=partition_by)
    assert not root.exists() or not any(root.rglob("*.parquet"))
    table = lakelog.create_table(str(tmp_path / "ok"), SCHEMA, partition_by=["day(ts)"])
    with pytest.raises(error):
        table.set_partitioning(partition_by)
    assert table.refresh().version == 0 and table.partitioning == ["day(ts)"]


def _check_recorded(root: Path, snap: Any) -> None:
    """Every row of every file gives the values its tags record for its spec."""
    specs = snap.partition_specs
    for f in snap.files():
        rows = pa.parquet.read_table(str(root / f.path))
        for field in specs[int(f.tags[SPEC_TAG])].fields:
            got = {field.to_string(v) for v in field.apply(rows[field.column]).to_pylist()}
            assert got == {f.tags.get("partition." + field.name)}, (f.path, field.text)


def _read_all_engines(snap: Any) -> list[list[tuple[Any, ...]]]:
    want = snap.to_arrow()
    con = duckdb.connect()
    snap.to_duckdb(con, name="t")
    got = con.sql("select * from t").arrow()
    got = got.read_all() if isinstance(got, pa.RecordBatchReader) else got
    frame = snap.to_polars().collect()
    return [
        sorted(tuple(r.values()) for r in t.to_pylist())
        for t in (want, got, frame.to_arrow().cast(want.schema))
    ]


def test_three_specs_over_time_every_version_reads_the_same_everywhere(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = lakelog.create_table(uri, SCHEMA, partition_by=["month(ts)"])
    table.append(_events(0, 2))
    table.append(_events(2, 1))
    table.set_partitioning(["day(ts)", "bucket(2, id)"])
    table.append(_events(3, 3))
    table.set_partitioning(["truncate(2, name)"])
    table.append(_events(40, 2))
    table.update("id < 5", set={"v": -1.0})  # a rewrite goes into the current spec
    specs = {f.tags[SPEC_TAG] for f in table.snapshot().files()}
    assert specs == {"0", "1", "2"}
    _check_recorded(Path(uri), table.snapshot())
    assert table.metadata.partition_specs == (
        ("month(ts)",),
        ("day(ts)", "bucket(2, id)"),
        ("truncate(2, name)",),
    )
    expected: dict[int, list[tuple[Any, ...]]] = {}
    for version in range(table.refresh().version + 1):
        snap = table.snapshot(version)
        arrow, duck, polars = _read_all_engines(snap)
        assert arrow == duck == polars, version
        expected[version] = arrow
    # pruning across specs: a one-day filter keeps the month file of spec 0, the day
    # files of spec 1 and the files of spec 2 whose names may match, and no others
    snap = table.snapshot()
    kept = list(snap.files("ts >= '2024-01-04' and ts < '2024-01-05'"))
    assert {f.tags[SPEC_TAG] for f in kept} <= {"0", "1", "2"}
    assert all(f.tags.get("partition.ts_day") in (None, "2024-01-04") for f in kept)
    assert snap.to_arrow(filter="ts >= '2024-01-04' and ts < '2024-01-05'").num_rows == 24
    # compaction rewrites what it touches into the current spec; rows do not change
    before = expected[table.version]
    table.compact(min_input_files=2)
    after = table.snapshot()
    assert _read_all_engines(after)[0] == before
    # the month-partition files of spec 0 were one group: now in spec 2
    assert [f for f in snap.files() if f.tags.get(SPEC_TAG) == "0"]
    assert not [f for f in after.files() if f.tags.get(SPEC_TAG) == "0"]
    _check_recorded(Path(uri), after)
    assert table.set_partitioning(["truncate(2, name)"]).skipped


def test_the_cli_filter_prunes_by_transform(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = lakelog.create_table(uri, SCHEMA, partition_by=["day(ts)"])
    table.append(_events(0, 4))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lakelog.cli",
            "files",
            uri,
            "--filter",
            "ts >= '2024-01-02' and ts < '2024-01-03'",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.count(".parquet") == 1
    assert '"ts_day":"2024-01-02"' in out  # the file's recorded value, by field name


# -- the model: random data, transforms and filters --------------------------------

MODEL_SCHEMA = pa.schema(
    [("ts", pa.timestamp("us")), ("d", pa.date32()), ("n", pa.int64()), ("s", pa.string())]
)
FIELDS = st.sampled_from(
    [
        "year(ts)", "month(ts)", "day(ts)", "hour(ts)", "day(d)", "month(d)", "year(d)",
        "bucket(3, n)", "bucket(5, s)", "bucket(4, ts)", "bucket(2, d)",
        "truncate(7, n)", "truncate(1, s)", "truncate(2, s)", "n", "s", "d",
    ]
)  # fmt: skip
_TS = st.datetimes(min_value=dt.datetime(1969, 12, 1), max_value=dt.datetime(1970, 3, 1))
_D = st.dates(min_value=dt.date(1969, 11, 1), max_value=dt.date(1971, 2, 1))
_N = st.integers(-30, 30)
_S = st.text(alphabet="abcé", max_size=3)
ROWS = st.lists(
    st.tuples(st.none() | _TS, st.none() | _D, st.none() | _N, st.none() | _S),
    min_size=1,
    max_size=40,
)


@st.composite
def _filters(draw: Any) -> Any:
    col, values = draw(st.sampled_from([("ts", _TS), ("d", _D), ("n", _N), ("s", _S)]))
    kind = draw(st.sampled_from(["cmp", "in", "between", "null", "not", "or"]))
    field = pc.field(col)
    if kind == "in":
        return field.isin(draw(st.lists(values, min_size=1, max_size=3)))
    if kind == "between":
        a, b = sorted([draw(values), draw(values)])
        return (field >= a) & (field <= b)
    if kind == "null":
        return field.is_null() if draw(st.booleans()) else field.is_valid()
    v = draw(values)
    op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
    term = {
        "==": field == v, "!=": field != v, "<": field < v,
        "<=": field <= v, ">": field > v, ">=": field >= v,
    }[op]  # fmt: skip
    if kind == "not":
        return ~term
    if kind == "or":
        return term | (pc.field("n") == draw(_N))
    return term


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    fields=st.lists(FIELDS, min_size=1, max_size=2, unique=True),
    later=st.lists(FIELDS, min_size=0, max_size=2, unique=True),
    rows=ROWS,
    more=ROWS,
    filters=st.lists(_filters(), min_size=1, max_size=4),
)
def test_model_pruning_keeps_every_file_with_a_matching_row(
    tmp_path_factory: Any,
    fields: list[str],
    later: list[str],
    rows: list[tuple[Any, ...]],
    more: list[tuple[Any, ...]],
    filters: list[Any],
) -> None:
    if len({parse_field(f).name for f in fields}) < len(fields) or not any(
        "(" in f for f in fields
    ):
        fields = [*fields, "bucket(3, n)"] if "bucket(3, n)" not in fields else fields
    uri = str(tmp_path_factory.mktemp("m") / "t")
    table = lakelog.create_table(uri, MODEL_SCHEMA, partition_by=fields)

    def batch(rs: list[tuple[Any, ...]]) -> pa.Table:
        return pa.table(list(zip(*rs, strict=True)), schema=MODEL_SCHEMA)

    table.append(batch(rows))
    table.set_partitioning(later)  # a second spec (or none) for the next rows
    table.append(batch(more))
    snap = table.snapshot()
    assert sum(f.num_rows for f in snap.files()) == len(rows) + len(more)
    for flt in filters:
        kept = {f.path for f in snap.files(flt)}
        for f in snap.files():
            data = pa.parquet.read_table(str(Path(uri) / f.path))
            if data.filter(flt).num_rows:
                assert f.path in kept, (flt, f.tags)
        assert snap.to_arrow(filter=flt).num_rows == batch(rows + more).filter(flt).num_rows


def test_write_table_to_an_existing_table_takes_its_fields_in_any_spelling(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, _events(0, 2), partition_by=["day(ts)", "bucket(4, id)"])
    lakelog.write_table(
        uri, _events(2, 1), mode="append", partition_by=["days(ts)", "bucket(4,id)"]
    )
    table = lakelog.open_table(uri)
    assert table.snapshot().num_rows == 72
    assert all("partition.ts_day" in f.tags for f in table.snapshot().files())
    with pytest.raises(SchemaMismatchError, match=r"expected partition_by \['day\(ts\)'"):
        lakelog.write_table(uri, _events(3, 1), mode="append", partition_by=["hour(ts)"])
    assert table.refresh().snapshot().num_rows == 72


def test_clustering_writes_an_older_spec_into_the_current_one(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = lakelog.create_table(uri, SCHEMA, partition_by=["month(ts)"])
    table.append(_events(0, 3))
    table.append(_events(3, 3))
    table.set_partitioning(["bucket(3, id)"])
    table.append(_events(10, 2))
    before = table.snapshot()
    want = sorted(tuple(r.values()) for r in before.to_arrow().to_pylist())
    assert {f.tags[SPEC_TAG] for f in before.files()} == {"0", "1"}
    table.optimize(zorder_by=["id", "v"], incremental=False)
    after = table.snapshot()
    assert {f.tags[SPEC_TAG] for f in after.files()} == {"1"}
    _check_recorded(Path(uri), after)
    assert sorted(tuple(r.values()) for r in after.to_arrow().to_pylist()) == want
    assert len(after.files("id = 3001")) < after.num_files
