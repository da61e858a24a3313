"""Deletion vectors: the positions of a data file's rows that are gone (format version 5).

``docs/format.md``, "Deletion vectors": a vector is ``{"rows": n, "bitmap": text}``
where ``text`` is base64 of one form byte and the zlib compression of the positions,
either as sorted little-endian ``uint32`` (form 0) or as one bit per physical row,
least significant bit first (form 1). The writer takes the smaller form. Everything
here is pure: positions in, text out, and back, checked against the file's row count.
"""

from __future__ import annotations

import base64
import binascii
import zlib

import numpy as np

from ..errors import CorruptLogError
from .actions import DeletionVector

__all__ = [
    "MAX_BITMAP_BYTES",
    "DeletionVector",
    "deleted_positions",
    "encode_vector",
    "keep_mask",
    "union_vector",
]

MAX_BITMAP_BYTES = 64 * 1024
"""Largest encoded bitmap a writer records; past it, the file is rewritten instead."""

_POSITIONS, _BITS = 0, 1


def encode_vector(positions: np.ndarray, num_rows: int) -> DeletionVector:
    """The vector deleting ``positions`` (distinct, any order) of a file of ``num_rows``."""
    pos = np.unique(np.asarray(positions, dtype=np.int64))
    if not len(pos) or pos[0] < 0 or pos[-1] >= num_rows or len(pos) >= num_rows:
        raise ValueError(f"positions must be a proper subset of 0..{num_rows - 1}")
    as_list = pos.astype("<u4").tobytes()
    bits = np.zeros(num_rows, dtype=bool)
    bits[pos] = True
    as_bits = np.packbits(bits, bitorder="little").tobytes()
    form, raw = (_POSITIONS, as_list) if len(as_list) <= len(as_bits) else (_BITS, as_bits)
    payload = bytes([form]) + zlib.compress(raw, 6)
    return DeletionVector(rows=len(pos), bitmap=base64.b64encode(payload).decode("ascii"))


def deleted_positions(vector: DeletionVector, num_rows: int, *, path: str = "") -> np.ndarray:
    """The sorted positions ``vector`` deletes (int64); :class:`CorruptLogError` when it
    does not decode or disagrees with its own count or the file's ``num_rows``."""
    where = f" of data file {path!r}" if path else ""
    if not 0 < vector.rows < num_rows:
        raise CorruptLogError(
            f"expected a deletion vector{where} of between 1 and {num_rows - 1} rows (the "
            f"file has {num_rows}), found {vector.rows}; the log was damaged or written by "
            f"another tool."
        )
    try:
        payload = base64.b64decode(vector.bitmap, validate=True)
        form, raw = payload[0], zlib.decompress(payload[1:])
    except (binascii.Error, ValueError, IndexError, zlib.error) as e:
        raise CorruptLogError(
            f"expected a deletion vector{where} as format.md describes, found one that does "
            f"not decode ({e}); the log was damaged or written by another tool."
        ) from e
    if form == _POSITIONS and len(raw) % 4 == 0:
        pos = np.frombuffer(raw, dtype="<u4").astype(np.int64)
        ordered = bool(len(pos) < 2 or (np.diff(pos) > 0).all())
    elif form == _BITS and len(raw) == (num_rows + 7) // 8:
        bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")
        pos = np.flatnonzero(bits[:num_rows]).astype(np.int64)
        ordered = not bits[num_rows:].any()
    else:
        pos, ordered = np.empty(0, np.int64), False
    if not ordered or len(pos) != vector.rows or (len(pos) and pos[-1] >= num_rows):
        raise CorruptLogError(
            f"expected a deletion vector{where} of {vector.rows} sorted positions below "
            f"{num_rows} (form 0 or 1), found form {form} with {len(pos)} positions; the "
            f"log was damaged or written by another tool."
        )
    return pos


def keep_mask(vector: DeletionVector | None, num_rows: int, *, path: str = "") -> np.ndarray | None:
    """Per physical row of the file, whether it is live (None: every row is)."""
    if vector is None:
        return None
    keep = np.ones(num_rows, dtype=bool)
    keep[deleted_positions(vector, num_rows, path=path)] = False
    return keep


def union_vector(
    vector: DeletionVector | None, positions: np.ndarray, num_rows: int, *, path: str = ""
) -> DeletionVector | None:
    """``vector`` extended by ``positions``; None when that deletes every row (the file
    goes instead)."""
    old = (
        np.empty(0, np.int64) if vector is None else deleted_positions(vector, num_rows, path=path)
    )
    both = np.union1d(old, np.asarray(positions, dtype=np.int64))
    if len(both) >= num_rows:
        return None
    return encode_vector(both, num_rows)
