"""Adopting Parquet written by other tools: ``lakelog.convert`` and ``table.add_files``.

Files come from real writers (pyarrow's ``write_dataset``, DuckDB's ``COPY``); the
adopted files must be described exactly as lakelog's writer describes its own, and
every refusal must leave the folder or table as it was."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog.errors import (
    InvalidArgumentError,
    SchemaMismatchError,
    TableExistsError,
)
from lakelog.leases import LEASE_DIR, LeaseRecord
from lakelog.log.snapshot import load_snapshot
from lakelog.stats import stats_from_metadata
from lakelog.storage import Storage

duckdb = pytest.importorskip("duckdb")


def _data(n: int = 40) -> pa.Table:
    return pa.table(
        {
            "day": pa.array([dt.date(2026, 11, 1 + i % 4) for i in range(n)]),
            "shard": pa.array([i % 3 for i in range(n)], pa.int64()),
            "kind": pa.array(["a/b" if i % 2 else "c d" for i in range(n)]),
            "id": pa.array(range(n), pa.int64()),
            "x": pa.array([i / 7 for i in range(n)]),
            "note": pa.array([None if i % 5 == 0 else f"n{i}" for i in range(n)]),
        }
    )


def _files(folder: Path) -> dict[str, int]:
    return {
        str(p.relative_to(folder)): p.stat().st_mtime_ns
        for p in folder.rglob("*")
        if p.is_file() and "_lakelog" not in p.parts
    }


def _assert_described_like_the_writer(table: lakelog.Table) -> None:
    """Every file's size, rows and statistics are what lakelog's writer would record."""
    snap = table.snapshot()
    root = Path(table.storage.root)
    for f in snap.files():
        md = pq.read_metadata(root / f.path)
        assert f.num_rows == md.num_rows
        assert f.size_bytes == (root / f.path).stat().st_size
        assert f.stats == stats_from_metadata(md, snap.file_schema)


def _rows(table: pa.Table, names: list[str]) -> list[dict[str, object]]:
    rows = table.select(names).to_pylist()
    return sorted(rows, key=lambda r: [str(r[n]) for n in names])


def test_convert_a_hive_partitioned_folder_in_place(tmp_path: Path) -> None:
    folder = tmp_path / "raw"
    data = _data()
    ds.write_dataset(
        data,
        folder,
        format="parquet",
        partitioning=["day", "shard", "kind"],
        partitioning_flavor="hive",
        max_rows_per_group=7,
    )
    (folder / "_SUCCESS").write_text("")
    (folder / "_tmp").mkdir()
    pq.write_table(data.slice(0, 3).drop(["day", "shard", "kind"]), folder / "_tmp" / "x.parquet")
    before = _files(folder)

    table = lakelog.convert(str(folder))
    assert table.version == 0 and table.history()[0].operation == "CONVERT"
    assert table.partition_by == ("day", "shard", "kind")
    assert table.schema.field("day").type == pa.date32()
    assert table.schema.field("shard").type == pa.int64()
    assert table.schema.field("kind").type == pa.string()
    got = table.snapshot().to_arrow()
    assert _rows(got, data.column_names) == _rows(data, data.column_names)
    assert _files(folder) == before  # nothing moved, rewritten or deleted
    assert all(not f.path.startswith("_tmp") for f in table.snapshot().files())
    _assert_described_like_the_writer(table)
    # partition values are the log's, in their string form; pruning uses them
    assert table.snapshot().files("kind = 'a/b' and shard = 2")
    assert {f.partition["kind"] for f in table.snapshot().files("kind = 'a/b'")} == {"a/b"}
    with pytest.raises(TableExistsError, match="add_files"):
        lakelog.convert(str(folder))


def test_convert_and_add_files_written_by_duckdb(tmp_path: Path) -> None:
    folder = tmp_path / "events"
    con = duckdb.connect()
    con.execute(
        "create table src as select range as id, range % 3 as grp, "
        "date '2026-11-01' + cast(range % 2 as integer) as day, 'v' || range::varchar as v "
        "from range(30)"
    )
    con.execute(f"copy src to '{folder}' (format parquet, partition_by (day))")
    table = lakelog.convert(str(folder))
    assert table.partition_by == ("day",) and table.schema.field("day").type == pa.date32()
    want = con.sql("select id, grp, v, day from src order by id").arrow()
    want = want.read_all() if isinstance(want, pa.RecordBatchReader) else want
    got = table.snapshot().to_arrow(columns=["id", "grp", "v", "day"]).sort_by("id")
    assert got.to_pylist() == want.to_pylist()
    _assert_described_like_the_writer(table)

    # later, DuckDB writes one more file into a partition folder: adopt it
    con.execute("create table more as select * from src where id < 5")
    target = folder / "day=2026-11-03" / "from-duckdb.parquet"
    target.parent.mkdir()
    con.execute(f"copy (select id, grp, v from more) to '{target}' (format parquet)")
    result = table.add_files(["day=2026-11-03/from-duckdb.parquet"])
    assert result.version == 1 and table.history()[0].operation == "ADD FILES"
    snap = table.snapshot()
    assert snap.num_rows == 35
    assert len(snap.to_arrow(filter="day = '2026-11-03'")) == 5
    _assert_described_like_the_writer(table)


def test_schemas_unify_over_missing_columns_and_widening(tmp_path: Path) -> None:
    folder = tmp_path / "raw"
    folder.mkdir()
    pq.write_table(
        pa.table({"id": pa.array([1, 2], pa.int32()), "a": ["x", "y"]}), folder / "1.parquet"
    )
    pq.write_table(pa.table({"id": pa.array([3], pa.int64()), "b": [1.5]}), folder / "2.parquet")
    table = lakelog.convert(str(folder))
    schema = table.schema
    assert schema.field("id").type == pa.int64()
    assert schema.field("a").nullable and schema.field("b").nullable
    got = table.snapshot().to_arrow().sort_by("id").to_pylist()
    assert got == [
        {"id": 1, "a": "x", "b": None},
        {"id": 2, "a": "y", "b": None},
        {"id": 3, "a": None, "b": 1.5},
    ]
    assert table.snapshot().files("id >= 3") == [
        f for f in table.snapshot().files() if f.path == "2.parquet"
    ]
    _assert_described_like_the_writer(table)  # the int32 file's stats too, as int64


def test_incompatible_files_are_listed_and_nothing_is_committed(tmp_path: Path) -> None:
    folder = tmp_path / "raw"
    folder.mkdir()
    pq.write_table(pa.table({"id": [1, 2]}), folder / "good.parquet")
    pq.write_table(pa.table({"id": ["one"]}), folder / "text.parquet")
    with pytest.raises(SchemaMismatchError) as info:
        lakelog.convert(str(folder))
    message = str(info.value)
    assert "'good.parquet'" in message and "'text.parquet'" in message and "id" in message
    assert not (folder / "_lakelog").exists()
    os.remove(folder / "text.parquet")
    (folder / "notes.parquet").write_text("not parquet")
    (folder / "empty.parquet").write_bytes(b"")
    with pytest.raises(InvalidArgumentError) as err:
        lakelog.convert(str(folder))
    assert "'notes.parquet'" in str(err.value) and "'empty.parquet'" in str(err.value)
    assert not (folder / "_lakelog").exists()


def test_partition_layouts_and_types(tmp_path: Path) -> None:
    folder = tmp_path / "raw"
    for code in ("007", "12"):
        (folder / f"code={code}").mkdir(parents=True)
        pq.write_table(pa.table({"id": [int(code)]}), folder / f"code={code}" / "f.parquet")
    (folder / "stray.parquet").parent.mkdir(exist_ok=True)
    pq.write_table(pa.table({"id": [0]}), folder / "stray.parquet")
    with pytest.raises(InvalidArgumentError, match=r"stray\.parquet"):
        lakelog.convert(str(folder))
    os.remove(folder / "stray.parquet")
    t = lakelog.convert(str(folder))
    # '007' is not how an integer is written: the column stays a string, values exact
    assert t.schema.field("code").type == pa.string()
    assert sorted(t.snapshot().to_arrow()["code"].to_pylist()) == ["007", "12"]

    other = tmp_path / "typed"
    (other / "n=5").mkdir(parents=True)
    pq.write_table(pa.table({"id": [1]}), other / "n=5" / "f.parquet")
    t2 = lakelog.convert(str(other), partition_by=pa.schema([("n", pa.int32())]))
    assert t2.schema.field("n").type == pa.int32()
    assert t2.snapshot().to_arrow()["n"].to_pylist() == [5]

    inside = tmp_path / "inside"
    (inside / "day=2026-11-01").mkdir(parents=True)
    pq.write_table(
        pa.table({"id": [1], "day": ["2026-11-01"]}), inside / "day=2026-11-01" / "f.parquet"
    )
    with pytest.raises(SchemaMismatchError, match="only in folder names"):
        lakelog.convert(str(inside))
    with pytest.raises(InvalidArgumentError, match="found none"):
        lakelog.convert(str(tmp_path / "nothing-here"))


def test_a_delta_table_is_not_converted_by_listing(tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    uri = str(tmp_path / "delta")
    deltalake.write_deltalake(uri, pa.table({"id": [1, 2]}))
    deltalake.write_deltalake(uri, pa.table({"id": [3]}), mode="overwrite")
    with pytest.raises(InvalidArgumentError, match="found a Delta table"):
        lakelog.convert(uri)
    assert not (tmp_path / "delta" / "_lakelog").exists()


def test_add_files_refusals_leave_the_table_unchanged(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    table = lakelog.write_table(
        str(uri),
        pa.table({"day": [dt.date(2026, 11, 1)], "id": [1], "v": ["a"]}),
        partition_by=["day"],
    ) and lakelog.open_table(str(uri))
    part = uri / "day=2026-11-02"
    part.mkdir()
    pq.write_table(pa.table({"id": [2, 3], "v": ["b", None]}), part / "ok.parquet")
    pq.write_table(pa.table({"id": [4], "v": ["c"], "extra": [1]}), part / "extra.parquet")
    pq.write_table(pa.table({"id": ["five"], "v": ["d"]}), part / "text.parquet")
    pq.write_table(
        pa.table({"id": [6], "v": ["e"], "day": [dt.date(2026, 11, 2)]}), part / "day.parquet"
    )
    pq.write_table(pa.table({"id": [7], "v": ["f"]}), part / "_hidden.parquet")
    pq.write_table(pa.table({"id": [8], "v": ["g"]}), uri / "no-partition.parquet")
    (uri / "day=notadate").mkdir()
    pq.write_table(pa.table({"id": [9], "v": ["h"]}), uri / "day=notadate" / "f.parquet")
    outside = tmp_path / "elsewhere.parquet"
    pq.write_table(pa.table({"id": [10], "v": ["i"]}), outside)
    live = table.snapshot().files()[0].path

    cases: list[tuple[list[str], type[Exception], str]] = [
        ([live], InvalidArgumentError, "already in"),
        ([str(outside)], InvalidArgumentError, "under the table root"),
        (["_lakelog/00000000000000000000.json"], InvalidArgumentError, "outside _lakelog"),
        (["day=2026-11-02/missing.parquet"], InvalidArgumentError, "missing"),
        (
            ["day=2026-11-02/ok.parquet", "day=2026-11-02/extra.parquet"],
            SchemaMismatchError,
            "extra",
        ),
        (["day=2026-11-02/text.parquet"], SchemaMismatchError, "'id' is string"),
        (["day=2026-11-02/day.parquet"], SchemaMismatchError, "only in folder names"),
        (["day=2026-11-02/_hidden.parquet"], InvalidArgumentError, "hidden"),
        (["no-partition.parquet"], InvalidArgumentError, "day=..."),
        (["day=notadate/f.parquet"], InvalidArgumentError, "notadate"),
        ([], InvalidArgumentError, "non-empty list"),
    ]
    for paths, error, words in cases:
        with pytest.raises(error, match=words):
            table.add_files(paths)
        assert lakelog.open_table(str(uri)).version == 0, paths

    # absolute paths and folders are accepted; a folder means its Parquet files
    for name in ("extra", "text", "day", "_hidden"):
        os.remove(part / f"{name}.parquet")
    pq.write_table(pa.table({"id": [11], "v": ["j"]}), part / "more.parquet")
    result = table.add_files([str(part)])
    assert result.version == 1
    snap = table.snapshot()
    assert sorted(snap.to_arrow()["id"].to_pylist()) == [1, 2, 3, 11]
    assert {f.partition["day"] for f in snap.files()} == {"2026-11-01", "2026-11-02"}


def test_convert_on_s3(s3_backend: object, moto_server: object) -> None:
    import fsspec

    backend = s3_backend  # a fresh prefix in the session's moto bucket
    uri, options = backend.uri, backend.storage_options  # type: ignore[attr-defined]
    fs, root = fsspec.core.url_to_fs(uri, **options)
    for day in ("2026-11-01", "2026-11-02"):
        with fs.open(f"{root}/day={day}/part-0.parquet", "wb") as f:
            pq.write_table(pa.table({"id": [1, 2], "v": ["a", "b"]}), f)
    table = lakelog.convert(uri, storage_options=options)
    assert table.partition_by == ("day",) and table.snapshot().num_rows == 4
    assert len(table.snapshot().to_arrow(filter="day = '2026-11-02'")) == 2
    with fs.open(f"{root}/day=2026-11-03/new.parquet", "wb") as f:
        pq.write_table(pa.table({"id": [3], "v": ["c"]}), f)
    table.add_files(["day=2026-11-03/new.parquet"])
    assert lakelog.open_table(uri, storage_options=options).snapshot().num_rows == 5


def test_a_converted_table_can_keep_a_delta_view(tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    folder = tmp_path / "raw"
    ds.write_dataset(
        _data(12), folder, format="parquet", partitioning=["day"], partitioning_flavor="hive"
    )
    table = lakelog.convert(str(folder), properties={"lakelog.delta_view": "true"})
    pq.write_table(_data(3).drop(["day"]), folder / "day=2026-11-01" / "late.parquet")
    table.add_files(["day=2026-11-01/late.parquet"])
    want = _rows(table.snapshot().to_arrow(), ["id", "x", "day"])
    got = deltalake.DeltaTable(str(folder)).to_pyarrow_table()
    assert _rows(got, ["id", "x", "day"]) == want and len(want) == 15


class LeaseWatch(Storage):
    """A table root that records the adopted paths of every writer lease written through
    it and, with ``vacuumed`` set, deletes that file right after the first lease is
    written: what a vacuum that read the leases just before does."""

    def __init__(self, uri: str, *, vacuumed: Path | None = None) -> None:
        super().__init__(uri)
        self.lease_paths: list[tuple[str, ...]] = []
        self.vacuumed = vacuumed

    def write_bytes(self, rel: str, data: bytes) -> None:
        super().write_bytes(rel, data)
        if rel.startswith(f"{LEASE_DIR}/"):
            self.lease_paths.append(msgspec.json.decode(data, type=LeaseRecord).paths)
            if self.vacuumed is not None:
                self.vacuumed.unlink()
                self.vacuumed = None


def _on(storage: Storage) -> lakelog.Table:
    """The table at ``storage``'s root, read and written through that very object."""
    return lakelog.Table(storage, load_snapshot(storage))


def test_add_files_waits_out_vacuum_only_for_files_vacuum_could_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease names the adopted files; a file younger than vacuum's age limit (less the
    lease TTL) is adopted at once, an older one after the recheck window, while the lease
    (listing it) is live."""
    import lakelog.leases as leases

    uri = str(tmp_path / "t")
    lakelog.write_table(uri, pa.table({"id": [0]}))
    storage = LeaseWatch(uri)
    t = _on(storage)
    sleeps: list[float] = []
    seen = storage.lease_paths
    # time.sleep, everywhere: the waits are recorded, not slept
    monkeypatch.setattr(leases.time, "sleep", sleeps.append)
    pq.write_table(pa.table({"id": [1]}), tmp_path / "t" / "young.parquet")
    t.add_files(["young.parquet"])
    assert max(sleeps, default=0) < 1 and seen[0] == ("young.parquet",)
    sleeps.clear()
    old = tmp_path / "t" / "old.parquet"
    pq.write_table(pa.table({"id": [2]}), old)
    then = dt.datetime.now().timestamp() - 3000.5  # 3600 s less the 600 s TTL, and a bit
    os.utime(old, (then, then))
    t.add_files(["old.parquet"])
    assert [s for s in sleeps if s >= 1] and max(sleeps) <= 2 * leases.LEASE_RECHECK_SECONDS
    assert max(sleeps) > 2 * leases.LEASE_RECHECK_SECONDS - 2
    assert sorted(t.snapshot().to_arrow()["id"].to_pylist()) == [0, 1, 2]
    assert not list((tmp_path / "t" / "_lakelog" / "_leases").glob("*.json"))


def test_a_file_deleted_before_its_footer_is_read_is_reported_missing(tmp_path: Path) -> None:
    """A vacuum that started before add_files took its lease may delete a file between the
    listing and the footer read: AdoptedFilesMissingError naming it, nothing committed."""
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, pa.table({"id": [0]}))
    victim = tmp_path / "t" / "late.parquet"
    t = _on(LeaseWatch(uri, vacuumed=victim))
    pq.write_table(pa.table({"id": [1]}), victim)
    pq.write_table(pa.table({"id": [2]}), tmp_path / "t" / "kept.parquet")
    with pytest.raises(lakelog.AdoptedFilesMissingError, match=r"late\.parquet") as e:
        t.add_files(["late.parquet", "kept.parquet"])
    assert e.value.missing_files == ("late.parquet",)
    assert t.refresh().version == 0
