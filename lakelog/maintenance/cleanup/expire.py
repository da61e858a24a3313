"""Expire old versions, then delete the data and log files only they used.

A version expires when it is both older than ``older_than`` (by its commit
time) and not among the newest ``retain_last``; expired versions always form
a prefix ``[0, O)`` and ``O``, the new oldest readable version, is at most the
latest. The steps, each safe to be killed after (a rerun finishes the job):

1. write a manifest at ``O``, so ``O`` resolves without any older commit;
2. commit ``ExpireVersions(oldest_version=O)``: from here on asking for a
   version below ``O`` raises :class:`~lakelog.VersionExpiredError`. The commit
   goes on the version the expiry was planned on; when commits land first, it goes on
   after them, unless they changed the oldest version or the expiry's settings: then
   the transaction's rebuild step plans the expiry again on them (bounded by
   ``lakelog.commit.max_attempts``).
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
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..._failpoints import failpoint, pausepoint
from ...errors import InvalidArgumentError, VersionExpiredError
from ...leases import Lease
from ...log.actions import Commit, ExpireVersions
from ...log.checkpoint import keep_whole, repair_roots, write_checkpoint
from ...log.commits import LogListing, commit_path, list_log, read_header
from ...log.expiry_marks import prune_marks, write_mark
from ...log.manifests import manifest_path, read_root, root_leaves
from ...log.snapshot import Snapshot, load_snapshot
from ...properties import get_bool, get_float, get_int
from ...storage import Storage
from ...transaction import Replan
from .exclusive import ensure_held, exclusive_cleanup
from .logscan import FileChanges, read_changes
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


@dataclass
class _Plan:
    """An expiry planned on ``snap``: which versions go (``[previous, oldest)``), on which
    settings, and what the commits up to ``oldest`` changed (they never change again)."""

    snap: Snapshot
    listing: LogListing
    older_s: float
    keep: int
    oldest: int
    at_oldest: Snapshot
    expired_changes: list[FileChanges]

    @property
    def latest(self) -> int:
        return self.snap.version

    @property
    def previous(self) -> int:
        return self.snap.oldest_version

    @property
    def leftovers(self) -> bool:
        """Whether log files below ``oldest`` remain (a run cut short before step 4)."""
        return any(v < self.oldest for v in self.listing.commits) or any(
            m < self.oldest for m in self.listing.manifests
        )

    def parameters(self, extra: Mapping[str, Any] | None) -> dict[str, Any]:
        return {
            "older_than_seconds": self.older_s,
            "retain_last": self.keep,
            "oldest_version": self.oldest,
            **(extra or {}),
        }


def _plan(
    storage: Storage,
    snap: Snapshot,
    *,
    older_than: dt.timedelta | None,
    retain_last: int | None,
) -> _Plan:
    """Plan the expiry on ``snap`` (the latest, or the snapshot a commit's winners made).
    A concurrent expiry that went further while this reads plans again on the latest
    (at most three times)."""
    for attempt in range(1, 4):
        older_s, keep = _settings(snap.properties, older_than, retain_last)
        listing = list_log(storage)
        previous = snap.oldest_version
        cutoff_ms = int(time.time() * 1000 - older_s * 1000)
        oldest = resolve_oldest(
            storage,
            listing,
            latest=snap.version,
            previous=previous,
            cutoff_ms=cutoff_ms,
            retain_last=keep,
        )
        plan = _Plan(snap, listing, older_s, keep, oldest, snap, [])
        if oldest == previous and not plan.leftovers:
            return plan  # nothing to do
        try:
            at_oldest = (
                snap if oldest == snap.version else load_snapshot(storage, oldest, listing=listing)
            )
        except VersionExpiredError:  # a concurrent expiry went further: plan again
            if attempt >= 3:
                raise
            snap = load_snapshot(storage)
            continue
        # The commit at the previous oldest version was already handled, unless the
        # run that expired up to it was cut short before deleting the older log.
        cut_short = bool(listing.commits) and listing.commits[0] < previous
        first = 0 if previous == 0 or cut_short else previous + 1
        # commits up to the new oldest version never change: read them once, for the
        # expiry mark (which transaction each expired version holds) and for step 3
        plan.at_oldest = at_oldest
        plan.expired_changes = list(
            read_changes(storage, [v for v in listing.commits if first <= v <= oldest])
        )
        return plan
    raise AssertionError("unreachable")  # pragma: no cover


def _prepare(storage: Storage, plan: _Plan) -> None:
    """Steps before the expiry commit: the manifest at the oldest version, then the mark."""
    # 1. the oldest retained version must resolve without older commits
    # (incremental: the leaves of the newest manifest below it are reused)
    plan.at_oldest = write_checkpoint(
        plan.at_oldest, leaf_files=get_int(plan.at_oldest.properties, "lakelog.manifest.leaf_files")
    )
    failpoint("expire:after-manifest")
    # before anything is deleted: the mark that lets a writer whose put lands in
    # the range being deleted tell that it filled a hole (lakelog.log.expiry_marks)
    previous, oldest = plan.previous, plan.oldest
    txn_ids = {c.version: c.txn_id for c in plan.expired_changes if previous <= c.version < oldest}
    if previous not in txn_ids:
        txn_ids.update(_txn_ids(storage, [v for v in plan.listing.commits if v == previous]))
    write_mark(storage, oldest_version=oldest, previous=previous, txn_ids=txn_ids)


def _commit(
    table: TableHandle,
    plan: _Plan,
    *,
    older_than: dt.timedelta | None,
    retain_last: int | None,
    parameters: Mapping[str, Any] | None,
) -> tuple[_Plan, int | None]:
    """2. Record the expiry: older versions now raise VersionExpiredError. Returns the
    plan that landed and its commit's version (None: a concurrent expiry left nothing to
    expire). The commit adds and removes no file, and nothing it did depends on the
    schema or on the properties other than the expiry's own: after a lost race the same
    commit goes on over the winners, unless they changed the oldest version or the
    expiry's settings: then the transaction's rebuild step plans it again on them."""
    storage = table.storage

    def rebuild(fresh: Snapshot, winners: Sequence[Commit] | None) -> Replan:
        nonlocal plan
        if fresh.oldest_version == plan.previous and _settings(
            fresh.properties, older_than, retain_last
        ) == (plan.older_s, plan.keep):
            return Replan([ExpireVersions(oldest_version=plan.oldest)])
        log.info("expiry of %s: the winners changed its settings; planning again", storage.uri)
        plan = _plan(storage, fresh, older_than=older_than, retain_last=retain_last)
        if plan.oldest == plan.previous:
            return Replan([])
        _prepare(storage, plan)
        return Replan(
            [ExpireVersions(oldest_version=plan.oldest)],
            parameters=plan.parameters(parameters),
            metrics={"versions_expired": plan.oldest - plan.previous},
        )

    _prepare(storage, plan)
    result = table.commit(
        [ExpireVersions(oldest_version=plan.oldest)],
        operation="EXPIRE SNAPSHOTS",
        kind="append",
        read_snapshot=plan.snap,
        parameters=plan.parameters(parameters),
        metrics={"versions_expired": plan.oldest - plan.previous},
        rebuild=rebuild,
    )
    if result.skipped:
        return plan, None
    failpoint("expire:after-commit")
    return plan, result.version


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
    plan = _plan(storage, load_snapshot(storage), older_than=older_than, retain_last=retain_last)
    expire_version: int | None = None
    if not dry_run and plan.oldest != plan.previous:
        plan, expire_version = _commit(
            table, plan, older_than=older_than, retain_last=retain_last, parameters=parameters
        )
    if plan.oldest == plan.previous and not plan.leftovers:
        return ExpireReport(
            dry_run,
            plan.latest,
            plan.oldest,
            plan.previous,
            None,
            (),
            0,
            (),
            time.perf_counter() - started,
        )
    if not dry_run and get_bool(plan.snap.properties, "lakelog.delta_view"):
        _follow_delta_view(storage, plan.at_oldest)  # raises before anything is deleted
    data_files, data_bytes = _expired_data(storage, plan, dry_run=dry_run)
    oldest = plan.oldest
    below = [m for m in plan.listing.manifests if m < oldest]
    leaves = expired_leaves(storage, below, oldest)
    log_files = [manifest_path(m) for m in below]
    log_files += [commit_path(v) for v in plan.listing.commits if v < oldest]  # oldest first
    if lease is not None:
        leaves = _delete_expired(storage, plan, lease, data_files, below, log_files)
    return ExpireReport(
        dry_run=dry_run,
        latest_version=plan.latest,
        oldest_version=oldest,
        previous_oldest_version=plan.previous,
        expire_commit_version=expire_version,
        data_files=tuple(data_files),
        data_bytes=data_bytes,
        log_files=tuple(leaves + log_files),
        duration_s=time.perf_counter() - started,
    )


def _expired_data(storage: Storage, plan: _Plan, *, dry_run: bool) -> tuple[list[str], int]:
    """3. The data files that only expired versions reference, from the log, and their
    bytes. Files Delta entries below the oldest version still list stay (a view turned
    off and kept, or broken); a dry run counts on the view's trim."""
    oldest = plan.oldest
    dry_view = dry_run and get_bool(plan.snap.properties, "lakelog.delta_view")
    listed = set() if dry_view else listed_by_view(storage, oldest)
    retained = set(plan.at_oldest.paths())
    retained.update(plan.snap.paths())
    removed: set[str] = set()
    sizes: dict[str, int] = {}
    for change in plan.expired_changes:
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
    return data_files, sum(sizes.get(p, 0) for p in data_files)


def _delete_expired(
    storage: Storage,
    plan: _Plan,
    lease: Lease,
    data_files: list[str],
    below: list[int],
    log_files: list[str],
) -> list[str]:
    """Steps 3 and 4: delete the data files, then the log below the oldest version: first
    the manifest leaves only manifests below it list (the manifests stay for a rerun until
    then), then manifests and commits, commits oldest first. Returns the leaves deleted."""
    oldest = plan.oldest
    _delete(storage, data_files, "expire:mid-data", lease)
    failpoint("expire:after-data")
    leaves = expired_leaves(storage, below, oldest)  # roots written meanwhile count
    pausepoint("expire:before-leaves")
    _delete(storage, leaves, "expire:mid-leaves", lease)
    # a checkpoint published after the roots were listed may reuse a leaf just
    # deleted: write it again; the root at the oldest version must be whole before
    # the commits it stands for go (format.md, "Leaves in expiry and vacuum")
    leaf_files = get_int(plan.at_oldest.properties, "lakelog.manifest.leaf_files")
    repair_roots(storage, leaves, oldest=oldest, leaf_files=leaf_files)
    root = read_root(storage, oldest)  # whole before the commits it stands for go
    if root is not None:
        keep_whole(storage, root, leaf_files=leaf_files)
    _delete(storage, log_files, "expire:mid-log", lease)
    prune_marks(storage)
    return leaves
