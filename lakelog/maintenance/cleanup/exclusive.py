"""One cleanup at a time: expiry and vacuum hold a cleanup lease while they delete.

A checkpoint may publish a root that reuses a leaf a deleter chose to delete just
before (``docs/format.md``, "Leaves in expiry and vacuum"). Both sides check after
acting: the checkpoint its leaves after publishing, the deleter the roots after
deleting, and whoever finds the damage writes the root again by replaying commits
from an older whole root. Those commits stay until an expiry deletes them, and an
expiry deletes them only after checking its own oldest root. So the repair always has
what it needs when no second deleter runs beside the first: this module makes sure
of that.

A cleanup writes a writer lease (``lakelog.leases``) with its operation, then reads
the leases. Another live cleanup lease, of a process that is not known dead, stops it
before it deleted anything (:class:`~lakelog.errors.CleanupRunningError`). Each side
wrote before it read, so of two cleanups starting together at least one sees the
other. Before each batch of deletes the holder checks that its lease never lapsed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Iterator, Mapping

from ..._failpoints import pausepoint
from ...errors import CleanupRunningError
from ...leases import Lease, LeaseRecord, in_force, read_leases
from ...storage import Storage

__all__ = ["CLEANUP_OPERATIONS", "ensure_held", "exclusive_cleanup"]

CLEANUP_OPERATIONS = frozenset({"EXPIRE SNAPSHOTS", "VACUUM"})
"""Operations of the leases that exclude each other."""

_NAMES = {"EXPIRE SNAPSHOTS": "an expiry", "VACUUM": "a vacuum"}


def _when(ms: float) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _other(storage: Storage, mine: str) -> LeaseRecord | None:
    now = time.time() * 1000
    for r in read_leases(storage):
        if r.lease_id != mine and r.operation in CLEANUP_OPERATIONS and in_force(r, now):
            return r
    return None


@contextlib.contextmanager
def exclusive_cleanup(
    storage: Storage, properties: Mapping[str, str], *, operation: str
) -> Iterator[Lease]:
    """Hold a cleanup lease for ``operation`` (one of :data:`CLEANUP_OPERATIONS`) while
    the block runs; :class:`CleanupRunningError` if another cleanup holds one."""
    lease = Lease.acquire(storage, operation=operation, properties=properties)
    try:
        pausepoint("cleanup:before-read")
        other = _other(storage, lease.lease_id)
        if other is not None:
            raise CleanupRunningError(
                f"expected no other expiry or vacuum running on {storage.uri}, found "
                f"{_NAMES.get(other.operation, other.operation)} by process {other.pid} on "
                f"{other.host} (started {_when(other.created_ms)}); one cleanup runs at a "
                f"time. Run this one again once it finished. If that process died, its lease "
                f"lapses at {_when(other.expires_ms + other.ttl_ms)} (at once when it ran on "
                f"this machine).",
                operation=other.operation,
                owner=f"{other.host}:{other.pid}",
            )
        yield lease
    finally:
        lease.release()


def ensure_held(storage: Storage, lease: Lease) -> None:
    """Before a batch of deletes: :class:`CleanupRunningError` if the lease lapsed at any
    point (the process stalled past its TTL), since another cleanup may have started."""
    if not lease.held():
        raise CleanupRunningError(
            f"expected this cleanup of {storage.uri} to hold its lease throughout, found it "
            f"lapsed (the process stalled longer than lakelog.lease.ttl_seconds), so another "
            f"expiry or vacuum may have started; it stopped deleting. Run it again.",
            operation=None,
            owner=None,
        )
