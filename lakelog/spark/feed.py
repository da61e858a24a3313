"""The change feed in Spark: the reader of ``spark.read.format("lakelog")`` with
``readChangeFeed`` (behind :func:`lakelog.spark.read_changes`), and the parts of the
streaming source.

The driver only plans: it reads the commits of the range and cuts the feed into parts
(:class:`~lakelog.scan.feed.ChangePart`: a file of a commit whose rows are inserts,
deletes or change rows); Spark tasks read the parts' rows with
:func:`lakelog.scan.feed.read_part`, so the DataFrame holds exactly the rows of
:meth:`lakelog.Table.changes` on the same versions.

Options of ``spark.read.format("lakelog").option("readChangeFeed", "true")``
(:data:`lakelog.spark.options.READ`):
``startingVersion`` or ``startingTimestamp`` (ISO 8601: the first version committed at or
after it), ``endingVersion`` or ``endingTimestamp`` (the last at or before it; default
the latest), ``columns`` (a JSON list of the table's columns), ``filter`` (a lakelog
filter string: skips files and keeps matching rows), ``maxPartitionBytes``,
``storageOptions``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..errors import InvalidArgumentError
from ..filters import parse_filter, to_expression
from ..log.feed import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION
from ..log.snapshot import Snapshot, load_snapshot, version_as_of
from ..scan.feed import ChangeFeed, ChangePart, feed_schema, open_feed, read_part
from ..storage import Storage
from .errors import carry
from .schema import to_arrow_type, to_spark_schema

if TYPE_CHECKING:
    from .options import ReadOptions

__all__ = [
    "CHANGE_COLUMNS",
    "FeedReader",
    "bins",
    "open_range",
    "part_bytes",
    "options_schema",
    "snapshot_parts",
    "spark_batches",
]

CHANGE_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
_OPEN_COST = 4 << 20

T = TypeVar("T")


# -- options (checked by lakelog.spark.options.read_options) ---------------------------


def open_range(storage: Storage, opts: ReadOptions) -> ChangeFeed:
    """The change feed of the range ``opts`` names (options ``startingVersion`` ...)."""
    if opts.starting is None:
        raise InvalidArgumentError(
            "expected option startingVersion or startingTimestamp with readChangeFeed, found "
            "neither; for example .option('startingVersion', 0)"
        )
    return open_feed(
        storage,
        opts.starting,
        opts.ending,
        columns=None if opts.columns is None else list(opts.columns),
        filter=opts.filter,
    )


def options_schema(storage: Storage, opts: ReadOptions) -> pa.Schema:
    """The Arrow schema of a feed read with ``opts``: the table's columns (or those of
    option ``columns``) at the range's end, then the change columns."""
    end = opts.ending
    if isinstance(end, dt.datetime):
        end = version_as_of(storage, end)
    columns = None if opts.columns is None else list(opts.columns)
    return feed_schema(load_snapshot(storage, end).schema, columns)


# -- reading ----------------------------------------------------------------------------


def bins(items: Sequence[T], limit: int, size: Callable[[T], int]) -> list[list[T]]:
    """Consecutive ``items`` (files, or parts of files: ``size`` gives each one's bytes) in
    bins of about ``limit`` bytes, each file counting 4 MiB more for opening it, as Spark
    bins its own file splits. Shared by every reader of the ``lakelog`` format."""
    out: list[list[T]] = []
    used = limit
    for item in items:
        cost = size(item) + _OPEN_COST
        if used + cost > limit and (not out or out[-1]):
            out.append([])
            used = 0
        out[-1].append(item)
        used += cost
    return out


def part_bytes(part: ChangePart) -> int:
    """A part's bytes for :func:`bins`: its file's."""
    return part.file.size_bytes


def spark_batches(
    batches: Iterator[pa.RecordBatch], names: Sequence[str], types: Sequence[pa.DataType]
) -> Iterator[pa.RecordBatch]:
    """``batches`` with exactly the columns ``names``, in the Arrow types Spark reads."""
    for batch in batches:
        arrays = [batch.column(n) for n in names]
        arrays = [a.cast(t) if a.type != t else a for a, t in zip(arrays, types, strict=True)]
        yield pa.RecordBatch.from_arrays(arrays, names=list(names))


def snapshot_parts(snapshot: Snapshot, schema: pa.Schema) -> list[ChangePart]:
    """The files of a stream's starting snapshot as parts of inserts at its version,
    oldest first, then by path: the same order whatever manifest resolves the version."""
    files = sorted(snapshot.files(), key=lambda f: (f.modification_ms, f.path))
    v, ts = snapshot.version, snapshot.timestamp_ms
    return [ChangePart(v, ts, "insert", f, schema) for f in files]


@carry
class FeedReader(DataSourceReader):  # type: ignore[misc]
    """The batch reader of ``readChangeFeed``: the driver checks the range and plans its
    parts once; each task reads a bin of parts."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        storage = options.storage()
        feed = open_range(storage, options)  # a range it cannot give fails here, at load()
        self._feed: ChangeFeed | None = feed
        self.uri = storage.uri
        self.storage_options = storage.storage_options
        self.schema_bytes = feed.table_schema.serialize().to_pybytes()
        self.partition_by = feed.partition_by
        self.columns = feed.columns
        self.filter = options.filter

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_feed"}

    def partitions(self) -> Sequence[InputPartition]:
        feed = self.__dict__.get("_feed") or open_range(
            Storage(self.uri, self.storage_options), self.options
        )
        limit = self.options.partition_bytes
        # no part: one empty partition, as Spark reads None otherwise
        return [InputPartition(b) for b in bins(list(feed.parts()), limit, part_bytes)] or [
            InputPartition([])
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        storage = Storage(self.uri, self.storage_options)
        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_bytes))
        expr: pc.Expression | None = None
        pred = parse_filter(self.filter, schema)
        if pred is not None:
            expr = to_expression(pred)
        out = to_spark_schema(feed_schema(schema, self.columns))
        names = [f.name for f in out.fields]
        types = [to_arrow_type(f.dataType) for f in out.fields]
        for part in partition.value:
            rows = read_part(
                storage, part, schema, self.partition_by, columns=self.columns, filter=expr
            )
            yield from spark_batches(rows, names, types)
