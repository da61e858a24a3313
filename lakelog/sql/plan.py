"""Statements as plans: small frozen values, one per kind of statement, made by
:func:`lakelog.sql.parser.parse` and run by an executor (Spark: :mod:`lakelog.spark.sql`;
DuckDB: :mod:`lakelog.sql.embedded`). A plan holds names, literals and sqlglot trees;
nothing in it reads or writes a table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from sqlglot import exp

from ..rowlevel.clauses import MergeClause


@dataclasses.dataclass(frozen=True)
class TableRef:
    """A lakelog table as a statement reads it: its ``namespace.table`` name and the
    version (``VERSION AS OF``) or time (``TIMESTAMP AS OF``) to read."""

    name: str
    version: int | None = None
    timestamp: str | None = None


@dataclasses.dataclass(frozen=True)
class ChangesRef:
    """``table_changes('ns.t', start[, end])``: the change feed of versions start..end."""

    name: str
    start: int | str
    end: int | str | None = None


@dataclasses.dataclass(frozen=True)
class Query:
    """A query (SELECT, VALUES, a CTE...) over table names. ``tables`` are the references
    that may be lakelog tables (two-part names), ``changes`` the ``table_changes`` calls;
    :meth:`rewrite` puts a view name in place of each reference the executor resolved."""

    tree: exp.Expression
    tables: tuple[TableRef, ...]
    changes: tuple[ChangesRef, ...] = ()

    def rewrite(self, views: Mapping[TableRef | ChangesRef, str], *, dialect: str = "spark") -> str:
        """The query's text in ``dialect`` with each resolved reference read from its view
        (keeping the name the query qualifies columns with)."""
        tree = self.tree.copy()
        for node in list(tree.find_all(exp.Table)):
            ref = _ref_of(node)
            if ref is None or ref not in views:
                continue
            alias = node.alias or (node.name if isinstance(node.this, exp.Identifier) else "")
            view = exp.to_table(views[ref])
            node.replace(view.as_(alias, quoted=True) if alias else view)
        return tree.sql(dialect=dialect)


def _ref_of(node: exp.Table) -> TableRef | ChangesRef | None:
    from .parser import changes_ref, table_ref

    if isinstance(node.this, exp.Anonymous):
        return changes_ref(node.this)
    return table_ref(node)


@dataclasses.dataclass(frozen=True)
class CreateNamespace:
    namespace: str
    if_not_exists: bool = False


@dataclasses.dataclass(frozen=True)
class DropNamespace:
    namespace: str
    if_exists: bool = False
    cascade: bool = False


@dataclasses.dataclass(frozen=True)
class ShowTables:
    namespace: str | None = None


@dataclasses.dataclass(frozen=True)
class ShowNamespaces:
    pass


@dataclasses.dataclass(frozen=True)
class CreateTable:
    name: str
    schema: pa.Schema | None = None
    """The declared columns; None for ``AS SELECT`` and ``LOCATION`` without columns."""
    partition_by: tuple[str, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()
    if_not_exists: bool = False
    location: str | None = None
    query: Query | None = None
    constraints: tuple[tuple[str, str], ...] = ()
    """``CONSTRAINT name CHECK (expr)``: name and SQL text."""
    generated: tuple[tuple[str, str], ...] = ()
    """``col TYPE GENERATED ALWAYS AS (expr)``: column and SQL text."""
    identity: tuple[tuple[str, int, int, bool], ...] = ()
    """``col BIGINT GENERATED ALWAYS|BY DEFAULT AS IDENTITY``: column, start, step,
    always."""

    def rules(self) -> dict[str, Any]:
        """The keywords of ``create_table`` that declare the rules."""
        return {
            "constraints": dict(self.constraints) or None,
            "generated": dict(self.generated) or None,
            "identity": {c: {"start": s, "step": i, "always": a} for c, s, i, a in self.identity}
            or None,
        }


@dataclasses.dataclass(frozen=True)
class DropTable:
    name: str
    if_exists: bool = False
    purge: bool = False


@dataclasses.dataclass(frozen=True)
class RenameTable:
    name: str
    new: str


@dataclasses.dataclass(frozen=True)
class Select:
    query: Query


@dataclasses.dataclass(frozen=True)
class Insert:
    name: str
    query: Query
    mode: str = "append"
    """``append``, ``overwrite`` or ``replace_where``."""
    where: str | None = None
    columns: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class Delete:
    name: str
    where: str | None


@dataclasses.dataclass(frozen=True)
class Update:
    name: str
    set: tuple[tuple[str, exp.Expression], ...]
    where: str | None


@dataclasses.dataclass(frozen=True)
class Merge:
    """``MERGE INTO``: the keys of its ON and its WHEN clauses in order, by kind (merge
    clauses whose conditions and values are Spark SQL text over the target's columns,
    bare, and the source's, ``source.<col>``)."""

    name: str
    source: Query
    keys: tuple[str, ...]
    matched: tuple[MergeClause, ...] = ()
    not_matched: tuple[MergeClause, ...] = ()
    by_source: tuple[MergeClause, ...] = ()

    def clauses(self) -> tuple[MergeClause, ...]:
        return (*self.matched, *self.not_matched, *self.by_source)


@dataclasses.dataclass(frozen=True)
class DescribeHistory:
    name: str
    limit: int | None = None


@dataclasses.dataclass(frozen=True)
class DescribeDetail:
    name: str


@dataclasses.dataclass(frozen=True)
class Optimize:
    name: str
    where: str | None = None
    zorder_by: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Vacuum:
    name: str
    retain_hours: float | None = None
    dry_run: bool = False


@dataclasses.dataclass(frozen=True)
class Restore:
    name: str
    version: int | None = None
    timestamp: str | None = None


@dataclasses.dataclass(frozen=True)
class AddColumns:
    name: str
    columns: pa.Schema


@dataclasses.dataclass(frozen=True)
class RenameColumn:
    name: str
    old: str
    new: str


@dataclasses.dataclass(frozen=True)
class AlterColumnType:
    """``ALTER TABLE t ALTER COLUMN c TYPE type`` (or Delta's ``CHANGE COLUMN c c type``):
    the table's own widening; ``clause`` is the statement's words, for errors."""

    name: str
    column: str
    type: pa.DataType
    clause: str


@dataclasses.dataclass(frozen=True)
class DropColumns:
    name: str
    columns: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class SetProperties:
    name: str
    properties: tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True)
class ChangePartitionField:
    """``ALTER TABLE name ADD|DROP|REPLACE PARTITION FIELD field [WITH new]``: partition
    evolution (docs/partitioning.md), Iceberg's syntax."""

    name: str
    action: str
    field: str
    new: str | None = None


@dataclasses.dataclass(frozen=True)
class UnsetProperties:
    name: str
    keys: tuple[str, ...]
    if_exists: bool = False


@dataclasses.dataclass(frozen=True)
class AddConstraint:
    """``ALTER TABLE t ADD CONSTRAINT c CHECK (expr)``: the rows there are are checked
    first (:meth:`lakelog.Table.add_constraint`)."""

    name: str
    constraint: str
    expr: str


@dataclasses.dataclass(frozen=True)
class DropConstraint:
    """``ALTER TABLE t DROP CONSTRAINT [IF EXISTS] c``."""

    name: str
    constraint: str
    if_exists: bool = False


@dataclasses.dataclass(frozen=True)
class SetNotNull:
    """``ALTER TABLE t ALTER COLUMN c SET NOT NULL``: the rows there are are checked
    first (:meth:`lakelog.Table.set_not_null`)."""

    name: str
    column: str


Plan = (
    CreateNamespace
    | DropNamespace
    | ShowTables
    | ShowNamespaces
    | CreateTable
    | DropTable
    | RenameTable
    | Select
    | Insert
    | Delete
    | Update
    | Merge
    | DescribeHistory
    | DescribeDetail
    | Optimize
    | Vacuum
    | Restore
    | AddColumns
    | RenameColumn
    | AlterColumnType
    | DropColumns
    | SetProperties
    | ChangePartitionField
    | UnsetProperties
    | AddConstraint
    | DropConstraint
    | SetNotNull
)
"""Every statement lakelog runs."""
