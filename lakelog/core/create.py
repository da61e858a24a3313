"""Creating a table: version 0, a ``metadata`` commit that may already hold files.

:func:`create_with_files` is the one creation path: ``create_table`` (no files), the
first write of ``write_table`` and of the Spark writers (files written just before, and
staged by the writer), and ``convert`` (files another tool wrote, never deleted here).
Version 0 is a put-if-absent like every commit, so of two writers creating one table,
one wins and the other gets :class:`~lakelog.errors.TableExistsError`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from ..errors import (
    CommitConflictError,
    InvalidArgumentError,
    SchemaMismatchError,
    TableExistsError,
)
from ..io.guards import check_declared, constraints_of, declare, guards_of, with_constraints
from ..io.parquet_settings import check_parquet_properties
from ..io.schema import check_data_columns, check_schema, duplicate_columns, to_reader
from ..leases import Lease
from ..log import mapping
from ..log.actions import Action, AddFile, AppTransaction, Metadata, encode_schema
from ..log.commits import list_log
from ..log.snapshot import Snapshot, load_snapshot
from ..properties import get_bool
from ..storage import Storage
from ..storage_check import ensure_put_if_absent, record_created
from ..transaction import CommitResult, Transaction
from ..transforms import PartitionSpec, partition_layout
from .commit import commit_files
from .properties import validate_properties_for
from .staged import staged
from .write import write_options_from, write_rows

__all__ = ["OPEN_HINT", "create_with_files", "declare_rules", "write_new_table"]

OPEN_HINT = "open it with lakelog.open_table()"


NEW_TABLE_VECTORS = ("lakelog.deletion_vectors", "true")
"""The property a new table gets unless its creator sets it: deletion vectors on."""


def create_with_files(
    storage: Storage,
    schema: pa.Schema,
    *,
    partition_by: Sequence[str],
    properties: Mapping[str, Any] | None,
    adds: Sequence[AddFile] | None,
    operation: str = "CREATE TABLE",
    lease: Lease | None = None,
    app: AppTransaction | None = None,
    metrics: Mapping[str, Any] | None = None,
    hint: str = OPEN_HINT,
) -> Snapshot:
    """Create a table whose first version may already hold files.

    Checks the schema (at least one column, distinct names), the partition columns and
    the properties; refuses a location that holds a table. The files are the caller's:
    nothing here deletes them.

    Args:
        storage: where the table goes.
        schema: the table's columns.
        partition_by: the partition columns, in order.
        properties: table properties, validated here; None for none.
        adds: files of version 0, already written under the root; None for none.
        operation: the operation recorded in the commit header; default
            ``"CREATE TABLE"``.
        lease: the writer lease ``adds`` were written under; default None.
        app: an app version committed with them (exactly-once ingest: the first batch
            creates the table); default None.
        metrics: the operation's metrics for the header; default none.
        hint: what to do instead, named in the error when a table is there; default
            :data:`OPEN_HINT`.

    Returns:
        The snapshot of version 0.

    Raises:
        TableExistsError: a table is there, or another writer created one meanwhile.
    """
    if not isinstance(schema, pa.Schema):
        raise InvalidArgumentError(f"expected a pyarrow.Schema, found {type(schema).__name__}")
    if not len(schema):
        raise InvalidArgumentError("expected a schema with at least one column, found none")
    if duplicate_columns(schema):
        raise InvalidArgumentError(
            f"expected distinct column names in the schema, found "
            f"{duplicate_columns(schema)} more than once; rename the duplicates."
        )
    parts, specs = partition_layout(schema, partition_by)
    props = validate_properties_for(schema, parts, properties)
    # new tables mark deleted rows in deletion vectors unless told otherwise, or created
    # with the Delta view, which then stays readable by every Delta reader
    # (docs/row-level-changes.md, "Copy-on-write or deletion vectors": the default and why)
    if not get_bool(props, "lakelog.delta_view"):
        props.setdefault(NEW_TABLE_VECTORS[0], NEW_TABLE_VECTORS[1])
    listing = list_log(storage)
    if listing.commits or listing.manifests:
        raise TableExistsError(
            f"expected no table at {storage.uri}, found one (log versions up to "
            f"{max(listing.commits[-1:] + listing.manifests[-1:])}); {hint} or choose "
            f"another location."
        )
    md = Metadata(
        table_id=uuid.uuid4().hex,
        # column ids are the table's own: never taken from a schema copied from another
        schema=encode_schema(_table_schema(schema)),
        partition_by=parts,
        properties=props,
        created_ms=int(time.time() * 1000),
        partition_specs=specs,
    )
    ensure_put_if_absent(storage, md.properties, creating=True)
    actions: list[Action] = [md, *(adds or [])]
    if app is not None:
        actions.append(app)
    txn = Transaction(
        storage,
        None,
        operation=operation,
        kind="metadata",
        actions=actions,
        parameters={"partition_by": list(specs[0] if specs else parts)}
        | ({} if app is None else {"app_id": app.app_id, "app_version": app.app_version}),
        metrics=metrics,
        before_put=None if lease is None else lease.before_put(lambda: txn.actions),
    )
    try:
        txn.commit()
    except CommitConflictError as e:
        raise TableExistsError(
            f"expected no table at {storage.uri}, found one created concurrently; {hint}."
        ) from e
    record_created(storage)
    return txn.landed_snapshot or load_snapshot(storage)


def declare_rules(
    schema: pa.Schema,
    *,
    constraints: Mapping[str, str] | None = None,
    generated: Mapping[str, str] | None = None,
    identity: Mapping[str, Mapping[str, Any]] | None = None,
) -> pa.Schema:
    """A new table's ``schema`` with its rules declared (docs/constraints.md), checked."""
    if not isinstance(schema, pa.Schema):
        raise InvalidArgumentError(f"expected a pyarrow.Schema, found {type(schema).__name__}")
    if not (constraints or generated or identity):
        return schema
    return declare(schema, generated=generated, identity=identity, constraints=constraints)


def _table_schema(schema: pa.Schema) -> pa.Schema:
    """A new table's schema: without column ids (the table's own) and schema metadata,
    but with the CHECK constraints it declares, checked."""
    out = mapping.strip(schema).remove_metadata()
    constraints = constraints_of(schema)
    if constraints:
        out = with_constraints(out, constraints)
    check_declared(out)
    return out


def write_new_table(
    storage: Storage,
    data: Any,
    *,
    mode: str,
    partition_by: Sequence[str],
    properties: dict[str, str],
) -> CommitResult:
    """``write_table`` where no table is: create it with the data's schema and the data
    in version 0. When another writer creates the table meanwhile, the files already
    written (the data may be a stream that cannot be read again) are committed on top of
    it (``mode`` append or overwrite), or refused (``mode="error"``).

    Args:
        storage: where the table goes.
        data: the rows, in any form :meth:`lakelog.Table.append` takes.
        mode: ``"append"``, ``"overwrite"`` or ``"error"``, as for ``write_table``.
        partition_by: the partition columns, in order.
        properties: table properties, already validated.
    """
    reader = to_reader(data)
    check_data_columns(reader.schema)
    schema = reader.schema.remove_metadata()
    parts, specs = partition_layout(schema, partition_by)
    check_parquet_properties(properties, schema, parts)
    options = write_options_from(properties)
    ensure_put_if_absent(storage, properties, creating=True)  # before any data is written
    operation = "CREATE TABLE AS WRITE"
    with (
        Lease.acquire(storage, operation=operation, properties=properties) as lease,
        staged(storage) as files,
    ):
        with files.before_commit():
            adds = files.add(
                write_rows(
                    storage,
                    reader,
                    schema=schema,
                    partition_by=parts,
                    options=options,
                    lease_id=lease.lease_id,
                    spec=PartitionSpec.of(0, specs[0]) if specs else None,
                )
            )
        try:
            created = create_with_files(
                storage,
                schema,
                partition_by=partition_by,
                properties=properties,
                adds=adds,
                operation=operation,
                lease=lease,
            )
            return CommitResult(version=created.version, attempts=1, operation=operation)
        except TableExistsError:
            if mode == "error":
                raise
        snap = load_snapshot(storage)  # created concurrently: commit on top of it
        if guards_of(snap.schema):
            raise TableExistsError(
                f"expected no table at {storage.uri}, found one created concurrently with "
                f"constraints, generated or identity columns, which these rows were not "
                f"written under; write again (mode='append')."
            )
        check_schema(schema, snap.schema)
        if (tuple(snap.partition_by), snap.metadata.partition_specs[-1:]) != (parts, specs):
            raise SchemaMismatchError(
                f"expected partition_by {snap.partitioning} of the existing table, "
                f"found {list(partition_by)}"
            )
        return commit_files(
            storage,
            snap,
            adds,
            mode="append" if mode == "append" else "overwrite",
            operation="APPEND" if mode == "append" else "OVERWRITE",
            metrics={
                "num_files": len(adds),
                "num_rows": sum(a.num_rows for a in adds),
                "num_bytes": sum(a.size_bytes for a in adds),
            },
            lease=lease,
        ).result
