"""Partition filters: which partitions a DNF or Expression over partition columns selects.

Maintenance works on whole files, so its filters may only name partition
columns; anything else is refused before any work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InvalidArgumentError
from ..filters import PartitionFilterLike
from ..partitioning import typed_partition_value

__all__ = ["partition_matcher"]

_ROW_INDEX = "__lakelog_partition_index__"


def _typed_dnf(filter: Sequence[Any], schema: pa.Schema) -> list[Any]:
    """DNF tuples with string values cast to their column's type (dates, ints)."""

    def term(t: Any) -> Any:
        if not (isinstance(t, (tuple, list)) and len(t) == 3 and isinstance(t[0], str)):
            return t
        col, op, value = t
        if col not in schema.names:
            return tuple(t)
        typ = schema.field(col).type

        def cast(v: Any) -> Any:
            if isinstance(v, str) and not (
                pa.types.is_string(typ) or pa.types.is_large_string(typ)
            ):
                try:
                    return typed_partition_value(v, typ)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise InvalidArgumentError(
                        f"expected a {typ} value for partition column {col!r}, found {v!r}"
                    ) from e
            return v

        if isinstance(value, (list, tuple, set)):
            return (col, op, [cast(v) for v in value])
        return (col, op, cast(value))

    if (
        filter
        and isinstance(filter[0], (list,))
        and filter[0]
        and isinstance(filter[0][0], (list, tuple))
    ):
        return [[term(t) for t in conj] for conj in filter]
    return [term(t) for t in filter]


def partition_matcher(
    schema: pa.Schema, partition_by: Sequence[str], partition_filter: PartitionFilterLike
) -> Callable[[Sequence[Mapping[str, str | None]]], list[bool]]:
    """A function telling which partitions (string values) a filter selects.

    The filter is a :class:`pyarrow.compute.Expression` or DNF tuples over the
    partition columns only; anything else is an :class:`InvalidArgumentError`
    raised here, before any work.
    """
    if not partition_by:
        raise InvalidArgumentError(
            "expected a partitioned table for partition_filter, found an unpartitioned one; "
            "drop partition_filter to compact the whole table."
        )
    part_schema = pa.schema([schema.field(c) for c in partition_by])
    if isinstance(partition_filter, pc.Expression):
        expr = partition_filter
    elif isinstance(partition_filter, (list, tuple)) and partition_filter:
        try:
            expr = pq.filters_to_expression(_typed_dnf(list(partition_filter), part_schema))
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(
                f"expected partition_filter as DNF tuples like [('date', '=', '2024-01-01')] "
                f"or a pyarrow Expression, found {partition_filter!r}: {e}"
            ) from e
    else:
        raise InvalidArgumentError(
            f"expected partition_filter as DNF tuples like [('date', '=', '2024-01-01')] or "
            f"a pyarrow Expression, found {partition_filter!r}"
        )

    def evaluate(parts: Sequence[Mapping[str, str | None]]) -> list[bool]:
        cols = {
            c: pa.array([p.get(c) for p in parts], pa.string()).cast(part_schema.field(c).type)
            for c in partition_by
        }
        cols[_ROW_INDEX] = pa.array(range(len(parts)), pa.int64())
        table = pa.table(cols)
        try:
            kept = table.filter(expr).column(_ROW_INDEX).to_pylist()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise InvalidArgumentError(
                f"expected partition_filter over the partition columns {list(partition_by)} "
                f"({', '.join(f'{f.name}: {f.type}' for f in part_schema)}), found {expr}: "
                f"{e}. Filters on other columns cannot select whole files."
            ) from e
        mask = [False] * len(parts)
        for i in kept:
            mask[i] = True
        return mask

    evaluate([])  # validate the filter now, even for a table without files
    return evaluate
