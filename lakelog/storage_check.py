"""Checking once per store that put-if-absent is kept, before trusting it with commits.

Every commit is a put-if-absent (:meth:`lakelog.storage.Storage.put_if_absent`).
Some S3-compatible stores accept the conditional-put header and ignore it: there
two writers that both create version ``v`` both succeed, and the last one silently
replaces the other's commit. So before the first commit through a store, lakelog
puts a fresh probe key twice (:meth:`~lakelog.storage.Storage.refuses_second_put`)
and commits only if the second put was refused; otherwise it raises
:class:`~lakelog.errors.StorageConsistencyError`.

Once per store: a passed check is recorded in :data:`MARKER` (which store, when,
which lakelog), an informational file readers ignore (``docs/format.md``, "Checking
the store"), so later writers read one small file instead of probing; a
:class:`~lakelog.storage.Storage` that passed is not asked again. A marker written
for another store (a copied table, another endpoint) does not count. Failures are
never recorded: a writer probes again, so a store that was fixed is trusted as soon
as it keeps the promise.

The table property ``lakelog.storage.check_put_if_absent=false`` skips the check
(given to ``create_table``/``write_table`` through ``properties=`` for a new table;
a commit that sets it is not checked itself, so it can be set on a store that fails).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .__about__ import __version__
from .errors import StorageConsistencyError
from .log.actions import Action, Metadata
from .log.commits import LOG_DIR, list_log
from .properties import get_bool
from .storage import Storage

__all__ = [
    "CHECK_PROPERTY",
    "MARKER",
    "PROBE_PREFIX",
    "StorageCheck",
    "check_storage",
    "ensure_put_if_absent",
    "read_marker",
    "record_created",
    "store_id",
]

log = logging.getLogger("lakelog")

CHECK_PROPERTY = "lakelog.storage.check_put_if_absent"
MARKER = f"{LOG_DIR}/_storage_check.json"
"""The record of a passed check (never a commit name: those are all digits)."""
PROBE_PREFIX = f"{LOG_DIR}/.storage-check."
"""Probe keys are ``<prefix><32 hex>.tmp``: named like a writer's temporary file, so
vacuum removes one a killed check left behind."""

_passed: weakref.WeakKeyDictionary[Storage, bool] = weakref.WeakKeyDictionary()
"""Storages that passed, each with whether its marker is still to be written (a new
table's marker is written once its first commit landed)."""


@dataclass(frozen=True)
class StorageCheck:
    """The outcome of :func:`check_storage`."""

    uri: str
    store: str
    refused_second_put: bool
    checked_ms: int
    marker: str | None
    """The marker written (or removed, when the check failed); None when there is no
    table at ``uri`` to record it in."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "store": self.store,
            "ok": self.refused_second_put,
            "refused_second_put": self.refused_second_put,
            "checked_ms": self.checked_ms,
            "marker": self.marker,
        }

    def error(self) -> StorageConsistencyError:
        """The error a commit through this store raises when the check failed."""
        return _refused(self.uri, committing=False)

    def summary(self) -> str:
        if self.refused_second_put:
            verdict = "ok: a second conditional put of the same key was refused"
        else:
            verdict = "FAILED: a second conditional put of the same key was accepted"
        if self.marker is None:
            recorded = "not recorded (no table here yet; creating one checks again)"
        elif self.refused_second_put:
            recorded = f"recorded in {self.marker}"
        else:
            recorded = f"{self.marker} removed"
        return f"store          {self.store}\nput-if-absent  {verdict}\nresult         {recorded}"


def store_id(storage: Storage) -> str:
    """The store a check holds for: the table's URI and, when set, the endpoint."""
    opts = storage.storage_options
    endpoint = opts.get("endpoint_url")
    kwargs = opts.get("client_kwargs")
    if endpoint is None and isinstance(kwargs, Mapping):
        endpoint = kwargs.get("endpoint_url")
    return storage.uri if endpoint is None else f"{storage.uri} at {endpoint}"


def read_marker(storage: Storage) -> dict[str, Any] | None:
    """The marker's content, or None if absent or unreadable (it only saves a probe)."""
    try:
        value = json.loads(storage.read_bytes(MARKER))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _marker_holds(storage: Storage) -> bool:
    marker = read_marker(storage)
    return (
        marker is not None
        and marker.get("refused_second_put") is True
        and marker.get("store") == store_id(storage)
    )


def _write_marker(storage: Storage, checked_ms: int) -> None:
    record = {
        "check": "put_if_absent",
        "refused_second_put": True,
        "store": store_id(storage),
        "checked_ms": checked_ms,
        "engine": f"lakelog/{__version__}",
    }
    try:
        storage.write_bytes(MARKER, json.dumps(record).encode() + b"\n")
    except Exception as e:  # noqa: BLE001 - only a cache: the next writer probes again
        log.warning("could not record the storage check in %s: %s", storage.url(MARKER), e)


def _probe(storage: Storage) -> bool:
    key = f"{PROBE_PREFIX}{uuid.uuid4().hex}.tmp"
    log.debug("checking put-if-absent of %s with probe %s", store_id(storage), storage.url(key))
    return storage.refuses_second_put(key)


def _refused(uri: str, *, committing: bool) -> StorageConsistencyError:
    outcome = " Nothing was committed." if committing else ""
    return StorageConsistencyError(
        f"expected the store of {uri} to refuse a second conditional put "
        f"(put-if-absent) of the same key, found it accepted: the store ignores the "
        f"condition, so two writers could both commit the same version and one commit "
        f"would silently replace the other.{outcome} Use a store that "
        f"honours conditional writes (If-None-Match: * on S3), or, if you know better "
        f"(one writer only, or a store you trust), set the table property "
        f"{CHECK_PROPERTY} to false (in properties= when creating the table) to skip "
        f"this check."
    )


def ensure_put_if_absent(
    storage: Storage,
    properties: Mapping[str, str],
    actions: Sequence[Action] = (),
    *,
    creating: bool = False,
) -> None:
    """Raise :class:`StorageConsistencyError` before a commit through a store that
    ignores put-if-absent; the check runs once per store (see the module docstring).

    ``properties`` are the table's (the ones a new table is created with); a
    ``metadata`` action among ``actions`` replaces them. With ``creating`` the marker
    is written by :func:`record_created` once the table exists.
    """
    pending = _passed.get(storage)
    if pending is not None:
        if pending and not creating:  # a table this storage checked exists by now
            record_created(storage)
        return
    for action in reversed(actions):
        if isinstance(action, Metadata):
            properties = action.properties
            break
    if not get_bool(properties, CHECK_PROPERTY):
        return
    if _marker_holds(storage):
        _passed[storage] = False
        return
    if not _probe(storage):
        raise _refused(storage.uri, committing=True)
    _passed[storage] = creating
    if not creating:
        _write_marker(storage, int(time.time() * 1000))


def record_created(storage: Storage) -> None:
    """Write the marker of a check :func:`ensure_put_if_absent` ran for a table that
    now exists."""
    if _passed.get(storage):
        _write_marker(storage, int(time.time() * 1000))
        _passed[storage] = False


def check_storage(storage: Storage) -> StorageCheck:
    """Probe the store now (whatever a marker or the table's properties say), and on a
    table record the outcome: the marker is written when the check passed and removed
    when it failed (so writers check again and refuse). ``lakelog check-storage``."""
    now = int(time.time() * 1000)
    ok = _probe(storage)
    listing = list_log(storage)
    is_table = bool(listing.commits or listing.manifests)
    if ok:
        _passed[storage] = False
        if is_table:
            _write_marker(storage, now)
    else:
        _passed.pop(storage, None)
        if is_table:
            storage.delete([MARKER])
    return StorageCheck(
        uri=storage.uri,
        store=store_id(storage),
        refused_second_put=ok,
        checked_ms=now,
        marker=MARKER if is_table else None,
    )
