"""Arrow <-> Spark types, and the checks that keep Spark's files equal to the table schema.

Spark reads every Parquet column as nullable, so tables created from a
DataFrame have nullable columns, and nullability is never compared.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from ..errors import SchemaMismatchError
from ..io.guards import GENERATION_KEY, IDENTITY_START

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "check_dataframe_schema",
    "check_file_schema",
    "check_spark_readable",
    "output_timestamp_type",
    "strip_nullability",
    "to_arrow_schema",
    "to_arrow_type",
    "to_spark_schema",
    "to_spark_type",
]

_SPARK_TIMESTAMP_UNITS = {"ms": "TIMESTAMP_MILLIS", "us": "TIMESTAMP_MICROS"}


def to_spark_type(t: pa.DataType) -> DataType:
    """The Spark type Spark's Parquet reader gives a column of Arrow type ``t``."""
    from pyspark.sql import types as T

    if pa.types.is_dictionary(t):
        return to_spark_type(t.value_type)
    if pa.types.is_boolean(t):
        return T.BooleanType()
    simple: dict[pa.DataType, DataType] = {
        pa.int8(): T.ByteType(),
        pa.int16(): T.ShortType(),
        pa.int32(): T.IntegerType(),
        pa.int64(): T.LongType(),
        # Spark reads Parquet's unsigned annotations into the next wider signed type
        pa.uint8(): T.ShortType(),
        pa.uint16(): T.IntegerType(),
        pa.uint32(): T.LongType(),
        pa.uint64(): T.DecimalType(20, 0),
        pa.float32(): T.FloatType(),
        pa.float64(): T.DoubleType(),
        pa.date32(): T.DateType(),
        pa.date64(): T.DateType(),
    }
    if t in simple:
        return simple[t]
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return T.StringType()
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return T.BinaryType()
    if pa.types.is_timestamp(t):
        return T.TimestampType() if t.tz is not None else T.TimestampNTZType()
    if pa.types.is_decimal(t) and t.precision <= 38:
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return T.ArrayType(to_spark_type(t.value_type), True)
    if pa.types.is_map(t):
        return T.MapType(to_spark_type(t.key_type), to_spark_type(t.item_type), True)
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(f.name, to_spark_type(f.type), True) for f in t])
    raise SchemaMismatchError(
        f"expected a column type Spark can read (integers, floats, booleans, strings, "
        f"binary, dates, timestamps, decimals up to 38 digits, lists, maps, structs), "
        f"found {t}; cast the column before writing the table if Spark must read it."
    )


def to_spark_schema(schema: pa.Schema) -> StructType:
    """Spark schema (all nullable) of an Arrow schema, in the same column order."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, to_spark_type(f.type), True) for f in schema])


def to_arrow_type(dt: DataType) -> pa.DataType:
    """The Arrow type pyarrow reads back from a Spark-written column of type ``dt``."""
    from pyspark.sql import types as T

    simple: list[tuple[type[DataType], pa.DataType]] = [
        (T.BooleanType, pa.bool_()),
        (T.ByteType, pa.int8()),
        (T.ShortType, pa.int16()),
        (T.IntegerType, pa.int32()),
        (T.LongType, pa.int64()),
        (T.FloatType, pa.float32()),
        (T.DoubleType, pa.float64()),
        (T.BinaryType, pa.binary()),
        (T.DateType, pa.date32()),
        (T.TimestampType, pa.timestamp("us", tz="UTC")),
        (T.TimestampNTZType, pa.timestamp("us")),
    ]
    for cls, arrow in simple:
        if type(dt) is cls:
            return arrow
    if isinstance(dt, T.StringType) and not isinstance(dt, (T.CharType, T.VarcharType)):
        return pa.string()
    if isinstance(dt, T.DecimalType):
        return pa.decimal128(dt.precision, dt.scale)
    if isinstance(dt, T.ArrayType):
        return pa.list_(pa.field("element", to_arrow_type(dt.elementType)))
    if isinstance(dt, T.MapType):
        return pa.map_(to_arrow_type(dt.keyType), to_arrow_type(dt.valueType))
    if isinstance(dt, T.StructType):
        return pa.struct([pa.field(f.name, to_arrow_type(f.dataType)) for f in dt.fields])
    raise SchemaMismatchError(
        f"expected a Spark type lakelog can store (boolean, integral, float, double, "
        f"string, binary, date, timestamp, timestamp_ntz, decimal, array, map, struct), "
        f"found {dt.simpleString()}; cast the column first."
    )


def to_arrow_schema(schema: StructType) -> pa.Schema:
    """Arrow schema (all nullable) for a table created from a DataFrame schema."""
    return pa.schema([pa.field(f.name, to_arrow_type(f.dataType)) for f in schema.fields])


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def _timestamp_units(t: pa.DataType) -> Iterator[str]:
    if pa.types.is_timestamp(t):
        yield t.unit
    elif pa.types.is_dictionary(t) or _is_list(t):
        yield from _timestamp_units(t.value_type)
    elif pa.types.is_map(t):
        yield from _timestamp_units(t.key_type)
        yield from _timestamp_units(t.item_type)
    elif pa.types.is_struct(t):
        for f in t:
            yield from _timestamp_units(f.type)


def check_spark_readable(schema: pa.Schema, columns: list[str]) -> None:
    """Raise if Spark's Parquet reader cannot read one of ``columns`` of the files.

    Spark refuses Parquet ``TIMESTAMP(NANOS)``, which pyarrow writes for
    ``timestamp[ns]`` columns.
    """
    for name in columns:
        if name not in schema.names:
            continue
        t = schema.field(name).type
        to_spark_type(t)
        if "ns" in set(_timestamp_units(t)):
            raise SchemaMismatchError(
                f"expected timestamp columns in ms or us for Spark, found column {name!r} "
                f"of type {t}: Spark cannot read Parquet TIMESTAMP(NANOS). Select other "
                f"columns (columns=...), or rewrite the table with microsecond timestamps."
            )


def output_timestamp_type(file_schema: pa.Schema) -> str | None:
    """``spark.sql.parquet.outputTimestampType`` that makes Spark's files match the table.

    None when the table has no timestamp column.
    """
    units = {u for f in file_schema for u in _timestamp_units(f.type)}
    if not units:
        return None
    if len(units) == 1 and next(iter(units)) in _SPARK_TIMESTAMP_UNITS:
        return _SPARK_TIMESTAMP_UNITS[next(iter(units))]
    raise SchemaMismatchError(
        f"expected every timestamp column of the table in one unit, ms or us, for Spark to "
        f"write it, found units {sorted(units)}; write this table from Arrow, or rewrite "
        f"it with microsecond timestamps."
    )


def _spark_writable(t: pa.DataType) -> str | None:
    """Why Spark cannot write a column of table type ``t`` exactly (None if it can)."""
    if pa.types.is_dictionary(t):
        return _spark_writable(t.value_type)
    if pa.types.is_unsigned_integer(t) or pa.types.is_fixed_size_binary(t):
        return f"Spark has no {t} type"
    if pa.types.is_float16(t) or pa.types.is_time(t) or pa.types.is_null(t):
        return f"Spark has no {t} type"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _spark_writable(t.value_type)
    if pa.types.is_map(t):
        return _spark_writable(t.key_type) or _spark_writable(t.item_type)
    if pa.types.is_struct(t):
        for f in t:
            why = _spark_writable(f.type)
            if why:
                return why
    return None


def strip_nullability(dt: DataType) -> DataType:
    """``dt`` with every nullability flag set to True (Spark compares them otherwise)."""
    from pyspark.sql import types as T

    if isinstance(dt, T.ArrayType):
        return T.ArrayType(strip_nullability(dt.elementType), True)
    if isinstance(dt, T.MapType):
        return T.MapType(strip_nullability(dt.keyType), strip_nullability(dt.valueType), True)
    if isinstance(dt, T.StructType):
        return T.StructType(
            [T.StructField(f.name, strip_nullability(f.dataType), True) for f in dt.fields]
        )
    return dt


def check_dataframe_schema(df_schema: StructType, table_schema: pa.Schema) -> None:
    """Raise :class:`SchemaMismatchError` unless a DataFrame can be written to the table.

    Names must match exactly (case included; order may differ) and each Spark
    type must be the one Spark reads back for the table's column.
    """
    problems: list[str] = []
    found = {f.name: f.dataType for f in df_schema.fields}
    if len(found) != len(df_schema.fields):
        problems.append(f"duplicate column names in the DataFrame: {df_schema.fieldNames()}")
    for field in table_schema:
        why = _spark_writable(field.type)
        if why:
            problems.append(f"column {field.name!r} ({field.type}): {why}")
            continue
        got = found.get(field.name)
        if got is None:
            computed = (GENERATION_KEY, IDENTITY_START)  # computed, or numbered
            if not (field.metadata and any(k in field.metadata for k in computed)):
                problems.append(f"missing column {field.name!r} ({field.type})")
            continue
        want = to_spark_type(field.type)
        if strip_nullability(got) != strip_nullability(want):
            problems.append(
                f"column {field.name!r}: expected {want.simpleString()}, found {got.simpleString()}"
            )
    extra = [n for n in found if n not in table_schema.names]
    if extra:
        problems.append(f"unexpected columns {extra}")
    if problems:
        described = ", ".join(f"{f.name}: {f.type}" for f in table_schema)
        raise SchemaMismatchError(
            "expected a DataFrame matching the table schema, found: "
            + "; ".join(problems)
            + f". Table schema: {described}. Cast or select the columns to match "
            "(df.select(...), col.cast(...)) before writing."
        )
    output_timestamp_type(pa.schema([f for f in table_schema]))


def _compatible(got: pa.DataType, want: pa.DataType) -> bool:
    if got == want:
        return True
    if pa.types.is_dictionary(want):
        return _compatible(got, want.value_type)
    strings = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    if any(f(got) for f in strings) and any(f(want) for f in strings):
        return True
    binaries = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view)
    if any(f(got) for f in binaries) and any(f(want) for f in binaries):
        return True
    if pa.types.is_timestamp(got) and pa.types.is_timestamp(want):
        return bool(got.unit == want.unit and (got.tz is None) == (want.tz is None))
    if pa.types.is_date(got) and pa.types.is_date(want):
        return True
    if pa.types.is_decimal(got) and pa.types.is_decimal(want):
        return bool(got.precision == want.precision and got.scale == want.scale)
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    if any(f(got) for f in lists) and any(f(want) for f in lists):
        return _compatible(got.value_type, want.value_type)
    if pa.types.is_map(got) and pa.types.is_map(want):
        return _compatible(got.key_type, want.key_type) and _compatible(
            got.item_type, want.item_type
        )
    if pa.types.is_struct(got) and pa.types.is_struct(want):
        return [f.name for f in got] == [f.name for f in want] and all(
            _compatible(a.type, b.type) for a, b in zip(got, want, strict=True)
        )
    return False


def check_file_schema(path: str, file_arrow_schema: pa.Schema, file_schema: pa.Schema) -> None:
    """Raise unless a data file Spark wrote holds exactly the table's file columns."""
    problems: list[str] = []
    for field in file_schema:
        if field.name not in file_arrow_schema.names:
            problems.append(f"missing column {field.name!r}")
            continue
        got = file_arrow_schema.field(field.name).type
        if not _compatible(got, field.type):
            problems.append(f"column {field.name!r}: expected {field.type}, found {got}")
    extra = [n for n in file_arrow_schema.names if n not in file_schema.names]
    if extra:
        problems.append(f"unexpected columns {extra}")
    if problems:
        raise SchemaMismatchError(
            f"expected Spark's data file {path} to match the table's file schema, found: "
            + "; ".join(problems)
            + ". Nothing was committed; check the Spark Parquet settings "
            "(spark.sql.parquet.outputTimestampType, writeLegacyFormat) of this session."
        )
