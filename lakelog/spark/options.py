"""The options of every ``lakelog`` Spark entry point, by name: one registry each.

* ``spark.read.format("lakelog")``: :data:`READ`, resolved by :func:`read_options`;
* ``df.write.format("lakelog")``: :data:`WRITE`, :func:`write_options`;
* ``spark.readStream.format("lakelog")``: :data:`STREAM_READ`, :func:`stream_read_options`;
* ``df.writeStream.format("lakelog")``: :data:`STREAM_WRITE`, :func:`stream_write_options`.

Each option has a name (Delta's spelling first, where Delta has one), its other accepted
spellings, a parser, a default and a line of documentation (``docs/spark.md`` shows the
tables :func:`markdown_table` makes, checked by a test). Names are case-insensitive, as
Spark hands them over (lowercased). A name an entry point does not know is refused with
:class:`~lakelog.errors.UnknownOptionError` (its closest valid name, and the list of them)
before anything is read or written: a typo such as ``replaceWher`` must never turn a
replace of one day into an overwrite of the table. Besides lakelog's options, each entry
point takes the few that Spark itself puts in a Python data source's options (``path``
from ``load(path)``/``save(path)``/``start(path)``, ``paths`` from ``load([a, b])``,
``checkpointLocation`` and ``queryName`` on a streaming write). Option names beginning
with ``lakelog.`` on a write are table properties for a table the write creates, checked
by :func:`lakelog.properties.validate_properties`. The registries are declared in
:mod:`lakelog.spark.option_specs`; this module resolves what an entry point is given.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import InvalidArgumentError
from ..log.snapshot import Snapshot, load_snapshot, version_as_of
from ..storage import Storage
from .modes import WriteSpec, write_spec
from .option_specs import (
    DEFAULT_MAX_FILES,
    LOAD,
    PARTITION_BYTES,
    READ,
    REGISTRIES,
    STREAM_READ,
    STREAM_WRITE,
    WRITE,
    Option,
    Registry,
    Resolved,
    markdown_table,
)

__all__ = [
    "DEFAULT_MAX_FILES",
    "LOAD",
    "PARTITION_BYTES",
    "READ",
    "REGISTRIES",
    "STREAM_READ",
    "STREAM_WRITE",
    "WRITE",
    "Option",
    "ReadOptions",
    "Registry",
    "StreamReadOptions",
    "StreamWriteOptions",
    "WriteOptions",
    "load_options",
    "markdown_table",
    "read_options",
    "resolve_snapshot",
    "stream_read_options",
    "stream_write_options",
    "write_options",
]


# -- resolved, per entry point -----------------------------------------------------------


@dataclass(frozen=True)
class ReadOptions:
    """The options of ``spark.read.format("lakelog")``, checked."""

    path: str
    storage_options: dict[str, Any] | None = None
    version: int | None = None
    timestamp: dt.datetime | None = None
    partition_bytes: int = PARTITION_BYTES
    change_feed: bool = False
    starting: int | dt.datetime | None = None
    ending: int | dt.datetime | None = None
    columns: tuple[str, ...] | None = None
    filter: str | None = None

    def storage(self) -> Storage:
        return Storage(self.path, self.storage_options)


_FEED_ONLY = (
    "startingVersion",
    "startingTimestamp",
    "endingVersion",
    "endingTimestamp",
    "columns",
    "filter",
)


def resolve_snapshot(
    storage: Storage, version: int | None, as_of: dt.datetime | str | None
) -> Snapshot:
    """The snapshot a read names: ``version``, or the last version committed at or
    before ``as_of`` (a datetime or an ISO 8601 string), or the latest."""
    if version is not None and as_of is not None:
        raise InvalidArgumentError("expected version or as_of, found both; pass one of them")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise InvalidArgumentError(f"expected an integer version, found {version!r}")
    if as_of is not None:
        when = as_of
        if isinstance(when, str):
            try:
                when = dt.datetime.fromisoformat(when.replace("Z", "+00:00"))
            except ValueError as e:
                raise InvalidArgumentError(
                    f"expected as_of as a datetime or an ISO 8601 string such as "
                    f"'2024-01-02T03:04:05+00:00', found {as_of!r}"
                ) from e
        if not isinstance(when, dt.datetime):
            raise InvalidArgumentError(
                f"expected as_of as a datetime or an ISO 8601 string, found {type(as_of).__name__}"
            )
        version = version_as_of(storage, when)
    return load_snapshot(storage, version)


def read_options(given: Mapping[str, Any]) -> ReadOptions:
    """Check and parse the options of ``spark.read.format("lakelog")``."""
    r = READ.resolve(given)
    location = r.location()
    r.one_of("versionAsOf", "timestampAsOf")
    feed = bool(r.get("readChangeFeed", False))
    if feed:
        for name in ("versionAsOf", "timestampAsOf"):
            if r.has(name):
                raise InvalidArgumentError(
                    f"expected no option {r.name(name)!r} with readChangeFeed on "
                    f"{READ.entry}, found it; the feed's range is startingVersion.."
                    f"endingVersion (or the timestamps)."
                )
        r.one_of("startingVersion", "startingTimestamp")
        r.one_of("endingVersion", "endingTimestamp")
        if not (r.has("startingVersion") or r.has("startingTimestamp")):
            raise InvalidArgumentError(
                "expected option startingVersion or startingTimestamp with readChangeFeed, "
                "found neither; for example .option('startingVersion', 0)"
            )
    else:
        r.only_with(
            _FEED_ONLY,
            "readChangeFeed 'true'",
            "set .option('readChangeFeed', 'true') to read the change feed, or use "
            "versionAsOf/timestampAsOf to read a version.",
        )
    return ReadOptions(
        path=location,
        storage_options=r.get("storageOptions"),
        version=r.get("versionAsOf"),
        timestamp=r.get("timestampAsOf"),
        partition_bytes=r.get("maxPartitionBytes", PARTITION_BYTES),
        change_feed=feed,
        starting=r.get("startingVersion", r.get("startingTimestamp")),
        ending=r.get("endingVersion", r.get("endingTimestamp")),
        columns=r.get("columns"),
        filter=r.get("filter"),
    )


def load_options(given: Mapping[str, Any]) -> ReadOptions:
    """What ``load()`` needs for the schema, before Spark says whether the read is a
    batch or a stream: every name checked against both readers' options (each checks
    its own when Spark asks it for a reader, before anything is read)."""
    r = LOAD.resolve(given)
    r.one_of("versionAsOf", "timestampAsOf")
    r.one_of("endingVersion", "endingTimestamp")
    return ReadOptions(
        path=r.location(),
        storage_options=r.get("storageOptions"),
        version=r.get("versionAsOf"),
        timestamp=r.get("timestampAsOf"),
        change_feed=bool(r.get("readChangeFeed", False)),
        ending=r.get("endingVersion", r.get("endingTimestamp")),
        columns=r.get("columns"),
    )


@dataclass(frozen=True)
class StreamReadOptions:
    """The options of ``spark.readStream.format("lakelog")``, checked when the query
    starts."""

    path: str = ""
    storage_options: dict[str, Any] | None = None
    starting_version: int | Literal["latest"] | None = None
    starting_timestamp: dt.datetime | None = None
    max_files: int | None = DEFAULT_MAX_FILES
    max_bytes: int | None = None
    skip_change_commits: bool = False
    read_change_feed: bool = False
    partition_bytes: int = PARTITION_BYTES

    def storage(self) -> Storage:
        return Storage(self.path, self.storage_options)


def stream_read_options(given: Mapping[str, Any]) -> StreamReadOptions:
    """Check and parse the options of ``spark.readStream.format("lakelog")``."""
    r = STREAM_READ.resolve(given)
    location = r.location()
    r.one_of("startingVersion", "startingTimestamp")
    max_files = r.get("maxFilesPerTrigger")
    max_bytes = r.get("maxBytesPerTrigger")
    if max_files is None and max_bytes is None:
        max_files = DEFAULT_MAX_FILES
    return StreamReadOptions(
        path=location,
        storage_options=r.get("storageOptions"),
        starting_version=r.get("startingVersion"),
        starting_timestamp=r.get("startingTimestamp"),
        max_files=max_files,
        max_bytes=max_bytes,
        skip_change_commits=bool(r.get("skipChangeCommits", False)),
        read_change_feed=bool(r.get("readChangeFeed", False)),
        partition_bytes=r.get("maxPartitionBytes", PARTITION_BYTES),
    )


@dataclass(frozen=True)
class WriteOptions:
    """The options of ``df.write.format("lakelog")``, checked: the write's
    :class:`~lakelog.spark.modes.WriteSpec` (table properties in ``spec.properties``)."""

    path: str
    spec: WriteSpec
    storage_options: dict[str, Any] | None = None

    def storage(self) -> Storage:
        return Storage(self.path, self.storage_options)


def _spec(r: Resolved, *, overwrite: bool, app_version: int | None) -> WriteSpec:
    """The write spec of resolved write options (``app_version``: the batch writer's
    ``txnVersion``; the streaming sink's comes per micro-batch)."""
    names = {
        "replace_where": f"option {r.name('replaceWhere')!r}",
        "partition_overwrite": f"option {r.name('partitionOverwriteMode')!r}",
    }
    schema_mode = "strict"
    if r.has("mergeSchema"):
        schema_mode = "merge" if r.get("mergeSchema") else "strict"
        names["schema_mode"] = f"option {r.name('mergeSchema')!r}"
    if r.has("schema_mode"):
        wanted = r.get("schema_mode")
        if r.has("mergeSchema") and wanted != schema_mode:
            raise InvalidArgumentError(
                f"expected option {r.name('schema_mode')!r} or {r.name('mergeSchema')!r}, "
                f"found both and they disagree ({wanted!r}, {schema_mode!r}); give one."
            )
        schema_mode = wanted
        names["schema_mode"] = f"option {r.name('schema_mode')!r}"
    where = r.get("replaceWhere")
    return write_spec(
        mode="overwrite" if overwrite else "append",
        replace_where=where if where is None or where.strip() else None,
        partition_overwrite=r.get("partitionOverwriteMode"),
        schema_mode=schema_mode,
        app_id=r.get("txnAppId") if app_version is not None else None,
        app_version=app_version,
        partition_by=r.get("partitionBy", ()),
        properties=dict(r.properties) or None,
        names=names,
    )


def write_options(given: Mapping[str, Any], *, overwrite: bool) -> WriteOptions:
    """Check and parse the options of ``df.write.format("lakelog")``; ``overwrite``:
    Spark's save mode."""
    r = WRITE.resolve(given)
    location = r.location()
    if r.has("txnAppId") != r.has("txnVersion"):
        id_name, v_name = r.name("txnAppId"), r.name("txnVersion")
        raise InvalidArgumentError(
            f"expected options {id_name!r} and {v_name!r} together (exactly-once writes), "
            f"found only {id_name if r.has('txnAppId') else v_name!r}; give both, e.g. "
            f".option({id_name!r}, 'ingest').option({v_name!r}, 12)"
        )
    spec = _spec(r, overwrite=overwrite, app_version=r.get("txnVersion"))
    return WriteOptions(location, spec, r.get("storageOptions"))


@dataclass(frozen=True)
class StreamWriteOptions:
    """The options of ``df.writeStream.format("lakelog")``, checked: the spec of every
    micro-batch (its app transaction added per batch) and ``app_id``, the ``txnAppId``
    option (None: the query's id)."""

    path: str
    spec: WriteSpec
    app_id: str | None = None
    storage_options: dict[str, Any] | None = None

    def storage(self) -> Storage:
        return Storage(self.path, self.storage_options)


def stream_write_options(given: Mapping[str, Any], *, overwrite: bool) -> StreamWriteOptions:
    """Check and parse the options of ``df.writeStream.format("lakelog")``;
    ``overwrite``: output mode ``complete``."""
    from ..transaction import app_transaction

    r = STREAM_WRITE.resolve(given)
    location = r.location()
    app_id = r.get("txnAppId")
    if app_id is not None:
        app_transaction(app_id, 0)  # the id's checks, before any task runs
    spec = _spec(r, overwrite=overwrite, app_version=None)
    return StreamWriteOptions(location, spec, app_id, r.get("storageOptions"))
