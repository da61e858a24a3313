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


WIDE = pa.schema(
    [
        ("i8", pa.int8()),
        ("u32", pa.uint32()),
        ("u64", pa.uint64()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("s", pa.string()),
        ("d", pa.date32()),
        ("ns", pa.timestamp("ns")),
        ("ms_utc", pa.timestamp("ms", tz="UTC")),
    ]
)
_wide_row = st.tuples(
    st.none() | st.integers(-128, 127),
    st.none() | st.integers(0, 2**32 - 1),
    st.none() | st.integers(0, 2**64 - 1),
    st.none() | st.floats(width=32, allow_nan=True),
    st.none() | st.floats(allow_nan=True),
    st.none() | st.text(max_size=6),
    st.none() | st.integers(-(10**5), 10**5),
    st.none() | st.integers(-(2**62), 2**62),
    st.none() | st.integers(-(2**40), 2**40),
)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(_wide_row, min_size=1, max_size=30), group=st.integers(1, 10))
def test_statistics_taken_as_physical_values_equal_the_decoded_ones(
    rows: list[tuple[Any, ...]], group: int
) -> None:
    """Unsigned integers stored signed, nanoseconds, time zones, float32, NaN, strings:
    the fast path gives exactly what pyarrow's decoded statistics give, and bounds
    asked for in another type (microseconds for a file in milliseconds) take the decoded
    path and still come out in that type."""
    table = pa.table(
        {n: pa.array([r[k] for r in rows], WIDE.field(n).type) for k, n in enumerate(WIDE.names)}
    )
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=group)
    md = pq.read_metadata(pa.BufferReader(buf.getvalue()))
    fast = StatsPlan(md, WIDE)
    assert all(c[4] is not None for c in fast.columns)  # every column took the fast path
    decoded = stats_from_metadata(md, WIDE, plan=StatsPlan(md, WIDE, raw=False))
    assert stats_from_metadata(md, WIDE, plan=fast) == decoded
    wider = pa.schema([pa.field("ms_utc", pa.timestamp("us", tz="UTC"))])
    got = stats_from_metadata(md, wider)
    values = [r[8] * 1000 for r in rows if r[8] is not None]
    if values:
        assert (got.min["ms_utc"], got.max["ms_utc"]) == (min(values), max(values))
