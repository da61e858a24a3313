"""``lakelog delete``: delete the rows a predicate selects (an erasure request, bad records)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import (
    add_filter_arg,
    add_table_args,
    human_bytes,
    open_from_args,
    print_json,
    print_rows,
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "delete",
        help="delete the rows matching a filter (marks them in deletion vectors, or rewrites "
        "the files holding them)",
        description=(
            "Deletes the rows matching --filter in one commit. Only files whose partition "
            "values or statistics can match are read, and only files holding a matching row "
            "change. By default no file is rewritten: with lakelog.deletion_vectors=true, "
            "which new tables get unless created with the Delta view or with the property "
            "false, the deleted rows are marked in each file's deletion vector (a file whose "
            "vector would grow past lakelog.deletion_vectors.max_vector_bytes is rewritten "
            "instead), and a later compact rewrites files with many marked rows "
            "(lakelog.deletion_vectors.purge_ratio). Tables without it (older tables, the "
            "Delta view's, or set to false) rewrite each such file with the rest of its "
            "rows, row for row. "
            "Matching nothing commits nothing. --dry-run lists the files and rows that "
            "would change. To get deleted rows off disk (an erasure request), run compact, "
            "expire and vacuum afterwards."
        ),
    )
    add_table_args(p)
    add_filter_arg(
        p,
        required=True,
        where_alias=True,
        help='rows to delete, e.g. "customer_id = 42" or "day < \'2024-01-01\'"; '
        '"true" deletes every row',
    )
    p.add_argument(
        "--dry-run", action="store_true", help="list the files and rows that would change"
    )
    p.add_argument("--paths", action="store_true", help="list every file marked or rewritten")
    p.set_defaults(func=cmd_delete)


def cmd_delete(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    result = table.delete(args.filter, dry_run=args.dry_run)
    if args.json:
        print_json({"uri": table.uri, **result.to_dict(files=args.dry_run or args.paths)})
        return 0
    if args.dry_run or args.paths:
        print_rows(
            [{"path": f.path, "rows": f.num_rows, "deleted": f.deleted_rows} for f in result.files]
        )
    label = 22
    verb = "to delete" if result.dry_run else "deleted"
    print(f"{'uri':<{label}} {table.uri}")
    print(f"{'read version':<{label}} {result.read_version}")
    print(f"{'rows ' + verb:<{label}} {result.deleted_rows}")
    print(f"{'files scanned':<{label}} {result.files_scanned}")
    rewritten = "files to rewrite" if result.dry_run else "files rewritten"
    print(f"{rewritten:<{label}} {result.files_removed} ({human_bytes(result.bytes_removed)})")
    if result.files_marked:  # deletion vectors: kept, their deleted rows marked
        marked = "files to mark" if result.dry_run else "files marked"
        print(f"{marked:<{label}} {result.files_marked}")
    if not result.dry_run:
        print(
            f"{'files written':<{label}} {result.files_added} ({human_bytes(result.bytes_added)})"
        )
        print(f"{'version':<{label}} {result.version if result.committed else '-'}")
    print(f"{'duration':<{label}} {result.duration_s:.2f}s")
    if result.dry_run:
        print("dry run: nothing was changed")
    elif not result.committed:
        print("no row matched: nothing was committed")
    return 0
