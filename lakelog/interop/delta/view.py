"""Keeping the Delta view in step with the log: after each commit, sync, expiry.

Invariants (``docs/delta-view.md``):

* Delta version ``v`` is written only after lakelog version ``v`` landed, only as
  its translation, put-if-absent, and only when Delta version ``v - 1`` exists or
  ``v`` starts the view with a checkpoint. Delta readers resolve the newest
  checkpoint plus the contiguous commits after it, so they only ever see versions
  lakelog committed; a writer killed before its entry leaves the view one version
  behind until the next writer or ``lakelog delta-view sync`` fills it, in order.
* A Delta entry lakelog did not write (its ``commitInfo`` lacks lakelog's engine and
  transaction id) stops the view: ``_delta_log/_lakelog_broken.json`` records it and
  nothing is written until ``enable_delta_view(rebuild=True)``.
* Expiry to ``O`` first makes sure a Delta checkpoint at ``O`` exists, then deletes
  the Delta commits and checkpoints below ``O`` (the *trim*), and only then puts the
  Delta entry of its own commit. So once that entry exists the trim is done, and while
  it is missing the next writer (finding it missing) syncs, which trims. Expiry and
  vacuum delete no data file a remaining Delta entry lists (:func:`view_listed_files`),
  and an expiry whose trim fails stops before deleting anything.
* Deletion vectors (:mod:`.vectors`): an entry's ``remove`` actions name the vectors
  their files had at the version before (so a writer needs that version's vectors),
  and the DV files an entry or a checkpoint names are put before it. Vacuum keeps the
  DV files of retained versions' vectors and those :func:`view_listed_files` names.

Writing the view never fails a lakelog commit: the commit's caller logs the error
and the next writer or a sync catches up.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..._failpoints import failpoint
from ...core import set_properties
from ...errors import DeltaViewError, VersionExpiredError
from ...log.actions import (
    Action,
    AddFile,
    Commit,
    DeletionVector,
    ExpireVersions,
    Metadata,
    RemoveFile,
)
from ...log.commits import read_commit, read_header
from ...log.format import DELETION_VECTORS
from ...log.snapshot import Snapshot, advance, load_snapshot
from ...properties import get_bool, get_int
from ...storage import Storage
from ...transforms import SPEC_TAG
from .log import (
    BROKEN_MARK,
    DELTA_LOG,
    ENGINE,
    LAST_CHECKPOINT,
    RemovedVectors,
    checkpoint_path,
    delta_commit_path,
    list_delta_log,
    read_commit_info,
    read_last_checkpoint,
    translate_commit,
    write_checkpoint,
)
from .partitions import DerivedColumn, expressible, view_partitioning
from .types import check_schema
from .vectors import descriptor_file, holds_vectors, vectors_of, write_vector_files

if TYPE_CHECKING:
    from ...core.handle import TableHandle
    from ...hooks import Landed

__all__ = [
    "PROPERTY",
    "DeltaViewStatus",
    "SyncReport",
    "after_commit",
    "check_view_metadata",
    "delete_view",
    "finish_trim",
    "follow_expiry",
    "post_commit",
    "sync_view",
    "view_enabled",
    "view_listed_files",
    "view_status",
]

log = logging.getLogger("lakelog")

PROPERTY = "lakelog.delta_view"
_VERIFY_LIMIT = 64
"""Newest Delta commits a sync checks were written by lakelog."""
_ENC = msgspec.json.Encoder()
_DEC = msgspec.json.Decoder()
_REBUILD = (
    "rebuild it with `lakelog delta-view enable URI --rebuild` "
    "(Python: lakelog.enable_delta_view(uri, rebuild=True))"
)
PYTHON_HINT = re.compile(r" \(Python: [^()]*\([^()]*\)\)")
"""The Python half of a hint, which the CLI drops."""


def view_enabled(properties: Mapping[str, str]) -> bool:
    return get_bool(properties, PROPERTY)


def check_view_metadata(actions: list[Action], previous: pa.Schema | None) -> None:
    """Refuse a ``metadata`` action that enables the view (or keeps it on) with a schema
    Delta cannot express, or that widens an integer column to a float (polars refuses
    the files written before); called before the commit, so the table stays unchanged.
    ``previous``: the schema the commit's writer read."""
    for a in actions:
        if not isinstance(a, Metadata) or not view_enabled(a.properties):
            continue
        schema = a.arrow_schema()
        check_schema(schema)
        if previous is None:
            continue
        old = {f.name: f.type for f in previous}
        to_float = [
            f.name
            for f in schema
            if f.name in old and pa.types.is_integer(old[f.name]) and pa.types.is_floating(f.type)
        ]
        if to_float:
            raise DeltaViewError(
                f"expected schema changes the Delta view can express, found integer "
                f"columns {to_float} widened to a float: Delta readers such as polars refuse "
                f"the files written before with an integer type. Keep the integer type "
                f"(widen to int64 instead), or turn the view off first with `lakelog "
                f"delta-view disable URI`."
            )


@dataclass(frozen=True)
class SyncReport:
    """What one sync wrote and deleted (versions are Delta = lakelog versions)."""

    latest_version: int
    written: tuple[int, ...] = ()
    checkpoints: tuple[int, ...] = ()
    deleted_files: int = 0


@dataclass(frozen=True)
class DeltaViewStatus:
    """The view against the log: ``head`` is the version Delta readers resolve as
    latest (None: no view), ``missing`` the lakelog versions not written yet."""

    uri: str
    enabled: bool
    latest_version: int
    oldest_version: int
    head: int | None
    oldest_delta_version: int | None
    latest_checkpoint: int | None
    missing: tuple[int, ...] = ()
    broken: str | None = None
    foreign: tuple[int, ...] = field(default=())

    @property
    def in_sync(self) -> bool:
        return self.head == self.latest_version and self.broken is None and not self.foreign

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "in_sync": self.in_sync}


# -- recognizing entries -------------------------------------------------------------


def _describe(info: Mapping[str, Any] | None) -> str:
    if info is None:
        return "an engine that wrote no commitInfo"
    engine = info.get("engineInfo") or info.get("clientVersion") or "an unnamed engine"
    op = info.get("operation")
    return f"{engine}{f' ({op})' if op else ''}"


def _is_lakelog(info: Mapping[str, Any] | None, txn_id: str | None = None) -> bool:
    if info is None or not str(info.get("engineInfo", "")).startswith("lakelog/"):
        return False
    return txn_id is None or info.get("txnId") == txn_id


def _broken_reason(storage: Storage) -> str | None:
    try:
        data = storage.read_bytes(BROKEN_MARK)
    except FileNotFoundError:
        return None
    try:
        mark = _DEC.decode(data)
    except msgspec.DecodeError:
        return "unreadable mark"
    return str(mark.get("reason", "unknown")) if isinstance(mark, dict) else "unknown"


def _foreign(storage: Storage, version: int, info: Mapping[str, Any] | None) -> DeltaViewError:
    """Record that Delta ``version`` was written by another engine; the error to raise."""
    reason = f"Delta version {version} was written by {_describe(info)}, not by lakelog"
    body = {"reason": reason, "version": version, "detected_ms": int(time.time() * 1000)}
    try:
        storage.put_if_absent(BROKEN_MARK, _ENC.encode(body))
    except FileExistsError:
        pass
    return _broken_error(storage, reason)


def _broken_error(storage: Storage, reason: str) -> DeltaViewError:
    return DeltaViewError(
        f"expected only lakelog to write {storage.url(DELTA_LOG)} (the Delta view is "
        f"read-only for other engines), found that {reason}. lakelog stopped updating "
        f"the view, so Delta readers may not see the table's state; the lakelog table "
        f"itself is fine. To replace the view with the table's current state, {_REBUILD} "
        f"(the other engine's Delta commits are deleted; its data files are orphans that "
        f"vacuum removes)."
    )


def _txn_of(storage: Storage, version: int) -> str | None:
    try:
        return read_header(storage, version).txn_id
    except FileNotFoundError:
        return None


def _verify(storage: Storage, version: int, txn_id: str | None) -> None:
    """Raise (and mark the view broken) unless Delta ``version`` is lakelog's
    translation of the lakelog commit with ``txn_id`` (None: any lakelog entry)."""
    try:
        data = storage.read_bytes(delta_commit_path(version))
    except FileNotFoundError:
        return
    info = read_commit_info(data)
    if not _is_lakelog(info, txn_id):
        raise _foreign(storage, version, info)


# -- writing -------------------------------------------------------------------------


def _before(
    storage: Storage, commit: Commit, after: Snapshot, hint: Snapshot | None
) -> Snapshot | None:
    """The table as of the version before ``commit`` when its ``remove`` actions may end
    files with a deletion vector (their descriptors are needed), else None; also None
    when that version is expired (only the entry that starts the view, which its
    checkpoint stands for, can ask for it then). ``hint``: an older snapshot to advance
    (the one the committer read), or that version itself."""
    v = commit.header.version
    if v == 0 or not any(isinstance(a, RemoveFile) for a in commit.actions):
        return None
    if not DELETION_VECTORS.declared_by(after.metadata.format_version):
        return None
    if hint is not None and hint.version == v - 1:
        return hint
    if hint is not None and hint.version < v - 1:
        try:
            winners = [read_commit(storage, w) for w in range(hint.version + 1, v)]
            return advance(hint, winners)
        except FileNotFoundError:
            pass  # expired meanwhile: load it, if it is still readable
    try:
        return load_snapshot(storage, v - 1)
    except VersionExpiredError:
        return None


def _removed(commit: Commit, before: Snapshot | None) -> RemovedVectors | None:
    """The vectors ``before`` (:func:`_before`) gives the files ``commit`` removes."""
    if before is None:
        return None
    return vectors_of(before, [a.path for a in commit.actions if isinstance(a, RemoveFile)])


class _LiveVectors:
    """The vectors of the live files while :func:`_fill` walks commits in order: read
    from the first version's files when a commit first removes a file, then kept up to
    date from each commit (a file table per commit would cost a pass over every file
    each time; a run of appends costs nothing)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.first: Snapshot | None = snapshot
        self.added: dict[str, tuple[DeletionVector, int]] = {}
        """Vectors added before the first remove (those commits only add files)."""
        self.live: dict[str, tuple[DeletionVector, int]] = {}

    def removed(self, commit: Commit) -> RemovedVectors:
        """The vectors the files ``commit`` removes carried; then apply ``commit``."""
        if self.first is not None:
            if not any(isinstance(a, RemoveFile) for a in commit.actions):
                self._apply(commit, self.added)
                return {}
            if DELETION_VECTORS.declared_by(self.first.metadata.format_version):
                self.live = vectors_of(self.first)
            self.live.update(self.added)
            self.first, self.added = None, {}
        return self._apply(commit, self.live)

    @staticmethod
    def _apply(
        commit: Commit, live: dict[str, tuple[DeletionVector, int]]
    ) -> dict[str, tuple[DeletionVector, int]]:
        gone = {}
        for a in commit.actions:
            if isinstance(a, RemoveFile) and a.path in live:
                gone[a.path] = live.pop(a.path)
        for a in commit.actions:
            if isinstance(a, AddFile) and a.deleted is not None:
                live[a.path] = (a.deleted, a.num_rows)
        return gone


def _put(
    storage: Storage,
    commit: Commit,
    after: Snapshot,
    *,
    removed: RemovedVectors | None,
    start: bool,
    progress: _Progress | None = None,
) -> bool:
    """Put the translation of ``commit`` (``after``: the table as of it; ``removed``:
    the vectors of the files it removes, :func:`_removed`); False if the same entry was
    already there. The DV files its ``add`` actions name are put first.

    The entry of an expiry goes only after the trim to its oldest version: a writer
    that finds it takes the view as trimmed, one that finds it missing syncs (and so
    trims), so a trim cut short is never left for good."""
    v = commit.header.version
    expired = [a.oldest_version for a in commit.actions if isinstance(a, ExpireVersions)]
    if expired:
        _trim(storage, max(expired), None, progress if progress is not None else _Progress())
    derived = view_partitioning(after)
    if not start and _repartitioned(storage, commit, after, derived):
        # the view's partition columns change (a spec set or dropped, the last file
        # without the spec's tag gone, or one added): every live file needs its new
        # partition values, so this version restarts the view with a checkpoint
        write_checkpoint(storage, after)
        start = True
    data, vectors = translate_commit(
        commit.header,
        commit.actions,
        after.metadata,
        start=start,
        derived=derived,
        vectors=lambda: holds_vectors(after),
        removed=removed,
        # the first vectors of the view: no file besides those this entry marks has one
        first_vectors=lambda: (
            not holds_vectors(
                after,
                besides=[a.path for a in commit.actions if isinstance(a, AddFile) and a.deleted],
            )
        ),
    )
    write_vector_files(storage, vectors)
    failpoint("delta-view:before-put")
    try:
        storage.put_if_absent(delta_commit_path(v), data)
    except FileExistsError:
        _verify(storage, v, commit.header.txn_id)
        return False
    return True


def _repartitioned(
    storage: Storage, commit: Commit, after: Snapshot, derived: tuple[DerivedColumn, ...]
) -> bool:
    """Whether the view's partition columns at ``after`` differ from those at the
    version before (read only when ``commit`` can have changed them)."""
    v = commit.header.version
    if v == 0 or not after.metadata.partition_specs:
        return False  # specs are only ever added: no version before had one either
    changes_md = any(isinstance(a, Metadata) for a in commit.actions)
    if not changes_md and not expressible(after.metadata):
        return False  # unpartitioned before and after
    if not changes_md and not derived:
        adds_untagged = any(
            isinstance(a, AddFile) and a.tags.get(SPEC_TAG) != "0" for a in commit.actions
        )
        if not adds_untagged:
            return False  # the files without the tag were there before too
    elif not changes_md and not any(isinstance(a, RemoveFile) for a in commit.actions):
        return False  # tagged files added to a partitioned view
    try:
        before = load_snapshot(storage, v - 1)
    except VersionExpiredError:
        return False  # the entry that starts the view (a checkpoint) stands for it
    return view_partitioning(before) != derived


def _due(snapshot: Snapshot) -> bool:
    """Checkpoints go where lakelog writes manifests."""
    return snapshot.version % get_int(snapshot.properties, "lakelog.manifest_interval") == 0


def _start(storage: Storage, snapshot: Snapshot, report: _Progress) -> None:
    """Start (or restart) the view at ``snapshot``: its checkpoint (and the DV files of
    its vectors), then its commit."""
    if write_checkpoint(storage, snapshot, write_vectors=True):
        report.checkpoints.append(snapshot.version)
    try:
        commit = read_commit(storage, snapshot.version)
    except FileNotFoundError:
        return  # expired meanwhile: the checkpoint alone starts the view
    removed = _removed(commit, _before(storage, commit, snapshot, None))
    if _put(storage, commit, snapshot, removed=removed, start=True, progress=report):
        report.written.append(snapshot.version)


@dataclass
class _Progress:
    written: list[int] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)
    deleted: int = 0


def after_commit(
    storage: Storage,
    commit: Commit,
    snapshot: Snapshot | None,
    read_snapshot: Snapshot | None = None,
) -> None:
    """Write the Delta entry of a commit that just landed (``snapshot``: the table as
    of it, when the committer has it; ``read_snapshot``: the one its transaction read).
    The usual case costs one read (is Delta ``v - 1`` lakelog's?) and one put, plus the
    DV files of its vectors; anything else is a :func:`sync_view` up to ``v``."""
    v = commit.header.version
    if snapshot is None or snapshot.version != v:
        snapshot = load_snapshot(storage, v)
    if not view_enabled(snapshot.properties):
        return
    failpoint("delta-view:before-write")
    if v > 0:
        try:
            previous = storage.read_bytes(delta_commit_path(v - 1))
        except FileNotFoundError:
            previous = None
        if previous is not None and _is_lakelog(read_commit_info(previous)):
            removed = _removed(commit, _before(storage, commit, snapshot, read_snapshot))
            _put(storage, commit, snapshot, removed=removed, start=False)
            if _due(snapshot):
                write_checkpoint(storage, snapshot)
            return
    sync_view(storage, target=snapshot)


def post_commit(landed: Landed) -> None:
    """The view's post-commit hook (registered by path in :mod:`lakelog.hooks`)."""
    after_commit(landed.storage, landed.commit, landed.snapshot, landed.read_snapshot)


def sync_view(
    storage: Storage, *, target: Snapshot | None = None, at_oldest: Snapshot | None = None
) -> SyncReport:
    """Write every Delta entry missing up to ``target`` (default: the latest version),
    in order, and delete the Delta entries below the oldest readable version (after a
    checkpoint there). ``at_oldest``: the snapshot at the oldest version, if the caller
    has it. Raises :class:`DeltaViewError` if the view is off or broken."""
    snap = target if target is not None else load_snapshot(storage)
    if not view_enabled(snap.properties):
        raise DeltaViewError(
            f"expected the Delta view of {storage.uri} to be enabled to sync it, found "
            f"{PROPERTY} off at version {snap.version}; enable it with `lakelog delta-view "
            f"enable URI` (Python: lakelog.enable_delta_view(uri))."
        )
    reason = _broken_reason(storage)
    if reason is not None:
        raise _broken_error(storage, reason)
    check_schema(snap.schema, what="write the Delta view")
    listing = list_delta_log(storage)
    latest, oldest = snap.version, snap.oldest_version
    progress = _Progress()
    for v in listing.commits:  # entries above the table's version: someone else's?
        if v > latest:
            _verify(storage, v, _txn_of(storage, v))
    head = listing.head()
    if head is None:
        if listing.commits:
            _verify(storage, listing.commits[-1], None)
        _start(storage, snap, progress)
    else:
        base = listing.checkpoints[-1] if listing.checkpoints else 0
        for v in range(max(base, head - _VERIFY_LIMIT) + 1, head + 1):
            _verify(storage, v, None)
        if head < min(oldest, latest):
            # the view fell behind an expiry: the commits after its head are gone, so
            # it restarts at the oldest readable version (all of it still readable)
            start = at_oldest if at_oldest is not None and at_oldest.version == oldest else None
            _start(storage, start or load_snapshot(storage, oldest), progress)
            head = oldest
        if head < latest:
            _fill(storage, head, snap, progress)
    _trim(storage, oldest, at_oldest, progress)
    _repair_hint(storage)
    return SyncReport(
        latest_version=latest,
        written=tuple(progress.written),
        checkpoints=tuple(progress.checkpoints),
        deleted_files=progress.deleted,
    )


def _fill(storage: Storage, head: int, target: Snapshot, progress: _Progress) -> None:
    """Translate lakelog commits ``head + 1 .. target.version`` in order."""
    snap = target if head == target.version else load_snapshot(storage, head)
    vectors = _LiveVectors(snap)
    for v in range(head + 1, target.version + 1):
        commit = read_commit(storage, v)
        removed = vectors.removed(commit)
        snap = target if v == target.version else advance(snap, [commit])
        if _put(storage, commit, snap, removed=removed, start=False, progress=progress):
            progress.written.append(v)
        if _due(snap) and write_checkpoint(storage, snap):
            progress.checkpoints.append(v)


def _trim(storage: Storage, oldest: int, at_oldest: Snapshot | None, progress: _Progress) -> None:
    """Delete the Delta entries below the oldest readable version, once a Delta
    checkpoint at it exists (so every retained version still resolves)."""
    if oldest == 0:
        return
    listing = list_delta_log(storage)
    below = [v for v in listing.commits if v < oldest]
    below_cp = [v for v in listing.checkpoints if v < oldest]
    if not below and not below_cp:
        return
    if oldest not in listing.checkpoints:
        try:
            snap = at_oldest if at_oldest is not None and at_oldest.version == oldest else None
            snap = snap or load_snapshot(storage, oldest)
        except VersionExpiredError:
            return  # a newer expiry runs: it trims
        if write_checkpoint(storage, snap, write_vectors=True):
            progress.checkpoints.append(oldest)
    failpoint("delta-view:before-trim")
    paths = [checkpoint_path(v) for v in below_cp] + [delta_commit_path(v) for v in below]
    storage.delete(paths)
    progress.deleted += len(paths)


def _repair_hint(storage: Storage) -> None:
    """Point ``_last_checkpoint`` at the newest checkpoint if it names one that does
    not exist (a writer that raced an expiry's trim can leave it so); Delta readers
    refuse such a hint."""
    hint = read_last_checkpoint(storage)
    checkpoints = list_delta_log(storage).checkpoints
    if hint is None or hint in checkpoints or not checkpoints:
        return
    newest = checkpoints[-1]
    body = {"version": newest, "size": 0}
    try:
        with storage.open_input(checkpoint_path(newest)) as f:
            body["size"] = pq.ParquetFile(f).metadata.num_rows
    except (OSError, pa.ArrowException):
        pass
    storage.write_bytes(LAST_CHECKPOINT, _ENC.encode(body))


def follow_expiry(storage: Storage, at_oldest: Snapshot) -> None:
    """After ``expire_snapshots`` committed its oldest version, before it deletes any
    file: make the view follow (a checkpoint at the oldest version, then the older Delta
    entries deleted; the commit's own entry usually did it already).

    Raises :class:`DeltaViewError` if that fails, so the expiry deletes nothing. A view
    that is off, or broken by another engine's commit, is left as it is (lakelog does
    not write it); :func:`view_listed_files` keeps the files its entries list."""
    latest = load_snapshot(storage)
    if not view_enabled(latest.properties):
        return
    reason = _broken_reason(storage)
    if reason is not None:
        log.warning(
            "the Delta view of %s is broken (%s): expiry leaves it as it is and keeps the "
            "data files its entries list; %s",
            storage.uri,
            reason,
            PYTHON_HINT.sub("", _REBUILD),
        )
        return
    try:
        sync_view(storage, target=latest, at_oldest=at_oldest)
    except Exception as e:
        cmd = "`lakelog expire URI` (Python: table.expire_snapshots())"
        raise DeltaViewError(
            f"expected the Delta view of {storage.uri} to drop its versions below "
            f"{at_oldest.version} before the expiry deletes data files, found that "
            f"updating {storage.url(DELTA_LOG)} failed: {e}. The expiry committed (lakelog "
            f"versions below {at_oldest.version} are expired) but deleted no file, so Delta "
            f"readers lose nothing. Fix the cause and run the expiry again with the same "
            f"options: {cmd} finishes it."
        ) from e


def finish_trim(storage: Storage) -> bool:
    """Delete the Delta entries below the oldest readable version that an interrupted
    expiry left (after a checkpoint there), if the view is on and not broken. Returns
    whether there was such a trim to finish."""
    snap = load_snapshot(storage)
    if snap.oldest_version == 0 or not view_enabled(snap.properties):
        return False
    listing = list_delta_log(storage)
    if not any(v < snap.oldest_version for v in listing.commits + listing.checkpoints):
        return False
    if _broken_reason(storage) is not None:
        return False
    sync_view(storage, target=snap)
    return True


def view_listed_files(storage: Storage, oldest: int) -> set[str]:
    """Data, change and DV files (paths as the Delta entries spell them, unquoted) that
    Delta readers may still open a version listing, beyond the retained lakelog
    versions: those the Delta commits and checkpoints below ``oldest`` list (a trim
    that did not happen: the view turned off and kept, or not trimmed yet), and, in a
    view broken by another engine, those every Delta entry lists. Expiry and vacuum
    keep them.

    A trimmed view costs one listing of ``_delta_log/``."""
    listing = list_delta_log(storage)
    commits = [v for v in listing.commits if v < oldest]
    checkpoints = [v for v in listing.checkpoints if v < oldest]
    if (listing.commits or listing.checkpoints) and _broken_reason(storage) is not None:
        commits, checkpoints = list(listing.commits), list(listing.checkpoints)
    paths: set[str] = set()
    for v in commits:
        paths.update(_commit_files(storage, v))
    for v in checkpoints:
        paths.update(_checkpoint_adds(storage, v))
    return paths


def _commit_files(storage: Storage, version: int) -> Iterator[str]:
    """The paths of the ``add`` and ``cdc`` actions of a Delta commit (a change-feed
    reader of that version opens its change files), and the DV files the descriptors of
    its ``add`` and ``remove`` actions name."""
    try:
        data = storage.read_bytes(delta_commit_path(version))
    except FileNotFoundError:
        return  # trimmed meanwhile
    for line in data.splitlines():
        try:
            obj = _DEC.decode(line) if line.strip() else None
        except msgspec.DecodeError:
            continue  # not an action a Delta reader would follow either
        for kind in ("add", "cdc", "remove"):
            action = obj.get(kind) if isinstance(obj, dict) else None
            if not isinstance(action, dict):
                continue
            if kind != "remove" and isinstance(action.get("path"), str):
                yield unquote(action["path"])
            dv = descriptor_file(action.get("deletionVector"))
            if dv is not None:
                yield dv


def _checkpoint_adds(storage: Storage, version: int) -> Iterator[str]:
    """The paths of a Delta checkpoint's ``add`` actions and of the DV files their
    descriptors name."""
    try:
        with storage.open_input(checkpoint_path(version)) as f:
            adds = pq.read_table(f, columns=["add"]).column("add")
    except FileNotFoundError:
        return  # trimmed meanwhile
    except (KeyError, pa.ArrowException):
        return  # no add column, or unreadable: no Delta reader opens a version from it
    for path in pc.struct_field(adds, "path").to_pylist():  # null where a row is no add
        if path is not None:
            yield unquote(path)
    if adds.type.get_field_index("deletionVector") < 0:
        return  # a checkpoint without deletion vectors
    for dv in pc.struct_field(adds, "deletionVector").to_pylist():
        name = descriptor_file(dv)
        if name is not None:
            yield name


# -- status, enable, delete ------------------------------------------------------------


def view_status(storage: Storage) -> DeltaViewStatus:
    """Where the view stands against the log (reads only)."""
    snap = load_snapshot(storage)
    listing = list_delta_log(storage)
    head = listing.head()
    foreign = []
    for v in listing.commits[-_VERIFY_LIMIT:]:
        try:
            info = read_commit_info(storage.read_bytes(delta_commit_path(v)))
        except FileNotFoundError:
            continue
        if not _is_lakelog(info, _txn_of(storage, v) if v >= snap.oldest_version else None):
            foreign.append(v)
    firsts = listing.commits[:1] + listing.checkpoints[:1]
    low = max(snap.oldest_version, 0 if head is None else head + 1)
    return DeltaViewStatus(
        uri=storage.uri,
        enabled=view_enabled(snap.properties),
        latest_version=snap.version,
        oldest_version=snap.oldest_version,
        head=head,
        oldest_delta_version=min(firsts) if firsts else None,
        latest_checkpoint=listing.checkpoints[-1] if listing.checkpoints else None,
        missing=tuple(range(low, snap.version + 1)) if head is not None or firsts else (),
        broken=_broken_reason(storage),
        foreign=tuple(foreign),
    )


def delete_view(storage: Storage) -> int:
    """Delete ``_delta_log/``, newest versions first, so a reader meanwhile sees an
    older version or none, never a broken log. Returns the number of files deleted."""
    listing = list_delta_log(storage)
    before = sum(1 for _ in storage.walk(DELTA_LOG))
    storage.delete([LAST_CHECKPOINT])
    for v in sorted({*listing.commits, *listing.checkpoints}, reverse=True):
        storage.delete([delta_commit_path(v), checkpoint_path(v)])
    storage.delete([f.path for f in storage.walk(DELTA_LOG)])
    if storage.protocol in ("file", "local"):  # object stores have no folders to remove
        try:
            storage.fs.rmdir(storage.full(DELTA_LOG))
        except OSError:
            pass  # not empty (a writer put an entry meanwhile) or already gone
    return before


def enable_view(table: TableHandle, *, rebuild: bool) -> DeltaViewStatus:
    """Turn the view on (a ``SET PROPERTIES`` commit, whose entry starts the view with
    a checkpoint) and bring it up to date. ``rebuild``: delete ``_delta_log/`` first."""
    storage = table.storage
    snap = table.snapshot()
    check_schema(snap.schema)
    if rebuild:
        delete_view(storage)
    else:
        reason = _broken_reason(storage)
        if reason is not None:
            raise _broken_error(storage, reason)
        listing = list_delta_log(storage)
        newest = listing.commits[-1:] + listing.checkpoints[-1:]
        if newest:
            v = max(newest)
            try:
                info = read_commit_info(storage.read_bytes(delta_commit_path(v)))
            except FileNotFoundError:
                info = {"engineInfo": ENGINE} if v in listing.checkpoints else None
            if not _is_lakelog(info):
                raise DeltaViewError(
                    f"expected {storage.url(DELTA_LOG)} to be absent or lakelog's own view, "
                    f"found a Delta log written by {_describe(info)} (version {v}). Enabling "
                    f"the view would replace that Delta table; if it is not needed, "
                    f"{_REBUILD}."
                )
    if not view_enabled(snap.properties):
        set_properties(table, {PROPERTY: "true"})
    sync_view(storage, target=table.snapshot())
    return view_status(storage)


def disable_view(table: TableHandle, *, keep_log: bool) -> int:
    """Turn the view off; unless ``keep_log``, delete ``_delta_log/`` (a frozen view
    would go on serving an old version to Delta readers). Returns files deleted."""
    storage = table.storage
    snap = table.snapshot()
    listing = list_delta_log(storage)
    was_ours = view_enabled(snap.properties) or _broken_reason(storage) is not None
    if not was_ours and listing.commits:
        try:
            info = read_commit_info(storage.read_bytes(delta_commit_path(listing.commits[-1])))
        except FileNotFoundError:
            info = None
        was_ours = _is_lakelog(info)
    if view_enabled(snap.properties):
        set_properties(table, {PROPERTY: "false"})
    if keep_log or not was_ours:
        return 0
    return delete_view(storage)
