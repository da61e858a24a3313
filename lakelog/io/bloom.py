"""Parquet split-block bloom filters: reading them from a file and probing values.

pyarrow (>= 24) writes bloom filters but cannot read them back from Python, so
lakelog reads them itself: the column chunk's ``bloom_filter_offset`` and
``bloom_filter_length`` (footer metadata, exposed by pyarrow >= 25) locate a
Thrift-compact ``BloomFilterHeader`` followed by the bitset. The format is the
Parquet specification's (``BloomFilter.md``):

* a value is hashed with XXH64 (seed 0) over its *plain encoding*: 4 or 8 bytes
  little-endian for INT32/INT64/FLOAT/DOUBLE, the raw bytes (no length prefix)
  for BYTE_ARRAY, the ``type_length`` bytes for FIXED_LEN_BYTE_ARRAY;
* the bitset is ``num_bytes / 32`` blocks of eight 32-bit words; the hash's high
  32 bits pick the block, its low 32 bits times eight salts set one bit per word.

A filter answers "certainly absent" or "maybe present"; anything this module
cannot encode or parse answers "maybe" (``None`` from :func:`encode_value`), so a
caller never skips data on a guess. The hash is pure Python: it runs once per
literal of a predicate, never per row.
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "BloomFilter",
    "BloomFormatError",
    "encode_value",
    "parse_bloom_filter",
    "xxh64",
]

_M64 = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5

SALT = np.array(
    [
        0x47B6137B,
        0x44974D91,
        0x8824AD5B,
        0xA2B7289D,
        0x705495C7,
        0x2DF1424B,
        0x9EFC4947,
        0x5C6BFB31,
    ],
    dtype=np.uint64,
)
"""The eight salts of the split-block bloom filter (Parquet spec)."""

HEADER_PROBE = 64
"""Bytes read to parse a header when the footer does not record the filter's length."""


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _M64
    return (_rotl(acc, 31) * _P1) & _M64


def _merge(acc: int, val: int) -> int:
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _M64


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64 of ``data`` (the hash Parquet bloom filters use, with seed 0).

    >>> hex(xxh64(b""))
    '0xef46db3751d8e999'
    """
    n = len(data)
    i = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _M64
        v2 = (seed + _P2) & _M64
        v3 = seed & _M64
        v4 = (seed - _P1) & _M64
        while i + 32 <= n:
            a, b, c, d = struct.unpack_from("<4Q", data, i)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M64
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        (k,) = struct.unpack_from("<Q", data, i)
        h ^= _round(0, k)
        h = (_rotl(h, 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        (k,) = struct.unpack_from("<I", data, i)
        h ^= (k * _P1) & _M64
        h = (_rotl(h, 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M64
        h = (_rotl(h, 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    h ^= h >> 32
    return h


class BloomFormatError(ValueError):
    """Bytes that are not a bloom filter lakelog can read (callers then keep the data)."""


# -- Thrift compact protocol: just enough for BloomFilterHeader ------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise BloomFormatError("truncated varint in bloom filter header")
        b = buf[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, pos
        shift += 7


def _skip(buf: bytes, pos: int, ttype: int, depth: int = 0) -> int:
    """Position after a value of compact type ``ttype``."""
    if depth > 16:
        raise BloomFormatError("bloom filter header nested too deep")
    if ttype in (1, 2):  # bool true/false: no payload in a field
        return pos
    if ttype == 3:  # byte
        return pos + 1
    if ttype in (4, 5, 6):  # i16, i32, i64 (zigzag varints)
        return _varint(buf, pos)[1]
    if ttype == 7:  # double
        return pos + 8
    if ttype == 8:  # binary
        size, pos = _varint(buf, pos)
        return pos + size
    if ttype in (9, 10):  # list, set
        head = buf[pos]
        pos += 1
        size, etype = head >> 4, head & 0x0F
        if size == 15:
            size, pos = _varint(buf, pos)
        for _ in range(size):
            pos = _skip(buf, pos, etype, depth + 1)
        return pos
    if ttype == 11:  # map
        size, pos = _varint(buf, pos)
        if size:
            kv = buf[pos]
            pos += 1
            for _ in range(size):
                pos = _skip(buf, pos, kv >> 4, depth + 1)
                pos = _skip(buf, pos, kv & 0x0F, depth + 1)
        return pos
    if ttype == 12:  # struct
        return _struct(buf, pos, depth + 1)[1]
    raise BloomFormatError(f"unknown Thrift compact type {ttype} in bloom filter header")


def _struct(buf: bytes, pos: int, depth: int = 0) -> tuple[dict[int, Any], int]:
    """Fields of a struct: i32 values decoded, structs as the set of their field ids."""
    fields: dict[int, Any] = {}
    last = 0
    while True:
        if pos >= len(buf):
            raise BloomFormatError("truncated bloom filter header")
        head = buf[pos]
        pos += 1
        if head == 0:
            return fields, pos
        delta, ttype = head >> 4, head & 0x0F
        if delta:
            fid = last + delta
        else:
            raw, pos = _varint(buf, pos)
            fid = (raw >> 1) ^ -(raw & 1)
        last = fid
        if ttype == 5:
            raw, pos = _varint(buf, pos)
            fields[fid] = (raw >> 1) ^ -(raw & 1)
        elif ttype == 12:
            inner, pos = _struct(buf, pos, depth + 1)
            fields[fid] = frozenset(inner)
        else:
            pos = _skip(buf, pos, ttype, depth)


@dataclass(frozen=True)
class BloomFilter:
    """One column chunk's split-block bloom filter."""

    blocks: npt.NDArray[np.uint32]
    """The bitset as ``(num_blocks, 8)`` little-endian 32-bit words."""

    def might_contain_hash(self, h: int) -> bool:
        """False when no value with XXH64 ``h`` is in the column chunk."""
        n = self.blocks.shape[0]
        block = self.blocks[((h >> 32) * n) >> 32]
        key = np.uint64(h & 0xFFFFFFFF)
        bits = ((key * SALT) & np.uint64(0xFFFFFFFF)) >> np.uint64(27)
        masks = (np.uint64(1) << bits).astype(np.uint32)
        return bool(np.all(block & masks))

    def might_contain_any(self, hashes: Iterable[int]) -> bool:
        return any(self.might_contain_hash(h) for h in hashes)


def parse_bloom_filter(data: bytes) -> tuple[BloomFilter | None, int]:
    """A filter from bytes starting at its header; ``(None, total)`` when ``data`` is
    too short, with the total bytes the header says the filter takes.

    Raises :class:`BloomFormatError` for an algorithm, hash or compression other than
    the split-block, XXH64, uncompressed filter of the spec.
    """
    fields, pos = _struct(data, 0)
    num_bytes = fields.get(1)
    if not isinstance(num_bytes, int) or num_bytes <= 0 or num_bytes % 32:
        raise BloomFormatError(
            f"expected a bitset of a positive multiple of 32 bytes, found {num_bytes}"
        )
    for fid, name in ((2, "algorithm"), (3, "hash"), (4, "compression")):
        if fields.get(fid, frozenset({1})) != frozenset({1}):
            raise BloomFormatError(f"unsupported bloom filter {name} {fields.get(fid)}")
    total = pos + num_bytes
    if len(data) < total:
        return None, total
    words = np.frombuffer(data, dtype="<u4", count=num_bytes // 4, offset=pos)
    return BloomFilter(words.reshape(-1, 8).astype(np.uint32)), total


# -- plain encoding of a literal, by the column's physical type --------------------------

_EPOCH = dt.date(1970, 1, 1)
_UNITS = {"milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}


def _timestamp_unit(column: pq.ColumnSchema) -> str | None:
    lt = column.logical_type
    if lt is not None and lt.type == "TIMESTAMP":
        text = lt.to_json()
        for word, unit in _UNITS.items():
            if word in text:
                return unit
    if column.converted_type == "TIMESTAMP_MILLIS":
        return "ms"
    if column.converted_type == "TIMESTAMP_MICROS":
        return "us"
    return None


def encode_value(value: pa.Scalar, column: pq.ColumnSchema) -> bytes | None:
    """The plain encoding of ``value`` in ``column`` of a file, as its bloom filter
    hashed it; None when lakelog cannot tell it for sure (the caller keeps the data)."""
    if not value.is_valid:
        return None
    t = value.type
    if pa.types.is_dictionary(t):
        value = value.value  # type: ignore[attr-defined]
        t = value.type
    physical = column.physical_type
    try:
        if physical == "BYTE_ARRAY":
            if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
                return str(value.as_py()).encode("utf-8")
            if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
                raw = value.as_py()
                return bytes(raw) if isinstance(raw, (bytes, bytearray, memoryview)) else None
            return None
        if physical == "FIXED_LEN_BYTE_ARRAY":
            width = column.length
            if pa.types.is_fixed_size_binary(t):
                raw = value.as_py()
                return bytes(raw) if isinstance(raw, bytes) and len(raw) == width else None
            if pa.types.is_decimal(t):
                d = value.as_py()
                if not isinstance(d, decimal.Decimal):
                    return None
                scale = t.scale  # type: ignore[attr-defined]
                unscaled = d.scaleb(scale)
                if unscaled != unscaled.to_integral_value():
                    return None
                return int(unscaled).to_bytes(width, "big", signed=True)
            return None
        if physical in ("INT32", "INT64"):
            wide = physical == "INT64"
            if pa.types.is_integer(t):
                fmt = (
                    ("<Q" if wide else "<I")
                    if pa.types.is_unsigned_integer(t)
                    else ("<q" if wide else "<i")
                )
                return struct.pack(fmt, int(value.as_py()))
            if pa.types.is_date32(t) and physical == "INT32":
                day = value.as_py()
                return struct.pack("<i", (day - _EPOCH).days) if isinstance(day, dt.date) else None
            if pa.types.is_timestamp(t) and physical == "INT64":
                unit = _timestamp_unit(column)
                if unit is None:
                    return None
                stored = value.cast(pa.timestamp(unit, tz=t.tz))  # type: ignore[attr-defined]
                return struct.pack("<q", int(stored.cast(pa.int64()).as_py()))
            return None
    except (pa.ArrowException, struct.error, OverflowError, ValueError, TypeError):
        return None
    return None
