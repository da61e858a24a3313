"""The persisted actions of the log, as frozen msgspec Structs.

Schema evolution follows msgspec's rules: new fields get defaults, nothing is
reordered or renamed. Which format version each action needs, and what a reader
refuses, is decided in :mod:`lakelog.log.format`. See ``docs/format.md``.
"""

from __future__ import annotations

import base64
from typing import Any, ClassVar, TypeAlias

import msgspec
import pyarrow as pa

from . import format as fmt

__all__ = [
    "encode_with_metadata",
    "Action",
    "AddFile",
    "AppTransaction",
    "ChangeFile",
    "ClaimGroup",
    "Commit",
    "CommitHeader",
    "DataFile",
    "DeletionVector",
    "ExpireVersions",
    "FileStats",
    "Metadata",
    "PlanClaim",
    "PlanRelease",
    "RemoveFile",
    "decode_schema",
    "encode_schema",
]


class FileStats(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """Per-column statistics of one data file, from its Parquet footer.

    Attributes:
        min: each column's smallest value.
        max: each column's largest value.
        null_count: each column's number of nulls.

    Values are JSON scalars: integers and floats as numbers, strings as
    strings, booleans as booleans, dates, times and timestamps as their
    integer physical value (days or units since the epoch), decimals as
    strings. A column missing from ``min``/``max`` has no usable bounds.

    ``gc=False`` (here and on :class:`DataFile`): a snapshot materializes one
    of each per live file and they hold only dicts of scalars, so they can
    never form a cycle; untracked, 100,000 of them no longer trigger repeated
    full garbage collections (2x faster ``Snapshot.files()``).
    """

    min: dict[str, Any] = {}
    max: dict[str, Any] = {}
    null_count: dict[str, int] = {}


class Metadata(msgspec.Struct, tag="metadata", frozen=True, kw_only=True):
    """Table identity, schema, partitioning and properties."""

    table_id: str
    schema: str
    """Arrow IPC serialization of the full table schema, base64."""
    partition_by: tuple[str, ...] = ()
    properties: dict[str, str] = {}
    format_version: int = fmt.NEW_TABLE
    created_ms: int = 0
    partition_specs: tuple[tuple[str, ...], ...] = ()
    """Partition specs of transforms, by spec id; the last is current (format version 8,
    ``docs/format.md``, "Partition transforms and evolution"). Empty: identity
    partitioning by ``partition_by``."""

    def arrow_schema(self) -> pa.Schema:
        return decode_schema(self.schema)


_NO_SPECS = b',"partition_specs":[]}'


def encode_with_metadata(encoded: bytes, metadata: Metadata | None) -> bytes:
    """``encoded`` (the JSON of ``metadata``, or of a document holding it) without an
    empty ``partition_specs``: a table without transforms writes exactly the bytes it
    wrote before format version 8 (``docs/format.md``, "Partition transforms and
    evolution"). The field is the struct's last, so its JSON ends the object."""
    if metadata is None or metadata.partition_specs:
        return encoded
    own = msgspec.json.encode(metadata)
    if not own.endswith(_NO_SPECS):  # pragma: no cover - the field order is fixed above
        return encoded
    return encoded.replace(own, own[: -len(_NO_SPECS)] + b"}", 1)


class DeletionVector(msgspec.Struct, frozen=True, gc=False):
    """The rows of a data file that are deleted (the deletion vectors of format version
    5): ``rows`` of them, at the positions ``bitmap`` encodes
    (:mod:`lakelog.log.deletion_vectors`)."""

    rows: int
    bitmap: str


class FileEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The facts the log records about one data file: the fields an ``add`` action and
    a snapshot's live file share (declared once, here).

    Attributes:
        path: the file's path, relative to the table root.
        size_bytes: the file's size.
        num_rows: rows in the file, deleted ones included (see :attr:`live_rows`).
        partition: partition columns to their string form (``None`` for null), as in
            the folder name.
        stats: per-column statistics from the footer (None: none recorded), keyed by
            the names the file stores columns under: the column names, except on a
            table with column ids, where a renamed column keeps its physical name
            (:func:`lakelog.log.mapping.physical_name`; ``Snapshot.stats_columns`` gives
            them by column name).
        modification_ms: when the file was written, in ms since the epoch.
        tags: facts writers record about the file (its clustering key range, whether
            its column chunks are single pages).
        deleted: its deletion vector (format version 5): rows of the file that are gone.
    """

    path: str
    size_bytes: int
    num_rows: int
    partition: dict[str, str | None] = {}
    stats: FileStats | None = None
    modification_ms: int = 0
    tags: dict[str, str] = {}
    deleted: DeletionVector | None = None

    @property
    def live_rows(self) -> int:
        """Rows not deleted by the file's vector."""
        return self.num_rows - (self.deleted.rows if self.deleted is not None else 0)

    def entry_fields(self) -> dict[str, Any]:
        """The shared fields by name (to build the other kind of entry)."""
        return {f: getattr(self, f) for f in FileEntry.__struct_fields__}


class AddFile(FileEntry, tag="add", frozen=True, kw_only=True, omit_defaults=True):
    """A data file becomes part of the table (``deleted``: its deletion vector).
    ``data_change=False``: the rows were already in the table (a rewrite)."""

    data_change: bool = True


class RemoveFile(msgspec.Struct, tag="remove", frozen=True, kw_only=True, omit_defaults=True):
    """A data file stops being part of the table (it stays on disk)."""

    path: str
    deletion_ms: int
    data_change: bool = True
    partition: dict[str, str | None] = {}
    size_bytes: int | None = None


class ExpireVersions(msgspec.Struct, tag="expire", frozen=True, kw_only=True):
    """Versions below ``oldest_version`` are expired: no longer readable.

    Written by ``expire_snapshots`` after a manifest at ``oldest_version``
    exists, and before any file is deleted. The oldest readable version of a
    table is the largest ``oldest_version`` in its log (0 if none).
    """

    oldest_version: int


class AppTransaction(msgspec.Struct, tag="app_txn", frozen=True, kw_only=True):
    """The commit holds version ``app_version`` of application ``app_id``'s output.

    Version 2. A commit with one lands only if ``app_version`` is above the version
    recorded for ``app_id`` (exactly-once ingest; ``docs/format.md``, "App transactions").
    """

    FORMAT: ClassVar[int] = fmt.APP_TRANSACTIONS.version
    app_id: str
    app_version: int
    timestamp_ms: int = 0


class ClaimGroup(msgspec.Struct, frozen=True, kw_only=True):
    """One group of a claim: its id and the root-relative paths of its source files."""

    group_id: str
    paths: list[str]


class PlanClaim(msgspec.Struct, tag="claim", frozen=True, kw_only=True):
    """Maintenance run ``plan_id`` claims the files of its groups while lease ``lease_id``
    is live.

    Version 3. A claim of a pending plan id (a resume) replaces it; a claimed path held
    by another pending plan's group takes that group over (``docs/format.md``,
    "Maintenance plans and claims").
    """

    FORMAT: ClassVar[int] = fmt.CLAIMS.version
    plan_id: str
    operation: str
    owner: str
    lease_id: str
    claimed_ms: int
    groups: list[ClaimGroup]


class PlanRelease(msgspec.Struct, tag="release", frozen=True, kw_only=True):
    """The claim of plan ``plan_id`` ends on ``group_ids`` (on every group if ``done``).

    Version 3 (``docs/format.md``, "Maintenance plans and claims")."""

    FORMAT: ClassVar[int] = fmt.CLAIMS.version
    plan_id: str
    group_ids: list[str] = []
    done: bool = False


class ChangeFile(msgspec.Struct, tag="cdc", frozen=True, kw_only=True, omit_defaults=True):
    """A change file of the commit: rows the commit deleted, inserted or updated, with
    their ``_change_type`` (``docs/format.md``, "Change data feed").

    Version 6. It adds no live file: a snapshot's rows do not change; the feed reads it,
    and expiry and vacuum treat it as a data file of its commit. ``partition`` holds the
    partition values of every row of the file."""

    FORMAT: ClassVar[int] = fmt.CHANGE_DATA_FEED.version
    path: str
    size_bytes: int
    num_rows: int
    partition: dict[str, str | None] = {}


Action: TypeAlias = (
    Metadata
    | AddFile
    | RemoveFile
    | ExpireVersions
    | AppTransaction
    | PlanClaim
    | PlanRelease
    | ChangeFile
)


class CommitHeader(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Who committed what, when, on top of which version.

    ``format_version`` is the newest format version the commit's actions need
    (:func:`lakelog.log.format.commit_version`); absent means 1."""

    format_version: int = fmt.BASE
    version: int
    timestamp_ms: int
    operation: str
    parameters: dict[str, Any] = {}
    read_version: int | None = None
    txn_id: str
    engine: str = ""
    metrics: dict[str, Any] = {}


class Commit(msgspec.Struct, frozen=True):
    """The content of one commit file."""

    header: CommitHeader
    actions: list[Action]


class DataFile(FileEntry, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A live data file of a snapshot (the fields of :class:`FileEntry`). Untracked by
    the garbage collector: a snapshot may hand out millions."""

    @classmethod
    def from_add(cls, add: AddFile) -> DataFile:
        return cls(**add.entry_fields())

    def to_add(self, *, data_change: bool = True) -> AddFile:
        return AddFile(**self.entry_fields(), data_change=data_change)

    def to_remove(self, *, deletion_ms: int, data_change: bool = True) -> RemoveFile:
        return RemoveFile(
            path=self.path,
            deletion_ms=deletion_ms,
            data_change=data_change,
            partition=self.partition,
            size_bytes=self.size_bytes,
        )


def encode_schema(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def decode_schema(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))
