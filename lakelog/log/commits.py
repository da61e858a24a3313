"""Commit files: names, encoding, reading and listing.

A commit is ``_lakelog/<version:020d>.json``: one JSON object
``{"header": {...}, "actions": [...]}``, written put-if-absent so a version is
created once and never changed. A truncated or garbled file fails to decode as
a whole and raises :class:`CorruptLogError`, never a partial commit.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import msgspec

from .._failpoints import pausepoint
from ..errors import CorruptLogError, InvalidArgumentError, LogGapError, UnsupportedFormatError
from ..paths import LOG_FOLDER, first_bad_data_path
from ..storage import Storage
from .actions import (
    Action,
    AddFile,
    ChangeFile,
    Commit,
    CommitHeader,
    Metadata,
    RemoveFile,
    encode_with_metadata,
)
from .format import BASE, CURRENT, check_readable, readable

__all__ = [
    "LOG_DIR",
    "LogListing",
    "commit_path",
    "commits_between",
    "decode_commit",
    "decode_header",
    "encode_commit",
    "list_log",
    "outside_root_error",
    "read_commit",
    "read_header",
    "read_tail",
]

LOG_DIR = LOG_FOLDER
_COMMIT_RE = re.compile(r"^(\d{20})\.json$")
_MANIFEST_RE = re.compile(r"^(\d{20})\.manifest\.parquet$")

_ENCODER = msgspec.json.Encoder()
_COMMIT_DECODER = msgspec.json.Decoder(Commit)


class _HeaderOnly(msgspec.Struct):
    header: CommitHeader


class _FormatProbe(msgspec.Struct):
    class _H(msgspec.Struct):
        format_version: int = BASE

    header: _H


_HEADER_DECODER = msgspec.json.Decoder(_HeaderOnly)
_PROBE_DECODER = msgspec.json.Decoder(_FormatProbe)


def commit_path(version: int) -> str:
    return f"{LOG_DIR}/{version:020d}.json"


def encode_commit(header: CommitHeader, actions: Sequence[Action]) -> bytes:
    """One JSON document, one action per line so it reads well in a pager.

    :class:`InvalidArgumentError` for an ``add``, ``remove`` or ``cdc`` whose path is not a data
    file inside the root (:func:`lakelog.paths.bad_data_path`): every reader would
    refuse the commit."""
    bad = _bad_path(actions)
    if bad is not None:
        raise InvalidArgumentError(
            f"expected the data files of a commit to have paths relative to the table "
            f"root, inside it and outside {LOG_DIR}/, found {bad[1]!r} as the path of "
            f"{'an' if bad[0] == 'add' else 'a'} {bad[0]}; nothing was committed. Give "
            f"root-relative paths without '..', a leading '/' or a scheme (copy files from "
            f"elsewhere into the table's folder)."
        )
    body = b",\n".join(
        encode_with_metadata(_ENCODER.encode(a), a)
        if isinstance(a, Metadata)
        else _ENCODER.encode(a)
        for a in actions
    )
    return b'{"header":' + _ENCODER.encode(header) + b',"actions":[\n' + body + b"\n]}\n"


def _check_format(data: bytes, version: int, reader_version: int) -> None:
    try:
        probe = _PROBE_DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise CorruptLogError(
            f"expected commit {version} to be a complete JSON commit, found undecodable "
            f"bytes ({e}). The file was damaged outside lakelog; restore "
            f"{commit_path(version)} from a backup or remove it if no data depends on it."
        ) from e
    check_readable(
        probe.header.format_version,
        what="log",
        where=f"commit {version}",
        reader_version=reader_version,
    )


def decode_commit(data: bytes, version: int, *, reader_version: int = CURRENT) -> Commit:
    """Decode a commit file; typed errors for damage or a newer format.

    ``reader_version``: the newest format version to read (this lakelog's)."""
    try:
        commit = _COMMIT_DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        _check_format(data, version, reader_version)
        if isinstance(e, msgspec.ValidationError) and "`$.actions" in str(e):
            raise UnsupportedFormatError(
                f"expected only known actions in commit {version}, found {e}; the table "
                f"was written by a newer lakelog. Upgrade lakelog to read it."
            ) from e
        raise CorruptLogError(
            f"expected commit {version} to be a complete JSON commit, found {e}. The "
            f"file {commit_path(version)} was damaged outside lakelog; restore it from a "
            f"backup."
        ) from e
    if not readable(commit.header.format_version, reader_version=reader_version):
        _check_format(data, version, reader_version)
    if commit.header.version != version:
        raise CorruptLogError(
            f"expected the header of {commit_path(version)} to say version {version}, "
            f"found {commit.header.version}; the file was copied or renamed by hand."
        )
    bad = _bad_path(commit.actions)
    if bad is not None:
        raise outside_root_error(commit_path(version), bad[0], bad[1])
    return commit


def _bad_path(actions: Sequence[object]) -> tuple[str, str] | None:
    """The kind and path of the first ``add``, ``remove`` or ``cdc`` whose path is not a
    data file inside the root, or None (change files follow the rules of data files)."""
    files = [a for a in actions if isinstance(a, (AddFile, RemoveFile, ChangeFile))]
    bad = first_bad_data_path([a.path for a in files])
    if bad is None:
        return None
    return next(_KINDS[type(a)] for a in files if a.path == bad), bad


_KINDS: dict[type, str] = {AddFile: "add", RemoveFile: "remove", ChangeFile: "cdc"}


def outside_root_error(where: str, kind: str, path: str) -> CorruptLogError:
    """The error of a log file (``where``) naming a data file outside the root."""
    return CorruptLogError(
        f"expected every {kind} in {where} to name a data file by its path relative to "
        f"the table root, inside it and outside {LOG_DIR}/, found {path!r}: the log was "
        f"written by hand or by a faulty tool, and lakelog neither reads nor cleans up "
        f"files outside a table. Nothing was read or deleted; restore {where} from a "
        f"backup."
    )


def read_commit(storage: Storage, version: int, *, reader_version: int = CURRENT) -> Commit:
    """Read one commit; :class:`FileNotFoundError` if it does not exist."""
    return decode_commit(
        storage.read_bytes(commit_path(version)), version, reader_version=reader_version
    )


def read_header(storage: Storage, version: int) -> CommitHeader:
    return decode_header(storage.read_bytes(commit_path(version)), version)


def decode_header(data: bytes, version: int) -> CommitHeader:
    """The header of a commit file's bytes (without decoding its actions)."""
    try:
        header = _HEADER_DECODER.decode(data).header
    except (msgspec.DecodeError, msgspec.ValidationError):
        return decode_commit(data, version).header
    if not readable(header.format_version):
        _check_format(data, version, CURRENT)
    return header


TAIL_FIRST_BATCH = 8
TAIL_MAX_BATCH = 64
GAP_PROBE = 4
"""Names read past the first missing commit to tell the end of the log from a hole."""


def gap_error(storage: Storage, missing: int, found: int) -> LogGapError:
    return LogGapError(
        f"expected commit {missing} in the log of {storage.uri}, found it missing while "
        f"commit {found} exists: the log has a hole (a commit file was deleted or moved "
        f"outside lakelog). lakelog will neither read nor write this table until "
        f"{commit_path(missing)} is restored from a backup.",
        missing=missing,
        found=found,
    )


def read_tail(storage: Storage, first: int) -> Iterator[tuple[int, bytes]]:
    """The bytes of commits ``first, first+1, ...`` up to the end of the log.

    Commits are fetched in batches (:meth:`Storage.read_many`: concurrent
    requests on object stores), 8 names and then doubling to 64. The first
    missing commit ends the log, unless one of the next :data:`GAP_PROBE` names
    exists: then the log has a hole and :class:`LogGapError` is raised, so no
    reader stops short of later commits and no writer fills the hole.
    """
    v = first
    size = TAIL_FIRST_BATCH
    while True:
        got = storage.read_many([commit_path(x) for x in range(v, v + size)])
        resume = None
        for i, data in enumerate(got):
            if data is None:
                after = got[i + 1 :]
                if len(after) < GAP_PROBE:
                    pausepoint("log:tail-probe")
                    start = v + len(got)
                    after += storage.read_many(
                        [commit_path(x) for x in range(start, start + GAP_PROBE - len(after))]
                    )
                later = next((j for j, d in enumerate(after) if d is not None), None)
                if later is None:
                    return
                # commits are created in order, and the names are read one after the
                # other: the missing one may have been created (and later ones after it)
                # between the two reads. Only if it is still missing is the log holed.
                if storage.read_many([commit_path(v + i)])[0] is None:
                    raise gap_error(storage, v + i, v + i + 1 + later)
                resume = v + i
                break
            yield v + i, data
        if resume is not None:
            v = resume
            continue
        v += len(got)
        size = min(2 * size, TAIL_MAX_BATCH)


def commits_between(
    storage: Storage, start: int, end: int | None = None, *, reader_version: int = CURRENT
) -> Iterator[Commit]:
    """The commits ``start`` to ``end`` (inclusive; None: to the end of the log), decoded,
    in order: the one reader of a range of commits (replay, rebase over winners, the
    change feed, the streaming source).

    To the end, commits come from :func:`read_tail` (batched reads that tell the end of
    the log from a hole). Up to a given version, exactly the commits needed are fetched,
    in batches of up to :data:`TAIL_MAX_BATCH`; one missing is a hole
    (:class:`LogGapError`, naming the next commit that exists). Lazy: a caller that stops
    early reads no further batch.
    """
    if end is None:
        for v, data in read_tail(storage, start):
            yield decode_commit(data, v, reader_version=reader_version)
        return
    v = start
    while v <= end:
        n = min(TAIL_MAX_BATCH, end - v + 1)
        for got in storage.read_many([commit_path(x) for x in range(v, v + n)]):
            if got is None:
                later = [c for c in list_log(storage).commits if c > v]
                raise gap_error(storage, v, later[0] if later else end)
            yield decode_commit(got, v, reader_version=reader_version)
            v += 1


@dataclass(frozen=True)
class LogListing:
    """Versions that have a commit file and versions that have a manifest."""

    commits: tuple[int, ...]
    manifests: tuple[int, ...]


def list_log(storage: Storage) -> LogListing:
    """One listing of the log folder, parsed (sorted ascending)."""
    commits: list[int] = []
    manifests: list[int] = []
    for name in storage.list_names(LOG_DIR):
        m = _COMMIT_RE.match(name)
        if m:
            commits.append(int(m.group(1)))
            continue
        m = _MANIFEST_RE.match(name)
        if m:
            manifests.append(int(m.group(1)))
    return LogListing(tuple(sorted(commits)), tuple(sorted(manifests)))
