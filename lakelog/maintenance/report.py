"""The result of a maintenance run (compaction, clustering), and its log line.

File counts and bytes describe the table as of the plan's read version and
the effect of this run on it: ``after = before - removed + added``. Files
appended concurrently are not counted, so the figures are the same whether
ingest ran beside the compaction or not. In a dry run, ``compacted_file_count``
and ``rewritten_bytes`` are what *would* be rewritten and nothing is written.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["MaintenanceReport"]

log = logging.getLogger("lakelog")


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
        if self.dry_run:
            return (
                f"dry run: would compact {self.compacted_file_count} files in "
                f"{len(self.planned_groups)} groups; file count {self.before_file_count}->"
                f"{self.estimated_after_file_count} (estimated); bytes "
                f"{self.before_total_bytes}->? (nothing written)"
            )
        text = (
            f"compacted {self.compacted_file_count} files; file count "
            f"{self.before_file_count}->{self.after_file_count}; bytes "
            f"{self.before_total_bytes}->{self.after_total_bytes}"
        )
        failed = set(self.extra.get("failed_groups") or ())
        conflicted = [g for g in self.abandoned_groups if g not in failed]
        if conflicted:
            text += f"; abandoned {len(conflicted)} groups (sources removed concurrently)"
        if failed:
            text += f"; {len(failed)} groups failed (see failed_groups)"
        return text

    def emit(self) -> None:
        """Log :meth:`summary` on the ``lakelog`` logger (INFO)."""
        log.info("%s", self.summary())

    def __str__(self) -> str:
        lines = [self.summary()]
        lines.append(
            f"  read version {self.read_version}; commits {self.commits or '-'}; retries "
            f"{self.retries}; {len(self.planned_groups)} groups planned, "
            f"{len(self.abandoned_groups)} abandoned; {self.output_file_count} files written "
            f"({self.written_bytes} bytes, {self.compression_codec}); {self.duration_s:.2f} s"
        )
        return "\n".join(lines)
