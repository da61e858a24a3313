"""DuckDB and polars read snapshots with their own Parquet readers (lakelog.scan.native):
the rows and types of ``snapshot.to_arrow()`` at every version of random histories
(appends, deletes and updates with deletion vectors, renames, added and widened
columns, partitions whose values need escaping, nulls), never a deleted row, files
pruned by ``filter=`` and row groups by the engines themselves."""

from __future__ import annotations

import datetime as dt
import decimal
import re
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakelog
from lakelog.errors import DataFileMissingError
from lakelog.scan.engines import duckdb_view_sql

duckdb = pytest.importorskip("duckdb")
pl = pytest.importorskip("polars")

PARTS = ["a b", "50%", "k=v", "é/ü", None]
SCHEMA = pa.schema([("p", pa.string()), ("id", pa.int64()), ("v", pa.int32()), ("s", pa.string())])
PROPS = {"lakelog.deletion_vectors": "true"}

row_st = st.fixed_dictionaries(
    {
        "p": st.sampled_from(PARTS),
        "v": st.one_of(st.none(), st.integers(-5, 5)),
        "s": st.one_of(st.none(), st.sampled_from(["x", "y z", "'q'"])),
    }
)
preds = st.sampled_from(["v >= 2", "v is null", "p = '50%'", "p is null", "id < 4", "v = 0"])
ops = st.one_of(
    st.tuples(st.just("append"), st.lists(row_st, min_size=1, max_size=6)),
    st.tuples(st.just("delete"), preds),
    st.tuples(st.just("update"), preds),
    st.tuples(st.just("rename")),
    st.tuples(st.just("add")),
    st.tuples(st.just("widen")),
    st.tuples(st.just("compact")),
)


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """The rows, sorted, NaN as a string (two NaN objects are not equal)."""

    def cell(v: Any) -> Any:
        return "NaN" if isinstance(v, float) and v != v else v

    return sorted((tuple(cell(v) for v in r.values()) for r in table.to_pylist()), key=repr)


def _native_duckdb(con: Any, name: str) -> bool:
    """Whether DuckDB reads the view with its own Parquet reader (lakelog's scanner is
    an ARROW_SCAN); an empty table reads nothing at all."""
    plan = "".join(r[1] for r in con.sql(f"explain select * from {name}").fetchall())
    return "ARROW_SCAN" not in plan and ("READ_PARQUET" in plan or "EMPTY_RESULT" in plan)


def _check(table: lakelog.Table, con: Any) -> None:
    """Every retained version read by both engines as lakelog reads it (so no deleted
    row ever, and columns under their names, in order)."""
    for version in range(table.snapshot().version + 1):
        snap = table.snapshot(version)
        want = snap.to_arrow()
        snap.to_duckdb(con, name="t")
        assert _native_duckdb(con, "t")
        got = con.sql("select * from t").arrow()
        got = got.read_all() if isinstance(got, pa.RecordBatchReader) else got
        assert got.column_names == want.column_names
        assert _rows(got) == _rows(want), version
        lf = snap.to_polars()
        assert "PYTHON SCAN" not in lf.explain()
        frame = lf.collect()
        assert frame.columns == want.column_names
        assert sorted(frame.rows(), key=repr) == _rows(want), version


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=st.lists(ops, min_size=2, max_size=6))
def test_engines_read_every_version_as_lakelog(history: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        table = lakelog.create_table(f"{root}/t", SCHEMA, partition_by=["p"], properties=PROPS)
        con = duckdb.connect()
        next_id = 0
        value = "v"
        for op in history:
            kind = op[0]
            names = table.snapshot().schema.names
            if kind == "append":
                rows = [{**r, "id": next_id + i, value: r["v"]} for i, r in enumerate(op[1])]
                next_id += len(rows)
                schema = pa.schema([(f.name, f.type) for f in table.snapshot().schema])
                table.append(pa.table({n: [r.get(n) for r in rows] for n in names}, schema=schema))
            elif kind == "delete":
                table.delete(op[1].replace("v ", f"{value} "))
            elif kind == "update":
                table.update(op[1].replace("v ", f"{value} "), set={"s": "updated"})
            elif kind == "rename":
                new = "w" if value == "v" else "v"
                table.rename_column(value, new)
                value = new
            elif kind == "add" and "extra" not in names:
                table.add_columns({"extra": pa.float64()})
            elif kind == "widen" and table.snapshot().schema.field(value).type == pa.int32():
                table.widen_column(value, pa.int64())
            elif kind == "compact":
                table.compact()
        _check(table, con)


def test_deleted_rows_never_come_back_through_the_engines(tmp_path: Any) -> None:
    """Every retained version after deletes and updates with vectors, files marked."""
    table = lakelog.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["p"], properties=PROPS)
    table.append(
        pa.table(
            {
                "p": [PARTS[i % 5] for i in range(40)],
                "id": list(range(40)),
                "v": [i % 7 for i in range(40)],
                "s": [f"s{i}" for i in range(40)],
            },
            schema=SCHEMA,
        )
    )
    table.delete("v = 3")
    table.update("id < 10", set={"s": "u"})
    table.delete("p = 'k=v' and id > 20")
    marked = [f for f in table.snapshot().files() if f.deleted is not None]
    assert marked  # vectors, not rewrites
    con = duckdb.connect()
    for version in range(table.snapshot().version + 1):
        snap = table.snapshot(version)
        live = set(snap.to_arrow()["id"].to_pylist())
        snap.to_duckdb(con, name="t")
        got = [r[0] for r in con.sql("select id from t").fetchall()]
        assert sorted(got) == sorted(live)
        # a query's filter on the marked rows still finds none of them
        gone = set(range(40)) - live
        if gone:
            where = f"id in ({', '.join(map(str, sorted(gone)))})"
            assert con.sql(f"select count(*) from t where {where}").fetchone() == (0,)
            frame = snap.to_polars().filter(pl.col("id").is_in(sorted(gone))).collect()
            assert frame.height == 0
        assert sorted(snap.to_polars().collect()["id"].to_list()) == sorted(live)


def test_types_match_to_arrow(tmp_path: Any) -> None:
    n = 6
    data = pa.table(
        {
            "day": pa.array([dt.date(2026, 11, 2 + i % 2) for i in range(n)]),
            "ts": pa.array(
                [dt.datetime(2026, 11, 2, 10, i, tzinfo=dt.timezone.utc) for i in range(n)],
                pa.timestamp("us", tz="UTC"),
            ),
            "ns": pa.array([1_700_000_000_123_456_789 + i for i in range(n)], pa.timestamp("ns")),
            "amount": pa.array([decimal.Decimal(f"{i}.25") for i in range(n)], pa.decimal128(9, 2)),
            "f": pa.array([0.5, float("nan"), None, -1.0, 2.0, 3.5]),
            "b": pa.array([b"\x00a", None, b"c", b"d", b"e", b"f"]),
            "l": pa.array([[1, 2], [], None, [3], [4, None], [5]], pa.list_(pa.int64())),
            "st": pa.array(
                [{"x": i, "y": f"y{i}"} for i in range(n)],
                pa.struct([("x", pa.int32()), ("y", pa.string())]),
            ),
        }
    )
    table = lakelog.write_table(
        str(tmp_path / "t"), data, partition_by=["day"], properties=PROPS
    ) and lakelog.open_table(str(tmp_path / "t"))
    table.delete("amount = 1.25")
    snap = table.snapshot()
    want = snap.to_arrow()
    con = duckdb.connect()
    snap.to_duckdb(con, name="t")
    assert _native_duckdb(con, "t")
    rel = con.sql("select * from t")
    assert [str(t) for t in rel.types] == [str(t) for t in con.from_arrow(want).types]
    got = con.sql("select * from t order by ts").fetchall()
    assert [repr(r) for r in got] == [repr(r) for r in con.from_arrow(want).order("ts").fetchall()]
    lf = snap.to_polars()
    assert "PYTHON SCAN" not in lf.explain()
    frame = lf.sort("ts").collect()
    expected = pl.from_arrow(want).sort("ts")
    assert frame.schema == expected.schema
    assert frame.equals(expected)


def test_filter_prunes_the_files_handed_to_the_engines(tmp_path: Any) -> None:
    uri = str(tmp_path / "t")
    table = lakelog.create_table(uri, SCHEMA, partition_by=["p"], properties=PROPS)
    for i in range(6):
        ids = list(range(i * 100, (i + 1) * 100))
        table.append(
            pa.table(
                {"p": ["a b"] * 100, "id": ids, "v": [k % 9 for k in ids], "s": ["x"] * 100},
                schema=SCHEMA,
            ),
        )
    table.delete("id = 250")
    snap = table.snapshot()
    con = duckdb.connect()
    sql = duckdb_view_sql(snap, con, name="t", filter="id between 240 and 260")
    assert sql is not None and len(re.findall(r"\.parquet'", sql)) == 1
    snap.to_duckdb(con, name="t", filter="id between 240 and 260")
    assert con.sql("select count(*) from t").fetchone() == (20,)
    # without filter= the list holds every file; a query's filter goes into DuckDB's
    # Parquet reader, which prunes row groups by their statistics
    snap.to_duckdb(con, name="every")
    sql = duckdb_view_sql(snap, con, name="every")
    assert sql is not None and len(re.findall(r"\.parquet'", sql)) == 6
    plan = "".join(r[1] for r in con.sql("explain select s from every where id = 42").fetchall())
    assert re.search(r"READ_PARQUET.*Filters:\s*id=42", plan, re.S)
    assert con.sql("select count(*) from every where id = 250").fetchone() == (0,)

    lf = snap.to_polars(filter="id between 240 and 260")
    assert _polars_sources(lf.explain()) == 1
    assert lf.select(pl.len()).collect().item() == 20
    every = snap.to_polars()
    assert _polars_sources(every.explain()) == 6
    assert "SELECTION" in every.filter(pl.col("id") == 42).explain()  # into the scan


def _polars_sources(plan: str) -> int:
    """Files polars' Parquet scans of a plan read (``[path, ... N other sources]``)."""
    scans = re.findall(r"Parquet SCAN \[([^\]]*)\]", plan)
    return sum(
        1 + int(m.group(1)) if (m := re.search(r"(\d+) other sources?", s)) else 1 for s in scans
    )


FILTERS: list[Any] = [
    "f > 1.0",
    "f != 1.0",
    "f <= 2.5",
    "not (f > 1.0)",
    "f is null",
    "f is not null",
    "s in ('a', 'b')",
    "s not in ('a')",
    "not (s in ('a'))",
    "s is null or f >= 2.5",
    "p = 'x y' and f < 3",
    [("s", "not in", ["a"])],
    [("s", "in", ["a", None])],
    pc.field("f") > float("nan"),
    pc.field("f") != float("nan"),
    pc.field("s").isin(["b", None]),
    ~pc.field("s").isin(["b", None]),
    pc.field("f") > pc.field("f"),  # not modelled: lakelog's scanner reads it
]


@pytest.mark.parametrize("where", FILTERS, ids=[str(f) for f in FILTERS])
def test_filter_keeps_arrows_rules_in_both_engines(tmp_path: Any, where: Any) -> None:
    """``filter=`` becomes DuckDB SQL and a polars expression selecting exactly the rows
    ``to_arrow(filter=...)`` selects, NaN and nulls included (DuckDB and polars order NaN
    above every number and equal to itself; Arrow does not)."""
    data = pa.table(
        {
            "p": ["x y", "x y", "50%", None, "x y", None],
            "f": [1.0, float("nan"), None, 2.5, 3.0, float("nan")],
            "s": ["a", "b", None, "c", "a", None],
        }
    )
    table = lakelog.write_table(
        str(tmp_path / "t"), data, partition_by=["p"], properties=PROPS
    ) and lakelog.open_table(str(tmp_path / "t"))
    table.delete("f = 3.0")
    snap = table.snapshot()
    want = _rows(snap.to_arrow(filter=where))
    con = duckdb.connect()
    snap.to_duckdb(con, name="t", filter=where)
    modelled = where is not FILTERS[-1]
    assert _native_duckdb(con, "t") == modelled  # translated, not read by pyarrow
    got = con.sql("select * from t").arrow()
    got = got.read_all() if isinstance(got, pa.RecordBatchReader) else got
    assert _rows(got) == want
    lf = snap.to_polars(filter=where)
    assert ("PYTHON SCAN" not in lf.explain()) == modelled
    assert _rows(lf.collect().to_arrow()) == want


def test_a_name_moves_between_the_native_view_and_lakelogs_scanner(tmp_path: Any) -> None:
    """Registering a name again replaces it, whichever way each registration reads."""
    data = pa.table({"p": ["a", "b"], "id": [1, 2], "v": [1, 2], "s": ["x", "y"]}, schema=SCHEMA)
    table = lakelog.write_table(str(tmp_path / "t"), data) and lakelog.open_table(
        str(tmp_path / "t")
    )
    snap = table.snapshot()
    con = duckdb.connect()
    unmodelled = pc.field("id") > pc.field("v") - 1
    for filter, native, count in [(None, True, 2), (unmodelled, False, 2), ("id = 1", True, 1)]:
        snap.to_duckdb(con, name="t", filter=filter)
        assert _native_duckdb(con, "t") == native
        assert con.sql("select count(*) from t").fetchone() == (count,)


def test_a_file_deleted_outside_lakelog_is_a_lakelog_error(tmp_path: Any) -> None:
    table = lakelog.write_table(
        str(tmp_path / "t"), pa.table({"id": [1, 2, 3]})
    ) and lakelog.open_table(str(tmp_path / "t"))
    (path,) = [table.storage.full(f.path) for f in table.snapshot().files()]
    Path(path).unlink()
    snap = table.snapshot()
    with pytest.raises(DataFileMissingError):
        snap.to_duckdb(duckdb.connect(), name="t")
    with pytest.raises(DataFileMissingError):
        snap.to_polars()
