"""``lakelog compact`` (and the other maintenance commands as they arrive)."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import pyarrow as pa

from ..errors import InvalidArgumentError
from ..maintenance.claims import claimed_files
from ..maintenance.compaction.planner import CompactionPlan, plan_compaction
from ..maintenance.compaction.run import dry_run_report, execute_plan
from ..maintenance.executor import Progress
from ..maintenance.options import execution_options
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
    "partition_filter_of",
    "progress_bar",
    "read_plan_file",
    "refuse_planning_options",
    "register",
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
        "target size, committed atomically beside live writers. Unset options come from "
        "table properties.",
    )
    add_table_args(p)
    g = p.add_argument_group("planning")
    g.add_argument(
        "--target-file-size",
        type=size_arg,
        metavar="SIZE",
        help="output file size, e.g. 128MiB (default: lakelog.target_file_size)",
    )
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
        help="files below this are candidates (default: 75%% of the target)",
    )
    g.add_argument(
        "--min-input-files",
        type=count_arg,
        metavar="N",
        help="rewrite groups of at least N files (default 2)",
    )
    g.add_argument(
        "--partition",
        action="append",
        default=[],
        metavar="COL=VALUE",
        help="only these partitions (repeatable: one column's values are OR-ed, columns AND-ed)",
    )
    g.add_argument(
        "--compression", metavar="CODEC", help="codec of the new files (default: the table's)"
    )
    g.add_argument(
        "--row-group-size",
        type=count_arg,
        metavar="ROWS",
        help="rows per row group of the new files",
    )
    add_run_args(p, verb="rewritten")
    p.set_defaults(func=cmd_compact)


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


def cmd_compact(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    started = time.monotonic()
    execution = execution_options(
        table.properties,
        max_concurrent_groups=args.max_concurrent_groups,
        max_bytes_per_second=args.max_bytes_per_second,
        partial_progress=args.partial_progress,
    )
    if args.plan:
        refuse_planning_options(args, _PLANNING_OPTIONS)
        plan = CompactionPlan.from_json(read_plan_file(args.plan))
    else:
        snap = table.snapshot()
        plan = plan_compaction(
            snap,
            target_file_size=args.target_file_size,
            target_rows=args.target_rows,
            min_file_size=args.min_file_size,
            min_input_files=args.min_input_files,
            partition_filter=partition_filter_of(table, args.partition),
            compression=args.compression,
            row_group_size=args.row_group_size,
            exclude=() if args.dry_run else claimed_files(table.storage, snap),
        )
    if args.plan_out:
        save_plan_file(args.plan_out, plan.to_json())
    if args.dry_run:
        report = dry_run_report(plan, duration_s=time.monotonic() - started)
        report.emit()
        if args.json:
            print_json({**report.to_dict(), "plan": plan.describe().splitlines()})
        else:
            print(plan.describe(files=args.verbose))
            print(report.summary())
        return 0
    bar = progress_bar()
    try:
        report = execute_plan(
            table,
            plan,
            execution=execution,
            progress=bar,
            read_snapshot=None,
            started=started,
        )
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        print_json(report.to_dict())
    else:
        print(report)
    return 0
