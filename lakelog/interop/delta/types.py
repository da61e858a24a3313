"""Arrow schemas as Delta schemas, and the protocol a view of them needs.

The view writes no column mapping, so a column must keep its
name and hold in a Delta type what lakelog's files hold. What Delta cannot say is
refused (:class:`~lakelog.errors.DeltaViewError`) when the view is enabled, never
approximated: unsigned integers, ``float16``, nanosecond timestamps (Delta holds
microseconds), times, durations, fixed-size binaries, dictionaries, ``date64``,
``decimal256`` and column names with characters Delta keeps out of Parquet schemas.

The protocol is the lowest that states what the view is: reader version 1 (3 with
the ``timestampNtz`` reader feature when a column is a timestamp without time zone),
writer version 7 with the writer feature ``lakelogView``, which no other Delta writer
knows, so conforming writers refuse to write to the view (readers ignore writer
features), and ``changeDataFeed`` while the view carries the change data feed. A view
whose files may carry deletion vectors needs reader version 3 with the feature
``deletionVectors`` (:mod:`.vectors`).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from ...errors import DeltaViewError
from ...io.guards import GENERATION_KEY, guards_of, identity_of
from ...log import mapping

__all__ = [
    "CDF_FEATURE",
    "DV_FEATURE",
    "VIEW_FEATURE",
    "check_schema",
    "delta_protocol",
    "delta_schema_string",
    "view_schema",
    "delta_type",
]

VIEW_FEATURE = "lakelogView"
"""The writer feature that marks a table as lakelog's read-only view."""
CDF_FEATURE = "changeDataFeed"
"""Delta's writer feature of the change data feed (``cdc`` actions)."""
DV_FEATURE = "deletionVectors"
"""Delta's reader and writer feature of deletion vectors."""
COLUMN_MAPPING_FEATURE = "columnMapping"
"""Delta's reader and writer feature for column mapping (``name`` mode here)."""
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
    cid = mapping.column_id(f)
    bad = sorted({c for c in f.name if c in _BAD_NAME_CHARS})
    if (bad and cid is None) or not f.name:
        raise _Refused(
            f"a name with {''.join(bad)!r} (Delta tables without column mapping keep "
            f"{_BAD_NAME_CHARS!r} out of column names)"
        )
    meta: dict[str, Any] = {}
    if cid is not None:  # Delta column mapping, name mode (format.md, "Column ids")
        meta = {
            "delta.columnMapping.id": cid,
            "delta.columnMapping.physicalName": mapping.physical_name(f),
        }
    meta.update(_rule_metadata(f))
    return {"name": f.name, "type": delta_type(f.type), "nullable": f.nullable, "metadata": meta}


def _rule_metadata(f: pa.Field) -> dict[str, Any]:
    """Delta's own field metadata for a generated or identity column (format.md,
    "Constraints, generated and identity columns"): Delta readers and writers see them."""
    out: dict[str, Any] = {}
    text = (f.metadata or {}).get(GENERATION_KEY)
    if text is not None:
        out["delta.generationExpression"] = text.decode()
    ident = identity_of(f)
    if ident is not None:
        out["delta.identity.start"] = ident.start
        out["delta.identity.step"] = ident.step
        out["delta.identity.allowExplicitInsert"] = not ident.always
        if ident.mark is not None:
            out["delta.identity.highWaterMark"] = ident.mark
    return out


def rule_features(schema: pa.Schema) -> list[str]:
    """The Delta writer features the rules of ``schema`` need."""
    guards = guards_of(schema)
    out = []
    if guards.checks:
        out.append("checkConstraints")
    if guards.generated:
        out.append("generatedColumns")
    if guards.identity:
        out.append("identityColumns")
    return out


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


def view_schema(schema: pa.Schema) -> pa.Schema:
    """The schema the view declares: with Delta column mapping (``name`` mode) only when
    some column is stored under another name (renamed, or added back after a drop;
    format.md, "Column ids"). While names and physical names agree, the view is a plain
    Delta table, which more readers read (DuckDB's delta extension returns nulls for the
    partition columns of a column-mapped table, duckdb-delta issues 50 and 343)."""
    return schema if mapping.relabelled(schema) else mapping.strip(schema)


def delta_schema_string(schema: pa.Schema) -> str:
    """The ``schemaString`` of a Delta ``metaData`` action (partition columns included,
    in the table's column order)."""
    schema = view_schema(schema)
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


def delta_protocol(
    schema: pa.Schema, *, change_data_feed: bool = False, deletion_vectors: bool = False
) -> dict[str, Any]:
    """The lowest protocol that reads ``schema`` and keeps other writers out:
    ``columnMapping`` (reader and writer feature) when the view's schema has column ids.

    ``change_data_feed``: the view carries ``delta.enableChangeDataFeed`` (and ``cdc``
    actions); Delta ties that flag to the writer feature ``changeDataFeed`` on a table
    with writer features, the table-features form of legacy writer version 4.
    ``deletion_vectors``: files of the view may carry a ``deletionVector``, which needs
    reader version 3 with the reader (and writer) feature ``deletionVectors``."""
    writer = [*rule_features(schema), VIEW_FEATURE]
    if change_data_feed:
        writer.insert(0, CDF_FEATURE)
    reader = []
    if mapping.is_mapped(view_schema(schema)):
        reader.append(COLUMN_MAPPING_FEATURE)
    if deletion_vectors:
        reader.append(DV_FEATURE)
    if any(_has_ntz(f.type) for f in schema):
        reader.append("timestampNtz")
    if reader:
        return {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": reader,
            "writerFeatures": [*reader, *writer],
        }
    return {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": writer}
