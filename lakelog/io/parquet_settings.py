"""The ``lakelog.parquet.*`` table properties as :class:`~lakelog.io.writer.ParquetOptions`.

Every writer path (appends, ``write_table``, Spark writes, compaction, clustering)
takes its Parquet options from :func:`parquet_options`, so a property set once
applies to every file the table gets. :func:`check_parquet_properties` refuses, when
properties are set or a table is created, bloom filter columns the table does not
have or whose type lakelog cannot use: the check needs the schema, which the
property registry (:mod:`lakelog.properties`) does not know.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from ..errors import InvalidArgumentError
from ..properties import get_bool, get_float, get_int, get_str
from .writer import BLOOM_TYPES, ParquetOptions, bloom_type_ok

__all__ = ["bloom_filter_columns", "check_parquet_properties", "parquet_options"]

BLOOM_COLUMNS = "lakelog.parquet.bloom_filter_columns"


def bloom_filter_columns(props: Mapping[str, str]) -> tuple[str, ...]:
    """The column names of ``lakelog.parquet.bloom_filter_columns`` (comma-separated)."""
    text = get_str(props, BLOOM_COLUMNS)
    names = (n.strip() for n in text.split(","))
    return tuple(dict.fromkeys(n for n in names if n))


def parquet_options(
    props: Mapping[str, str], *, sorting_columns: Sequence[str] = ()
) -> ParquetOptions:
    """The Parquet options of new files of a table with these properties.

    ``sorting_columns``: the rows are ordered by these columns (a linear sort), so
    each row group is sorted by them and says so in its footer.
    """
    return ParquetOptions(
        page_index=get_bool(props, "lakelog.parquet.page_index"),
        data_page_size=get_int(props, "lakelog.parquet.data_page_size"),
        bloom_filter_columns=bloom_filter_columns(props),
        bloom_filter_fpp=get_float(props, "lakelog.parquet.bloom_filter_fpp"),
        bloom_filter_ndv=get_int(props, "lakelog.parquet.bloom_filter_ndv"),
        sorting_columns=tuple(sorting_columns),
    )


def check_parquet_properties(
    props: Mapping[str, str], schema: pa.Schema, partition_by: Sequence[str] = ()
) -> None:
    """Refuse bloom filter columns that are not data columns of ``schema`` of a type
    lakelog writes filters for (:class:`InvalidArgumentError`)."""
    if BLOOM_COLUMNS not in props:
        return
    for name in bloom_filter_columns(props):
        if name not in schema.names:
            raise InvalidArgumentError(
                f"expected {BLOOM_COLUMNS} to name columns of the table {schema.names}, "
                f"found {name!r}; list existing columns, comma-separated."
            )
        if name in partition_by:
            raise InvalidArgumentError(
                f"expected {BLOOM_COLUMNS} to name data columns, found partition column "
                f"{name!r}: its value is in the folder name, and partition pruning already "
                f"skips whole files by it; remove it from the list."
            )
        t = schema.field(name).type
        if not bloom_type_ok(t):
            raise InvalidArgumentError(
                f"expected {BLOOM_COLUMNS} to name columns of bloom-filterable types "
                f"({BLOOM_TYPES}), found {name!r} of type {t}; remove it from the list."
            )
