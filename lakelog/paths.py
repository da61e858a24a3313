"""The rule for the paths of data files the log names: root-relative and inside the root.

``docs/format.md`` has every ``path`` relative to the table root, ``/``-separated.
A path that is empty, absolute (a leading ``/``), a URI (``://``), or has a ``..``
segment may name a file outside the table, and one whose first segment is the log
folder names a log file: readers would return rows that are not the table's, and an
expiry would delete such a file once a commit removed it. So:

* the decoders of commits refuse such a path in an ``add`` or ``remove``
  (:class:`~lakelog.errors.CorruptLogError`), and a commit cannot be encoded with one;
* a manifest or leaf cannot be encoded with one (:func:`check_manifest_paths`), and one
  read from storage that holds one is refused (:func:`check_read_paths`: a scan of the
  path column's buffers, cheap enough for a million paths);
* ``add_files`` refuses them as arguments;
* :meth:`lakelog.storage.Storage.delete` refuses to delete any path that may leave
  the root (:func:`leaves_root`), whatever its caller read.

Other spellings of a file inside the root (``./a``, ``a//b``) are allowed, as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import CorruptLogError

__all__ = [
    "LOG_FOLDER",
    "bad_data_path",
    "bad_data_paths",
    "check_manifest_paths",
    "check_read_paths",
    "first_bad_data_path",
    "leaves_root",
]

LOG_FOLDER = "_lakelog"
"""The log folder (``lakelog.log.commits.LOG_DIR``): no data file lives in it."""

_SUSPECT = rf"^$|^[/.]|^{LOG_FOLDER}(/|$)|://|\.\."
"""What every bad path matches (and a few good ones: ``.hidden``, ``a..b``), so only
the matches need the exact rule."""


_STARTS = re.compile(rf"\n(?:[/.\n]|{LOG_FOLDER}[/\n])")
"""In paths joined by (and framed with) newlines: one that is empty or starts with
``/``, ``.`` or the log folder."""


def leaves_root(path: str) -> bool:
    """Whether a root-relative ``path`` may name something other than a file inside the
    root: empty or only ``.`` segments (the root itself), absolute, a URI, or with a
    ``..`` segment."""
    if not path or path[0] == "/" or "://" in path:
        return True
    if ".." not in path and path[0] != ".":
        return False
    segments = [s for s in path.split("/") if s not in ("", ".")]
    return not segments or ".." in segments


def bad_data_path(path: str) -> bool:
    """Whether ``path`` cannot be a data file of the table: :func:`leaves_root`, or in
    the log folder."""
    if leaves_root(path):
        return True
    if LOG_FOLDER not in path:
        return False
    first = next(s for s in path.split("/") if s not in ("", "."))
    return first == LOG_FOLDER


def first_bad_data_path(paths: Iterable[str]) -> str | None:
    """The first of ``paths`` for which :func:`bad_data_path` holds, or None.

    A commit's paths, checked on every decode: one scan of them joined finds no
    suspect substring in the usual case, at C speed; only then is each path looked at."""
    listed = paths if isinstance(paths, list) else list(paths)
    joined = "\n" + "\n".join(listed) + "\n"
    if ".." not in joined and "://" not in joined and _STARTS.search(joined) is None:
        return None
    return next((p for p in listed if bad_data_path(p)), None)


def _may_hold_bad(paths: pa.Array) -> bool:
    """Whether a column of paths may hold a :func:`bad_data_path`: False only when no
    value is null or empty, none starts with ``/``, ``.`` or ``_``, and the values'
    bytes, searched as one blob, hold neither ``..`` nor ``://``. A few scans of the
    column's buffers, no per-value work: what makes checking every path of a manifest
    leaf as it is read cheap (about 35 ms per million paths)."""
    n = len(paths)
    if n == 0:
        return False
    if paths.null_count or not (pa.types.is_string(paths.type) or pa.types.is_binary(paths.type)):
        return True
    _, offsets_buffer, data_buffer = paths.buffers()
    if data_buffer is None:
        return True
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=n + 1, offset=paths.offset * 4)
    if np.any(offsets[1:] == offsets[:-1]):
        return True
    data = np.frombuffer(data_buffer, dtype=np.uint8)
    first = data[offsets[:-1]]
    if np.any((first == ord("/")) | (first == ord(".")) | (first == ord("_"))):
        return True
    # ".." or "://" anywhere in the values' bytes (two values meeting at a "." only
    # makes the exact rule look at them): two byte comparisons over the buffer
    data = data[offsets[0] : offsets[-1]]
    dots = data == ord(".")
    return bool(np.any(dots[1:] & dots[:-1]) or np.any(data == ord(":")))


def bad_data_paths(paths: pa.Array | pa.ChunkedArray) -> list[str]:
    """The values of a column of paths for which :func:`bad_data_path` holds (a null
    counts as the empty path). A scan of the buffers first (:func:`_may_hold_bad`); only
    the few matches of a loose pattern are looked at in Python."""
    if len(paths) == 0:
        return []
    chunks = paths.chunks if isinstance(paths, pa.ChunkedArray) else [paths]
    if not any(_may_hold_bad(c) for c in chunks):
        return []
    suspect = pc.fill_null(pc.match_substring_regex(paths, _SUSPECT), True)
    if not pc.any(suspect).as_py():
        return []
    found = pc.filter(paths, suspect).to_pylist()
    return [p or "" for p in found if p is None or bad_data_path(p)]


def _check_paths(paths: pa.Array | pa.ChunkedArray, what: str, outcome: str) -> None:
    bad = bad_data_paths(paths)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise CorruptLogError(
            f"expected the files of {what} to have paths relative to the table root, "
            f"inside it and outside {LOG_FOLDER}/, found {bad[0]!r}{more}: {outcome}"
        )


def check_read_paths(paths: pa.Array | pa.ChunkedArray, what: str) -> None:
    """:class:`CorruptLogError` if a path of the files a manifest or leaf (``what``) read
    from storage holds is a :func:`bad_data_path` (one written by hand or by a faulty
    tool): no reader returns rows of, and no cleanup deletes, a file outside the table."""
    _check_paths(
        paths,
        what,
        "it was written by hand or by a faulty tool. Nothing was read; remove the damaged "
        "file (the version then resolves from the commits) or restore it from a backup.",
    )


def check_manifest_paths(paths: pa.Array | pa.ChunkedArray, what: str) -> None:
    """:class:`CorruptLogError` if a path of the files a manifest or leaf (``what``) is
    about to hold is a :func:`bad_data_path`: nothing is written."""
    _check_paths(
        paths,
        what,
        "the log it is built from names a file outside the table (a commit or manifest "
        "written by hand or by a faulty tool). Nothing was written; restore the damaged "
        "log file from a backup.",
    )
