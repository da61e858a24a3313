"""Delta's deletion-vector bytes: the ``RoaringBitmapArray``, Z85 and the DV file.

Delta's protocol ("Deletion Vector Format" in delta-io/delta ``PROTOCOL.md``) stores
the deleted row positions of a data file as a 64-bit roaring bitmap in the *portable*
serialization of the RoaringFormatSpec, behind a magic number:

* ``RoaringBitmapArray``: ``1681511377`` as a little-endian ``uint32``, the number of
  32-bit buckets as a little-endian ``uint64``, then per bucket in ascending key order
  its key (the high 32 bits of its positions, ``uint32`` LE) and a standard 32-bit
  roaring bitmap of the low 32 bits. This writer uses the format without run
  containers (cookie ``12346``, then the container count, per container its 16-bit key
  and cardinality - 1, then per container its byte offset from the start of the 32-bit
  bitmap), with an *array container* (sorted ``uint16`` LE) for up to 4096 values and a
  *bitmap container* (1024 ``uint64`` LE words, bit ``i`` for value ``i``) above. The
  decoder also reads run containers (cookie ``12347``), as other writers produce them.
* A DV file: version byte ``1``, then per vector its size (``uint32`` big-endian), the
  ``RoaringBitmapArray`` and its CRC-32 (big-endian); a descriptor points at the size
  field with ``offset`` and gives the size as ``sizeInBytes``.
* Inline vectors and the UUIDs of DV files are written in Z85 (ZeroMQ's Base85).

Pure functions of bytes and numpy arrays; the view's use of them is :mod:`.vectors`.

>>> data = serialize([3, 4, 7, 11, 18, 29])
>>> deserialize(data).tolist()
[3, 4, 7, 11, 18, 29]
>>> z85_decode(z85_encode(b"\\x86\\x4f\\xd2\\x6f\\xb5\\x59\\xf7\\x5b"))
b'\\x86O\\xd2o\\xb5Y\\xf7['
>>> z85_encode(b"\\x86\\x4f\\xd2\\x6f\\xb5\\x59\\xf7\\x5b")  # the Z85 spec's test vector
'HelloWorld'
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Sequence

import numpy as np

from ...errors import DeltaViewError

__all__ = [
    "ARRAY_MAX",
    "MAGIC",
    "dv_file",
    "read_dv_file",
    "deserialize",
    "serialize",
    "z85_decode",
    "z85_encode",
]

MAGIC = 1681511377
"""First four bytes (little-endian) of a ``RoaringBitmapArray`` in portable form."""
ARRAY_MAX = 4096
"""Most values an array container holds; a container with more is a bitmap."""
_NO_RUNS = 12346
_RUNS = 12347
_NO_OFFSET_THRESHOLD = 4
_DV_FILE_VERSION = 1

_B85 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_Z85 = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_TO_Z85 = bytes.maketrans(_B85, _Z85)
_FROM_Z85 = bytes.maketrans(_Z85, _B85)


def _bad(what: str) -> DeltaViewError:
    return DeltaViewError(
        f"expected a Delta deletion vector (a RoaringBitmapArray in portable form, "
        f"PROTOCOL.md 'Deletion Vector Format'), found {what}; the bytes are damaged or "
        f"were written by another tool."
    )


# -- Z85 -------------------------------------------------------------------------------


def z85_encode(data: bytes) -> str:
    """Z85 text of ``data``, whose length must be a multiple of 4 (pad it first).

    Z85 and Python's RFC 1924 Base85 both write each 4-byte big-endian group as five
    base-85 digits, most significant first; only the alphabets differ."""
    if len(data) % 4:
        raise ValueError(f"Z85 encodes whole 4-byte groups, found {len(data)} bytes")
    return base64.b85encode(data).translate(_TO_Z85).decode("ascii")


def z85_decode(text: str) -> bytes:
    """The bytes of Z85 ``text`` (a multiple of 5 characters)."""
    raw = text.encode("ascii")
    if len(raw) % 5 or raw.translate(None, _Z85):
        raise _bad(f"Z85 text of {len(raw)} characters that is not whole 5-character groups")
    try:
        return base64.b85decode(raw.translate(_FROM_Z85))
    except ValueError as e:
        raise _bad(f"Z85 text that does not decode ({e})") from e


# -- RoaringBitmapArray ---------------------------------------------------------------


def _bitmap32(low: np.ndarray) -> bytes:
    """The 32-bit portable roaring bitmap (no run containers) of sorted distinct
    ``low`` (uint32)."""
    high16 = (low >> np.uint32(16)).astype(np.uint16)
    keys, starts, counts = np.unique(high16, return_index=True, return_counts=True)
    n = len(keys)
    header = 8 + 4 * n + 4 * n  # cookie, count, key/cardinality pairs, offsets
    bodies: list[bytes] = []
    offsets = np.empty(n, dtype="<u4")
    at = header
    for i in range(n):
        values = (low[starts[i] : starts[i] + counts[i]] & np.uint32(0xFFFF)).astype(np.uint16)
        if counts[i] <= ARRAY_MAX:
            body = values.astype("<u2").tobytes()
        else:
            bits = np.zeros(1 << 16, dtype=bool)
            bits[values] = True
            body = np.packbits(bits, bitorder="little").tobytes()
        offsets[i] = at
        at += len(body)
        bodies.append(body)
    pairs = np.empty(2 * n, dtype="<u2")
    pairs[0::2] = keys
    pairs[1::2] = counts - 1
    return b"".join([struct.pack("<II", _NO_RUNS, n), pairs.tobytes(), offsets.tobytes(), *bodies])


def serialize(positions: Sequence[int] | np.ndarray) -> bytes:
    """The ``RoaringBitmapArray`` (magic number first) of the distinct row
    ``positions`` (any order; each in ``0 .. 2**63 - 1``: Delta requires the high bit
    of every bucket key to be 0). Deterministic: the same set, the same bytes."""
    pos = np.sort(np.asarray(positions, dtype=np.int64), kind="stable")
    if len(pos) > 1:
        pos = pos[np.concatenate(([True], pos[1:] != pos[:-1]))]
    if len(pos) and pos[0] < 0:
        raise ValueError(f"row positions must be >= 0, found {int(pos[0])}")
    upos = pos.astype(np.uint64)
    high = (upos >> np.uint64(32)).astype(np.uint32)
    low = (upos & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    buckets, starts, counts = np.unique(high, return_index=True, return_counts=True)
    parts = [struct.pack("<IQ", MAGIC, len(buckets))]
    for key, start, count in zip(buckets.tolist(), starts.tolist(), counts.tolist(), strict=True):
        parts.append(struct.pack("<I", key))
        parts.append(_bitmap32(low[start : start + count]))
    return b"".join(parts)


class _Reader:
    def __init__(self, data: bytes, at: int) -> None:
        self.data = memoryview(data)
        self.at = at

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.at + n > len(self.data):
            raise _bad(f"{len(self.data)} bytes, too few for its {what}")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def unpack(self, fmt: str, what: str) -> tuple[int, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))


def _read_bitmap32(r: _Reader) -> np.ndarray:
    """Values (uint32, ascending) of one 32-bit portable roaring bitmap at ``r``."""
    start = r.at
    (cookie,) = r.unpack("<I", "cookie")
    runs_flags: np.ndarray | None = None
    if cookie == _NO_RUNS:
        (n,) = r.unpack("<I", "container count")
    elif cookie & 0xFFFF == _RUNS:
        n = (cookie >> 16) + 1
        flags = np.frombuffer(r.take((n + 7) // 8, "run flags"), dtype=np.uint8)
        runs_flags = np.unpackbits(flags, bitorder="little")[:n].astype(bool)
    else:
        raise _bad(f"a 32-bit bitmap with cookie {cookie}")
    if n > 1 << 16:
        raise _bad(f"a 32-bit bitmap of {n} containers")
    pairs = np.frombuffer(r.take(4 * n, "container keys"), dtype="<u2").astype(np.uint32)
    keys, cards = pairs[0::2], pairs[1::2] + 1
    if len(keys) > 1 and not (np.diff(keys.astype(np.int64)) > 0).all():
        raise _bad("container keys out of order")
    if runs_flags is None or n >= _NO_OFFSET_THRESHOLD:
        offsets = np.frombuffer(r.take(4 * n, "container offsets"), dtype="<u4")
    else:
        offsets = None
    out: list[np.ndarray] = []
    for i in range(n):
        if offsets is not None:
            r.at = start + int(offsets[i])
        base = np.uint32(int(keys[i]) << 16)
        if runs_flags is not None and runs_flags[i]:
            (nruns,) = r.unpack("<H", "run count")
            runs = np.frombuffer(r.take(4 * nruns, "runs"), dtype="<u2").astype(np.int64)
            spans = zip(runs[0::2], runs[1::2], strict=True)
            values = np.concatenate(
                [np.arange(s, s + ln + 1, dtype=np.int64) for s, ln in spans]
                or [np.empty(0, np.int64)]
            )
            if len(values) and values[-1] > 0xFFFF:
                raise _bad("a run past its container")
        elif cards[i] <= ARRAY_MAX:
            values = np.frombuffer(r.take(2 * int(cards[i]), "array container"), dtype="<u2")
        else:
            words = np.frombuffer(r.take(8192, "bitmap container"), dtype=np.uint8)
            values = np.flatnonzero(np.unpackbits(words, bitorder="little"))
        if len(values) != cards[i] or (len(values) > 1 and not (np.diff(values) > 0).all()):
            raise _bad(f"a container of {len(values)} values that declares {int(cards[i])}")
        out.append(values.astype(np.uint32) | base)
    return np.concatenate(out) if out else np.empty(0, np.uint32)


def deserialize(data: bytes) -> np.ndarray:
    """The positions (uint64, ascending) of a ``RoaringBitmapArray`` (magic number
    first); :class:`DeltaViewError` if ``data`` is not one (bytes after it are ignored,
    as the padding of an inline vector)."""
    r = _Reader(data, 0)
    (magic,) = r.unpack("<I", "magic number")
    if magic != MAGIC:
        raise _bad(f"magic number {magic} instead of {MAGIC}")
    (nbuckets,) = r.unpack("<Q", "bucket count")
    if nbuckets > len(data):
        raise _bad(f"{nbuckets} buckets in {len(data)} bytes")
    out: list[np.ndarray] = []
    last = -1
    for _ in range(nbuckets):
        (key,) = r.unpack("<I", "bucket key")
        if key <= last or key >> 31:
            raise _bad(f"bucket key {key} after {last} (keys ascend, high bit 0)")
        last = key
        low = _read_bitmap32(r).astype(np.uint64)
        out.append(low | np.uint64(key << 32))
    return np.concatenate(out) if out else np.empty(0, np.uint64)


# -- DV files -------------------------------------------------------------------------


def dv_file(vectors: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """A DV file holding serialized ``vectors`` and the ``offset`` of each (the byte
    its 4-byte size starts at, as a descriptor records it)."""
    parts = [bytes([_DV_FILE_VERSION])]
    offsets = []
    at = 1
    for data in vectors:
        offsets.append(at)
        parts.append(struct.pack(">I", len(data)))
        parts.append(data)
        parts.append(struct.pack(">I", zlib.crc32(data)))
        at += 8 + len(data)
    return b"".join(parts), offsets


def read_dv_file(content: bytes, *, offset: int, size: int) -> np.ndarray:
    """The positions of the vector at ``offset`` of a DV file (``size``: the
    descriptor's ``sizeInBytes``), checked against its size field and CRC-32."""
    if not content or content[0] != _DV_FILE_VERSION:
        found = content[0] if content else "nothing"
        raise _bad(f"a DV file of version {found} instead of {_DV_FILE_VERSION}")
    r = _Reader(content, offset)
    (stored,) = r.unpack(">I", "size")
    if stored != size:
        raise _bad(f"a vector of {stored} bytes where the descriptor says {size}")
    data = bytes(r.take(size, "vector"))
    (crc,) = r.unpack(">I", "checksum")
    if crc != zlib.crc32(data):
        raise _bad(f"a vector whose CRC-32 {zlib.crc32(data)} is not the stored {crc}")
    return deserialize(data)
