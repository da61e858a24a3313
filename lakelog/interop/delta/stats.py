"""lakelog's file statistics as Delta's ``stats`` JSON.

lakelog keeps per top-level column ``min``/``max``/``null_count`` with dates and
timestamps as their integer physical value and decimals as strings
(``docs/format.md``, "Statistics"); Delta wants ``numRecords``, ``minValues``,
``maxValues`` and ``nullCount`` with dates as ``YYYY-MM-DD``, timestamps as ISO-8601
strings in milliseconds and decimals as JSON numbers. A converted bound is never
tighter than the original: timestamp minimums round down and maximums up to the
millisecond. A bound that cannot be converted is left out (unknown to the reader),
and so are the statistics of partition columns, which are not in the files. A file
with a deletion vector gets ``tightBounds: false`` (its statistics are of the physical
rows).
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
import pyarrow as pa

from ...log import mapping
from ...log.actions import FileStats

__all__ = ["StatsConverter"]

_ENCODER = msgspec.json.Encoder(decimal_format="number")
_STATS_DECODER = msgspec.json.Decoder(FileStats)
_EPOCH = dt.datetime(1970, 1, 1)
_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}

Convert = Callable[[Any, bool], Any]
"""(lakelog bound, is_max) -> Delta bound, or None to leave it out."""


def _same(value: Any, is_max: bool) -> Any:
    return value if isinstance(value, (bool, int, float, str)) else None


def _number(value: Any, is_max: bool) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _date(value: Any, is_max: bool) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    try:
        return (dt.date(1970, 1, 1) + dt.timedelta(days=value)).isoformat()
    except OverflowError:
        return None


def _timestamp(unit: str, utc: bool) -> Convert:
    per = _MICROS[unit]

    def convert(value: Any, is_max: bool) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        micros = value * per
        millis = -(-micros // 1000) if is_max else micros // 1000
        try:
            when = _EPOCH + dt.timedelta(milliseconds=millis)
        except OverflowError:
            return None
        text = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}"
        return text + "Z" if utc else text

    return convert


def _decimal(value: Any, is_max: bool) -> Any:
    if not isinstance(value, str):
        return None
    try:
        d = decimal.Decimal(value)
    except decimal.InvalidOperation:
        return None
    return d if d.is_finite() else None


def _converter(t: pa.DataType) -> Convert | None:
    if pa.types.is_boolean(t) or pa.types.is_string(t) or pa.types.is_large_string(t):
        return _same
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return _number
    if pa.types.is_date32(t):
        return _date
    if pa.types.is_timestamp(t) and t.unit in _MICROS:
        return _timestamp(t.unit, t.tz is not None)
    if pa.types.is_decimal(t):
        return _decimal
    return None


class StatsConverter:
    """Converts the statistics of one table schema (built once per schema)."""

    def __init__(self, schema: pa.Schema, partition_by: Sequence[str]) -> None:
        skip = set(partition_by)
        # the log keys statistics by physical name, and so does Delta's column mapping
        self._columns: dict[str, Convert | None] = {
            mapping.physical_name(f): _converter(f.type) for f in schema if f.name not in skip
        }

    def delta_stats(self, num_rows: int, stats: FileStats | None, *, tight: bool = True) -> str:
        """Delta's ``stats`` JSON for a file of ``num_rows`` physical rows.

        ``tight=False`` (a file with a deletion vector): ``tightBounds: false``, since
        the bounds and null counts are those of the physical rows. ``numRecords`` stays
        the physical count, as Delta requires of a file with a deletion vector; wide
        bounds still bound the live rows, and a null count of 0 or of ``numRecords``
        still says none or all of them are null, which is all Delta reads from it then."""
        out: dict[str, Any] = {"numRecords": num_rows}
        if not tight:
            out["tightBounds"] = False
        if stats is not None:
            out["minValues"] = self._bounds(stats.min, is_max=False)
            out["maxValues"] = self._bounds(stats.max, is_max=True)
            out["nullCount"] = {
                k: v
                for k, v in stats.null_count.items()
                if k in self._columns and isinstance(v, int) and not isinstance(v, bool)
            }
        return _ENCODER.encode(out).decode()

    def delta_stats_json(
        self, num_rows: int, stats_json: str | bytes | None, *, tight: bool = True
    ) -> str:
        """:meth:`delta_stats` of a file whose lakelog stats are JSON (a file table row)."""
        decoded = _STATS_DECODER.decode(stats_json) if stats_json else None
        return self.delta_stats(num_rows, decoded, tight=tight)

    def _bounds(self, values: Mapping[str, Any], *, is_max: bool) -> dict[str, Any]:
        out = {}
        for name, value in values.items():
            convert = self._columns.get(name)
            if convert is None:
                continue
            got = convert(value, is_max)
            if got is not None:
                out[name] = got
        return out
