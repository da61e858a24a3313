"""``lakelog delta-view enable|disable|sync|status URI``: the Delta-compatible view."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import DeltaViewError
from ..interop.delta import (
    delta_view_status,
    disable_delta_view,
    enable_delta_view,
    sync_delta_view,
)
from ..interop.delta.view import PYTHON_HINT, DeltaViewStatus
from .common import add_table_args, open_from_args, print_json


def register(sub: Any) -> None:
    p = sub.add_parser(
        "delta-view",
        help="a Delta-compatible view of the table, for Delta readers (enable, sync, status)",
        description=(
            "enable: set lakelog.delta_view=true and write the view (_delta_log/, starting "
            "with a checkpoint at the current version); every later commit also appears as "
            "the same Delta version. sync: write the Delta versions the view is missing "
            "(after a writer was killed). status: the view against the log. disable: "
            "turn the view off and delete _delta_log/. A table with deletion vectors (the "
            "default of tables created without the view) gets them in its view as Delta "
            "deletion vectors, which deltalake's pyarrow reader refuses (DataFusion, DuckDB "
            "and Spark read them); for that reader, run `lakelog set-properties URI "
            "lakelog.deletion_vectors=false` before enabling. See docs/delta-view.md."
        ),
    )
    p.add_argument("action", choices=["enable", "disable", "sync", "status"], help="what to do")
    add_table_args(p)
    p.add_argument(
        "--rebuild",
        action="store_true",
        help="with enable: delete _delta_log/ first and start the view again at the latest "
        "version (after another engine wrote to it)",
    )
    p.add_argument(
        "--keep-log",
        action="store_true",
        help="with disable: keep _delta_log/ (Delta readers then see a frozen version)",
    )
    p.set_defaults(func=cmd_delta_view)


def cmd_delta_view(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    try:
        return _run(args, table)
    except DeltaViewError as e:
        raise DeltaViewError(PYTHON_HINT.sub("", str(e))) from e


def _run(args: argparse.Namespace, table: Any) -> int:
    if args.action == "enable":
        _print_status(args, enable_delta_view(table, rebuild=args.rebuild))
    elif args.action == "disable":
        deleted = disable_delta_view(table, keep_log=args.keep_log)
        if args.json:
            print_json({"uri": table.uri, "enabled": False, "deleted_files": deleted})
        else:
            print(f"{'uri':<20} {table.uri}")
            print(f"{'delta view':<20} off")
            print(f"{'files deleted':<20} {deleted} (in _delta_log/)")
    elif args.action == "sync":
        report = sync_delta_view(table)
        if args.json:
            print_json({"uri": table.uri, **report.__dict__})
        else:
            print(f"{'uri':<20} {table.uri}")
            print(f"{'latest version':<20} {report.latest_version}")
            print(f"{'versions written':<20} {_versions(report.written)}")
            print(f"{'checkpoints written':<20} {_versions(report.checkpoints)}")
            print(f"{'old entries deleted':<20} {report.deleted_files}")
    else:
        _print_status(args, delta_view_status(table))
    return 0


def _versions(vs: tuple[int, ...]) -> str:
    if not vs:
        return "none"
    if len(vs) > 2 and vs[-1] - vs[0] == len(vs) - 1:
        return f"{vs[0]}..{vs[-1]} ({len(vs)})"
    return ", ".join(map(str, vs))


def _print_status(args: argparse.Namespace, s: DeltaViewStatus) -> None:
    if args.json:
        print_json(s.to_dict())
        return
    print(f"{'uri':<20} {s.uri}")
    print(f"{'delta view':<20} {'on' if s.enabled else 'off'}")
    print(f"{'lakelog versions':<20} {s.oldest_version}..{s.latest_version}")
    head = "none" if s.head is None else str(s.head)
    print(f"{'delta readers see':<20} {head}")
    oldest = "-" if s.oldest_delta_version is None else str(s.oldest_delta_version)
    print(f"{'oldest delta entry':<20} {oldest}")
    cp = "-" if s.latest_checkpoint is None else str(s.latest_checkpoint)
    print(f"{'latest checkpoint':<20} {cp}")
    if s.missing:
        print(f"{'missing versions':<20} {_versions(s.missing)} (run `lakelog delta-view sync`)")
    if s.foreign:
        print(f"{'foreign entries':<20} {_versions(s.foreign)} (written by another engine)")
    if s.broken:
        print(f"{'broken':<20} {s.broken} (run `lakelog delta-view enable --rebuild`)")
    if s.enabled:
        print(f"{'state':<20} {'in sync' if s.in_sync else 'behind or broken'}")
