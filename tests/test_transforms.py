"""Partition transforms (``lakelog.transforms``): Iceberg's values, parsing and refusals."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.errors import InvalidArgumentError, SchemaMismatchError
from lakelog.transforms import bucket_hash, murmur3_32, parse_field, parse_fields

# Iceberg spec, appendix B: hash test vectors
VECTORS = [
    (pa.array([34], pa.int32()), 2017239379),
    (pa.array([34], pa.int64()), 2017239379),
    (pa.array([Decimal("14.20")], pa.decimal128(9, 2)), -500754589),
    (pa.array([dt.date(2017, 11, 16)]), -653330422),
    (pa.array([dt.datetime(2017, 11, 16, 22, 31, 8)], pa.timestamp("us")), -2047944441),
    (pa.array(["iceberg"]), 1210000089),
    (pa.array([b"\x00\x01\x02\x03"]), -188683207),
]


@pytest.mark.parametrize(("values", "expected"), VECTORS)
def test_bucket_hash_matches_the_iceberg_spec_vectors(values: pa.Array, expected: int) -> None:
    assert bucket_hash(values).to_pylist() == [expected]


def test_timestamptz_hashes_its_utc_instant() -> None:
    # the spec's timestamptz vector: 2017-11-16T14:31:08-08:00 is the instant 22:31:08Z
    at = dt.datetime(2017, 11, 16, 14, 31, 8, tzinfo=dt.timezone(dt.timedelta(hours=-8)))
    assert bucket_hash(pa.array([at], pa.timestamp("us", "UTC"))).to_pylist() == [-2047944441]
    nanos = pa.array([dt.datetime(2017, 11, 16, 22, 31, 8)], pa.timestamp("ns"))
    assert bucket_hash(nanos).to_pylist() == [-2047944441]


def test_murmur3_of_bytes() -> None:
    assert murmur3_32(b"iceberg") == 1210000089
    assert murmur3_32(b"\x00\x01\x02\x03") == -188683207


def test_bucket_and_truncate_values() -> None:
    assert parse_field("bucket(100, id)").apply(pa.array([34, None])).to_pylist() == [79, None]
    trunc = parse_field("truncate(10, v)").apply(pa.array([1, -1, 10, None]))
    assert trunc.to_pylist() == [0, -10, 10, None]
    assert parse_field("truncate(3, s)").apply(
        pa.array(["iceberg", "ab", "日本語です"])
    ).to_pylist() == [
        "ice",
        "ab",
        "日本語",
    ]


def test_time_transforms_are_units_since_the_epoch() -> None:
    ts = pa.array(
        [dt.datetime(2017, 12, 1, 10, 12, 55, 38194), dt.datetime(1969, 12, 31, 23, 59, 58)],
        pa.timestamp("us"),
    )
    assert parse_field("hour(ts)").apply(ts).to_pylist() == [420034, -1]
    assert parse_field("day(ts)").apply(ts).to_pylist() == [17501, -1]
    assert parse_field("month(ts)").apply(ts).to_pylist() == [575, -1]
    assert parse_field("year(ts)").apply(ts).to_pylist() == [47, -1]
    day = parse_field("day(ts)")
    assert day.to_string(17501) == "2017-12-01" and day.from_string("2017-12-01", ts.type) == 17501
    hour = parse_field("hour(ts)")
    assert (
        hour.to_string(-1) == "1969-12-31-23" and hour.from_string("1969-12-31-23", ts.type) == -1
    )
    month = parse_field("month(ts)")
    assert month.to_string(-1) == "1969-12" and month.from_string("2017-12", ts.type) == 575


def test_parsing_spellings_and_names() -> None:
    assert parse_field("id") == parse_field("identity(id)")
    assert parse_field(" bucket( 16 ,id ) ").text == "bucket(16, id)"
    assert parse_field("days(ts)").text == "day(ts)"
    assert [f.name for f in map(parse_field, ["day(ts)", "bucket(16, id)", "truncate(4, n)"])] == [
        "ts_day",
        "id_bucket_16",
        "n_trunc_4",
    ]


SCHEMA = pa.schema(
    [("ts", pa.timestamp("us")), ("id", pa.int64()), ("f", pa.float64()), ("s", pa.string())]
)


@pytest.mark.parametrize(
    ("field", "error", "words"),
    [
        ("bucket(16, f)", InvalidArgumentError, "found column 'f' of type double"),
        ("day(s)", InvalidArgumentError, "expected a date or timestamp column"),
        ("hour(id)", InvalidArgumentError, "expected a timestamp column"),
        ("week(ts)", InvalidArgumentError, "found 'week'"),
        ("bucket(0, id)", InvalidArgumentError, "between 1 and 2147483647, found '0'"),
        ("truncate(x, s)", InvalidArgumentError, "width of truncate"),
        ("bucket(16)", InvalidArgumentError, "expected bucket(N, col)"),
        ("day(nope)", SchemaMismatchError, "no column 'nope'"),
        ("day(ts", InvalidArgumentError, "expected a partition field"),
    ],
)
def test_bad_fields_are_one_line_typed_errors(field: str, error: type, words: str) -> None:
    with pytest.raises(error) as got:
        parse_fields([field], SCHEMA)
    assert words in str(got.value) and "\n" not in str(got.value)


def test_duplicate_fields_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="distinct partition fields"):
        parse_fields(["day(ts)", "days(ts)"], SCHEMA)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=20))
def test_vectorized_long_hash_is_the_reference_over_bytes(values: list[int]) -> None:
    want = [murmur3_32(v.to_bytes(8, "little", signed=True)) for v in values]
    assert bucket_hash(pa.array(values, pa.int64())).to_pylist() == want


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.dates(), min_size=1, max_size=10),
    st.lists(st.datetimes(), min_size=1, max_size=10),
    st.lists(st.text(max_size=6), min_size=1, max_size=10),
)
def test_dates_timestamps_and_strings_hash_as_the_spec_says(
    dates: list[dt.date], stamps: list[dt.datetime], texts: list[str]
) -> None:
    epoch = dt.datetime(1970, 1, 1)

    def long(v: int) -> int:
        return murmur3_32(v.to_bytes(8, "little", signed=True))

    assert bucket_hash(pa.array(dates)).to_pylist() == [
        long((d - epoch.date()).days) for d in dates
    ]
    micros = [(s - epoch) // dt.timedelta(microseconds=1) for s in stamps]
    assert bucket_hash(pa.array(stamps, pa.timestamp("us"))).to_pylist() == [
        long(m) for m in micros
    ]
    assert bucket_hash(pa.array(texts)).to_pylist() == [murmur3_32(t.encode()) for t in texts]
