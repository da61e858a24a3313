"""The change feed in Spark: :func:`read_changes` (``spark.read.format("lakelog")`` with
``readChangeFeed``), and the parts of the streaming source.

The driver only plans: it reads the commits of the range and cuts the feed into parts
(:class:`~lakelog.scan.changes.ChangePart`: a file of a commit whose rows are inserts,
deletes or change rows); Spark tasks read the parts' rows with
:func:`lakelog.scan.changes.read_part`, so the DataFrame holds exactly the rows of
:meth:`lakelog.Table.changes` on the same versions.

Options of ``spark.read.format("lakelog").option("readChangeFeed", "true")``:
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
from ..scan.changes import ChangeFeed, ChangePart, VersionLike, feed_schema, open_feed, read_part
from ..storage import Storage
from .errors import carry
from .schema import to_arrow_type, to_spark_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
_PARTITION_BYTES = 128 << 20
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
    _open(Storage(uri, storage_options), options)
    return spark.read.format("lakelog").options(**options).load(uri)


# -- options --------------------------------------------------------------------------


def _opt(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name)
    return value if value is not None else options.get(name.lower())


def _bound(options: Mapping[str, str], which: str) -> VersionLike | None:
    raw_v = _opt(options, f"{which}Version")
    raw_t = _opt(options, f"{which}Timestamp")
    if raw_v is not None and raw_t is not None:
        raise InvalidArgumentError(
            f"expected {which}Version or {which}Timestamp, found both; give one of them"
        )
    if raw_v is not None:
        if not raw_v.strip().isdigit():
            raise InvalidArgumentError(
                f"expected option {which}Version to be a version >= 0, found {raw_v!r}"
            )
        return int(raw_v)
    if raw_t is not None:
        try:
            when = dt.datetime.fromisoformat(raw_t.strip().replace("Z", "+00:00"))
        except ValueError as e:
            raise InvalidArgumentError(
                f"expected option {which}Timestamp as ISO 8601, such as "
                f"'2026-01-02T03:04:05Z', found {raw_t!r}"
            ) from e
        return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)
    return None


def _columns(options: Mapping[str, str]) -> list[str] | None:
    raw = _opt(options, "columns")
    if raw is None:
        return None
    try:
        cols = json.loads(raw)
    except ValueError:
        cols = None
    if not isinstance(cols, list) or not all(isinstance(c, str) for c in cols):
        raise InvalidArgumentError(
            f"expected option columns to be a JSON list of column names, found {raw!r}; "
            f"for example .option('columns', json.dumps(['id', 'day']))"
        )
    return cols


def _open(storage: Storage, options: Mapping[str, str]) -> ChangeFeed:
    start = _bound(options, "starting")
    if start is None:
        raise InvalidArgumentError(
            "expected option startingVersion or startingTimestamp with readChangeFeed, found "
            "neither; for example .option('startingVersion', 0)"
        )
    return open_feed(
        storage,
        start,
        _bound(options, "ending"),
        columns=_columns(options),
        filter=_opt(options, "filter"),
    )


def _end_snapshot(storage: Storage, options: Mapping[str, str]) -> Snapshot:
    end = _bound(options, "ending")
    if isinstance(end, dt.datetime):
        end = version_as_of(storage, end)
    return load_snapshot(storage, end)


def options_schema(storage: Storage, options: Mapping[str, str]) -> pa.Schema:
    """The Arrow schema of a feed read with ``options``: the table's columns (or those of
    option ``columns``) at the range's end, then the change columns."""
    return feed_schema(_end_snapshot(storage, options).schema, _columns(options))


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

    def __init__(self, storage: Storage, options: dict[str, str]) -> None:
        self.options = options
        feed = _open(storage, options)  # a range it cannot give fails here, at load()
        self._feed: ChangeFeed | None = feed
        self.uri = storage.uri
        self.storage_options = storage.storage_options
        self.schema_bytes = feed.table_schema.serialize().to_pybytes()
        self.partition_by = feed.partition_by
        self.columns = feed.columns
        self.filter = _opt(options, "filter")

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_feed"}

    def partitions(self) -> Sequence[InputPartition]:
        feed = self.__dict__.get("_feed") or _open(
            Storage(self.uri, self.storage_options), self.options
        )
        raw = _opt(self.options, "maxPartitionBytes")
        limit = int(raw) if raw and raw.strip().isdigit() and int(raw) > 0 else _PARTITION_BYTES
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
