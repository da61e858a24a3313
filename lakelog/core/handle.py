"""The table core: what every operation takes instead of the :class:`~lakelog.Table` facade.

An operation (a write, a row-level change, a maintenance run, the Delta view, an
engine's commit) needs five things of a table: its storage, the snapshot it last
resolved, the latest snapshot (or one at a version), its properties, and the one commit
path. :class:`TableHandle` names them; :class:`TableCore` is the object that has them:
the storage plus the cached snapshot, committing through :mod:`lakelog.core.commit`
(the storage check, then a :class:`~lakelog.transaction.Transaction`) and moving its
cache to the version each commit lands.

``Table`` holds a ``TableCore`` and delegates to it, so a ``Table`` is a handle too
(users may pass one wherever an operation takes a handle); the operations never import
the facade. An entry point that hands a table to the user wraps the core an operation
returns in a ``Table`` in the facade's module (``Table.from_core``), the only place a
``Table`` is made.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, Literal, ParamSpec, Protocol, TypeVar

import pyarrow as pa

from ..errors import InvalidArgumentError, LogGapError
from ..leases import Lease
from ..log.actions import Action, AddFile, AppTransaction, Commit, Metadata
from ..log.commits import decode_commit, read_tail
from ..log.manifests import read_hint
from ..log.snapshot import Snapshot, advance, load_snapshot, version_as_of
from ..properties import get_int
from ..scan import Snapshot as ReadableSnapshot
from ..scan import readable
from ..storage import Storage
from ..transaction import CommitResult, Kind, Rebase, Rebuild
from .commit import commit, commit_files

__all__ = ["TableCore", "TableHandle", "delegated"]

_Params = ParamSpec("_Params")
_Returns = TypeVar("_Returns")


class TableHandle(Protocol):
    """A table as operations see it: storage, snapshots, properties, the one commit.

    :class:`TableCore` implements it; so does ``lakelog.Table``, by delegating to its
    core.
    """

    @property
    def storage(self) -> Storage:
        """The table's storage: its root URI and filesystem."""
        ...

    @property
    def cached(self) -> Snapshot:
        """The snapshot last resolved or committed, without reading the log."""
        ...

    @property
    def properties(self) -> dict[str, str]:
        """The table properties of the cached snapshot."""
        ...

    def refresh(self) -> TableHandle:
        """Bring the cached snapshot up to the latest version; returns the handle."""
        ...

    def snapshot(
        self, version: int | None = None, *, as_of: dt.datetime | None = None
    ) -> ReadableSnapshot:
        """The latest snapshot (the cache refreshed), the one at ``version``, or the
        latest at or before ``as_of``."""
        ...

    def commit(
        self,
        actions: Sequence[Action],
        *,
        operation: str,
        kind: Kind,
        read_snapshot: Snapshot | None = None,
        parameters: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
        replaced_partitions: Sequence[Mapping[str, str | None]] | None = None,
        rebase: Rebase | None = None,
        lease: Lease | None = None,
        rebuild: Rebuild | None = None,
    ) -> CommitResult:
        """Commit ``actions`` on top of ``read_snapshot`` (default: the cached one);
        the cache moves to the version the commit lands."""
        ...

    def commit_files(
        self,
        adds: Sequence[AddFile],
        *,
        mode: Literal["append", "overwrite"],
        operation: str,
        read_snapshot: Snapshot | None = None,
        parameters: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
        lease: Lease | None = None,
        app: AppTransaction | None = None,
    ) -> CommitResult:
        """Commit data files already written (add them, or replace every live file)."""
        ...


class TableCore:
    """A table's storage and its cached snapshot; commits through :mod:`.commit`.

    The one implementation of :class:`TableHandle` (``Table`` delegates to one).
    """

    def __init__(self, storage: Storage, snapshot: Snapshot) -> None:
        """A core at ``storage`` with ``snapshot`` (a version of that table) cached."""
        self._storage = storage
        self.cached = snapshot

    @classmethod
    def load(cls, storage: Storage) -> TableCore:
        """The table at ``storage``, at its latest version
        (:class:`~lakelog.errors.TableNotFoundError` if there is none)."""
        return cls(storage, load_snapshot(storage))

    def __repr__(self) -> str:
        return f"TableCore({self.storage.uri!r}, version={self.cached.version})"

    # -- state -------------------------------------------------------------------
    @property
    def storage(self) -> Storage:
        return self._storage

    @property
    def uri(self) -> str:
        return self._storage.uri

    @property
    def version(self) -> int:
        return self.cached.version

    @property
    def schema(self) -> pa.Schema:
        return self.cached.schema

    @property
    def partition_by(self) -> tuple[str, ...]:
        return self.cached.partition_by

    @property
    def properties(self) -> dict[str, str]:
        return self.cached.properties

    @property
    def metadata(self) -> Metadata:
        return self.cached.metadata

    def refresh(self) -> TableCore:
        """Bring the cached snapshot up to the latest version; returns self.

        Reads only the commits after the cached version; when it is far behind (more
        than two manifest intervals), resolves from scratch.
        """
        snap = self.cached
        limit = 2 * get_int(snap.properties, "lakelog.manifest_interval")
        new: list[Commit] = []
        try:
            for v, data in read_tail(self._storage, snap.version + 1):
                new.append(decode_commit(data, v))
                if len(new) > limit:
                    self.cached = load_snapshot(self._storage)
                    return self
        except LogGapError:
            # commits after the cached version were expired meanwhile, or the log is
            # damaged: resolve from scratch, which tells the two apart
            self.cached = load_snapshot(self._storage)
            return self
        if new:
            self.cached = advance(snap, new)
        elif (read_hint(self._storage) or -1) > snap.version:
            # the commits after the cached version are gone (expired): start over
            self.cached = load_snapshot(self._storage)
        return self

    def snapshot(
        self, version: int | None = None, *, as_of: dt.datetime | None = None
    ) -> ReadableSnapshot:
        """See :meth:`lakelog.Table.snapshot`."""
        if version is not None and as_of is not None:
            raise InvalidArgumentError("expected version or as_of, found both")
        if as_of is not None:
            if not isinstance(as_of, dt.datetime):
                raise InvalidArgumentError(
                    f"expected as_of to be a datetime, found {type(as_of).__name__}"
                )
            version = version_as_of(self._storage, as_of)
        if version is None:
            return readable(self.refresh().cached)
        if version == self.cached.version:
            return readable(self.cached)
        if not isinstance(version, int) or isinstance(version, bool):
            raise InvalidArgumentError(f"expected an integer version, found {version!r}")
        return readable(load_snapshot(self._storage, version))

    # -- the one commit ------------------------------------------------------------
    def commit(
        self,
        actions: Sequence[Action],
        *,
        operation: str,
        kind: Kind,
        read_snapshot: Snapshot | None = None,
        parameters: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
        replaced_partitions: Sequence[Mapping[str, str | None]] | None = None,
        rebase: Rebase | None = None,
        lease: Lease | None = None,
        rebuild: Rebuild | None = None,
    ) -> CommitResult:
        """Commit actions on top of ``read_snapshot`` (default: the cached one).

        This is the one place maintenance and engines write the log through; the cached
        snapshot moves to the version the commit lands.

        Args:
            actions: the log actions to commit (files added and removed, metadata, ...).
            operation: the operation recorded in the commit header, e.g. ``"APPEND"``.
            kind: the conflict rules the commit follows (see :mod:`lakelog.transaction`).
            read_snapshot: the snapshot the actions were planned on; default None, the
                cached one.
            parameters: the operation's parameters for the header; default none.
            metrics: the operation's metrics for the header; default none.
            replaced_partitions: the partitions an ``overwrite`` replaces (values in the
                log's string form); default None, the whole table.
            rebase: called with the winning commits before a retry, returns the actions
                to commit instead; default None, the same actions.
            lease: the writer lease the added files were written under; before every put
                it checks they are still there (:meth:`Lease.check`). Default None.
            rebuild: instead of ``rebase``, plans the operation again on the snapshot
                the winners made, after a lost race (:data:`lakelog.transaction.Rebuild`);
                default None.

        Returns:
            The version the commit landed at and the attempts it took.

        Raises:
            CommitConflictError: a concurrent commit conflicts with these actions.
        """
        done = commit(
            self._storage,
            read_snapshot or self.cached,
            actions,
            operation=operation,
            kind=kind,
            parameters=parameters,
            metrics=metrics,
            replaced_partitions=replaced_partitions,
            rebase=rebase,
            lease=lease,
            rebuild=rebuild,
        )
        self.advance(done.landed)
        return done.result

    def commit_files(
        self,
        adds: Sequence[AddFile],
        *,
        mode: Literal["append", "overwrite"],
        operation: str,
        read_snapshot: Snapshot | None = None,
        parameters: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
        lease: Lease | None = None,
        app: AppTransaction | None = None,
    ) -> CommitResult:
        """Commit data files already written: add them, or (``overwrite``) replace
        every file live in ``read_snapshot`` with them.

        Args:
            adds: the files, written under the table's root.
            mode: ``"append"`` adds them; ``"overwrite"`` also removes every live file.
            operation: the operation recorded in the commit header, e.g. ``"APPEND"``.
            read_snapshot: the snapshot to commit on; default None, the cached one.
            parameters: the operation's parameters for the header; default none.
            metrics: the operation's metrics for the header; default none.
            lease: the writer lease the files were written under; default None.
            app: the app version the files are, for exactly-once; default None.

        Raises:
            AppVersionCommittedError: ``app`` is not newer than the version recorded.
        """
        done = commit_files(
            self._storage,
            read_snapshot or self.cached,
            adds,
            mode=mode,
            operation=operation,
            parameters=parameters,
            metrics=metrics,
            lease=lease,
            app=app,
        )
        self.advance(done.landed)
        return done.result

    def advance(self, landed: Snapshot | None) -> None:
        """Cache ``landed`` (a version this core committed) if it is newer."""
        if landed is not None and landed.version > self.cached.version:
            self.cached = landed


def delegated(
    method: Callable[Concatenate[TableCore, _Params], _Returns],
) -> Callable[Concatenate[Any, _Params], _Returns]:
    """A method of a class that holds a :class:`TableCore` as ``_core`` (the
    ``lakelog.Table`` facade), calling ``method`` on that core: the same signature and
    docstring, written once, here."""

    @functools.wraps(method)
    def on_core(self: Any, /, *args: _Params.args, **kwargs: _Params.kwargs) -> _Returns:
        return method(self._core, *args, **kwargs)

    return on_core
