"""The rules a table keeps about its own rows (format.md, "Constraints, generated and
identity columns"): NOT NULL at any depth, named CHECK constraints, generated columns
and identity columns, read from the table's Arrow schema, and their checks on batches.

Invariants:

* The rules live in the schema only: CHECK constraints under the schema metadata key
  :data:`CONSTRAINTS_KEY` (a JSON object of name to SQL text), a generated column's
  expression and an identity column's parameters and high-water mark in the field's
  metadata. So every writer that writes with the table's schema has them.
* :func:`check_rows` runs on every batch :func:`~lakelog.io.writer.write_files` writes
  (after :func:`~lakelog.io.schema.conform`, which computes a generated column a batch
  lacks), before any of its rows reach a file: a violation raises
  :class:`~lakelog.errors.ConstraintViolationError` naming the rule, the column and a
  row, and the writer deletes what it wrote.
* Identity values are given out by an :class:`IdentityAllocator` of one write, from the
  mark of the snapshot it read; the write commits the advanced mark with its files
  (:func:`with_marks`), and a lost race shifts them (``core.identity``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConstraintViolationError, InvalidArgumentError, SchemaMismatchError
from ..filters.values import ValueExpression, parse_value

__all__ = [
    "COMPUTED_KEY",
    "CONSTRAINTS_KEY",
    "GENERATION_KEY",
    "Guards",
    "Identity",
    "IdentityAllocator",
    "check_constraint_name",
    "check_declared",
    "check_nested_nulls",
    "check_rows",
    "constraints_of",
    "declare",
    "declares_guards",
    "generate_missing",
    "guards_of",
    "identity_of",
    "marks_of",
    "nested_not_null",
    "refuse_given_identity",
    "regenerate",
    "stale_generated",
    "sample_row",
    "with_constraints",
    "with_generated",
    "with_identity",
    "with_marks",
    "with_not_null",
    "without_marks",
]

CONSTRAINTS_KEY = b"lakelog.constraints"
GENERATION_KEY = b"lakelog.generation_expression"
COMPUTED_KEY = b"lakelog.computed_columns"
"""Batch (not table) schema metadata: the generated columns conform computed itself, by
name, comma-separated; the writer's check does not compare them again."""
IDENTITY_START = b"lakelog.identity.start"
IDENTITY_STEP = b"lakelog.identity.step"
IDENTITY_ALWAYS = b"lakelog.identity.always"
IDENTITY_MARK = b"lakelog.identity.high_water_mark"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ROW_CHARS = 300


@dataclass(frozen=True)
class Identity:
    """An identity column: values from ``start`` by ``step``; ``always``: given values
    are refused; ``mark``: the last value given out (None: none yet)."""

    column: str
    start: int
    step: int
    always: bool
    mark: int | None = None

    def first(self) -> int:
        """The next value to give out."""
        return self.start if self.mark is None else self.mark + self.step


@dataclass(frozen=True)
class Guards:
    """The rules of one schema, parsed."""

    checks: dict[str, ValueExpression] = field(default_factory=dict)
    generated: dict[str, ValueExpression] = field(default_factory=dict)
    identity: dict[str, Identity] = field(default_factory=dict)
    nested_not_null: dict[str, pa.DataType] = field(default_factory=dict)
    """Top-level columns holding a non-nullable nested field, with their types."""

    def __bool__(self) -> bool:
        return bool(self.checks or self.generated or self.identity or self.nested_not_null)


def constraints_of(schema: pa.Schema) -> dict[str, str]:
    """The CHECK constraints of ``schema``: name to SQL text, in the order added."""
    raw = (schema.metadata or {}).get(CONSTRAINTS_KEY)
    if not raw:
        return {}
    out = json.loads(raw)
    return {str(k): str(v) for k, v in out.items()}


def _nested_not_null(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return any(not f.nullable or _nested_not_null(f.type) for f in t)
    if pa.types.is_map(t):
        return not t.item_field.nullable or _nested_not_null(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return not t.value_field.nullable or _nested_not_null(t.value_type)
    return False


def _meta(f: pa.Field) -> Mapping[bytes, bytes]:
    return f.metadata or {}


def identity_of(f: pa.Field) -> Identity | None:
    """The identity parameters on field ``f``, or None."""
    meta = _meta(f)
    if IDENTITY_START not in meta:
        return None
    mark = meta.get(IDENTITY_MARK)
    return Identity(
        column=f.name,
        start=int(meta[IDENTITY_START]),
        step=int(meta[IDENTITY_STEP]),
        always=meta.get(IDENTITY_ALWAYS, b"true") == b"true",
        mark=None if mark is None else int(mark),
    )


def declares_guards(schema: pa.Schema) -> bool:
    """Whether ``schema`` holds anything of format version 9: a CHECK constraint, a
    generated or identity column, a non-nullable nested field."""
    if constraints_of(schema):
        return True
    for f in schema:
        meta = _meta(f)
        if GENERATION_KEY in meta or IDENTITY_START in meta or _nested_not_null(f.type):
            return True
    return False


@lru_cache(maxsize=64)
def _parsed(key: bytes) -> Guards:
    schema = pa.ipc.read_schema(pa.py_buffer(key))
    plain = without_marks(schema)
    checks = {
        name: parse_value(text, plain, what=f"CHECK constraint {name!r}", boolean=True)
        for name, text in constraints_of(schema).items()
    }
    generated = {}
    identity = {}
    for f in schema:
        text = _meta(f).get(GENERATION_KEY)
        if text is not None:
            generated[f.name] = parse_value(
                text.decode(), plain, what=f"the generation expression of {f.name!r}"
            )
        ident = identity_of(f)
        if ident is not None:
            identity[f.name] = ident
    nested = {f.name: f.type for f in schema if _nested_not_null(f.type)}
    return Guards(checks, generated, identity, nested)


def guards_of(schema: pa.Schema) -> Guards:
    """The rules of ``schema`` (parsed once per distinct schema)."""
    plain = not schema.metadata and not any(f.metadata for f in schema)
    if plain and not any(_nested_not_null(f.type) for f in schema):
        return Guards()
    return _parsed(schema.serialize().to_pybytes())


def sample_row(batch: pa.RecordBatch, index: int) -> str:
    """Row ``index`` of ``batch`` as text, cut to a readable length."""
    text = repr(batch.slice(index, 1).to_pylist()[0])
    return text if len(text) <= _ROW_CHARS else text[: _ROW_CHARS - 3] + "..."


def _first(mask: pa.Array) -> int | None:
    """The first position where ``mask`` is true, or None."""
    if not pc.any(mask).as_py():
        return None
    return int(pc.index(mask, True).as_py())


def _null_paths(
    arr: pa.Array, t: pa.DataType, path: str, rows: pa.Array | None
) -> Iterator[tuple[str, int]]:
    """(path, row) of the first null in each non-nullable field below ``arr``."""
    kids: list[tuple[pa.Field, pa.Array, pa.Array | None, str]] = []
    if pa.types.is_struct(t):
        flat = arr.flatten()  # type: ignore[attr-defined]
        for i, f in enumerate(t):
            kids.append((f, flat[i], rows, f"{path}.{f.name}"))
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        parents = pc.list_parent_indices(arr)
        values = pc.list_flatten(arr)
        where = parents if rows is None else rows.take(parents)
        if pa.types.is_map(t):
            entries = values.flatten()  # type: ignore[attr-defined]
            kids.append((t.item_field, entries[1], where, f"{path}{{}}"))
        else:
            kids.append((t.value_field, values, where, f"{path}[]"))
    for f, child, where, p in kids:
        if not f.nullable and child.null_count:
            # a null child of a null parent is no value at all: only a null under a
            # present parent breaks the rule
            present = arr.is_valid() if pa.types.is_struct(t) else None
            bad = child.is_null() if present is None else pc.and_(child.is_null(), present)
            at = _first(bad)
            if at is not None:
                yield p, int(at if where is None else where[at].as_py())
        yield from _null_paths(child, f.type, p, where)


def check_nested_nulls(batch: pa.RecordBatch, name: str, declared: pa.DataType) -> None:
    """Refuse a null in a field that column ``name``'s ``declared`` type says is not
    nullable, below the column (the column's own nulls are :func:`conform`'s)."""
    col = batch.column(name)
    for path, row in _null_paths(col, declared, name, None):
        raise ConstraintViolationError(
            f"expected no nulls in {path!r}, which the table declares NOT NULL, found "
            f"one in row {sample_row(batch, row)}; fill or drop such rows. Nothing was "
            f"written.",
            constraint="NOT NULL",
            column=path,
            row=sample_row(batch, row),
        )


def nested_not_null(t: pa.DataType) -> bool:
    """Whether type ``t`` holds a non-nullable field."""
    return _nested_not_null(t)


def check_rows(batch: pa.RecordBatch, guards: Guards) -> None:
    """Refuse ``batch`` (conformed to the table's schema) if a row breaks a rule:
    a null in a non-nullable nested field, a CHECK constraint false (null passes, as in
    SQL), a generated column's value other than its expression's."""
    for name, declared in guards.nested_not_null.items():
        check_nested_nulls(batch, name, declared)
    raw = (batch.schema.metadata or {}).get(COMPUTED_KEY)
    computed = set(raw.decode().split(",")) if raw else set()
    for column, expr in guards.generated.items():
        if column in computed:
            continue
        want = expr.evaluate(batch)
        got = batch.column(column)
        if want.type != got.type:
            want = want.cast(got.type)
        equal = pc.equal(got, want)
        if not got.null_count and not want.null_count and pc.all(equal).as_py():
            continue  # (one pass when no value is null, as for a column lakelog computed)
        same = pc.or_(pc.fill_null(equal, False), pc.and_(got.is_null(), want.is_null()))
        at = _first(pc.invert(same))
        if at is not None:
            raise ConstraintViolationError(
                f"expected column {column!r} to equal its generation expression "
                f"{expr.text!r} ({want[at].as_py()!r}), found {got[at].as_py()!r} in row "
                f"{sample_row(batch, at)}; leave the column out and lakelog computes it. "
                f"Nothing was written.",
                constraint="GENERATED",
                column=column,
                row=sample_row(batch, at),
            )
    for name, expr in guards.checks.items():
        ok = expr.evaluate(batch)
        if ok.null_count == len(ok) or pc.all(ok, skip_nulls=True).as_py():
            continue  # true or null in every row
        at = _first(pc.equal(ok, False))
        if at is not None:
            raise ConstraintViolationError(
                f"expected every row to satisfy CHECK constraint {name!r} ({expr.text}), "
                f"found row {sample_row(batch, at)} violating it (columns "
                f"{sorted(expr.columns)}); fix or drop such rows, or drop the constraint. "
                f"Nothing was written.",
                constraint=name,
                column=", ".join(sorted(expr.columns)),
                row=sample_row(batch, at),
            )


def generate_missing(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with each generated column of ``schema`` it lacks computed from its
    other columns (conformed to their types first)."""
    guards = guards_of(schema)
    missing = [c for c in guards.generated if c not in batch.schema.names]
    if not missing:
        return batch
    names = set(batch.schema.names)
    read = set().union(*(guards.generated[c].columns for c in missing))

    def column(f: pa.Field) -> pa.Array:
        if f.name not in names or f.name not in read:
            return pa.nulls(batch.num_rows, f.type)
        got = batch.column(f.name)
        return got if got.type == f.type else got.cast(f.type)

    base = pa.RecordBatch.from_arrays(
        [column(f) for f in schema], schema=pa.schema([pa.field(f.name, f.type) for f in schema])
    )
    arrays = list(batch.columns)
    fields = list(batch.schema)
    for c in missing:
        t = schema.field(c).type
        value = guards.generated[c].evaluate(base)
        try:
            arrays.append(value if value.type == t else value.cast(t))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise SchemaMismatchError(
                f"expected the generation expression of {c!r} ({guards.generated[c].text}) "
                f"to give {t} values, found {value.type} that does not convert: {e}"
            ) from None
        fields.append(pa.field(c, t))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def stale_generated(schema: pa.Schema, assigned: Iterable[str]) -> list[str]:
    """The generated columns of ``schema`` a change setting the columns ``assigned``
    must compute again: those it does not set that read one it sets."""
    given = set(assigned)
    return [
        c
        for c, expr in guards_of(schema).generated.items()
        if c not in given and expr.columns & given
    ]


def regenerate(batch: pa.RecordBatch, schema: pa.Schema, columns: Sequence[str]) -> pa.RecordBatch:
    """``batch`` (the columns of ``schema``) with the generated ``columns`` computed
    again from its other columns, as Delta does when an update changes what they read."""
    if not columns or not batch.num_rows:
        return batch
    fresh = generate_missing(batch.drop_columns(list(columns)), schema)
    return pa.RecordBatch.from_arrays(
        [fresh.column(n) for n in batch.schema.names], schema=batch.schema
    )


class IdentityAllocator:
    """The identity values of one write: batch after batch, each identity column a batch
    lacks gets the next values; :attr:`marks` are the last values given out, per
    column, for the commit to record (:func:`with_marks`)."""

    def __init__(self, schema: pa.Schema) -> None:
        self.identity = guards_of(schema).identity
        self._next = {c: i.first() for c, i in self.identity.items()}
        self.marks: dict[str, int] = {}
        self.bases = {c: i.mark for c, i in self.identity.items()}
        """The marks of the snapshot read: what a lost race compares against."""

    def __bool__(self) -> bool:
        return bool(self.identity)

    def fill(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its identity values; a value given for an ``ALWAYS`` column
        is refused."""
        for column, ident in self.identity.items():
            if column in batch.schema.names:
                if ident.always:
                    raise ConstraintViolationError(
                        f"expected no values for column {column!r}, which is GENERATED "
                        f"ALWAYS AS IDENTITY, found them in the data; leave the column "
                        f"out and lakelog numbers the rows. Nothing was written.",
                        constraint="IDENTITY",
                        column=column,
                        row=sample_row(batch, 0) if batch.num_rows else "",
                    )
                continue
            n = batch.num_rows
            start = self._next[column]
            values = pa.array(range(start, start + n * ident.step, ident.step), pa.int64())
            if n:
                self.marks[column] = start + (n - 1) * ident.step
                self._next[column] = start + n * ident.step
            batch = batch.append_column(column, values)
        return batch


# -- changing the rules in a schema ----------------------------------------------------


def check_constraint_name(name: object) -> str:
    """``name`` if it is a valid constraint name."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"expected a constraint name of letters, digits and '_' (not starting with a "
            f"digit), found {name!r}"
        )
    return name


def with_constraints(schema: pa.Schema, constraints: Mapping[str, str]) -> pa.Schema:
    """``schema`` holding exactly ``constraints`` (none: the key removed)."""
    meta = dict(schema.metadata or {})
    meta.pop(CONSTRAINTS_KEY, None)
    if constraints:
        meta[CONSTRAINTS_KEY] = json.dumps(dict(constraints)).encode()
    return schema.with_metadata(meta) if meta else schema.remove_metadata()


def _set_field_meta(f: pa.Field, values: Mapping[bytes, bytes | None]) -> pa.Field:
    meta = dict(_meta(f))
    for k, v in values.items():
        if v is None:
            meta.pop(k, None)
        else:
            meta[k] = v
    return f.with_metadata(meta) if meta else f.remove_metadata()


def with_generated(schema: pa.Schema, generated: Mapping[str, str]) -> pa.Schema:
    """``schema`` with the generation expressions of ``generated`` (column to SQL
    text), each parsed and checked against the other columns."""
    fields = list(schema)
    for column, text in generated.items():
        if column not in schema.names:
            raise InvalidArgumentError(
                f"expected generated= to name columns of the schema {schema.names}, found "
                f"{column!r}"
            )
        others = pa.schema([f for f in schema if f.name not in generated])
        expr = parse_value(text, others, what=f"the generation expression of {column!r}")
        i = schema.get_field_index(column)
        want = schema.field(column).type
        try:
            pa.array([], expr.type).cast(want)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise InvalidArgumentError(
                f"expected the generation expression of {column!r} ({text}) to give "
                f"{want} values, found {expr.type}; CAST it"
            ) from None
        fields[i] = _set_field_meta(fields[i], {GENERATION_KEY: text.encode()})
    return pa.schema(fields, metadata=schema.metadata)


def with_identity(
    schema: pa.Schema, column: str, *, start: int = 1, step: int = 1, always: bool = True
) -> pa.Schema:
    """``schema`` with ``column`` an identity column (an integer column)."""
    if column not in schema.names:
        raise InvalidArgumentError(
            f"expected identity= to name a column of the schema {schema.names}, found {column!r}"
        )
    f = schema.field(column)
    if not pa.types.is_integer(f.type):
        raise InvalidArgumentError(
            f"expected an integer column for identity column {column!r}, found {f.type}"
        )
    if isinstance(step, bool) or not isinstance(step, int) or step == 0:
        raise InvalidArgumentError(f"expected a non-zero integer identity step, found {step!r}")
    if isinstance(start, bool) or not isinstance(start, int):
        raise InvalidArgumentError(f"expected an integer identity start, found {start!r}")
    new = _set_field_meta(
        f.with_type(pa.int64()).with_nullable(False),
        {
            IDENTITY_START: str(start).encode(),
            IDENTITY_STEP: str(step).encode(),
            IDENTITY_ALWAYS: b"true" if always else b"false",
        },
    )
    return schema.set(schema.get_field_index(column), new)


def marks_of(schema: pa.Schema) -> dict[str, int | None]:
    """Each identity column's high-water mark."""
    return {c: i.mark for c, i in guards_of(schema).identity.items()}


def with_marks(schema: pa.Schema, marks: Mapping[str, int]) -> pa.Schema:
    """``schema`` with the identity high-water marks ``marks`` (column to last value)."""
    fields = list(schema)
    for column, mark in marks.items():
        i = schema.get_field_index(column)
        fields[i] = _set_field_meta(fields[i], {IDENTITY_MARK: str(mark).encode()})
    return pa.schema(fields, metadata=schema.metadata)


def without_marks(schema: pa.Schema) -> pa.Schema:
    """``schema`` without identity high-water marks: what a write depends on."""
    if not any(IDENTITY_MARK in _meta(f) for f in schema):
        return schema
    fields = [_set_field_meta(f, {IDENTITY_MARK: None}) for f in schema]
    return pa.schema(fields, metadata=schema.metadata)


def with_not_null(schema: pa.Schema, path: str) -> pa.Schema:
    """``schema`` with the field at ``path`` (``a``, ``a.b``, ``a[]``, ``a{}``: a
    list's element, a map's value) non-nullable."""
    parts = re.findall(r"[^.\[\]{}]+|\[\]|\{\}", path)
    if not parts or parts[0] not in schema.names:
        raise InvalidArgumentError(f"expected a column of the table {schema.names}, found {path!r}")

    def walk(f: pa.Field, rest: list[str]) -> pa.Field:
        if not rest:
            return f.with_nullable(False)
        t, step = f.type, rest[0]
        if step == "[]" and (pa.types.is_list(t) or pa.types.is_large_list(t)):
            kid = walk(t.value_field, rest[1:])
            make = pa.list_ if pa.types.is_list(t) else pa.large_list
            return f.with_type(make(kid))
        if step == "{}" and pa.types.is_map(t):
            kid = walk(t.item_field, rest[1:])
            return f.with_type(pa.map_(t.key_field, kid, keys_sorted=t.keys_sorted))
        if pa.types.is_struct(t) and t.get_field_index(step) >= 0:
            kids = [walk(k, rest[1:]) if k.name == step else k for k in t]
            return f.with_type(pa.struct(kids))
        raise InvalidArgumentError(
            f"expected {path!r} to name a field of the table, found no {step!r} in {f.name!r} ({t})"
        )

    i = schema.get_field_index(parts[0])
    return schema.set(i, walk(schema.field(i), parts[1:]))


def declare(
    schema: pa.Schema,
    *,
    generated: Mapping[str, str] | None = None,
    identity: Mapping[str, Mapping[str, object]] | None = None,
    constraints: Mapping[str, str] | None = None,
) -> pa.Schema:
    """A new table's ``schema`` with its rules (``create_table``'s keywords), every
    expression parsed and checked: refused with
    :class:`~lakelog.errors.InvalidArgumentError` otherwise."""
    for column, spec in (identity or {}).items():
        if not isinstance(spec, Mapping):
            raise InvalidArgumentError(
                f"expected identity={{{column!r}: {{'start': 1, 'step': 1, 'always': True}}}}, "
                f"found {spec!r} for {column!r}"
            )
        unknown = sorted(set(spec) - {"start", "step", "always"})
        if unknown:
            raise InvalidArgumentError(
                f"expected identity options among start, step, always, found {unknown}"
            )
        always = spec.get("always", True)
        if not isinstance(always, bool):
            raise InvalidArgumentError(f"expected always=True or False, found {always!r}")
        schema = with_identity(
            schema,
            column,
            start=spec.get("start", 1),  # type: ignore[arg-type]
            step=spec.get("step", 1),  # type: ignore[arg-type]
            always=always,
        )
    if generated:
        clash = sorted(set(generated) & set(identity or {}))
        if clash:
            raise InvalidArgumentError(
                f"expected a column to be generated or identity, found {clash} both"
            )
        schema = with_generated(schema, generated)
    if constraints:
        for name in constraints:
            check_constraint_name(name)
        schema = with_constraints(schema, {**constraints_of(schema), **constraints})
    check_declared(schema)
    return schema


def check_declared(schema: pa.Schema) -> None:
    """Refuse a schema whose rules do not parse, or a CHECK or generation expression
    reading an identity column (its values are given out at commit, after the check) or
    a generated column."""
    guards = guards_of(schema)
    idents = set(guards.identity)
    for what, exprs in (
        ("CHECK constraint", guards.checks),
        ("generated column", guards.generated),
    ):
        for name, expr in exprs.items():
            bad = sorted(expr.columns & (idents | set(guards.generated)))
            if bad:
                raise InvalidArgumentError(
                    f"expected {what} {name!r} ({expr.text}) to read no identity or "
                    f"generated column, found {bad}"
                )


def refuse_given_identity(columns: Iterable[str], schema: pa.Schema, *, where: str) -> None:
    """Refuse values given (``where``: by what) for a GENERATED ALWAYS identity column."""
    given = [c for c in columns if (i := guards_of(schema).identity.get(c)) and i.always]
    if given:
        raise ConstraintViolationError(
            f"expected no values for {given[0]!r}, which is GENERATED ALWAYS AS IDENTITY, "
            f"found them in {where}; leave the column out. Nothing was written.",
            constraint="IDENTITY",
            column=given[0],
            row="",
        )
