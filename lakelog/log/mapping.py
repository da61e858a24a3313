"""Column ids and physical names (format version 7).

``docs/format.md``, "Column ids, renames and nested fields": with column mapping on, every
field of the table's Arrow schema carries a stable id and the *physical* name data files
store it under, in the field's key-value metadata. The field's own name is the *logical*
name users, filters and properties say. Everything here is pure: schemas in, schemas
out, and the zero-copy relabelling of batches between the two namings.

* :func:`physical_schema` is the schema data files are written with (and the one the
  log keys statistics by): physical names, and each field's id as its Parquet
  ``field_id``.
* :func:`to_physical` and :func:`to_logical` relabel a batch between the two (the
  layouts are identical, so it is a view, not a copy).
* :func:`enable` gives every field an id and its current name as physical name;
  :func:`assign` gives fields added later the next ids and fresh physical names.

An unmapped schema (no ids) is its own physical schema: every function here is then
the identity, so tables without column mapping pay nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import TypeAlias

import pyarrow as pa

__all__ = [
    "DROPPED_FIELDS_KEY",
    "FIELD_ID_KEY",
    "ID_KEY",
    "MAX_ID_KEY",
    "PHYSICAL_KEY",
    "assign",
    "column_id",
    "dropped_fields",
    "enable",
    "ids_of",
    "is_mapped",
    "logical_names",
    "named_like",
    "physical_name",
    "physical_names",
    "physical_schema",
    "relabelled",
    "rename",
    "strip",
    "to_logical",
    "to_physical",
    "walk",
    "with_dropped_fields",
]

ID_KEY = b"lakelog.column_id"
PHYSICAL_KEY = b"lakelog.physical_name"
MAX_ID_KEY = b"lakelog.column_mapping.max_id"
DROPPED_FIELDS_KEY = b"lakelog.dropped_fields"
FIELD_ID_KEY = b"PARQUET:field_id"
"""The field metadata key pyarrow writes as (and reads from) a Parquet ``field_id``."""

_DROPPED_COLUMNS_KEY = b"lakelog.dropped_columns"  # io.schema.DROPPED_KEY: top-level names

_FieldFn: TypeAlias = Callable[[pa.Field], pa.Field]


# -- reading the mapping ----------------------------------------------------------------


def is_mapped(schema: pa.Schema) -> bool:
    """Whether ``schema`` has column ids (column mapping is on). A schema of some of
    the table's columns (without the table's schema metadata) counts by its fields."""
    if schema.metadata and MAX_ID_KEY in schema.metadata:
        return True
    return any(f.metadata and (ID_KEY in f.metadata or PHYSICAL_KEY in f.metadata) for f in schema)


def column_id(field: pa.Field) -> int | None:
    """The field's column id (None: unmapped)."""
    raw = (field.metadata or {}).get(ID_KEY)
    return int(raw) if raw else None


def physical_name(field: pa.Field) -> str:
    """The name data files store ``field`` under (its own name when unmapped)."""
    raw = (field.metadata or {}).get(PHYSICAL_KEY)
    return raw.decode() if raw else str(field.name)


def physical_names(schema: pa.Schema) -> dict[str, str]:
    """Top-level logical name to physical name, every column."""
    return {f.name: physical_name(f) for f in schema}


def logical_names(schema: pa.Schema) -> dict[str, str]:
    """Top-level physical name to logical name, every column."""
    return {physical_name(f): f.name for f in schema}


def relabelled(schema: pa.Schema) -> bool:
    """Whether any field (nested ones too) has a physical name other than its name: only
    then do files and the log name columns differently from users."""
    return is_mapped(schema) and _relabelled(_key(schema))


@lru_cache(maxsize=256)
def _relabelled(key: bytes) -> bool:
    return any(_field_relabelled(f) for f in pa.ipc.read_schema(pa.py_buffer(key)))


def _field_relabelled(field: pa.Field) -> bool:
    return physical_name(field) != field.name or _type_relabelled(field.type)


def _type_relabelled(t: pa.DataType) -> bool:
    """Whether a struct field inside ``t`` is stored under another name (a list's
    element and a map's key and value are not named in files: their names never count)."""
    for c in _children(t):
        if pa.types.is_struct(t) and physical_name(c) != c.name:
            return True
        if _type_relabelled(c.type):
            return True
    return False


def dropped_fields(schema: pa.Schema) -> list[list[str]]:
    """Paths (of physical names) of nested fields dropped from the table."""
    raw = (schema.metadata or {}).get(DROPPED_FIELDS_KEY)
    if not raw:
        return []
    try:
        paths = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(paths, list):
        return []
    return [p for p in paths if isinstance(p, list) and all(isinstance(n, str) for n in p)]


def with_dropped_fields(schema: pa.Schema, paths: Iterable[Sequence[str]]) -> pa.Schema:
    """``schema`` with its dropped nested field paths set to ``paths``."""
    meta = dict(schema.metadata or {})
    listed = sorted({tuple(p) for p in paths})
    if listed:
        meta[DROPPED_FIELDS_KEY] = json.dumps([list(p) for p in listed]).encode()
    else:
        meta.pop(DROPPED_FIELDS_KEY, None)
    return schema.with_metadata(meta) if meta else schema.remove_metadata()


# -- the physical schema --------------------------------------------------------------


def physical_schema(schema: pa.Schema) -> pa.Schema:
    """The schema data files are written with: every field under its physical name,
    with its id as Parquet ``field_id``. ``schema`` itself when unmapped."""
    if not is_mapped(schema):
        return schema
    return _physical(_key(schema))


def _key(schema: pa.Schema) -> bytes:
    """A cache key that tells schemas apart by their metadata too (``pa.Schema``'s own
    equality and hash ignore it, and the mapping lives in it)."""
    return bytes(schema.serialize())


@lru_cache(maxsize=256)
def _physical(key: bytes) -> pa.Schema:
    schema = pa.ipc.read_schema(pa.py_buffer(key))
    meta = {k: v for k, v in (schema.metadata or {}).items() if k not in _SCHEMA_KEYS}
    return pa.schema([_physical_field(f) for f in schema], metadata=meta or None)


def _physical_field(field: pa.Field) -> pa.Field:
    meta = {}
    cid = column_id(field)
    if cid is not None:
        meta[FIELD_ID_KEY] = str(cid).encode()
    return pa.field(
        physical_name(field),
        _map_type(field.type, _physical_field),
        nullable=field.nullable,
        metadata=meta or None,
    )


def strip(schema: pa.Schema) -> pa.Schema:
    """``schema`` without column mapping metadata (ids, physical names), as users see it.
    Other metadata stays."""
    if not is_mapped(schema):
        return schema
    return _strip(_key(schema))


@lru_cache(maxsize=256)
def _strip(key: bytes) -> pa.Schema:
    schema = pa.ipc.read_schema(pa.py_buffer(key))
    meta = {k: v for k, v in (schema.metadata or {}).items() if k not in _SCHEMA_KEYS}
    return pa.schema([_strip_field(f) for f in schema], metadata=meta or None)


_SCHEMA_KEYS = (MAX_ID_KEY, DROPPED_FIELDS_KEY)


def _strip_field(field: pa.Field) -> pa.Field:
    meta = {k: v for k, v in (field.metadata or {}).items() if k not in (ID_KEY, PHYSICAL_KEY)}
    return pa.field(
        field.name,
        _map_type(field.type, _strip_field),
        nullable=field.nullable,
        metadata=meta or None,
    )


# -- relabelling batches ----------------------------------------------------------------


def to_physical(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A batch of ``schema`` (logical names, in its order) relabelled with the physical
    schema, to write (zero-copy)."""
    if not is_mapped(schema):
        return batch
    return _relabel(batch, physical_schema(schema))


def to_logical(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A batch read in the physical schema of ``schema`` (same columns, same order)
    relabelled with the logical names of ``schema`` (zero-copy)."""
    if not is_mapped(schema):
        return batch
    return _relabel(batch, schema)


def _relabel(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    if len(target) != batch.num_columns:
        raise ValueError(f"expected {len(target)} columns to relabel, found {batch.num_columns}")
    arrays = [
        col if col.type.equals(f.type) else col.view(f.type)
        for col, f in zip(batch.columns, target, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


# -- changing the mapping -----------------------------------------------------------------


def enable(schema: pa.Schema) -> pa.Schema:
    """``schema`` with column mapping on: every field without an id gets the next one,
    depth first, and its current name as physical name (so the files written before
    already store it under that name). A mapped schema gets ids for new fields only."""
    if is_mapped(schema):
        return assign(schema)
    counter = _Ids(0)
    fields = [_enable_field(f, counter) for f in schema]
    meta = dict(schema.metadata or {})
    meta[MAX_ID_KEY] = str(counter.last).encode()
    return pa.schema(fields, metadata=meta)


class _Ids:
    def __init__(self, last: int) -> None:
        self.last = last

    def next(self) -> int:
        self.last += 1
        return self.last


def _enable_field(field: pa.Field, ids: _Ids) -> pa.Field:
    meta = dict(field.metadata or {})
    if ID_KEY not in meta:
        meta[ID_KEY] = str(ids.next()).encode()
        meta.setdefault(PHYSICAL_KEY, field.name.encode())
    return pa.field(
        field.name,
        _map_type(field.type, lambda c: _enable_field(c, ids)),
        nullable=field.nullable,
        metadata=meta,
    )


def assign(schema: pa.Schema) -> pa.Schema:
    """A mapped ``schema`` whose fields without an id (added since) get the next ids
    and a physical name: their name when no field at the same level has that physical
    name and none dropped there had it, else ``col-<uuid hex>`` (format.md: a column
    added back after a drop never reads the old values)."""
    if not is_mapped(schema):
        return schema
    meta = dict(schema.metadata or {})
    known = [c for c in (column_id(f) for _, f in walk(schema)) if c is not None]
    ids = _Ids(max([int(meta.get(MAX_ID_KEY, b"0")), *known]))
    dropped_top = _dropped_top(schema)
    dropped_nested = {tuple(p) for p in dropped_fields(schema)}
    taken = {physical_name(f) for f in schema if column_id(f) is not None} | dropped_top
    fields = [_assign_field(f, ids, taken, (), dropped_nested) for f in schema]
    meta[MAX_ID_KEY] = str(ids.last).encode()
    return pa.schema(fields, metadata=meta)


def _dropped_top(schema: pa.Schema) -> set[str]:
    raw = (schema.metadata or {}).get(_DROPPED_COLUMNS_KEY)
    try:
        names = json.loads(raw) if raw else []
    except ValueError:
        names = []
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def _assign_field(
    field: pa.Field,
    ids: _Ids,
    taken: set[str],
    parent: tuple[str, ...],
    dropped: set[tuple[str, ...]],
) -> pa.Field:
    meta = dict(field.metadata or {})
    if ID_KEY not in meta:
        meta[ID_KEY] = str(ids.next()).encode()
        name = field.name
        if name in taken or (*parent, name) in dropped:
            name = f"col-{uuid.uuid4().hex}"
        meta[PHYSICAL_KEY] = name.encode()
        taken.add(name)
    path = (*parent, meta[PHYSICAL_KEY].decode())
    t = field.type
    if pa.types.is_struct(t):
        own = {physical_name(c) for c in _children(t) if column_id(c) is not None}
        own |= {p[-1] for p in dropped if p[:-1] == path}
        kids = [_assign_field(c, ids, own, path, dropped) for c in _children(t)]
        t = pa.struct(kids)
    else:
        t = _map_type(t, lambda c: _assign_field(c, ids, set(), path, dropped))
    return pa.field(field.name, t, nullable=field.nullable, metadata=meta)


def named_like(schema: pa.Schema, target: pa.Schema) -> pa.Schema:
    """The top-level fields of ``schema`` (an older version's) that ``target`` (a newer
    one) still has, matched by physical name, under ``target``'s names: to read files
    written under ``schema`` as ``target``'s columns. A field ``target`` does not have
    (dropped, or dropped and added back under a new physical name) is left out, so a
    column of the same name never reads its old values."""
    if not is_mapped(target) and not is_mapped(schema):
        return schema
    names = logical_names(target)
    kept = [
        f.with_name(names[physical_name(f)]).with_metadata(
            {**(f.metadata or {}), PHYSICAL_KEY: physical_name(f).encode()}
        )
        for f in schema
        if physical_name(f) in names
    ]
    return pa.schema(kept, metadata=schema.metadata)


def rename(schema: pa.Schema, old: str, new: str) -> pa.Schema:
    """``schema`` with top-level column ``old`` called ``new`` (id and physical name
    kept). The caller checks the names."""
    i = schema.get_field_index(old)
    return schema.set(i, schema.field(i).with_name(new))


# -- nested types ---------------------------------------------------------------------


def _children(t: pa.DataType) -> list[pa.Field]:
    if pa.types.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [t.value_field]
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return [t.value_field]
    return []


def _map_type(t: pa.DataType, fn: _FieldFn) -> pa.DataType:
    """``t`` with ``fn`` applied to each child field (the same type when it has none)."""
    if pa.types.is_struct(t):
        return pa.struct([fn(c) for c in _children(t)])
    if pa.types.is_map(t):
        return pa.map_(fn(t.key_field), fn(t.item_field), keys_sorted=t.keys_sorted)
    if pa.types.is_large_list(t):
        return pa.large_list(fn(t.value_field))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(fn(t.value_field), t.list_size)
    if pa.types.is_list(t):
        return pa.list_(fn(t.value_field))
    return t


def walk(schema: pa.Schema) -> Iterator[tuple[tuple[str, ...], pa.Field]]:
    """Every field of ``schema`` with its path of names, depth first."""
    for f in schema:
        yield from _walk(f, ())


def _walk(field: pa.Field, parent: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], pa.Field]]:
    path = (*parent, field.name)
    yield path, field
    for c in _children(field.type):
        yield from _walk(c, path)


def ids_of(schema: pa.Schema) -> Mapping[int, tuple[str, ...]]:
    """Column id to the path of logical names, every mapped field."""
    out: dict[int, tuple[str, ...]] = {}
    for path, f in walk(schema):
        cid = column_id(f)
        if cid is not None:
            out[cid] = path
    return out
