"""Manifests: the live file set as of one version, in Parquet.

``_lakelog/<version:020d>.manifest.parquet`` holds, in the Parquet key-value
metadata under ``lakelog``, a JSON header (:class:`ManifestHeader`) whose
``format_version`` says its layout (``docs/format.md``):

* **version 1**: one row per live file (``files._FILES_SCHEMA``, JSON columns: its private codec);
* **version 2**: a *root*, one row per leaf (:mod:`.leaves`) with the positions of the
  leaf's rows no longer live and a typed summary of the leaf for pruning.

``_lakelog/_last_manifest`` is a hint naming the newest manifest. A manifest or hint
that is missing or damaged is skipped, never trusted.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import CorruptLogError
from ..filters import FileStatsColumns
from ..paths import check_manifest_paths, check_read_paths
from ..storage import Storage
from .actions import Metadata, encode_with_metadata
from .commits import LOG_DIR
from .file_index import bounded_columns
from .files import _FILES_SCHEMA, ReplayState
from .format import BASE, CURRENT, ROOTS, check_readable, readable
from .leaves import META_KEY as _META_KEY
from .leaves import conform, read_log_parquet, struct_fields

__all__ = [
    "LAST_MANIFEST",
    "Manifest",
    "ManifestHeader",
    "Root",
    "carry_into_state",
    "encode_manifest",
    "encode_root",
    "manifest_path",
    "read_hint",
    "read_hint_oldest",
    "read_manifest",
    "read_manifest_header",
    "read_root",
    "replace_root",
    "root_leaves",
    "root_schema",
    "summary_types",
    "write_hint",
    "write_manifest",
    "write_root",
]

LAST_MANIFEST = f"{LOG_DIR}/_last_manifest"
_V2_FIELDS = ("num_rows", "num_bytes", "num_leaves")


class ManifestHeader(msgspec.Struct, frozen=True, kw_only=True):
    """The header of a manifest. New fields get defaults (format.md, "The root"); a
    writer fills them from the state it replayed (see ``lakelog.log.checkpoint``)."""

    format_version: int = CURRENT
    version: int
    timestamp_ms: int
    num_files: int
    metadata: Metadata
    oldest_version: int = 0
    """Oldest readable version as of this version (see ``ExpireVersions``)."""
    num_rows: int | None = None
    """Version 2: rows of the live files."""
    num_bytes: int | None = None
    """Version 2: bytes of the live files."""
    num_leaves: int | None = None
    """Version 2: rows of the root."""
    app_versions: dict[str, int] = {}
    """Recorded version of each app id as of this version (format.md, "App transactions")."""
    app_commits: dict[str, int] = {}
    """The commit that recorded each app id's version."""
    plans: msgspec.Raw = msgspec.Raw(b"{}")
    """Version 3: pending maintenance plans (format.md, "Maintenance plans and claims"):
    plan id to :class:`~lakelog.log.plans.PendingPlan`, kept as JSON until someone asks
    (``ReplayState.pending_plans``): a large plan lists every file it claims."""
    plans_file: str | None = None
    """Version 4: the plans file holding the pending plans (``plans`` is then empty)."""


class Manifest(msgspec.Struct, frozen=True):
    """A version-1 manifest: the header and the live files, one row each."""

    header: ManifestHeader
    files: pa.Table


class _Hint(msgspec.Struct):
    version: int
    oldest_version: int = 0


def manifest_path(version: int) -> str:
    return f"{LOG_DIR}/{version:020d}.manifest.parquet"


# -- version 1 --------------------------------------------------------------------------


def _v1_header(header: ManifestHeader) -> bytes:
    raw = msgspec.json.decode(msgspec.json.encode(header))
    raw["format_version"] = BASE
    for name in _V2_FIELDS:
        raw.pop(name, None)
    if not header.metadata.partition_specs:
        raw["metadata"].pop("partition_specs", None)
    return msgspec.json.encode(raw)


def encode_manifest(header: ManifestHeader, files: pa.Table) -> bytes:
    """A version-1 manifest (its header says ``format_version: 1``, its layout)."""
    check_manifest_paths(files.column("path"), f"manifest {manifest_path(header.version)}")
    table = files.cast(_FILES_SCHEMA).replace_schema_metadata({_META_KEY: _v1_header(header)})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", row_group_size=65536)
    return buf.getvalue()


def write_manifest(storage: Storage, header: ManifestHeader, files: pa.Table) -> None:
    """Write a version-1 manifest, then advance the hint if this one is newer."""
    storage.write_bytes(manifest_path(header.version), encode_manifest(header, files))
    write_hint(storage, header.version, header.oldest_version)


def write_hint(storage: Storage, version: int, oldest_version: int) -> None:
    """Advance ``_last_manifest`` to ``version`` if that is newer than what it says."""
    hint = read_hint(storage)
    if hint is None or hint < version:
        storage.write_bytes(LAST_MANIFEST, msgspec.json.encode(_Hint(version, oldest_version)))


def _read_parquet(
    storage: Storage, version: int, reader_version: int
) -> tuple[pa.Table, ManifestHeader]:
    data = storage.read_bytes(manifest_path(version))
    try:
        table, raw = read_log_parquet(data)
        header = msgspec.json.decode(raw, type=ManifestHeader)
    except (pa.ArrowException, ValueError, msgspec.DecodeError, OSError) as e:
        raise CorruptLogError(
            f"expected a readable manifest at {manifest_path(version)}, found {e}"
        ) from e
    check_readable(
        header.format_version,
        what="manifest",
        where=manifest_path(version),
        reader_version=reader_version,
    )
    if header.version != version:
        raise CorruptLogError(
            f"expected manifest {manifest_path(version)} to hold version {version}, found "
            f"version {header.version}"
        )
    return table.replace_schema_metadata(None), header


def read_manifest(
    storage: Storage, version: int, *, reader_version: int = CURRENT
) -> Manifest | Root:
    """Read and check one manifest: a :class:`Manifest` (version 1) or a :class:`Root`.

    :class:`FileNotFoundError` if absent, :class:`CorruptLogError` if damaged,
    :class:`UnsupportedFormatError` if newer than ``reader_version`` (this lakelog's).
    """
    table, header = _read_parquet(storage, version, reader_version)
    if ROOTS.declared_by(header.format_version):
        return Root.check(header, table, manifest_path(version))
    if header.num_files != table.num_rows:
        raise CorruptLogError(
            f"expected manifest {manifest_path(version)} to hold version {version} with "
            f"{header.num_files} files, found {table.num_rows} rows"
        )
    for name in ("deleted_rows", "deleted_bitmap"):  # written before format version 5
        if name not in table.column_names:
            table = table.append_column(
                name, pa.nulls(table.num_rows, _FILES_SCHEMA.field(name).type)
            )
    try:
        files = table.select(_FILES_SCHEMA.names).cast(_FILES_SCHEMA)
    except (pa.ArrowException, KeyError) as e:
        raise CorruptLogError(f"manifest {manifest_path(version)} has a wrong schema: {e}") from e
    check_read_paths(files.column("path"), f"manifest {manifest_path(version)}")
    return Manifest(header, files)


def read_root(storage: Storage, version: int) -> Root | None:
    """The version-2 root at ``version``, None if there is none (or a version-1 one)."""
    try:
        got = read_manifest(storage, version)
    except (FileNotFoundError, CorruptLogError):
        return None
    return got if isinstance(got, Root) else None


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
    if not readable(header.format_version) or header.version != version:
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


# -- version 2: roots -------------------------------------------------------------------


def summary_types(
    schema: pa.Schema, partition_by: Sequence[str]
) -> tuple[pa.StructType, pa.StructType]:
    """Struct types of a root's ``min``/``max`` (partition columns, then the columns with
    bounds, in their types) and ``null_count`` (every column, int64)."""
    bounds = [schema.field(c) for c in partition_by]
    bounds += [
        pa.field(c, schema.field(c).type) for c in bounded_columns(schema, tuple(partition_by))
    ]
    counts = [pa.field(c, pa.int64()) for c in partition_by]
    counts += [pa.field(f.name, pa.int64()) for f in schema if f.name not in partition_by]
    return pa.struct(bounds), pa.struct(counts)


def root_schema(schema: pa.Schema, partition_by: Sequence[str]) -> pa.Schema:
    """Columns of a root for a table of ``schema`` (format.md, "The root")."""
    bounds, counts = summary_types(schema, partition_by)
    fields = [
        pa.field("leaf", pa.string(), nullable=False),
        pa.field("leaf_files", pa.int64(), nullable=False),
        pa.field("removed", pa.list_(pa.int32())),
        pa.field("live_files", pa.int64(), nullable=False),
        pa.field("live_rows", pa.int64(), nullable=False),
        pa.field("live_bytes", pa.int64(), nullable=False),
        pa.field("path_min", pa.string()),
        pa.field("path_max", pa.string()),
        pa.field("num_rows", pa.int64(), nullable=False),
    ]
    if bounds.num_fields:
        fields += [pa.field("min", bounds), pa.field("max", bounds)]
    if counts.num_fields:
        fields.append(pa.field("null_count", counts))
    return pa.schema(fields)


class Root:
    """A version-2 manifest in memory: its header and one row per leaf (immutable)."""

    _REQUIRED = ("leaf", "leaf_files", "removed", "live_files", "live_rows", "live_bytes")

    def __init__(self, header: ManifestHeader, entries: pa.Table) -> None:
        self.header = header
        self.entries = entries.combine_chunks()
        self.leaves: list[str] = self.entries.column("leaf").to_pylist()
        self._removed: list[Any] | None = None
        self._summary: dict[Any, FileStatsColumns] = {}
        self._lock = threading.Lock()

    @classmethod
    def check(cls, header: ManifestHeader, table: pa.Table, where: str) -> Root:
        missing = [c for c in cls._REQUIRED if c not in table.column_names]
        if missing or (header.num_leaves is not None and header.num_leaves != table.num_rows):
            raise CorruptLogError(
                f"expected manifest root {where} to list {header.num_leaves} leaves with the "
                f"columns of format.md, found {table.num_rows} rows"
                + (f" and no column {missing}" if missing else "")
            )
        root = cls(header, table)
        if int(pc.sum(root.entries.column("live_files")).as_py() or 0) != header.num_files:
            raise CorruptLogError(
                f"expected manifest root {where} to count {header.num_files} live files, "
                f"found its leaves counting {pc.sum(root.entries.column('live_files'))}"
            )
        return root

    @property
    def version(self) -> int:
        return self.header.version

    def __len__(self) -> int:
        return len(self.leaves)

    def removed(self, i: int) -> np.ndarray:
        """Positions of leaf ``i``'s rows that are not live as of this root."""
        if self._removed is None:
            self._removed = self.entries.column("removed").to_pylist()
        got = self._removed[i]
        return np.asarray(got or (), dtype=np.int64)

    def live_counts(self) -> tuple[int, int, int]:
        """Live files, rows and bytes (from the root alone)."""
        return tuple(  # type: ignore[return-value]
            int(pc.sum(self.entries.column(c)).as_py() or 0)
            for c in ("live_files", "live_rows", "live_bytes")
        )

    def summary_columns(
        self,
        schema: pa.Schema,
        partition_by: tuple[str, ...],
        names: frozenset[str] | None,
        key: str,
    ) -> FileStatsColumns:
        """The leaves' summaries as pruning columns, one row per leaf: partition columns
        as ranges (``min``/``max``), so the pruner treats them like statistics."""
        with self._lock:
            got = self._summary.get((key, names))
            if got is not None:
                return got
        bounds, counts = summary_types(schema, partition_by)
        mins = struct_fields(self.entries, "min")
        maxs = struct_fields(self.entries, "max")
        nulls = struct_fields(self.entries, "null_count")
        lo: dict[str, pa.Array] = {}
        hi: dict[str, pa.Array] = {}
        nc: dict[str, pa.Array] = {}
        for f in bounds:
            if names is None or f.name in names:
                a, b = conform(mins.get(f.name), f.type), conform(maxs.get(f.name), f.type)
                if a is not None and b is not None:
                    lo[f.name], hi[f.name] = a, b
        # The pruner asks "may hold a value" as null_count != num_rows, per file. Over a
        # leaf, with rows + files as the base: a partition column has one if some file's
        # value is not null (its null_count counts files), another column if not every
        # row is null; 0-row files then prune as they do one by one.
        rows = self.entries.column("num_rows").combine_chunks()
        files = self.entries.column("leaf_files").combine_chunks()
        base = pc.add(rows, files)
        for f in counts:
            if names is None or f.name in names:
                c = conform(nulls.get(f.name), pa.int64())
                if c is not None:
                    full = files if f.name in partition_by else rows
                    nc[f.name] = pc.if_else(pc.equal(c, full), base, c)
        built = FileStatsColumns(
            num_rows=base,
            partition={},
            min=lo,
            max=hi,
            null_count=nc,
        )
        with self._lock:
            if len(self._summary) >= 8:
                self._summary.clear()
            self._summary[(key, names)] = built
        return built


def encode_root(header: ManifestHeader, entries: pa.Table) -> bytes:
    """A root's bytes: the header in the Parquet key-value metadata under ``lakelog``.

    The stored Arrow schema (``ARROW:schema``) carries the same header without its
    pending plans: a large plan lists every file it claims, and a copy there (base64,
    decoded by every reader) was most of the cost of opening such a table. Reading the
    file (``ParquetFile.read``) gives the key-value header, as before; readers that look
    only at the Arrow schema's (``root_leaves`` of older lakelog versions) get every
    field they use."""
    header = msgspec.structs.replace(
        header, format_version=max(ROOTS.version, header.format_version)
    )
    stub = msgspec.structs.replace(header, plans=msgspec.Raw(b"{}"))
    stub_json = encode_with_metadata(msgspec.json.encode(stub), header.metadata)
    table = entries.replace_schema_metadata({_META_KEY: stub_json})
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, table.schema, compression="zstd") as writer:
        writer.write_table(table, row_group_size=max(1, entries.num_rows))
        header_json = encode_with_metadata(msgspec.json.encode(header), header.metadata)
        writer.add_key_value_metadata({_META_KEY: header_json})
    return buf.getvalue()


def write_root(storage: Storage, root: Root) -> bool:
    """Put a root if absent, then advance the hint. A version-1 manifest at the same
    version is replaced (atomically); an existing root is kept (returns False)."""
    path = manifest_path(root.version)
    data = encode_root(root.header, root.entries)
    try:
        storage.put_if_absent(path, data)
    except FileExistsError:
        existing = read_manifest_header(storage, root.version)
        if existing is not None and ROOTS.declared_by(existing.format_version):
            return False
        storage.write_bytes(path, data)
    write_hint(storage, root.version, root.header.oldest_version)
    return True


def root_leaves(storage: Storage, versions: Sequence[int]) -> dict[int, list[str]]:
    """The leaves each version-2 root at ``versions`` lists (read concurrently on object
    stores; only the ``leaf`` column), and its plans file if it names one (version 4).
    Versions without a readable root are left out."""
    out: dict[int, list[str]] = {}
    versions = list(versions)
    for start in range(0, len(versions), 64):
        chunk = versions[start : start + 64]
        got = storage.read_many([manifest_path(v) for v in chunk])
        for v, data in zip(chunk, got, strict=True):
            if data is None:
                continue
            try:
                f = pq.ParquetFile(pa.BufferReader(data))
                # the Arrow schema's copy of the header: all but the plans, not needed here
                raw = (f.schema_arrow.metadata or {}).get(_META_KEY)
                header = None if raw is None else msgspec.json.decode(raw, type=ManifestHeader)
                if header is None or not ROOTS.declared_by(header.format_version):
                    continue
                leaves = f.read(columns=["leaf"], use_threads=False).column("leaf").to_pylist()
                out[v] = leaves + ([header.plans_file] if header.plans_file else [])
            except (pa.ArrowException, ValueError, KeyError, msgspec.DecodeError, OSError):
                continue
    return out


def replace_root(storage: Storage, root: Root) -> None:
    """Overwrite the root at its version (a writer repairing its own root)."""
    storage.write_bytes(manifest_path(root.version), encode_root(root.header, root.entries))


def carry_into_state(header: ManifestHeader, state: ReplayState) -> None:
    """Set on ``state``, resolved from a manifest, the fields its header carries beyond
    version, time, metadata, oldest version and plans (which the caller sets).

    Each field by name, so that renaming one on either side is a type error; the
    checkpoint's ``header_for`` writes the same fields from the state, and
    ``tests/log/test_format.py`` checks that every field the two share goes both ways."""
    state.app_versions = dict(header.app_versions)
    state.app_commits = dict(header.app_commits)
