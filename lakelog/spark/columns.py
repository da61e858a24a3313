"""Column ids and physical names in Spark plans (format version 7).

With column mapping on (``docs/format.md``, "Column ids, renames and nested fields"),
data files store every column under its *physical* name, which a rename does not
change and which a column added back after a drop gets fresh; nested struct fields
too. Spark's Parquet reader and writer know nothing of that, so every Spark path of
lakelog goes through the helpers here:

* :func:`spark_physical_schema`: the Spark schema to read files with (physical names,
  top-level and nested), so no column of a renamed table reads as nulls;
* :func:`logical_columns`: the columns of such a read under the table's names
  (``col(physical).cast(logical type).alias(name)``; Spark casts a struct by position,
  which relabels its nested fields);
* :func:`physical_columns`: a DataFrame of the table's columns relabelled for writing:
  physical names, and each field's id as the ``parquet.field.id`` metadata Spark writes
  as the Parquet ``field_id`` (``spark.sql.parquet.fieldId.write.enabled``, on by
  default), nested fields too.

Partition columns keep their names: files do not hold them, their folders are named
by them, and they cannot be renamed. On a table without column mapping every helper
gives exactly the plain columns (no cast, no alias), so its plans do not change.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from ..log import mapping
from .schema import strip_nullability, to_spark_schema, to_spark_type

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "FIELD_ID",
    "conformed",
    "logical_columns",
    "physical_columns",
    "spark_physical_schema",
]

FIELD_ID = "parquet.field.id"
"""The StructField metadata key Spark's Parquet writer writes as the field's ``field_id``."""


def _col(name: str) -> Column:
    """A column by exact name (backquoted: a dot in a name is not a struct field)."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def _physical_fields(schema: pa.Schema, keep: Collection[str]) -> list[pa.Field]:
    """The fields of ``schema`` as files store them (:func:`mapping.physical_schema`), in
    order; the fields named in ``keep`` under their own name, as they are."""
    physical = mapping.physical_schema(schema)
    return [f if f.name in keep else physical.field(i) for i, f in enumerate(schema)]


def spark_physical_schema(schema: pa.Schema, *, keep: Collection[str] = ()) -> StructType:
    """The Spark schema to read the files of a table of ``schema`` with: every field
    (nested ones too) under its physical name; the columns in ``keep`` (partition
    columns) under their own. No field ids: a read matches columns by name (files
    written before the mapping have no ids). ``to_spark_schema(schema)`` when unmapped."""
    if not mapping.is_mapped(schema):
        return to_spark_schema(schema)
    return to_spark_schema(pa.schema(_physical_fields(schema, keep)))


def _needs_relabel(schema: pa.Schema) -> bool:
    return mapping.is_mapped(schema) and mapping.relabelled(schema)


def logical_columns(
    schema: pa.Schema, names: Sequence[str] | None = None, *, keep: Collection[str] = ()
) -> list[Column]:
    """Columns of a DataFrame read with :func:`spark_physical_schema` (same ``keep``)
    under the table's names: ``names`` (default every column of ``schema``), each
    ``col(physical)``, cast to its logical Spark type where a nested field's physical
    name differs (a struct casts by position), aliased to its name where either
    differs; the plain column otherwise."""
    wanted = list(schema.names if names is None else names)
    if not _needs_relabel(schema):
        return [_col(n) for n in wanted]
    physical = _physical_fields(schema, keep)
    out = []
    for name in wanted:
        i = schema.get_field_index(name)
        field, stored = schema.field(i), physical[i]
        column = _col(stored.name)
        logical_type = to_spark_type(field.type)
        cast = to_spark_type(stored.type) != logical_type
        if cast:
            column = column.cast(logical_type)
        if cast or stored.name != name:
            column = column.alias(name)
        out.append(column)
    return out


def _with_ids(dt: DataType, t: pa.DataType) -> DataType:
    """Spark type ``dt`` (of the physical Arrow type ``t``) with each struct field's
    ``PARQUET:field_id`` as its :data:`FIELD_ID` metadata, at every depth."""
    from pyspark.sql import types as T

    if pa.types.is_dictionary(t):
        return _with_ids(dt, t.value_type)
    if isinstance(dt, T.StructType) and pa.types.is_struct(t):
        return T.StructType(
            [
                T.StructField(sf.name, _with_ids(sf.dataType, af.type), sf.nullable, _meta(af))
                for sf, af in zip(dt.fields, t, strict=True)
            ]
        )
    if isinstance(dt, T.ArrayType) and (
        pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
    ):
        return T.ArrayType(_with_ids(dt.elementType, t.value_type), dt.containsNull)
    if isinstance(dt, T.MapType) and pa.types.is_map(t):
        return T.MapType(
            _with_ids(dt.keyType, t.key_type),
            _with_ids(dt.valueType, t.item_type),
            dt.valueContainsNull,
        )
    return dt


def _meta(field: pa.Field) -> dict[str, int]:
    raw = (field.metadata or {}).get(mapping.FIELD_ID_KEY)
    return {FIELD_ID: int(raw)} if raw else {}


def physical_columns(
    schema: pa.Schema, names: Sequence[str] | None = None, *, keep: Collection[str] = ()
) -> list[Column]:
    """Columns that write ``names`` (default every column) of a DataFrame of the
    table's (logical) ``schema`` as its files store them: each aliased to its physical
    name with its id as :data:`FIELD_ID` metadata, and cast (by position: the frame's
    fields are in the table's order, as the write checks) to the physical type whose
    nested struct fields carry their physical names and ids. The columns in ``keep``
    (partition columns, which Spark writes as folder names) stay as they are. The
    plain columns when ``schema`` is unmapped."""
    wanted = list(schema.names if names is None else names)
    if not mapping.is_mapped(schema):
        return [_col(n) for n in wanted]
    physical = _physical_fields(schema, keep)
    out = []
    for name in wanted:
        i = schema.get_field_index(name)
        field, stored = schema.field(i), physical[i]
        column = _col(name)
        if name in keep:
            out.append(column)
            continue
        logical_type = to_spark_type(field.type)
        stored_type = _with_ids(to_spark_type(stored.type), stored.type)
        if stored_type != logical_type:  # nested names or ids: Spark keeps the cast's type
            column = column.cast(stored_type)
        out.append(column.alias(stored.name, metadata=_meta(stored)))
    return out


def conformed(column: Column, given: DataType, want: DataType) -> Column:
    """``column``, of Spark type ``given``, as type ``want``: struct fields matched by
    name (Spark's cast matches them by position, which would put one field's values in
    another), a field ``given`` lacks as null, at every depth (list elements, map keys
    and values); other types cast. ``column`` itself when the types are the same."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if strip_nullability(given) == strip_nullability(want):
        return column
    if isinstance(given, T.StructType) and isinstance(want, T.StructType):
        have = {f.name: f.dataType for f in given.fields}
        fields = [
            (
                conformed(column.getField(f.name), have[f.name], f.dataType)
                if f.name in have
                else F.lit(None).cast(f.dataType)
            ).alias(f.name)
            for f in want.fields
        ]
        return F.when(column.isNull(), F.lit(None).cast(want)).otherwise(F.struct(*fields))
    if isinstance(given, T.ArrayType) and isinstance(want, T.ArrayType):
        return F.transform(column, lambda e: conformed(e, given.elementType, want.elementType))
    if isinstance(given, T.MapType) and isinstance(want, T.MapType):
        keyed = column
        if strip_nullability(given.keyType) != strip_nullability(want.keyType):
            keyed = F.transform_keys(column, lambda k, _: conformed(k, given.keyType, want.keyType))
        return F.transform_values(keyed, lambda _, v: conformed(v, given.valueType, want.valueType))
    return column.cast(want)
