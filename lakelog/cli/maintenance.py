"""``lakelog compact``, and what every rewrite command shares.

Flags map onto the library's options objects (:func:`execution_of`,
:func:`compaction_options_of`; ``lakelog optimize`` has its own in
:mod:`lakelog.cli.cluster`), and :func:`run_rewrite_command` runs a prepared plan
through the library's one flow (:func:`lakelog.maintenance.pipeline.run_prepared`)
and prints its report.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import pyarrow as pa

from ..errors import InvalidArgumentError
from ..maintenance.clustering.planner import ClusterPlan
from ..maintenance.compaction.planner import CompactionPlan
from ..maintenance.compaction.run import COMPACTION, prepare_compaction
from ..maintenance.executor import Progress
from ..maintenance.options import CompactionOptions, ExecutionOptions
from ..maintenance.pipeline import Prepared, RewriteKind, prepare_plan, run_prepared
from ..maintenance.report import MaintenanceReport
from ..partitioning import typed_partition_value
from .common import (
    add_run_args,
    add_table_args,
    count_arg,
    human_bytes,
    open_from_args,
    print_json,
    size_arg,
)
from .messages import one_line

if TYPE_CHECKING:
    from ..table import Table

__all__ = [
    "ProgressBar",
    "add_output_args",
    "add_partition_arg",
    "add_target_file_size_arg",
    "compaction_options_of",
    "execution_of",
    "partition_filter_of",
    "progress_bar",
    "read_plan_file",
    "refuse_planning_options",
    "register",
    "rewrite_command",
    "run_rewrite_command",
    "save_plan_file",
]

_PLANNING_OPTIONS = (
    "target_file_size",
    "target_rows",
    "min_file_size",
    "min_input_files",
    "partition",
    "compression",
    "row_group_size",
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "compact",
        help="rewrite small files into files of the target size",
        description="Bin-pack small files per partition and rewrite them into files of the "
        "target size, committed atomically beside live writers. A file whose deletion "
        "vector marks at least lakelog.deletion_vectors.purge_ratio (0.2) of its rows is "
        "rewritten whatever its size, dropping those rows. Unset options come from table "
        "properties.",
    )
    add_table_args(p)
    g = p.add_argument_group("planning")
    add_target_file_size_arg(g)
    g.add_argument(
        "--target-rows",
        type=count_arg,
        metavar="N",
        help="rows per output file (alone: pack by rows; with a size: either bound)",
    )
    g.add_argument(
        "--min-file-size",
        type=size_arg,
        metavar="SIZE",
        help="files below this are candidates (default: the target times "
        "lakelog.compaction.min_file_size_ratio, 0.75)",
    )
    g.add_argument(
        "--min-input-files",
        type=count_arg,
        metavar="N",
        help="rewrite groups of at least N files (default: lakelog.compaction.min_input_files, 2)",
    )
    add_partition_arg(g)
    add_output_args(g)
    add_run_args(p, verb="rewritten")
    p.set_defaults(func=cmd_compact)


def add_target_file_size_arg(g: Any) -> None:
    """``--target-file-size``, of every rewrite command."""
    g.add_argument(
        "--target-file-size",
        type=size_arg,
        metavar="SIZE",
        help="output file size, e.g. 128MiB (default: lakelog.target_file_size, 128 MiB)",
    )


def add_partition_arg(g: Any) -> None:
    """``--partition COL=VALUE`` (read by :func:`partition_filter_of`)."""
    g.add_argument(
        "--partition",
        action="append",
        default=[],
        metavar="COL=VALUE",
        help="only these partitions (repeatable: one column's values are OR-ed, columns AND-ed)",
    )


def add_output_args(g: Any) -> None:
    """``--compression`` and ``--row-group-size`` of the new files of a rewrite."""
    g.add_argument(
        "--compression",
        metavar="CODEC",
        help="codec of the new files (default: lakelog.compression, zstd)",
    )
    g.add_argument(
        "--row-group-size",
        type=count_arg,
        metavar="ROWS",
        help="rows per row group of the new files",
    )


def partition_filter_of(table: Table, pairs: list[str]) -> list[Any] | None:
    """``--partition COL=VALUE`` pairs as a DNF filter (one column's values OR-ed, columns
    AND-ed), with each value typed like its column; None when none were given."""
    if not pairs:
        return None
    values: dict[str, list[Any]] = {}
    for pair in pairs:
        if "=" not in pair:
            raise InvalidArgumentError(f"expected COL=VALUE for --partition, found {pair!r}")
        col, text = pair.split("=", 1)
        if col not in table.partition_by:
            raise InvalidArgumentError(
                f"expected --partition on a partition column {list(table.partition_by)}, "
                f"found {col!r}"
            )
        typ = table.schema.field(col).type
        try:
            value = typed_partition_value(text, typ)
        except (pa.ArrowException, ValueError, OverflowError) as e:
            raise InvalidArgumentError(
                f"expected --partition {col}=VALUE with a {typ} value for column {col!r}, "
                f"found {text!r} ({one_line(str(e))})"
            ) from e
        values.setdefault(col, []).append(value)
    return [(c, "in", v) for c, v in values.items()]


def refuse_planning_options(args: argparse.Namespace, names: Sequence[str]) -> None:
    """With ``--plan``, the saved plan fixes every planning option: refuse any given."""
    given = [f"--{o.replace('_', '-')}" for o in names if getattr(args, o, None)]
    if given:
        raise InvalidArgumentError(
            f"expected no planning options with --plan (the plan fixes them), found "
            f"{given}; plan again without --plan to change them."
        )


def read_plan_file(path: str) -> bytes:
    """The bytes of a plan saved with ``--plan-out``."""
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InvalidArgumentError(
            f"expected a plan file saved with --plan-out at --plan {path!r}, found "
            f"it unreadable: {e.strerror or e}"
        ) from e


def save_plan_file(path: str, text: str) -> None:
    """Save a plan's JSON for ``--plan-out``."""
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise InvalidArgumentError(
            f"expected to save the plan to --plan-out {path!r}, found it "
            f"unwritable: {e.strerror or e}; choose a file in an existing folder."
        ) from e


def progress_bar() -> ProgressBar | None:
    """A progress bar on stderr when it is a terminal; None in pipes and cron jobs."""
    return ProgressBar(sys.stderr) if sys.stderr.isatty() else None


class ProgressBar:
    """A one-line progress bar redrawn in place on a terminal (stderr)."""

    def __init__(self, stream: TextIO, *, width: int = 30, interval: float = 0.1) -> None:
        self.stream = stream
        self.width = width
        self.interval = interval
        self._last = 0.0
        self._lock = threading.Lock()
        self._drawn = False

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        final = p.groups_done == p.groups_total
        with self._lock:
            if not final and now - self._last < self.interval:
                return
            self._last = now
            frac = p.bytes_done / p.bytes_total if p.bytes_total else 1.0
            frac = min(1.0, frac)
            filled = int(frac * self.width)
            bar = "#" * filled + "." * (self.width - filled)
            self.stream.write(
                f"\r[{bar}] {frac:4.0%}  groups {p.groups_done}/{p.groups_total}  "
                f"{human_bytes(p.bytes_done)} / {human_bytes(p.bytes_total)}"
            )
            self.stream.flush()
            self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()


def execution_of(args: argparse.Namespace) -> ExecutionOptions:
    """The execution flags (``--max-concurrent-groups``, ``--max-bytes-per-second``,
    ``--partial-progress``) as the library's object."""
    return ExecutionOptions(
        max_concurrent_groups=args.max_concurrent_groups,
        max_bytes_per_second=args.max_bytes_per_second,
        partial_progress=args.partial_progress,
    )


def compaction_options_of(table: Table, args: argparse.Namespace) -> CompactionOptions:
    """The planning flags of ``lakelog compact`` as the library's object."""
    return CompactionOptions(
        target_file_size=args.target_file_size,
        target_rows=args.target_rows,
        min_file_size=args.min_file_size,
        min_input_files=args.min_input_files,
        partition_filter=partition_filter_of(table, args.partition),
        compression=args.compression,
        row_group_size=args.row_group_size,
    )


def run_rewrite_command(
    args: argparse.Namespace,
    prepared: Prepared[Any],
    *,
    show: Callable[[MaintenanceReport], None],
) -> int:
    """The rest of a rewrite command once its run is prepared: save the plan
    (``--plan-out``), run it (a dry run, or with a progress bar on a terminal) and print
    the report: the plan with it when nothing ran, ``show`` for a text report."""
    plan = prepared.plan
    if args.plan_out:
        save_plan_file(args.plan_out, plan.to_json())
    bar = None if prepared.dry_run or not plan.groups else progress_bar()
    try:
        report = run_prepared(prepared, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        ran = not prepared.dry_run and plan.groups
        extra = {} if ran else {"plan": plan.describe().splitlines()}
        print_json({**report.to_dict(), **extra})
    elif args.dry_run:
        print(plan.describe(files=args.verbose))
        print(report.summary())
    else:
        show(report)
    return 0


Plan = TypeVar("Plan", CompactionPlan, ClusterPlan)


def rewrite_command(
    args: argparse.Namespace,
    kind: RewriteKind[Plan],
    plan_type: type[Plan],
    *,
    planning_options: Sequence[str],
    plan_new: Callable[[Table, argparse.Namespace, ExecutionOptions], Prepared[Plan]],
    show: Callable[[MaintenanceReport], None],
) -> int:
    """A rewrite command (``compact``, ``optimize``): run the saved plan ``--plan``
    names (refusing planning flags beside it), or plan anew with ``plan_new``, then
    :func:`run_rewrite_command`."""
    table = open_from_args(args)
    execution = execution_of(args)
    if args.plan:
        refuse_planning_options(args, planning_options)
        plan = plan_type.from_json(read_plan_file(args.plan))
        prepared = prepare_plan(table, kind, plan, execution, dry_run=args.dry_run)
    else:
        prepared = plan_new(table, args, execution)
    return run_rewrite_command(args, prepared, show=show)


def cmd_compact(args: argparse.Namespace) -> int:
    return rewrite_command(
        args,
        COMPACTION,
        CompactionPlan,
        planning_options=_PLANNING_OPTIONS,
        plan_new=lambda table, args, execution: prepare_compaction(
            table, compaction_options_of(table, args), execution, dry_run=args.dry_run
        ),
        show=print,
    )
