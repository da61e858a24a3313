"""DuckDB, polars and pandas read snapshots: the rows lakelog reads, with the engines'
filters pruning files through lakelog (counted on a filesystem that records every
file it opens), time travel, and the errors a user can meet."""

from __future__ import annotations

import datetime as dt
import decimal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from fsspec.implementations.memory import MemoryFileSystem

import lakelog
from lakelog.errors import InvalidArgumentError

duckdb = pytest.importorskip("duckdb")
pl = pytest.importorskip("polars")
pytest.importorskip("pandas")


class CountingMemoryFS(MemoryFileSystem):
    """fsspec's memory filesystem under its own protocol, recording every file opened
    for reading: the test's eye on what an engine reads."""

    protocol = ("countmem",)
    opened: list[str] = []  # noqa: RUF012 - shared by the instances fsspec caches

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        if path.startswith("countmem://"):
            path = path[len("countmem://") :]
        return str(super()._strip_protocol(path))

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if "r" in mode:
            CountingMemoryFS.opened.append(self._strip_protocol(path))
        return super()._open(path, mode, **kwargs)


fsspec.register_implementation("countmem", CountingMemoryFS, clobber=True)

BATCHES = 12
ROWS = 10


def _batch(i: int) -> pa.Table:
    ids = list(range(i * ROWS, (i + 1) * ROWS))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array([float(k % 7) for k in ids]),
            "name": pa.array([f"n{k}" for k in ids]),
            "score": pa.array([k * 1.5 for k in ids]),  # a float: only lakelog prunes it
        }
    )


@pytest.fixture
def counted() -> Iterator[lakelog.Table]:
    """A table of 12 files with disjoint id ranges on the counting filesystem."""
    root = f"/lakelog-readers-{uuid.uuid4().hex}"
    table = lakelog.write_table(f"countmem://{root}", _batch(0)) and lakelog.open_table(
        f"countmem://{root}"
    )
    for i in range(1, BATCHES):
        table.append(_batch(i))
    CountingMemoryFS.opened.clear()
    yield table
    for key in [k for k in list(MemoryFileSystem.store) if k.startswith(root)]:
        MemoryFileSystem.store.pop(key, None)
    dirs = MemoryFileSystem.pseudo_dirs
    dirs[:] = [d for d in dirs if not d.startswith(root)]


def _data_files_opened() -> set[str]:
    return {p for p in CountingMemoryFS.opened if p.endswith(".parquet")}


def _holding(table: lakelog.Table, ids: range) -> set[str]:
    snap = table.snapshot()
    out = set()
    for f in snap.files():
        lo, hi = f.stats.min["id"], f.stats.max["id"]  # type: ignore[union-attr]
        if any(lo <= i <= hi for i in ids):
            out.add(table.storage.full(f.path))
    return out


def test_selective_queries_open_only_the_matching_file(counted: lakelog.Table) -> None:
    snap = counted.snapshot()
    want = _holding(counted, range(35, 38))
    assert len(want) == 1

    con = duckdb.connect()
    CountingMemoryFS.opened.clear()
    rel = snap.to_duckdb(con, name="t")
    lf = snap.to_polars()
    assert not _data_files_opened()  # registering reads nothing
    got = con.sql("select id from t where id between 35 and 37 order by id").fetchall()
    assert [r[0] for r in got] == [35, 36, 37]
    assert _data_files_opened() == want

    CountingMemoryFS.opened.clear()
    frame = lf.filter(pl.col("id").is_between(35, 37)).collect()
    assert sorted(frame["id"].to_list()) == [35, 36, 37]
    assert _data_files_opened() == want

    CountingMemoryFS.opened.clear()
    df = snap.to_pandas(filter="id between 35 and 37", columns=["id", "name"])
    assert sorted(df["id"].tolist()) == [35, 36, 37] and list(df.columns) == ["id", "name"]
    assert _data_files_opened() == want

    # a float range: the dataset's own guarantees leave floats out (NaN), lakelog's
    # pruning does not, so only the scanner lakelog answers reads one file
    CountingMemoryFS.opened.clear()
    got = con.sql("select id from t where score between 52.0 and 55.0 order by id").fetchall()
    assert [r[0] for r in got] == [35, 36]
    assert _data_files_opened() == want
    CountingMemoryFS.opened.clear()
    frame = snap.to_polars().filter(pl.col("score") > 170.0).collect()
    assert sorted(frame["id"].to_list()) == [114, 115, 116, 117, 118, 119]
    assert len(_data_files_opened()) == 1
    con.register("plain", snap.dataset())  # a plain pyarrow dataset of the same files
    CountingMemoryFS.opened.clear()
    got = con.sql("select id from plain where score between 52.0 and 55.0").fetchall()
    assert sorted(r[0] for r in got) == [35, 36] and len(_data_files_opened()) == BATCHES

    CountingMemoryFS.opened.clear()
    got = rel.filter("id >= 115").select("id").fetchall()  # the relation returned
    assert sorted(r[0] for r in got) == [115, 116, 117, 118, 119]
    assert len(_data_files_opened()) == 1

    # the counter sees every file when nothing prunes: the assertions above can fail
    CountingMemoryFS.opened.clear()
    assert con.sql("select sum(id) from t").fetchone() == (sum(range(BATCHES * ROWS)),)
    assert len(_data_files_opened()) == BATCHES


def test_filters_lakelog_cannot_use_still_give_the_right_rows(counted: lakelog.Table) -> None:
    snap = counted.snapshot()
    con = duckdb.connect()
    snap.to_duckdb(con, name="t")
    got = con.sql("select count(*) from t where id % 10 = 3 or name like 'n11%'").fetchone()
    assert got == (12 + 11 - 1,)  # 3, 13, ..., 113; n11, n110..n119; 113 in both
    frame = snap.to_polars().filter(pl.col("name").str.starts_with("n11")).collect()
    assert frame.height == 11
    # a registered filter limits every query on the view
    snap.to_duckdb(con, name="low", filter=pc.field("id") < 25)
    assert con.sql("select count(*), max(id) from low where x >= 0").fetchone() == (25, 24)
    assert con.sql("select count(*) from low where id > 100").fetchone() == (0,)


def test_engines_read_exactly_the_snapshot(tmp_path: Path) -> None:
    """After a compaction the folder holds every row twice; the engines read the table."""
    uri = str(tmp_path / "t")
    for i in range(4):
        lakelog.write_table(uri, _batch(i))
    t = lakelog.open_table(uri)
    t.compact()
    t.delete("id < 5")
    latest = t.snapshot()
    want = sorted(latest.to_arrow()["id"].to_pylist())
    con = duckdb.connect()
    rel = latest.to_duckdb(con, name="events")
    assert sorted(r[0] for r in rel.select("id").fetchall()) == want
    assert sorted(latest.to_polars().collect()["id"].to_list()) == want
    assert sorted(latest.to_pandas()["id"].tolist()) == want
    # listing the folder is not reading the table (the README's warning)
    listed = con.sql(f"select count(*) from read_parquet('{uri}/**/*.parquet')").fetchone()
    assert listed is not None and listed[0] > len(want)
    # time travel: version 1 through every engine
    v1 = t.snapshot(1)
    old = sorted(v1.to_arrow()["id"].to_pylist())
    assert old == list(range(2 * ROWS))
    v1.to_duckdb(con, name="events")  # registering a name again replaces it
    assert sorted(r[0] for r in con.sql("select id from events").fetchall()) == old
    assert sorted(v1.to_polars(columns=["id"]).collect()["id"].to_list()) == old
    assert sorted(v1.to_pandas(columns=["id"])["id"].tolist()) == old


def test_types_and_partition_columns_survive_every_engine(tmp_path: Path) -> None:
    data = pa.table(
        {
            "day": pa.array([dt.date(2026, 11, 2), dt.date(2026, 11, 3)] * 3),
            "ts": pa.array(
                [dt.datetime(2026, 11, 2, 10, i, tzinfo=dt.timezone.utc) for i in range(6)],
                pa.timestamp("us", tz="UTC"),
            ),
            "amount": pa.array([decimal.Decimal(f"{i}.25") for i in range(6)], pa.decimal128(9, 2)),
            "flag": pa.array([True, False, None, True, False, True]),
            "label": pa.array(["a", None, "c", "d", "e", "f"]),
        }
    )
    t = lakelog.write_table(str(tmp_path / "t"), data, partition_by=["day"]) and lakelog.open_table(
        str(tmp_path / "t")
    )
    snap = t.snapshot()
    want = snap.to_arrow().sort_by("ts")
    con = duckdb.connect()
    snap.to_duckdb(con, name="t")
    got = con.sql("select * from t order by ts").arrow()
    got = got.read_all() if isinstance(got, pa.RecordBatchReader) else got
    assert got.select(want.column_names).to_pylist() == want.to_pylist()
    frame = snap.to_polars().sort("ts").collect()
    assert frame.select(want.column_names).to_dicts() == want.to_pylist()
    df = snap.to_pandas().sort_values("ts").reset_index(drop=True)
    assert df.equals(want.to_pandas())
    # a partition filter prunes by the log: one partition's rows
    day = con.sql("select count(*) from t where day = DATE '2026-11-03'").fetchone()
    assert day == (3,)


def test_argument_errors_are_lakelog_errors(tmp_path: Path) -> None:
    t = lakelog.write_table(str(tmp_path / "t"), _batch(0)) and lakelog.open_table(
        str(tmp_path / "t")
    )
    snap = t.snapshot()
    with pytest.raises(InvalidArgumentError, match="non-empty string"):
        snap.to_duckdb(duckdb.connect(), name="")
    with pytest.raises(InvalidArgumentError, match="duckdb connection"):
        snap.to_duckdb("not a connection", name="t")
    with pytest.raises(InvalidArgumentError, match="unknown"):
        snap.to_polars(columns=["nope"])
    with pytest.raises(InvalidArgumentError, match="nope"):
        snap.to_pandas(filter="nope = 1")
    with pytest.raises(InvalidArgumentError, match="to_pandas"):
        snap.to_pandas(not_an_option=True)
    # the default connection is duckdb.sql()'s
    snap.to_duckdb(name="lakelog_default_view")
    assert duckdb.sql("select count(*) from lakelog_default_view").fetchone() == (ROWS,)


@pytest.mark.parametrize(
    ("module", "call"),
    [
        ("duckdb", "snap.to_duckdb(name='t')"),
        ("polars", "snap.to_polars()"),
        ("pandas", "snap.to_pandas()"),
    ],
)
def test_a_missing_engine_says_what_to_install(tmp_path: Path, module: str, call: str) -> None:
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, _batch(0))
    code = textwrap.dedent(
        f"""
        import sys

        class NotInstalled:  # as if {module} were not installed
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == {module!r}:
                    raise ImportError(f"No module named {{name!r}}")

        sys.meta_path.insert(0, NotInstalled())
        import lakelog
        snap = lakelog.open_table({uri!r}).snapshot()
        try:
            {call}
        except lakelog.MissingDependencyError as e:
            print(type(e).__name__, e)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("MissingDependencyError") and f"pip install {module}" in out.stdout
