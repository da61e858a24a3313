"""Table properties checked against the table's columns: at creation and at every
change (:func:`set_properties`). The values themselves are checked by
:mod:`lakelog.properties`; here, what depends on the schema (Parquet settings naming
columns, a declared clustering)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec
import pyarrow as pa

from ..errors import InvalidArgumentError
from ..io.parquet_settings import check_parquet_properties
from ..log.actions import Metadata
from ..properties import PREFIX, PROPERTIES, validate_properties
from ..transaction import CommitResult

if TYPE_CHECKING:
    from .handle import TableHandle

__all__ = ["set_properties", "unset_properties", "validate_properties_for"]

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


def set_properties(table: TableHandle, properties: Mapping[str, Any]) -> CommitResult:
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
    return _commit_properties(table, snap, props, "SET PROPERTIES", changed)


def unset_properties(
    table: TableHandle, keys: str | Iterable[str], *, missing_ok: bool = False
) -> CommitResult:
    """:meth:`lakelog.Table.unset_properties`: one ``metadata`` commit on the latest
    snapshot removing ``keys``, so each reads as its default again (a ``lakelog.*``
    property) or is gone (the user's own). An unknown ``lakelog.*`` name is refused with
    the closest declared one; a name that is not set is refused unless ``missing_ok``.
    Nothing to remove commits nothing (``skipped``)."""
    names = [keys] if isinstance(keys, str) else list(keys)
    for key in names:
        if not isinstance(key, str) or not key:
            raise InvalidArgumentError(
                f"expected property names to be non-empty strings, found {key!r}"
            )
        if key.lower().startswith(PREFIX) and key not in PROPERTIES:
            validate_properties({key: ""})  # refused: names the closest declared property
    snap = table.snapshot()
    props = dict(snap.metadata.properties)
    missing = [k for k in names if k not in props]
    if missing and not missing_ok:
        hints = [difflib.get_close_matches(k, list(props), n=1) for k in missing]
        close = sorted({h[0] for h in hints if h})
        hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
        raise InvalidArgumentError(
            f"expected properties set on the table to unset, found {missing} not set "
            f"(version {snap.version}); {hint}pass missing_ok=True to skip names that are "
            f"not set."
        )
    removed = [k for k in dict.fromkeys(names) if k in props]
    if not removed:
        return CommitResult(
            version=snap.version, attempts=0, operation="UNSET PROPERTIES", skipped=True
        )
    for key in removed:
        del props[key]
    if any(k.startswith(_CLUSTERING_PREFIX) for k in removed):
        _check_declared(props, snap.schema, snap.partition_by)
    return _commit_properties(table, snap, props, "UNSET PROPERTIES", removed)


def _commit_properties(
    table: TableHandle, snap: Any, props: dict[str, str], operation: str, changed: object
) -> CommitResult:
    """One ``metadata`` commit of ``snap``'s metadata with ``props`` as its properties."""
    md: Metadata = msgspec.structs.replace(snap.metadata, properties=props)
    return table.commit(
        [md],
        operation=operation,
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
