"""Pending maintenance plans: the state ``claim`` and ``release`` actions build.

A maintenance run claims the files of its groups on the log before rewriting them
(:class:`~lakelog.log.actions.PlanClaim`), and releases them in its rewrite commits
(:class:`~lakelog.log.actions.PlanRelease`). Replaying the log keeps, per pending plan,
who runs it, under which lease, and its groups not yet released. The rules (and why a
claim never decides whether a commit lands) are in ``docs/format.md``, "Maintenance
plans and claims". Pure: nothing here reads storage.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from .actions import Commit, PlanClaim, PlanRelease, RemoveFile

__all__ = ["PendingPlan", "apply_plan_actions", "claimed_paths"]


class PendingPlan(msgspec.Struct, kw_only=True):
    """A plan whose claim has not ended: who runs it, under which lease, what is left."""

    plan_id: str
    operation: str
    owner: str
    lease_id: str
    claim_version: int
    """The version of the plan's latest ``claim``."""
    claimed_ms: int
    groups: dict[str, list[str]]
    """Pending groups: group id to the paths of its source files."""

    def paths(self) -> set[str]:
        return {p for paths in self.groups.values() for p in paths}


def claimed_paths(plans: Iterable[PendingPlan]) -> set[str]:
    """Every source path of the pending groups of ``plans``."""
    return {p for plan in plans for paths in plan.groups.values() for p in paths}


def apply_plan_actions(plans: dict[str, PendingPlan], commit: Commit) -> None:
    """Apply one commit's effect on the pending plans (format.md's rules 1-5).

    ``plans`` is changed in place, but a :class:`PendingPlan` in it never is: a plan that
    changes is replaced by a new one, so a snapshot's copy of the dict (one level deep)
    keeps its own plans."""
    removed: set[str] = set()
    for a in commit.actions:
        if isinstance(a, PlanClaim):
            _drop_groups(plans, {p for g in a.groups for p in g.paths}, keep=a.plan_id)
            plans[a.plan_id] = PendingPlan(
                plan_id=a.plan_id,
                operation=a.operation,
                owner=a.owner,
                lease_id=a.lease_id,
                claim_version=commit.header.version,
                claimed_ms=a.claimed_ms,
                groups={g.group_id: list(g.paths) for g in a.groups},
            )
        elif isinstance(a, PlanRelease):
            plan = plans.get(a.plan_id)
            if plan is not None:
                gone = set(a.group_ids)
                left = {} if a.done else {g: p for g, p in plan.groups.items() if g not in gone}
                plans[a.plan_id] = msgspec.structs.replace(plan, groups=left)
        elif isinstance(a, RemoveFile) and plans:
            removed.add(a.path)
    if removed:
        _drop_groups(plans, removed)
    for pid in [pid for pid, plan in plans.items() if not plan.groups]:
        del plans[pid]


def _drop_groups(plans: dict[str, PendingPlan], paths: set[str], *, keep: str = "") -> None:
    """Drop every pending group (of plans other than ``keep``) holding one of ``paths``."""
    for pid, plan in list(plans.items()):
        if pid == keep:
            continue
        hit = [g for g, held in plan.groups.items() if not paths.isdisjoint(held)]
        if hit:
            left = {g: p for g, p in plan.groups.items() if g not in hit}
            plans[pid] = msgspec.structs.replace(plan, groups=left)
