"""What ``maintain`` chose, ran and left over the budget: :class:`MaintainReport` (what
``Table.maintain`` returns and ``lakelog maintain --json`` prints) and its
:class:`ActionResult` per action."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..report import human_bytes
from .model import Candidate

__all__ = ["ActionResult", "MaintainReport", "describe_partition"]


@dataclass(frozen=True)
class ActionResult:
    """One ranked action: the model's candidate, and what running it did."""

    candidate: Candidate
    status: str
    """``planned`` (a dry run), ``done``, ``nothing`` (ran, found nothing to do) or
    ``failed``."""
    rewritten_bytes: int = 0
    version: int | None = None
    """The version its commit made, if any."""
    error: str | None = None

    @property
    def kind(self) -> str:
        return self.candidate.kind

    @property
    def partition(self) -> dict[str, str | None] | None:
        p = self.candidate.partition
        return None if p is None else dict(p)

    @property
    def score(self) -> float:
        return self.candidate.score

    def to_dict(self) -> dict[str, Any]:
        out = self.candidate.to_dict()
        out.update(status=self.status, rewritten_bytes=self.rewritten_bytes)
        if self.version is not None:
            out["version"] = self.version
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class MaintainReport:
    """What ``maintain`` chose (``actions``, ranked) and left over the budget (``left``)."""

    dry_run: bool
    budget_bytes: int | None
    actions: list[ActionResult]
    left: list[Candidate] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    unread: dict[str, str] = field(default_factory=dict)
    """Tables left out because their statistics could not be read (name -> error)."""
    duration_s: float = 0.0

    @property
    def planned_bytes(self) -> int:
        return sum(a.candidate.rewrite_bytes for a in self.actions)

    @property
    def rewritten_bytes(self) -> int:
        return sum(a.rewritten_bytes for a in self.actions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "budget_bytes": self.budget_bytes,
            "tables": list(self.tables),
            "planned_bytes": self.planned_bytes,
            "rewritten_bytes": self.rewritten_bytes,
            "actions": [a.to_dict() for a in self.actions],
            "left": [c.to_dict() for c in self.left],
            "unread": dict(self.unread),
            "duration_s": round(self.duration_s, 6),
        }

    def __str__(self) -> str:
        several = len(self.tables) > 1
        head = ["#", "kind", *(["table"] if several else []), "partition", "score"]
        head += ["rewrite", "status", "reason"]
        rows = [head]
        for i, a in enumerate(self.actions, 1):
            c = a.candidate
            rows.append(
                [
                    str(i),
                    c.kind,
                    *([c.table] if several else []),
                    describe_partition(c),
                    f"{c.score:.3g}",
                    human_bytes(c.rewrite_bytes),
                    a.status,
                    c.reason,
                ]
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
        lines = [
            "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[-1]
            for r in rows
        ]
        verb = "would run" if self.dry_run else "ran"
        budget = (
            "no budget" if self.budget_bytes is None else f"budget {human_bytes(self.budget_bytes)}"
        )
        n = len(self.actions)
        summary = f"maintain {verb} {n} action{'' if n == 1 else 's'} ({budget}, "
        summary += f"{human_bytes(self.planned_bytes)} to rewrite)"
        if not self.actions:
            summary = (
                "maintain: nothing within the budget" if self.left else "maintain: nothing to do"
            )
            lines = []
        for c in self.left:
            where = " ".join([*([c.table] if several else []), describe_partition(c)])
            lines.append(
                f"left over the budget: {c.kind} {where} "
                f"(score {c.score:.3g}, {human_bytes(c.rewrite_bytes)})"
            )
        lines += [f"left out, unreadable: {n}: {e}" for n, e in self.unread.items()]
        return "\n".join([summary, *lines])


def describe_partition(c: Candidate) -> str:
    if c.partition is None:
        return "-"
    return ",".join(f"{k}={v}" for k, v in c.partition.items())
