"""Choosing a run's clustering spec, and the other reads planning needs.

:func:`resolve_spec` reuses the spec of the clustered files (incremental runs with
the same columns and curve) or computes boundaries from a seeded sample of the
clustering columns (:func:`sample_rows`) and, for curves over several columns, a
tiling for the file count of the largest partition (:func:`reference_file_count`).
:func:`fresh_keys_reader` gives the planner the sorted keys of fresh files.
Every sample is seeded, so the same table gives the same spec.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ... import threads
from ...io.writer import WriteOptions
from ...log import mapping
from ...log.actions import DataFile
from ...storage import Storage
from ..sources import dictionary_columns, file_schema_of, read_group, scan_batches
from .planner import ClusterSettings, FreshKeys
from .spec import (
    CURVES,
    ROW_SAMPLE,
    ClusterSpec,
    boundaries_from_sample,
    encoded_row_bytes,
    find_spec,
    load_spec,
)
from .tiling import build_tiling

__all__ = [
    "SAMPLE_ROWS",
    "SPREAD_SAMPLE_ROWS",
    "fresh_keys_reader",
    "reference_file_count",
    "resolve_spec",
    "sample_rows",
    "spread_files",
]

SAMPLE_ROWS = 200_000

HEAD_FILES = 32
"""Files whose first rows estimate the encoded size of a clustered row."""

SPREAD_SAMPLE_ROWS = 5 * SAMPLE_ROWS
"""Rows read for the sample when any file is a fair sample of the others."""

MIN_SPREAD = 0.5
"""A file "spreads" when its min/max cover at least this share of a column's range."""


def sample_rows(
    storage: Storage, files: Sequence[DataFile], schema: pa.Schema, columns: Sequence[str]
) -> pa.Table:
    """About :data:`SAMPLE_ROWS` rows of ``columns``, drawn uniformly (seeded).

    Reads the columns of every file, unless every file spans most of every
    column's range (:func:`spread_files`): a subset of the files of a table
    clustered or sorted on the columns would be a biased sample, since each of
    its files holds one region of the key space.
    """
    rng = np.random.default_rng(0)
    if all(_ordered_as_numbers(schema.field(c).type) for c in columns):
        stored = [mapping.physical_name(schema.field(c)) for c in columns]
        files = spread_files(files, stored, rng) or files
    total = sum(f.num_rows for f in files)
    p = min(1.0, SAMPLE_ROWS / max(1, total))
    parts = []
    for batch in scan_batches(storage, files, schema, columns=list(columns)):
        if p >= 1.0:
            parts.append(batch)
        elif batch.num_rows:
            parts.append(batch.filter(pa.array(rng.random(batch.num_rows) < p)))
    sub = pa.schema([schema.field(c) for c in columns])
    return pa.Table.from_batches(parts, schema=sub)


def _ordered_as_numbers(t: pa.DataType) -> bool:
    """Whether file stats of this type compare as numbers (see :class:`FileStats`)."""
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_temporal(t)
        or pa.types.is_decimal(t)
    )


def spread_files(
    files: Sequence[DataFile], columns: Sequence[str], rng: np.random.Generator
) -> list[DataFile] | None:
    """A seeded random subset of ``files`` holding about :data:`SPREAD_SAMPLE_ROWS` rows,
    if each file's min/max covers at least :data:`MIN_SPREAD` of every column's
    range over all files (as ingest files do); otherwise None. The columns' stats
    must compare as numbers."""
    total = sum(f.num_rows for f in files)
    if total <= 2 * SPREAD_SAMPLE_ROWS:
        return None
    for c in columns:  # the log keys statistics by physical name (format.md)
        try:
            lo = np.array([float(f.stats.min[c]) for f in files])  # type: ignore[union-attr]
            hi = np.array([float(f.stats.max[c]) for f in files])  # type: ignore[union-attr]
        except (AttributeError, KeyError, TypeError, ValueError):
            return None  # no stats, or not numbers: nothing to judge the spread by
        width = float(hi.max() - lo.min())
        if not np.isfinite(width) or width <= 0 or ((hi - lo) < MIN_SPREAD * width).any():
            return None
    order = rng.permutation(len(files))
    rows = np.cumsum([files[i].num_rows for i in order])
    take = int(np.searchsorted(rows, SPREAD_SAMPLE_ROWS)) + 1
    return [files[i] for i in sorted(order[:take])]


def fresh_keys_reader(storage: Storage, schema: pa.Schema, spec: ClusterSpec) -> FreshKeys:
    """The planner's ``fresh_keys``: reads the clustering columns of files (``schema``:
    the file schema) and returns their rows' sorted keys."""

    def read(files: Sequence[DataFile]) -> npt.NDArray[np.uint64]:
        parts = [
            spec.keys(b)
            for b in scan_batches(storage, files, schema, columns=list(spec.columns))
            if b.num_rows
        ]
        keys = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
        keys.sort()
        return keys

    return read


def resolve_spec(
    storage: Storage,
    files: Sequence[DataFile],
    schema: pa.Schema,
    partition_by: Sequence[str],
    columns: Sequence[str],
    curve: str,
    *,
    incremental: bool,
    options: ClusterSettings,
) -> ClusterSpec:
    """The spec of the clustered files (``incremental`` runs with the same columns and
    curve), else boundaries from a seeded sample of the clustering columns and, for
    curves over several columns, a tiling for the file count of the largest partition
    (:mod:`lakelog.maintenance.clustering.tiling`)."""
    if incremental:
        holder = find_spec(files, columns, curve)
        if holder is not None:
            found = load_spec(storage, holder, schema)
            if found is not None:
                return found
    file_schema = file_schema_of(schema, partition_by)
    if files:
        sample = sample_rows(storage, files, file_schema, columns)
    else:
        sample = pa.table({c: pa.array([], schema.field(c).type) for c in columns})
    spec = boundaries_from_sample(sample, columns, curve)
    if curve not in CURVES or len(columns) < 2 or not sample.num_rows:
        return spec
    n = reference_file_count(storage, files, file_schema, spec, options)
    return spec.with_tiling(build_tiling(spec.ranks(sample), spec.bits, n, curve))


def reference_file_count(
    storage: Storage,
    files: Sequence[DataFile],
    file_schema: pa.Schema,
    spec: ClusterSpec,
    options: ClusterSettings,
) -> int:
    """Files the largest partition of ``files`` is cut into, by the encoded size of rows
    from up to :data:`HEAD_FILES` files (seeded), ordered by key as a run writes them:
    the tiling is made for this count."""
    rows: dict[tuple[tuple[str, str | None], ...], int] = {}
    for f in files:
        key = tuple(sorted(f.partition.items()))
        rows[key] = rows.get(key, 0) + f.num_rows
    largest = max(rows.values(), default=0)
    rng = np.random.default_rng(0)
    picked = [files[i] for i in sorted(rng.permutation(len(files))[:HEAD_FILES])]
    per_file = max(1, -(-ROW_SAMPLE // max(1, len(picked))))

    def head(f: DataFile) -> pa.RecordBatch | None:
        # the generator (and its file) is released when this returns
        return next(read_group(storage, file_schema, [f], batch_size=per_file), None)

    with threads.pool("lakelog-head", 8) as pool:
        batches = [b for b in pool.map(head, picked) if b is not None and b.num_rows]
    if batches:
        sample = pa.Table.from_batches(batches, schema=file_schema)
        write_options = WriteOptions(
            target_file_size=options.target_file_size,
            row_group_size=options.row_group_size,
            compression=options.compression,
            use_dictionary=dictionary_columns(batches[0]),
        )
        row_bytes = encoded_row_bytes(sample, spec, write_options)
    else:
        row_bytes = 0.0
    if row_bytes <= 0:  # too few rows to tell: the files' own size
        row_bytes = sum(f.size_bytes for f in files) / max(1, sum(f.num_rows for f in files))
    return max(1, math.ceil(largest * row_bytes / options.target_file_size))
