"""Read many commits fast, keeping only what cleanup needs: paths and sizes.

Expiry and vacuum read thousands of commits; decoding every action's stats
would dominate. A light msgspec schema decodes only paths, sizes and expiry
actions; anything it does not recognise (a newer action, a damaged file) falls
back to the full decoder, which raises the usual typed errors. On object
stores, files are fetched by a small thread pool to overlap latencies.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ...log.actions import AddFile, ChangeFile, ExpireVersions, RemoveFile
from ...log.commits import commit_path, decode_commit, outside_root_error
from ...log.format import BASE, readable
from ...paths import first_bad_data_path
from ...storage import Storage

__all__ = ["FileChanges", "read_changes"]

_CHUNK = 256


class _Vector(msgspec.Struct):
    bitmap: str


class _Add(msgspec.Struct, tag="add"):
    path: str
    size_bytes: int = 0
    deleted: _Vector | None = None


class _Remove(msgspec.Struct, tag="remove"):
    path: str
    size_bytes: int | None = None


class _Cdc(msgspec.Struct, tag="cdc"):
    path: str
    size_bytes: int = 0


class _Metadata(msgspec.Struct, tag="metadata"):
    pass


class _Expire(msgspec.Struct, tag="expire"):
    oldest_version: int


class _Header(msgspec.Struct):
    version: int
    format_version: int = BASE
    txn_id: str = ""


class _Light(msgspec.Struct):
    header: _Header
    actions: list[_Add | _Remove | _Cdc | _Metadata | _Expire]


_DECODER = msgspec.json.Decoder(_Light)


@dataclass
class FileChanges:
    """The file-level effect of one commit."""

    version: int
    added: dict[str, int] = field(default_factory=dict)
    """Path -> size in bytes of every file added."""
    removed: dict[str, int | None] = field(default_factory=dict)
    """Path -> size in bytes (None if not recorded) of every file removed."""
    vectors: dict[str, str] = field(default_factory=dict)
    """Path -> deletion vector (its ``bitmap`` text) of every added file carrying one:
    the Delta view names a DV file after it (:mod:`lakelog.interop.delta.vectors`)."""
    changes: dict[str, int] = field(default_factory=dict)
    """Path -> size in bytes of every change file the commit lists (``cdc``): a data
    file of this commit for expiry and vacuum, never live."""
    oldest_version: int | None = None
    """The ``oldest_version`` of an expiry action in this commit, if any."""
    txn_id: str = ""
    """The committing transaction's id."""

    def record(
        self,
        actions: Iterable[Any],
        add: type[Any],
        remove: type[Any],
        cdc: type[Any],
        expire: type[Any],
    ) -> None:
        """Note the file-level effect of ``actions``: decoded as the log's own actions or
        as the light structs of a fast decode, the classes of each kind given."""
        for a in actions:
            if isinstance(a, add):
                self.added[a.path] = a.size_bytes
                if a.deleted is not None:
                    self.vectors[a.path] = a.deleted.bitmap
            elif isinstance(a, remove):
                self.removed[a.path] = a.size_bytes
            elif isinstance(a, cdc):
                self.changes[a.path] = a.size_bytes
            elif isinstance(a, expire):
                self.oldest_version = max(self.oldest_version or 0, a.oldest_version)


def _decode(data: bytes, version: int) -> FileChanges:
    out = FileChanges(version)
    try:
        light = _DECODER.decode(data)
    except msgspec.DecodeError:
        light = None
    if (
        light is not None
        and light.header.version == version
        and readable(light.header.format_version)
    ):
        out.txn_id = light.header.txn_id
        out.record(light.actions, _Add, _Remove, _Cdc, _Expire)
        # what expiry deletes comes from here: refused as every reader refuses it
        bad = first_bad_data_path([*out.added, *out.removed, *out.changes])
        if bad is not None:
            kind = "add" if bad in out.added else "remove" if bad in out.removed else "cdc"
            raise outside_root_error(commit_path(version), kind, bad)
        return out
    commit = decode_commit(data, version)  # typed errors, or a newer action
    out.txn_id = commit.header.txn_id
    out.record(commit.actions, AddFile, RemoveFile, ChangeFile, ExpireVersions)
    return out


def read_changes(storage: Storage, versions: Sequence[int]) -> Iterator[FileChanges]:
    """The changes of each commit, in the order given; commits gone are skipped.

    Commits are fetched :data:`_CHUNK` at a time with :meth:`Storage.read_many`
    (concurrent requests on object stores, plain reads on local disk).
    """
    for start in range(0, len(versions), _CHUNK):
        chunk = versions[start : start + _CHUNK]
        for v, data in zip(chunk, storage.read_many([commit_path(v) for v in chunk]), strict=True):
            if data is not None:  # None: deleted meanwhile by a concurrent expiry
                yield _decode(data, v)
