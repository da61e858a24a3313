"""Table properties checked against the table's columns: at creation and at every
change (:func:`set_properties`). The values themselves are checked by
:mod:`lakelog.properties`; here, what depends on the schema (Parquet settings naming
columns, a declared clustering)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..io.parquet_settings import check_parquet_properties
from ..log.actions import Metadata
from ..properties import validate_properties
from ..transaction import CommitResult

if TYPE_CHECKING:
    from ..table import Table

__all__ = ["set_properties", "validate_properties_for"]

_CLUSTERING_PREFIX = "lakelog.clustering.c"  # columns and curve


def validate_properties_for(
    schema: pa.Schema, partition_by: tuple[str, ...], properties: Mapping[str, Any] | None
) -> dict[str, str]:
    """``properties`` validated (:func:`lakelog.properties.validate_properties`) and
    checked against the table's columns (Parquet settings, a declared clustering).

    Args:
        schema: the table's columns.
        partition_by: the partition columns.
        properties: the properties to check; None for none.
    """
    props = validate_properties(properties or {})
    check_parquet_properties(props, schema, partition_by)
    if any(k.startswith(_CLUSTERING_PREFIX) for k in props):
        _check_declared(props, schema, partition_by)
    return props


def set_properties(table: Table, properties: Mapping[str, Any]) -> CommitResult:
    """:meth:`lakelog.Table.set_properties`: one ``metadata`` commit on the latest
    snapshot; only the properties changed are checked, so a bad value already stored
    does not block setting a valid one."""
    changed = validate_properties(properties)
    snap = table.snapshot()
    props = dict(snap.metadata.properties)
    props.update(changed)
    check_parquet_properties(changed, snap.schema, snap.partition_by)
    if any(k.startswith(_CLUSTERING_PREFIX) for k in changed):
        _check_declared(props, snap.schema, snap.partition_by)
    md = Metadata(
        table_id=snap.metadata.table_id,
        schema=snap.metadata.schema,
        partition_by=snap.metadata.partition_by,
        properties=props,
        format_version=snap.metadata.format_version,
        created_ms=snap.metadata.created_ms,
    )
    return table.commit(
        [md],
        operation="SET PROPERTIES",
        kind="metadata",
        read_snapshot=snap,
        parameters={"properties": changed},
    )


def _check_declared(
    props: dict[str, str], schema: pa.Schema, partition_by: tuple[str, ...]
) -> None:
    # the rules of a declared clustering live with the clustering spec (maintenance,
    # above the core): imported only when a table declares one
    from ..maintenance.clustering.spec import check_declared

    check_declared(props, schema, partition_by)
