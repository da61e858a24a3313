"""Writing rows into a table: the options files are written with, the files, and the
commit of an ``append`` or an ``overwrite`` (whole table or partitions).

Each write runs under a writer lease (its files carry the lease's id, so vacuum leaves
them alone) and stages its files (:func:`~.staged.staged`): a write whose commit did
not land leaves no file behind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .._failpoints import failpoint
from ..errors import (
    AppVersionCommittedError,
    InvalidArgumentError,
    SchemaMismatchError,
    TableExistsError,
)
from ..io.parquet_settings import parquet_options
from ..io.schema import conform, to_reader
from ..io.writer import WriteOptions, check_codec, write_files
from ..leases import Lease
from ..log.actions import Action, AddFile, Metadata
from ..log.snapshot import Snapshot
from ..partitioning import partition_string
from ..properties import get_int, get_str
from ..storage import Storage
from ..transaction import CommitResult, app_commit, app_transaction, skipped_result
from ..transforms import PartitionSpec, parse_field
from .commit import overwrite_removes
from .identity import IdentityWrite
from .schema import SchemaMode, WritePlan, check_schema_mode, plan_write
from .staged import Staged, staged

if TYPE_CHECKING:
    from .handle import TableHandle

__all__ = [
    "WRITE_MODES",
    "append",
    "check_overwrite_where",
    "check_write_mode",
    "check_write_to",
    "identity_write",
    "landed_first",
    "numbered",
    "overwrite",
    "partition_scope",
    "write_options_from",
    "write_rows",
    "write_staged",
]

WRITE_MODES = ("append", "overwrite", "error")


def write_options_from(
    properties: Mapping[str, str],
    *,
    target_file_size: int | None = None,
    row_group_size: int | None = None,
    compression: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> WriteOptions:
    """The options data files are written with: each given one, else the table
    ``properties``' (and the ``lakelog.parquet.*`` settings from them).

    Args:
        properties: the table properties.
        target_file_size: bytes at which a file rolls to the next; default None,
            ``lakelog.target_file_size``.
        row_group_size: rows per Parquet row group; default None,
            ``lakelog.row_group_size``.
        compression: the Parquet codec; default None, ``lakelog.compression``.
        tags: string tags recorded with each file written; default none.
    """
    return WriteOptions(
        target_file_size=target_file_size or get_int(properties, "lakelog.target_file_size"),
        row_group_size=row_group_size or get_int(properties, "lakelog.row_group_size"),
        compression=check_codec(compression or get_str(properties, "lakelog.compression")),
        tags=dict(tags or {}),
        parquet=parquet_options(properties),
    )


def write_rows(
    storage: Storage,
    data: Any,
    *,
    schema: pa.Schema,
    partition_by: Sequence[str],
    options: WriteOptions,
    lease_id: str,
    spec: PartitionSpec | None = None,
    identity: IdentityWrite | None = None,
) -> list[AddFile]:
    """Write ``data`` as files of ``schema``, converted to it batch by batch. The caller
    checked the data's schema against ``schema`` (:func:`~.schema.plan_write`). Partial
    files of a failed write are deleted by the writer.

    Args:
        storage: the table's storage.
        data: the rows, in any form :meth:`lakelog.Table.append` takes.
        schema: the schema the files are written with.
        partition_by: the partition columns, in order.
        options: how the files are written (:func:`write_options_from`).
        lease_id: the writer lease's id, carried by every file.
        spec: the table's current spec of transforms (format version 8); default none.
        identity: numbers the rows of a table with identity columns; default None.

    Returns:
        The ``add`` actions of the files written.
    """
    if identity:
        fill = identity.fill
        batches = (conform(fill(b), schema) for b in to_reader(data) if b.num_rows)
    else:
        batches = (conform(b, schema) for b in to_reader(data) if b.num_rows)
    return write_files(
        storage,
        batches,
        schema=schema,
        partition_by=tuple(partition_by),
        options=options,
        lease_id=lease_id,
        spec=spec,
    )


def append(
    table: TableHandle,
    snapshot: Snapshot,
    data: Any,
    *,
    schema_mode: SchemaMode = "strict",
    app_id: str | None = None,
    app_version: int | None = None,
) -> CommitResult:
    """:meth:`lakelog.Table.append`: ``snapshot`` is the table's cached one, written on
    unless the schema may change or the append is exactly-once (then the latest is
    read: the decision needs its schema and app versions).

    Args:
        table: the table appended to.
        snapshot: its cached snapshot.
        data: the rows.
        schema_mode: ``"strict"`` (default) or ``"merge"``.
        app_id: the writing application, for an exactly-once append; default None.
        app_version: the batch's version for ``app_id``; default None.
    """
    check_schema_mode(schema_mode)
    app = app_transaction(app_id, app_version)
    snap = snapshot
    if app is not None or schema_mode != "strict":
        snap = table.snapshot()
    done = skipped_result(snap, app, operation="APPEND")
    if done is not None:
        return done
    storage = table.storage
    try:
        with (
            Lease.acquire(storage, operation="APPEND", properties=snap.properties) as lease,
            staged(storage) as files,
        ):
            with files.before_commit():
                plan, identity, adds = write_staged(
                    storage, snap, data, schema_mode, lease=lease, files=files
                )
                failpoint("append:before-commit")
                metadata = numbered(identity, plan.metadata, snap)
                actions: list[Action] = [metadata] if metadata is not None else []
                actions += adds
                parameters = plan.parameters()
                if app is not None:
                    actions.append(app)
                    parameters.update(app_id=app.app_id, app_version=app.app_version)
            return table.commit(
                actions,
                operation="APPEND",
                kind="append",
                read_snapshot=snap,
                parameters=parameters,
                metrics={
                    "num_files": len(adds),
                    "num_rows": sum(a.num_rows for a in adds),
                    "num_bytes": sum(a.size_bytes for a in adds),
                },
                lease=lease,
                rebase=identity,
            )
    except AppVersionCommittedError as e:  # the same batch landed first; files deleted
        return landed_first(storage, e, operation="APPEND")


def write_staged(
    storage: Storage,
    snapshot: Snapshot,
    data: Any,
    schema_mode: SchemaMode,
    *,
    lease: Lease,
    files: Staged,
) -> tuple[WritePlan, IdentityWrite | None, list[AddFile]]:
    """Write ``data`` as new data files of ``snapshot``'s table (the step an append and an
    overwrite share): the write plan (schema checked by ``schema_mode``), the identity
    numbering (None without an identity column) and the files, staged in ``files``."""
    reader = to_reader(data)
    plan = plan_write(snapshot, reader.schema, schema_mode)
    options = write_options_from(snapshot.properties)
    identity = identity_write(
        storage, snapshot, plan.schema, options=options, lease=lease, files=files
    )
    adds = files.add(
        write_rows(
            storage,
            reader,
            schema=plan.schema,
            partition_by=snapshot.partition_by,
            options=options,
            lease_id=lease.lease_id,
            spec=snapshot.partition_spec,
            identity=identity,
        )
    )
    return plan, identity, adds


def identity_write(
    storage: Storage,
    snapshot: Snapshot,
    schema: pa.Schema,
    *,
    options: WriteOptions,
    lease: Lease,
    files: Staged,
) -> IdentityWrite | None:
    """The identity numbering of a write of ``schema`` on ``snapshot``, or None when the
    table has no identity column."""
    identity = IdentityWrite(
        storage,
        schema,
        partition_by=snapshot.partition_by,
        options=options,
        lease_id=lease.lease_id,
        files=files,
    )
    return identity if identity else None


def numbered(
    identity: IdentityWrite | None, metadata: Metadata | None, snapshot: Snapshot
) -> Metadata | None:
    """The ``metadata`` action a write commits: ``metadata`` (a schema change, or None),
    with the identity marks of the values the write gave out."""
    if identity is None:
        return metadata
    return identity.metadata(metadata or snapshot.metadata) or metadata


def landed_first(
    storage: Storage, error: AppVersionCommittedError, *, operation: str
) -> CommitResult:
    """The result of an exactly-once write whose app version landed first: the commit
    that recorded it, with ``skipped=True``.

    Args:
        storage: the table's storage.
        error: the error the write's commit raised.
        operation: the write's operation, for the result.
    """
    return CommitResult(
        version=app_commit(
            storage,
            error.app_id,
            error.app_version,
            recorded=error.recorded_version,
            recorded_at=error.winning_version if error.winning_version is not None else -1,
        ),
        attempts=0,
        operation=operation,
        skipped=True,
    )


def check_overwrite_where(
    *, partitions: Sequence[Mapping[str, Any]] | None, schema_mode: Any
) -> None:
    """Refuse what an ``overwrite(where=...)`` cannot take with it."""
    check_schema_mode(schema_mode)
    if partitions is not None:
        raise InvalidArgumentError(
            "expected partitions= or where=, found both; a predicate on the "
            "partition columns in where= says the same."
        )
    if schema_mode != "strict":
        raise InvalidArgumentError(
            "expected schema_mode='strict' with where= (rows replaced by a "
            "predicate keep the table's schema), found 'merge'; evolve the schema "
            "first with add_columns() or widen_column()."
        )


def overwrite(
    table: TableHandle,
    data: Any,
    *,
    partitions: Sequence[Mapping[str, Any]] | None = None,
    schema_mode: SchemaMode = "strict",
) -> CommitResult:
    """:meth:`lakelog.Table.overwrite` of the whole table or of ``partitions``, on the
    latest snapshot.

    Args:
        table: the table overwritten.
        data: the new rows.
        partitions: the partitions replaced, one mapping of partition column to value
            each; default None, the whole table.
        schema_mode: ``"strict"`` (default) or ``"merge"``.
    """
    check_schema_mode(schema_mode)
    snap: Snapshot = table.snapshot()
    scope: list[dict[str, str | None]] | None = None
    if partitions is not None:
        scope = partition_scope(snap.partition_by, partitions)
    storage = table.storage
    with (
        Lease.acquire(storage, operation="OVERWRITE", properties=snap.properties) as lease,
        staged(storage) as files,
    ):
        with files.before_commit():
            plan, identity, adds = write_staged(
                storage, snap, data, schema_mode, lease=lease, files=files
            )
            if scope is not None:
                keys = {tuple(sorted(p.items())) for p in scope}
                if any(tuple(sorted(a.partition.items())) not in keys for a in adds):
                    raise InvalidArgumentError(
                        f"expected every row in the partitions being replaced {scope}, found "
                        f"rows for other partitions; include them in partitions= or filter "
                        f"the data."
                    )
            parts = snap.partition_by
            replaced = overwrite_removes(
                snap,
                None
                if scope is None
                else lambda f: {k: f.partition.get(k) for k in parts} in scope,
            )
            metadata = numbered(identity, plan.metadata, snap)
            actions: list[Action] = [metadata] if metadata is not None else []
            actions += replaced
            actions.extend(adds)
            parameters = {"partitions": scope} if scope is not None else {}
        return table.commit(
            actions,
            operation="OVERWRITE",
            kind="overwrite",
            read_snapshot=snap,
            parameters={**parameters, **plan.parameters()},
            metrics={
                "num_files": len(adds),
                "num_rows": sum(a.num_rows for a in adds),
                "num_removed_files": len(replaced),
            },
            replaced_partitions=scope,
            lease=lease,
            rebase=identity,
        )


def partition_scope(
    partition_by: Sequence[str], partitions: Sequence[Mapping[str, Any]] | Mapping[str, Any]
) -> list[dict[str, str | None]]:
    """The partitions an ``overwrite(partitions=...)`` replaces, in the log's string
    form: each must give a value for exactly the partition columns."""
    if not partition_by:
        raise InvalidArgumentError(
            "expected a partitioned table for overwrite(partitions=...), found an "
            "unpartitioned one; call overwrite(data) to replace the whole table."
        )
    if isinstance(partitions, Mapping):
        partitions = [partitions]
    scope = []
    for p in partitions:
        if set(p) != set(partition_by):
            raise InvalidArgumentError(
                f"expected values for exactly the partition columns {list(partition_by)}, "
                f"found {sorted(p)}"
            )
        scope.append({k: partition_string(p[k]) for k in partition_by})
    return scope


def check_write_mode(mode: Any) -> None:
    """Refuse a ``write_table`` mode other than append, overwrite or error."""
    if mode not in WRITE_MODES:
        raise InvalidArgumentError(
            f"expected mode 'append', 'overwrite' or 'error', found {mode!r}"
        )


def check_write_to(snapshot: Snapshot, *, mode: str, partition_by: Sequence[str]) -> None:
    """Refuse a ``write_table`` to the existing table of ``snapshot``: any write with
    ``mode="error"``, and a ``partition_by`` other than the table's.

    Args:
        snapshot: the existing table's latest snapshot.
        mode: the write's mode.
        partition_by: the partition columns the write gave (empty: none given).
    """
    if mode == "error":
        raise TableExistsError(
            f"expected no table at {snapshot.storage.uri} (mode='error'), found one at "
            f"version {snapshot.version}; use mode='append' or 'overwrite'."
        )
    if not partition_by:
        return
    given = list(partition_by)
    if snapshot.partition_specs:  # fields in any spelling: day(ts), days(ts), bucket(16,id)
        given = [
            parse_field(f).text
            for f in ([partition_by] if isinstance(partition_by, str) else partition_by)
        ]
    if given != snapshot.partitioning:
        raise SchemaMismatchError(
            f"expected partition_by {snapshot.partitioning} of the existing table, "
            f"found {list(partition_by)}; omit partition_by when writing to an existing table "
            f"(set_partitioning changes it)."
        )
