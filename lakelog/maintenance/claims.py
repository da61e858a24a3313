"""Plans on the log: a run claims its groups' files before rewriting them.

Before a run (compaction, clustering; embedded or on Spark) rewrites anything it
writes its plan to ``_lakelog/_plans/<plan id>.json`` and commits a ``claim`` of
each group's files under its writer lease (:func:`claim_groups`). Planners of other
runs skip files under a live claim (:func:`claimed_files`), so concurrent runs pick
disjoint files instead of one of them losing at commit time after all its work.
Each rewrite commit releases the groups it lands (:func:`release_action`); a run that
ends with groups it did not land releases the rest (:func:`release_rest`). A crashed
run's lease expires, its files become eligible again, and :func:`resume` (in
:mod:`.resume`) can finish what it left. Claims decide only what a planner
considers: the commit rules alone decide what lands (``docs/format.md``,
"Maintenance plans and claims").
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import CommitConflictError, InvalidArgumentError, LakelogError
from ..leases import Lease, LeaseRecord, holder_gone, read_leases
from ..log.actions import Action, ClaimGroup, Commit, PlanClaim, PlanRelease, RemoveFile
from ..log.commits import LOG_DIR, read_commit
from ..log.format import CLAIMS
from ..log.plans import PendingPlan, claimed_paths
from ..log.snapshot import Snapshot
from ..properties import get_bool
from ..storage import Storage
from .groups import FileGroup, RewritePlan, stale_groups

if TYPE_CHECKING:
    from ..core.handle import TableHandle

__all__ = [
    "PLAN_DIR",
    "Claim",
    "PlanStatus",
    "claim_groups",
    "claimed_files",
    "claims_enabled",
    "live_plan_ids",
    "plan_path",
    "plan_statuses",
    "release_action",
    "release_rest",
]

log = logging.getLogger("lakelog")

PLAN_DIR = f"{LOG_DIR}/_plans"


def plan_path(plan_id: str) -> str:
    """Root-relative path of a plan file."""
    return f"{PLAN_DIR}/{plan_id}.json"


def claims_enabled(snapshot: Snapshot) -> bool:
    """Whether runs on this table claim their files: the table declares format version 3
    or later and ``lakelog.maintenance.claims`` is on."""
    return CLAIMS.declared_by(snapshot.metadata.format_version) and get_bool(
        snapshot.properties, "lakelog.maintenance.claims"
    )


def _live_leases(storage: Storage, now_ms: float | None = None) -> dict[str, LeaseRecord]:
    now = time.time() * 1000 if now_ms is None else now_ms
    return {r.lease_id: r for r in read_leases(storage) if now < r.expires_ms}


def live_plan_ids(storage: Storage, plans: Mapping[str, PendingPlan]) -> set[str]:
    """Ids of the pending plans whose claim is live: their lease file exists and has not
    expired, and its holder is not known dead (:func:`~lakelog.leases.holder_gone`).
    Reads the lease files only when there are pending plans."""
    if not plans:
        return set()
    leases = _live_leases(storage)
    return {
        pid
        for pid, p in plans.items()
        if p.lease_id in leases and not holder_gone(leases[p.lease_id])
    }


def claimed_files(storage: Storage, snapshot: Snapshot) -> frozenset[str]:
    """Paths under a live claim as of ``snapshot``: what planners skip."""
    plans = snapshot.plans
    live = live_plan_ids(storage, plans)
    return frozenset(claimed_paths(plans[pid] for pid in live))


# -- claiming ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """What a run claimed: its plan id, the snapshot its claim landed at and the groups
    it may rewrite."""

    plan_id: str
    snapshot: Snapshot | None
    """The table as of the claim (None: nothing was claimed). Every source of ``groups``
    is live in it and the metadata is the plan's, so the run's rewrite commits may use
    it as their read snapshot: the checks between the plan's read version and the claim
    were made here, by the same rules as a rebase."""
    groups: list[FileGroup]
    dropped: list[str]
    """Groups not claimed: a live claim or a concurrent commit held or removed a source."""


class _NothingLeft(CommitConflictError):
    """Raised inside the rebase callback: every group lost a source to the winners."""


def lost_sources(
    storage: Storage, groups: Sequence[FileGroup], version: int, latest: Snapshot
) -> set[str]:
    """Ids of the groups with a source not live in ``latest`` as the plan read it at
    ``version``: from the removes of the commits in between (O(change); a new deletion
    vector is a remove and an add of the same path), or, if one of those was expired,
    by comparing each source and its vector with ``latest``
    (:func:`.groups.stale_groups`)."""
    removed: set[str] = set()
    for v in range(version + 1, latest.version + 1):
        try:
            commit = read_commit(storage, v)
        except (FileNotFoundError, LakelogError):
            return set(stale_groups(latest, groups))
        removed.update(a.path for a in commit.actions if isinstance(a, RemoveFile))
    return {g.group_id for g in groups if not removed.isdisjoint(g.paths)}


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _taken(winners: Sequence[Commit]) -> set[str]:
    """Paths the winners claimed or removed."""
    out: set[str] = set()
    for w in winners:
        for a in w.actions:
            if isinstance(a, RemoveFile):
                out.add(a.path)
            elif isinstance(a, PlanClaim):
                out.update(p for g in a.groups for p in g.paths)
    return out


def claim_groups(
    table: TableHandle,
    plan: RewritePlan,
    groups: Sequence[FileGroup],
    *,
    read_snapshot: Snapshot,
    lease: Lease,
    operation: str,
    plan_id: str | None = None,
) -> Claim:
    """Write the plan file and commit a ``claim`` of ``groups`` under ``lease``.

    Groups with a source under another live claim, or removed, in the latest version
    are not claimed, nor are those a concurrent commit claims or removes before this
    one lands. ``plan_id``: resume that pending plan (its claim is replaced); default,
    a new plan.
    """
    resuming = plan_id is not None
    pid = plan_id if plan_id is not None else uuid.uuid4().hex
    latest = table.snapshot()
    if latest.metadata != read_snapshot.metadata:
        raise CommitConflictError(
            f"expected the table's metadata of version {read_snapshot.version}, which the "
            f"{operation} plan was made from, found it changed by version {latest.version} "
            f"(schema, partitioning or properties); plan again.",
            winning_version=latest.version,
        )
    others = {k: v for k, v in latest.plans.items() if k != pid}
    busy = claimed_paths(others[k] for k in live_plan_ids(table.storage, others))
    stale = lost_sources(table.storage, groups, plan.read_version, latest)
    keep = [g for g in groups if g.group_id not in stale and busy.isdisjoint(g.paths)]
    dropped = [g.group_id for g in groups if g not in keep]
    if not keep:
        return Claim(pid, None, [], dropped)
    if not resuming:
        table.storage.put_if_absent(plan_path(pid), msgspec.json.encode(plan))
    kept = {g.group_id: g for g in keep}

    def action() -> PlanClaim:
        return PlanClaim(
            plan_id=pid,
            operation=operation,
            owner=_owner(),
            lease_id=lease.lease_id,
            claimed_ms=int(time.time() * 1000),
            groups=[ClaimGroup(group_id=g.group_id, paths=g.paths) for g in kept.values()],
        )

    def rebase(winners: Sequence[Commit], actions: list[Action]) -> list[Action]:
        taken = _taken(winners)
        for gid in [gid for gid, g in kept.items() if not taken.isdisjoint(g.paths)]:
            del kept[gid]
            dropped.append(gid)
        if not kept:
            raise _NothingLeft(
                "every group lost a source", winning_version=winners[-1].header.version
            )
        return [action()]

    try:
        result = table.commit(
            [action()],
            operation="CLAIM",
            kind="append",
            read_snapshot=latest,
            parameters={"plan_id": pid, "operation": operation, "resume": resuming},
            metrics={
                "num_groups": len(kept),
                "num_files": sum(len(g.files) for g in kept.values()),
            },
            rebase=rebase,
        )
    except _NothingLeft:
        return Claim(pid, None, [], dropped)
    claimed = table.snapshot(result.version)
    # The rebase saw every winner unless the claim's base was expired while it waited:
    # the transaction then went on from the latest version without them (claims only
    # add). Check again from ``latest``, so the rewrites never build on a version where
    # a source was removed or got a new deletion vector.
    for gid in lost_sources(table.storage, list(kept.values()), latest.version, claimed):
        del kept[gid]
        dropped.append(gid)
    log.info(
        "%s: plan %s claimed %d group(s) at version %d", operation, pid, len(kept), result.version
    )
    return Claim(pid, claimed, list(kept.values()), dropped)


def release_action(plan_id: str, group_ids: Iterable[str], *, done: bool = False) -> PlanRelease:
    """The ``release`` a rewrite commit carries for the groups it lands."""
    return PlanRelease(plan_id=plan_id, group_ids=sorted(group_ids), done=done)


def release_rest(
    table: TableHandle, claim: Claim, landed: Iterable[str], *, operation: str
) -> None:
    """End the plan's claim on the groups the run did not land (abandoned, failed): one
    ``release`` commit with ``done``, only when such groups are left pending."""
    pending = table.snapshot().plans.get(claim.plan_id)
    if pending is None or not set(pending.groups) - set(landed):
        return
    try:
        table.commit(
            [release_action(claim.plan_id, [], done=True)],
            operation="RELEASE",
            kind="append",
            parameters={"plan_id": claim.plan_id, "operation": operation},
        )
    except LakelogError as e:  # the claim then just expires with the lease
        log.warning("%s: could not release plan %s: %s", operation, claim.plan_id, e)


# -- listing ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanStatus:
    """A pending plan as ``lakelog plans`` shows it."""

    plan_id: str
    operation: str
    owner: str
    running: bool
    """Its claim is live (lease live, its holder not known dead): the run is
    (or may be) still going."""
    claim_version: int
    claimed_ms: int
    groups: int
    files: int
    lease_expires_ms: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan_id": self.plan_id,
            "operation": self.operation,
            "owner": self.owner,
            "state": "running" if self.running else "stopped",
            "claim_version": self.claim_version,
            "claimed_ms": self.claimed_ms,
            "groups": self.groups,
            "files": self.files,
            "lease_expires_ms": self.lease_expires_ms,
        }


def plan_statuses(storage: Storage, snapshot: Snapshot) -> list[PlanStatus]:
    """The pending plans of ``snapshot``, oldest claim first."""
    plans = snapshot.plans
    leases = _live_leases(storage) if plans else {}
    out = []
    for p in sorted(plans.values(), key=lambda p: (p.claim_version, p.plan_id)):
        lease = leases.get(p.lease_id)
        if lease is not None and holder_gone(lease):
            lease = None
        out.append(
            PlanStatus(
                plan_id=p.plan_id,
                operation=p.operation,
                owner=p.owner,
                running=lease is not None,
                claim_version=p.claim_version,
                claimed_ms=p.claimed_ms,
                groups=len(p.groups),
                files=sum(len(v) for v in p.groups.values()),
                lease_expires_ms=None if lease is None else lease.expires_ms,
            )
        )
    return out


def pending_plan(storage: Storage, snapshot: Snapshot, plan_id: str) -> PendingPlan:
    """The pending plan ``plan_id``, refused if unknown or still running."""
    plans = snapshot.plans
    plan = plans.get(plan_id)
    if plan is None:
        known = ", ".join(sorted(plans)) or "none"
        raise InvalidArgumentError(
            f"expected the id of a pending plan of {storage.uri}, found {plan_id!r}; pending "
            f"plans: {known}. A plan stops being pending once all its groups landed or their "
            f"files were rewritten by another run (list them with `lakelog plans URI`)."
        )
    if plan_id in live_plan_ids(storage, {plan_id: plan}):
        raise InvalidArgumentError(
            f"expected plan {plan_id} to have stopped, found its run ({plan.operation} on "
            f"{plan.owner}) still holding a live lease; wait for it to finish, or for its "
            f"lease to expire (lakelog.lease.ttl_seconds) if it crashed, then resume."
        )
    return plan
