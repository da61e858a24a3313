"""Checking incoming data against the table schema before anything is written, and the
rules of schema evolution: which type changes widen safely, how a ``merge`` write
evolves the schema, and how rows of a file written under an older schema are read
(``docs/format.md``, "Schema evolution")."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConstraintViolationError, InvalidArgumentError, SchemaMismatchError
from .guards import (
    COMPUTED_KEY,
    GENERATION_KEY,
    check_nested_nulls,
    generate_missing,
    identity_of,
    nested_not_null,
    sample_row,
)

__all__ = [
    "DROPPED_KEY",
    "Data",
    "bare_field",
    "check_data_columns",
    "check_schema",
    "conform",
    "dropped_columns",
    "duplicate_columns",
    "file_columns",
    "merge_schema",
    "nested_changes",
    "readable_as",
    "to_reader",
    "widening_problems",
    "widens",
    "with_dropped",
]

DROPPED_KEY = b"lakelog.dropped_columns"
"""Schema metadata key: JSON list of dropped names whose values live files may hold."""

Data: TypeAlias = "pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch]"


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    if a == b:
        return True
    strings = (pa.string(), pa.large_string(), pa.string_view())
    if a in strings and b in strings:
        return True
    binaries = (pa.binary(), pa.large_binary(), pa.binary_view())
    if a in binaries and b in binaries:
        return True
    if pa.types.is_dictionary(a):
        return _same_type(a.value_type, b)
    return False


_SIGNED = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}
_UNSIGNED = {pa.uint8(): 8, pa.uint16(): 16, pa.uint32(): 32, pa.uint64(): 64}
_FLOATS = {pa.float16(): 16, pa.float32(): 32, pa.float64(): 64}


def widens(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether changing a column from ``source`` to ``target`` is a safe widening: every
    value, and every statistic recorded for files written before (JSON numbers, decimal
    strings), is exactly the same value in ``target`` (format.md, "Schema evolution").

    Nested types (format.md, "Column ids, renames and nested fields") widen when their
    shape stays and at least one field changes, none for the worse: a struct keeps every
    field, in its order and nullability, each the same type or a widening of it, and may
    gain nullable fields at its end; a list (or large list) widens when its element does
    (a list and a large list of the same element change into each other too: the same
    Parquet type, as ``string`` and ``large_string``); a map keeps its key type and widens
    when its value does. Dropping a field, reordering fields or making one non-nullable
    is not a widening.
    """
    if _kind(source) is not None or _kind(target) is not None:
        problems: list[str] = []
        return _widen_problems(source, target, "", problems) and not problems
    return _widens_leaf(source, target)


def _widens_leaf(source: pa.DataType, target: pa.DataType) -> bool:
    if source == target:
        return False
    if source in _SIGNED:
        w = _SIGNED[source]
        return _SIGNED.get(target, 0) > w or (target == pa.float64() and w <= 32)
    if source in _UNSIGNED:
        w = _UNSIGNED[source]
        return (
            _UNSIGNED.get(target, 0) > w
            or _SIGNED.get(target, 0) > w
            or (target == pa.float64() and w <= 32)
        )
    if source in _FLOATS:
        return _FLOATS.get(target, 0) > _FLOATS[source]
    if pa.types.is_decimal128(source) or pa.types.is_decimal256(source):
        if not (pa.types.is_decimal256(target) or pa.types.is_decimal128(target)):
            return False
        if pa.types.is_decimal256(source) and pa.types.is_decimal128(target):
            return False
        p, sc = source.precision, source.scale  # type: ignore[attr-defined]
        p2, sc2 = target.precision, target.scale  # type: ignore[attr-defined]
        return bool(sc2 >= sc and p2 - sc2 >= p - sc)
    return _same_type(source, target) and not bool(pa.types.is_dictionary(source))


def readable_as(stored: pa.DataType, target: pa.DataType, *, dropped: bool = True) -> bool:
    """Whether values stored as ``stored`` read as ``target`` without loss: the same type
    (up to string/binary width and dictionary encoding) or a widening of it.

    Nested types are read field by field, by name (as Arrow's cast of a struct does): a
    stored struct reads as a target struct when each field both have reads as the
    target's, every target field the stored one lacks is nullable (it reads as null), and
    stored fields the target lacks are ignored (``dropped``: they were dropped from the
    table; pass False where such a field would be lost instead, e.g. when deciding a
    schema for files or data); lists (and large lists) read element by element, maps
    value by value with the same key type.
    """
    if _kind(stored) is None and _kind(target) is None:
        return _same_type(stored, target) or _widens_leaf(stored, target)
    problems: list[str] = []
    _read_problems(stored, target, "", problems, data=False, extra_ok=dropped)
    return not problems


def _fits(got: pa.DataType, want: pa.DataType) -> bool:
    """Incoming data of type ``got`` converts to a column of type ``want`` exactly (a
    null type, also of a nested field, converts to anything; unlike a stored file, data
    may not hold a nested field the table lacks: it would be lost)."""
    if _kind(got) is None and _kind(want) is None:
        return readable_as(got, want) or got == pa.null()
    problems: list[str] = []
    _read_problems(got, want, "", problems, data=True)
    return not problems


# -- nested types ----------------------------------------------------------------------
#
# Paths name nested fields as format.md does: a struct's field after a dot (``s.x``), a
# list's element as ``[]`` (``s.items[].x``), a map's value as ``{}`` (``m{}.x``).


def _kind(t: pa.DataType) -> str | None:
    """The nested shape of ``t`` (None: not nested, or not a shape that evolves)."""
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list"
    if pa.types.is_fixed_size_list(t):
        return "fixed_size_list"
    if pa.types.is_map(t):
        return "map"
    return None


def _fields_of(t: pa.DataType) -> list[pa.Field]:
    return [t.field(i) for i in range(t.num_fields)]


def _child_path(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _where(path: str) -> str:
    """How a message names the field at ``path``: a column (top level), a nested field,
    or (the empty path) the value itself."""
    if not path:
        return "the value"
    nested = any(c in path for c in ".[{")
    return f"{'field' if nested else 'column'} {path!r}"


def _read_problems(
    stored: pa.DataType,
    target: pa.DataType,
    path: str,
    out: list[str],
    *,
    data: bool,
    extra_ok: bool | None = None,
) -> None:
    """Append to ``out`` why values of type ``stored`` do not read as ``target``, naming
    the nested field's path. ``data``: incoming data rather than a stored file (a null
    type fits, and unless ``extra_ok``, a field the target lacks is refused); a stored
    file's fields the target lacks are ignored unless ``extra_ok`` is False."""
    if extra_ok is None:
        extra_ok = not data
    if data and stored == pa.null():
        return
    ks, kt = _kind(stored), _kind(target)
    if ks is None and kt is None:
        if not (_same_type(stored, target) or _widens_leaf(stored, target)):
            out.append(f"{_where(path)}: expected {target}, found {stored}")
        return
    if ks != kt:
        out.append(f"{_where(path)}: expected {target}, found {stored}")
        return
    if kt == "struct":
        have = {f.name: f for f in _fields_of(stored)}
        if len(have) < stored.num_fields:
            out.append(f"{_where(path)}: expected distinct field names, found {stored}")
            return
        wanted = {f.name for f in _fields_of(target)}
        for f in _fields_of(target):
            p = _child_path(path, f.name)
            got = have.get(f.name)
            if got is None:
                if not f.nullable:
                    out.append(f"missing non-nullable field {p!r} ({f.type})")
                continue
            _read_problems(got.type, f.type, p, out, data=data, extra_ok=extra_ok)
        if not extra_ok:
            extra = [_child_path(path, n) for n in have if n not in wanted]
            if extra:
                out.append(f"unexpected fields {extra}")
    elif kt == "map":
        if not _same_type(stored.key_type, target.key_type):
            out.append(
                f"keys of {_where(path)}: expected {target.key_type}, found {stored.key_type} "
                f"(map keys do not change type)"
            )
        _read_problems(
            stored.item_type, target.item_type, f"{path}{{}}", out, data=data, extra_ok=extra_ok
        )
    else:
        if kt == "fixed_size_list" and stored.list_size != target.list_size:
            out.append(f"{_where(path)}: expected {target}, found {stored}")
            return
        _read_problems(
            stored.value_type, target.value_type, f"{path}[]", out, data=data, extra_ok=extra_ok
        )


def _widen_problems(source: pa.DataType, target: pa.DataType, path: str, out: list[str]) -> bool:
    """Whether changing ``source`` to ``target`` changes anything (a widening, or a field
    added); why it is not a widening goes to ``out``, naming the nested field's path."""
    ks, kt = _kind(source), _kind(target)
    if ks is None and kt is None:
        if source == target:
            return False
        if _widens_leaf(source, target):
            return True
        out.append(f"{_where(path)}: {source} does not widen to {target}")
        return False
    if ks != kt:
        out.append(f"{_where(path)}: {source} does not widen to {target}")
        return False
    if kt == "struct":
        old, new = _fields_of(source), _fields_of(target)
        names = [f.name for f in new]
        if len(set(names)) < len(names):
            out.append(f"{_where(path)}: expected distinct field names, found {target}")
            return False
        kept = [f.name for f in old]
        gone = [_child_path(path, n) for n in kept if n not in names]
        if gone:
            out.append(f"fields {gone} dropped (drop them with drop_columns)")
            return False
        if names[: len(kept)] != kept:
            out.append(
                f"{_where(path)}: fields reordered ({kept} -> {names}); new fields go at the "
                f"struct's end"
            )
            return False
        changed = False
        for a, b in zip(old, new, strict=False):
            p = _child_path(path, a.name)
            if a.nullable and not b.nullable:
                out.append(f"field {p!r} made non-nullable")
            changed = _widen_problems(a.type, b.type, p, out) or changed
        for b in new[len(old) :]:
            p = _child_path(path, b.name)
            if not b.nullable:
                out.append(f"new field {p!r} is non-nullable (older rows hold no value for it)")
            if b.type == pa.null():
                out.append(f"new field {p!r} has type null")
            changed = True
        return changed
    if kt == "map":
        if source.key_type != target.key_type:
            out.append(
                f"keys of {_where(path)}: {source.key_type} -> {target.key_type} (map keys do "
                f"not change type)"
            )
            return False
        return _widen_problems(source.item_type, target.item_type, f"{path}{{}}", out)
    if kt == "fixed_size_list" and source.list_size != target.list_size:
        out.append(f"{_where(path)}: {source} does not widen to {target}")
        return False
    changed = _widen_problems(source.value_type, target.value_type, f"{path}[]", out)
    return changed or source.id != target.id  # list -> large_list


def _merge_field(field: pa.Field, got: pa.DataType, path: str, out: list[str]) -> pa.Field:
    """``field`` (of the table, at ``path``) evolved to take data of type ``got`` in a
    ``merge`` write: nested fields the data adds are appended (nullable, without
    metadata) to their struct, nested fields it holds wider are widened, everything
    else keeps its type and metadata (column ids). ``field`` itself when nothing changes;
    why the data does not fit goes to ``out``."""
    t = field.type
    kt = _kind(t)
    if kt is not None and kt == _kind(got):
        if kt == "struct":
            have = {f.name: f for f in _fields_of(got)}
            if len(have) < got.num_fields:
                out.append(f"{_where(path)}: expected distinct field names, found {got}")
                return field
            kids: list[pa.Field] = []
            changed = False
            for f in _fields_of(t):
                g = have.get(f.name)
                if g is None:
                    if not f.nullable:
                        out.append(
                            f"missing field {_child_path(path, f.name)!r}, which is "
                            f"non-nullable ({f.type})"
                        )
                    kids.append(f)
                    continue
                new = _merge_field(f, g.type, _child_path(path, f.name), out)
                changed = changed or new is not f
                kids.append(new)
            names = {f.name for f in _fields_of(t)}
            for g in _fields_of(got):
                if g.name in names:
                    continue
                if g.type == pa.null():
                    out.append(
                        f"new field {_child_path(path, g.name)!r} has type null (no values); "
                        f"cast it to the type it should have"
                    )
                    continue
                kids.append(bare_field(g).with_nullable(True))
                changed = True
            return field.with_type(pa.struct(kids)) if changed else field
        if kt == "map":
            if not _same_type(got.key_type, t.key_type):
                out.append(
                    f"keys of {_where(path)}: the table has {t.key_type}, the data "
                    f"{got.key_type} (map keys do not change type)"
                )
                return field
            item = t.item_field  # each access makes a new object: compared by identity
            value = _merge_field(item, got.item_type, f"{path}{{}}", out)
            if value is item:
                return field
            return field.with_type(pa.map_(t.key_field, value, keys_sorted=t.keys_sorted))
        if kt == "list" or got.list_size == t.list_size:
            old = t.value_field
            element = _merge_field(old, got.value_type, f"{path}[]", out)
            if element is old:
                return field
            if kt == "fixed_size_list":
                return field.with_type(pa.list_(element, t.list_size))
            if pa.types.is_large_list(t):
                return field.with_type(pa.large_list(element))
            return field.with_type(pa.list_(element))
    if _fits(got, t):
        return field
    if _kind(t) is None and _kind(got) is None and _widens_leaf(t, got):
        return field.with_type(got)
    out.append(
        f"{_where(path)}: the table has {t}, the data {got}, and neither widens safely to the other"
    )
    return field


def widening_problems(source: pa.DataType, target: pa.DataType, *, path: str) -> list[str]:
    """Why changing the field at ``path`` from ``source`` to ``target`` is not a widening
    (:func:`widens`), each naming the nested field's path (``s.items[].x``); empty when
    it is one, or when nothing changes."""
    out: list[str] = []
    if _kind(source) is None and _kind(target) is None:
        if source != target and not _widens_leaf(source, target):
            out.append(f"{_where(path)}: {source} does not widen to {target}")
        return out
    _widen_problems(source, target, path, out)
    return out


def nested_changes(before: pa.Schema, after: pa.Schema) -> list[str]:
    """Paths of the nested fields ``after`` adds to, or changes in, the columns both
    schemas have (``s.z``, ``events[].score``): what needs column ids (format.md,
    "Column ids, renames and nested fields"). A changed top-level type that is not
    nested is not listed."""
    out: list[str] = []
    names = set(after.names)
    for f in before:
        if f.name in names and _kind(f.type) is not None:
            _changed_paths(f.type, after.field(f.name).type, f.name, out)
    return out


def _changed_paths(a: pa.DataType, b: pa.DataType, path: str, out: list[str]) -> None:
    ka = _kind(a)
    if ka is None or ka != _kind(b):
        if a != b:
            out.append(path)
        return
    if ka == "struct":
        old = {f.name: f for f in _fields_of(a)}
        for f in _fields_of(b):
            p = _child_path(path, f.name)
            if f.name in old:
                _changed_paths(old[f.name].type, f.type, p, out)
            else:
                out.append(p)
    elif ka == "map":
        _changed_paths(a.item_type, b.item_type, f"{path}{{}}", out)
    else:
        _changed_paths(a.value_type, b.value_type, f"{path}[]", out)
        if a.id != b.id:
            out.append(path)


def bare_field(field: pa.Field) -> pa.Field:
    """``field`` without metadata, its nested fields too (a new field gets its column
    id and physical name from the table, never from the data)."""
    t = field.type
    k = _kind(t)
    if k == "struct":
        t = pa.struct([bare_field(f) for f in _fields_of(t)])
    elif k == "map":
        t = pa.map_(bare_field(t.key_field), bare_field(t.item_field), keys_sorted=t.keys_sorted)
    elif k == "fixed_size_list":
        t = pa.list_(bare_field(t.value_field), t.list_size)
    elif k == "list":
        bare = bare_field(t.value_field)
        t = pa.large_list(bare) if pa.types.is_large_list(t) else pa.list_(bare)
    return pa.field(field.name, t, nullable=field.nullable)


def check_schema(data_schema: pa.Schema, table_schema: pa.Schema) -> None:
    """Raise :class:`SchemaMismatchError` unless the data fits the table.

    Column order may differ; string/binary widths, dictionary encoding and types that
    widen to the table's (``int32`` data in an ``int64`` column, a column of nulls) are
    converted; names must otherwise match exactly (see :func:`merge_schema` to evolve).
    Nested fields are matched by name the same way: a struct in the data may lack a
    nullable field (written as null) but not hold one the table lacks (it would be lost);
    a refusal names the field's path (``s.items[].x``).
    """
    check_data_columns(data_schema)
    problems: list[str] = []
    data_names = set(data_schema.names)
    for field in table_schema:
        if field.name not in data_names:
            if not _written_by_lakelog(field):
                problems.append(f"missing column {field.name!r} ({field.type})")
            continue
        got = data_schema.field(field.name).type
        if not _fits(got, field.type):
            _read_problems(got, field.type, field.name, problems, data=True)
    extra = [n for n in data_schema.names if n not in table_schema.names]
    if extra:
        problems.append(f"unexpected columns {extra}")
    if problems:
        raise SchemaMismatchError(
            "expected data matching the table schema, found: "
            + "; ".join(problems)
            + f". Table schema: {_describe(table_schema)}. Cast or select the columns "
            "to match before writing."
        )


def _written_by_lakelog(field: pa.Field) -> bool:
    """Whether a writer fills ``field`` when the data lacks it: a generated or an
    identity column (docs/constraints.md)."""
    return bool(field.metadata) and (
        GENERATION_KEY in field.metadata or identity_of(field) is not None
    )


def merge_schema(
    table_schema: pa.Schema, data_schema: pa.Schema, *, partition_by: Sequence[str] = ()
) -> pa.Schema:
    """The table schema evolved to take ``data_schema`` (``schema_mode="merge"``).

    Columns the data lacks must be nullable (they are written as nulls); a column whose
    data type widens the table's is widened (a partition column only between integer
    types); a narrower one is converted; the data's new columns are added, nullable,
    after the table's, in the data's order. Nested fields (of structs, also inside lists
    and map values) evolve the same way: the data's new fields are added, nullable, at
    their struct's end; fields it holds wider are widened. Every field kept keeps its
    metadata (column ids), and new fields come without any (the table gives them ids).
    Anything else is a :class:`SchemaMismatchError` naming the field's path
    (``s.items[].x``). Returns ``table_schema`` itself when nothing changes.
    """
    check_data_columns(data_schema)
    problems: list[str] = []
    fields: list[pa.Field] = []
    changed = False
    for field in table_schema:
        if field.name not in data_schema.names:
            if not field.nullable and not _written_by_lakelog(field):
                problems.append(
                    f"missing column {field.name!r}, which is non-nullable ({field.type})"
                )
            fields.append(field)
            continue
        got = data_schema.field(field.name).type
        if _kind(field.type) is not None and _kind(field.type) == _kind(got):
            merged = _merge_field(field, got, field.name, problems)
            changed = changed or merged is not field
            fields.append(merged)
        elif _fits(got, field.type):
            fields.append(field)
        elif widens(field.type, got) and _partition_widening_ok(field, got, partition_by):
            fields.append(field.with_type(got))
            changed = True
        else:
            problems.append(
                f"column {field.name!r}: the table has {field.type}, the data {got}, and "
                f"neither widens safely to the other"
            )
    for field in data_schema:
        if field.name in table_schema.names:
            continue
        if field.type == pa.null():
            problems.append(
                f"new column {field.name!r} has type null (no values); cast it to the type "
                f"it should have"
            )
            continue
        fields.append(bare_field(field).with_nullable(True))
        changed = True
    if problems:
        raise SchemaMismatchError(
            "expected data that the table schema can take by adding nullable columns or "
            "widening types (schema_mode='merge'), found: "
            + "; ".join(problems)
            + f". Table schema: {_describe(table_schema)}. Cast or select the columns before "
            "writing."
        )
    if not changed:
        return table_schema
    return pa.schema(fields, metadata=table_schema.metadata)


def _partition_widening_ok(
    field: pa.Field, target: pa.DataType, partition_by: Sequence[str]
) -> bool:
    """Partition values are strings in the log: only integer widenings keep their form."""
    if field.name not in partition_by:
        return True
    return bool(pa.types.is_integer(field.type) and pa.types.is_integer(target))


def dropped_columns(schema: pa.Schema) -> list[str]:
    """Names dropped from the table whose values live files may still hold."""
    raw = (schema.metadata or {}).get(DROPPED_KEY)
    if not raw:
        return []
    try:
        names = json.loads(raw)
    except ValueError:
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def with_dropped(schema: pa.Schema, names: Iterable[str]) -> pa.Schema:
    """``schema`` with its dropped-names list set to ``names`` (removed when empty)."""
    meta = dict(schema.metadata or {})
    listed = sorted(set(names))
    if listed:
        meta[DROPPED_KEY] = json.dumps(listed).encode()
    else:
        meta.pop(DROPPED_KEY, None)
    return schema.with_metadata(meta) if meta else schema.remove_metadata()


def file_columns(stored: pa.Schema, expected: pa.Schema, *, path: str) -> list[str]:
    """The columns of ``expected`` that a data file (``stored``: its Arrow schema) holds,
    to read; the others read as nulls (added after the file was written).

    A stored type that does not read as the expected one (nested types field by field:
    :func:`readable_as`), or a missing non-nullable column, means the file was not
    written by lakelog for this table: :class:`SchemaMismatchError` naming the column or
    nested field (``s.items[].x``).
    """
    present: list[str] = []
    problems: list[str] = []
    for field in expected:
        if field.name not in stored.names:
            if not field.nullable:
                problems.append(f"missing non-nullable column {field.name!r}")
            continue
        got = stored.field(field.name).type
        if not readable_as(got, field.type):
            _read_problems(got, field.type, field.name, problems, data=False)
            continue
        present.append(field.name)
    if problems:
        raise SchemaMismatchError(
            f"expected data file {path} to hold the table's columns (or older, narrower "
            f"versions of them), found " + "; ".join(problems) + "; the file was not "
            "written by lakelog for this table."
        )
    return present


def duplicate_columns(schema: pa.Schema) -> list[str]:
    """Column names that occur more than once in ``schema``."""
    return sorted(n for n, count in Counter(schema.names).items() if count > 1)


def check_data_columns(data_schema: pa.Schema) -> None:
    """Raise :class:`SchemaMismatchError` if incoming data repeats a column name
    (no column could be told apart from its namesake)."""
    dups = duplicate_columns(data_schema)
    if dups:
        raise SchemaMismatchError(
            f"expected distinct column names in the data, found {dups} more than once "
            f"(columns {data_schema.names}); rename or drop the duplicates before writing."
        )


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Reorder and convert a checked batch to exactly ``schema``.

    Nulls in a column that the table's schema or the batch's own schema declares
    non-nullable are a :class:`SchemaMismatchError` (Parquet refuses to write them).
    """
    names = set(batch.schema.names)
    computed: list[str] = []
    if len(names) < len(schema):
        computed = [
            f.name
            for f in schema
            if f.name not in names and f.metadata and GENERATION_KEY in f.metadata
        ]
    if computed:
        # a generated column the batch lacks is computed, not null (docs/constraints.md);
        # the batch says which, so the writer's check does not compute them again
        batch = generate_missing(batch, schema)
        names = set(batch.schema.names)
        schema = schema.with_metadata(
            {**(schema.metadata or {}), COMPUTED_KEY: ",".join(computed).encode()}
        )
    _check_nulls(batch, schema)
    if batch.schema.equals(schema, check_metadata=False):
        if batch.schema.metadata and COMPUTED_KEY in batch.schema.metadata and not computed:
            return batch.replace_schema_metadata(schema.metadata)  # (only lakelog says it)
        return batch
    arrays = []
    for field in schema:
        if field.name not in names:  # a nullable column the batch lacks: nulls
            arrays.append(pa.nulls(batch.num_rows, field.type))
            continue
        col = batch.column(field.name)
        if col.type != field.type:
            if nested_not_null(field.type):  # before the cast, which would say it badly
                check_nested_nulls(batch, field.name, field.type)
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaMismatchError(
                    f"expected column {field.name!r} to convert to the table's {field.type}, "
                    f"found {col.type} that does not: {str(e).splitlines()[0]}. Nothing was "
                    f"written."
                ) from None
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _check_nulls(batch: pa.RecordBatch, schema: pa.Schema) -> None:
    names = set(batch.schema.names)
    for field in schema:
        if field.name not in names:
            if identity_of(field) is not None:
                raise SchemaMismatchError(
                    f"expected values for identity column {field.name!r}, found none: this "
                    f"write path does not give them out; write the rows with append or "
                    f"overwrite (they number them), or give the values (a BY DEFAULT "
                    f"column). Nothing was written."
                )
            if not field.nullable:
                raise SchemaMismatchError(
                    f"expected column {field.name!r}, which the table's schema declares "
                    f"non-nullable, found it missing; add it to the data before writing. "
                    f"Nothing was written."
                )
            continue
        own = batch.schema.field(field.name)
        if field.nullable and own.nullable:
            continue
        column = batch.column(field.name)
        nulls = column.null_count
        if nulls:
            whose = "the data's own" if not own.nullable else "the table's"
            row = sample_row(batch, int(pc.index(column.is_null(), True).as_py()))
            raise ConstraintViolationError(
                f"expected no nulls in column {field.name!r}, which {whose} schema declares "
                f"non-nullable, found {nulls} null(s), e.g. row {row}; fill or drop them (or "
                f"declare the column nullable) before writing. Nothing was written.",
                constraint="NOT NULL",
                column=field.name,
                row=row,
            )


def to_reader(data: Any) -> pa.RecordBatchReader:
    """A RecordBatchReader over any supported input (streams; no copy)."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return data.to_reader()
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data)
    if isinstance(data, Iterable):
        it: Iterator[Any] = iter(data)
        try:
            first = next(it)
        except StopIteration:
            raise InvalidArgumentError(
                "expected data (a pyarrow Table, RecordBatch, RecordBatchReader or batches), "
                "found an empty iterable; pass a Table with zero rows to write nothing."
            ) from None
        if not isinstance(first, pa.RecordBatch):
            raise InvalidArgumentError(
                f"expected an iterable of pyarrow RecordBatch, found {type(first).__name__}"
            )

        def chain() -> Iterator[pa.RecordBatch]:
            yield first
            yield from it

        return pa.RecordBatchReader.from_batches(first.schema, chain())
    raise InvalidArgumentError(
        f"expected a pyarrow Table, RecordBatch, RecordBatchReader or iterable of batches, "
        f"found {type(data).__name__}"
    )
