"""Vacuum: delete files under the table root that no retained version references.

Such files come from failed or killed writers and, after an expiry was cut
short, from expired versions. What is kept, always:

* every file a retained version (oldest readable .. latest) references, with
  paths compared in one root-relative form, whatever spelling (``s3a://`` or
  ``s3://``, ``file://`` or a plain path, trailing slashes) the log or the
  caller used;
* every file whose path carries the id of a writer lease in force
  (:func:`lakelog.leases.in_force`: live, and its holder not known dead), or that
  such a lease names (a file ``add_files`` is adopting): a writer is about to
  commit it, however long it has been running, whatever ``older_than`` or
  ``force`` say;
* every file younger than ``older_than``: a writer that holds no lease (an
  older lakelog) may be about to commit it. Values below
  ``lakelog.vacuum.min_age_seconds`` need ``force=True``;
* every data file that a Delta entry below the oldest readable version lists
  (or any Delta entry, in a broken view): a Delta reader may open that version.
  Before listing, a vacuum that deletes finishes the trim of the Delta view an
  interrupted expiry left, so normally there are none;
* while ``_delta_log/`` holds entries, the Delta view's DV file
  (``deletion_vector_<uuid>.bin``) of every deletion vector a retained version
  holds, and every DV file a Delta entry kept above names: Delta readers of
  those versions open them. Other DV files (of expired vectors, or of a view
  deleted since) are orphans like any other file;
* everything in a folder that holds another table (its own ``_lakelog/`` or
  ``_delta_log/``), and the log folder, except temporary files a killed
  writer left there, lease files whose lease expired, and manifest leaves no
  manifest lists (a checkpoint killed before its root, or whose root lost to
  another's) that are not newer than the newest manifest;
* every file with a hidden name or under a hidden folder (``_`` or ``.``
  first, as Hadoop and Spark have it; ``_col=value`` partition folders are
  not hidden): other engines' markers and checksums (``_SUCCESS``,
  ``.part-0.parquet.crc``, ``_temporary/``). lakelog's own Spark staging
  folder (``_spark_staging/``) and its change files (``_change_data/``) are the
  exceptions: everything a killed Spark job left in the first is vacuumed like any
  other orphan, and change files like data files (those of retained commits kept).

Order matters. The root is listed first and the log read after, so a file
committed before the log is read is known to be referenced; then the leases
are read: a file listed was written after its writer's lease was created, and
a writer releases its lease only after its commit landed, so a listed file
whose lease is gone is in the log by the time the leases were read. Hence the
log is read once more after the leases, just before deleting. Before each
delete batch, once :data:`~lakelog.leases.LEASE_RECHECK_SECONDS` have passed
since the leases were read, both are read again (a stalled writer may have
renewed its expired lease): vacuum deletes a file at most that long (plus one
delete request) after seeing that no live lease covers it, which is what a
writer whose lease lapsed waits for before checking its files. Dry run is the
default.
"""

from __future__ import annotations

import datetime as dt
import logging
import posixpath
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ... import leases
from ..._failpoints import failpoint, pausepoint
from ...errors import InvalidArgumentError, VersionExpiredError
from ...leases import (
    LEASE_DIR,
    Lease,
    LeaseRecord,
    in_force,
    lease_ids_in,
    lease_path,
    read_leases,
)
from ...log.checkpoint import repair_roots
from ...log.commits import LOG_DIR, list_log
from ...log.feed import CHANGE_DIR
from ...log.format import DELETION_VECTORS
from ...log.leaves import LEAF_DIR, leaf_version
from ...log.manifests import root_leaves
from ...log.snapshot import Snapshot, load_snapshot
from ...partitioning import STAGING_DIR, hidden_name
from ...properties import get_bool, get_float, get_int
from ...storage import FileInfo, Storage, normalize_uri
from ..claims import PLAN_DIR
from .exclusive import ensure_held, exclusive_cleanup
from .expire import duration_seconds, listed_by_view
from .logscan import read_changes
from .report import VacuumReport

if TYPE_CHECKING:
    from ...core.handle import TableHandle

__all__ = ["normalize_path", "referenced_paths", "vacuum"]

log = logging.getLogger("lakelog")

TABLE_MARKERS = (LOG_DIR, "_delta_log")
"""A folder holding one of these is another table's root."""
_LOG_TEMP = re.compile(r"^\.?.+\.[0-9a-f]{32}\.tmp$")
_LEASE_DIR_NAME = LEASE_DIR.split("/", 1)[1]
_PLAN_DIR_NAME = PLAN_DIR.split("/", 1)[1]
_PLAN_FILE = re.compile(r"^[0-9a-f]{32}\.json$")
_LEAVES_DIR_NAME = LEAF_DIR.split("/", 1)[1]
_DELETE_BATCH = 1000
_READ_ATTEMPTS = 3


def normalize_path(path: str, storage: Storage) -> str:
    """The root-relative form of a path as found in a log or a listing.

    Absolute URLs and paths under the root become relative; empty, ``.`` and
    ``..`` segments are resolved against the root. A location outside the root
    keeps an absolute form (with ``://``), so it never equals a file under it.
    Merging spellings can only make more files look referenced, never fewer.

    >>> st = Storage("/data/t/")
    >>> normalize_path("file:///data/t//a/./b.parquet", st), normalize_path("/data/t/c", st)
    ('a/b.parquet', 'c')
    """
    p = path.strip()
    root = "/" + storage.root.strip("/")
    if "://" in p or p.lower().startswith("file:"):
        try:
            rel = storage.relative_url(p)
        except InvalidArgumentError:  # e.g. file://otherhost/...: never under the root
            return p
        if rel is None:
            return normalize_uri(p)
        p = rel
    elif p == root or p.startswith(root + "/"):
        p = p[len(root) :]
    full = posixpath.normpath(f"{root}/{p}")
    if full == root:
        return ""
    if full.startswith(root.rstrip("/") + "/"):
        return full[len(root.rstrip("/")) + 1 :]
    return f"{storage.protocol}://{full}"


def referenced_paths(storage: Storage) -> tuple[set[str], int, int]:
    """Normalized paths of every file a retained version references, with the
    oldest readable and the latest version.

    Retained files = files live at the oldest readable version plus files
    added by any later commit (files removed since stay referenced until
    their versions expire), plus the change files those later commits list.
    """
    for _ in range(5):  # an expiry may move the oldest version while we read
        snap = load_snapshot(storage)
        oldest = snap.oldest_version
        listing = list_log(storage)
        try:
            base = snap if oldest >= snap.version else load_snapshot(storage, oldest)
        except VersionExpiredError:
            continue
        paths = set(base.paths())
        paths.update(snap.paths())
        paths.update(_live_leaves(storage, listing.manifests))
        latest = snap.version
        vectors: list[tuple[str, str]] = []
        for change in read_changes(storage, [v for v in listing.commits if v > oldest]):
            paths.update(change.added)
            paths.update(change.changes)
            vectors.extend(change.vectors.items())
            latest = max(latest, change.version)
        paths.update(_view_vector_files(storage, (base, snap), vectors))
        return {normalize_path(p, storage) for p in paths}, oldest, latest
    raise VersionExpiredError(
        f"expected the oldest readable version of {storage.uri} to hold still while "
        f"vacuum reads the log, found it moving (concurrent expiries); run vacuum again.",
        oldest_version=load_snapshot(storage).oldest_version,
    )


def _view_vector_files(
    storage: Storage, snapshots: Sequence[Snapshot], added: Sequence[tuple[str, str]]
) -> set[str]:
    """The Delta view's DV files of the vectors live in ``snapshots`` and of the
    ``(path, bitmap)`` vectors ``added`` by retained commits, if the table may hold
    vectors and ``_delta_log/`` has entries (no view, no DV files to keep)."""
    from ...interop.delta.log import list_delta_log
    from ...interop.delta.vectors import file_table_vectors, vector_file_names

    if not any(DELETION_VECTORS.declared_by(s.metadata.format_version) for s in snapshots):
        return set()
    listing = list_delta_log(storage)
    if not listing.commits and not listing.checkpoints and not listing.other_checkpoints:
        return set()
    pairs = list(added)
    for s in {id(s): s for s in snapshots}.values():
        if DELETION_VECTORS.declared_by(s.metadata.format_version):
            pairs.extend(file_table_vectors(s.file_table))
    return set(vector_file_names(pairs))


def _live_leaves(storage: Storage, manifests: Sequence[int]) -> set[str]:
    """Manifest leaves vacuum keeps: those a root lists, and those newer than the newest
    root (a checkpoint in progress writes its leaves before its root)."""
    keep: set[str] = set()
    for paths in root_leaves(storage, manifests).values():
        keep.update(paths)
    newest = max(manifests, default=-1)
    for name in storage.list_names(LEAF_DIR):
        v = leaf_version(name)
        if v is not None and v > newest:
            keep.add(f"{LEAF_DIR}/{name}")
    return keep


def _newly_added(storage: Storage, after: int) -> tuple[set[str], int]:
    """Paths added by commits that landed after version ``after`` (data and change
    files), and the newest version."""
    from ...interop.delta.vectors import vector_file_names

    newer = [v for v in list_log(storage).commits if v > after]
    paths: set[str] = set()
    for c in read_changes(storage, newer):
        paths.update(normalize_path(p, storage) for p in (*c.added, *c.changes))
        paths.update(vector_file_names(c.vectors.items()))  # DV files a view may write
    return paths, max([after, *newer])


class _Guard:
    """What vacuum learns after its first reading of the log: the live writer leases
    and the files committed since. Leases are read first, then the log (see the
    module doc for why)."""

    def __init__(self, storage: Storage, latest: int) -> None:
        self.storage = storage
        self.latest = latest
        self.live: set[str] = set()
        self.named: set[str] = set()
        """Files live leases name (``paths``: files being adopted), normalized."""
        self.expired: list[LeaseRecord] = []
        self.committed: set[str] = set()
        self.read_at = 0.0

    def read_leases(self) -> None:
        self.read_at = time.monotonic()
        now_ms = time.time() * 1000
        found = read_leases(self.storage)
        # a lease of a writer known dead ends now: a dead process commits nothing
        live = [r for r in found if in_force(r, now_ms)]
        self.live = {r.lease_id for r in live}
        self.named = {normalize_path(p, self.storage) for r in live for p in r.paths}
        self.expired = [r for r in found if r.lease_id not in self.live]

    def read_log(self) -> None:
        added, self.latest = _newly_added(self.storage, self.latest)
        self.committed |= added

    def stale(self) -> bool:
        """Whether the leases were read too long ago to delete on that reading."""
        return time.monotonic() - self.read_at > leases.recheck_seconds()

    def leased(self, path: str) -> bool:
        return path in self.named or not self.live.isdisjoint(lease_ids_in(path))


def _foreign_hidden(rel: str) -> bool:
    """A hidden file or a file under a hidden folder, outside lakelog's staging folder
    (everything there, markers included, is what a killed lakelog Spark job left) and
    its change files (``_change_data/``: its own, named like data files)."""
    parts = rel.split("/")
    if parts[0] == CHANGE_DIR:
        return any(hidden_name(p) for p in parts[1:])
    return parts[0] != STAGING_DIR and any(hidden_name(p) for p in parts)


def _scan(storage: Storage) -> tuple[list[FileInfo], list[str], int, list[FileInfo]]:
    """Files under the root that vacuum may consider, nested table roots, the number of
    hidden files kept, and the plan files of maintenance runs."""
    found = list(storage.walk(""))
    nested: set[str] = set()
    for f in found:
        parts = normalize_path(f.path, storage).split("/")
        for i, name in enumerate(parts[:-1]):
            if i > 0 and name in TABLE_MARKERS:
                nested.add("/".join(parts[:i]))
                break
    candidates = []
    plan_files = []
    hidden = 0
    for f in found:
        rel = normalize_path(f.path, storage)
        first, _, rest = rel.partition("/")
        if first in TABLE_MARKERS:  # the log: only what killed writers left behind
            folder, _, name = rest.rpartition("/")
            if first == LOG_DIR and folder == _PLAN_DIR_NAME and _PLAN_FILE.match(name):
                plan_files.append(FileInfo(rel, f.size, f.mtime_ms))
            elif first == LOG_DIR and (
                (folder in ("", _LEASE_DIR_NAME) and _LOG_TEMP.match(name))
                or (folder == _LEAVES_DIR_NAME and leaf_version(name) is not None)
            ):
                candidates.append(FileInfo(rel, f.size, f.mtime_ms))
            continue
        if any(rel.startswith(n + "/") for n in nested):
            continue
        if _foreign_hidden(rel):
            hidden += 1
            continue
        candidates.append(FileInfo(rel, f.size, f.mtime_ms))
    return candidates, sorted(nested), hidden, plan_files


def _finished_plans(
    storage: Storage, plan_files: list[FileInfo], *, grace_s: float
) -> list[FileInfo]:
    """Plan files of plans not pending at the latest version (read after the listing),
    older than ``grace_s``: a run writes its plan file just before its claim commit."""
    pending = set(load_snapshot(storage).plans)
    cutoff_ms = time.time() * 1000 - grace_s * 1000
    return [
        f
        for f in plan_files
        if f.path.rsplit("/", 1)[1][:-5] not in pending
        and f.mtime_ms is not None
        and f.mtime_ms < cutoff_ms
    ]


def vacuum(
    table: TableHandle,
    *,
    older_than: dt.timedelta | None = None,
    dry_run: bool = True,
    force: bool = False,
) -> VacuumReport:
    """Delete (or, by default, list) files no retained version references that
    are older than ``older_than`` (default: ``lakelog.vacuum.older_than_seconds``).
    See the module docstring for what is always kept."""
    started = time.perf_counter()
    storage = table.storage
    props = load_snapshot(storage).properties
    older_s = duration_seconds(older_than, props, "lakelog.vacuum.older_than_seconds", "older_than")
    min_age = get_float(props, "lakelog.vacuum.min_age_seconds")
    if older_s < min_age and not force:
        raise InvalidArgumentError(
            f"expected older_than >= {min_age:g}s (lakelog.vacuum.min_age_seconds), found "
            f"{older_s:g}s: files that young may belong to a writer that has not committed "
            f"yet. Pass force=True if no writer is running, or lower the property."
        )
    if dry_run:
        return _vacuum(storage, props, older_s, None, started)
    with exclusive_cleanup(storage, props, operation="VACUUM") as lease:
        return _vacuum(storage, props, older_s, lease, started)


def _vacuum(
    storage: Storage, props: dict[str, str], older_s: float, lease: Lease | None, started: float
) -> VacuumReport:
    dry_run = lease is None
    cutoff_ms = time.time() * 1000 - older_s * 1000
    if not dry_run:
        _finish_view_trim(storage)
    candidates, nested, hidden, plan_files = _scan(storage)  # list first, then read the log
    referenced, oldest, latest = referenced_paths(storage)
    if not (dry_run and get_bool(props, "lakelog.delta_view")):  # a dry run counts on the trim
        referenced |= listed_by_view(storage, oldest)
    guard = _Guard(storage, latest)
    guard.read_leases()  # after the log
    orphans: list[FileInfo] = []
    young = kept = leased = 0
    for f in candidates:
        if f.path in referenced:
            kept += 1
        elif guard.leased(f.path):  # whatever its age or force say
            leased += 1
        elif f.mtime_ms is None or f.mtime_ms > cutoff_ms:
            young += 1
        else:
            orphans.append(f)
    expired = guard.expired
    finished = _finished_plans(
        storage, plan_files, grace_s=2 * get_float(props, "lakelog.lease.ttl_seconds")
    )
    if lease is not None:
        ensure_held(storage, lease)
        storage.delete([f.path for f in finished])
        orphans, spared_kept, spared_leased = _delete(guard, orphans, lease)
        # a checkpoint published after the roots were read may reuse an orphan leaf
        # just deleted (one of a root an expiry deleted): write that root again
        repair_roots(
            storage,
            [f.path for f in orphans if f.path.startswith(f"{LEAF_DIR}/")],
            oldest=oldest,
            leaf_files=get_int(props, "lakelog.manifest.leaf_files"),
        )
        kept += spared_kept
        leased += spared_leased
        expired = _delete_expired_leases(guard)
    return VacuumReport(
        dry_run=dry_run,
        older_than_s=older_s,
        oldest_version=oldest,
        latest_version=guard.latest,
        files=tuple(f.path for f in orphans),
        bytes=sum(f.size for f in orphans),
        files_scanned=len(candidates),
        files_referenced=kept,
        files_too_young=young,
        files_hidden=hidden,
        files_leased=leased,
        live_leases=len(guard.live),
        expired_leases=tuple(lease_path(r.lease_id) for r in expired),
        finished_plans=tuple(f.path for f in finished),
        nested_tables=tuple(nested),
        duration_s=time.perf_counter() - started,
    )


def _finish_view_trim(storage: Storage) -> None:
    """Finish the trim of the Delta view an interrupted expiry left (the Delta entries
    below the oldest readable version), so that the files only they list can go now. A
    failure is logged: :func:`listed_by_view` then keeps those files."""
    from ...interop.delta.view import finish_trim

    try:
        if finish_trim(storage):
            log.info("vacuum of %s finished the Delta view's trim of an expiry", storage.uri)
    except Exception as e:  # noqa: BLE001 - the files the view lists stay; a rerun retries
        log.warning(
            "vacuum of %s could not delete the Delta view's entries below the oldest "
            "readable version, so it keeps the data files they list: %s",
            storage.uri,
            e,
        )


def _fresh(guard: _Guard) -> bool:
    """Read the leases and then the log again if the last reading of the leases is too
    old to delete on; False (with a warning) if even a new reading takes too long."""
    for _ in range(_READ_ATTEMPTS):
        if not guard.stale():
            return True
        guard.read_leases()
        guard.read_log()
    log.warning(
        "vacuum of %s stopped deleting: reading the writer leases and the log took longer "
        "than %gs every time, so a lease renewed meanwhile could be missed. Run vacuum "
        "again when the storage responds faster.",
        guard.storage.uri,
        leases.recheck_seconds(),
    )
    return False


def _delete(
    guard: _Guard, orphans: list[FileInfo], lease: Lease
) -> tuple[list[FileInfo], int, int]:
    """Delete orphans in batches, each within LEASE_RECHECK_SECONDS of a reading of
    the leases (and of the log after it). Returns the files deleted and how many
    turned out committed or leased meanwhile (kept)."""
    deleted: list[FileInfo] = []
    kept = leased = 0
    for i in range(0, len(orphans), _DELETE_BATCH):
        if i == 0:
            guard.read_log()  # committed since the first reading: kept
            pausepoint("vacuum:before-batch")
        if not _fresh(guard):
            break
        ensure_held(guard.storage, lease)
        batch = []
        for f in orphans[i : i + _DELETE_BATCH]:
            if f.path in guard.committed:
                kept += 1
            elif guard.leased(f.path):
                leased += 1
            else:
                batch.append(f)
        if i == 0:
            failpoint("vacuum:before-delete")
        guard.storage.delete([f.path for f in batch])
        deleted.extend(batch)
        if i == 0:
            failpoint("vacuum:mid-delete")
    return deleted, kept, leased


def _delete_expired_leases(guard: _Guard) -> list[LeaseRecord]:
    """Delete the files of leases that expired (past their grace) on a fresh reading."""
    if not _fresh(guard):
        return []
    expired = guard.expired
    guard.storage.delete([lease_path(r.lease_id) for r in expired])
    return expired
