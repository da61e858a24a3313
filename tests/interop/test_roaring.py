"""The Delta view's roaring serializer: round trips of random position sets (positions
past 2**16 and 2**32, dense containers that become bitmaps, buckets left empty between
others, the empty set), the exact bytes of CRoaring's portable format (pyroaring, a dev
dependency), Z85, and DV files with their checks."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.errors import DeltaViewError
from lakelog.interop.delta.roaring import (
    ARRAY_MAX,
    MAGIC,
    deserialize,
    dv_file,
    read_dv_file,
    serialize,
    z85_decode,
    z85_encode,
)

_CONTAINER = 1 << 16
_BUCKET = 1 << 32


@st.composite
def position_sets(draw: st.DrawFn) -> np.ndarray:
    """Sets mixing sparse and dense 16-bit containers, in several 32-bit buckets with
    gaps (empty buckets) between them."""
    buckets = draw(st.lists(st.sampled_from([0, 1, 3, 7, (1 << 31) - 1]), unique=True, max_size=3))
    parts = [np.empty(0, np.int64)]
    for b in buckets:
        for _ in range(draw(st.integers(1, 3))):
            container = draw(st.sampled_from([0, 1, 2, 5, _CONTAINER - 1]))
            base = b * _BUCKET + container * _CONTAINER
            kind = draw(st.sampled_from(["sparse", "edge", "dense", "full"]))
            if kind == "sparse":
                low = draw(st.lists(st.integers(0, _CONTAINER - 1), min_size=1, max_size=60))
                parts.append(base + np.array(low, np.int64))
            elif kind == "edge":  # exactly at and just past the array/bitmap switch
                n = ARRAY_MAX + draw(st.integers(-1, 1))
                rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
                parts.append(base + rng.choice(_CONTAINER, n, replace=False).astype(np.int64))
            elif kind == "dense":
                step = draw(st.integers(2, 9))
                parts.append(base + np.arange(draw(st.integers(0, 7)), _CONTAINER, step))
            else:
                parts.append(base + np.arange(_CONTAINER, dtype=np.int64))
    return np.unique(np.concatenate(parts))


@settings(max_examples=80, deadline=None)
@given(position_sets())
def test_round_trip(positions: np.ndarray) -> None:
    data = serialize(positions)
    assert struct.unpack("<I", data[:4])[0] == MAGIC
    assert np.array_equal(deserialize(data), positions)
    assert serialize(np.random.default_rng(0).permutation(positions)) == data  # any order
    content, (offset,) = dv_file([data])
    assert np.array_equal(read_dv_file(content, offset=offset, size=len(data)), positions)


@settings(max_examples=30, deadline=None)
@given(position_sets())
def test_the_bytes_are_croarings_portable_format(positions: np.ndarray) -> None:
    """Byte for byte what CRoaring writes for the same 64-bit set (without run
    containers), and CRoaring reads ours back."""
    import pyroaring

    values = positions.astype(np.uint64).tolist()
    theirs = pyroaring.BitMap64(values, optimize=False).serialize()
    assert serialize(positions)[4:] == theirs
    ours = pyroaring.BitMap64.deserialize(serialize(positions)[4:])
    assert np.array_equal(ours.to_array(), positions)
    optimized = pyroaring.BitMap64(values).serialize()  # run containers: we read those too
    assert np.array_equal(deserialize(struct.pack("<I", MAGIC) + optimized), positions)


def test_containers_switch_from_arrays_to_bitmaps_past_4096() -> None:
    def container_bytes(n: int) -> int:
        data = serialize(np.arange(n))
        return len(data) - (4 + 8 + 4 + 4 + 4 + 4 + 4)  # magic, buckets, key, header

    assert container_bytes(ARRAY_MAX) == 2 * ARRAY_MAX
    assert container_bytes(ARRAY_MAX + 1) == 8192
    assert serialize([]) == struct.pack("<IQ", MAGIC, 0)
    assert deserialize(serialize([])).tolist() == []


def test_known_bytes() -> None:
    """The layout spelled out: magic, one bucket (key 0), cookie 12346, one container
    (key 0, cardinality - 1 = 2), its offset 16, then the three values."""
    expected = (
        struct.pack("<IQI", MAGIC, 1, 0)
        + struct.pack("<II", 12346, 1)
        + struct.pack("<HH", 0, 2)
        + struct.pack("<I", 16)
        + struct.pack("<3H", 3, 4, 7)
    )
    assert serialize([7, 3, 4]) == expected


def test_z85() -> None:
    assert z85_encode(bytes.fromhex("864FD26FB559F75B")) == "HelloWorld"  # the spec's vector
    data = bytes(range(256))
    assert z85_decode(z85_encode(data)) == data
    with pytest.raises(ValueError):
        z85_encode(b"abc")
    with pytest.raises(DeltaViewError):
        z85_decode("abcd")
    with pytest.raises(DeltaViewError):
        z85_decode("abc~~")  # '~' is not in Z85's alphabet


def test_damaged_bytes_are_refused() -> None:
    data = serialize([1, 70_000, 5 * _BUCKET])
    with pytest.raises(DeltaViewError, match="magic"):
        deserialize(b"\0" + data[1:])
    with pytest.raises(DeltaViewError, match="too few"):
        deserialize(data[:-1])
    content, (offset,) = dv_file([data])
    with pytest.raises(DeltaViewError, match="CRC"):
        read_dv_file(content[:-1] + bytes([content[-1] ^ 1]), offset=offset, size=len(data))
    with pytest.raises(DeltaViewError, match="descriptor says"):
        read_dv_file(content, offset=offset, size=len(data) + 1)
    with pytest.raises(DeltaViewError, match="version"):
        read_dv_file(b"\x02" + content[1:], offset=offset, size=len(data))
    two, offsets = dv_file([data, serialize([9])])  # several vectors in one file
    assert read_dv_file(two, offset=offsets[1], size=len(serialize([9]))).tolist() == [9]
    assert struct.unpack(">I", two[offsets[1] - 4 : offsets[1]])[0] == zlib.crc32(data)
