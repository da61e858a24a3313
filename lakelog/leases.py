"""Writer leases: an uncommitted writer announces what it writes, so vacuum keeps it.

A writer (Arrow appends and overwrites, Spark writes, compaction, clustering)
creates ``_lakelog/_leases/<lease id>.json`` before it writes its first data
file, puts the lease id into the path of every file it writes (the file name,
or the Spark staging folder), renews the lease from a heartbeat thread every
``ttl / 4`` and deletes it once its commit landed or it gave up; a killed
writer's lease expires, or ends at once where its holder is known dead
(:func:`holder_gone`). ``vacuum`` keeps every file whose path carries the id of a
lease in force (:func:`in_force`), whatever ``older_than`` or ``force`` say. ``add_files``,
which adopts files that already exist (their names carry no lease id), names them
in its lease instead (``paths``; see :meth:`Lease.confirm_adopted`).

A lease is live for vacuum until ``expires_ms`` plus one ``ttl`` of grace
(clock skew between machines), unless its holder is known dead: a dead process
commits nothing, so its files are orphans at once. Vacuum deletes within
:data:`LEASE_RECHECK_SECONDS` of reading the leases (it reads them again
before a delete batch otherwise). A writer whose lease lapsed (the process
stalled, or its heartbeats failed) may therefore have lost files; before its
commit (:meth:`Lease.check`, the transaction's ``before_put``) it renews the
lease, waits until every vacuum that saw it expired has finished deleting,
and checks that its files still exist: if not, the commit fails with
:class:`~lakelog.errors.LeaseExpiredError` instead of landing on missing files.
See ``docs/format.md``, "Writer leases".

Leases are not part of the versioned log: readers never look at them.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType

import msgspec

from ._failpoints import pausepoint
from .errors import AdoptedFilesMissingError, LeaseExpiredError
from .log.actions import Action, AddFile, ChangeFile
from .log.commits import LOG_DIR
from .properties import get_float
from .storage import Storage

__all__ = [
    "LEASE_DIR",
    "LEASE_RECHECK_SECONDS",
    "Lease",
    "LeaseRecord",
    "holder_gone",
    "in_force",
    "lease_ids_in",
    "lease_path",
    "process_identity",
    "read_leases",
    "recheck_seconds",
]

log = logging.getLogger("lakelog")

LEASE_DIR = f"{LOG_DIR}/_leases"
LEASE_RECHECK_SECONDS = 5.0
"""Vacuum reads the leases again (and the commits since) before a delete batch once
this long has passed since it last read them, so it deletes a file at most this
long (plus one delete request) after seeing its lease expired. A writer whose
lease lapsed waits twice this long, twice, before checking its files."""

NO_HEARTBEAT_ENV = "LAKELOG_TEST_NO_LEASE_HEARTBEAT"
"""Tests only: set to ``1`` and leases are never renewed by a heartbeat, so they expire."""

RECHECK_ENV = "LAKELOG_TEST_LEASE_RECHECK_SECONDS"
"""Tests only: seconds that replace :data:`LEASE_RECHECK_SECONDS`, so the waits after a
lapse are short. Set it for every process on the table (writers and vacuum must agree)."""


def recheck_seconds() -> float:
    """:data:`LEASE_RECHECK_SECONDS`, or the value of :data:`RECHECK_ENV` where set."""
    raw = os.environ.get(RECHECK_ENV)
    return float(raw) if raw else LEASE_RECHECK_SECONDS


_FILE_RE = re.compile(r"^([0-9a-f]{32})\.json$")
_ID_RE = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")
_MAX_ROUNDS = 5


def _now_ms() -> int:
    return int(time.time() * 1000)


class LeaseRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The content of a lease file (times in ms since the epoch, the writer's clock)."""

    lease_id: str
    operation: str
    host: str
    pid: int
    created_ms: int
    expires_ms: int
    ttl_ms: int
    paths: tuple[str, ...] = ()
    """Root-relative paths of existing files the writer adopts (``add_files``): covered
    by the lease although their names carry no lease id."""
    process: str | None = None
    """The holder's :func:`process_identity` (None: written by a lakelog before it)."""

    def live(self, now_ms: float) -> bool:
        """Whether vacuum must keep this lease's files: until ``expires_ms`` plus one
        ``ttl`` of grace for clock skew between the writer and vacuum."""
        return now_ms < self.expires_ms + self.ttl_ms


_DECODER = msgspec.json.Decoder(LeaseRecord)


def _proc_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (Linux), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
        # fields after the command name, which may hold spaces and parentheses; the
        # first of them is field 3, the start time field 22
        return int(text[text.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _namespace() -> str | None:
    """``<boot id>/<pid namespace inode>`` of this process (Linux), or None."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot}/{ns}" if boot and "/" not in boot else None


_IDENTITY: dict[int, str] = {}


def process_identity() -> str:
    """What tells this process apart from every other one (lease field ``process``):
    ``<boot id>/<pid namespace>/<start time>`` on Linux, else ``""``."""
    pid = os.getpid()
    got = _IDENTITY.get(pid)  # by pid: a forked child is another process
    if got is None:
        ns, start = _namespace(), _proc_start(pid)
        got = "" if ns is None or start is None else f"{ns}/{start}"
        _IDENTITY[pid] = got
    return got


def holder_gone(record: LeaseRecord) -> bool:
    """Whether the process holding ``record`` is known to no longer run, so its lease is
    over before it expires (a crashed run re-run on the same machine need not wait out
    the TTL). Known only on the same host name, boot and pid namespace, from a lease
    that names its process (docs/format.md, "Dead holders"); anything else is judged by
    expiry: taking a live holder for dead would let two cleanups run at once."""
    if record.process is None or record.pid <= 0 or record.host != socket.gethostname():
        return False
    mine = process_identity()
    if not record.process or not mine:  # no /proc: the host name is all there is
        return record.process == mine and not _pid_exists(record.pid)
    boot_ns, _, start = record.process.rpartition("/")
    if boot_ns != mine.rpartition("/")[0]:
        return False  # another container with this host name, or before a reboot
    if not _pid_exists(record.pid):
        return True
    now = _proc_start(record.pid)
    return now is not None and str(now) != start  # the pid was reused since


def in_force(record: LeaseRecord, now_ms: float) -> bool:
    """Whether a lease counts at ``now_ms``: live (:meth:`LeaseRecord.live`) and its
    holder not known dead (:func:`holder_gone`). The one rule for writer, cleanup and
    claim leases (docs/format.md, "Dead holders")."""
    return record.live(now_ms) and not holder_gone(record)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def lease_path(lease_id: str) -> str:
    """Root-relative path of a lease file."""
    return f"{LEASE_DIR}/{lease_id}.json"


def lease_ids_in(path: str) -> set[str]:
    """Lease ids a path carries: every run of exactly 32 lowercase hex digits (bounded by
    other characters) in its folder or file names."""
    return set(_ID_RE.findall(path))


def read_leases(storage: Storage) -> list[LeaseRecord]:
    """Every lease file of the table (a lease released while reading is skipped).

    A lease file that cannot be decoded (damaged outside lakelog) counts as live
    forever, with a warning: keeping files is the safe side.
    """
    ids = [m.group(1) for n in storage.list_names(LEASE_DIR) if (m := _FILE_RE.match(n))]
    out: list[LeaseRecord] = []
    for lease_id, data in zip(ids, storage.read_many([lease_path(i) for i in ids]), strict=True):
        if data is None:
            continue
        try:
            record = _DECODER.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            log.warning(
                "expected lease file %s to be a lease, found undecodable bytes (%s); the "
                "files it names are kept. Delete it if no writer is running.",
                lease_path(lease_id),
                e,
            )
            record = LeaseRecord(
                lease_id=lease_id,
                operation="?",
                host="?",
                pid=0,
                created_ms=0,
                expires_ms=2**62,
                ttl_ms=0,
            )
        if record.lease_id == lease_id:
            out.append(record)
    return out


def added_paths(actions: Iterable[Action]) -> list[str]:
    """Paths of the files a list of actions adds: data files and change files."""
    return [a.path for a in actions if isinstance(a, (AddFile, ChangeFile))]


class Lease:
    """One writer's lease: written by :meth:`acquire`, renewed by a heartbeat thread
    every ``ttl / 4``, deleted by :meth:`release` (or leaving a ``with`` block).

    ``lease_id`` goes into the path of every file the writer writes.
    """

    def __init__(
        self, storage: Storage, *, operation: str, ttl_s: float, paths: Sequence[str] = ()
    ) -> None:
        self.storage = storage
        self.operation = operation
        self.paths = tuple(paths)
        self.lease_id = uuid.uuid4().hex
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.created_ms = _now_ms()
        self.expires_ms = 0
        """Expiry of the last renewal that reached the storage (the writer's clock)."""
        self._lapses = 0
        """Renewals that found the lease already expired (so vacuum may have seen it so)."""
        self._checked = 0
        """Lapses after which :meth:`check` found every file still there."""
        self._lapsed_ms = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._released = False

    @classmethod
    def acquire(
        cls,
        storage: Storage,
        *,
        operation: str,
        properties: Mapping[str, str],
        paths: Sequence[str] = (),
    ) -> Lease:
        """Write a new lease (TTL from ``lakelog.lease.ttl_seconds``) and start its
        heartbeat. Call before writing the first data file. ``paths``: existing files
        (root-relative) the writer adopts, covered by name (see :meth:`confirm_adopted`)."""
        lease = cls(
            storage,
            operation=operation,
            ttl_s=get_float(properties, "lakelog.lease.ttl_seconds"),
            paths=paths,
        )
        lease.renew()
        if not os.environ.get(NO_HEARTBEAT_ENV):
            threading.Thread(
                target=lease._beat, name=f"lakelog-lease-{lease.lease_id[:8]}", daemon=True
            ).start()
        return lease

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lease({self.lease_id}, {self.operation}, ttl={self.ttl_ms / 1000:g}s)"

    def renew(self) -> None:
        """Write the lease with a fresh expiry (creating it again if it was deleted)."""
        with self._lock:
            if self._released:
                return
            before = self.expires_ms
            now = _now_ms()
            record = LeaseRecord(
                lease_id=self.lease_id,
                operation=self.operation,
                host=socket.gethostname(),
                pid=os.getpid(),
                created_ms=self.created_ms,
                expires_ms=now + self.ttl_ms,
                ttl_ms=self.ttl_ms,
                paths=self.paths,
                process=process_identity(),
            )
            self.storage.write_bytes(lease_path(self.lease_id), msgspec.json.encode(record))
            done = _now_ms()
            if before and done >= before:  # visible again only after it had expired
                self._lapses += 1
                self._lapsed_ms = max(self._lapsed_ms, done - before)
            self.expires_ms = record.expires_ms

    def _beat(self) -> None:
        interval = self.ttl_ms / 4000
        while not self._stop.wait(interval):
            try:
                self.renew()
            except Exception as e:  # noqa: BLE001 - retried next beat; check() notices a lapse
                log.warning(
                    "could not renew writer lease %s on %s: %r; retrying in %.1fs",
                    self.lease_id,
                    self.storage.uri,
                    e,
                    interval,
                )

    def held(self) -> bool:
        """Whether every renewal so far landed before the lease expired and it has not
        expired now (on this process's clock): nobody could have judged it lapsed."""
        with self._lock:
            return not self._released and self._lapses == 0 and _now_ms() < self.expires_ms

    def release(self) -> None:
        """Stop the heartbeat and delete the lease (best effort: it expires anyway)."""
        self._stop.set()
        with self._lock:
            if self._released:
                return
            self._released = True
            try:
                self.storage.delete([lease_path(self.lease_id)])
            except Exception as e:  # noqa: BLE001 - an unreleased lease just expires
                log.warning("could not delete writer lease %s: %r", self.lease_id, e)

    def before_put(self, actions: Callable[[], Iterable[Action]]) -> Callable[[], None]:
        """The ``before_put`` of a transaction whose current actions ``actions()`` returns."""
        return lambda: self.check(added_paths(actions()))

    def check(self, paths: Iterable[str]) -> None:
        """Make sure the files ``paths`` are safe to commit, right before a commit put.

        While the lease is comfortably live (renewed less than ``ttl / 2`` ago, never
        lapsed since the last check) this costs nothing. Otherwise it is renewed; if
        it had expired, vacuum may have seen it so: wait until every vacuum that did
        has finished deleting (twice :data:`LEASE_RECHECK_SECONDS`), renew again (a
        vacuum may have deleted the expired lease file meanwhile), wait again, and
        check that every file still exists. Raises :class:`LeaseExpiredError` if any
        is missing.
        """
        pausepoint("lease:before-check")
        wanted = list(paths)
        for _ in range(_MAX_ROUNDS):
            with self._lock:
                now = _now_ms()
                at_risk = self._lapses != self._checked or now >= self.expires_ms
                if not at_risk and now < self.expires_ms - self.ttl_ms / 2:
                    return
            try:
                self.renew()
            except Exception as e:
                if not at_risk:  # still live for vacuum until well after the put
                    log.warning("could not renew writer lease %s: %r", self.lease_id, e)
                    return
                raise self._unconfirmed(e) from e
            with self._lock:
                lapses, lapsed_ms = self._lapses, self._lapsed_ms
            if lapses == self._checked:
                return  # renewed before it expired: no vacuum can have seen it expired
            settle = 2 * recheck_seconds()
            try:
                time.sleep(settle)
                self.renew()
                time.sleep(settle)
                missing = [p for p in wanted if not self.storage.exists(p)]
            except Exception as e:
                raise self._unconfirmed(e) from e
            if missing:
                raise LeaseExpiredError(
                    f"expected the {len(wanted)} data files this {self.operation} wrote to "
                    f"still exist when committing, found {len(missing)} missing "
                    f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): its "
                    f"writer lease {self.lease_id} was expired for {lapsed_ms / 1000:.1f}s "
                    f"(the process stalled or could not reach the storage) and vacuum deleted "
                    f"them as orphans. Nothing was committed. Run the write again; if the "
                    f"writer can stall that long, raise the table property "
                    f"lakelog.lease.ttl_seconds (now {self.ttl_ms / 1000:g}s).",
                    missing_files=tuple(missing),
                    expired_s=lapsed_ms / 1000,
                )
            with self._lock:
                self._checked = lapses
        raise self._unconfirmed(None)

    def confirm_adopted(self, paths: Sequence[str]) -> None:
        """Make sure existing files this lease names (``paths``) survived every vacuum
        that read the leases before this one was written: such a vacuum deletes at most
        :data:`LEASE_RECHECK_SECONDS` after its reading, so wait until twice that has
        passed since the lease was first written, then check that each file exists.
        Raises :class:`AdoptedFilesMissingError` naming the missing ones."""
        pausepoint("lease:before-confirm")
        wanted = list(paths)
        if not wanted:
            return
        left = self.created_ms / 1000 + 2 * recheck_seconds() - time.time()
        if left > 0:
            time.sleep(left)
        missing = [p for p in wanted if not self.storage.exists(p)]
        if missing:
            raise AdoptedFilesMissingError(
                f"expected the {len(wanted)} files this {self.operation} adopts to exist "
                f"after taking writer lease {self.lease_id}, found {len(missing)} missing "
                f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): they "
                f"were older than vacuum's age limit and a vacuum that started before the "
                f"lease deleted them as orphans (or another process removed them). Nothing "
                f"was committed. Write the files again and adopt them while they are young, "
                f"or outside vacuum runs.",
                missing_files=tuple(missing),
            )

    def _unconfirmed(self, cause: Exception | None) -> LeaseExpiredError:
        """The error when an expired lease could not be renewed and checked."""
        found = (
            f"the storage failing ({cause!r})"
            if cause is not None
            else "it expiring again and again (its heartbeat cannot renew it)"
        )
        return LeaseExpiredError(
            f"expected to renew the expired writer lease {self.lease_id} of this "
            f"{self.operation} and check its data files on {self.storage.uri} before "
            f"committing, found {found}. Nothing was committed; vacuum may have deleted "
            f"its files. Check access to the storage and run the write again.",
            missing_files=(),
            expired_s=self._lapsed_ms / 1000,
        )
