"""Filesystem access through fsspec, and the one put-if-absent primitive.

Every path lakelog stores or passes around is *relative to the table root*
(``_lakelog/00000000000000000003.json``, ``date=2024-01-01/part-....parquet``);
:class:`Storage` turns them into filesystem paths.

The contract of :meth:`Storage.put_if_absent`: the object appears whole or not
at all, and if it already exists the call raises :class:`FileExistsError` and
changes nothing. Backends:

* local disk: write and fsync a temp file in the same folder, then publish it
  with :func:`os.link`, which fails if the name exists;
* S3 (s3fs): a conditional put (``If-None-Match: *``);
* memory: a check and a write under a process-wide lock (the memory
  filesystem lives in one process anyway);
* anything else: refused with :class:`StorageNotSupportedError` unless the
  table is opened with ``single_writer=True``.
"""

from __future__ import annotations

import os
import threading
import urllib.parse
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

import fsspec
import pyarrow.fs as pafs
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from ._failpoints import fault
from .errors import InvalidArgumentError, StorageNotSupportedError
from .paths import leaves_root

__all__ = ["FileInfo", "Storage", "check_local_root", "local_path", "normalize_uri"]

_MEMORY_LOCK = threading.Lock()
_S3_PROTOCOLS = frozenset({"s3", "s3a"})
_HADOOP_S3 = frozenset({"s3a", "s3n"})


@dataclass(frozen=True)
class FileInfo:
    """One file found by :meth:`Storage.walk`: path relative to the root."""

    path: str
    size: int
    mtime_ms: int | None


def normalize_uri(uri: str) -> str:
    """One spelling per location, so every form Spark, Hadoop or a user writes opens
    the same table:

    * a plain path (no scheme): absolute, ``~`` expanded, taken literally;
    * ``file:/abs``, ``file:///abs``, ``file://localhost/abs`` (the forms of Hadoop's
      ``Path.toUri()``, ``input_file_name()`` and ``_metadata.file_path``): a URI, so
      ``%XX`` escapes are decoded (``file:/tmp/a%20b/t`` is the folder ``a b``); any
      other host is refused (:class:`InvalidArgumentError`);
    * ``s3a://`` and ``s3n://`` (Hadoop's S3 connectors, whose URIs are escaped the
      same way) become ``s3://``; an ``s3://`` key is fsspec's, taken literally;
    * no trailing slash.

    The result of a local path is ``file://`` and the absolute path with only ``%``
    escaped (as ``%25``), so normalizing it again changes nothing.

    >>> normalize_uri("s3a://bucket/t/")
    's3://bucket/t'
    >>> normalize_uri("file:/tmp/a%20b/t"), normalize_uri("file://localhost/tmp/t")
    ('file:///tmp/a b/t', 'file:///tmp/t')
    """
    uri = uri.strip()
    scheme, sep, rest = uri.partition(":")
    scheme = scheme.lower()
    if scheme == "file" and sep:
        return "file://" + _quote_percent(_local_path(uri, rest))
    if "://" not in uri:
        return "file://" + _quote_percent(os.path.abspath(os.path.expanduser(uri)).rstrip("/"))
    rest = rest[2:]
    if scheme in _HADOOP_S3:
        bucket, slash, key = rest.partition("/")
        return f"s3://{bucket}{slash}{urllib.parse.unquote(key)}".rstrip("/")
    return f"{scheme}://{rest.rstrip('/')}"


def local_path(uri: str) -> str:
    """The filesystem path of a normalized ``file://`` URI (inverse of the escaping
    :func:`normalize_uri` does)."""
    return urllib.parse.unquote(uri[len("file://") :]) if uri.startswith("file://") else uri


def _local_path(uri: str, rest: str) -> str:
    """The absolute, decoded path of a ``file:`` URI (``rest`` is what follows ``file:``)."""
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if host.lower() not in ("", "localhost"):
            raise InvalidArgumentError(
                f"expected a file: URI of this machine (file:/path, file:///path or "
                f"file://localhost/path), found host {host!r} in {uri!r}; lakelog reads "
                f"local files only from this machine. Use a path on a mounted filesystem, "
                f"or the store's own scheme (s3://, hdfs://, ...)."
            )
        rest = slash + path
    if not rest.startswith("/"):
        raise InvalidArgumentError(
            f"expected an absolute path in a file: URI (file:/path or file:///path), found "
            f"{uri!r}; write a relative location as a plain path, without file:."
        )
    path = os.path.abspath(urllib.parse.unquote(rest))
    return path.rstrip("/") if path != "/" else ""


def _quote_percent(path: str) -> str:
    return path.replace("%", "%25")


class Storage:
    """A table root on an fsspec filesystem."""

    def __init__(
        self,
        uri: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        single_writer: bool = False,
    ) -> None:
        if not isinstance(uri, str) or not uri.strip():
            raise InvalidArgumentError(
                f"expected a table URI such as '/data/t' or 's3://bucket/t', found {uri!r}"
            )
        self.uri = normalize_uri(uri)
        self.storage_options: dict[str, Any] = _check_options(storage_options)
        fs, path = _filesystem(self.uri, self.storage_options)
        self.fs: fsspec.AbstractFileSystem = fs
        self.root: str = path.rstrip("/") or "/"
        self.single_writer = single_writer
        protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
        self.protocol: str = protocols[0]
        self._is_local = isinstance(fs, LocalFileSystem)
        if self._is_local:
            check_local_root(self.root)
        self._is_memory = isinstance(fs, MemoryFileSystem)
        self._is_s3 = bool(_S3_PROTOCOLS.intersection(protocols))
        self.supports_put_if_absent = self._is_local or self._is_memory or self._is_s3
        if not self.supports_put_if_absent and not single_writer:
            raise StorageNotSupportedError(
                f"expected a filesystem that can create a file only if it is absent "
                f"(local disk, S3, memory), found protocol {self.protocol!r}; without it "
                f"two writers could overwrite each other's commits. If only one process "
                f"ever writes this table, open it with single_writer=True."
            )

    # -- paths ---------------------------------------------------------------
    def full(self, rel: str) -> str:
        """Filesystem path of a root-relative path."""
        return f"{self.root}/{rel}" if rel else self.root

    def relative(self, full_path: str) -> str:
        """Root-relative form of a filesystem path (inverse of :meth:`full`)."""
        full_path = full_path.rstrip("/")
        prefix = self.root.rstrip("/") + "/"
        if not full_path.startswith(prefix):
            stripped = self.fs._strip_protocol(full_path)
            if not stripped.startswith(prefix):
                raise InvalidArgumentError(
                    f"expected a path under the table root {self.root!r}, found {full_path!r}"
                )
            full_path = stripped
        return full_path[len(prefix) :]

    def relative_url(self, location: str) -> str | None:
        """Root-relative path of a URL or absolute path under the root, in any spelling
        :func:`normalize_uri` accepts (``file:/...``, ``s3a://...``, escaped); None if it
        lies outside the root."""
        uri = normalize_uri(location)
        if uri == self.uri:
            return ""
        if not uri.startswith(self.uri + "/"):
            return None
        rest = uri[len(self.uri) + 1 :]
        return urllib.parse.unquote(rest) if self.uri.startswith("file://") else rest

    def url(self, rel: str) -> str:
        """Full URL with scheme (what Spark or a user would type); a local path's
        characters as they are (Hadoop's ``Path`` and the engines escape them)."""
        base = f"file://{self.root}" if self._is_local else self.uri
        return f"{base}/{rel}" if rel else base

    def arrow_filesystem(self) -> pafs.FileSystem:
        """A pyarrow filesystem over the same storage, for datasets."""
        if self._is_local:
            return pafs.LocalFileSystem()
        return pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))

    # -- reads ---------------------------------------------------------------
    def read_bytes(self, rel: str) -> bytes:
        """Whole content of a file; :class:`FileNotFoundError` if missing."""
        if self._is_local:
            with open(self.full(rel), "rb") as f:
                return f.read()
        data = self.fs.cat_file(self.full(rel))
        assert isinstance(data, bytes)
        return data

    def read_many(self, rels: Sequence[str]) -> list[bytes | None]:
        """Whole contents of several files, in order (None for a missing one); remote
        filesystems fetch them concurrently (s3fs in one batch of requests)."""
        if self._is_local or len(rels) <= 1:
            out: list[bytes | None] = []
            for rel in rels:
                try:
                    out.append(self.read_bytes(rel))
                except FileNotFoundError:
                    out.append(None)
            return out
        paths = [self.full(rel) for rel in rels]
        got = self.fs.cat(paths, on_error="return")
        result: list[bytes | None] = []
        for p in paths:
            value = got.get(p, got.get(self.fs._strip_protocol(p)))
            if isinstance(value, bytes):
                result.append(value)
            elif value is None or isinstance(value, FileNotFoundError):
                result.append(None)
            else:
                raise value if isinstance(value, BaseException) else OSError(str(value))
        return result

    def exists(self, rel: str) -> bool:
        """Whether a file exists now (never answered from a listing cache)."""
        if self._is_local:
            return os.path.exists(self.full(rel))
        if self._is_s3:  # s3fs.exists trusts its listing cache, blind to other writers
            try:
                self.fs.info(self.full(rel), refresh=True)
            except FileNotFoundError:
                return False
            return True
        return bool(self.fs.exists(self.full(rel)))

    def list_names(self, rel_dir: str) -> list[str]:
        """Base names of the entries of a folder ([] if it does not exist)."""
        if self._is_local:
            try:
                return [e.name for e in os.scandir(self.full(rel_dir))]
            except FileNotFoundError:
                return []
        try:
            entries = self.fs.ls(self.full(rel_dir), detail=False, refresh=True)
        except FileNotFoundError:
            return []
        return [str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries]

    def walk(self, rel_dir: str = "") -> Iterator[FileInfo]:
        """Every file below a folder, recursively, with size and mtime."""
        base = self.full(rel_dir)
        try:
            found = self.fs.find(base, detail=True, withdirs=False)
        except FileNotFoundError:
            return
        for path, info in found.items():
            if info.get("type", "file") != "file":
                continue
            yield FileInfo(
                path=self.relative(path),
                size=int(info.get("size") or 0),
                mtime_ms=_mtime_ms(info),
            )

    def open_input(self, rel: str) -> IO[bytes]:
        f = self.fs.open(self.full(rel), "rb")
        return f  # type: ignore[no-any-return]

    # -- writes --------------------------------------------------------------
    def open_output(self, rel: str) -> IO[bytes]:
        """A writable stream for a new data file (parents created)."""
        full = self.full(rel)
        if self._is_local:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            # Arrow's own stream: Parquet writers then write without taking the GIL
            stream = pafs.LocalFileSystem().open_output_stream(
                full, compression=None, buffer_size=1 << 20
            )
            return stream  # type: ignore[no-any-return]
        return self.fs.open(full, "wb")  # type: ignore[no-any-return]

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Create or replace a file so readers see the old or the new bytes, whole."""
        full = self.full(rel)
        if self._is_local:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            tmp = f"{full}.{uuid.uuid4().hex}.tmp"
            try:
                _write_synced(tmp, data)
                os.replace(tmp, full)
            finally:
                _silent_unlink(tmp)
            return
        self.fs.pipe_file(full, data)

    def put_if_absent(self, rel: str, data: bytes) -> None:
        """Create ``rel`` with ``data`` only if it does not exist.

        Raises :class:`FileExistsError` if it exists; the object is never
        visible partly written.
        """
        if fault("storage:ignore-put-condition", self.root):
            self.write_bytes(rel, data)  # as a store that ignores the condition does
            return
        full = self.full(rel)
        if self._is_local:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            tmp = f"{os.path.dirname(full)}/.{os.path.basename(full)}.{uuid.uuid4().hex}.tmp"
            try:
                _write_synced(tmp, data)
                try:
                    os.link(tmp, full)
                except FileExistsError:
                    raise
                except OSError as e:  # e.g. a filesystem without hard links
                    raise StorageNotSupportedError(
                        f"expected hard links to publish commits atomically on {self.root!r}, "
                        f"but link() failed: {e}. Use a local filesystem that supports hard "
                        f"links, or open the table with single_writer=True."
                    ) from e
            finally:
                _silent_unlink(tmp)
            return
        if self._is_memory:
            with _MEMORY_LOCK:
                if self.fs.exists(full):
                    raise FileExistsError(full)
                self.fs.pipe_file(full, data)
            return
        if self._is_s3:
            self.fs.pipe_file(full, data, mode="create")
            return
        # single-writer mode: best effort, documented as unsafe with two writers
        if self.fs.exists(full):
            raise FileExistsError(full)
        self.fs.pipe_file(full, data)

    def refuses_second_put(self, rel: str) -> bool:
        """Whether :meth:`put_if_absent` keeps its promise here: ``rel`` (a new, unique
        name) is put twice, and the second put must raise :class:`FileExistsError` and
        leave the first bytes. ``rel`` is deleted afterwards, whatever happens.

        Some S3-compatible stores accept the conditional-put header and ignore it;
        on them the second put succeeds and this returns False.
        """
        try:
            self.put_if_absent(rel, b"first")
            try:
                self.put_if_absent(rel, b"second")
            except FileExistsError:
                return self.read_bytes(rel) == b"first"
            return False
        finally:
            self.delete([rel])

    def delete(self, rel_paths: list[str]) -> None:
        """Delete files; missing ones are ignored (deletion is idempotent).

        Only files inside the root: a path that may leave it (:func:`leaves_root`, as a
        damaged log could name) makes the call raise :class:`InvalidArgumentError`
        before anything is deleted."""
        rel_paths = list(rel_paths)
        if not rel_paths:
            return
        outside = [rel for rel in rel_paths if leaves_root(rel)]
        if outside:
            raise InvalidArgumentError(
                f"expected root-relative paths of files inside the table root {self.uri} "
                f"to delete, found {outside[:3]!r}; nothing was deleted. lakelog never "
                f"deletes outside a table: a log naming such a file is damaged."
            )
        if self._is_local:
            for rel in rel_paths:
                _silent_unlink(self.full(rel))
            return
        fulls = [self.full(r) for r in rel_paths]
        try:
            self.fs.rm(fulls)
        except FileNotFoundError:
            for full in fulls:
                try:
                    self.fs.rm_file(full)
                except FileNotFoundError:
                    pass


def _check_options(storage_options: Any) -> dict[str, Any]:
    """``storage_options`` as a dict: a mapping with string keys, or None."""
    if storage_options is None:
        return {}
    if not isinstance(storage_options, Mapping) or not all(
        isinstance(k, str) for k in storage_options
    ):
        raise InvalidArgumentError(
            f"expected storage_options to be a mapping of option names to values (e.g. "
            f"{{'endpoint_url': 'http://localhost:9000'}}) or None, found "
            f"{type(storage_options).__name__} {storage_options!r}; pass a dict."
        )
    return dict(storage_options)


def _filesystem(uri: str, storage_options: dict[str, Any]) -> tuple[Any, str]:
    """The fsspec filesystem and path of a normalized URI, with typed errors for an
    unknown scheme, a missing driver and options the filesystem refuses."""
    scheme = uri.split("://", 1)[0]
    fs_uri = local_path(uri) if scheme == "file" else uri
    try:
        fs, path = fsspec.core.url_to_fs(fs_uri, **storage_options)
    except ImportError as e:
        raise StorageNotSupportedError(
            f"expected the fsspec driver for {scheme}:// URIs to be installed, found it "
            f"missing: {e}. Install that package in this environment."
        ) from e
    except OSError as e:  # e.g. a driver whose native library is missing
        raise StorageNotSupportedError(
            f"expected to set up the {scheme}:// filesystem, found it failing: {e}; check "
            f"that its driver and native libraries are installed and its storage_options."
        ) from e
    except (ValueError, TypeError) as e:
        if scheme not in fsspec.available_protocols():
            raise InvalidArgumentError(
                f"expected a table URI with a known scheme (a local path, file://, s3://, "
                f"memory://, or another fsspec protocol), found {scheme!r} in {uri!r}; check "
                f"the spelling of the scheme."
            ) from e
        raise InvalidArgumentError(
            f"expected storage_options the {scheme}:// filesystem accepts, found "
            f"{sorted(storage_options)} refused: {e}; fix storage_options."
        ) from e
    return fs, str(path)


def check_local_root(root: str) -> None:
    """Refuse a local table root that is a file or lies below one (every read and
    write there would fail with :class:`NotADirectoryError`)."""
    path = root
    while not os.path.exists(path):  # up to the nearest existing ancestor
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent
    if not os.path.isdir(path):
        found = "it is a file" if path == root else f"it lies below the file {path!r}"
        raise InvalidArgumentError(
            f"expected a folder (or a path that does not exist yet) for the table at "
            f"{root!r}, found that {found}; choose another location."
        )


def _write_synced(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)


def _silent_unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _mtime_ms(info: Mapping[str, Any]) -> int | None:
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return int(value.timestamp() * 1000)
        if isinstance(value, (int, float)):
            return int(float(value) * 1000)
    return None
