"""The live file set as a columnar Arrow table, and the pure replay of actions.

Keeping the file set columnar makes manifests cheap to read and write and a
snapshot of 100,000 files cheap to hold; :class:`DataFile` objects are built
only when asked for.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from .actions import (
    AddFile,
    AppTransaction,
    Commit,
    DataFile,
    DeletionVector,
    ExpireVersions,
    FileStats,
    Metadata,
    PlanClaim,
    PlanRelease,
    RemoveFile,
)
from .plans import PendingPlan, apply_plan_actions

__all__ = [
    "FILES_SCHEMA",
    "ReplayState",
    "data_files",
    "files_from_adds",
    "live_row_count",
    "replay",
    "vectors_of",
]

FILES_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("size_bytes", pa.int64(), nullable=False),
        pa.field("num_rows", pa.int64(), nullable=False),
        pa.field("partition", pa.string()),
        pa.field("stats", pa.string()),
        pa.field("modification_ms", pa.int64()),
        pa.field("tags", pa.string()),
        pa.field("deleted_rows", pa.int64()),
        pa.field("deleted_bitmap", pa.string()),
    ]
)

_ENC = msgspec.json.Encoder()
_PART_DEC = msgspec.json.Decoder(dict[str, str | None])
_STATS_DEC = msgspec.json.Decoder(FileStats)
_TAGS_DEC = msgspec.json.Decoder(dict[str, str])
_EMPTY_JSON = "{}"


def files_from_adds(adds: Sequence[AddFile | DataFile]) -> pa.Table:
    """Columnar form of a list of added files."""
    return pa.table(
        {
            "path": [a.path for a in adds],
            "size_bytes": [a.size_bytes for a in adds],
            "num_rows": [a.num_rows for a in adds],
            "partition": [
                _ENC.encode(a.partition).decode() if a.partition else _EMPTY_JSON for a in adds
            ],
            "stats": [_ENC.encode(a.stats).decode() if a.stats else None for a in adds],
            "modification_ms": [a.modification_ms for a in adds],
            "tags": [_ENC.encode(a.tags).decode() if a.tags else _EMPTY_JSON for a in adds],
            "deleted_rows": [a.deleted.rows if a.deleted else None for a in adds],
            "deleted_bitmap": [a.deleted.bitmap if a.deleted else None for a in adds],
        },
        schema=FILES_SCHEMA,
    )


def data_files(table: pa.Table) -> list[DataFile]:
    """Decode the columnar file set into :class:`DataFile` objects.

    The hot path of ``Snapshot.files()`` (100,000 files and more): JSON is
    decoded from bytes (faster in msgspec than from str), and the partition
    and tags columns are skipped when they hold only ``{}``.
    """
    stats = table.column("stats").cast(pa.binary()).to_pylist()
    parts = _json_objects(table.column("partition"), _PART_DEC)
    tags = _json_objects(table.column("tags"), _TAGS_DEC)
    vectors = vectors_of(table)
    return [
        DataFile(
            path=path,
            size_bytes=size,
            num_rows=rows,
            partition=part or {},
            stats=_STATS_DEC.decode(st) if st else None,
            modification_ms=mtime,
            tags=tag or {},
            deleted=dv,
        )
        for path, size, rows, part, st, mtime, tag, dv in zip(
            table.column("path").to_pylist(),
            table.column("size_bytes").to_pylist(),
            table.column("num_rows").to_pylist(),
            parts,
            stats,
            table.column("modification_ms").fill_null(0).to_pylist(),
            tags,
            vectors,
            strict=True,
        )
    ]


def vectors_of(table: pa.Table) -> list[DeletionVector | None]:
    """The deletion vector of each row of a file table or leaf (``deleted_rows`` and
    ``deleted_bitmap``; None where absent)."""
    n = table.num_rows
    if "deleted_rows" not in table.column_names or table.column("deleted_rows").null_count == n:
        return [None] * n
    bitmaps = (
        table.column("deleted_bitmap").to_pylist()
        if "deleted_bitmap" in table.column_names
        else [None] * n
    )
    return [
        None if r is None or b is None else DeletionVector(rows=r, bitmap=b)
        for r, b in zip(table.column("deleted_rows").to_pylist(), bitmaps, strict=True)
    ]


def live_row_count(table: pa.Table) -> int:
    """Rows of a file table or leaf that are not deleted (``num_rows`` less
    ``deleted_rows``)."""
    total = int(pc.sum(table.column("num_rows")).as_py() or 0)
    if "deleted_rows" in table.column_names:
        total -= int(pc.sum(table.column("deleted_rows")).as_py() or 0)
    return total


def _json_objects(column: pa.ChunkedArray, decoder: msgspec.json.Decoder[Any]) -> list[Any]:
    """Decoded JSON objects of a column, None where null or ``{}``."""
    if pc.all(pc.fill_null(pc.equal(column, _EMPTY_JSON), True)).as_py():
        return [None] * len(column)
    return [
        decoder.decode(raw) if raw and raw != b"{}" else None
        for raw in column.cast(pa.binary()).to_pylist()
    ]


class ReplayState(msgspec.Struct):
    """Mutable accumulator used while replaying commits over a base file set.

    The base is a version-1 file table (:data:`FILES_SCHEMA`) or a version-2 root
    (``lakelog.log.manifests.Root``, whose leaves are read only when needed). The
    commits since the base are summarized as the *tail*: ``added`` (files added and
    live, by path) and ``removed`` (paths removed since, with the partition the remove
    named): a base row is live unless its path is in either. Advancing a snapshot
    copies this state (:meth:`copy`: containers are copied, so fields added here are
    carried over) and applies the new commits: O(change).
    """

    metadata: Metadata | None
    base: Any
    """A :data:`FILES_SCHEMA` table, or a version-2 root."""
    added: dict[str, AddFile]
    removed: dict[str, dict[str, str | None]]
    """Paths removed since the base (not added again), with the remove's partition."""
    version: int
    timestamp_ms: int
    oldest_version: int = 0
    """Oldest readable version as recorded by expiry actions (0: nothing expired)."""
    app_versions: dict[str, int] = {}
    """Recorded version of each app id (``app_txn`` actions; format.md, "App transactions")."""
    app_commits: dict[str, int] = {}
    """The commit that recorded each app id's version."""
    plans: dict[str, PendingPlan] = {}
    """Pending maintenance plans (format.md, "Maintenance plans and claims"), once
    decoded: read them through :meth:`pending_plans`."""
    plans_json: msgspec.Raw | None = None
    """The base's pending plans as JSON, not decoded yet (None: decoded, in ``plans``).
    A large plan lists every file it claims, and most readers never look at plans."""
    plans_todo: list[Commit] = []
    """Commits since the base that change the plans of ``plans_json``, in order."""
    plans_load: Callable[[], bytes] | None = None
    """Reads the base's plans file (format version 4) while it is not read yet."""
    plans_file: str | None = None
    """A plans file that holds exactly the current pending plans (None: none does)."""

    @classmethod
    def start(
        cls,
        metadata: Metadata | None,
        base: Any,
        version: int,
        timestamp_ms: int,
        oldest_version: int = 0,
    ) -> ReplayState:
        return cls(metadata, base, {}, {}, version, timestamp_ms, oldest_version)

    def copy(self) -> ReplayState:
        """An independent copy (dicts, sets and lists are copied one level deep)."""
        values: dict[str, Any] = {
            name: copy.copy(value) if isinstance(value, (dict, set, list)) else value
            for name, value in msgspec.structs.asdict(self).items()
        }
        return ReplayState(**values)

    def apply(self, commit: Commit) -> None:
        for action in commit.actions:
            if isinstance(action, AddFile):
                self.added[action.path] = action
                self.removed.pop(action.path, None)
            elif isinstance(action, RemoveFile):
                # the path may also be in the base (added again after a manifest)
                was = self.added.pop(action.path, None)
                hint = action.partition or (was.partition if was is not None else {})
                self.removed[action.path] = dict(hint)
            elif isinstance(action, ExpireVersions):
                self.oldest_version = max(self.oldest_version, action.oldest_version)
            elif isinstance(action, AppTransaction):
                if action.app_version > self.app_versions.get(action.app_id, -1):
                    self.app_versions[action.app_id] = action.app_version
                    self.app_commits[action.app_id] = commit.header.version
            elif isinstance(action, Metadata):
                self.metadata = action
        claims = any(isinstance(a, (PlanClaim, PlanRelease)) for a in commit.actions)
        changes = claims or any(isinstance(a, RemoveFile) for a in commit.actions)
        if self.plans_json is not None or self.plans_load is not None:
            if changes:
                self.plans_todo.append(commit)
                self.plans_file = None
                if len(self.plans_todo) >= _MAX_DEFERRED:  # a long-lived reader: bounded
                    self.pending_plans()
        elif self.plans or claims:
            apply_plan_actions(self.plans, commit)
            if changes:
                self.plans_file = None
        self.version = commit.header.version
        self.timestamp_ms = commit.header.timestamp_ms

    def set_plans_json(self, raw: msgspec.Raw) -> None:
        """Start from a manifest's pending plans (its header's ``plans`` JSON), decoded
        only when asked for."""
        self.plans, self.plans_todo, self.plans_load, self.plans_file = {}, [], None, None
        self.plans_json = None if no_plans(raw) else raw

    def set_plans_file(self, path: str, read: Callable[[str], bytes]) -> None:
        """Start from a manifest whose pending plans are in the plans file ``path``
        (format version 4), read with ``read`` only when asked for."""
        self.plans, self.plans_todo, self.plans_json = {}, [], None
        self.plans_load, self.plans_file = (lambda: read(path)), path

    def pending_plans(self) -> dict[str, PendingPlan]:
        """The pending plans, decoding the base's and applying the commits since."""
        self._read_plans_file()
        raw = self.plans_json
        if raw is None:
            return self.plans
        plans = _PLANS_DECODER.decode(raw)
        for commit in self.plans_todo:
            apply_plan_actions(plans, commit)
        self.plans, self.plans_json, self.plans_todo = plans, None, []
        return plans

    def _read_plans_file(self) -> None:
        load = self.plans_load
        if load is not None:
            self.plans_json, self.plans_load = msgspec.Raw(load()), None

    def plans_as_json(self) -> msgspec.Raw:
        """The pending plans as a header's ``plans`` JSON (the base's bytes as they were
        when no commit since changed them)."""
        if not self.plans_todo:
            self._read_plans_file()
            if self.plans_json is not None:
                return self.plans_json
        return msgspec.Raw(msgspec.json.encode(self.pending_plans()))

    def dead(self) -> dict[str, dict[str, str | None]]:
        """Paths whose base row (if any) is no longer live, with a partition hint."""
        out = {path: a.partition for path, a in self.added.items()}
        out.update(self.removed)
        return out

    def files(self) -> pa.Table:
        """The live file set (of a :data:`FILES_SCHEMA` base): the base's rows still
        live, then the files added."""
        return self.split()[0]

    def split(self) -> tuple[pa.Table, pa.BooleanArray | None, pa.Table | None]:
        """The live file set (of a :data:`FILES_SCHEMA` base), the mask of the base rows
        it keeps (None: all), and the added files' table (None: none)."""
        base = self.base
        if not isinstance(base, pa.Table):
            raise TypeError("split() needs a version-1 base; resolve a Snapshot instead")
        keep: pa.BooleanArray | None = None
        drop = self.removed.keys() | self.added.keys()
        if drop and base.num_rows:
            hit = pc.is_in(base.column("path"), value_set=pa.array(list(drop), pa.string()))
            keep = pc.invert(hit.combine_chunks() if isinstance(hit, pa.ChunkedArray) else hit)
            base = base.filter(keep)
        if not self.added:
            return base, keep, None
        added = files_from_adds(list(self.added.values()))
        return pa.concat_tables([base, added]), keep, added


_PLANS_DECODER = msgspec.json.Decoder(dict[str, PendingPlan])


def no_plans(raw: msgspec.Raw) -> bool:
    """Whether a header's ``plans`` JSON holds no plan (``{}``)."""
    return len(memoryview(raw)) < 8 and bytes(raw).strip() in (b"", b"{}")


_MAX_DEFERRED = 32
"""Commits changing undecoded plans kept before decoding them anyway: a process that
advances one snapshot for days must not hold (and copy at every advance) them all."""


def replay(
    metadata: Metadata | None,
    base: Any,
    version: int,
    timestamp_ms: int,
    commits: Iterable[Commit],
) -> ReplayState:
    """Apply commits in order to a base file set (pure: nothing is read)."""
    state = ReplayState.start(metadata, base, version, timestamp_ms)
    for commit in commits:
        state.apply(commit)
    return state
