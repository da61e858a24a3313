"""Renaming a column (format version 7, ``docs/format.md``, "Column ids, renames and
nested fields").

A rename is one ``metadata`` commit that changes the column's name and nothing else:
its column id and physical name stay, so every data file, written before or after,
reads under the new name, and the statistics the log keys by physical name keep
pruning. The first rename turns column mapping on (every column gets an id and its
current name as physical name, so no file changes). Properties that name the column
(clustering, bloom filters) follow it in the same commit. A concurrent
commit makes the rename check again on the new latest version and retry, as every
schema change does; a concurrent append written under the old schema conflicts
(kind ``metadata``) and rebases or fails, never lands half renamed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.schema import evolved_metadata
from ..errors import InvalidArgumentError, SchemaMismatchError
from ..log import mapping
from ..log.actions import Metadata
from ..log.snapshot import Snapshot
from ..transaction import CommitResult
from .schema import commit_schema_change

if TYPE_CHECKING:
    from ..core.handle import TableHandle

__all__ = ["NAMING_PROPERTIES", "rename_column"]

NAMING_PROPERTIES = (
    "lakelog.clustering.columns",
    "lakelog.parquet.bloom_filter_columns",
)
"""Table properties whose value is a comma-separated list of column names."""


def rename_column(table: TableHandle, old: str, new: str) -> CommitResult:
    """Give column ``old`` the name ``new`` (one ``metadata`` commit; no file is
    rewritten). Partition columns keep their names."""
    for what, name in (("old", old), ("new", new)):
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(
                f"expected a column name for {what}, found {name!r}; for example "
                f"rename_column('ts', 'event_time')"
            )
    if old == new:
        raise InvalidArgumentError(
            f"expected a new name other than the column's, found {new!r} for both"
        )

    def build(snap: Snapshot) -> tuple[Metadata, dict[str, Any]]:
        schema = snap.schema
        if old not in schema.names:
            raise InvalidArgumentError(
                f"expected a column of the table {schema.names} to rename, found unknown {old!r}"
            )
        if new in schema.names:
            raise SchemaMismatchError(
                f"expected a name no column has, found {new!r} already a column of the "
                f"table {schema.names}; drop or rename that one first."
            )
        if old in snap.partition_sources:
            raise InvalidArgumentError(
                f"expected a column no partition spec uses to rename, found {old!r} in the "
                f"partitioning {snap.partitioning}: files record their spec by column name."
            )
        if old in snap.partition_by:
            raise InvalidArgumentError(
                f"expected a non-partition column to rename, found partition column "
                f"{old!r}: partition values are kept by the column's name in folder names "
                f"and the log. Write a new table partitioned by the new name instead."
            )
        renamed = mapping.rename(mapping.enable(schema), old, new)
        props = dict(snap.metadata.properties)
        for key in NAMING_PROPERTIES:
            if key in props:
                props[key] = _renamed_list(props[key], old, new)
        md = evolved_metadata(snap, renamed, props, column_mapping=True)
        return md, {"column": old, "to": new}

    return commit_schema_change(table, build, operation="RENAME COLUMN")


def _renamed_list(value: str, old: str, new: str) -> str:
    """A comma-separated list of column names with ``old`` replaced by ``new``."""
    names = [c.strip() for c in value.split(",")]
    return ",".join(new if c == old else c for c in names if c)
