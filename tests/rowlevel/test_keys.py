"""Property: merge key lookups (one or several key columns, nulls, per-file narrowing,
the hash-join fallback) find exactly the source row a plain dictionary finds."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st

import lakelog.rowlevel.merge as merge
from lakelog.log.actions import DataFile, FileStats
from lakelog.rowlevel.merge import SourceKeys

SCHEMA = pa.schema(
    [
        ("a", pa.int64()),
        ("b", pa.string()),
        ("c", pa.int64()),
        ("d", pa.timestamp("ns")),
        ("v", pa.int64()),
    ]
)
KEYS = [("a",), ("b",), ("a", "b"), ("a", "b", "c"), ("d",), ("d", "a")]

# small domains, so that keys repeat and codes of different keys could collide
key_row = st.fixed_dictionaries(
    {
        "a": st.sampled_from([None, 0, 1, 1, 2, 2]),
        "b": st.sampled_from([None, "x", "x", "y", "y", "z"]),
        "c": st.integers(-1, 1),
        # nanoseconds apart: narrowing by the first key must not round them
        "d": st.sampled_from([None, 1, 2, 1_000_000_001, 1_000_000_002]),
    }
)


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist([{**r, "v": i} for i, r in enumerate(rows)], schema=SCHEMA)


def _file_of(target: pa.Table) -> DataFile:
    """A data file whose statistics are the target rows' true bounds (in the log's
    JSON form)."""
    lo: dict[str, Any] = {}
    hi: dict[str, Any] = {}
    for name in ("a", "b", "c", "d"):
        column = target.column(name)
        if pa.types.is_timestamp(column.type):  # as the log holds them: integers
            column = column.cast(pa.int64())
        values = [v for v in column.to_pylist() if v is not None]
        if values:
            lo[name], hi[name] = min(values), max(values)
    return DataFile(
        path="f.parquet",
        size_bytes=1,
        num_rows=target.num_rows,
        stats=FileStats(min=lo, max=hi),
    )


@settings(max_examples=150, deadline=None)
@given(
    keys=st.sampled_from(KEYS),
    source=st.lists(key_row, max_size=20),
    target=st.lists(key_row, min_size=1, max_size=20),
    join=st.booleans(),
)
@example(  # codes of (0, 'x') and (1, 'y') collide if the radix is wrong
    keys=("a", "b"),
    source=[{"a": 0, "b": "y", "c": 0}, {"a": 1, "b": "x", "c": 0}, {"a": 0, "b": "x", "c": 0}],
    target=[{"a": 1, "b": "y", "c": 0}, {"a": 0, "b": "x", "c": 0}],
    join=False,
)
def test_lookups_match_a_dictionary(
    keys: tuple[str, ...],
    source: list[dict[str, Any]],
    target: list[dict[str, Any]],
    join: bool,
) -> None:
    limit = merge._CODE_LIMIT
    if join:  # force the hash-join path of several key columns
        merge._CODE_LIMIT = 1
    try:
        src = SourceKeys(_table(source), keys, "last")
        narrowed = src.index_for(_file_of(_table(target)), SCHEMA)
    finally:
        merge._CODE_LIMIT = limit
    expected: dict[tuple[Any, ...], int] = {}
    for i, row in enumerate(src.table.to_pylist()):
        key = tuple(row[k] for k in keys)
        if None not in key:
            expected[key] = i
    tgt = _table(target)
    want = [expected.get(tuple(r[k] for k in keys), -1) for r in tgt.to_pylist()]
    batch = tgt.to_batches()[0]
    assert src.match(batch).tolist() == want
    assert narrowed.match(batch).tolist() == want
