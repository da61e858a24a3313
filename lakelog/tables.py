"""The entry points that create, open, write or convert a table by URI and hand the
user the :class:`~lakelog.table.Table` facade over it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa

from . import core
from .errors import InvalidArgumentError, TableNotFoundError
from .interop.convert import convert as convert_in_place
from .log.snapshot import load_snapshot
from .maintenance.clustering.spec import declaration_properties
from .partitioning import check_partition_columns
from .properties import validate_properties
from .storage import Storage
from .table import Table, WriteMode, returning_table
from .transaction import CommitResult

__all__ = ["convert", "create_table", "open_table", "write_table"]

convert = returning_table(convert_in_place)


def _storage(uri: str, storage_options: Mapping[str, Any] | None, single_writer: bool) -> Storage:
    return Storage(uri, storage_options, single_writer=single_writer)


def create_table(
    uri: str,
    schema: pa.Schema,
    *,
    partition_by: Sequence[str] = (),
    properties: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    single_writer: bool = False,
    cluster_by: Sequence[str] | None = None,
    cluster_curve: Literal["hilbert", "zorder", "linear"] = "hilbert",
    constraints: Mapping[str, str] | None = None,
    generated: Mapping[str, str] | None = None,
    identity: Mapping[str, Mapping[str, Any]] | None = None,
) -> Table:
    """Create an empty table.

    Its rules (docs/constraints.md): a non-nullable field of ``schema``, at any depth,
    is NOT NULL; ``constraints``, ``generated`` and ``identity`` declare the rest.

    Args:
        uri: where the table's root goes (a path or an fsspec URL).
        schema: the table's columns.
        partition_by: the partition columns, in order; default none.
        properties: table properties (``lakelog.*`` values are checked); default none.
        storage_options: passed to the fsspec filesystem; default none.
        single_writer: allow a store without put-if-absent, promising that no other
            process writes the table; default False.
        cluster_by: columns to declare the table's clustering by (see
            :meth:`Table.set_clustering`); default None, none.
        cluster_curve: the clustering over ``cluster_by``: ``"hilbert"`` (default) or
            ``"zorder"`` curves, or ``"linear"``, a sort.
        constraints: CHECK constraints, name to SQL text (``{"positive": "amount >
            0"}``); default none.
        generated: generated columns, column to the SQL text of its expression
            (``{"day": "CAST(ts AS DATE)"}``): computed when a write lacks the column,
            checked when it gives it; default none.
        identity: identity columns, column to its options ``start`` (default 1),
            ``step`` (default 1) and ``always`` (default True: given values are
            refused; False: BY DEFAULT, given values are kept); default none.

    Returns:
        The table, at version 0.

    Raises:
        TableExistsError: a table is already there.
    """
    schema = core.declare_rules(
        schema, constraints=constraints, generated=generated, identity=identity
    )
    storage = _storage(uri, storage_options, single_writer)
    if cluster_by is not None:
        properties = {
            **(properties or {}),
            **_clustering_properties(schema, partition_by, cluster_by, cluster_curve),
        }
    created = core.create_with_files(
        storage, schema, partition_by=partition_by, properties=properties, adds=None
    )
    return Table(storage, created)


def _clustering_properties(
    schema: pa.Schema,
    partition_by: Sequence[str],
    cluster_by: Sequence[str],
    cluster_curve: Literal["hilbert", "zorder", "linear"],
) -> dict[str, str]:
    """The properties declaring ``create_table``'s ``cluster_by``."""
    if not isinstance(schema, pa.Schema):
        raise InvalidArgumentError(f"expected a pyarrow.Schema, found {type(schema).__name__}")
    linear = cluster_curve == "linear"
    return declaration_properties(
        schema,
        check_partition_columns(schema, partition_by),
        zorder_by=None if linear else cluster_by,
        sort_by=cluster_by if linear else None,
        curve="hilbert" if linear else cluster_curve,
    )


def open_table(
    uri: str, *, storage_options: Mapping[str, Any] | None = None, single_writer: bool = False
) -> Table:
    """Open an existing table at its latest version.

    Args:
        uri: the table's root (a path or an fsspec URL).
        storage_options: passed to the fsspec filesystem; default none.
        single_writer: allow a store without put-if-absent, promising that no other
            process writes the table; default False.

    Raises:
        TableNotFoundError: there is no table at ``uri``.
    """
    storage = _storage(uri, storage_options, single_writer)
    return Table(storage, load_snapshot(storage))


def write_table(
    uri: str,
    data: Any,
    *,
    mode: WriteMode = "append",
    partition_by: Sequence[str] = (),
    properties: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    single_writer: bool = False,
    schema_mode: Literal["strict", "merge"] = "strict",
) -> CommitResult:
    """Write data to a table, creating it (with the data's schema) if needed.

    Args:
        uri: the table's root (a path or an fsspec URL).
        data: the rows, in any form :meth:`Table.append` takes.
        mode: ``"append"`` (default) adds rows, ``"overwrite"`` replaces all rows,
            ``"error"`` refuses to write to an existing table.
        partition_by: the partition columns of a new table; an existing table's must be
            the same. Default none.
        properties: table properties of a new table (checked either way); default none.
        storage_options: passed to the fsspec filesystem; default none.
        single_writer: allow a store without put-if-absent, promising that no other
            process writes the table; default False.
        schema_mode: ``"strict"`` (default) or ``"merge"``, which evolves an existing
            table's schema to take the data (see :meth:`Table.append`).

    Raises:
        TableExistsError: ``mode="error"`` and a table is there.
    """
    core.check_write_mode(mode)
    core.check_schema_mode(schema_mode)
    props = validate_properties(properties or {})  # refused even if the table exists
    storage = _storage(uri, storage_options, single_writer)
    try:
        table = Table(storage, load_snapshot(storage))
    except TableNotFoundError:
        return core.write_new_table(
            storage, data, mode=mode, partition_by=partition_by, properties=props
        )
    core.check_write_to(table.cached, mode=mode, partition_by=partition_by)
    if mode == "append":
        return table.append(data, schema_mode=schema_mode)
    return table.overwrite(data, schema_mode=schema_mode)
