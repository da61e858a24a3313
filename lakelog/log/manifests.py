"""Snapshot manifests: the full live file set as of one version, in Parquet.

``_lakelog/<version:020d>.manifest.parquet`` holds one row per live file
(:data:`FILES_SCHEMA`) and, in the Parquet key-value metadata under
``lakelog``, a JSON header with the version, its timestamp and the table
metadata. ``_lakelog/_last_manifest`` is a hint naming the newest manifest.
A manifest or hint that is missing or damaged is skipped, never trusted.
"""

from __future__ import annotations

import io

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import CorruptLogError, UnsupportedFormatError
from ..storage import Storage
from .actions import FORMAT_VERSION, Metadata
from .commits import LOG_DIR
from .files import FILES_SCHEMA

__all__ = [
    "LAST_MANIFEST",
    "Manifest",
    "manifest_path",
    "read_hint",
    "read_hint_oldest",
    "read_manifest",
    "read_manifest_header",
    "write_manifest",
]

LAST_MANIFEST = f"{LOG_DIR}/_last_manifest"
_META_KEY = b"lakelog"


class ManifestHeader(msgspec.Struct, frozen=True, kw_only=True):
    format_version: int = FORMAT_VERSION
    version: int
    timestamp_ms: int
    num_files: int
    metadata: Metadata
    oldest_version: int = 0
    """Oldest readable version as of this version (see ``ExpireVersions``)."""


class Manifest(msgspec.Struct, frozen=True):
    header: ManifestHeader
    files: pa.Table


class _Hint(msgspec.Struct):
    version: int
    oldest_version: int = 0


def manifest_path(version: int) -> str:
    return f"{LOG_DIR}/{version:020d}.manifest.parquet"


def encode_manifest(header: ManifestHeader, files: pa.Table) -> bytes:
    table = files.cast(FILES_SCHEMA).replace_schema_metadata(
        {_META_KEY: msgspec.json.encode(header)}
    )
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", row_group_size=65536)
    return buf.getvalue()


def write_manifest(storage: Storage, header: ManifestHeader, files: pa.Table) -> None:
    """Write a manifest, then advance the hint if this one is newer."""
    storage.write_bytes(manifest_path(header.version), encode_manifest(header, files))
    hint = read_hint(storage)
    if hint is None or hint < header.version:
        hint_bytes = msgspec.json.encode(_Hint(header.version, header.oldest_version))
        storage.write_bytes(LAST_MANIFEST, hint_bytes)


def read_manifest(storage: Storage, version: int) -> Manifest:
    """Read and check one manifest.

    :class:`FileNotFoundError` if absent, :class:`CorruptLogError` if damaged.
    """
    data = storage.read_bytes(manifest_path(version))
    try:
        # One file from memory: read it in this thread. pq.read_table would go through
        # the dataset scanner, whose pool threads can drop the last reference to the
        # Python-owned buffer after the interpreter began exiting (SIGABRT at exit).
        table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
        raw = (table.schema.metadata or {}).get(_META_KEY)
        if raw is None:
            raise ValueError("no lakelog header in the Parquet metadata")
        header = msgspec.json.decode(raw, type=ManifestHeader)
    except (pa.ArrowException, ValueError, msgspec.DecodeError, OSError) as e:
        raise CorruptLogError(
            f"expected a readable manifest at {manifest_path(version)}, found {e}"
        ) from e
    if header.format_version > FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"expected manifest format version <= {FORMAT_VERSION}, found "
            f"{header.format_version} in {manifest_path(version)}; upgrade lakelog."
        )
    if header.version != version or header.num_files != table.num_rows:
        raise CorruptLogError(
            f"expected manifest {manifest_path(version)} to hold version {version} with "
            f"{header.num_files} files, found version {header.version} with "
            f"{table.num_rows} rows"
        )
    try:
        files = table.replace_schema_metadata(None).select(FILES_SCHEMA.names).cast(FILES_SCHEMA)
    except (pa.ArrowException, KeyError) as e:
        raise CorruptLogError(f"manifest {manifest_path(version)} has a wrong schema: {e}") from e
    return Manifest(header, files)


def read_manifest_header(storage: Storage, version: int) -> ManifestHeader | None:
    """Only the header of a manifest (from the Parquet footer); None if unusable."""
    try:
        with storage.open_input(manifest_path(version)) as f:
            raw = (pq.read_metadata(f).metadata or {}).get(_META_KEY)
        if raw is None:
            return None
        header = msgspec.json.decode(raw, type=ManifestHeader)
    except (FileNotFoundError, pa.ArrowException, ValueError, msgspec.DecodeError, OSError):
        return None
    if header.format_version > FORMAT_VERSION or header.version != version:
        return None
    return header


def read_hint(storage: Storage) -> int | None:
    """The version named by ``_last_manifest``, or None if missing or damaged."""
    hint = _read_hint(storage)
    return None if hint is None else hint.version


def read_hint_oldest(storage: Storage) -> tuple[int, int] | None:
    """``(version, oldest_version)`` of the hint's manifest, or None if unusable."""
    hint = _read_hint(storage)
    return None if hint is None else (hint.version, hint.oldest_version)


def _read_hint(storage: Storage) -> _Hint | None:
    try:
        return msgspec.json.decode(storage.read_bytes(LAST_MANIFEST), type=_Hint)
    except (FileNotFoundError, msgspec.DecodeError, msgspec.ValidationError):
        return None
