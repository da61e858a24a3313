"""Expire old versions, then delete the data and log files only they used.

A version expires when it is both older than ``older_than`` (by its commit
time) and not among the newest ``retain_last``; expired versions always form
a prefix ``[0, O)`` and ``O``, the new oldest readable version, is at most the
latest. The steps, each safe to be killed after (a rerun finishes the job):

1. write a manifest at ``O``, so ``O`` resolves without any older commit;
2. commit ``ExpireVersions(oldest_version=O)``: from here on asking for a
   version below ``O`` raises :class:`~lakelog.VersionExpiredError`. The commit
   goes on the latest version read just before it; a metadata change landing
   first makes the expiry plan again (bounded by ``lakelog.commit.max_attempts``).
   Then the Delta view, if on, drops its entries below ``O``; if that fails the
   expiry raises before deleting anything;
3. delete the data files no retained version references, computed from the
   log, never by listing: files removed by commits ``<= O``, minus files live
   at ``O`` or added after ``O`` (a removed-but-retained file stays), minus
   files that Delta entries below ``O`` still list (a view off but kept, or
   broken: :func:`lakelog.interop.delta.view.view_listed_files`); and the change
   files (``cdc``) of commits ``<= O``, whose feed is no longer readable;
4. delete the manifest leaves only manifests below ``O`` list (the manifests at
   or above ``O`` are listed again just before), then the commit files and
   manifests below ``O``, commits oldest first.

Step 3 finishes before step 4 starts, so the commits a rerun needs to find
the files to delete are still there if step 3 was cut short.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..._failpoints import failpoint, pausepoint
from ...errors import CommitConflictError, InvalidArgumentError, VersionExpiredError
from ...leases import Lease
from ...log.actions import ExpireVersions
from ...log.checkpoint import keep_whole, repair_roots, write_checkpoint
from ...log.commits import LogListing, commit_path, list_log, read_header
from ...log.expiry_marks import prune_marks, write_mark
from ...log.manifests import manifest_path, read_root, root_leaves
from ...log.snapshot import Snapshot, load_snapshot
from ...properties import get_bool, get_float, get_int
from ...storage import Storage
from .exclusive import ensure_held, exclusive_cleanup
from .logscan import read_changes
from .report import ExpireReport

if TYPE_CHECKING:
    from ...core.handle import TableHandle

__all__ = ["duration_seconds", "expire_snapshots", "listed_by_view", "resolve_oldest"]

_DELETE_BATCH = 1000
log = logging.getLogger("lakelog")


def duration_seconds(
    value: dt.timedelta | None, props: dict[str, str], key: str, name: str
) -> float:
    """Seconds of a duration option, or of its table property when None."""
    if value is None:
        seconds = get_float(props, key)
    elif isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    else:
        raise InvalidArgumentError(
            f"expected {name} to be a datetime.timedelta, found {type(value).__name__}"
        )
    if seconds < 0:
        raise InvalidArgumentError(f"expected {name} >= 0, found {seconds}s (property {key})")
    return seconds


def _retain_last(value: int | None, props: dict[str, str]) -> int:
    n = get_int(props, "lakelog.expire.retain_last") if value is None else value
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InvalidArgumentError(
            f"expected retain_last to be an integer >= 1 (the current version always "
            f"stays), found {n!r}"
        )
    return n


def resolve_oldest(
    storage: Storage,
    listing: LogListing,
    *,
    latest: int,
    previous: int,
    cutoff_ms: int,
    retain_last: int,
) -> int:
    """The new oldest readable version: the first version that is among the
    newest ``retain_last`` or committed at or after ``cutoff_ms``.

    Commit times strictly increase, so the expired versions are a prefix and a
    binary search over commit headers finds its end.
    """
    by_count = latest - retain_last + 1
    if by_count <= previous:
        return previous
    if read_header(storage, by_count).timestamp_ms < cutoff_ms:
        return by_count
    candidates = [v for v in listing.commits if previous <= v < by_count]
    lo, hi = 0, len(candidates)
    while lo < hi:
        mid = (lo + hi) // 2
        if read_header(storage, candidates[mid]).timestamp_ms >= cutoff_ms:
            hi = mid
        else:
            lo = mid + 1
    return candidates[lo] if lo < len(candidates) else by_count


def _delete(storage: Storage, paths: list[str], point: str, lease: Lease) -> None:
    """Delete in batches, in the given order, while the cleanup lease holds; ``point``
    fires after the first batch."""
    for i in range(0, len(paths), _DELETE_BATCH):
        ensure_held(storage, lease)
        storage.delete(paths[i : i + _DELETE_BATCH])
        if i == 0:
            failpoint(point)


def _follow_delta_view(storage: Storage, at_oldest: Snapshot) -> None:
    """The Delta view (``lakelog.delta_view``) follows the expiry before any data file
    goes: a Delta checkpoint at the oldest version, then the older Delta entries
    deleted. A failure raises :class:`~lakelog.DeltaViewError` and the expiry stops
    there, with nothing deleted: a rerun finishes both."""
    from ...interop.delta.view import follow_expiry

    follow_expiry(storage, at_oldest)


def listed_by_view(storage: Storage, oldest: int) -> set[str]:
    """Normalized paths of the data files that Delta entries below ``oldest`` (or any,
    in a broken view) list: a Delta reader may open those versions, so neither expiry nor
    vacuum deletes them."""
    from ...interop.delta.view import view_listed_files
    from .vacuum import normalize_path

    return {normalize_path(p, storage) for p in view_listed_files(storage, oldest)}


def _settings(
    props: dict[str, str], older_than: dt.timedelta | None, retain_last: int | None
) -> tuple[float, int]:
    return (
        duration_seconds(older_than, props, "lakelog.expire.older_than_seconds", "older_than"),
        _retain_last(retain_last, props),
    )


def expired_leaves(storage: Storage, below: list[int], oldest: int) -> list[str]:
    """Manifest leaves that the roots at ``below`` (versions below ``oldest``) list and
    no root at or above ``oldest`` does, nor the newest root below ``oldest``: a writer
    that read the hint before the root at ``oldest`` was written may still be building
    on that one (its leaves are left to vacuum's age rule). See format.md, "Leaves in
    expiry and vacuum"."""
    found = root_leaves(storage, below)
    old: set[str] = set()
    for paths in found.values():
        old.update(paths)
    if found:
        old.difference_update(found[max(found)])
    if not old:
        return []
    retained = [m for m in list_log(storage).manifests if m >= oldest]
    for paths in root_leaves(storage, retained).values():
        old.difference_update(paths)
    return sorted(old)


def _txn_ids(storage: Storage, versions: list[int]) -> dict[int, str]:
    return {c.version: c.txn_id for c in read_changes(storage, versions)}


def expire_snapshots(
    table: TableHandle,
    *,
    older_than: dt.timedelta | None = None,
    retain_last: int | None = None,
    dry_run: bool = False,
    parameters: Mapping[str, Any] | None = None,
) -> ExpireReport:
    """Expire versions older than ``older_than`` and not among the newest
    ``retain_last`` (defaults: the ``lakelog.expire.*`` table properties), then
    delete the files only expired versions used. See the module docstring.
    ``parameters``: more entries for the expiry commit's parameters (``maintain``
    records why it expired).

    Holds a cleanup lease unless ``dry_run`` (one expiry or vacuum at a time:
    :mod:`.exclusive`)."""
    if dry_run:
        return _expire(table, None, older_than=older_than, retain_last=retain_last)
    props = table.snapshot().properties
    with exclusive_cleanup(table.storage, props, operation="EXPIRE SNAPSHOTS") as lease:
        return _expire(
            table, lease, older_than=older_than, retain_last=retain_last, parameters=parameters
        )


def _expire(
    table: TableHandle,
    lease: Lease | None,
    *,
    older_than: dt.timedelta | None,
    retain_last: int | None,
    parameters: Mapping[str, Any] | None = None,
) -> ExpireReport:
    dry_run = lease is None
    started = time.perf_counter()
    storage = table.storage
    attempts = max(3, get_int(load_snapshot(storage).properties, "lakelog.commit.max_attempts"))
    for attempt in range(1, attempts + 1):
        snap = load_snapshot(storage)
        props = snap.properties
        older_s, keep = _settings(props, older_than, retain_last)
        listing = list_log(storage)
        latest, previous = snap.version, snap.oldest_version
        cutoff_ms = int(time.time() * 1000 - older_s * 1000)
        oldest = resolve_oldest(
            storage,
            listing,
            latest=latest,
            previous=previous,
            cutoff_ms=cutoff_ms,
            retain_last=keep,
        )
        leftovers = [v for v in listing.commits if v < oldest] or [
            m for m in listing.manifests if m < oldest
        ]
        if oldest == previous and not leftovers:
            return ExpireReport(
                dry_run, latest, oldest, previous, None, (), 0, (), time.perf_counter() - started
            )
        try:
            at_oldest = (
                snap if oldest == latest else load_snapshot(storage, oldest, listing=listing)
            )
        except VersionExpiredError:  # a concurrent expiry went further: plan again
            if attempt >= 3:
                raise
            continue
        # The commit at the previous oldest version was already handled, unless the
        # run that expired up to it was cut short before deleting the older log.
        cut_short = bool(listing.commits) and listing.commits[0] < previous
        first = 0 if previous == 0 or cut_short else previous + 1
        # commits up to the new oldest version never change: read them once, for the
        # expiry mark (which transaction each expired version holds) and for step 3
        expired_changes = list(
            read_changes(storage, [v for v in listing.commits if first <= v <= oldest])
        )
        expire_version: int | None = None
        if dry_run or oldest == previous:
            break
        # 1. the oldest retained version must resolve without older commits
        # (incremental: the leaves of the newest manifest below it are reused)
        at_oldest = write_checkpoint(
            at_oldest, leaf_files=get_int(at_oldest.properties, "lakelog.manifest.leaf_files")
        )
        failpoint("expire:after-manifest")
        # before anything is deleted: the mark that lets a writer whose put lands in
        # the range being deleted tell that it filled a hole (lakelog.log.expiry_marks)
        txn_ids = {c.version: c.txn_id for c in expired_changes if previous <= c.version < oldest}
        if previous not in txn_ids:
            txn_ids.update(_txn_ids(storage, [v for v in listing.commits if v == previous]))
        write_mark(storage, oldest_version=oldest, previous=previous, txn_ids=txn_ids)
        # 2. record the expiry: older versions now raise VersionExpiredError. Its commit
        # adds and removes no file, and nothing it did depends on the schema or on the
        # properties other than the expiry's own: it commits on the latest version,
        # read just before, so only a change that lands in that short window conflicts.
        # A conflict (or a change of the expiry's settings) plans it again.
        base = load_snapshot(storage)
        if base.oldest_version != previous or _settings(
            base.properties, older_than, retain_last
        ) != (older_s, keep):
            continue
        try:
            result = table.commit(
                [ExpireVersions(oldest_version=oldest)],
                operation="EXPIRE SNAPSHOTS",
                kind="append",
                read_snapshot=base,
                parameters={
                    "older_than_seconds": older_s,
                    "retain_last": keep,
                    "oldest_version": oldest,
                    **(parameters or {}),
                },
                metrics={"versions_expired": oldest - previous},
            )
        except CommitConflictError as e:
            if attempt >= attempts:
                raise
            log.info(
                "expiry of %s lost to a concurrent change (%s); planning again", storage.uri, e
            )
            time.sleep(random.uniform(0, min(1.0, 0.005 * 2 ** min(attempt, 10))))
            continue
        expire_version = result.version
        failpoint("expire:after-commit")
        break
    else:
        raise CommitConflictError(
            f"expected the settings of the expiry of {storage.uri} to hold still for "
            f"{attempts} attempts, found lakelog.expire.* or the oldest version changing "
            f"every time; run the expiry again."
        )
    if not dry_run and get_bool(snap.properties, "lakelog.delta_view"):
        _follow_delta_view(storage, at_oldest)  # raises before anything is deleted
    # data files Delta entries below the oldest version still list stay (a view turned
    # off and kept, or broken); a dry run counts on the trim above
    dry_view = dry_run and get_bool(snap.properties, "lakelog.delta_view")
    listed = set() if dry_view else listed_by_view(storage, oldest)

    # 3. data files that only expired versions reference, from the log
    retained = set(at_oldest.paths())
    retained.update(snap.paths())
    removed: set[str] = set()
    sizes: dict[str, int] = {}
    for change in expired_changes:
        sizes.update(change.added)
        for path, size in change.removed.items():
            removed.add(path)
            if size is not None:
                sizes[path] = size
        # change files belong to their commit: the feed starts after the oldest version
        removed.update(change.changes)
        sizes.update(change.changes)
    for change in read_changes(storage, [v for v in list_log(storage).commits if v > oldest]):
        retained.update(change.added)
        retained.update(change.changes)
    data_files = sorted(removed - retained)
    if listed:
        from .vacuum import normalize_path

        data_files = [p for p in data_files if normalize_path(p, storage) not in listed]
    data_bytes = sum(sizes.get(p, 0) for p in data_files)
    below = [m for m in listing.manifests if m < oldest]
    leaves = expired_leaves(storage, below, oldest)
    log_files = [manifest_path(m) for m in below]
    log_files += [commit_path(v) for v in listing.commits if v < oldest]  # oldest first
    if lease is not None:
        _delete(storage, data_files, "expire:mid-data", lease)
        failpoint("expire:after-data")
        # 4. the log below the oldest version: first the manifest leaves only manifests
        # below it list (the manifests stay for a rerun until then), then manifests and
        # commits, commits oldest first
        leaves = expired_leaves(storage, below, oldest)  # roots written meanwhile count
        pausepoint("expire:before-leaves")
        _delete(storage, leaves, "expire:mid-leaves", lease)
        # a checkpoint published after the roots were listed may reuse a leaf just
        # deleted: write it again; the root at the oldest version must be whole before
        # the commits it stands for go (format.md, "Leaves in expiry and vacuum")
        leaf_files = get_int(at_oldest.properties, "lakelog.manifest.leaf_files")
        repair_roots(storage, leaves, oldest=oldest, leaf_files=leaf_files)
        root = read_root(storage, oldest)  # whole before the commits it stands for go
        if root is not None:
            keep_whole(storage, root, leaf_files=leaf_files)
        _delete(storage, log_files, "expire:mid-log", lease)
        prune_marks(storage)
    log_files = leaves + log_files
    return ExpireReport(
        dry_run=dry_run,
        latest_version=latest,
        oldest_version=oldest,
        previous_oldest_version=previous,
        expire_commit_version=expire_version,
        data_files=tuple(data_files),
        data_bytes=data_bytes,
        log_files=tuple(log_files),
        duration_s=time.perf_counter() - started,
    )
