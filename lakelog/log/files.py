"""The live file set as a columnar Arrow table, and the pure replay of actions.

Keeping the file set columnar makes manifests cheap to read and write and a
snapshot of 100,000 files cheap to hold; :class:`DataFile` objects are built
only when asked for.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from .leaves import Leaf
    from .manifests import Root

__all__ = [
    "MAX_DEFERRED_PLAN_COMMITS",
    "ReplayState",
    "empty_files",
    "files_from_adds",
    "live_row_count",
    "replay",
    "vectors_of",
]

_FILES_SCHEMA = pa.schema(
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
"""The rows of a version-1 manifest, one per live file with JSON columns: the private
codec of that manifest (:mod:`.manifests` reads and writes it), and the file table
:func:`files_from_adds` makes. Nothing outside the log depends on it."""

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
        schema=_FILES_SCHEMA,
    )


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


class ReplayState(msgspec.Struct):
    """Mutable accumulator used while replaying commits over a base file set.

    The base is a version-2 root (``lakelog.log.manifests.Root``, whose leaves are read
    only when needed) or the typed entries of a version-1 manifest. The
    commits since the base are summarized as the *tail*: ``added`` (files added and
    live, by path) and ``removed`` (paths removed since, with the partition the remove
    named): a base row is live unless its path is in either. Advancing a snapshot
    copies this state (:meth:`copy`: containers are copied, so fields added here are
    carried over) and applies the new commits: O(change).
    """

    metadata: Metadata | None
    base: Root | Leaf | None
    """A version-2 root (leaves read when needed), the typed entries of a version-1
    manifest, or None: nothing before the first commit replayed."""
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
        base: Root | Leaf | None,
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
                if len(self.plans_todo) >= MAX_DEFERRED_PLAN_COMMITS:  # long-lived readers
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


_PLANS_DECODER = msgspec.json.Decoder(dict[str, PendingPlan])


def no_plans(raw: msgspec.Raw) -> bool:
    """Whether a header's ``plans`` JSON holds no plan (``{}``)."""
    return len(memoryview(raw)) < 8 and bytes(raw).strip() in (b"", b"{}")


MAX_DEFERRED_PLAN_COMMITS = 32
"""Commits changing undecoded plans kept before decoding them anyway: a process that
advances one snapshot for days must not hold (and copy at every advance) them all."""


def replay(
    metadata: Metadata | None,
    base: Root | Leaf | None,
    version: int,
    timestamp_ms: int,
    commits: Iterable[Commit],
) -> ReplayState:
    """Apply commits in order to a base file set (pure: nothing is read)."""
    state = ReplayState.start(metadata, base, version, timestamp_ms)
    for commit in commits:
        state.apply(commit)
    return state


def empty_files() -> pa.Table:
    """The file table of no files (the replay's columns, no rows)."""
    return _FILES_SCHEMA.empty_table()
