"""lakelog's deletion vectors as Delta deletion vectors in the view.

Each lakelog vector (``AddFile.deleted``: a count and lakelog's own bitmap text) maps
to one Delta ``deletionVector`` descriptor, a pure function of the data file's path and
the vector's text, so every writer of the view (the committer, a sync, a rebuild, a
checkpoint) derives the same descriptor, and a ``remove`` names exactly the descriptor
of the ``add`` it cancels (Delta keys a logical file by path and descriptor):

* the positions are serialized as a ``RoaringBitmapArray`` (:mod:`.roaring`);
* up to :data:`INLINE_MAX_BYTES` serialized bytes, the vector is *inline*
  (``storageType`` ``"i"``: the bytes, zero-padded to a multiple of 4, in Z85);
* larger, it goes to its own DV file ``deletion_vector_<uuid>.bin`` in the table root
  (``storageType`` ``"u"``, ``pathOrInlineDv`` the Z85 of the UUID, no prefix,
  ``offset`` 1), whose UUID is derived from the path and the vector text
  (:func:`dv_file_name`). The view writes that file (put-if-absent; identical bytes
  whoever writes it) before any Delta entry or checkpoint naming it.

``cardinality`` is the vector's row count; ``sizeInBytes`` the serialized size.
Vacuum keeps the DV files of the vectors retained versions hold
(:func:`vector_file_names`) and those the Delta entries it keeps name
(:func:`descriptor_file`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ... import threads
from ...errors import DeltaViewError
from ...log.actions import DeletionVector
from ...log.deletion_vectors import deleted_positions
from ...log.format import DELETION_VECTORS
from ...log.snapshot import Snapshot
from ...storage import Storage
from .roaring import dv_file, serialize, z85_decode, z85_encode

__all__ = [
    "DV_FILE_RE",
    "ENABLE_FLAG",
    "INLINE_MAX_BYTES",
    "PROPERTY",
    "DeltaVector",
    "delta_vector",
    "descriptor_file",
    "dv_file_name",
    "holds_vectors",
    "vector_file_names",
    "vectors_of",
    "write_vector_files",
]

PROPERTY = "lakelog.deletion_vectors"
ENABLE_FLAG = "delta.enableDeletionVectors"
INLINE_MAX_BYTES = 128
"""Largest serialized vector written inline in the Delta log (up to 48 positions in
one 16-bit container); larger ones go to a DV file, so entries and checkpoints stay
small."""
_NAMESPACE = uuid.UUID("6c616b65-6c6f-4764-b600-64656c746176")
"""Namespace of the UUIDs of the view's DV files (uuid5 of path and vector text)."""
_SEED_VERSION = "dv1"
"""Part of every UUID seed: a writer that serialized differently would need new names."""
DV_FILE_RE = re.compile(
    r"^deletion_vector_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.bin$"
)
_WRITERS = 16


@dataclass(frozen=True)
class DeltaVector:
    """A lakelog vector in Delta's form: its ``deletionVector`` descriptor and, for an
    on-disk one, the DV file to write (root-relative path and bytes)."""

    descriptor: dict[str, Any]
    file: str | None = None
    content: bytes | None = None


def dv_file_name(path: str, bitmap: str) -> str:
    """The root-relative name of the DV file of the vector ``bitmap`` (lakelog's text)
    of data file ``path``, whether or not the view writes it (inline vectors have none).

    >>> dv_file_name("part-0.parquet", "AHic")
    'deletion_vector_108e134e-e38f-5076-9b6b-1978da95a3aa.bin'
    """
    return f"deletion_vector_{_uuid(path, bitmap)}.bin"


def _uuid(path: str, bitmap: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"{_SEED_VERSION}\n{path}\n{bitmap}")


def delta_vector(path: str, vector: DeletionVector, num_rows: int) -> DeltaVector:
    """The Delta form of ``vector`` of data file ``path`` (``num_rows`` physical rows);
    :class:`~lakelog.errors.CorruptLogError` if the vector does not decode."""
    data = serialize(deleted_positions(vector, num_rows, path=path))
    if len(data) <= INLINE_MAX_BYTES:
        padded = data + b"\0" * (-len(data) % 4)
        return DeltaVector(
            {
                "storageType": "i",
                "pathOrInlineDv": z85_encode(padded),
                "sizeInBytes": len(data),
                "cardinality": vector.rows,
            }
        )
    ident = _uuid(path, vector.bitmap)
    content, (offset,) = dv_file([data])
    return DeltaVector(
        {
            "storageType": "u",
            "pathOrInlineDv": z85_encode(ident.bytes),
            "offset": offset,
            "sizeInBytes": len(data),
            "cardinality": vector.rows,
        },
        file=f"deletion_vector_{ident}.bin",
        content=content,
    )


def write_vector_files(storage: Storage, vectors: Iterable[DeltaVector]) -> int:
    """Put the DV files of ``vectors`` that are not there yet (put-if-absent: whoever
    wrote one wrote the same bytes). Returns how many were written."""
    todo = {v.file: v.content for v in vectors if v.file is not None and v.content is not None}
    if not todo:
        return 0

    def put(item: tuple[str, bytes]) -> int:
        try:
            storage.put_if_absent(*item)
        except FileExistsError:
            return 0
        return 1

    if len(todo) == 1:
        return put(next(iter(todo.items())))
    with threads.pool("lakelog-delta-dv", min(_WRITERS, len(todo))) as pool:
        return sum(pool.map(put, todo.items()))


def descriptor_file(descriptor: Mapping[str, Any] | None) -> str | None:
    """The root-relative DV file a ``deletionVector`` descriptor of a Delta entry names
    (storage type ``"u"``: optional prefix folder and Z85 UUID), else None (inline, an
    absolute path, or not a descriptor)."""
    if not isinstance(descriptor, Mapping) or descriptor.get("storageType") != "u":
        return None
    text = descriptor.get("pathOrInlineDv")
    if not isinstance(text, str) or len(text) < 20:
        return None
    prefix, encoded = text[:-20], text[-20:]
    try:
        ident = uuid.UUID(bytes=z85_decode(encoded))
    except (ValueError, DeltaViewError):  # not a UUID: no file of ours to keep
        return None
    name = f"deletion_vector_{ident}.bin"
    return f"{prefix}/{name}" if prefix else name


def vectors_of(
    snapshot: Snapshot, paths: Iterable[str] | None = None
) -> dict[str, tuple[DeletionVector, int]]:
    """The vectors the live files ``paths`` (None: every live file) of ``snapshot``
    carry, with each file's physical row count (files without one are left out)."""
    wanted = None if paths is None else list(dict.fromkeys(paths))
    if wanted == [] or not DELETION_VECTORS.declared_by(snapshot.metadata.format_version):
        return {}
    files = snapshot.file_table
    keep = pc.is_valid(files.column("deleted_bitmap"))
    if wanted is not None:
        keep = pc.and_(
            keep, pc.is_in(files.column("path"), value_set=pa.array(wanted, pa.string()))
        )
    rows = files.filter(keep)
    return {
        p: (DeletionVector(rows=n, bitmap=b), total)
        for p, n, b, total in zip(
            rows.column("path").to_pylist(),
            rows.column("deleted_rows").to_pylist(),
            rows.column("deleted_bitmap").to_pylist(),
            rows.column("num_rows").to_pylist(),
            strict=True,
        )
    }


def holds_vectors(snapshot: Snapshot, *, besides: Iterable[str] = ()) -> bool:
    """Whether the view of ``snapshot`` declares Delta's ``deletionVectors`` feature: a
    live file carries a vector (one not in ``besides``). Not the property alone: while no
    file has a vector, the view stays a table every Delta reader reads (deltalake's
    pyarrow reader refuses the feature)."""
    if not DELETION_VECTORS.declared_by(snapshot.metadata.format_version):
        return False
    files = snapshot.file_table
    marked = pc.is_valid(files.column("deleted_bitmap"))
    skip = list(besides)
    if skip:
        marked = pc.and_(
            marked,
            pc.invert(pc.is_in(files.column("path"), value_set=pa.array(skip, pa.string()))),
        )
    return bool(pc.any(marked).as_py())


def vector_file_names(pairs: Iterable[tuple[str, str]]) -> Iterator[str]:
    """The DV file names (:func:`dv_file_name`) of ``(path, bitmap)`` pairs."""
    for path, bitmap in pairs:
        yield dv_file_name(path, bitmap)


def file_table_vectors(files: pa.Table) -> Iterator[tuple[str, str]]:
    """``(path, bitmap)`` of every file of a file table that carries a vector."""
    if "deleted_bitmap" not in files.column_names:
        return
    rows = files.filter(pc.is_valid(files.column("deleted_bitmap")))
    yield from zip(
        rows.column("path").to_pylist(), rows.column("deleted_bitmap").to_pylist(), strict=True
    )
