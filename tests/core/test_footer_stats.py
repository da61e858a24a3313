"""File statistics from a Parquet footer (``lakelog.stats.stats_from_metadata``) against
the values themselves: min and max over the non-null values of every row group, null
counts summed, no bounds where no row group has any, and the same result with a plan
made for another file of the schema (how ``convert`` reads many files)."""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.stats import StatsPlan, stats_from_metadata

SCHEMA = pa.schema([("i", pa.int64()), ("x", pa.float64()), ("s", pa.string())])

_rows = st.lists(
    st.tuples(
        st.none() | st.integers(-(2**40), 2**40),
        st.none() | st.floats(-1e9, 1e9, allow_nan=False),
        st.none() | st.text(max_size=8),
    ),
    min_size=1,
    max_size=40,
)


def _footer(rows: list[tuple[Any, ...]], group: int) -> pq.FileMetaData:
    table = pa.table({n: [r[k] for r in rows] for k, n in enumerate(SCHEMA.names)}, SCHEMA)
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=group)
    return pq.read_metadata(pa.BufferReader(buf.getvalue()))


def _expected(rows: list[tuple[Any, ...]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, int]]:
    lo: dict[str, Any] = {}
    hi: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for k, name in enumerate(SCHEMA.names):
        values = [r[k] for r in rows if r[k] is not None]
        nulls[name] = len(rows) - len(values)
        if values:
            lo[name], hi[name] = min(values), max(values)
    return lo, hi, nulls


@settings(max_examples=80, deadline=None)
@given(rows=_rows, group=st.integers(1, 12), other=_rows)
def test_footer_statistics_are_those_of_the_values(
    rows: list[tuple[Any, ...]], group: int, other: list[tuple[Any, ...]]
) -> None:
    md = _footer(rows, group)
    got = stats_from_metadata(md, SCHEMA)
    lo, hi, nulls = _expected(rows)
    assert got.null_count == nulls
    assert got.min == lo and got.max == hi
    plan = StatsPlan(_footer(other, 5), SCHEMA)  # made on another file of the schema
    assert stats_from_metadata(md, SCHEMA, plan=plan) == got
