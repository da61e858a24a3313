"""The Delta-compatible view: every lakelog version as a Delta version in ``_delta_log/``.

With the table property ``lakelog.delta_view=true`` Delta readers (deltalake, polars,
DuckDB, Spark) read a lakelog table as a Delta table, time travel included. lakelog's
own log stays the source of truth; the view is written after each commit lands and is
read-only for other engines. See ``docs/delta-view.md``.

>>> import lakelog, pyarrow as pa, tempfile
>>> uri = tempfile.mkdtemp() + "/t"
>>> t = lakelog.create_table(uri, pa.schema([("id", pa.int64())]))
>>> _ = t.append(pa.table({"id": [1, 2]}))
>>> lakelog.enable_delta_view(uri).head
2
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...core import TableCore
from ...errors import InvalidArgumentError
from ...storage import Storage
from .types import check_schema, delta_protocol, delta_schema_string
from .view import DeltaViewStatus, SyncReport, disable_view, enable_view, sync_view, view_status

if TYPE_CHECKING:
    from ...core.handle import TableHandle

__all__ = [
    "DeltaViewStatus",
    "SyncReport",
    "check_schema",
    "delta_protocol",
    "delta_schema_string",
    "delta_view_status",
    "disable_delta_view",
    "enable_delta_view",
    "sync_delta_view",
]


def _table(table: TableHandle | str, storage_options: Mapping[str, Any] | None) -> TableHandle:
    if isinstance(table, str):
        return TableCore.load(Storage(table, storage_options))
    if not isinstance(getattr(table, "storage", None), Storage):
        raise InvalidArgumentError(
            f"expected a lakelog Table or a table URI, found {type(table).__name__}"
        )
    return table


def enable_delta_view(
    table: TableHandle | str,
    *,
    rebuild: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> DeltaViewStatus:
    """Turn the Delta view on (property ``lakelog.delta_view=true``) and bring it up to
    date: it starts with a Delta checkpoint at the version that enabled it.

    Refuses (:class:`~lakelog.errors.DeltaViewError`, nothing changed) a schema Delta
    cannot express, and a ``_delta_log/`` that lakelog did not write; ``rebuild=True``
    deletes ``_delta_log/`` first and starts again at the latest version (also the way
    out after another engine wrote to the view).

    Args:
        table: the table, or its URI.
        storage_options: fsspec options used to open ``table`` when it is a URI; default none.
        rebuild: delete ``_delta_log/`` and write the view again from the latest version;
            default False.

    Returns:
        The view's status after the update.
    """
    return enable_view(_table(table, storage_options), rebuild=rebuild)


def disable_delta_view(
    table: TableHandle | str,
    *,
    keep_log: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> int:
    """Turn the view off and delete ``_delta_log/`` (a view left behind would serve an
    old version to Delta readers).

    Args:
        table: the table, or its URI.
        storage_options: fsspec options used to open ``table`` when it is a URI; default none.
        keep_log: keep ``_delta_log/`` on disk; default False.

    Returns:
        The number of files deleted.
    """
    return disable_view(_table(table, storage_options), keep_log=keep_log)


def sync_delta_view(
    table: TableHandle | str, *, storage_options: Mapping[str, Any] | None = None
) -> SyncReport:
    """Write every Delta version the view is missing (a writer killed after its commit
    leaves one), in order, and delete Delta entries below the oldest readable version.

    Args:
        table: the table, or its URI.
        storage_options: fsspec options used to open ``table`` when it is a URI; default none.
    """
    return sync_view(_table(table, storage_options).storage)


def delta_view_status(
    table: TableHandle | str, *, storage_options: Mapping[str, Any] | None = None
) -> DeltaViewStatus:
    """Where the view stands: the Delta version readers see, versions missing, and
    whether another engine wrote to it.

    Args:
        table: the table, or its URI.
        storage_options: fsspec options used to open ``table`` when it is a URI; default none.
    """
    return view_status(_table(table, storage_options).storage)
