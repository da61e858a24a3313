"""Checks of maintenance options, and the execution options of a run.

Every entry point (``Table.compact``, ``Table.optimize``, their Spark twins, the
CLI) resolves its options once, before any work: what shapes the output files
goes into the plan (:class:`~lakelog.maintenance.compaction.planner.CompactionOptions`,
:class:`~lakelog.maintenance.clustering.planner.ClusterOptions`), and how the
groups run goes into one :class:`ExecutionOptions`, which the executors read.
A saved plan carries the first and never the second, so it can run elsewhere
with other parallelism or pacing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..errors import InvalidArgumentError
from ..properties import get_int

__all__ = [
    "MAX_INT_OPTION",
    "ExecutionOptions",
    "check_flag",
    "execution_options",
    "positive_int",
]

MAX_INT_OPTION = 2**63 - 1
"""Largest count or size option: what a 64-bit integer holds (Arrow compares sizes
and row counts as int64; a larger Python int would overflow there)."""


def positive_int(name: str, value: Any, *, unit: str = "") -> int:
    """``value`` as an int in 1..:data:`MAX_INT_OPTION`, or :class:`InvalidArgumentError`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_INT_OPTION:
        raise InvalidArgumentError(
            f"expected {name} to be an integer from 1 to 2**63 - 1"
            f"{f' ({unit})' if unit else ''}, found {value!r}; pass a whole number in "
            f"that range."
        )
    return value


def check_flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"expected {name} to be True or False, found {value!r}")


class ExecutionOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How a run executes its plan's groups (never part of the plan)."""

    max_concurrent_groups: int
    """Groups rewritten at once (threads, or Spark jobs)."""
    max_bytes_per_second: float | None = None
    """Total read rate of the run; None: unpaced."""
    groups_per_commit: int | None = None
    """Partial progress: commit every this many finished groups; None: one commit."""


def execution_options(
    properties: Mapping[str, str],
    *,
    max_concurrent_groups: int | None = None,
    max_bytes_per_second: float | None = None,
    partial_progress: bool = False,
    default_concurrency: int | None = None,
) -> ExecutionOptions:
    """Check the execution arguments and fill the unset ones.

    ``max_concurrent_groups`` defaults to ``default_concurrency`` (Spark: the
    session's parallelism) or else ``lakelog.compaction.max_concurrent_groups``;
    ``partial_progress`` commits every ``lakelog.compaction.groups_per_commit``
    groups.
    """
    if max_concurrent_groups is None:
        max_concurrent_groups = (
            default_concurrency
            if default_concurrency is not None
            else get_int(properties, "lakelog.compaction.max_concurrent_groups")
        )
    positive_int("max_concurrent_groups", max_concurrent_groups, unit="groups")
    if max_bytes_per_second is not None and (
        isinstance(max_bytes_per_second, bool)
        or not isinstance(max_bytes_per_second, (int, float))
        or not max_bytes_per_second > 0
    ):
        raise InvalidArgumentError(
            f"expected max_bytes_per_second to be a number > 0 (bytes per second) or None, "
            f"found {max_bytes_per_second!r}"
        )
    check_flag("partial_progress", partial_progress)
    per_commit = (
        get_int(properties, "lakelog.compaction.groups_per_commit") if partial_progress else None
    )
    return ExecutionOptions(
        max_concurrent_groups=max_concurrent_groups,
        max_bytes_per_second=None if max_bytes_per_second is None else float(max_bytes_per_second),
        groups_per_commit=per_commit,
    )
