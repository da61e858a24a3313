"""``lakelog optimize`` (clustering) and ``lakelog inspect`` (data-skipping figures)."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import InvalidArgumentError
from .common import add_table_args, human_bytes, open_from_args, parse_size, print_json

__all__ = ["register"]


def _columns(text: str) -> list[str]:
    cols = [c.strip() for c in text.split(",") if c.strip()]
    if not cols:
        raise argparse.ArgumentTypeError(f"expected column names like a,b, found {text!r}")
    return cols


def _size(text: str) -> int:
    value = parse_size(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a size > 0, found {text!r}")
    return value


def register(sub: Any) -> None:
    p = sub.add_parser(
        "optimize",
        help="cluster rows by a space-filling curve (or sort them)",
        description="Order rows by a Hilbert or Z-order curve over rank-normalized columns "
        "(--zorder-by) or by a linear sort (--sort-by), cut into files of the target size, "
        "committed atomically beside live writers. Incremental unless --full.",
    )
    add_table_args(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--zorder-by", type=_columns, metavar="A,B", help="curve columns")
    which.add_argument("--sort-by", type=_columns, metavar="A,B", help="linear sort columns")
    p.add_argument("--curve", choices=("hilbert", "zorder"), default="hilbert")
    p.add_argument("--target-file-size", type=_size, metavar="SIZE", help="e.g. 128MiB")
    p.add_argument("--max-group-bytes", type=_size, metavar="SIZE", help="in-memory sort budget")
    p.add_argument("--compression", default=None, help="codec of the new files")
    p.add_argument("--row-group-size", type=int, default=None, metavar="ROWS")
    p.add_argument("--max-concurrent-groups", type=int, default=None, metavar="N")
    p.add_argument("--full", action="store_true", help="recluster everything (new boundaries)")
    p.add_argument("--dry-run", action="store_true", help="plan only; write nothing")
    p.set_defaults(func=cmd_optimize)

    p = sub.add_parser(
        "inspect",
        help="how well the layout skips data for some columns (file stats only)",
        description="Average overlap depth per column and expected fraction of bytes read by "
        "range queries of a given selectivity, from per-file min/max alone.",
    )
    add_table_args(p)
    p.add_argument("--columns", type=_columns, required=True, metavar="A,B")
    p.add_argument("--version", type=int, default=None, help="inspect this version")
    p.add_argument("--selectivity", type=float, default=0.01, help="fraction of rows per query")
    p.add_argument("--plot", metavar="FILE.png", help="draw the files' boxes (two columns)")
    p.add_argument(
        "--before-version",
        type=int,
        default=None,
        metavar="N",
        help="with --plot: also draw version N beside it",
    )
    p.set_defaults(func=cmd_inspect)


def cmd_optimize(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    report = table.optimize(
        zorder_by=args.zorder_by,
        sort_by=args.sort_by,
        curve=args.curve,
        target_file_size=args.target_file_size,
        incremental=not args.full,
        max_group_bytes=args.max_group_bytes,
        compression=args.compression,
        row_group_size=args.row_group_size,
        max_concurrent_groups=args.max_concurrent_groups,
        dry_run=args.dry_run,
    )
    if args.json:
        print_json(report.to_dict())
        return 0
    print(report.summary())
    d = report.to_dict()
    cols = d["zorder_columns"] or d["sort_columns"]
    print(
        f"  {d['curve']} over {', '.join(cols)} ({'incremental' if d['incremental'] else 'full'}"
        f", spec {d['spec_id']}); rewrote {human_bytes(report.rewritten_bytes)} "
        f"({human_bytes(d['new_bytes'])} new), wrote {report.output_file_count} files "
        f"({human_bytes(report.written_bytes)}); version {report.version}; "
        f"{report.duration_s:.2f} s"
    )
    if report.abandoned_groups:
        print(f"  abandoned groups (sources removed concurrently): {report.abandoned_groups}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    if args.before_version is not None and not args.plot:
        raise InvalidArgumentError("expected --plot FILE.png with --before-version, found none")
    snap = table.snapshot(args.version)
    report = table.clustering_report(
        args.columns, version=snap.version, selectivity=args.selectivity
    )
    out: dict[str, Any] = report.to_dict()
    if args.plot:
        from ..maintenance.layout import plot_layout

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
