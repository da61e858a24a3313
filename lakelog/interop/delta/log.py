"""Delta log entries of the view: names, commits, checkpoints, ``_last_checkpoint``.

Pure translation plus the few reads and writes of ``_delta_log/``; *when* to write
what is :mod:`.view`'s business. Delta version ``v`` translates lakelog version
``v``: its ``commitInfo`` (always the first line) carries ``engineInfo``
``lakelog/<version>`` and the lakelog commit's ``txnId``, which is how lakelog tells
its own entries from another engine's.
"""

from __future__ import annotations

import io
import json
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from ... import __about__
from ...errors import DeltaViewError
from ...io.guards import constraints_of
from ...log import mapping
from ...log.actions import (
    Action,
    AddFile,
    AppTransaction,
    ChangeFile,
    CommitHeader,
    DeletionVector,
    ExpireVersions,
    Metadata,
    PlanClaim,
    PlanRelease,
    RemoveFile,
)
from ...log.feed import PROPERTY as CDF_PROPERTY
from ...log.snapshot import Snapshot
from ...properties import get_bool
from ...storage import Storage
from .partitions import DerivedColumn, derived_delta_fields, view_partitioning
from .stats import StatsConverter
from .types import delta_protocol, delta_schema_string, view_schema
from .vectors import ENABLE_FLAG, DeltaVector, delta_vector, holds_vectors, write_vector_files

__all__ = [
    "BROKEN_MARK",
    "CDF_FLAG",
    "DELTA_LOG",
    "ENGINE",
    "LAST_CHECKPOINT",
    "DeltaListing",
    "checkpoint_path",
    "delta_commit_path",
    "feed_flag",
    "list_delta_log",
    "read_commit_info",
    "read_last_checkpoint",
    "translate_commit",
    "write_checkpoint",
]

DELTA_LOG = "_delta_log"
LAST_CHECKPOINT = f"{DELTA_LOG}/_last_checkpoint"
BROKEN_MARK = f"{DELTA_LOG}/_lakelog_broken.json"
"""Written when lakelog finds a Delta commit it did not write; removed by a rebuild."""
ENGINE = f"lakelog/{__about__.__version__}"
CDF_FLAG = "delta.enableChangeDataFeed"
_COMMIT_RE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_OTHER_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\..+\.(parquet|json)$")
_ENC = msgspec.json.Encoder()
_DEC = msgspec.json.Decoder()
_PART_DEC = msgspec.json.Decoder(dict[str, str | None])
_TAGS_DEC = msgspec.json.Decoder(dict[str, str])
_BATCH = 8192


def delta_commit_path(version: int) -> str:
    return f"{DELTA_LOG}/{version:020d}.json"


def checkpoint_path(version: int) -> str:
    return f"{DELTA_LOG}/{version:020d}.checkpoint.parquet"


@dataclass(frozen=True)
class DeltaListing:
    """Versions with a Delta commit, with a single-file checkpoint, and with a
    checkpoint in another form (only other writers make those)."""

    commits: tuple[int, ...]
    checkpoints: tuple[int, ...]
    other_checkpoints: tuple[int, ...] = ()

    def head(self) -> int | None:
        """The version Delta readers resolve as latest: the newest checkpoint (or
        version 0) followed by every commit up to the first one missing; None when
        there is neither a checkpoint nor a commit 0."""
        present = set(self.commits)
        if self.checkpoints:
            h = self.checkpoints[-1]
        elif 0 in present:
            h = 0
        else:
            return None
        while h + 1 in present:
            h += 1
        return h


def list_delta_log(storage: Storage) -> DeltaListing:
    commits: list[int] = []
    checkpoints: list[int] = []
    other: list[int] = []
    for name in storage.list_names(DELTA_LOG):
        for regex, into in (
            (_COMMIT_RE, commits),
            (_CHECKPOINT_RE, checkpoints),
            (_OTHER_CHECKPOINT_RE, other),
        ):
            m = regex.match(name)
            if m:
                into.append(int(m.group(1)))
                break
    return DeltaListing(tuple(sorted(commits)), tuple(sorted(checkpoints)), tuple(sorted(other)))


# -- actions ---------------------------------------------------------------------------


def _table_uuid(table_id: str) -> str:
    try:
        return str(uuid.UUID(hex=table_id))
    except ValueError:
        return table_id


def delta_path(path: str) -> str:
    """A root-relative lakelog path as a Delta ``path`` (a relative URI: ``%`` and the
    other characters a URI path cannot hold are percent-encoded)."""
    return quote(path, safe="/=")


def feed_flag(md: Metadata) -> str | None:
    """The view's ``delta.enableChangeDataFeed``: ``"true"`` while the lakelog property
    is on; ``"false"`` once it is set back to false, so Delta readers refuse a range
    over that version (as Spark and delta-rs do) instead of reading the change commits
    after it, which have no ``cdc`` actions, as whole-file inserts and deletes; None
    when the property was never set (the view as it was before the feed)."""
    if CDF_PROPERTY not in md.properties:
        return None
    return "true" if get_bool(md.properties, CDF_PROPERTY) else "false"


def protocol_action(
    md: Metadata, *, deletion_vectors: bool = False, derived: Sequence[DerivedColumn] = ()
) -> dict[str, Any]:
    """``deletion_vectors``: the view's files may carry vectors (:func:`.vectors.holds_vectors`).
    ``derived``: the view's generated partition columns (:mod:`.partitions`), which
    need the writer feature ``generatedColumns``."""
    out = delta_protocol(
        md.arrow_schema(),
        change_data_feed=feed_flag(md) is not None,
        deletion_vectors=deletion_vectors,
    )
    features = out["writerFeatures"]
    if derived_delta_fields(md.arrow_schema(), derived) and "generatedColumns" not in features:
        features.insert(0, "generatedColumns")
    return out


def metadata_action(
    md: Metadata, *, deletion_vectors: bool = False, derived: Sequence[DerivedColumn] = ()
) -> dict[str, Any]:
    """``deletion_vectors``: the protocol declares the feature, and the configuration
    says ``delta.enableDeletionVectors: "true"``. ``derived``: the view's partition
    columns of a table partitioned by transforms (:mod:`.partitions`): generated
    columns appended to the schema, and the partition columns."""
    configuration = {"lakelog.delta_view": "true"}
    flag = feed_flag(md)
    if flag is not None:
        configuration[CDF_FLAG] = flag
    if deletion_vectors:
        configuration[ENABLE_FLAG] = "true"
    for name, text in constraints_of(md.arrow_schema()).items():  # Delta's CHECK
        configuration[f"delta.constraints.{name.lower()}"] = text
    schema = view_schema(md.arrow_schema())
    if mapping.is_mapped(schema):  # Delta column mapping, name mode (format.md)
        configuration["delta.columnMapping.mode"] = "name"
        top = max((mapping.column_id(f) or 0 for _, f in mapping.walk(schema)), default=0)
        declared = (schema.metadata or {}).get(mapping.MAX_ID_KEY)
        configuration["delta.columnMapping.maxColumnId"] = str(max(top, int(declared or 0)))
    schema_string = delta_schema_string(schema)
    extra = derived_delta_fields(schema, derived)
    if extra:
        struct = json.loads(schema_string)
        struct["fields"].extend(extra)
        schema_string = json.dumps(struct, separators=(",", ":"))
    return {
        "id": _table_uuid(md.table_id),
        "name": None,
        "description": None,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": schema_string,
        "partitionColumns": [*md.partition_by, *(d.name for d in derived)],
        "configuration": configuration,
        "createdTime": md.created_ms,
    }


def _partition_values(
    partition: Mapping[str, str | None],
    partition_by: Sequence[str],
    derived: Sequence[DerivedColumn] = (),
    tags: Mapping[str, str] | None = None,
) -> dict[str, str | None]:
    """``derived``: the view's partition columns of transforms, whose values are the
    file's recorded ``tags`` (None for a ``remove``, which records none: Delta matches
    a remove by path)."""
    out = {c: partition.get(c) for c in partition_by}
    for d in derived:
        out[d.name] = d.value(tags) if tags is not None else None
    return out


def add_action(
    a: AddFile,
    partition_by: Sequence[str],
    stats: StatsConverter,
    default_ms: int,
    vector: DeltaVector | None = None,
    derived: Sequence[DerivedColumn] = (),
) -> dict[str, Any]:
    """``vector``: the Delta form of ``a.deleted``."""
    out: dict[str, Any] = {
        "path": delta_path(a.path),
        "partitionValues": _partition_values(a.partition, partition_by, derived, a.tags),
        "size": a.size_bytes,
        "modificationTime": a.modification_ms or default_ms,
        "dataChange": a.data_change,
        "stats": stats.delta_stats(a.num_rows, a.stats, tight=vector is None),
    }
    if a.tags:
        out["tags"] = dict(a.tags)
    if vector is not None:
        out["deletionVector"] = vector.descriptor
    return out


def remove_action(
    r: RemoveFile,
    partition_by: Sequence[str],
    vector: DeltaVector | None = None,
    derived: Sequence[DerivedColumn] = (),
) -> dict[str, Any]:
    """``vector``: the Delta form of the vector the file carried until this commit (a
    ``remove`` names the logical file it ends: path and descriptor)."""
    out: dict[str, Any] = {
        "path": delta_path(r.path),
        "deletionTimestamp": r.deletion_ms,
        "dataChange": r.data_change,
        "extendedFileMetadata": r.size_bytes is not None and not derived,
        "partitionValues": _partition_values(r.partition, partition_by, derived),
    }
    if r.size_bytes is not None:
        out["size"] = r.size_bytes
    if vector is not None:
        out["deletionVector"] = vector.descriptor
    return out


def cdc_action(c: ChangeFile, partition_by: Sequence[str]) -> dict[str, Any]:
    """A lakelog change file as Delta's ``cdc`` action: the same Parquet file (the
    table's columns but the partition columns, then ``_change_type``), which changes
    no table state, hence ``dataChange: false``."""
    return {
        "path": delta_path(c.path),
        "partitionValues": _partition_values(c.partition, partition_by),
        "size": c.size_bytes,
        "dataChange": False,
    }


def _txn(app_id: str, version: int, last_updated: int | None) -> dict[str, Any]:
    return {"appId": app_id, "version": version, "lastUpdated": last_updated}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else _ENC.encode(value).decode()


def commit_info(header: CommitHeader, actions: Sequence[Action]) -> dict[str, Any]:
    """Delta's ``commitInfo`` for a lakelog commit; ``txnId`` is the lakelog
    transaction id, which marks the entry as lakelog's."""
    blind = all(isinstance(a, AddFile) and a.data_change for a in actions) and bool(actions)
    info: dict[str, Any] = {
        "timestamp": header.timestamp_ms,
        "operation": header.operation,
        "operationParameters": {k: _text(v) for k, v in header.parameters.items()},
        "isolationLevel": "Serializable",
        "isBlindAppend": blind,
        "operationMetrics": {k: _text(v) for k, v in header.metrics.items()},
        "engineInfo": ENGINE,
        "txnId": header.txn_id,
    }
    if header.read_version is not None:
        info["readVersion"] = header.read_version
    return info


RemovedVectors = Mapping[str, tuple[DeletionVector, int]]
"""Path -> (vector, physical rows) of the files a commit removes that carried a vector
until it."""


def translate_commit(
    header: CommitHeader,
    actions: Sequence[Action],
    metadata: Metadata,
    *,
    start: bool,
    vectors: bool | Callable[[], bool] = False,
    removed: RemovedVectors | None = None,
    first_vectors: bool | Callable[[], bool] = False,
    derived: Sequence[DerivedColumn] = (),
) -> tuple[bytes, list[DeltaVector]]:
    """The Delta commit translating lakelog commit ``header.version``, and the
    deletion vectors its ``add`` actions carry (whose DV files must exist before it).

    ``metadata`` is the table's metadata as of this version. The entry that starts
    the view (``start``) and every entry of a ``metadata`` action carry ``protocol``
    and ``metaData``; so does an entry adding a file with a vector when no other live
    file has one (``first_vectors``: the view declares ``deletionVectors`` only while
    a file carries a vector, so it is declared in the entry where the first appears).
    ``vectors``: whether the table as of this version declares it
    (:func:`.vectors.holds_vectors`; callables are asked only when needed).
    ``removed``: the vectors of removed files, which their ``remove`` actions name.
    ``derived``: the view's partition columns of transforms (:mod:`.partitions`).
    """
    lines: list[dict[str, Any]] = [{"commitInfo": commit_info(header, actions)}]
    adds_vectors = any(isinstance(a, AddFile) and a.deleted is not None for a in actions)
    first = adds_vectors and (first_vectors() if callable(first_vectors) else first_vectors)
    if start or first or any(isinstance(a, Metadata) for a in actions):
        declared = vectors() if callable(vectors) else vectors
        lines.append(
            {"protocol": protocol_action(metadata, deletion_vectors=declared, derived=derived)}
        )
        lines.append(
            {"metaData": metadata_action(metadata, deletion_vectors=declared, derived=derived)}
        )
    parts = metadata.partition_by
    stats = StatsConverter(metadata.arrow_schema(), parts)
    written: list[DeltaVector] = []
    for a in actions:
        if isinstance(a, AddFile):
            vector = None
            if a.deleted is not None:
                vector = delta_vector(a.path, a.deleted, a.num_rows)
                written.append(vector)
            lines.append({"add": add_action(a, parts, stats, header.timestamp_ms, vector, derived)})
        elif isinstance(a, RemoveFile):
            old = (removed or {}).get(a.path)
            gone = delta_vector(a.path, *old) if old is not None else None
            lines.append({"remove": remove_action(a, parts, gone, derived)})
        elif isinstance(a, ChangeFile):
            lines.append({"cdc": cdc_action(a, parts)})
        elif isinstance(a, AppTransaction):  # Delta's own idempotent-write marker
            lines.append({"txn": _txn(a.app_id, a.app_version, a.timestamp_ms or None)})
        elif isinstance(a, (Metadata, ExpireVersions, PlanClaim, PlanRelease)):
            continue  # metadata: above; expiries and maintenance claims change no Delta state
        else:
            raise DeltaViewError(
                f"expected only actions the Delta view can express in version "
                f"{header.version}, found {type(a).__name__}; this lakelog is too old to "
                f"translate it. Upgrade lakelog and run `lakelog delta-view sync`."
            )
    return b"\n".join(_ENC.encode(line) for line in lines) + b"\n", written


def read_commit_info(data: bytes) -> dict[str, Any] | None:
    """The ``commitInfo`` of a Delta commit's bytes (None if it has none or is not
    JSON lines)."""
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            obj = _DEC.decode(line)
        except msgspec.DecodeError:
            return None
        if isinstance(obj, dict) and isinstance(obj.get("commitInfo"), dict):
            info: dict[str, Any] = obj["commitInfo"]
            return info
    return None


# -- checkpoints -----------------------------------------------------------------------

_MAP = pa.map_(pa.string(), pa.string())
_NN_MAP = pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.string(), False))
_STRINGS = pa.list_(pa.field("element", pa.string(), False))
CHECKPOINT_SCHEMA = pa.schema(
    [
        pa.field(
            "txn",
            pa.struct(
                [
                    pa.field("appId", pa.string(), False),
                    pa.field("version", pa.int64(), False),
                    pa.field("lastUpdated", pa.int64()),
                ]
            ),
        ),
        pa.field(
            "add",
            pa.struct(
                [
                    pa.field("path", pa.string(), False),
                    pa.field("partitionValues", _MAP, False),
                    pa.field("size", pa.int64(), False),
                    pa.field("modificationTime", pa.int64(), False),
                    pa.field("dataChange", pa.bool_(), False),
                    pa.field("stats", pa.string()),
                    pa.field("tags", _MAP),
                ]
            ),
        ),
        pa.field(
            "remove",
            pa.struct(
                [
                    pa.field("path", pa.string(), False),
                    pa.field("deletionTimestamp", pa.int64()),
                    pa.field("dataChange", pa.bool_(), False),
                    pa.field("extendedFileMetadata", pa.bool_()),
                    pa.field("partitionValues", _MAP),
                    pa.field("size", pa.int64()),
                ]
            ),
        ),
        pa.field(
            "metaData",
            pa.struct(
                [
                    pa.field("id", pa.string(), False),
                    pa.field("name", pa.string()),
                    pa.field("description", pa.string()),
                    pa.field(
                        "format",
                        pa.struct(
                            [
                                pa.field("provider", pa.string(), False),
                                pa.field("options", _NN_MAP, False),
                            ]
                        ),
                        False,
                    ),
                    pa.field("schemaString", pa.string(), False),
                    pa.field("partitionColumns", _STRINGS, False),
                    pa.field("createdTime", pa.int64()),
                    pa.field("configuration", _NN_MAP, False),
                ]
            ),
        ),
        pa.field(
            "protocol",
            pa.struct(
                [
                    pa.field("minReaderVersion", pa.int32(), False),
                    pa.field("minWriterVersion", pa.int32(), False),
                    pa.field("readerFeatures", _STRINGS),
                    pa.field("writerFeatures", _STRINGS),
                ]
            ),
        ),
    ]
)


_DV_STRUCT = pa.struct(
    [
        pa.field("storageType", pa.string(), False),
        pa.field("pathOrInlineDv", pa.string(), False),
        pa.field("offset", pa.int32()),
        pa.field("sizeInBytes", pa.int32(), False),
        pa.field("cardinality", pa.int64(), False),
    ]
)


def _with_vectors(schema: pa.Schema) -> pa.Schema:
    """The checkpoint schema whose ``add`` also has ``deletionVector`` (a view that
    declares deletion vectors; the others keep the schema they always had)."""
    i = schema.get_field_index("add")
    add = schema.field(i)
    fields = [*add.type, pa.field("deletionVector", _DV_STRUCT)]
    return schema.set(i, pa.field("add", pa.struct(fields), add.nullable))


CHECKPOINT_SCHEMA_DV = _with_vectors(CHECKPOINT_SCHEMA)


def _rows(
    protocol: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    adds: list[dict[str, Any]] | None = None,
    txns: list[dict[str, Any]] | None = None,
    *,
    schema: pa.Schema = CHECKPOINT_SCHEMA,
) -> pa.Table:
    rows: list[dict[str, Any]] = [{"txn": t} for t in txns or ()]
    if protocol is not None:
        rows.append({"protocol": protocol})
    if metadata is not None:
        md = dict(metadata)
        md["format"] = {"provider": "parquet", "options": []}
        md["configuration"] = list(md["configuration"].items())
        rows.append({"metaData": md})
    for add in adds or ():
        add = dict(add)
        add["partitionValues"] = list(add["partitionValues"].items())
        add["tags"] = list(add["tags"].items()) if add.get("tags") else None
        rows.append({"add": add})
    return pa.Table.from_pylist(rows, schema=schema)


def _checkpoint_adds(
    snapshot: Snapshot, vectors: list[DeltaVector] | None, derived: Sequence[DerivedColumn] = ()
) -> Iterator[list[dict[str, Any]]]:
    """The ``add`` actions of every live file, in batches (the file table is columnar:
    each batch is decoded on its own). ``vectors``: where to collect the Delta form of
    the files' deletion vectors (None: the view declares none, nor has any)."""
    files = snapshot.file_table
    parts = snapshot.partition_by
    stats = StatsConverter(snapshot.schema, parts)
    for start in range(0, files.num_rows, _BATCH):
        chunk = files.slice(start, _BATCH)
        out = []
        n = chunk.num_rows
        deleted = chunk.column("deleted_rows").to_pylist() if vectors is not None else [None] * n
        bitmaps = chunk.column("deleted_bitmap").to_pylist() if vectors is not None else [None] * n
        for path, size, rows, part, st, mtime, tags, gone, bitmap in zip(
            chunk.column("path").to_pylist(),
            chunk.column("size_bytes").to_pylist(),
            chunk.column("num_rows").to_pylist(),
            chunk.column("partition").to_pylist(),
            chunk.column("stats").to_pylist(),
            chunk.column("modification_ms").to_pylist(),
            chunk.column("tags").to_pylist(),
            deleted,
            bitmaps,
            strict=True,
        ):
            vector = None
            if bitmap is not None and vectors is not None:
                vector = delta_vector(path, DeletionVector(rows=gone, bitmap=bitmap), rows)
                vectors.append(vector)
            tag_map = _TAGS_DEC.decode(tags) if tags else {}
            add: dict[str, Any] = {
                "path": delta_path(path),
                "partitionValues": _partition_values(
                    _PART_DEC.decode(part) if part else {}, parts, derived, tag_map
                ),
                "size": size,
                "modificationTime": mtime or snapshot.timestamp_ms,
                "dataChange": False,
                "stats": stats.delta_stats_json(rows, st, tight=vector is None),
            }
            if tag_map:
                add["tags"] = tag_map
            if vector is not None:
                add["deletionVector"] = vector.descriptor
            out.append(add)
        yield out


def write_checkpoint(storage: Storage, snapshot: Snapshot, *, write_vectors: bool = False) -> bool:
    """Write the Delta checkpoint of ``snapshot`` (put-if-absent) and point
    ``_last_checkpoint`` at it if that names an older one. False if it existed.

    ``write_vectors``: first put the DV files of the live files' deletion vectors that
    are missing (a checkpoint that starts the view; later ones name only vectors whose
    entries wrote their files)."""
    path = checkpoint_path(snapshot.version)
    sink = io.BytesIO()
    num_adds = 0
    declared = holds_vectors(snapshot)
    schema = CHECKPOINT_SCHEMA_DV if declared else CHECKPOINT_SCHEMA
    vectors: list[DeltaVector] | None = [] if declared else None
    derived = view_partitioning(snapshot)
    with pq.ParquetWriter(sink, schema, compression="snappy") as writer:
        txns = [_txn(app, v, None) for app, v in sorted(snapshot.app_versions.items())]
        writer.write_table(
            _rows(
                protocol=protocol_action(
                    snapshot.metadata, deletion_vectors=declared, derived=derived
                ),
                metadata=metadata_action(
                    snapshot.metadata, deletion_vectors=declared, derived=derived
                ),
                txns=txns,
                schema=schema,
            )
        )
        for adds in _checkpoint_adds(snapshot, vectors, derived):
            writer.write_table(_rows(adds=adds, schema=schema))
            num_adds += len(adds)
    data = sink.getvalue()
    if write_vectors and vectors:
        write_vector_files(storage, vectors)
    try:
        storage.put_if_absent(path, data)
        created = True
    except FileExistsError:
        created = False  # another writer wrote it (the same state): point the hint at it
    update_last_checkpoint(storage, snapshot.version, num_adds + 2 + len(txns), len(data), num_adds)
    return created


def read_last_checkpoint(storage: Storage) -> int | None:
    try:
        value = _DEC.decode(storage.read_bytes(LAST_CHECKPOINT))
    except (FileNotFoundError, msgspec.DecodeError):
        return None
    version = value.get("version") if isinstance(value, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def update_last_checkpoint(
    storage: Storage, version: int, size: int, size_bytes: int, num_adds: int
) -> None:
    """Point ``_last_checkpoint`` at ``version`` unless it names a newer one (two
    writers may race here; the loser only leaves a hint to an older checkpoint, which
    readers follow and then list past)."""
    current = read_last_checkpoint(storage)
    if current is not None and current >= version:
        return
    body = {"version": version, "size": size, "sizeInBytes": size_bytes, "numOfAddFiles": num_adds}
    storage.write_bytes(LAST_CHECKPOINT, _ENC.encode(body))
