"""``lakelog expire`` and ``lakelog vacuum``: cleanup from cron or a shell."""

from __future__ import annotations

import argparse
from typing import Any

from .common import add_table_args, human_bytes, open_from_args, parse_duration, print_json


def register(sub: Any) -> None:
    p = sub.add_parser(
        "expire",
        help="expire old versions and delete the files only they use",
        description=(
            "Versions older than --older-than and not among the newest --retain-last stop "
            "being readable; data and log files no retained version needs are deleted. "
            "Defaults come from the table properties lakelog.expire.*."
        ),
    )
    add_table_args(p)
    p.add_argument(
        "--older-than",
        type=parse_duration,
        default=None,
        metavar="AGE",
        help="expire versions committed before now - AGE (e.g. 7d, 12h; default: "
        "lakelog.expire.older_than_seconds, 7d)",
    )
    p.add_argument(
        "--retain-last",
        type=int,
        default=None,
        metavar="N",
        help="always keep the newest N versions (default: lakelog.expire.retain_last, 10)",
    )
    p.add_argument("--dry-run", action="store_true", help="report only, change nothing")
    p.add_argument("--paths", action="store_true", help="print every file deleted")
    p.set_defaults(func=cmd_expire)

    p = sub.add_parser(
        "vacuum",
        help="delete files no retained version references (dry run by default)",
        description=(
            "Lists files under the table root that no retained version references and that "
            "are older than --older-than; deletes them only with --no-dry-run."
        ),
    )
    add_table_args(p)
    p.add_argument(
        "--older-than",
        type=parse_duration,
        default=None,
        metavar="AGE",
        help="only files older than AGE (default: lakelog.vacuum.older_than_seconds, 3d)",
    )
    p.add_argument(
        "--dry-run",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="only list what would be deleted (default); --no-dry-run deletes",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="allow --older-than below lakelog.vacuum.min_age_seconds (1h; only when no "
        "writer is running)",
    )
    p.add_argument("--paths", action="store_true", help="print every file")
    p.set_defaults(func=cmd_vacuum)


def cmd_expire(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    report = table.expire_snapshots(
        older_than=args.older_than, retain_last=args.retain_last, dry_run=args.dry_run
    )
    if args.json:
        print_json({"uri": table.uri, **report.to_dict(paths=args.paths)})
        return 0
    if args.paths:
        for path in (*report.data_files, *report.log_files):
            print(path)
    verb = "to delete" if report.dry_run else "deleted"
    print(f"{'uri':<22} {table.uri}")
    print(f"{'versions expired':<22} {report.versions_expired}")
    print(f"{'oldest readable':<22} {report.oldest_version}")
    print(f"{'latest':<22} {report.latest_version}")
    print(f"{'data files ' + verb:<22} {report.num_data_files} ({human_bytes(report.data_bytes)})")
    print(f"{'log files ' + verb:<22} {report.num_log_files}")
    print(f"{'duration':<22} {report.duration_s:.2f}s")
    if report.dry_run:
        print("dry run: nothing was changed")
    return 0


def cmd_vacuum(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    report = table.vacuum(older_than=args.older_than, dry_run=args.dry_run, force=args.force)
    if args.json:
        print_json({"uri": table.uri, **report.to_dict(paths=args.paths)})
        return 0
    if args.paths:
        for path in report.files:
            print(path)
    verb = "to delete" if report.dry_run else "deleted"
    print(f"{'uri':<18} {table.uri}")
    print(f"{'files ' + verb:<18} {report.num_files} ({human_bytes(report.bytes)})")
    print(f"{'files scanned':<18} {report.files_scanned}")
    print(f"{'referenced (kept)':<18} {report.files_referenced}")
    print(
        f"{'too young (kept)':<18} {report.files_too_young} (younger than {report.older_than_s:g}s)"
    )
    print(f"{'leased (kept)':<18} {report.files_leased} (not committed yet by a live writer)")
    if report.files_hidden:
        print(f"{'hidden (kept)':<18} {report.files_hidden} (names starting with '_' or '.')")
    print(f"{'versions retained':<18} {report.oldest_version}..{report.latest_version}")
    if report.nested_tables:
        print(f"{'nested tables':<18} {', '.join(report.nested_tables)} (not entered)")
    print(f"{'duration':<18} {report.duration_s:.2f}s")
    if report.dry_run:
        print("dry run: nothing was deleted; pass --no-dry-run to delete")
    return 0
