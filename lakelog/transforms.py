"""Partition transforms: Iceberg's ``identity``, ``year``, ``month``, ``day``, ``hour``,
``bucket`` and ``truncate`` over Arrow arrays, the specs they make up, and what a filter
on a source column says about a file's transform values (``docs/format.md``, "Partition
transforms and evolution").

Invariants:

* every transform is a pure function of one column's value; null gives null, and a
  non-null value gives a non-null one;
* the values are Iceberg's (``bucket`` is its Murmur3 x86 32-bit hash of the bytes of
  its appendix B, seed 0), so a file's bucket is the one Iceberg would give its rows;
* every transform but ``bucket`` is monotonic (non-decreasing) in its source value,
  which is what range pruning relies on;
* :func:`may_match` is conservative: it says False only when no row of a file with
  the recorded values can satisfy the filter.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import InvalidArgumentError, SchemaMismatchError
from .filters import And, Compare, Const, In, IsNull, Not, Or, Predicate
from .partitioning import check_partition_columns, partition_string, typed_partition_value

__all__ = [
    "SPEC_TAG",
    "TAG_PREFIX",
    "PartitionField",
    "PartitionSpec",
    "bucket_hash",
    "may_match",
    "murmur3_32",
    "parse_field",
    "parse_fields",
    "partition_values",
    "spec_key",
    "partition_layout",
    "uses_transforms",
]

TAG_PREFIX = "partition."
"""Tags of a data file holding its transform values: ``partition.<field name>``."""
SPEC_TAG = "partition.spec"
"""Tag of a data file holding the id of the spec it was written in."""

TIME_KINDS = ("year", "month", "day", "hour")
KINDS = ("identity", *TIME_KINDS, "bucket", "truncate")
_EPOCH = dt.date(1970, 1, 1)
_EPOCH_TS = dt.datetime(1970, 1, 1)
_MASK32 = 0xFFFFFFFF
_USAGE = (
    "a column name, identity(col), year(col), month(col), day(col), hour(col), "
    "bucket(N, col) or truncate(W, col)"
)


# -- murmur3 ---------------------------------------------------------------------------


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK32


def _fmix(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK32
    h ^= h >> 16
    return h


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """The 32-bit Murmur3 hash, x86 variant, of ``data``, as a signed int (Java's).

    >>> murmur3_32(b"iceberg")
    1210000089
    """
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & _MASK32
    n = len(data)
    full = n - n % 4
    for i in range(0, full, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (_rotl((k * c1) & _MASK32, 15) * c2) & _MASK32
        h = (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & _MASK32
    tail = data[full:]
    if tail:
        k = int.from_bytes(tail, "little")
        k = (_rotl((k * c1) & _MASK32, 15) * c2) & _MASK32
        h ^= k
    h = _fmix(h ^ n)
    return h - (1 << 32) if h & 0x80000000 else h


def _murmur3_longs(values: np.ndarray) -> np.ndarray:
    """Murmur3 of each int64 as its 8 little-endian bytes, vectorized (unsigned)."""
    v = values.astype(np.int64).view(np.uint64)
    m = np.uint64(_MASK32)
    c1, c2 = np.uint64(0xCC9E2D51), np.uint64(0x1B873593)

    def rotl(x: np.ndarray, r: int) -> np.ndarray:
        return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & m

    h = np.zeros(len(v), dtype=np.uint64)
    for k in (v & m, v >> np.uint64(32)):
        k = (rotl((k * c1) & m, 15) * c2) & m
        h = (rotl(h ^ k, 13) * np.uint64(5) + np.uint64(0xE6546B64)) & m
    h ^= np.uint64(8)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & m
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & m
    h ^= h >> np.uint64(16)
    return h


def _decimal_bytes(value: Decimal, scale: int) -> bytes:
    n = int(value.scaleb(scale))
    size = (n if n >= 0 else ~n).bit_length() // 8 + 1
    return n.to_bytes(size, "big", signed=True)


def _micros(values: pa.Array) -> pa.Array:
    """Microseconds since the epoch of timestamps (finer units floored), as int64."""
    unit = values.type.unit
    raw = values.cast(pa.timestamp(unit)).cast(pa.int64()) if values.type.tz else values
    ints = np.asarray(raw.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
    if unit == "ns":
        ints = np.floor_divide(ints, 1000)
    elif unit == "ms":
        ints = ints * 1000
    elif unit == "s":
        ints = ints * 1_000_000
    return pa.array(ints, pa.int64(), mask=values.is_null().to_numpy(zero_copy_only=False))


def bucket_hash(values: pa.Array) -> pa.Array:
    """Iceberg's 32-bit hash (signed int32) of each value; null stays null."""
    t = values.type
    nulls = values.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_integer(t) or pa.types.is_date32(t) or pa.types.is_timestamp(t):
        if pa.types.is_timestamp(t):
            longs = _micros(values)
        elif pa.types.is_date32(t):
            longs = values.cast(pa.int32()).cast(pa.int64())
        else:
            longs = values.cast(pa.int64())
        raw = np.asarray(longs.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        h = _murmur3_longs(raw).astype(np.uint32).view(np.int32)
        return pa.array(h, pa.int32(), mask=nulls)
    enc = pc.dictionary_encode(values)
    uniq = enc.dictionary.to_pylist()
    if pa.types.is_decimal(t):
        hashed = [murmur3_32(_decimal_bytes(u, t.scale)) for u in uniq]
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        hashed = [murmur3_32(u.encode()) for u in uniq]
    else:
        hashed = [murmur3_32(bytes(u)) for u in uniq]
    return pa.array(hashed, pa.int32()).take(enc.indices)


# -- fields ----------------------------------------------------------------------------


def _time_type(t: pa.DataType) -> bool:
    return bool(pa.types.is_date32(t) or pa.types.is_timestamp(t))


def _bucket_type(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or _time_type(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_decimal(t)
    )


def _identity_type(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date32(t)
        or pa.types.is_boolean(t)
    )


@dataclass(frozen=True)
class PartitionField:
    """One field of a partition spec: ``kind`` of ``column`` (with ``param``, the number
    of buckets or the truncation width)."""

    kind: str
    column: str
    param: int = 0

    @property
    def text(self) -> str:
        """The canonical spelling, e.g. ``day(ts)`` or ``bucket(16, id)``."""
        if self.kind in ("bucket", "truncate"):
            return f"{self.kind}({self.param}, {self.column})"
        return f"{self.kind}({self.column})"

    @property
    def name(self) -> str:
        """The field's name: the column for identity, else ``col_day``, ``id_bucket_16``."""
        if self.kind == "identity":
            return self.column
        if self.kind == "bucket":
            return f"{self.column}_bucket_{self.param}"
        if self.kind == "truncate":
            return f"{self.column}_trunc_{self.param}"
        return f"{self.column}_{self.kind}"

    def check(self, schema: pa.Schema) -> None:
        """Refuse a field whose column is missing or of a type it does not take."""
        if self.column not in schema.names:
            raise SchemaMismatchError(
                f"expected partition field {self.text!r} over a column of the table, found "
                f"no column {self.column!r} among {schema.names}; name an existing column."
            )
        t = schema.field(self.column).type
        ok, wants = {
            "identity": (_identity_type(t), "an integer, string, date or boolean"),
            "year": (_time_type(t), "a date or timestamp"),
            "month": (_time_type(t), "a date or timestamp"),
            "day": (_time_type(t), "a date or timestamp"),
            "hour": (pa.types.is_timestamp(t), "a timestamp"),
            "bucket": (_bucket_type(t), "an integer, date, timestamp, string, binary or decimal"),
            "truncate": (
                pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t),
                "an integer or string",
            ),
        }[self.kind]
        if not ok:
            raise InvalidArgumentError(
                f"expected {wants} column for partition field {self.text!r}, found column "
                f"{self.column!r} of type {t}; choose another transform or column. Nothing "
                f"was written."
            )

    # -- values ------------------------------------------------------------------------
    def apply(self, values: pa.Array) -> pa.Array:
        """The transform's values of ``values`` (ints for time transforms and buckets,
        the source type for identity and truncate)."""
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        kind, t = self.kind, values.type
        if kind == "identity":
            return values
        if kind == "bucket":
            h = np.asarray(bucket_hash(values).fill_null(0).to_numpy(False), np.int64)
            out = (h & 0x7FFFFFFF) % self.param
            return pa.array(out, pa.int32(), mask=values.is_null().to_numpy(False))
        if kind == "truncate":
            if pa.types.is_integer(t):
                v = np.asarray(values.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
                out = v - np.mod(v, self.param)
                return pa.array(out, pa.int64(), mask=values.is_null().to_numpy(False)).cast(t)
            return pc.utf8_slice_codeunits(values, 0, self.param)
        nulls = values.is_null().to_numpy(zero_copy_only=False)
        if pa.types.is_date32(t):
            days = np.asarray(values.cast(pa.int32()).fill_null(0).to_numpy(False), np.int64)
            micros = days * 86_400_000_000
        else:
            micros = np.asarray(_micros(values).fill_null(0).to_numpy(False), np.int64)
            days = np.floor_divide(micros, 86_400_000_000)
        if kind == "hour":
            out = np.floor_divide(micros, 3_600_000_000)
        elif kind == "day":
            out = days
        else:
            unit = "M" if kind == "month" else "Y"
            out = days.astype("datetime64[D]").astype(f"datetime64[{unit}]").astype(np.int64)
        return pa.array(out, pa.int64() if kind == "hour" else pa.int32(), mask=nulls)

    def apply_value(self, value: Any, type_: pa.DataType) -> Any:
        """The transform of one Python value of a column of ``type_``."""
        return self.apply(pa.array([value], type_))[0].as_py()

    def to_string(self, value: Any) -> str | None:
        """The string form recorded in a file's tags (format.md: ``YYYY-MM-DD`` for a
        day, ``YYYY-MM-DD-HH`` for an hour, decimal for a bucket)."""
        if value is None:
            return None
        kind = self.kind
        if kind == "day":
            return (_EPOCH + dt.timedelta(days=int(value))).isoformat()
        if kind == "hour":
            return (_EPOCH_TS + dt.timedelta(hours=int(value))).strftime("%Y-%m-%d-%H")
        if kind == "month":
            y, m = divmod(int(value), 12)
            return f"{1970 + y:04d}-{m + 1:02d}"
        if kind == "year":
            return f"{1970 + int(value):04d}"
        return partition_string(value)

    def from_string(self, text: str, type_: pa.DataType) -> Any:
        """Inverse of :meth:`to_string`: the value to compare with :meth:`apply_value`."""
        kind = self.kind
        if kind == "day":
            return (dt.date.fromisoformat(text) - _EPOCH).days
        if kind == "hour":
            at = dt.datetime.strptime(text, "%Y-%m-%d-%H")
            return int((at - _EPOCH_TS).total_seconds()) // 3600
        if kind == "month":
            y, m = text.split("-")
            return (int(y) - 1970) * 12 + int(m) - 1
        if kind in ("year", "bucket"):
            return int(text) - (1970 if kind == "year" else 0)
        return typed_partition_value(text, type_)


_CALL = re.compile(r"^\s*([A-Za-z_]+)\s*\(\s*(.*?)\s*\)\s*$", re.DOTALL)


def parse_field(text: str) -> PartitionField:
    """A field from its string: ``"day(ts)"``, ``"bucket(16, id)"``, ``"truncate(4,
    name)"``, or a bare column name (identity).

    >>> parse_field("bucket(16, id)").name
    'id_bucket_16'
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgumentError(f"expected a partition field as {_USAGE}, found {text!r}")
    m = _CALL.match(text)
    if m is None:
        if "(" in text or ")" in text or "," in text:
            raise InvalidArgumentError(f"expected a partition field as {_USAGE}, found {text!r}")
        return PartitionField("identity", text.strip())
    kind, args = m.group(1).lower(), [a.strip() for a in m.group(2).split(",")]
    kind = {"years": "year", "months": "month", "days": "day", "hours": "hour"}.get(kind, kind)
    if kind not in KINDS:
        raise InvalidArgumentError(
            f"expected a partition transform among {list(KINDS)}, found {m.group(1)!r} in "
            f"{text!r}; write {_USAGE}."
        )
    if kind in ("bucket", "truncate"):
        what = "number of buckets" if kind == "bucket" else "width"
        if len(args) != 2 or not args[1]:
            raise InvalidArgumentError(
                f"expected {kind}(N, col) with a {what} and a column, found {text!r}"
            )
        try:
            n = int(args[0])
        except ValueError:
            n = 0
        if n < 1 or n > 2**31 - 1:
            raise InvalidArgumentError(
                f"expected a {what} of {kind} between 1 and 2147483647, found {args[0]!r} "
                f"in {text!r}"
            )
        return PartitionField(kind, args[1], n)
    if len(args) != 1 or not args[0]:
        raise InvalidArgumentError(f"expected {kind}(col) with one column, found {text!r}")
    return PartitionField(kind, args[0])


def parse_fields(
    partition_by: Sequence[str] | str, schema: pa.Schema
) -> tuple[PartitionField, ...]:
    """Fields of a ``partition_by`` list, checked against ``schema``: distinct names,
    existing columns of the types each transform takes."""
    if isinstance(partition_by, str):
        partition_by = (partition_by,)
    fields = tuple(parse_field(p) for p in partition_by)
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise InvalidArgumentError(
            f"expected distinct partition fields, found {[f.text for f in fields]}"
        )
    for f in fields:
        f.check(schema)
    return fields


def uses_transforms(partition_by: Sequence[str] | str) -> bool:
    """Whether a ``partition_by`` list has a field other than a bare or identity column
    (then the table uses partition specs, format version 8)."""
    if isinstance(partition_by, str):
        partition_by = (partition_by,)
    return any(parse_field(p).kind != "identity" or "(" in p for p in partition_by)


@dataclass(frozen=True)
class PartitionSpec:
    """A table's spec: its id (position in ``Metadata.partition_specs``) and fields."""

    spec_id: int
    fields: tuple[PartitionField, ...]

    @classmethod
    def of(cls, spec_id: int, texts: Sequence[str]) -> PartitionSpec:
        return cls(spec_id, tuple(parse_field(t) for t in texts))

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(f.text for f in self.fields)

    def keys(self, batch: pa.RecordBatch | pa.Table) -> list[pa.Array]:
        """The fields' values for every row of ``batch``."""
        return [f.apply(batch.column(f.column)) for f in self.fields]

    def tags(self, row: Sequence[Any]) -> dict[str, str]:
        """The tags of a file whose rows have the field values ``row``."""
        out = {SPEC_TAG: str(self.spec_id)}
        for f, v in zip(self.fields, row, strict=True):
            text = f.to_string(v)
            if text is not None:
                out[TAG_PREFIX + f.name] = text
        return out


def partition_values(tags: Mapping[str, str]) -> dict[str, str]:
    """A file's recorded transform values by field name, with its spec id as ``spec``
    (empty: none recorded), e.g. ``{"spec": "1", "ts_day": "2024-01-02"}``."""
    return {k[len(TAG_PREFIX) :]: v for k, v in tags.items() if k.startswith(TAG_PREFIX)}


def spec_key(tags: Mapping[str, str]) -> str | None:
    """The recorded spec and values of a file as one string (None: none recorded):
    files with the same key hold rows of one partition of one spec."""
    got = sorted((k, v) for k, v in tags.items() if k.startswith(TAG_PREFIX))
    return ",".join(f"{k[len(TAG_PREFIX) :]}={v}" for k, v in got) if got else None


# -- pruning ---------------------------------------------------------------------------


def _file_values(
    tags: Mapping[str, str], specs: Sequence[PartitionSpec]
) -> dict[str, list[tuple[PartitionField, str | None]]] | None:
    """The recorded field values of a file by source column, None if it has none."""
    sid = tags.get(SPEC_TAG)
    if sid is None or not sid.isdigit() or int(sid) >= len(specs):
        return None
    out: dict[str, list[tuple[PartitionField, str | None]]] = {}
    for f in specs[int(sid)].fields:
        out.setdefault(f.column, []).append((f, tags.get(TAG_PREFIX + f.name)))
    return out


@functools.lru_cache(maxsize=4096)
def _transformed(f: PartitionField, value: Any, type_: pa.DataType) -> Any:
    """A filter literal's transform, computed once for all the files it is compared with."""
    return f.apply_value(value, type_)


def _compare_may(f: PartitionField, recorded: Any, op: str, value: Any, type_: pa.DataType) -> bool:
    if value is None:
        return False
    try:
        target = _transformed(f, value, type_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError):
        return True
    except TypeError:  # an unhashable literal: transform it here
        target = f.apply_value(value, type_)
    if f.kind == "bucket":
        return op != "=" or recorded == target
    if op == "!=":
        return f.kind != "identity" or bool(recorded != target)
    if op == "=":
        return bool(recorded == target)
    if op in ("<", "<="):
        return bool(recorded <= target)
    if op in (">", ">="):
        return bool(recorded >= target)
    return True


_FLIP = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def may_match(
    pred: Predicate,
    tags: Mapping[str, str],
    specs: Sequence[PartitionSpec],
    schema: pa.Schema,
) -> bool:
    """Whether a file with ``tags`` may hold a row ``pred`` selects, judging by its
    recorded transform values alone (True when it has none)."""
    recorded = _file_values(tags, specs)
    if recorded is None:
        return True
    parsed: dict[tuple[str, str], Any] = {}

    def value_of(f: PartitionField, text: str) -> Any:
        key = (f.name, text)
        if key not in parsed:
            parsed[key] = f.from_string(text, schema.field(f.column).type)
        return parsed[key]

    def leaf(column: str, test: Any) -> bool:
        for f, text in recorded.get(column, ()):
            if not test(f, None if text is None else value_of(f, text)):
                return False
        return True

    def walk(p: Predicate, positive: bool) -> bool:
        if isinstance(p, (And, Or)):
            every = isinstance(p, And) == positive  # NOT(a OR b) is NOT a AND NOT b
            got = (walk(q, positive) for q in p.parts)
            return all(got) if every else any(got)
        if isinstance(p, Not):
            return walk(p.part, not positive)
        if isinstance(p, Const):
            return p.value == positive
        if isinstance(p, IsNull) and p.column in recorded and not p.nan_is_null:
            wants_null = positive != p.negated
            return leaf(p.column, lambda f, v: (v is None) == wants_null)
        if isinstance(p, Compare) and p.column in recorded and p.column in schema.names:
            op = p.op if positive else _FLIP[p.op]
            type_ = schema.field(p.column).type
            raw = p.value.as_py() if p.value.is_valid else None
            return leaf(p.column, lambda f, v: v is not None and _compare_may(f, v, op, raw, type_))
        if isinstance(p, In) and p.column in recorded and p.column in schema.names:
            if positive == p.negated:  # a NOT IN: any file may hold other values
                return True
            type_ = schema.field(p.column).type
            raws = [s.as_py() for s in p.values if s.is_valid]
            null_rows = p.nulls == "match" and len(raws) < len(p.values)
            return leaf(
                p.column,
                lambda f, v: (
                    null_rows if v is None else any(_compare_may(f, v, "=", r, type_) for r in raws)
                ),
            )
        return True

    return walk(pred, True)


def partition_layout(
    schema: pa.Schema, partition_by: Sequence[str] | str
) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """What a new table's ``metadata`` records for ``partition_by``: identity partition
    columns (column names only: the layout of every format version), or no columns and
    one spec of transforms (any other field: format version 8)."""
    if isinstance(partition_by, str):
        partition_by = (partition_by,)
    if not uses_transforms(partition_by):
        return check_partition_columns(schema, partition_by), ()
    fields = parse_fields(partition_by, schema)
    return (), (tuple(f.text for f in fields),)
