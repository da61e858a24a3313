"""The schema a write goes with: checked against the table, or evolving it.

A write in ``strict`` mode must match the table (types that widen to the table's are
converted). In ``merge`` mode its new columns are added (nullable), columns it holds in
a wider type widen the table's, and columns it lacks are written as nulls; the
``metadata`` action that evolves the table goes in the same commit as the files
(``docs/schema-evolution.md``). The explicit schema changes of
:mod:`lakelog.evolution.schema` build their metadata with the same helpers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from .. import threads
from ..errors import InvalidArgumentError, SchemaMismatchError
from ..io.parquet_settings import check_parquet_properties
from ..io.schema import (
    check_schema,
    dropped_columns,
    merge_schema,
    nested_changes,
    with_dropped,
)
from ..log import mapping
from ..log.actions import Metadata, encode_schema
from ..log.snapshot import Snapshot

__all__ = [
    "SCHEMA_MODES",
    "SchemaMode",
    "WritePlan",
    "check_schema_mode",
    "evolved_metadata",
    "plan_write",
    "readd_dropped",
]

COLUMN_MAPPING = "lakelog.column_mapping"
"""The table property that turns column ids on (format version 7)."""

SchemaMode = Literal["strict", "merge"]
SCHEMA_MODES = ("strict", "merge")
_FOOTER_WORKERS = 16


@dataclass(frozen=True)
class WritePlan:
    """How a write's data goes into the table: the schema its files are written with,
    and the ``metadata`` action that evolves the table to it (None: unchanged)."""

    schema: pa.Schema
    metadata: Metadata | None = None
    added: tuple[str, ...] = ()
    widened: tuple[str, ...] = ()
    nested: tuple[str, ...] = ()
    """Paths of the nested fields added or widened (``s.z``, ``events[].score``)."""

    def parameters(self) -> dict[str, Any]:
        """What the commit header records about the schema change (empty: none)."""
        if self.metadata is None:
            return {}
        out: dict[str, Any] = {"schema_mode": "merge"}
        if self.added:
            out["added_columns"] = list(self.added)
        if self.widened:
            out["widened_columns"] = list(self.widened)
        if self.nested:
            out["nested_fields"] = list(self.nested)
        return out


def check_schema_mode(schema_mode: Any) -> SchemaMode:
    """``schema_mode`` if it is ``"strict"`` or ``"merge"``; refused otherwise."""
    if schema_mode not in SCHEMA_MODES:
        raise InvalidArgumentError(
            f"expected schema_mode 'strict' (the data must match the table) or 'merge' "
            f"(add new nullable columns, widen types), found {schema_mode!r}"
        )
    return schema_mode  # type: ignore[no-any-return]


def plan_write(snapshot: Snapshot, data_schema: pa.Schema, schema_mode: SchemaMode) -> WritePlan:
    """Check incoming data against the table and decide the schema to write it with.

    ``strict``: the data must match (types that widen to the table's are converted).
    ``merge``: new columns are added (nullable), columns whose data type widens the
    table's are widened, and columns the data lacks (nullable) are written as nulls.
    Nested fields too (:func:`lakelog.io.schema.merge_schema`): a merge that changes
    one turns column mapping on.

    Args:
        snapshot: the table's snapshot the write goes on.
        data_schema: the schema of the incoming data.
        schema_mode: ``"strict"`` or ``"merge"``.

    Raises:
        SchemaMismatchError: the data does not fit the table in this mode.
    """
    check_schema_mode(schema_mode)
    table_schema = snapshot.schema
    if schema_mode == "strict":
        check_schema(data_schema, table_schema)
        return WritePlan(table_schema)
    merged = merge_schema(table_schema, data_schema, partition_by=snapshot.partition_by)
    if merged is table_schema:
        return WritePlan(table_schema)
    added = tuple(n for n in merged.names if n not in table_schema.names)
    nested = tuple(nested_changes(table_schema, merged))
    widened = tuple(
        f.name
        for f in table_schema
        if f.name in merged.names
        and merged.field(f.name).type != f.type
        and not pa.types.is_nested(f.type)  # listed in `nested`
    )
    merged = readd_dropped(snapshot, merged, added)
    # nested fields evolve with column ids (format.md, "Column ids, renames and nested
    # fields"); the files are written with the ids and physical names the new ones get
    md = evolved_metadata(snapshot, merged, column_mapping=bool(nested))
    return WritePlan(md.arrow_schema(), md, added, widened, nested)


def evolved_metadata(
    snap: Snapshot,
    schema: pa.Schema,
    properties: Mapping[str, str] | None = None,
    *,
    column_mapping: bool = False,
) -> Metadata:
    """The table's metadata with ``schema`` (and ``properties``) instead.

    On a table with column mapping (or when ``column_mapping`` turns it on: renames and
    nested changes need it), fields without a column id get one and a physical name
    (:func:`lakelog.log.mapping.assign`; format.md, "Column ids, renames and nested
    fields"), and the property ``lakelog.column_mapping`` is set, which makes the
    ``metadata`` action declare format version 7.

    Args:
        snap: the snapshot whose metadata is changed.
        schema: the new schema.
        properties: the new properties; default None, the snapshot's.
        column_mapping: turn column mapping on if it is not. Default False.
    """
    md = snap.metadata
    props = dict(md.properties if properties is None else properties)
    if column_mapping or mapping.is_mapped(schema):
        schema = mapping.enable(schema)
        props[COLUMN_MAPPING] = "true"
    check_parquet_properties(props, schema, snap.partition_by)
    return msgspec.structs.replace(md, schema=encode_schema(schema), properties=props)


def readd_dropped(snap: Snapshot, schema: pa.Schema, added: Sequence[str]) -> pa.Schema:
    """``schema`` with ``added`` names taken off its dropped list, after checking that no
    live file still holds a column of a dropped name being added back.

    Args:
        snap: the snapshot whose live files are checked.
        schema: the evolved schema, with its list of dropped columns.
        added: the names of the columns being added.

    Raises:
        SchemaMismatchError: a live file holds a column of a dropped name in ``added``.
    """
    dropped = dropped_columns(schema)
    again = [n for n in added if n in dropped]
    if not again or mapping.is_mapped(schema):
        # with column mapping, a name added back gets a new physical name
        # (mapping.assign): the dropped physical names stay listed
        return schema
    holding = _files_holding(snap, again)
    if holding:
        example = ", ".join(f"{n!r} in {paths[0]}" for n, paths in holding.items())
        count = len({p for paths in holding.values() for p in paths})
        raise SchemaMismatchError(
            f"expected no live data file to hold a column named {sorted(holding)}, which "
            f"was dropped from the table, found {count} file(s) still holding its old "
            f"values ({example}); adding it back would bring them back. Choose another "
            f"name, or first rewrite those files (e.g. optimize(incremental=False) rewrites "
            f"every file without the dropped column)."
        )
    return with_dropped(schema, [n for n in dropped if n not in again])


def _files_holding(snap: Snapshot, names: Sequence[str]) -> dict[str, list[str]]:
    """Live files (by path) whose Parquet schema holds a column of each of ``names``."""
    storage = snap.storage
    wanted = set(names)

    def columns(path: str) -> set[str]:
        try:
            with storage.open_input(path) as fh:
                return set(pq.read_schema(fh).names) & wanted
        except FileNotFoundError:  # deleted outside lakelog: no values to bring back
            return set()

    paths = snap.paths()
    out: dict[str, list[str]] = {}
    with threads.pool("lakelog-schema", max(1, min(_FOOTER_WORKERS, len(paths)))) as pool:
        for path, found in zip(paths, pool.map(columns, paths), strict=True):
            for n in found:
                out.setdefault(n, []).append(path)
    return out
