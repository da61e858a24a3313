"""overwrite(data, where=...): replace exactly the rows a predicate selects."""

from __future__ import annotations

from pathlib import Path

import pytest
from _rowlevel_helpers import files_on_disk, make_table, rows, table_rows

from lakelog import InvalidArgumentError
from lakelog.log.commits import read_commit
from lakelog.rowlevel import ChangeResult


def test_replaces_exactly_the_matching_rows(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=3)
    r = t.overwrite(rows([10, 11, 500], note="x"), where="id >= 10 and id < 20 or id = 500")
    assert isinstance(r, ChangeResult) and r.committed
    assert (r.deleted_rows, r.inserted_rows, r.files_removed) == (10, 3, 1)
    got = {x["id"]: x["note"] for x in table_rows(t)}
    assert len(got) == 23
    assert (got[10], got[11], got[500]) == ("x10", "x11", "x500")
    assert 12 not in got and got[9] == "n9" and got[20] == "n20"
    h = read_commit(t.storage, r.version).header
    assert h.operation == "OVERWRITE" and h.parameters == {
        "where": "id >= 10 and id < 20 or id = 500"
    }
    assert h.metrics["num_inserted_rows"] == 3 and h.metrics["num_deleted_rows"] == 10


def test_rows_outside_the_predicate_are_an_error_and_change_nothing(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", files=2)
    v = t.version
    with pytest.raises(InvalidArgumentError, match=r"1 row\(s\) outside it"):
        t.overwrite(rows([3, 4, 99]), where="id < 10")
    assert t.refresh().version == v
    assert len(files_on_disk(tmp_path / "t")) == 2


def test_partition_predicate_and_empty_data(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", partition_by=("day",), files=4)
    t.overwrite(rows([1000], day="d1"), where="day = 'd1'")
    assert sorted(x["id"] for x in table_rows(t) if x["day"] == "d1") == [1000]
    # empty data: a delete of the matching rows
    t.overwrite(rows([]), where="day = 'd1'")
    assert {x["day"] for x in table_rows(t)} == {"d0"}


def test_where_and_partitions_together_are_refused(tmp_path: Path) -> None:
    t = make_table(tmp_path / "t", partition_by=("day",), files=1)
    with pytest.raises(InvalidArgumentError, match="partitions= or where="):
        t.overwrite(rows([1]), partitions=[{"day": "d1"}], where="day = 'd1'")
