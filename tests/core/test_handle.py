"""The table core: operations run on a ``TableCore`` with no ``Table`` in sight, and the
facade is a view of its core (one cached snapshot, shared).

An append, a delete and a compaction are handed a core opened from storage alone; the
``Table`` the user holds over the same core sees each version they land without a
refresh, and a ``Table`` wrapping a core shares it rather than copying it.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import lakelog
from lakelog import core
from lakelog.core import TableCore
from lakelog.maintenance.compaction.run import compact_table
from lakelog.maintenance.options import CompactionOptions
from lakelog.rowlevel import delete_rows
from lakelog.storage import Storage

SCHEMA = pa.schema([("k", pa.int64())])


def _rows(*keys: int) -> pa.Table:
    return pa.table({"k": list(keys)}, schema=SCHEMA)


def test_operations_run_on_a_core_and_the_facade_over_it_follows(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lakelog.create_table(uri, SCHEMA)
    handle = TableCore.load(Storage(uri))
    table = lakelog.Table.from_core(handle)
    assert (handle.version, table.version) == (0, 0)

    for k in (1, 2, 3):
        core.append(handle, handle.cached, _rows(k))
    assert table.version == 3  # the commit moved the core's cache, which the Table reads

    result = delete_rows(handle, "k = 2")
    assert result.committed and table.version == 4

    report = compact_table(handle, CompactionOptions(min_input_files=2))
    assert report.commits == [table.version] and table.version > 4  # after its claim
    assert sorted(table.snapshot().to_arrow().column("k").to_pylist()) == [1, 3]
    assert len(table.snapshot().files()) == 1


def test_a_table_is_a_handle_and_from_core_shares_the_core(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = lakelog.create_table(uri, SCHEMA)
    # a Table goes wherever an operation takes a handle, as users pass it today
    assert delete_rows(table, "k = 1").committed is False
    other = lakelog.Table.from_core(TableCore(table.storage, table.cached))
    other.append(_rows(7))
    assert (other.version, table.version) == (1, 0)  # separate cores, separate caches
    again = lakelog.Table.from_core(table._core)
    again.append(_rows(8))
    assert (again.version, table.version) == (2, 2)  # one core, one cache


def test_convert_hands_the_user_a_table(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    folder = tmp_path / "parquet"
    folder.mkdir()
    pq.write_table(_rows(1, 2), folder / "a.parquet")
    table = lakelog.convert(str(folder))
    assert isinstance(table, lakelog.Table) and table.version == 0
    assert lakelog.convert.__name__ == "convert" and "Parquet files" in (
        lakelog.convert.__doc__ or ""
    )
    table.append(_rows(3))
    assert sorted(table.snapshot().to_arrow().column("k").to_pylist()) == [1, 2, 3]
