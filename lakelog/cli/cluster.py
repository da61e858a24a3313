"""``lakelog optimize`` (clustering) and ``lakelog inspect`` (data-skipping figures).

``optimize`` takes compaction's execution and plan options too: ``--partition``,
``--max-bytes-per-second``, ``--partial-progress``, ``--dry-run``, ``--plan-out`` /
``--plan``, and draws a progress bar on a terminal.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError
from ..maintenance.clustering.planner import ClusterPlan
from ..maintenance.clustering.run import CLUSTERING, prepare_clustering
from ..maintenance.options import ClusteringOptions
from ..maintenance.report import MaintenanceReport
from .common import (
    add_run_args,
    add_table_args,
    human_bytes,
    open_from_args,
    print_json,
    size_arg,
)
from .inspect import add_inspect_files_args, cmd_inspect_files
from .maintenance import (
    add_output_args,
    add_partition_arg,
    add_target_file_size_arg,
    partition_filter_of,
    rewrite_command,
)

if TYPE_CHECKING:
    from ..table import Table

__all__ = ["clustering_options_of", "register"]


def _columns(text: str) -> list[str]:
    cols = [c.strip() for c in text.split(",") if c.strip()]
    if not cols:
        raise argparse.ArgumentTypeError(f"expected column names like a,b, found {text!r}")
    return cols


def register(sub: Any) -> None:
    _register_optimize(sub)
    _register_clustering(sub)
    _register_inspect(sub)


def _curve_arg(p: Any) -> None:
    p.add_argument(
        "--curve",
        choices=("hilbert", "zorder"),
        default=None,
        help="the curve over --zorder-by (default: hilbert)",
    )


def _register_optimize(sub: Any) -> None:
    p = sub.add_parser(
        "optimize",
        help="cluster rows by a space-filling curve (or sort them)",
        description="Order rows by a Hilbert or Z-order curve over rank-normalized columns "
        "(--zorder-by) or by a linear sort (--sort-by), or without either by the clustering "
        "`lakelog clustering` declared, cut into files of the target size, committed "
        "atomically beside live writers. Incremental unless --full: new files are "
        "clustered into the existing key ranges within a rewrite budget "
        "(lakelog.clustering.max_rewrite_ratio).",
    )
    add_table_args(p)
    g = p.add_argument_group("planning")
    which = g.add_mutually_exclusive_group()
    which.add_argument("--zorder-by", type=_columns, metavar="A,B", help="curve columns")
    which.add_argument("--sort-by", type=_columns, metavar="A,B", help="linear sort columns")
    _curve_arg(g)
    add_target_file_size_arg(g)
    g.add_argument(
        "--max-group-bytes",
        type=size_arg,
        metavar="SIZE",
        help="sort a group in memory up to this size, above it in spilled runs (default: "
        "lakelog.clustering.max_group_bytes, 1 GiB)",
    )
    add_output_args(g)
    add_partition_arg(g)
    g.add_argument("--full", action="store_true", help="recluster everything (fresh key ranges)")
    add_run_args(p, verb="clustered")
    p.set_defaults(func=cmd_optimize)


def _register_clustering(sub: Any) -> None:
    p = sub.add_parser(
        "clustering",
        help="show or declare how the table is clustered",
        description="Without options: print the table's declared clustering. With "
        "--zorder-by or --sort-by: declare it (a property change), so `lakelog optimize URI` "
        "with no columns keeps that layout run after run; --none removes the declaration. "
        "Files are rewritten by the next optimize, not by this command.",
    )
    add_table_args(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--zorder-by", type=_columns, metavar="A,B", help="curve columns")
    which.add_argument("--sort-by", type=_columns, metavar="A,B", help="linear sort columns")
    which.add_argument("--none", action="store_true", help="declare no clustering")
    _curve_arg(p)
    p.set_defaults(func=cmd_clustering)


def _register_inspect(sub: Any) -> None:
    p = sub.add_parser(
        "inspect",
        help="skipping inside files (page index, bloom filters, row groups), or with "
        "--columns how well the layout skips data for some columns",
        description="Without --columns: per file and column, whether a page index and bloom "
        "filters exist, and the row groups; with --filter, also how many files and row "
        "groups a read with it skips. With --columns: average "
        "overlap depth per column and expected fraction of bytes read by range queries of a "
        "given selectivity, from per-file min/max alone.",
    )
    add_table_args(p)
    p.add_argument(
        "--columns",
        type=_columns,
        default=None,
        metavar="A,B",
        help="report how well the layout skips data for these columns",
    )
    add_inspect_files_args(p)
    p.add_argument(
        "--version", type=int, default=None, help="inspect this version (default: the latest)"
    )
    p.add_argument(
        "--selectivity",
        type=float,
        default=0.01,
        metavar="FRACTION",
        help="with --columns: fraction of rows per range query (default 0.01)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="with --columns: draw the files' boxes over the first two columns",
    )
    p.add_argument(
        "--before-version",
        type=int,
        default=None,
        metavar="N",
        help="with --plot: also draw version N beside it",
    )
    p.set_defaults(func=cmd_inspect)


_PLANNING_OPTIONS = (
    "zorder_by",
    "sort_by",
    "curve",
    "target_file_size",
    "max_group_bytes",
    "compression",
    "row_group_size",
    "partition",
    "full",
)


def clustering_options_of(table: Table, args: argparse.Namespace) -> ClusteringOptions:
    """The planning flags of ``lakelog optimize`` as the library's object."""
    return ClusteringOptions(
        zorder_by=args.zorder_by,
        sort_by=args.sort_by,
        curve=args.curve or "hilbert",
        target_file_size=args.target_file_size,
        partition_filter=partition_filter_of(table, args.partition),
        incremental=not args.full,
        max_group_bytes=args.max_group_bytes,
        compression=args.compression,
        row_group_size=args.row_group_size,
    )


def cmd_optimize(args: argparse.Namespace) -> int:
    return rewrite_command(
        args,
        CLUSTERING,
        ClusterPlan,
        planning_options=_PLANNING_OPTIONS,
        plan_new=lambda table, args, execution: prepare_clustering(
            table, clustering_options_of(table, args), execution, dry_run=args.dry_run
        ),
        show=_show,
    )


def _show(report: MaintenanceReport) -> None:
    print(report.summary())
    if not report.planned_groups:
        return
    d = report.to_dict()
    cols = d["zorder_columns"] or d["sort_columns"]
    landed = f"commits {report.commits}" if report.commits else "nothing committed"
    print(
        f"  {d['curve']} over {', '.join(cols)} ({'incremental' if d['incremental'] else 'full'}"
        f", spec {d['spec_id']}); rewrote {human_bytes(report.rewritten_bytes)} "
        f"({human_bytes(d['new_bytes'])} new), wrote {report.output_file_count} files "
        f"({human_bytes(report.written_bytes)}); {landed}; {report.duration_s:.2f} s"
    )
    if report.abandoned_groups:
        print(
            "  abandoned groups (claimed by another run, or sources removed concurrently): "
            f"{report.abandoned_groups}"
        )


def cmd_clustering(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    setting = args.none or args.zorder_by is not None or args.sort_by is not None
    if args.curve is not None and args.zorder_by is None:
        raise InvalidArgumentError(
            f"expected --curve only with --zorder-by, found --curve {args.curve} without it"
        )
    version = None
    if setting:
        version = table.set_clustering(
            zorder_by=args.zorder_by, sort_by=args.sort_by, curve=args.curve or "hilbert"
        ).version
    declared = table.clustering
    if args.json:
        print_json(
            {
                "columns": None if declared is None else list(declared.columns),
                "curve": None if declared is None else declared.curve,
                "version": version,
            }
        )
        return 0
    what = "none" if declared is None else declared.describe()
    print(f"clustering: {what}" + ("" if version is None else f" (committed version {version})"))
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    if args.columns is None:
        return cmd_inspect_files(args)
    table = open_from_args(args)
    if args.before_version is not None and not args.plot:
        raise InvalidArgumentError("expected --plot FILE.png with --before-version, found none")
    snap = table.snapshot(args.version)
    report = table.clustering_report(
        args.columns, version=snap.version, selectivity=args.selectivity
    )
    out: dict[str, Any] = report.to_dict()
    if args.plot:
        from ..maintenance.clustering.layout import plot_layout

        panels: list[tuple[str, Any]] = []
        if args.before_version is not None:
            panels.append((f"version {args.before_version}", table.snapshot(args.before_version)))
        panels.append((f"version {snap.version}", snap))
        out["plot"] = plot_layout(panels, args.columns[:2], args.plot)
    if args.json:
        print_json(out)
    else:
        print(report)
        if args.plot:
            print(f"plot written to {out['plot']}")
    return 0
