"""Every change on every storage backend: local disk, memory, and the moto S3 server."""

from __future__ import annotations

import pyarrow as pa
from _rowlevel_helpers import SCHEMA, rows
from conftest import Backend

import lakelog


def test_changes_on_every_backend(backend: Backend) -> None:
    t = lakelog.create_table(
        backend.uri, SCHEMA, partition_by=("day",), storage_options=backend.storage_options
    )
    t.append(pa.concat_tables([rows(list(range(10)), day="d0"), rows(list(range(10, 20)))]))
    t.delete("id < 3")
    t.update("id = 15", set={"note": "u"})
    r = t.merge(rows([4, 30], note="m", day="d0"), on="id")
    assert (r.updated_rows, r.inserted_rows) == (1, 1)
    t.overwrite(rows([18, 19, 40], note="o"), where="day = 'd1' and id >= 18")
    again = lakelog.open_table(backend.uri, storage_options=backend.storage_options)
    got = {x["id"]: x["note"] for x in again.snapshot().to_arrow().to_pylist()}
    expected = {i: f"n{i}" for i in range(3, 20)}
    expected.update({4: "m4", 30: "m30", 15: "u", 18: "o18", 19: "o19", 40: "o40"})
    assert got == expected
    assert [h.operation for h in again.history()][:4] == ["OVERWRITE", "MERGE", "UPDATE", "DELETE"]
