"""Plan + group results -> one atomic rewrite commit (the only log writer for rewrites).

The commit removes every source of the groups and adds their outputs, all
with ``data_change=false``, as a ``rewrite`` transaction on top of the plan's
read version. Concurrent appends are rebased over. When a concurrent commit
removed a source of some group (another compaction, a delete, an overwrite),
that group is *abandoned*: its outputs are deleted and it is reported, and the
other groups still commit: the transaction's rebuild step drops them and plans the
commit again on the winners (:data:`lakelog.transaction.Rebuild`), so there is no retry
loop here. The commit header's metrics always describe the actions that land.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..conflict_rules import check_conflicts
from ..errors import CommitConflictError, InvalidArgumentError
from ..leases import Lease
from ..log.actions import Action, Commit, RemoveFile
from ..log.snapshot import Snapshot
from ..storage import Storage
from ..transaction import CommitResult, Replan
from .claims import release_action
from .groups import FileGroup, GroupResult, RewritePlan

if TYPE_CHECKING:
    from ..core.handle import TableHandle

__all__ = ["commit_rewrite", "delete_outputs"]

log = logging.getLogger("lakelog")


def delete_outputs(storage: Storage, results: Sequence[GroupResult]) -> None:
    """Delete files written for groups that will not be committed (best effort)."""
    paths = [a.path for r in results for a in r.added]
    try:
        storage.delete(paths)
    except Exception as e:  # noqa: BLE001 - unreferenced files are vacuum's to remove
        log.warning("could not delete %d uncommitted rewrite outputs: %r", len(paths), e)


def _actions(
    kept: Mapping[str, tuple[FileGroup, GroupResult]], now_ms: int, plan_id: str | None
) -> list[Action]:
    actions: list[Action] = []
    for group, result in kept.values():
        actions.extend(f.to_remove(deletion_ms=now_ms, data_change=False) for f in group.files)
        actions.extend(result.added)
    if plan_id is not None:
        actions.append(release_action(plan_id, kept))
    return actions


def _metrics(kept: Mapping[str, tuple[FileGroup, GroupResult]]) -> dict[str, Any]:
    return {
        "num_groups": len(kept),
        "num_removed_files": sum(len(g.files) for g, _ in kept.values()),
        "num_added_files": sum(len(r.added) for _, r in kept.values()),
        "removed_bytes": sum(g.total_bytes for g, _ in kept.values()),
        "added_bytes": sum(r.bytes_written for _, r in kept.values()),
        "num_rows": sum(r.num_rows for _, r in kept.values()),
    }


def _lost_groups(kept: Mapping[str, tuple[FileGroup, GroupResult]], removed: set[str]) -> list[str]:
    return [gid for gid, (g, _) in kept.items() if any(f.path in removed for f in g.files)]


def commit_rewrite(
    table: TableHandle,
    plan: RewritePlan,
    results: Sequence[GroupResult],
    *,
    operation: str = "COMPACT",
    parameters: Mapping[str, Any] | None = None,
    read_snapshot: Snapshot | None = None,
    lease: Lease | None = None,
    plan_id: str | None = None,
) -> tuple[CommitResult | None, list[str]]:
    """Commit the results of some groups of ``plan`` as one rewrite commit.

    Returns the commit (``None`` if nothing was left to commit) and the ids of
    the groups abandoned because a concurrent commit removed one of their
    sources; their outputs are deleted. ``read_snapshot`` defaults to the
    snapshot at ``plan.read_version``; a run that claimed its groups passes the
    snapshot of its claim (:class:`.claims.Claim`), checked up to then. Any other
    conflict (a concurrent schema or property change) deletes every output and raises
    :class:`~lakelog.errors.CommitConflictError`. ``lease`` is the writer lease the
    outputs were written under (checked before every put). ``plan_id``: the run's claim,
    whose groups the commit releases as it lands them (:mod:`.claims`).
    """
    groups = {g.group_id: g for g in plan.groups}
    kept: dict[str, tuple[FileGroup, GroupResult]] = {}
    for r in results:
        if r.group_id not in groups:
            raise InvalidArgumentError(
                f"expected results of groups of this plan, found group {r.group_id!r} that "
                f"the plan (read version {plan.read_version}) does not have"
            )
        if r.group_id in kept:
            raise InvalidArgumentError(f"expected one result per group, found {r.group_id!r} twice")
        kept[r.group_id] = (groups[r.group_id], r)
    if not kept:
        return None, []
    snap = read_snapshot if read_snapshot is not None else table.snapshot(plan.read_version)
    if snap.version < plan.read_version or snap.table_id != plan.table_id:
        raise InvalidArgumentError(
            f"expected the snapshot the plan was made from, or its claim's (table "
            f"{plan.table_id}, version {plan.read_version} or later), found table "
            f"{snap.table_id} at version {snap.version}"
        )
    abandoned: list[str] = []

    def abandon(ids: list[str], version: int | None) -> None:
        delete_outputs(table.storage, [kept[i][1] for i in ids])
        for i in ids:
            del kept[i]
        abandoned.extend(ids)
        log.info(
            "%s: abandoned %d group(s) whose sources version %s removed concurrently: %s",
            operation,
            len(ids),
            version,
            ids,
        )

    def rebuild(fresh: Snapshot, winners: Sequence[Commit] | None) -> Replan:
        # plan the commit again on the snapshot the winners made: without the groups
        # that lost a source to them (their outputs deleted); what is left must still
        # rebase over them (a metadata change conflicts)
        lost = _lost_groups(
            kept, _removed_by(winners) if winners is not None else _gone(kept, snap, fresh)
        )
        if lost:
            abandon(lost, fresh.version)
        if not kept:
            return Replan([])
        actions = _actions(kept, int(time.time() * 1000), plan_id)
        if winners is not None:
            check_conflicts(kind="rewrite", actions=actions, winners=winners)
        return Replan(actions, metrics=_metrics(kept))

    try:
        result = table.commit(
            _actions(kept, int(time.time() * 1000), plan_id),
            operation=operation,
            kind="rewrite",
            read_snapshot=snap,
            parameters=parameters,
            metrics=_metrics(kept),
            rebuild=rebuild,
            lease=lease,
        )
    except CommitConflictError:
        delete_outputs(table.storage, [r for _, r in kept.values()])
        raise
    return (None if result.skipped else result), abandoned


def _removed_by(winners: Sequence[Commit]) -> set[str]:
    """Paths the winners removed (a new deletion vector removes and adds a path)."""
    return {a.path for w in winners for a in w.actions if isinstance(a, RemoveFile)}


def _gone(
    kept: Mapping[str, tuple[FileGroup, GroupResult]], read: Snapshot, fresh: Snapshot
) -> set[str]:
    """Sources no longer live in ``fresh`` as they were in ``read`` (removed, or given a
    new deletion vector): after the winners since ``read`` were expired unread. A
    metadata change meanwhile conflicts."""
    if fresh.metadata != read.metadata:
        raise CommitConflictError(
            f"expected no concurrent table change, found the metadata (schema, "
            f"partitioning or properties) changed between version {read.version} and "
            f"{fresh.version}, and the versions between expired. Plan the rewrite again.",
            winning_version=fresh.version,
        )
    sources = {f.path for g, _ in kept.values() for f in g.files}
    before = {f.path: f.deleted for f in read.files() if f.path in sources}
    now = {f.path: f.deleted for f in fresh.files() if f.path in sources}
    return {p for p in sources if p not in now or now[p] != before.get(p)}
