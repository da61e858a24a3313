"""Plan-time skipping inside files: row groups by statistics and by bloom filters.

The log prunes whole files by their min/max. This module goes one level down,
before any data is read: for the files left, it reads each footer (in parallel,
``MAX_WORKERS`` at a time), keeps the row groups whose statistics may match the
filter (pyarrow's own row-group statistics test), and, where the filter has
equality or ``in`` terms on columns with bloom filters, reads those filters and
drops the row groups (and files) that certainly hold none of the values. The
result is one fragment per file that still may match, restricted to its kept
row groups and carrying the footer already read, so the scan reads no footer
twice.

Invariants:

* Conservative: a row group is dropped only when its statistics or a bloom filter
  prove no row can match. Anything not understood (a literal that does not
  encode, a filter in a format lakelog does not read, an unreadable bloom
  filter, an error of pyarrow's statistics test) keeps the row group.
* Footers are read only when the filter constrains a data column (a partition
  filter is settled by the log); bloom filters only for equality and ``in`` terms
  that can decide the filter (not under ``not``), only for columns that have
  one, and only in row groups the statistics kept.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from .. import threads
from ..filters import And, Compare, Const, In, Or, Predicate, Unknown, predicate_columns
from ..io.bloom import (
    HEADER_PROBE,
    BloomFilter,
    BloomFormatError,
    encode_value,
    parse_bloom_filter,
    xxh64,
)
from ..stats import filter_may_select_nan
from ..storage import Storage

__all__ = [
    "MAX_WORKERS",
    "SkipStats",
    "bloom_probes",
    "collect_skip_stats",
    "prune_fragments",
    "wants_footers",
]

log = logging.getLogger("lakelog")

MAX_WORKERS = 16
"""Footers (and their bloom filters) read at once."""
COALESCE_GAP = 8 * 1024
"""Bloom filters of one file closer than this are fetched in one read."""


@dataclass
class SkipStats:
    """What plan-time skipping did (filled in by :func:`prune_fragments`)."""

    files: int = 0
    files_skipped: int = 0
    row_groups: int = 0
    row_groups_by_stats: int = 0
    row_groups_by_bloom: int = 0
    bloom_filters_read: int = 0
    bloom_bytes_read: int = 0
    errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        """Add to the named counters (footers are read on several threads)."""
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)


_COLLECTOR: contextvars.ContextVar[SkipStats | None] = contextvars.ContextVar(
    "lakelog_skip_stats", default=None
)


@contextlib.contextmanager
def collect_skip_stats() -> Iterator[SkipStats]:
    """Count what the reads planned inside the ``with`` block skip (``lakelog inspect
    --filter`` and the benchmarks report it)::

        with collect_skip_stats() as stats:
            snapshot.to_arrow(filter="customer_id = 42")
        stats.row_groups_by_bloom
    """
    stats = SkipStats()
    token = _COLLECTOR.set(stats)
    try:
        yield stats
    finally:
        _COLLECTOR.reset(token)


def wants_footers(pred: Predicate | None, partition_by: Sequence[str]) -> bool:
    """Whether ``pred`` constrains a data column, so footers may let row groups go."""
    if pred is None or isinstance(pred, (Unknown, Const)):
        return False
    return bool(predicate_columns(pred) - set(partition_by))


def bloom_probes(pred: Predicate) -> dict[str, list[pa.Scalar]]:
    """Column -> literals of the equality and ``in`` terms that can decide ``pred``
    (under ``and``/``or`` only: a term under ``not`` cannot prove a row absent)."""
    out: dict[str, list[pa.Scalar]] = {}

    def walk(p: Predicate) -> None:
        if isinstance(p, Compare) and p.op == "=" and p.value.is_valid:
            out.setdefault(p.column, []).append(p.value)
        elif isinstance(p, In) and not p.negated:
            out.setdefault(p.column, []).extend(v for v in p.values if v.is_valid)
        elif isinstance(p, (And, Or)):
            for part in p.parts:
                walk(part)

    walk(pred)
    return out


def _may_match(pred: Predicate, absent: Callable[[str, Sequence[pa.Scalar]], bool]) -> bool:
    """False only if ``pred`` is certainly false for every row of a row group whose
    bloom filters say ``absent(column, values)``."""
    if isinstance(pred, Compare):
        if pred.op != "=" or not pred.value.is_valid:
            return True
        return not absent(pred.column, [pred.value])
    if isinstance(pred, In):
        if pred.negated:
            return True
        listed = [v for v in pred.values if v.is_valid]
        if pred.nulls == "match" and len(listed) < len(pred.values):
            return True  # a null row matches a null among the values
        return not absent(pred.column, listed)
    if isinstance(pred, And):
        return all(_may_match(p, absent) for p in pred.parts)
    if isinstance(pred, Or):
        return any(_may_match(p, absent) for p in pred.parts)
    if isinstance(pred, Const):
        return bool(pred.value)
    return True


def prune_fragments(
    storage: Storage,
    fragments: Sequence[ds.ParquetFileFragment],
    pred: Predicate,
    expr: pc.Expression,
    schema: pa.Schema,
    *,
    stats: SkipStats | None = None,
    max_workers: int = MAX_WORKERS,
) -> list[ds.ParquetFileFragment]:
    """The fragments that may hold a row ``pred`` selects, each restricted to the row
    groups that may (see the module docstring); order is kept.

    ``expr`` is ``pred`` as a pyarrow Expression; ``schema`` the table schema. A
    missing file raises the filesystem's ``FileNotFoundError`` as the scan would.
    """
    stats = stats if stats is not None else (_COLLECTOR.get() or SkipStats())
    stats.add(files=len(fragments))
    if not fragments:
        return []
    probes = bloom_probes(pred)

    def one(frag: ds.ParquetFileFragment) -> ds.ParquetFileFragment | None:
        return _prune_one(storage, frag, pred, expr, schema, probes, stats)

    workers = max(1, min(max_workers, len(fragments)))
    if workers == 1:
        kept: Iterable[ds.ParquetFileFragment | None] = [one(f) for f in fragments]
    else:
        with threads.pool("lakelog-footers", workers) as pool:
            kept = list(pool.map(one, fragments))
    out = [f for f in kept if f is not None]
    stats.add(files_skipped=len(fragments) - len(out))
    return out


def _prune_one(
    storage: Storage,
    frag: ds.ParquetFileFragment,
    pred: Predicate,
    expr: pc.Expression,
    schema: pa.Schema,
    probes: dict[str, list[pa.Scalar]],
    stats: SkipStats,
) -> ds.ParquetFileFragment | None:
    frag.ensure_complete_metadata()  # the footer: one read, kept for the scan
    md: pq.FileMetaData = frag.metadata
    total = md.num_row_groups
    stats.add(row_groups=total)
    try:
        if filter_may_select_nan(expr, schema):  # Arrow's test would drop NaN rows
            keep = list(range(total))
        else:
            by_stats = frag.subset(filter=expr, schema=schema)
            keep = [rg.id for rg in by_stats.row_groups]
    except (pa.ArrowException, ValueError, TypeError) as e:  # keep all: pyarrow decides
        stats.errors.append(f"{frag.path}: {e}")
        keep = list(range(total))
    stats.add(row_groups_by_stats=total - len(keep))
    if keep and probes:
        dropped = _bloom_prune(storage, frag.path, md, keep, pred, probes, stats)
        if dropped:
            keep = [rg for rg in keep if rg not in dropped]
            stats.add(row_groups_by_bloom=len(dropped))
    if not keep:
        return None
    if len(keep) == total:
        return frag
    return frag.subset(row_group_ids=keep)


def _bloom_prune(
    storage: Storage,
    path: str,
    md: pq.FileMetaData,
    row_groups: Sequence[int],
    pred: Predicate,
    probes: dict[str, list[pa.Scalar]],
    stats: SkipStats,
) -> set[int]:
    """Row groups among ``row_groups`` whose bloom filters prove ``pred`` false."""
    columns = {md.schema.column(i).path: i for i in range(md.num_columns)}
    # the hash of each literal as this file stores its column (None: cannot tell)
    hashes: dict[str, dict[int, int | None]] = {}
    for name, values in probes.items():
        i = columns.get(name)
        if i is not None:
            descr = md.schema.column(i)
            hashes[name] = {id(v): _hash(v, descr) for v in values}
    wanted: dict[tuple[int, str], tuple[int, int]] = {}
    for rg in row_groups:
        meta = md.row_group(rg)
        for name, hs in hashes.items():
            if not any(h is not None for h in hs.values()):
                continue
            col = meta.column(columns[name])
            offset, length = col.bloom_filter_offset, col.bloom_filter_length
            if offset is None or offset <= 0:
                continue
            wanted[(rg, name)] = (int(offset), int(length) if length and length > 0 else 0)
    if not wanted:
        return set()
    filters = _read_filters(storage, path, wanted, stats)

    dropped: set[int] = set()
    for rg in row_groups:

        def absent(column: str, values: Sequence[pa.Scalar], rg: int = rg) -> bool:
            bf = filters.get((rg, column))
            if bf is None:
                return False
            hs = [hashes[column].get(id(v)) for v in values]
            if any(h is None for h in hs):
                return False
            return not bf.might_contain_any(h for h in hs if h is not None)

        if not _may_match(pred, absent):
            dropped.add(rg)
    return dropped


def _hash(value: pa.Scalar, column: pq.ColumnSchema) -> int | None:
    encoded = encode_value(value, column)
    return None if encoded is None else xxh64(encoded)


def _read_filters(
    storage: Storage,
    path: str,
    wanted: dict[tuple[int, str], tuple[int, int]],
    stats: SkipStats,
) -> dict[tuple[int, str], BloomFilter]:
    """Read the bloom filters at ``wanted`` offsets of one file, nearby ones in one read."""
    items = sorted(wanted.items(), key=lambda kv: kv[1][0])
    out: dict[tuple[int, str], BloomFilter] = {}
    i = 0
    while i < len(items):
        start = items[i][1][0]
        end = start + (items[i][1][1] or HEADER_PROBE)
        j = i + 1
        while j < len(items) and items[j][1][0] - end <= COALESCE_GAP and items[j][1][1]:
            end = max(end, items[j][1][0] + items[j][1][1])
            j += 1
        data = _read_range(storage, path, start, end, stats)
        for key, (offset, length) in items[i:j]:
            chunk = data[offset - start : offset - start + (length or len(data))]
            try:
                bf, need = parse_bloom_filter(chunk)
                if bf is None:  # length unknown and the probe was short: read it whole
                    bf, _ = parse_bloom_filter(
                        _read_range(storage, path, offset, offset + need, stats)
                    )
            except BloomFormatError as e:
                stats.errors.append(f"{path}: bloom filter of {key[1]!r}: {e}")
                continue
            if bf is not None:
                out[key] = bf
                stats.add(bloom_filters_read=1)
        i = j
    return out


def _read_range(storage: Storage, path: str, start: int, end: int, stats: SkipStats) -> bytes:
    data: Any = storage.fs.cat_file(path, start=start, end=end)
    stats.add(bloom_bytes_read=len(data))
    return bytes(data)
