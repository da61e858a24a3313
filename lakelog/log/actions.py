"""The persisted actions of the log, as frozen msgspec Structs.

Schema evolution follows msgspec's rules: new fields get defaults, nothing is
reordered or renamed. A reader refuses a ``format_version`` newer than
:data:`FORMAT_VERSION`. See ``docs/format.md``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any, ClassVar, TypeAlias

import msgspec
import pyarrow as pa

__all__ = [
    "BASE_FORMAT_VERSION",
    "FORMAT_VERSION",
    "TABLE_FORMAT_VERSION",
    "VECTORS_FORMAT_VERSION",
    "Action",
    "AddFile",
    "AppTransaction",
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
    "required_format_version",
]

FORMAT_VERSION = 5
"""The newest format version this library reads and writes (see ``docs/format.md``)."""

TABLE_FORMAT_VERSION = 3
"""The version new tables declare (their ``metadata`` action; what ``lakelog upgrade``
moves a table to): version 4 changes only manifests (plans files), which a writer uses
on any table of version 3; a table declares :data:`VECTORS_FORMAT_VERSION` from the
``metadata`` action that turns deletion vectors on."""

VECTORS_FORMAT_VERSION = 5
"""The format version of deletion vectors (``docs/format.md``, "Deletion vectors")."""

BASE_FORMAT_VERSION = 1
"""What an absent ``format_version`` means: the first version of the format. A header
omits the field only when it is 1, so a version-1 reader never mistakes a version-2
commit for one of its own."""


class FileStats(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """Per-column statistics of one data file, from its Parquet footer.

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
    format_version: int = TABLE_FORMAT_VERSION
    created_ms: int = 0

    def arrow_schema(self) -> pa.Schema:
        return decode_schema(self.schema)


class DeletionVector(msgspec.Struct, frozen=True, gc=False):
    """The rows of a data file that are deleted (format version 5): ``rows`` of them, at
    the positions ``bitmap`` encodes (:mod:`lakelog.log.deletion_vectors`)."""

    rows: int
    bitmap: str


class AddFile(msgspec.Struct, tag="add", frozen=True, kw_only=True, omit_defaults=True):
    """A data file becomes part of the table (``deleted``: its deletion vector)."""

    path: str
    size_bytes: int
    num_rows: int
    partition: dict[str, str | None] = {}
    stats: FileStats | None = None
    data_change: bool = True
    modification_ms: int = 0
    tags: dict[str, str] = {}
    deleted: DeletionVector | None = None

    @property
    def live_rows(self) -> int:
        """Rows not deleted by the file's vector."""
        return self.num_rows - (self.deleted.rows if self.deleted is not None else 0)


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

    FORMAT: ClassVar[int] = 2
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

    FORMAT: ClassVar[int] = 3
    plan_id: str
    operation: str
    owner: str
    lease_id: str
    claimed_ms: int
    groups: list[ClaimGroup]


class PlanRelease(msgspec.Struct, tag="release", frozen=True, kw_only=True):
    """The claim of plan ``plan_id`` ends on ``group_ids`` (on every group if ``done``).

    Version 3 (``docs/format.md``, "Maintenance plans and claims")."""

    FORMAT: ClassVar[int] = 3
    plan_id: str
    group_ids: list[str] = []
    done: bool = False


Action: TypeAlias = (
    Metadata | AddFile | RemoveFile | ExpireVersions | AppTransaction | PlanClaim | PlanRelease
)


class CommitHeader(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Who committed what, when, on top of which version.

    ``format_version`` is the newest format version the commit's actions need
    (:func:`required_format_version`); absent means 1."""

    format_version: int = BASE_FORMAT_VERSION
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


class DataFile(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A live data file of a snapshot.

    ``path`` is relative to the table root; ``partition`` maps partition
    columns to their string form (``None`` for null), as in the folder name.
    """

    path: str
    size_bytes: int
    num_rows: int
    partition: dict[str, str | None] = {}
    stats: FileStats | None = None
    modification_ms: int = 0
    tags: dict[str, str] = {}
    deleted: DeletionVector | None = None
    """Its deletion vector (format version 5): rows of the file that are gone."""

    @property
    def live_rows(self) -> int:
        """Rows not deleted by the file's vector."""
        return self.num_rows - (self.deleted.rows if self.deleted is not None else 0)

    @classmethod
    def from_add(cls, add: AddFile) -> DataFile:
        return cls(
            path=add.path,
            size_bytes=add.size_bytes,
            num_rows=add.num_rows,
            partition=add.partition,
            stats=add.stats,
            modification_ms=add.modification_ms,
            tags=add.tags,
            deleted=add.deleted,
        )

    def to_add(self, *, data_change: bool = True) -> AddFile:
        return AddFile(
            path=self.path,
            size_bytes=self.size_bytes,
            num_rows=self.num_rows,
            partition=self.partition,
            stats=self.stats,
            data_change=data_change,
            modification_ms=self.modification_ms,
            tags=self.tags,
            deleted=self.deleted,
        )

    def to_remove(self, *, deletion_ms: int, data_change: bool = True) -> RemoveFile:
        return RemoveFile(
            path=self.path,
            deletion_ms=deletion_ms,
            data_change=data_change,
            partition=self.partition,
            size_bytes=self.size_bytes,
        )


def required_format_version(actions: Iterable[Action]) -> int:
    """The format version a commit of ``actions`` needs: the highest any action needs.

    An action type added in version 2 or later says so with a class-level ``FORMAT``;
    a ``metadata`` action needs the table format version it declares. Plain adds,
    removes and expiries need version 1 (an add with a deletion vector needs 5), so a
    version-1 table stays readable by version-1 readers until it is upgraded
    (``docs/format.md``, "Versioning")."""
    need = BASE_FORMAT_VERSION
    for a in actions:
        need = max(need, a.format_version if isinstance(a, Metadata) else _format_of(a))
    return need


def _format_of(action: Action) -> int:
    if isinstance(action, AddFile) and action.deleted is not None:
        return VECTORS_FORMAT_VERSION
    value = getattr(type(action), "FORMAT", BASE_FORMAT_VERSION)
    return value if isinstance(value, int) else BASE_FORMAT_VERSION


def encode_schema(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def decode_schema(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))
