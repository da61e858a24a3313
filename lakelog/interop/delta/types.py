"""Arrow schemas as Delta schemas, and the protocol a view of them needs.

The view writes no column mapping and no deletion vectors, so a column must keep its
name and hold in a Delta type what lakelog's files hold. What Delta cannot say is
refused (:class:`~lakelog.errors.DeltaViewError`) when the view is enabled, never
approximated: unsigned integers, ``float16``, nanosecond timestamps (Delta holds
microseconds), times, durations, fixed-size binaries, dictionaries, ``date64``,
``decimal256`` and column names with characters Delta keeps out of Parquet schemas.

The protocol is the lowest that states what the view is: reader version 1 (3 with
the ``timestampNtz`` reader feature when a column is a timestamp without time zone),
writer version 7 with the writer feature ``lakelogView``, which no other Delta writer
knows, so conforming writers refuse to write to the view (readers ignore writer
features), and ``changeDataFeed`` while the view carries the change data feed.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from ...errors import DeltaViewError

__all__ = [
    "CDF_FEATURE",
    "VIEW_FEATURE",
    "check_schema",
    "delta_protocol",
    "delta_schema_string",
    "delta_type",
]

VIEW_FEATURE = "lakelogView"
"""The writer feature that marks a table as lakelog's read-only view."""
CDF_FEATURE = "changeDataFeed"
"""Delta's writer feature of the change data feed (``cdc`` actions)."""
_BAD_NAME_CHARS = " ,;{}()\n\t="
_INTS = {8: "byte", 16: "short", 32: "integer", 64: "long"}


class _Refused(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def delta_type(t: pa.DataType) -> Any:
    """The Delta type (a string, or a dict for nested types) of an Arrow type;
    :class:`_Refused` with the reason when Delta cannot hold it."""
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_signed_integer(t):
        return _INTS[t.bit_width]
    if pa.types.is_unsigned_integer(t):
        raise _Refused(f"{t} (Delta has no unsigned integers)")
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_timestamp(t):
        if t.unit == "ns":
            raise _Refused(f"{t} (Delta timestamps hold microseconds; nanoseconds would be cut)")
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(t):
        if t.precision > 38 or t.scale < 0:
            raise _Refused(f"{t} (Delta decimals have a precision <= 38 and a scale >= 0)")
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = t.value_field
        return {
            "type": "array",
            "elementType": delta_type(item.type),
            "containsNull": item.nullable,
        }
    if pa.types.is_map(t):
        return {
            "type": "map",
            "keyType": delta_type(t.key_type),
            "valueType": delta_type(t.item_type),
            "valueContainsNull": t.item_field.nullable,
        }
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [_field(t.field(i)) for i in range(t.num_fields)]}
    raise _Refused(f"{t} (no Delta type holds it)")


def _field(f: pa.Field) -> dict[str, Any]:
    bad = sorted({c for c in f.name if c in _BAD_NAME_CHARS})
    if bad or not f.name:
        raise _Refused(
            f"a name with {''.join(bad)!r} (Delta tables without column mapping keep "
            f"{_BAD_NAME_CHARS!r} out of column names)"
        )
    return {"name": f.name, "type": delta_type(f.type), "nullable": f.nullable, "metadata": {}}


def _problems(schema: pa.Schema) -> list[str]:
    out = []
    seen: dict[str, str] = {}
    for f in schema:
        try:
            _field(f)
        except _Refused as e:
            out.append(f"{f.name!r}: {e.why}")
        other = seen.setdefault(f.name.lower(), f.name)
        if other != f.name:
            out.append(f"{f.name!r} and {other!r} (Delta column names ignore case)")
    return out


def check_schema(schema: pa.Schema, *, what: str = "enable the Delta view") -> None:
    """Raise :class:`DeltaViewError` listing every column the view cannot express."""
    problems = _problems(schema)
    if problems:
        raise DeltaViewError(
            f"expected every column to have a Delta type to {what}, found "
            f"{'; '.join(problems)}. Keep the Delta view off for this table, or write the "
            f"data into a new table with supported types (e.g. timestamp('us') for "
            f"timestamp('ns'), int64 for unsigned integers, string for dictionaries)."
        )


def delta_schema_string(schema: pa.Schema) -> str:
    """The ``schemaString`` of a Delta ``metaData`` action (partition columns included,
    in the table's column order)."""
    try:
        fields = [_field(f) for f in schema]
    except _Refused:
        check_schema(schema)
        raise
    return json.dumps({"type": "struct", "fields": fields}, separators=(",", ":"))


def _has_ntz(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return t.tz is None
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_ntz(t.value_type)
    if pa.types.is_map(t):
        return _has_ntz(t.key_type) or _has_ntz(t.item_type)
    if pa.types.is_struct(t):
        return any(_has_ntz(t.field(i).type) for i in range(t.num_fields))
    return False


def delta_protocol(schema: pa.Schema, *, change_data_feed: bool = False) -> dict[str, Any]:
    """The lowest protocol that reads ``schema`` and keeps other writers out.

    ``change_data_feed``: the view carries ``delta.enableChangeDataFeed`` (and ``cdc``
    actions); Delta ties that flag to the writer feature ``changeDataFeed`` on a table
    with writer features, the table-features form of legacy writer version 4."""
    writer = [VIEW_FEATURE]
    if change_data_feed:
        writer.insert(0, CDF_FEATURE)
    if any(_has_ntz(f.type) for f in schema):
        return {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["timestampNtz"],
            "writerFeatures": ["timestampNtz", *writer],
        }
    return {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": writer}
