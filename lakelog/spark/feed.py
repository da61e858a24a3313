"""The change feed in Spark: :func:`read_changes` (``spark.read.format("lakelog")`` with
``readChangeFeed``), and the parts of the streaming source.

The driver only plans: it reads the commits of the range and cuts the feed into parts
(:class:`~lakelog.scan.changes.ChangePart`: a file of a commit whose rows are inserts,
deletes or change rows); Spark tasks read the parts' rows with
:func:`lakelog.scan.changes.read_part`, so the DataFrame holds exactly the rows of
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
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..errors import InvalidArgumentError
from ..filters import parse_filter, to_expression
from ..log.changes import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION
from ..log.snapshot import Snapshot, load_snapshot, version_as_of
from ..scan.changes import ChangeFeed, ChangePart, feed_schema, open_feed, read_part
from ..storage import Storage
from .errors import carry
from .schema import to_arrow_type, to_spark_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .options import ReadOptions

__all__ = [
    "CHANGE_COLUMNS",
    "FeedReader",
    "bins",
    "options_schema",
    "read_changes",
    "snapshot_parts",
    "spark_batches",
]

CHANGE_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
_OPEN_COST = 4 << 20


def read_changes(
    spark: SparkSession,
    uri: str,
    starting_version: int | dt.datetime,
    ending_version: int | dt.datetime | None = None,
    *,
    columns: Sequence[str] | None = None,
    filter: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> DataFrame:
    """The change feed of versions ``starting_version..ending_version`` as a DataFrame,
    read in Spark tasks: the rows of :meth:`lakelog.Table.changes` on the same versions,
    with ``_change_type``, ``_commit_version`` and ``_commit_timestamp``.

    Args:
        spark: the session.
        uri: the table's location.
        starting_version: the first version, or a datetime: the first version committed
            at or after it.
        ending_version: the last version, or a datetime: the last version committed at
            or before it; default None, the latest.
        columns: the table's columns to return, in this order; default None, all.
        filter: a lakelog filter string (``"day = '2026-11-02' and id > 10"``): files
            whose statistics cannot match are skipped, rows that do not match dropped.
        storage_options: fsspec options of the table's filesystem.

    Raises:
        ChangeFeedError: a commit in the range changed rows without change files.
        VersionExpiredError: ``starting_version`` is not after the oldest readable one.
    """
    from .datasource import register

    register(spark)
    options = {"readChangeFeed": "true"}
    for name, value in (("starting", starting_version), ("ending", ending_version)):
        if isinstance(value, dt.datetime):
            options[f"{name}Timestamp"] = value.isoformat()
        elif value is not None:
            options[f"{name}Version"] = str(value)
    if columns is not None:
        options["columns"] = json.dumps(list(columns))
    if filter is not None:
        options["filter"] = filter
    if storage_options:
        options["storageOptions"] = json.dumps(dict(storage_options))
    # the range is checked here, so its errors are raised by this call (Spark opens the
    # source's reader only when the DataFrame is first run)
    from .options import read_options

    _open(Storage(uri, storage_options), read_options({**options, "path": uri}))
    return spark.read.format("lakelog").options(**options).load(uri)


# -- options (checked by lakelog.spark.options.read_options) ---------------------------


def _open(storage: Storage, opts: ReadOptions) -> ChangeFeed:
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


def bins(parts: Sequence[ChangePart], limit: int) -> list[list[ChangePart]]:
    """Consecutive parts in bins of about ``limit`` bytes (each file counting 4 MiB more
    for opening it, as Spark bins its own file splits)."""
    out: list[list[ChangePart]] = []
    size = limit
    for p in parts:
        cost = p.file.size_bytes + _OPEN_COST
        if size + cost > limit and (not out or out[-1]):
            out.append([])
            size = 0
        out[-1].append(p)
        size += cost
    return out


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
        feed = _open(storage, options)  # a range it cannot give fails here, at load()
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
        feed = self.__dict__.get("_feed") or _open(
            Storage(self.uri, self.storage_options), self.options
        )
        limit = self.options.partition_bytes
        # no part: one empty partition, as Spark reads None otherwise
        return [InputPartition(b) for b in bins(list(feed.parts()), limit)] or [InputPartition([])]

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
