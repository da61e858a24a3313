"""Adding and dropping a table's rules after it was created (docs/constraints.md):
``ADD CONSTRAINT name CHECK (expr)``, ``DROP CONSTRAINT``, ``SET NOT NULL``.

Invariants:

* Each is one ``metadata`` commit (conflict kind ``metadata``: a concurrent write makes
  it start again from the latest version, rows checked again), so no row that breaks a
  rule can land between the check and the commit: a writer that read the table before
  conflicts with the new rule's commit and re-reads it (``conflict_rules.same_shape``
  compares schema metadata, where the rules live).
* Adding a rule first reads every live row of the version it commits on, one batch at a
  time (bounded memory; only the columns the rule reads), and refuses it with
  :class:`~lakelog.errors.ConstraintViolationError` naming a row that breaks it.
  Nothing is committed then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..core.schema import evolved_metadata
from ..errors import ConstraintViolationError, InvalidArgumentError
from ..filters.expressions import decode_expression
from ..filters.values import parse_value
from ..io.guards import (
    Guards,
    check_constraint_name,
    check_rows,
    constraints_of,
    guards_of,
    sample_row,
    with_constraints,
    with_not_null,
)
from ..log.actions import Metadata
from ..log.snapshot import Snapshot
from ..transaction import CommitResult
from .schema import commit_schema_change

if TYPE_CHECKING:
    from ..core.handle import TableHandle

__all__ = ["add_constraint", "constraint_text", "drop_constraint", "set_not_null"]


def constraint_text(expr: Any, schema: pa.Schema) -> str:
    """The SQL text of a CHECK constraint given as text or as a pyarrow Expression
    (one the filter language reads: comparisons, IN, IS NULL, AND, OR, NOT)."""
    if isinstance(expr, str):
        return expr
    if isinstance(expr, pc.Expression):
        from ..filters.tree import And, Compare, Const, In, IsNull, Not, Or

        def sql(node: Any) -> str:
            if isinstance(node, Compare):
                return f"{_name(node.column)} {node.op} {_literal(node.value)}"
            if isinstance(node, In):
                values = ", ".join(_literal(v) for v in node.values)
                return f"{_name(node.column)} {'NOT IN' if node.negated else 'IN'} ({values})"
            if isinstance(node, IsNull):
                return f"{_name(node.column)} IS {'NOT ' if node.negated else ''}NULL"
            if isinstance(node, And):
                return "(" + " AND ".join(sql(c) for c in node.parts) + ")"
            if isinstance(node, Or):
                return "(" + " OR ".join(sql(c) for c in node.parts) + ")"
            if isinstance(node, Not):
                return f"NOT ({sql(node.part)})"
            if isinstance(node, Const):
                return "true" if node.value else "false"
            raise InvalidArgumentError(
                f"expected a CHECK expression of comparisons, IN, IS NULL, AND, OR and NOT, "
                f"found {expr}; give it as SQL text instead"
            )

        return sql(decode_expression(expr, schema))
    raise InvalidArgumentError(
        f"expected a CHECK expression as SQL text or a pyarrow Expression, found "
        f"{type(expr).__name__}"
    )


def _name(column: str) -> str:
    return column if column.isidentifier() else '"' + column.replace('"', '""') + '"'


def _literal(value: pa.Scalar) -> str:
    v = value.as_py()
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    text = str(v).replace("'", "''")
    if pa.types.is_date(value.type):
        return f"DATE '{text}'"
    if pa.types.is_timestamp(value.type):
        return f"TIMESTAMP '{v.isoformat()}'"
    return f"'{text}'"


def _check_existing(snap: Snapshot, guards: Guards, columns: list[str]) -> None:
    """Read every live row of ``snap`` (only ``columns``), batch by batch, through
    :func:`check_rows`."""
    if not columns:
        return
    schema = snap.schema
    sub = pa.schema([schema.field(c) for c in columns])
    for batch in snap.to_batches(columns=columns):  # type: ignore[attr-defined]
        check_rows(pa.RecordBatch.from_arrays(batch.columns, schema=sub), guards)


def add_constraint(table: TableHandle, name: str, expr: Any) -> CommitResult:
    """:meth:`lakelog.Table.add_constraint`."""
    check_constraint_name(name)

    def build(snap: Snapshot) -> tuple[Metadata, dict[str, Any]]:
        schema = snap.schema
        existing = constraints_of(schema)
        if name.lower() in {n.lower() for n in existing}:
            raise InvalidArgumentError(
                f"expected a new constraint name, found {name!r} already on the table "
                f"(constraints {sorted(existing)}); drop_constraint({name!r}) first to "
                f"change it."
            )
        text = constraint_text(expr, schema)
        parsed = parse_value(text, schema, what=f"CHECK constraint {name!r}", boolean=True)
        idents = sorted(parsed.columns & set(guards_of(schema).identity))
        if idents:
            raise InvalidArgumentError(
                f"expected CHECK constraint {name!r} to read no identity column, found "
                f"{idents}: identity values are given out when a write commits, after "
                f"its rows were checked"
            )
        _check_existing(snap, Guards(checks={name: parsed}), sorted(parsed.columns))
        new = with_constraints(schema, {**existing, name: text})
        return evolved_metadata(snap, new), {"name": name, "expr": text}

    return commit_schema_change(table, build, operation="ADD CONSTRAINT")


def drop_constraint(table: TableHandle, name: str, *, missing_ok: bool = False) -> CommitResult:
    """:meth:`lakelog.Table.drop_constraint`."""

    def build(snap: Snapshot) -> tuple[Metadata, dict[str, Any]]:
        schema = snap.schema
        existing = constraints_of(schema)
        found = next((n for n in existing if n.lower() == str(name).lower()), None)
        if found is None:
            raise InvalidArgumentError(
                f"expected a constraint of the table {sorted(existing)}, found {name!r}"
            )
        rest = {n: t for n, t in existing.items() if n != found}
        return evolved_metadata(snap, with_constraints(schema, rest)), {"name": found}

    if missing_ok:
        names = {n.lower() for n in constraints_of(table.snapshot().schema)}
        if str(name).lower() not in names:
            return CommitResult(version=table.snapshot().version, attempts=0,
                                operation="DROP CONSTRAINT", skipped=True)  # fmt: skip
    return commit_schema_change(table, build, operation="DROP CONSTRAINT")


def set_not_null(table: TableHandle, column: str) -> CommitResult:
    """:meth:`lakelog.Table.set_not_null`."""
    if not isinstance(column, str):
        raise InvalidArgumentError(f"expected a column name or path, found {column!r}")

    def build(snap: Snapshot) -> tuple[Metadata, dict[str, Any]]:
        schema = snap.schema
        new = with_not_null(schema, column)
        top = new.field(column.split(".")[0].split("[")[0].split("{")[0])
        if top.nullable:
            _check_existing(snap, guards_of(pa.schema([top])), [top.name])
        else:
            for batch in snap.to_batches(columns=[top.name]):  # type: ignore[attr-defined]
                nulls = batch.column(0).null_count
                if nulls:
                    row = sample_row(batch, int(pc.index(batch.column(0).is_null(), True).as_py()))
                    raise ConstraintViolationError(
                        f"expected no nulls in column {top.name!r} to declare it NOT NULL, "
                        f"found {nulls} or more, e.g. row {row}; fill them first (update)",
                        constraint="NOT NULL",
                        column=top.name,
                        row=row,
                    )
        return evolved_metadata(snap, new), {"column": column}

    return commit_schema_change(table, build, operation="SET NOT NULL")
