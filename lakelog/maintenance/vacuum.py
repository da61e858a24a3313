"""Vacuum: delete files under the table root that no retained version references.

Such files come from failed or killed writers and, after an expiry was cut
short, from expired versions. What is kept, always:

* every file a retained version (oldest readable .. latest) references, with
  paths compared in one root-relative form, whatever spelling (``s3a://`` or
  ``s3://``, ``file://`` or a plain path, trailing slashes) the log or the
  caller used;
* every file younger than ``older_than``: a writer may be about to commit it.
  Values below ``lakelog.vacuum.min_age_seconds`` need ``force=True``;
* everything in a folder that holds another table (its own ``_lakelog/`` or
  ``_delta_log/``), and the log folder, except temporary files a killed
  writer left there;
* every file with a hidden name or under a hidden folder (``_`` or ``.``
  first, as Hadoop and Spark have it; ``_col=value`` partition folders are
  not hidden): other engines' markers and checksums (``_SUCCESS``,
  ``.part-0.parquet.crc``, ``_temporary/``). lakelog's own Spark staging
  folder (``_spark_staging/``) is the exception: everything a killed Spark job
  left there is vacuumed like any other orphan.

The root is listed first and the log read after, so a file committed before
the log is read is known to be referenced; the log is read once more just
before deleting. Dry run is the default.
"""

from __future__ import annotations

import datetime as dt
import posixpath
import re
import time
from typing import TYPE_CHECKING

from .._failpoints import failpoint
from ..errors import InvalidArgumentError, VersionExpiredError
from ..log.commits import LOG_DIR, list_log
from ..log.snapshot import load_snapshot
from ..partitioning import STAGING_DIR, hidden_name
from ..properties import get_float
from ..storage import FileInfo, Storage, normalize_uri
from .cleanup_report import VacuumReport
from .expire import duration_seconds
from .logscan import read_changes

if TYPE_CHECKING:
    from ..table import Table

__all__ = ["normalize_path", "referenced_paths", "vacuum"]

TABLE_MARKERS = (LOG_DIR, "_delta_log")
"""A folder holding one of these is another table's root."""
_LOG_TEMP = re.compile(r"^\.?.+\.[0-9a-f]{32}\.tmp$")
_DELETE_BATCH = 1000


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
    if "://" in p:
        uri = normalize_uri(p)
        if uri != storage.uri and not uri.startswith(storage.uri + "/"):
            return uri
        p = uri[len(storage.uri) :]
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
    their versions expire).
    """
    for _ in range(5):  # an expiry may move the oldest version while we read
        snap = load_snapshot(storage)
        oldest = snap.oldest_version
        listing = list_log(storage)
        try:
            base = snap if oldest >= snap.version else load_snapshot(storage, oldest)
        except VersionExpiredError:
            continue
        paths = set(base.file_table.column("path").to_pylist())
        paths.update(snap.file_table.column("path").to_pylist())
        latest = snap.version
        for change in read_changes(storage, [v for v in listing.commits if v > oldest]):
            paths.update(change.added)
            latest = max(latest, change.version)
        return {normalize_path(p, storage) for p in paths}, oldest, latest
    raise VersionExpiredError(
        f"expected the oldest readable version of {storage.uri} to hold still while "
        f"vacuum reads the log, found it moving (concurrent expiries); run vacuum again.",
        oldest_version=load_snapshot(storage).oldest_version,
    )


def _newly_added(storage: Storage, after: int) -> set[str]:
    """Paths added by commits that landed after version ``after``."""
    newer = [v for v in list_log(storage).commits if v > after]
    return {normalize_path(p, storage) for c in read_changes(storage, newer) for p in c.added}


def _foreign_hidden(rel: str) -> bool:
    """A hidden file or a file under a hidden folder, outside lakelog's staging folder
    (everything there, markers included, is what a killed lakelog Spark job left)."""
    parts = rel.split("/")
    return parts[0] != STAGING_DIR and any(hidden_name(p) for p in parts)


def _scan(storage: Storage) -> tuple[list[FileInfo], list[str], int]:
    """Files under the root that vacuum may consider, nested table roots, and the
    number of hidden files kept."""
    found = list(storage.walk(""))
    nested: set[str] = set()
    for f in found:
        parts = normalize_path(f.path, storage).split("/")
        for i, name in enumerate(parts[:-1]):
            if i > 0 and name in TABLE_MARKERS:
                nested.add("/".join(parts[:i]))
                break
    candidates = []
    hidden = 0
    for f in found:
        rel = normalize_path(f.path, storage)
        first, _, rest = rel.partition("/")
        if first in TABLE_MARKERS:  # the log: only what killed writers left behind
            if first == LOG_DIR and "/" not in rest and _LOG_TEMP.match(rest):
                candidates.append(FileInfo(rel, f.size, f.mtime_ms))
            continue
        if any(rel.startswith(n + "/") for n in nested):
            continue
        if _foreign_hidden(rel):
            hidden += 1
            continue
        candidates.append(FileInfo(rel, f.size, f.mtime_ms))
    return candidates, sorted(nested), hidden


def vacuum(
    table: Table,
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
    cutoff_ms = time.time() * 1000 - older_s * 1000
    candidates, nested, hidden = _scan(storage)  # list first, then read the log
    referenced, oldest, latest = referenced_paths(storage)
    orphans: list[FileInfo] = []
    young = kept = 0
    for f in candidates:
        if f.path in referenced:
            kept += 1
        elif f.mtime_ms is None or f.mtime_ms > cutoff_ms:
            young += 1
        else:
            orphans.append(f)
    if orphans and not dry_run:
        late = _newly_added(storage, latest)  # committed while we were classifying
        kept += sum(1 for f in orphans if f.path in late)
        orphans = [f for f in orphans if f.path not in late]
        failpoint("vacuum:before-delete")
        paths = [f.path for f in orphans]
        for i in range(0, len(paths), _DELETE_BATCH):
            storage.delete(paths[i : i + _DELETE_BATCH])
            if i == 0:
                failpoint("vacuum:mid-delete")
    return VacuumReport(
        dry_run=dry_run,
        older_than_s=older_s,
        oldest_version=oldest,
        latest_version=latest,
        files=tuple(f.path for f in orphans),
        bytes=sum(f.size for f in orphans),
        files_scanned=len(candidates),
        files_referenced=kept,
        files_too_young=young,
        files_hidden=hidden,
        nested_tables=tuple(nested),
        duration_s=time.perf_counter() - started,
    )
