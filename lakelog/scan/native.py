"""What DuckDB and polars are handed to read a snapshot with their own Parquet readers.

A :class:`NativePlan` is the pruned file list of one snapshot, grouped by partition
values (constants: partition columns are not stored in files) and split into files
without deleted rows and files with a deletion vector, each with the positions it
deletes. The engines read every group with their own multi-threaded Parquet reader
(their row-group pruning included) and drop a marked file's deleted rows by its row
position inside the scan (DuckDB: an anti-join on ``(file_index, file_row_number)``;
polars: a filter on a row index); nothing goes through a Python iterator.

Columns stored under physical names (renamed columns, format.md "Column ids") are
selected under their logical names; columns older files lack read as typed nulls,
narrower stored types are cast to the table's. Filters given to the readers are
translated into the engines' own languages (:func:`duckdb_condition`,
:func:`polars_condition`), with Arrow's semantics kept where the engines differ
(NaN compares as neither greater nor equal in Arrow, as greatest and equal to itself
in DuckDB and polars).

What cannot be expressed natively returns None from :func:`native_plan`, and the
readers fall back to lakelog's own scanner (:class:`lakelog.scan.engines.LakelogDataset`):
a table on storage other than local disk (DuckDB would read it through Python's fsspec
from its own threads, which deadlocks through its relation API in duckdb 1.4; polars
reads object stores through its own clients, not fsspec), a table with column ids and
nested columns (whose struct fields may be stored under other names or in older
shapes), or a filter lakelog does not model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from fsspec.implementations.local import LocalFileSystem

from ..filters import And, Compare, Const, In, IsNull, Not, Or, Predicate
from ..log import mapping
from ..log.actions import DataFile
from ..log.deletion_vectors import deleted_positions
from ..partitioning import partition_scalar
from ..storage import Storage

if TYPE_CHECKING:
    from .snapshot import Snapshot

__all__ = [
    "FileGroup",
    "NativePlan",
    "duckdb_condition",
    "duckdb_literal",
    "native_plan",
    "partition_value",
    "polars_condition",
    "polars_literal",
    "quote_ident",
    "quote_text",
]


@dataclass
class FileGroup:
    """Files sharing their partition values: ``plain`` files read whole, ``marked``
    files with the sorted positions their deletion vectors delete."""

    partition: dict[str, str | None]
    plain: list[str] = field(default_factory=list)
    marked: list[tuple[str, np.ndarray]] = field(default_factory=list)


@dataclass
class NativePlan:
    """The files of one read as an engine receives them (URLs the engine opens)."""

    schema: pa.Schema  # the table's schema, column ids kept (physical names)
    partition_by: tuple[str, ...]
    groups: list[FileGroup]
    storage: Storage

    def url(self, file: DataFile) -> str:
        """The local path the engine opens for ``file``."""
        return self.storage.full(file.path)

    @property
    def urls(self) -> list[str]:
        """Every URL handed to the engine, in group order."""
        out: list[str] = []
        for g in self.groups:
            out.extend(g.plain)
            out.extend(u for u, _ in g.marked)
        return out

    def physical(self, name: str) -> str:
        """The name files store the column ``name`` under."""
        return mapping.physical_name(self.schema.field(name))


def native_plan(snapshot: Snapshot, files: Sequence[DataFile]) -> NativePlan | None:
    """The plan reading ``files`` of ``snapshot`` natively; None when the engines cannot
    read them as lakelog does (see the module doc)."""
    schema = snapshot.schema
    if mapping.is_mapped(schema) and any(pa.types.is_nested(f.type) for f in schema):
        return None
    storage = snapshot.storage
    if not isinstance(storage.fs, LocalFileSystem):
        return None
    groups: dict[tuple[str | None, ...], FileGroup] = {}
    for f in files:
        key = tuple(f.partition.get(c) for c in snapshot.partition_by)
        group = groups.get(key)
        if group is None:
            group = groups[key] = FileGroup({c: f.partition.get(c) for c in snapshot.partition_by})
        url = storage.full(f.path)
        if f.deleted is None:
            group.plain.append(url)
        else:
            group.marked.append((url, deleted_positions(f.deleted, f.num_rows, path=f.path)))
    return NativePlan(schema, tuple(snapshot.partition_by), list(groups.values()), storage)


def partition_value(plan: NativePlan, group: FileGroup, column: str) -> pa.Scalar:
    """The typed constant of a partition column in ``group``."""
    return partition_scalar(group.partition.get(column), plan.schema.field(column).type)


# -- SQL text ---------------------------------------------------------------------------


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def duckdb_literal(value: pa.Scalar, sql_type: str) -> str | None:
    """``value`` as a DuckDB literal of ``sql_type``; None when it has no literal form
    here (nested values)."""
    if not value.is_valid:
        return f"CAST(NULL AS {sql_type})"
    t = value.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return f"CAST({quote_text(value.as_py())} AS {sql_type})"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return f"CAST(from_hex('{value.as_py().hex()}') AS {sql_type})"
    if pa.types.is_boolean(t):
        return "TRUE" if value.as_py() else "FALSE"
    if pa.types.is_floating(t):
        v = float(value.as_py())
        text = (
            "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
        )
        return f"CAST('{text}' AS {sql_type})"
    if pa.types.is_nested(t) or pa.types.is_dictionary(t):
        return None
    try:
        text = value.cast(pa.string()).as_py()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return None
    return f"CAST({quote_text(text)} AS {sql_type})"


def _is_float(t: pa.DataType) -> bool:
    return bool(pa.types.is_floating(t))


def _is_nan(s: pa.Scalar) -> bool:
    return s.is_valid and pa.types.is_floating(s.type) and math.isnan(s.as_py())


_SQL_OPS = {"=": "=", "==": "=", "!=": "<>", "<>": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def duckdb_condition(pred: Predicate, schema: pa.Schema, types: dict[str, str]) -> str | None:
    """``pred`` (over the table's column names) as a DuckDB condition selecting the
    rows Arrow's filter selects; ``types``: column name to DuckDB type. None when a part
    has no translation here (the caller falls back to lakelog's scanner)."""
    return _SqlCondition(schema, types).of(pred, positive=True)


class _SqlCondition:
    def __init__(self, schema: pa.Schema, types: dict[str, str]) -> None:
        self.schema = schema
        self.types = types

    def of(self, pred: Predicate, *, positive: bool) -> str | None:
        if isinstance(pred, Compare):
            return self.compare(pred)
        if isinstance(pred, In):
            return self.is_in(pred, positive=positive)
        if isinstance(pred, IsNull):
            col = quote_ident(pred.column)
            if pred.negated:
                return f"({col} IS NOT NULL)"
            if pred.nan_is_null and _is_float(self.schema.field(pred.column).type):
                return f"({col} IS NULL OR isnan({col}))"
            return f"({col} IS NULL)"
        if isinstance(pred, (And, Or)):
            if not pred.parts:
                return "TRUE" if isinstance(pred, And) else "FALSE"
            parts = [self.of(p, positive=positive) for p in pred.parts]
            if any(p is None for p in parts):
                return None
            joiner = " AND " if isinstance(pred, And) else " OR "
            return "(" + joiner.join(p for p in parts if p is not None) + ")"
        if isinstance(pred, Not):
            inner = self.of(pred.part, positive=not positive)
            return None if inner is None else f"(NOT {inner})"
        if isinstance(pred, Const):
            return "TRUE" if pred.value else "FALSE"
        return None  # Unknown

    def compare(self, pred: Compare) -> str | None:
        col = quote_ident(pred.column)
        lit = duckdb_literal(pred.value, self.types[pred.column])
        if lit is None:
            return None
        op = _SQL_OPS[pred.op]  # column op value, whichever order it was written in
        if not _is_float(self.schema.field(pred.column).type):
            return f"({col} {op} {lit})"
        # Arrow (IEEE): NaN is neither equal to, less or greater than anything
        if _is_nan(pred.value):
            return (
                f"({col} IS NOT NULL)"
                if op == "<>"
                else f"(CASE WHEN {col} IS NULL THEN NULL ELSE FALSE END)"
            )
        if op == "<>":
            return f"({col} {op} {lit} OR isnan({col}))"
        return f"({col} {op} {lit} AND NOT isnan({col}))"

    def is_in(self, pred: In, *, positive: bool) -> str | None:
        col = quote_ident(pred.column)
        listed = [v for v in pred.values if v.is_valid]
        lits = [duckdb_literal(v, self.types[pred.column]) for v in listed]
        if any(lit is None for lit in lits):
            return None
        found = f"({col} IN ({', '.join(x for x in lits if x is not None)}))" if lits else "FALSE"
        has_null = len(listed) < len(pred.values)
        if pred.nulls == "sql":  # as lakelog's own row form (tree._in_expr)
            if pred.negated:
                return (
                    f"(NOT coalesce({found}, FALSE) AND {col} IS NOT NULL)"
                    if positive
                    else f"(NOT coalesce({found}, FALSE))"
                )
            return (
                f"coalesce({found}, FALSE)"
                if positive
                else f"(coalesce({found}, FALSE) OR {col} IS NULL)"
            )
        # Arrow's is_in: never null; a null row matches when the values hold a null
        null_match = "TRUE" if (pred.nulls == "match" and has_null) else "FALSE"
        hit = f"(CASE WHEN {col} IS NULL THEN {null_match} ELSE coalesce({found}, FALSE) END)"
        return f"(NOT {hit})" if pred.negated else hit


# -- polars ---------------------------------------------------------------------------


def polars_literal(pl: Any, value: pa.Scalar) -> Any:
    """``value`` as a typed polars literal."""
    series = pl.from_arrow(
        pa.array([value.as_py()], value.type) if value.is_valid else pa.nulls(1, value.type)
    )
    return pl.lit(series.item(), dtype=series.dtype)


def polars_condition(pl: Any, pred: Predicate, schema: pa.Schema) -> Any:
    """``pred`` as a polars expression selecting the rows Arrow's filter selects; None
    when a part has no translation here."""
    return _PolarsCondition(pl, schema).of(pred, positive=True)


class _PolarsCondition:
    def __init__(self, pl: Any, schema: pa.Schema) -> None:
        self.pl = pl
        self.schema = schema

    def of(self, pred: Predicate, *, positive: bool) -> Any:
        pl = self.pl
        if isinstance(pred, Compare):
            return self.compare(pred)
        if isinstance(pred, In):
            return self.is_in(pred, positive=positive)
        if isinstance(pred, IsNull):
            col = pl.col(pred.column)
            if pred.negated:
                return col.is_not_null()
            if pred.nan_is_null and _is_float(self.schema.field(pred.column).type):
                return col.is_null() | col.is_nan()
            return col.is_null()
        if isinstance(pred, (And, Or)):
            if not pred.parts:
                return pl.lit(isinstance(pred, And))
            parts = [self.of(p, positive=positive) for p in pred.parts]
            if any(p is None for p in parts):
                return None
            out = parts[0]
            for p in parts[1:]:
                out = (out & p) if isinstance(pred, And) else (out | p)
            return out
        if isinstance(pred, Not):
            inner = self.of(pred.part, positive=not positive)
            return None if inner is None else ~inner
        if isinstance(pred, Const):
            return pl.lit(bool(pred.value))
        return None

    def compare(self, pred: Compare) -> Any:
        pl = self.pl
        col = pl.col(pred.column)
        if pred.value.type != self.schema.field(pred.column).type:
            return None
        lit = polars_literal(pl, pred.value)
        op: str = pred.op  # column op value, whichever order it was written in
        op = "!=" if op in ("!=", "<>") else ("==" if op in ("=", "==") else op)
        got = {
            "==": col.__eq__,
            "!=": col.__ne__,
            "<": col.__lt__,
            "<=": col.__le__,
            ">": col.__gt__,
            ">=": col.__ge__,
        }[op](lit)
        if not _is_float(self.schema.field(pred.column).type):
            return got
        if _is_nan(pred.value):
            return (
                col.is_not_null()
                if op == "!="
                else pl.when(col.is_null()).then(None).otherwise(False)
            )
        return (got | col.is_nan()) if op == "!=" else (got & ~col.is_nan())

    def is_in(self, pred: In, *, positive: bool) -> Any:
        pl = self.pl
        col = pl.col(pred.column)
        t = self.schema.field(pred.column).type
        listed = [v for v in pred.values if v.is_valid]
        if any(v.type != t for v in listed):
            return None
        values = pl.from_arrow(pa.array([v.as_py() for v in listed], t))
        found = col.is_in(values.implode()) if listed else pl.lit(False)
        has_null = len(listed) < len(pred.values)
        if pred.nulls == "sql":
            hit = found.fill_null(False)
            if pred.negated:
                return (~hit & col.is_not_null()) if positive else ~hit
            return hit if positive else (hit | col.is_null())
        null_match = pred.nulls == "match" and has_null
        hit = pl.when(col.is_null()).then(pl.lit(null_match)).otherwise(found.fill_null(False))
        return ~hit if pred.negated else hit
