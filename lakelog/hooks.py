"""Post-commit hooks: work after a commit landed, which never decides whether it did.

Once a transaction's put landed (and no expiry withdrew it), the transaction runs
each hook of :data:`HOOKS`, in order, once, on a :class:`Landed` context. A hook that
raises is logged as a warning naming the hook and how its work catches up, and the
next hook runs: the commit result still says the commit landed. Work a hook misses
is redone later by design (the next version due a manifest writes one; the next
writer, or ``lakelog delta-view sync``, writes the Delta view's missing entries).

Checks that must refuse a commit are not hooks: they run before the put (for the
Delta view, :func:`lakelog.interop.delta.view.check_view_metadata`).

Hooks are registered here, in one place. A hook above the log (the Delta view) is a
:class:`LazyHook`: named by module path and imported only when the table turns it on
with a table property. (The Delta view's check before the put, above, is imported by
the transaction when a commit carries a ``metadata`` action on a table with the view.)

Auto-compaction (``lakelog.auto_compact``) is post-commit work too, but not a hook: it
runs at the writer's entry point once the commit returned
(:func:`lakelog.maintenance.auto.run_auto_compaction`), so that its outcome, an
:class:`AutoCompaction`, can ride on the write's result; it is declared here, beside
the hooks, because :class:`~lakelog.transaction.CommitResult` carries it.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Literal, Protocol

from .log.actions import Commit, Metadata
from .log.checkpoint import write_checkpoint
from .log.snapshot import Snapshot, load_snapshot
from .properties import get_bool, get_int
from .storage import Storage

__all__ = [
    "HOOKS",
    "AutoCompaction",
    "AutoStatus",
    "LARGE_COMMIT_BYTES",
    "Landed",
    "LazyHook",
    "ManifestHook",
    "PostCommitHook",
    "run_hooks",
]

log = logging.getLogger("lakelog")

LARGE_COMMIT_BYTES = 1 << 20
"""A commit file this large gets a manifest at its version whatever the interval
(``docs/format.md``, "Manifests (version 1)"): until the next manifest every cold open
replays it (a claim of a million files is about 38 MiB of JSON, a second to decode)."""


@dataclass
class Landed:
    """What a post-commit hook gets: the commit that landed, where, and the table as of it."""

    storage: Storage
    commit: Commit
    snapshot: Snapshot | None
    """The table as of the commit, built by the committer from its base and the winners;
    None if that failed (:meth:`fresh` loads it). A hook may replace it with the same
    version resolved from more (the manifest it just wrote), for the hooks after it."""
    read_snapshot: Snapshot | None
    """The snapshot the transaction read (None for a create)."""
    encoded_bytes: int
    """Size of the commit file."""

    @property
    def version(self) -> int:
        return self.commit.header.version

    @property
    def metadata(self) -> Metadata | None:
        """The table's metadata as of the commit, as far as known without a read."""
        if self.snapshot is not None:
            return self.snapshot.metadata
        own = next((a for a in self.commit.actions if isinstance(a, Metadata)), None)
        if own is None and self.read_snapshot is not None:
            return self.read_snapshot.metadata
        return own

    def fresh(self) -> Snapshot:
        """The table as of the commit: :attr:`snapshot`, or loaded from the log."""
        if self.snapshot is None or self.snapshot.version != self.version:
            self.snapshot = load_snapshot(self.storage, self.version)
        return self.snapshot


AutoStatus = Literal["compacted", "below_threshold", "lost", "failed", "running"]


@dataclass(frozen=True)
class AutoCompaction:
    """What the auto-compaction after a data commit did (``result.auto_compaction``).

    The commit it follows (``trigger_version``) landed whatever this says. ``status``:

    * ``compacted``: its ``AUTO COMPACT`` (or ``AUTO OPTIMIZE``) commits landed
      (``versions``, the last at ``version``); when a later round or group failed
      after them, ``error`` says what and ``failed_groups`` how many (what landed stays
      landed);
    * ``below_threshold``: no size tier of a touched partition had ``min_files`` small
      files (or what did would not fit ``lakelog.auto_compact.max_bytes``); nothing
      written;
    * ``lost``: it lost every group to a concurrent run or commit (a user's compaction
      claimed the files first, a delete removed one); nothing written, the files are
      the other run's;
    * ``failed``: it raised ``error``; nothing it wrote is live (its claim, if it took
      one, is released; a killed run's expires with its lease and stays resumable);
    * ``running`` (``lakelog.auto_compact.mode=async``): it runs in the background (a
      worker process, or a thread); :meth:`wait` returns its final outcome.
    """

    status: AutoStatus
    trigger_version: int
    mode: Literal["inline", "async"] = "inline"
    version: int | None = None
    """The version of its last rewrite commit (``compacted``)."""
    versions: tuple[int, ...] = ()
    """Every rewrite commit it landed, in order."""
    partitions: int = 0
    """Partitions the trigger commit touched that it looked at."""
    files_removed: int = 0
    files_added: int = 0
    bytes_rewritten: int = 0
    abandoned_groups: int = 0
    failed_groups: int = 0
    """Groups whose rewrite raised (their files are left out of the next runs for a
    while: :data:`lakelog.maintenance.auto.BACKOFF_S`)."""
    duration_s: float = 0.0
    error: str | None = None
    """The error of a ``failed`` run or of a failure after work that landed (type and
    message), or why a run was ``lost``."""

    @classmethod
    def running(cls, trigger_version: int, future: Future[AutoCompaction]) -> AutoCompaction:
        """The outcome of an async run that has not finished; :meth:`wait` gets its end."""
        out = cls(status="running", trigger_version=trigger_version, mode="async")
        object.__setattr__(out, "_future", future)  # not a field: to_dict/asdict skip it
        return out

    def wait(self, timeout: float | None = None) -> AutoCompaction:
        """The final outcome: this one, unless it is ``running``; then the background
        run's, waiting at most ``timeout`` seconds (``TimeoutError`` after that)."""
        future: Future[AutoCompaction] | None = getattr(self, "_future", None)
        return self if future is None else future.result(timeout)


class PostCommitHook(Protocol):
    """Work after a commit landed. ``run`` may raise: the commit stays landed."""

    @property
    def name(self) -> str:
        """Short name, in the warning when the hook fails (e.g. ``delta-view``)."""
        ...

    @property
    def on_failure(self) -> str:
        """How the hook's work is caught up when it failed, for the warning."""
        ...

    def run(self, landed: Landed) -> None: ...


@dataclass(frozen=True)
class ManifestHook:
    """A manifest at the landed version when it is due one: every
    ``lakelog.manifest_interval`` versions, and after a commit of
    :data:`LARGE_COMMIT_BYTES` or more (every cold open would replay it until then).
    Incremental: only what changed since the last manifest is written."""

    name: str = "manifest"
    on_failure: str = "a later version due one writes the next manifest"

    def run(self, landed: Landed) -> None:
        snap = landed.snapshot
        if snap is None:  # a manifest is an optimization: not worth a load here
            return
        due = snap.version % get_int(snap.properties, "lakelog.manifest_interval") == 0
        if due or landed.encoded_bytes >= LARGE_COMMIT_BYTES:
            leaf_files = get_int(snap.properties, "lakelog.manifest.leaf_files")
            landed.snapshot = write_checkpoint(snap, leaf_files=leaf_files)


@dataclass(frozen=True)
class LazyHook:
    """A hook above the log: ``target`` (``"module:function"``, the function taking the
    :class:`Landed` context) is imported and called only for tables whose boolean
    ``property`` is on."""

    name: str
    target: str
    property: str
    on_failure: str

    def run(self, landed: Landed) -> None:
        metadata = landed.metadata
        if metadata is None or not get_bool(metadata.properties, self.property):
            return
        module, _, attr = self.target.partition(":")
        hook: Callable[[Landed], None] = getattr(importlib.import_module(module), attr)
        hook(landed)


HOOKS: tuple[PostCommitHook, ...] = (
    ManifestHook(),
    LazyHook(
        name="delta-view",
        target="lakelog.interop.delta.view:post_commit",
        property="lakelog.delta_view",
        on_failure="the next writer or `lakelog delta-view sync` writes its entry",
    ),
)
"""Every post-commit hook, in the order they run: the manifest first, so the hooks
after it get the snapshot resolved from it."""


def run_hooks(landed: Landed, hooks: Sequence[PostCommitHook]) -> None:
    """Run ``hooks`` in order on ``landed``; a hook's error is logged, never raised."""
    for hook in hooks:
        try:
            hook.run(landed)
        except Exception as e:  # noqa: BLE001 - the commit landed; the hook's work catches up
            log.warning(
                "commit %d landed but its post-commit hook %s failed (%s): %s: %s",
                landed.version,
                hook.name,
                hook.on_failure,
                type(e).__name__,
                e,
            )
