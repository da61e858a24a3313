"""What each data file carries for skipping inside it, read from its footer.

:func:`describe_files` reads the footers of a snapshot's files (in parallel, a
bounded number at once) and reports, per file, its row groups (count, rows,
bytes, ``sorting_columns``) and, per column, whether every row group has a page
index (column and offset index) and a bloom filter. ``lakelog inspect`` prints it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import msgspec
import pyarrow.parquet as pq

from .. import threads
from ..log.actions import DataFile
from ..storage import Storage

__all__ = ["ColumnLayout", "FileLayout", "describe_file", "describe_files"]

MAX_WORKERS = 16


class ColumnLayout(msgspec.Struct, frozen=True, kw_only=True):
    """One column of a file: in how many of its row groups each structure exists."""

    name: str
    physical_type: str
    row_groups: int
    column_index: int
    """Row groups whose chunk of this column has a column index (page min/max)."""
    offset_index: int
    """Row groups whose chunk has an offset index (page locations)."""
    bloom_filter: int
    """Row groups whose chunk has a bloom filter."""
    bloom_filter_bytes: int
    """Total bytes of those bloom filters (0 where the footer does not say)."""
    compressed_bytes: int

    @property
    def page_index(self) -> str:
        """``yes`` (every row group), ``no`` (none) or ``partial``."""
        return _all_some(min(self.column_index, self.offset_index), self.row_groups)

    @property
    def bloom(self) -> str:
        return _all_some(self.bloom_filter, self.row_groups)


class FileLayout(msgspec.Struct, frozen=True, kw_only=True):
    """One data file's row groups and columns."""

    path: str
    size_bytes: int
    num_rows: int
    row_groups: int
    row_group_rows: tuple[int, ...]
    row_group_bytes: tuple[int, ...]
    """Compressed bytes of each row group (its column chunks)."""
    sorting_columns: tuple[str, ...]
    """Columns every row group declares itself sorted by (empty: none or not all)."""
    columns: tuple[ColumnLayout, ...]
    created_by: str = ""

    @property
    def median_row_group_bytes(self) -> int:
        return int(statistics.median(self.row_group_bytes)) if self.row_group_bytes else 0


def _all_some(n: int, total: int) -> str:
    if total and n == total:
        return "yes"
    return "no" if n == 0 else "partial"


def describe_file(storage: Storage, f: DataFile) -> FileLayout:
    """The layout of one data file, from its footer (one read of the file's tail)."""
    with storage.open_input(f.path) as fh:
        md = pq.read_metadata(fh)
    names = [md.schema.column(i).path for i in range(md.num_columns)]
    counts = [[0, 0, 0, 0, 0] for _ in names]
    rg_rows, rg_bytes = [], []
    sorted_by: tuple[str, ...] | None = None
    for r in range(md.num_row_groups):
        rg = md.row_group(r)
        rg_rows.append(rg.num_rows)
        rg_bytes.append(sum(rg.column(i).total_compressed_size for i in range(rg.num_columns)))
        declared = tuple(
            names[s.column_index]
            for s in rg.sorting_columns
            if not s.descending and 0 <= s.column_index < len(names)
        )
        sorted_by = declared if sorted_by is None or sorted_by == declared else ()
        for i in range(rg.num_columns):
            col = rg.column(i)
            c = counts[i]
            c[0] += bool(col.has_column_index)
            c[1] += bool(col.has_offset_index)
            offset = col.bloom_filter_offset
            if offset is not None and offset > 0:
                c[2] += 1
                c[3] += max(0, int(col.bloom_filter_length or 0))
            c[4] += col.total_compressed_size
    columns = tuple(
        ColumnLayout(
            name=name,
            physical_type=md.schema.column(i).physical_type,
            row_groups=md.num_row_groups,
            column_index=c[0],
            offset_index=c[1],
            bloom_filter=c[2],
            bloom_filter_bytes=c[3],
            compressed_bytes=c[4],
        )
        for i, (name, c) in enumerate(zip(names, counts, strict=True))
    )
    return FileLayout(
        path=f.path,
        size_bytes=f.size_bytes,
        num_rows=md.num_rows,
        row_groups=md.num_row_groups,
        row_group_rows=tuple(rg_rows),
        row_group_bytes=tuple(rg_bytes),
        sorting_columns=sorted_by or (),
        columns=columns,
        created_by=md.created_by or "",
    )


def describe_files(
    storage: Storage, files: Sequence[DataFile], *, max_workers: int = MAX_WORKERS
) -> list[FileLayout]:
    """:func:`describe_file` of each file, in order, ``max_workers`` footers at a time."""
    if len(files) <= 1:
        return [describe_file(storage, f) for f in files]
    with threads.pool("lakelog-footers", min(max_workers, len(files))) as pool:
        return list(pool.map(lambda f: describe_file(storage, f), files))
