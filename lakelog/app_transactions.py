"""App transactions: exactly-once ingest (docs/format.md, "App transactions").

A write that carries ``app_id``/``app_version`` records them in an ``app_txn`` action;
a later write of the same or an older version of that app is refused
(:class:`~lakelog.errors.AppVersionCommittedError`), which writers report as a skipped
write. The conflict rules of :mod:`lakelog.transaction` apply these checks to the
winners of a race.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from .errors import AppVersionCommittedError, InvalidArgumentError
from .log.actions import Action, AppTransaction
from .log.commits import commit_path, decode_commit
from .storage import Storage

__all__ = ["APP_SEARCH", "MAX_APP_ID", "app_commit", "app_transaction", "check_app_versions"]

MAX_APP_ID = 256


def app_transaction(app_id: str | None, app_version: int | None) -> AppTransaction | None:
    """The ``app_txn`` action of a write given ``app_id``/``app_version`` (None: neither)."""
    if app_id is None and app_version is None:
        return None
    if app_id is None or app_version is None:
        raise InvalidArgumentError(
            f"expected app_id and app_version together (exactly-once ingest), found only "
            f"{'app_id' if app_version is None else 'app_version'}; pass both, e.g. "
            f"app_id='ingest-7', app_version=12."
        )
    if not isinstance(app_id, str) or not app_id or len(app_id) > MAX_APP_ID:
        raise InvalidArgumentError(
            f"expected app_id to be a non-empty string of at most {MAX_APP_ID} characters, "
            f"found {app_id!r}"
        )
    if isinstance(app_version, bool) or not isinstance(app_version, int) or app_version < 0:
        raise InvalidArgumentError(
            f"expected app_version to be an integer >= 0 (a batch number), found {app_version!r}"
        )
    return AppTransaction(
        app_id=app_id, app_version=app_version, timestamp_ms=int(time.time() * 1000)
    )


APP_SEARCH = 1000
"""Commits read back, at most, to find the one that holds an older app version."""


def app_commit(
    storage: Storage, app_id: str, app_version: int, *, recorded: int, recorded_at: int
) -> int:
    """The commit that holds ``app_version`` of ``app_id``, given the version ``recorded``
    for it at commit ``recorded_at``: that commit when they are the same, else the
    newest commit before it with the version (read back at most :data:`APP_SEARCH`
    commits), else ``recorded_at`` (the version was never committed, or was expired)."""
    if recorded == app_version:
        return recorded_at
    top = recorded_at - 1
    low = max(0, recorded_at - APP_SEARCH)
    while top >= low:
        versions = list(range(top, max(low, top - 63) - 1, -1))
        datas = storage.read_many([commit_path(v) for v in versions])
        for v, data in zip(versions, datas, strict=True):
            if data is None:  # expired (or damaged): no older commit to look at
                return recorded_at
            if b'"app_txn"' not in data:
                continue
            for a in decode_commit(data, v).actions:
                if (
                    isinstance(a, AppTransaction)
                    and a.app_id == app_id
                    and a.app_version == app_version
                ):
                    return v
        top = versions[-1] - 1
    return recorded_at


def check_app_versions(
    actions: Sequence[Action], recorded: Mapping[str, int], commits: Mapping[str, int]
) -> None:
    """Raise :class:`AppVersionCommittedError` if an ``app_txn`` of ``actions`` is not
    newer than the version ``recorded`` for its app id (``commits``: which commit
    recorded it)."""
    for a in actions:
        if not isinstance(a, AppTransaction):
            continue
        got = recorded.get(a.app_id)
        if got is not None and got >= a.app_version:
            v = commits.get(a.app_id, -1)
            raise AppVersionCommittedError(
                f"expected version {a.app_version} of app {a.app_id!r} to be newer than the "
                f"one recorded, found version {got} recorded by commit {v}; the batch is "
                f"already in the table, so nothing was committed.",
                app_id=a.app_id,
                app_version=a.app_version,
                recorded_version=got,
                winning_version=v,
            )
