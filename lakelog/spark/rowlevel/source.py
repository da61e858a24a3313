"""The merge source on the driver: one aggregate of its keys (counts, duplicates, bounds)
and one row per key."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ...errors import InvalidArgumentError
from ...io.guards import guards_of
from ..read import columns_of
from ..schema import check_dataframe_schema, to_spark_schema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


__all__ = [
    "MAX_PARTITION_VALUES",
    "ORDER",
    "SourceFacts",
    "keep_one_per_key",
    "prepared_source",
    "raise_duplicates",
    "source_columns",
    "source_facts",
]

MAX_PARTITION_VALUES = 1000
"""Distinct values of a partition key column the source aggregate returns at most (more:
its min/max prune instead)."""
ORDER = "__lakelog_order"
"""A column numbering the source's rows (``duplicates="last"`` / ``"first"``)."""
_COUNT = "__lakelog_count"


@dataclasses.dataclass
class SourceFacts:
    """The merge source's one aggregate: counts and the bounds of its keys."""

    given: int = 0
    kept: int = 0
    repeated: int = 0
    keyed: int = 0
    """rows (after dedupe) whose every key is set: only they can match"""
    low: dict[str, Any] = dataclasses.field(default_factory=dict)
    high: dict[str, Any] = dataclasses.field(default_factory=dict)
    values: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    """Distinct values of key columns that partition the table (when few enough)."""


def _valid(keys: Sequence[str]) -> Column:
    """Whether every key of a row is set (only such rows can match)."""
    from pyspark.sql import functions as F

    valid = F.lit(True)
    for k in keys:
        valid = valid & F.col(f"`{k}`").isNotNull()
    return valid


def keep_one_per_key(prepared: DataFrame, keys: tuple[str, ...], duplicates: str) -> DataFrame:
    """One row per key: the last or first in the DataFrame's order (``ORDER``); rows
    with a null key are all kept (they match nothing)."""
    from pyspark.sql import functions as F

    others = [c for c in prepared.columns if c not in keys and c != ORDER]
    pick = F.max_by if duplicates == "last" else F.min_by
    row = "__lakelog_row"
    kept = (
        prepared.filter(_valid(keys))
        .groupBy(*columns_of(keys))
        .agg(pick(F.struct(*columns_of([*others, ORDER])), F.col(ORDER)).alias(row))
        .select(*columns_of(keys), f"{row}.*")
    )
    return kept.unionByName(prepared.filter(~_valid(keys)))


def source_facts(
    prepared: DataFrame, keys: tuple[str, ...], parts: Sequence[str], schema: pa.Schema
) -> SourceFacts:
    """One aggregate over the source, grouped by key: rows, rows kept after dedupe,
    duplicated keys, and the bounds of the keys (nothing per key reaches the driver)."""
    from pyspark.sql import functions as F

    valid = _valid(keys)
    count = F.col(_COUNT)
    groups = prepared.groupBy(*columns_of(keys)).agg(F.count(F.lit(1)).alias(_COUNT))
    aggs = [
        F.sum(count).alias("given"),
        F.sum(F.when(valid, 1).otherwise(count)).alias("kept"),
        F.sum(F.when(valid & (count > 1), 1).otherwise(0)).alias("repeated"),
        F.sum(F.when(valid, 1).otherwise(0)).alias("keyed"),
    ]
    for i, k in enumerate(keys):
        t = schema.field(k).type
        col = F.col(f"`{k}`")
        if pa.types.is_floating(t) or (pa.types.is_timestamp(t) and t.tz is None):
            continue  # NaN is no bound; a Spark aggregate of wall-clock times shifts them
        if pa.types.is_timestamp(t):
            col = F.unix_micros(col.cast("timestamp"))
        elif pa.types.is_date(t):
            col = F.unix_date(col)
        aggs += [F.min(col).alias(f"lo{i}"), F.max(col).alias(f"hi{i}")]
        if k in parts and not pa.types.is_temporal(t):
            distinct = F.array_sort(F.collect_set(F.col(f"`{k}`")))
            aggs.append(F.slice(distinct, 1, MAX_PARTITION_VALUES + 1).alias(f"set{i}"))
    row = groups.agg(*aggs).collect()[0].asDict()
    facts = SourceFacts(
        given=int(row["given"] or 0),
        kept=int(row["kept"] or 0),
        repeated=int(row["repeated"] or 0),
        keyed=int(row["keyed"] or 0),
    )
    for i, k in enumerate(keys):
        if f"lo{i}" in row:
            facts.low[k], facts.high[k] = row[f"lo{i}"], row[f"hi{i}"]
        found = row.get(f"set{i}")
        if found is not None and len(found) <= MAX_PARTITION_VALUES:
            facts.values[k] = list(found)
    return facts


def raise_duplicates(prepared: DataFrame, keys: tuple[str, ...], repeated: int) -> None:
    from pyspark.sql import functions as F

    first = (
        prepared.filter(_valid(keys))
        .groupBy(*columns_of(keys))
        .agg(F.count(F.lit(1)).alias(_COUNT))
        .filter(F.col(_COUNT) > 1)
        .select(*columns_of(keys))
        .limit(3)
        .collect()
    )
    shown = [r[0] if len(keys) == 1 else r.asDict() for r in first]
    raise InvalidArgumentError(
        f"expected one source row per key of on={list(keys)}, found {repeated} key(s) "
        f"more than once (e.g. {shown}); pass duplicates='last' or duplicates='first' "
        f"to keep one row per key, or deduplicate the source. Nothing was written."
    )


def source_columns(
    source: DataFrame, schema: pa.Schema, keys: tuple[str, ...], *, exact: bool
) -> tuple[pa.Schema, list[str], tuple[str, ...], pa.Schema]:
    """The merge source's columns, checked before Spark runs anything: those of the table
    (the table's types), the others (``source.<col>`` in clauses), the table's columns it
    lacks, and the columns clauses may read. ``exact`` (the string forms): the table's
    columns exactly."""
    from ..schema import to_arrow_schema

    if exact:  # identity columns the source lacks are numbered by the write
        idents = guards_of(schema).identity
        check_dataframe_schema(
            source.schema,
            pa.schema([f for f in schema if f.name in source.columns or f.name not in idents]),
        )
    lacking = [k for k in keys if k not in source.columns]
    if lacking:
        raise InvalidArgumentError(
            f"expected the merge source to hold the key columns {list(keys)}, found it "
            f"lacks {lacking} (its columns: {source.columns})"
        )
    own = pa.schema([f for f in schema if f.name in source.columns])
    check_dataframe_schema(source.select(*columns_of(own.names)).schema, own)
    others = [c for c in source.columns if c not in schema.names]
    missing = tuple(n for n in schema.names if n not in own.names)
    given = pa.schema(
        [*own, *to_arrow_schema(source.select(*columns_of(others)).schema)] if others else list(own)
    )
    return own, others, missing, given


def prepared_source(
    source: DataFrame,
    schema: pa.Schema,
    own: pa.Schema,
    others: Sequence[str],
    missing: Sequence[str],
    computed: Sequence[tuple[str, Column]],
) -> DataFrame:
    """The source as the tasks see it: the table's columns (typed nulls for those it
    lacks), its other columns, then the columns Spark computes for Column values."""
    from pyspark.sql import functions as F

    nulls = [
        F.lit(None).cast(to_spark_schema(pa.schema([schema.field(n)]))[0].dataType).alias(n)
        for n in missing
    ]
    return source.select(
        *columns_of(own.names),
        *nulls,
        *columns_of(others),
        *(c.alias(name) for name, c in computed),
    )
