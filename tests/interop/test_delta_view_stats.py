"""Converting lakelog's statistics to Delta's never makes a bound tighter (Hypothesis)."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.interop.delta.stats import StatsConverter
from lakelog.interop.delta.types import delta_protocol, delta_schema_string
from lakelog.log.actions import FileStats
from lakelog.stats import stats_from_metadata

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
UNITS = {"s": 1_000_000, "ms": 1_000, "us": 1}


def _micros(text: str) -> int:
    when = dt.datetime.fromisoformat(text.removesuffix("Z"))
    return (when.replace(tzinfo=dt.timezone.utc) - EPOCH) // dt.timedelta(microseconds=1)


@settings(max_examples=200, deadline=None)
@given(
    unit=st.sampled_from(sorted(UNITS)),
    tz=st.sampled_from([None, "UTC", "Asia/Kolkata"]),
    values=st.lists(st.integers(min_value=-(10**12), max_value=10**12), min_size=1, max_size=20),
)
def test_timestamp_bounds_contain_every_value(unit: str, tz: str | None, values: list[int]) -> None:
    t = pa.timestamp(unit, tz)
    scaled = [v // UNITS[unit] for v in values]  # within year 1..9999 in every unit
    table = pa.table({"ts": pa.array(scaled, pa.int64()).cast(t)})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    stats = stats_from_metadata(
        pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata, table.schema
    )
    got = json.loads(StatsConverter(table.schema, ()).delta_stats(len(values), stats))
    lo, hi = _micros(got["minValues"]["ts"]), _micros(got["maxValues"]["ts"])
    micros = [v * UNITS[unit] for v in scaled]
    assert lo <= min(micros) and hi >= max(micros)
    assert min(micros) - lo < 1000 and hi - max(micros) < 1000  # within a millisecond
    assert got["minValues"]["ts"].endswith("Z") == (tz is not None)
    assert got["nullCount"] == {"ts": 0}


@settings(max_examples=100, deadline=None)
@given(
    days=st.lists(st.integers(min_value=-700_000, max_value=2_900_000), min_size=1),
    decimals=st.lists(
        st.decimals(min_value=-(10**6), max_value=10**6, places=3, allow_nan=False),
        min_size=1,
    ),
)
def test_dates_and_decimals_convert_exactly(
    days: list[int], decimals: list[decimal.Decimal]
) -> None:
    schema = pa.schema([("d", pa.date32()), ("m", pa.decimal128(12, 3)), ("p", pa.string())])
    conv = StatsConverter(schema, ("p",))
    stats = FileStats(
        min={"d": min(days), "m": str(min(decimals)), "p": "x"},
        max={"d": max(days), "m": str(max(decimals)), "p": "x"},
        null_count={"d": 0, "m": 1, "p": 0},
    )
    got = json.loads(conv.delta_stats(3, stats), parse_float=decimal.Decimal)
    epoch = dt.date(1970, 1, 1)
    assert got["minValues"]["d"] == (epoch + dt.timedelta(days=min(days))).isoformat()
    assert got["maxValues"]["d"] == (epoch + dt.timedelta(days=max(days))).isoformat()
    assert decimal.Decimal(str(got["minValues"]["m"])) == min(decimals)
    assert decimal.Decimal(str(got["maxValues"]["m"])) == max(decimals)
    assert "p" not in got["minValues"] and got["nullCount"] == {"d": 0, "m": 1}


def test_schema_and_protocol() -> None:
    schema = pa.schema(
        [
            pa.field("a", pa.int16(), nullable=False),
            ("l", pa.large_list(pa.string())),
            ("m", pa.map_(pa.string(), pa.float32())),
            ("s", pa.struct([("x", pa.timestamp("ms", "UTC")), ("y", pa.binary())])),
        ]
    )
    fields = json.loads(delta_schema_string(schema))["fields"]
    assert fields[0] == {"name": "a", "type": "short", "nullable": False, "metadata": {}}
    assert fields[1]["type"] == {"type": "array", "elementType": "string", "containsNull": True}
    assert fields[2]["type"]["valueType"] == "float"
    assert [f["type"] for f in fields[3]["type"]["fields"]] == ["timestamp", "binary"]
    assert delta_protocol(schema) == {
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "writerFeatures": ["lakelogView"],
    }
    ntz = pa.schema([("s", pa.struct([("t", pa.timestamp("us"))]))])
    assert delta_protocol(ntz)["readerFeatures"] == ["timestampNtz"]
