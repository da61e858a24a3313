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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..core.schema import evolved_metadata, readd_dropped
from ..errors import InvalidArgumentError, SchemaMismatchError
from ..io.schema import (
    bare_field,
    dropped_columns,
    widening_problems,
    widens,
    with_dropped,
)
from ..log import mapping
from ..log.actions import Commit, Metadata
from ..log.snapshot import Snapshot
from ..transaction import CommitResult, Replan

if TYPE_CHECKING:
    from ..core.handle import TableHandle

__all__ = ["add_columns", "commit_schema_change", "drop_columns", "widen_column"]

_BLOOM = "lakelog.parquet.bloom_filter_columns"
_CLUSTERING = "lakelog.clustering.columns"


# -- explicit changes -------------------------------------------------------------------


def add_columns(table: TableHandle, columns: Any) -> CommitResult:
    """Add nullable columns after the existing ones, or nullable fields at the end of a
    struct (keys that are paths, e.g. ``{("s", "z"): pa.int64()}``; a list's element is
    ``"element"``, a map's value ``"value"``), in one ``metadata`` commit. A nested field
    turns column mapping on (format.md, "Column ids, renames and nested fields"): it gets
    a column id, and a new physical name when the name was dropped there before, so it
    never reads the old values."""
    fields, nested = _fields(columns)
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
        shown = [f"{f.name}: {f.type}" for f in fields]
        for path, field in nested:
            evolved = _add_field(evolved, path, field)
            shown.append(f"{_resolve(evolved, path)[-1].shown}: {field.type}")
        params = {"columns": shown}
        return evolved_metadata(snap, evolved, column_mapping=bool(nested)), params

    return commit_schema_change(table, build, operation="ADD COLUMNS")


def _add_field(schema: pa.Schema, path: FieldPath, field: pa.Field) -> pa.Schema:
    """``schema`` with ``field`` added at the end of the struct ``path[:-1]`` names."""
    parent = _resolve(schema, path[:-1], full=path)[-1]
    t = parent.field.type
    where = f"{parent.shown}.{field.name}"
    if parent.role == "key":
        raise SchemaMismatchError(
            f"expected a struct to add field {where!r} to, found {parent.shown!r}, a map's "
            f"key: map keys do not change."
        )
    if not pa.types.is_struct(t):
        raise SchemaMismatchError(
            f"expected a struct to add field {where!r} to, found {parent.shown!r} of type "
            f"{t}; a field is added inside a struct (a list's element is 'element', a map's "
            f"value 'value')."
        )
    names = [t.field(i).name for i in range(t.num_fields)]
    if field.name in names:
        raise SchemaMismatchError(
            f"expected a new field name in {parent.shown!r}, found {field.name!r} already "
            f"in it (fields {names}); choose another name, or widen_column() to change a "
            f"field's type."
        )
    return _edit_schema(
        schema, path[:-1], lambda f: f.with_type(pa.struct([*_struct_fields(f.type), field]))
    )


def _struct_fields(t: pa.DataType) -> list[pa.Field]:
    return [t.field(i) for i in range(t.num_fields)]


def drop_columns(table: TableHandle, names: Any) -> CommitResult:
    """Remove columns from the schema, or fields from a struct (paths, e.g.
    ``[("s", "x")]``; its struct keeps at least one field), in one ``metadata`` commit;
    files keep their values, which are no longer read. Partition columns cannot be
    dropped. A nested drop turns column mapping on and lists the field's physical path
    (format.md, "Column ids, renames and nested fields")."""
    wanted, paths = _names(names, what="drop_columns")

    def build(snap: Snapshot) -> tuple[Metadata, dict[str, Any]]:
        schema = snap.schema
        unknown = [n for n in wanted if n not in schema.names]
        if unknown:
            raise InvalidArgumentError(
                f"expected columns of the table {schema.names} to drop, found unknown {unknown}"
            )
        parts = [n for n in wanted if n in snap.partition_by or n in snap.partition_sources]
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
        # the names files hold the values under: physical ones with column ids
        stored = [mapping.physical_name(schema.field(n)) for n in wanted]
        evolved = with_dropped(
            pa.schema(kept, metadata=schema.metadata), [*dropped_columns(schema), *stored]
        )
        # nested fields of columns that stay: checked on the schema before, then removed
        inner = [p for p in paths if p[0] not in wanted]
        evolved, gone = _drop_fields(evolved, inner)
        props = dict(snap.metadata.properties)
        bloom = [c.strip() for c in props.get(_BLOOM, "").split(",") if c.strip()]
        if any(c in wanted for c in bloom):
            # the property names only columns of the table: drop them from it too
            left = [c for c in bloom if c not in wanted]
            if left:
                props[_BLOOM] = ",".join(left)
            else:
                props.pop(_BLOOM)
        params = {"columns": [*wanted, *gone]}
        return evolved_metadata(snap, evolved, props, column_mapping=bool(inner)), params

    return commit_schema_change(table, build, operation="DROP COLUMNS")


def _drop_fields(schema: pa.Schema, paths: Sequence[FieldPath]) -> tuple[pa.Schema, list[str]]:
    """``schema`` without the struct fields at ``paths``, each listed by its path of
    physical names (:func:`lakelog.log.mapping.with_dropped_fields`); and the paths as
    messages show them."""
    if not paths:
        return schema, []
    shown: list[str] = []
    physical: list[list[str]] = []
    by_parent: dict[str, tuple[_Step, set[str]]] = {}  # by the struct's shown path
    for path in paths:
        steps = _resolve(schema, path)
        last = steps[-1]
        if last.role != "field":
            raise SchemaMismatchError(
                f"expected a field of a struct to drop, found {last.shown!r}, a "
                f"{'map' if last.role in ('key', 'value') else 'list'}'s {last.role}; drop "
                f"the field that holds it, or a field inside it."
            )
        parent = steps[-2]
        by_parent.setdefault(parent.shown, (parent, set()))[1].add(path[-1])
        shown.append(last.shown)
        physical.append([mapping.physical_name(s.field) for s in steps])
    for step, names in by_parent.values():
        left = [f.name for f in _struct_fields(step.field.type) if f.name not in names]
        if not left:
            raise SchemaMismatchError(
                f"expected struct {step.shown!r} to keep at least one field, found every "
                f"one of them dropped ({sorted(names)}); keep one, or drop {step.shown!r} "
                f"itself."
            )
    for path in sorted(paths, key=len, reverse=True):
        schema = _edit_schema(schema, path, lambda f: None)
    schema = mapping.with_dropped_fields(schema, [*mapping.dropped_fields(schema), *physical])
    return schema, shown


def widen_column(table: TableHandle, name: Any, type: pa.DataType) -> CommitResult:
    """Change a column, or a nested field (a path, e.g. ``("s", "x")``), to a wider type
    (``int32`` -> ``int64``, ``float32`` -> ``float64``, a struct with more fields, ...;
    see :func:`lakelog.io.schema.widens`). Files keep the old type and are read
    converted. A change of a nested type turns column mapping on."""
    path = _as_path(name, what="widen_column")
    if not isinstance(type, pa.DataType):
        raise InvalidArgumentError(f"expected a pyarrow type such as pa.int64(), found {type!r}")

    def build(snap: Snapshot) -> tuple[Metadata, dict[str, Any]]:
        schema = snap.schema
        steps = _resolve(schema, path)
        step = steps[-1]
        field, shown = step.field, step.shown
        what = "column" if len(path) == 1 else "field"
        if field.type == type:
            raise InvalidArgumentError(
                f"expected a type other than the {what}'s, found {shown!r} already {type}"
            )
        if step.role == "key":
            raise SchemaMismatchError(
                f"expected a field that can widen, found {shown!r}, a map's key: map keys "
                f"do not change type."
            )
        problems = widening_problems(field.type, type, path=shown)
        if problems or not widens(field.type, type):
            detail = f": {'; '.join(problems)}" if problems and _is_nested(type) else ""
            raise SchemaMismatchError(
                f"expected a widening of {what} {shown!r} ({field.type}): a type every "
                f"value and statistic of it converts to exactly (int8 -> int16 -> int32 -> "
                f"int64, up to 32-bit integers -> float64, float32 -> float64, decimals "
                f"with more digits, structs with new nullable fields at the end), found "
                f"{type}{detail}{_why_not(field.type, type)}. Add a new {what} of that "
                f"type instead."
            )
        if path[0] in snap.partition_by and not (
            pa.types.is_integer(field.type) and pa.types.is_integer(type)
        ):
            raise SchemaMismatchError(
                f"expected an integer type for partition column {shown!r} ({field.type}), "
                f"found {type}: partition values are kept as strings in their type's form."
            )
        evolved = _edit_schema(schema, path, lambda f: _graft(f, type))
        nested = len(path) > 1 or _is_nested(field.type)
        params = {"column": shown, "from": str(field.type), "to": str(type)}
        return evolved_metadata(snap, evolved, column_mapping=nested), params

    return commit_schema_change(table, build, operation="WIDEN COLUMN")


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


def commit_schema_change(
    table: TableHandle,
    build: Callable[[Snapshot], tuple[Metadata, Mapping[str, Any]]],
    *,
    operation: str,
) -> CommitResult:
    """Commit the metadata ``build`` makes of the latest snapshot; when a concurrent
    commit wins, the transaction builds it again on the snapshot the winners made (its
    rebuild step; bounded by the table's commit attempts and timeout)."""
    snap = table.snapshot()  # the latest
    md, params = build(snap)

    def rebuild(fresh: Snapshot, winners: Sequence[Commit] | None) -> Replan:
        again, again_params = build(fresh)
        return Replan([again], parameters=again_params)

    return table.commit(
        [md],
        operation=operation,
        kind="metadata",
        read_snapshot=snap,
        parameters=params,
        rebuild=rebuild,
    )


def _fields(columns: Any) -> tuple[list[pa.Field], list[tuple[FieldPath, pa.Field]]]:
    """Columns to add as nullable fields (a Field, Fields, a Schema, or names to types),
    and nested fields to add (paths to types: the struct's path, then the new name)."""
    nested: list[tuple[FieldPath, pa.Field]] = []
    if isinstance(columns, Mapping):
        top = {}
        for key, t in columns.items():
            path = _as_path(key, what="add_columns")
            if len(path) == 1:
                top[path[0]] = t
                continue
            if not isinstance(t, pa.DataType):
                raise InvalidArgumentError(
                    f"expected a pyarrow type for field {_show(path)!r}, found {t!r}; for "
                    f"example add_columns({{{path!r}: pa.int64()}})"
                )
            nested.append((path, _new_field(pa.field(path[-1], t), shown=_show(path))))
        if not top:
            return [], nested
        columns = top
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
    return [bare_field(f) for f in fields], nested


def _new_field(field: pa.Field, *, shown: str) -> pa.Field:
    """A nested field to add, checked: named, typed, storable; without metadata."""
    problems = []
    if not field.name:
        problems.append(f"{shown!r} does not end in a field name")
    if field.type == pa.null():
        problems.append(f"{shown!r} has type null")
    if problems:
        raise InvalidArgumentError(
            "expected a named, typed field to add (files written before hold no values for "
            "it, so it reads as null), found " + "; ".join(problems)
        )
    _check_parquet_type(field)
    return bare_field(field)


def _check_parquet_type(field: pa.Field) -> None:
    try:
        pq.write_table(pa.schema([field]).empty_table(), io.BytesIO())
    except (pa.ArrowException, ValueError, TypeError) as e:
        raise InvalidArgumentError(
            f"expected a column type Parquet can store, found {field.name!r}: {field.type} ({e})"
        ) from e


def _names(names: Any, *, what: str) -> tuple[list[str], list[FieldPath]]:
    """Columns (names) and nested fields (paths of two names or more) to change."""
    listed = [names] if isinstance(names, str) else list(names) if _iterable(names) else []
    if not listed or not all(isinstance(n, (str, tuple, list)) for n in listed):
        raise InvalidArgumentError(
            f"expected column names or paths for {what}, found {names!r}; for example "
            f"{what}(['col']) or {what}([('struct_col', 'field')])"
        )
    paths = list(dict.fromkeys(_as_path(n, what=what) for n in listed))
    top = [p[0] for p in paths if len(p) == 1]
    deep = [p for p in paths if len(p) > 1]
    # a field inside one dropped with it goes with it
    deep = [p for p in deep if not any(p[: len(q)] == q for q in deep if len(q) < len(p))]
    return top, deep


def _iterable(x: Any) -> bool:
    return isinstance(x, Iterable) and not isinstance(x, (bytes, Mapping))


# -- nested fields, by path -----------------------------------------------------------
#
# A path is a tuple (or list) of names from a top-level column down: a struct's field by
# its name, a list's element as "element", a map's value as "value" (and its key as
# "key", which never changes). Messages show it as format.md does: ``s.items[].x``.

FieldPath = tuple[str, ...]


@dataclass(frozen=True)
class _Step:
    """One field on a path: the field, how messages show the path to it, and what it is
    to its parent ("column", "field" of a struct, list "element", map "key"/"value")."""

    field: pa.Field
    shown: str
    role: str


def _as_path(key: Any, *, what: str) -> FieldPath:
    """A column name or a path of names, as a tuple."""
    if isinstance(key, str):
        return (key,)
    if isinstance(key, (tuple, list)) and key and all(isinstance(n, str) for n in key):
        return tuple(key)
    raise InvalidArgumentError(
        f"expected a column name or a path of names for {what}, found {key!r}; for example "
        f"'col' or ('struct_col', 'field') (a list's element is 'element', a map's value "
        f"'value')"
    )


def _show(path: FieldPath) -> str:
    """``path`` as messages show it, before it is resolved."""
    out = path[0]
    for n in path[1:]:
        out += "[]" if n == "element" else "{}" if n == "value" else f".{n}"
    return out


def _resolve(schema: pa.Schema, path: FieldPath, *, full: FieldPath = ()) -> list[_Step]:
    """The fields along ``path``, from the top-level column down (``full``: the path
    messages name, when ``path`` is the start of it).

    Raises:
        InvalidArgumentError: a name on the path is not in its struct.
        SchemaMismatchError: the path goes on below a field that has no fields.
    """
    whole = _show(full or path)
    head = path[0]
    if head not in schema.names:
        raise InvalidArgumentError(
            f"expected a column of the table {schema.names}, found unknown {head!r}"
            + (f" (in path {whole!r})" if len(full or path) > 1 else "")
        )
    steps = [_Step(schema.field(head), head, "column")]
    for name in path[1:]:
        parent = steps[-1]
        t = parent.field.type
        if pa.types.is_struct(t):
            kids = [t.field(i) for i in range(t.num_fields) if t.field(i).name == name]
            if not kids:
                names = [t.field(i).name for i in range(t.num_fields)]
                raise InvalidArgumentError(
                    f"expected a field of {parent.shown!r} {names}, found unknown {name!r} "
                    f"(in path {whole!r})"
                )
            steps.append(_Step(kids[0], f"{parent.shown}.{name}", "field"))
        elif _is_list(t) and name in ("element", t.value_field.name):
            steps.append(_Step(t.value_field, f"{parent.shown}[]", "element"))
        elif pa.types.is_map(t) and name in ("value", t.item_field.name):
            steps.append(_Step(t.item_field, f"{parent.shown}{{}}", "value"))
        elif pa.types.is_map(t) and name in ("key", t.key_field.name):
            steps.append(_Step(t.key_field, f"{parent.shown}{{key}}", "key"))
        else:
            inside = (
                "'element' (a list's element)"
                if _is_list(t)
                else "'value' (a map's value) or 'key'"
                if pa.types.is_map(t)
                else "nothing: it has no fields"
            )
            raise SchemaMismatchError(
                f"expected a path through structs, lists and maps, found {name!r} below "
                f"{parent.shown!r} ({t}), which holds {inside} (path {whole!r})"
            )
    return steps


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def _edit(field: pa.Field, rest: FieldPath, fn: Callable[[pa.Field], pa.Field | None]) -> pa.Field:
    """``field`` with ``fn`` applied to its nested field at ``rest`` (a resolved path;
    ``fn`` returning None removes a struct's field). Every other field keeps its type and
    metadata (column ids)."""
    if not rest:
        got = fn(field)
        assert got is not None  # only a struct's field is removed, one level up
        return got
    t, name = field.type, rest[0]
    if pa.types.is_struct(t):
        kids: list[pa.Field] = []
        for i in range(t.num_fields):
            c = t.field(i)
            if c.name != name:
                kids.append(c)
            elif len(rest) > 1:
                kids.append(_edit(c, rest[1:], fn))
            else:
                new = fn(c)
                if new is not None:
                    kids.append(new)
        return field.with_type(pa.struct(kids))
    if pa.types.is_map(t):
        key, value = t.key_field, t.item_field
        if name in ("key", key.name) and name not in ("value", value.name):
            key = _edit(key, rest[1:], fn)
        else:
            value = _edit(value, rest[1:], fn)
        return field.with_type(pa.map_(key, value, keys_sorted=t.keys_sorted))
    element = _edit(t.value_field, rest[1:], fn)
    if pa.types.is_fixed_size_list(t):
        return field.with_type(pa.list_(element, t.list_size))
    if pa.types.is_large_list(t):
        return field.with_type(pa.large_list(element))
    return field.with_type(pa.list_(element))


def _edit_schema(
    schema: pa.Schema, path: FieldPath, fn: Callable[[pa.Field], pa.Field | None]
) -> pa.Schema:
    i = schema.get_field_index(path[0])
    return schema.set(i, _edit(schema.field(i), path[1:], fn))


def _graft(old: pa.Field, new: pa.DataType) -> pa.Field:
    """``old`` with type ``new`` (a widening of it), keeping the metadata (column ids) and
    nullability of every field ``old`` already has; fields ``new`` adds come bare."""
    t = old.type
    if pa.types.is_struct(t) and pa.types.is_struct(new):
        have = {t.field(i).name: t.field(i) for i in range(t.num_fields)}
        kids = []
        for i in range(new.num_fields):
            c = new.field(i)
            kids.append(_graft(have[c.name], c.type) if c.name in have else bare_field(c))
        return old.with_type(pa.struct(kids))
    if pa.types.is_map(t) and pa.types.is_map(new):
        value = _graft(t.item_field, new.item_type)
        return old.with_type(pa.map_(t.key_field, value, keys_sorted=t.keys_sorted))
    if _is_list(t) and _is_list(new):
        element = _graft(t.value_field, new.value_type)
        if pa.types.is_fixed_size_list(new):
            return old.with_type(pa.list_(element, new.list_size))
        if pa.types.is_large_list(new):
            return old.with_type(pa.large_list(element))
        return old.with_type(pa.list_(element))
    return old.with_type(new)


def _is_nested(t: pa.DataType) -> bool:
    return bool(pa.types.is_struct(t) or pa.types.is_map(t) or _is_list(t))
