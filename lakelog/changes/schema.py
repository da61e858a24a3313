"""Schema evolution: add, drop and widen columns.

Data files are never rewritten: a schema change is one ``metadata`` commit, and readers
read each file through the version's schema (missing columns as nulls, narrower types
converted; see ``docs/format.md``, "Schema evolution", and :mod:`lakelog.io.schema` for
the rules). A change is checked against the latest version and, when a concurrent commit
wins the race, checked again on the new latest version and retried: nothing was written,
so a retry is free. The schema a ``merge`` write takes is :func:`lakelog.core.schema.plan_write`.

Dropped columns keep their values in older files, so a dropped name is listed in the
schema (:data:`~lakelog.io.schema.DROPPED_KEY`) and added back only once no live file
holds a column of that name (read from the files' footers).
"""

from __future__ import annotations

import io
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..core.schema import evolved_metadata, readd_dropped
from ..errors import CommitConflictError, InvalidArgumentError, SchemaMismatchError
from ..io.schema import dropped_columns, widens, with_dropped
from ..log.actions import Metadata
from ..log.snapshot import Snapshot
from ..properties import get_float, get_int
from ..transaction import CommitResult

if TYPE_CHECKING:
    from ..table import Table

__all__ = ["add_columns", "drop_columns", "widen_column"]

_BLOOM = "lakelog.parquet.bloom_filter_columns"
_CLUSTERING = "lakelog.clustering.columns"


# -- explicit changes -------------------------------------------------------------------


def add_columns(table: Table, columns: Any) -> CommitResult:
    """Add nullable columns after the existing ones (one ``metadata`` commit)."""
    fields = _fields(columns)
    names = [f.name for f in fields]

    def build(snap: Snapshot) -> tuple[Metadata, dict[str, Any]]:
        schema = snap.schema
        taken = [n for n in names if n in schema.names]
        if taken:
            raise SchemaMismatchError(
                f"expected new column names, found {taken} already in the table "
                f"(columns {schema.names}); choose other names, or widen_column() to change "
                f"a column's type."
            )
        evolved = pa.schema([*schema, *fields], metadata=schema.metadata)
        evolved = readd_dropped(snap, evolved, tuple(names))
        params = {"columns": [f"{f.name}: {f.type}" for f in fields]}
        return evolved_metadata(snap, evolved), params

    return _commit_change(table, build, operation="ADD COLUMNS")


def drop_columns(table: Table, names: str | Sequence[str]) -> CommitResult:
    """Remove columns from the schema (one ``metadata`` commit; files keep their values,
    which are no longer read). Partition columns cannot be dropped."""
    wanted = _names(names, what="drop_columns")

    def build(snap: Snapshot) -> tuple[Metadata, dict[str, Any]]:
        schema = snap.schema
        unknown = [n for n in wanted if n not in schema.names]
        if unknown:
            raise InvalidArgumentError(
                f"expected columns of the table {schema.names} to drop, found unknown {unknown}"
            )
        parts = [n for n in wanted if n in snap.partition_by]
        if parts:
            raise InvalidArgumentError(
                f"expected non-partition columns to drop, found partition columns {parts}; "
                f"a table's partitioning does not change (write a new table partitioned "
                f"otherwise)."
            )
        declared = snap.metadata.properties.get(_CLUSTERING, "")
        clustered = [n for n in wanted if n in (c.strip() for c in declared.split(","))]
        if clustered:
            raise InvalidArgumentError(
                f"expected columns outside the table's declared clustering to drop, found "
                f"{clustered} in it ({_CLUSTERING}={declared!r}); change the clustering "
                f"first with set_clustering(...) (lakelog clustering URI), then drop them."
            )
        kept = [f for f in schema if f.name not in wanted]
        if not [f for f in kept if f.name not in snap.partition_by]:
            raise InvalidArgumentError(
                f"expected at least one non-partition column to remain, found {wanted} "
                f"dropping every one; keep one, or write a new table."
            )
        evolved = with_dropped(
            pa.schema(kept, metadata=schema.metadata), [*dropped_columns(schema), *wanted]
        )
        props = dict(snap.metadata.properties)
        bloom = [c.strip() for c in props.get(_BLOOM, "").split(",") if c.strip()]
        if any(c in wanted for c in bloom):
            # the property names only columns of the table: drop them from it too
            left = [c for c in bloom if c not in wanted]
            if left:
                props[_BLOOM] = ",".join(left)
            else:
                props.pop(_BLOOM)
        return evolved_metadata(snap, evolved, props), {"columns": list(wanted)}

    return _commit_change(table, build, operation="DROP COLUMNS")


def widen_column(table: Table, name: str, type: pa.DataType) -> CommitResult:
    """Change a column to a wider type (``int32`` -> ``int64``, ``float32`` ->
    ``float64``, ...; see :func:`lakelog.io.schema.widens`). Files keep the old type
    and are read converted."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"expected a column name, found {name!r}")
    if not isinstance(type, pa.DataType):
        raise InvalidArgumentError(f"expected a pyarrow type such as pa.int64(), found {type!r}")

    def build(snap: Snapshot) -> tuple[Metadata, dict[str, Any]]:
        schema = snap.schema
        if name not in schema.names:
            raise InvalidArgumentError(
                f"expected a column of the table {schema.names}, found unknown {name!r}"
            )
        field = schema.field(name)
        if field.type == type:
            raise InvalidArgumentError(
                f"expected a type other than the column's, found {name!r} already {type}"
            )
        if not widens(field.type, type):
            raise SchemaMismatchError(
                f"expected a widening of column {name!r} ({field.type}): a type every "
                f"value and statistic of it converts to exactly (int8 -> int16 -> int32 -> "
                f"int64, up to 32-bit integers -> float64, float32 -> float64, decimals "
                f"with more digits), found {type}{_why_not(field.type, type)}. Add a new "
                f"column of that type instead."
            )
        if name in snap.partition_by and not (
            pa.types.is_integer(field.type) and pa.types.is_integer(type)
        ):
            raise SchemaMismatchError(
                f"expected an integer type for partition column {name!r} ({field.type}), "
                f"found {type}: partition values are kept as strings in their type's form."
            )
        i = schema.get_field_index(name)
        evolved = schema.set(i, field.with_type(type))
        params = {"column": name, "from": str(field.type), "to": str(type)}
        return evolved_metadata(snap, evolved), params

    return _commit_change(table, build, operation="WIDEN COLUMN")


# -- helpers ------------------------------------------------------------------------------


def _why_not(source: pa.DataType, target: pa.DataType) -> str:
    """Why a change that looks like a widening is not one (empty: nothing to add)."""
    if pa.types.is_temporal(source) and pa.types.is_temporal(target):
        return (
            f" (the statistics of files written before count {source}'s units, and would "
            f"be read as {target}'s, so pruning would skip the wrong files: dates count "
            f"days, timestamps their unit)"
        )
    if pa.types.is_integer(source) and pa.types.is_floating(target):
        return " (not every value of it is exactly a value of that type)"
    return ""


def _commit_change(
    table: Table,
    build: Callable[[Snapshot], tuple[Metadata, Mapping[str, Any]]],
    *,
    operation: str,
) -> CommitResult:
    """Commit the metadata ``build`` makes of the latest snapshot; when a concurrent
    commit wins, build it again on the new latest version and retry (bounded by the
    table's commit attempts and timeout)."""
    attempt = 0
    start = time.monotonic()
    while True:
        snap = table.snapshot()  # the latest
        md, params = build(snap)
        try:
            return table.commit(
                [md], operation=operation, kind="metadata", read_snapshot=snap, parameters=params
            )
        except CommitConflictError:
            attempt += 1
            props = snap.properties
            if attempt >= get_int(props, "lakelog.commit.max_attempts") or (
                time.monotonic() - start > get_float(props, "lakelog.commit.timeout_seconds")
            ):
                raise
            time.sleep(random.uniform(0, min(1.0, 0.01 * 2 ** min(attempt, 6))))


def _fields(columns: Any) -> list[pa.Field]:
    """Columns to add as nullable fields: a Field, Fields, a Schema, or names to types."""
    if isinstance(columns, pa.Field):
        fields = [columns]
    elif isinstance(columns, pa.Schema):
        fields = list(columns)
    elif isinstance(columns, Mapping):
        fields = []
        for name, t in columns.items():
            if not isinstance(t, pa.DataType):
                raise InvalidArgumentError(
                    f"expected a pyarrow type for column {name!r}, found {t!r}; for example "
                    f"add_columns({{'{name}': pa.int64()}})"
                )
            fields.append(pa.field(name, t))
    elif isinstance(columns, Iterable) and not isinstance(columns, (str, bytes)):
        fields = list(columns)
    else:
        fields = []
    if not fields or not all(isinstance(f, pa.Field) for f in fields):
        raise InvalidArgumentError(
            f"expected columns to add as a pyarrow Field, a list of Fields, a Schema or a "
            f"mapping of names to types, found {columns!r}"
        )
    names = [f.name for f in fields]
    dups = sorted({n for n in names if names.count(n) > 1})
    problems = []
    if dups:
        problems.append(f"{dups} more than once")
    problems += [f"{f.name!r} is non-nullable" for f in fields if not f.nullable]
    problems += [f"{f.name!r} has type null" for f in fields if f.type == pa.null()]
    problems += [f"{f.name!r} is not a valid column name" for f in fields if not f.name]
    if problems:
        raise InvalidArgumentError(
            "expected distinct, named, nullable, typed columns to add (files written before "
            "hold no values for them, so they read as null), found " + "; ".join(problems)
        )
    for f in fields:
        _check_parquet_type(f)
    return [f.remove_metadata() for f in fields]


def _check_parquet_type(field: pa.Field) -> None:
    try:
        pq.write_table(pa.schema([field]).empty_table(), io.BytesIO())
    except (pa.ArrowException, ValueError, TypeError) as e:
        raise InvalidArgumentError(
            f"expected a column type Parquet can store, found {field.name!r}: {field.type} ({e})"
        ) from e


def _names(names: str | Sequence[str], *, what: str) -> list[str]:
    listed = [names] if isinstance(names, str) else list(names)
    if not listed or not all(isinstance(n, str) for n in listed):
        raise InvalidArgumentError(
            f"expected column names for {what}, found {names!r}; for example {what}(['col'])"
        )
    return list(dict.fromkeys(listed))
