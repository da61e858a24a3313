"""The result of a maintenance run (compaction, clustering), and its log line.

File counts and bytes describe the table as of the plan's read version and
the effect of this run on it: ``after = before - removed + added``. Files
appended concurrently are not counted, so the figures are the same whether
ingest ran beside the compaction or not. In a dry run, ``compacted_file_count``
and ``rewritten_bytes`` are what *would* be rewritten and nothing is written.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import MaintenanceFailedError
from .groups import RewritePlan

__all__ = ["MaintenanceReport", "human_bytes", "raise_if_all_failed", "rewrite_report"]


def human_bytes(n: float) -> str:
    """A byte count for people: ``512 B``, ``1.5 KiB``, ... ``2.0 TiB`` (every report and
    the command line write sizes this way)."""
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(x) < 1024:
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x:.1f} TiB"


log = logging.getLogger("lakelog")

_VERBS = {"compact": ("compact", "compacted"), "optimize": ("cluster", "clustered")}
"""What a report says a run does and did, by operation."""


@dataclass
class MaintenanceReport:
    """What a maintenance run planned, rewrote and committed."""

    operation: str
    dry_run: bool
    read_version: int
    before_file_count: int
    before_total_bytes: int
    after_file_count: int
    after_total_bytes: int
    estimated_after_file_count: int
    compacted_file_count: int
    rewritten_bytes: int
    written_bytes: int
    output_file_count: int
    compression_codec: str
    planned_groups: list[list[str]]
    version: int | None = None
    commits: list[int] = field(default_factory=list)
    retries: int = 0
    abandoned_groups: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    paced_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    """Operation-specific fields (e.g. clustering columns), merged into :meth:`to_dict`."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        extra = out.pop("extra")
        out.update(extra)
        return out

    def summary(self) -> str:
        """The one-line summary that is also logged."""
        if not self.planned_groups:
            return (
                f"{'dry run: ' if self.dry_run else ''}nothing to {self.operation}: no file needs "
                f"rewriting; file count {self.before_file_count}, bytes "
                f"{self.before_total_bytes} (nothing written)"
            )
        verb, done = _VERBS.get(self.operation, (self.operation, f"{self.operation}d"))
        if self.dry_run:
            return (
                f"dry run: would {verb} {self.compacted_file_count} files in "
                f"{len(self.planned_groups)} groups; file count {self.before_file_count}->"
                f"{self.estimated_after_file_count} (estimated); bytes "
                f"{self.before_total_bytes}->? (nothing written)"
            )
        text = (
            f"{done} {self.compacted_file_count} files; file count "
            f"{self.before_file_count}->{self.after_file_count}; bytes "
            f"{self.before_total_bytes}->{self.after_total_bytes}"
        )
        failed = self.failed_groups
        conflicted = [g for g in self.abandoned_groups if g not in failed]
        if conflicted:
            text += (
                f"; abandoned {len(conflicted)} groups (claimed by another run, or sources "
                f"removed concurrently)"
            )
        if failed:
            gid, cause = next(iter(failed.items()))
            text += (
                f"; {len(failed)} of {len(self.planned_groups)} groups failed and were not "
                f"committed, first group {gid}: {cause} (all in failed_groups)"
            )
        return text

    @property
    def failed_groups(self) -> dict[str, str]:
        """Groups whose rewrite failed (on Spark: after Spark's retries), id -> error, in
        the order they failed; never committed, and also in ``abandoned_groups``. Always
        empty for the embedded executor, which stops at the first failure and raises it."""
        return dict(self.extra.get("failed_groups") or {})

    def emit(self) -> None:
        """Log :meth:`summary` on the ``lakelog`` logger (INFO; WARNING if groups failed)."""
        log.log(logging.WARNING if self.failed_groups else logging.INFO, "%s", self.summary())

    def __str__(self) -> str:
        lines = [self.summary()]
        lines.append(
            f"  read version {self.read_version}; "
            f"{f'commits {self.commits}' if self.commits else 'nothing committed'}; retries "
            f"{self.retries}; {len(self.planned_groups)} groups planned, "
            f"{len(self.abandoned_groups)} abandoned; {self.output_file_count} files written "
            f"({self.written_bytes} bytes, {self.compression_codec}); {self.duration_s:.2f} s"
        )
        return "\n".join(lines)


def rewrite_report(
    operation: str,
    plan: RewritePlan,
    *,
    committed: Sequence[Any],
    commits: Sequence[Any],
    abandoned: Sequence[str],
    duration_s: float,
    dry_run: bool = False,
    paced_seconds: float = 0.0,
    extra: dict[str, Any] | None = None,
) -> MaintenanceReport:
    """The report of a rewrite plan: ``committed`` are the group results that landed in
    ``commits`` (those of abandoned groups excluded); a dry run reports what the plan
    would rewrite."""
    groups = {g.group_id: g for g in plan.groups}
    done = [groups[r.group_id] for r in committed]
    removed_files = sum(len(g.files) for g in done)
    removed_bytes = sum(g.total_bytes for g in done)
    added_files = sum(len(r.added) for r in committed)
    added_bytes = sum(r.bytes_written for r in committed)
    return MaintenanceReport(
        operation=operation,
        dry_run=dry_run,
        read_version=plan.read_version,
        before_file_count=plan.snapshot_file_count,
        before_total_bytes=plan.snapshot_total_bytes,
        after_file_count=plan.snapshot_file_count - removed_files + added_files,
        after_total_bytes=plan.snapshot_total_bytes - removed_bytes + added_bytes,
        estimated_after_file_count=plan.estimated_after_file_count,
        compacted_file_count=plan.source_file_count if dry_run else removed_files,
        rewritten_bytes=plan.source_bytes if dry_run else removed_bytes,
        written_bytes=added_bytes,
        output_file_count=added_files,
        compression_codec=plan.options.compression,
        planned_groups=[g.paths for g in plan.groups],
        version=commits[-1].version if commits else None,
        commits=[c.version for c in commits],
        retries=sum(c.attempts - 1 for c in commits),
        abandoned_groups=list(abandoned),
        duration_s=duration_s,
        paced_seconds=paced_seconds,
        extra=dict(extra or {}),
    )


def raise_if_all_failed(report: MaintenanceReport, *, what_to_do: str) -> None:
    """Raise :class:`~lakelog.errors.MaintenanceFailedError` when groups failed and none
    was committed: a run that changed nothing because its work failed must not look
    like a success to a scheduled job. ``what_to_do`` ends the message."""
    failed = report.failed_groups
    if not failed or report.commits or report.dry_run:
        return
    gid, cause = next(iter(failed.items()))
    raise MaintenanceFailedError(
        f"expected the {report.operation} run to rewrite {len(report.planned_groups)} groups "
        f"of the table at version {report.read_version}, found that {len(failed)} of them "
        f"failed and none was committed (the table is unchanged); the first to fail, group "
        f"{gid}: {cause}. {what_to_do}",
        report=report,
        failed_groups=failed,
    )
