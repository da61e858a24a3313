"""The one way actions reach the log: the storage check, then a :class:`Transaction`.

Every writer (the table's own writes, row-level changes, maintenance, the engines)
commits through :func:`commit` (``TableCore.commit`` is it, keeping the table's
cached snapshot up to date). :func:`commit_files` is the commit of data files already
written; :func:`overwrite_removes` builds every overwrite's remove actions;
:func:`commit_history` reads the commits' headers back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from ..errors import InvalidArgumentError
from ..leases import Lease
from ..log.actions import Action, AddFile, AppTransaction, CommitHeader, DataFile, RemoveFile
from ..log.commits import commit_path, decode_header, list_log
from ..log.snapshot import Snapshot
from ..storage import Storage
from ..storage_check import ensure_put_if_absent
from ..transaction import (
    CommitResult,
    Kind,
    Rebase,
    Rebuild,
    Transaction,
    check_app_versions,
)

__all__ = ["Committed", "commit", "commit_files", "commit_history", "overwrite_removes"]


class Committed(NamedTuple):
    """A commit's result and the snapshot it landed (None when the transaction did not
    resolve it, e.g. an idempotent retry that found its own commit)."""

    result: CommitResult
    landed: Snapshot | None


def commit(
    storage: Storage,
    read_snapshot: Snapshot,
    actions: Sequence[Action],
    *,
    operation: str,
    kind: Kind,
    parameters: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | None = None,
    replaced_partitions: Sequence[Mapping[str, str | None]] | None = None,
    rebase: Rebase | None = None,
    rebuild: Rebuild | None = None,
    lease: Lease | None = None,
) -> Committed:
    """Commit ``actions`` on top of ``read_snapshot`` (see :class:`Transaction` for the
    conflict rules of ``kind``, ``replaced_partitions``, ``rebase`` and ``rebuild``).

    Args:
        storage: the table's storage.
        read_snapshot: the snapshot the actions were planned on.
        actions: the log actions to commit.
        operation: the operation recorded in the commit header, e.g. ``"APPEND"``.
        kind: the conflict rules the commit follows.
        parameters: the operation's parameters for the header; default none.
        metrics: the operation's metrics for the header; default none.
        replaced_partitions: the partitions an ``overwrite`` replaces (log string
            values); default None, the whole table.
        rebase: called with the winning commits before a retry, returns the actions to
            commit instead; default None, the same actions.
        rebuild: instead of ``rebase``, plans the operation again on the snapshot the
            winners made (:data:`~lakelog.transaction.Rebuild`); default None.
        lease: the writer lease the added files were written under; before every put it
            checks they are still there (:meth:`Lease.before_put`). Default None.

    Returns:
        The commit's result and the snapshot it landed.
    """
    # a store that ignores put-if-absent would let commits replace each other
    ensure_put_if_absent(storage, read_snapshot.properties, actions)
    txn = Transaction(
        storage,
        read_snapshot,
        operation=operation,
        kind=kind,
        actions=actions,
        parameters=parameters,
        metrics=metrics,
        replaced_partitions=replaced_partitions,
        rebase=rebase,
        rebuild=rebuild,
        before_put=None if lease is None else lease.before_put(lambda: txn.actions),
    )
    result = txn.commit()
    return Committed(result, txn.landed_snapshot)


def overwrite_removes(
    snapshot: Snapshot, replaced: Callable[[DataFile], bool] | None = None
) -> list[RemoveFile]:
    """The remove actions of an overwrite on ``snapshot``: one for every live file, or
    for those ``replaced`` selects (a partition overwrite), all stamped with one
    deletion time. Every overwrite (the table's, a commit of files already written,
    Spark's static and dynamic ones) builds its removes here."""
    now = int(time.time() * 1000)
    return [
        f.to_remove(deletion_ms=now) for f in snapshot.files() if replaced is None or replaced(f)
    ]


def commit_files(
    storage: Storage,
    snapshot: Snapshot,
    adds: Sequence[AddFile],
    *,
    mode: Literal["append", "overwrite"],
    operation: str,
    parameters: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | None = None,
    lease: Lease | None = None,
    app: AppTransaction | None = None,
) -> Committed:
    """Commit data files already written on top of ``snapshot``: add them, or
    (``overwrite``) replace every file live in ``snapshot`` with them. The caller owns
    the files (and stages them).

    Args:
        storage: the table's storage.
        snapshot: the snapshot to commit on.
        adds: the files, written under the table's root.
        mode: ``"append"`` adds them; ``"overwrite"`` also removes every live file.
        operation: the operation recorded in the commit header, e.g. ``"APPEND"``.
        parameters: the operation's parameters for the header; default none.
        metrics: the operation's metrics for the header; default none.
        lease: the writer lease the files were written under; default None.
        app: the app version the files are, for exactly-once; default None.

    Raises:
        AppVersionCommittedError: ``app`` is not newer than the version recorded.
    """
    actions: list[Action] = list(adds)
    if app is not None:
        check_app_versions([app], snapshot.app_versions, snapshot.app_commits)
        actions.append(app)
    out_metrics = dict(metrics or {})
    if mode == "overwrite":
        removes = overwrite_removes(snapshot)
        actions = [*removes, *actions]
        out_metrics["num_removed_files"] = len(removes)
    return commit(
        storage,
        snapshot,
        actions,
        operation=operation,
        kind="overwrite" if mode == "overwrite" else "append",
        parameters=parameters,
        metrics=out_metrics,
        lease=lease,
    )


def commit_history(storage: Storage, limit: int | None = None) -> list[CommitHeader]:
    """Commit headers, newest first (at most ``limit``: an integer > 0, or None for
    all). A commit expired while this reads is left out."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
        raise InvalidArgumentError(
            f"expected limit to be an integer > 0 (commits) or None, found {limit!r}; "
            f"pass a whole number such as limit=10."
        )
    versions = list_log(storage).commits[::-1]
    if limit is not None:
        versions = versions[:limit]
    datas = storage.read_many([commit_path(v) for v in versions])
    return [decode_header(d, v) for v, d in zip(versions, datas, strict=True) if d is not None]
