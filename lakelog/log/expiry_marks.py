"""Expiry marks: how a writer learns, after publishing, that it landed in an expired range.

A writer checks that its base commit exists, then creates its commit
put-if-absent. Between the two, an expiry can delete the base *and* the commit
at the writer's version; the put then succeeds below the oldest readable
version, where no reader will ever look. The check before the put cannot close
that window, so the writer checks again after it.

Before ``expire_snapshots`` deletes anything it writes a mark
``_lakelog/_expired/<oldest:020d>.json`` naming the new oldest version, the
previous one, and the ``txn_id`` of every commit it expires. After a
successful put at ``v`` the writer lists the marks (a small folder):

* no mark above ``v``: no expiry that could have deleted the old commit ``v``
  had started deleting before the put, so the commit is readable;
* the mark covering ``v`` (the lowest mark above ``v`` with ``previous <= v``)
  names this transaction at ``v``: the commit landed, and an expiry that ran
  right after expired it, so its rows are in every later version;
* it names another transaction: the put filled a hole the expiry had just
  made. The writer withdraws its commit and commits again at a fresh version.

Marks are additive files that readers ignore; expiry keeps the newest
:data:`KEEP_MARKS` of them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import msgspec

from ..storage import Storage
from .commits import LOG_DIR

__all__ = [
    "EXPIRED_DIR",
    "KEEP_MARKS",
    "ExpiryMark",
    "mark_path",
    "marks_above",
    "prune_marks",
    "read_mark",
    "write_mark",
]

EXPIRED_DIR = f"{LOG_DIR}/_expired"
KEEP_MARKS = 100
"""Marks kept; a writer that stalls between its put and its check through more
expiries than this falls back to the file check in ``Transaction``."""


class ExpiryMark(msgspec.Struct, frozen=True, kw_only=True):
    oldest_version: int
    previous_oldest_version: int
    txn_ids: dict[int, str]
    """``txn_id`` of each expired commit the expiry read, by version."""
    created_ms: int = 0


def mark_path(oldest_version: int) -> str:
    return f"{EXPIRED_DIR}/{oldest_version:020d}.json"


def write_mark(
    storage: Storage, *, oldest_version: int, previous: int, txn_ids: Mapping[int, str]
) -> None:
    mark = ExpiryMark(
        oldest_version=oldest_version,
        previous_oldest_version=previous,
        txn_ids=dict(txn_ids),
        created_ms=int(time.time() * 1000),
    )
    storage.write_bytes(mark_path(oldest_version), msgspec.json.encode(mark))


def _marks(storage: Storage) -> list[int]:
    out = []
    for name in storage.list_names(EXPIRED_DIR):
        stem = name.removesuffix(".json")
        if name.endswith(".json") and stem.isdigit():
            out.append(int(stem))
    return sorted(out)


def marks_above(storage: Storage, version: int) -> list[int]:
    """Oldest versions of the marks above ``version``, ascending (one listing)."""
    return [m for m in _marks(storage) if m > version]


def read_mark(storage: Storage, oldest_version: int) -> ExpiryMark | None:
    """A mark, or None when it is gone or unreadable."""
    try:
        return msgspec.json.decode(storage.read_bytes(mark_path(oldest_version)), type=ExpiryMark)
    except (FileNotFoundError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def prune_marks(storage: Storage) -> None:
    """Delete all but the newest :data:`KEEP_MARKS` marks."""
    marks = _marks(storage)
    storage.delete([mark_path(m) for m in marks[:-KEEP_MARKS]])
