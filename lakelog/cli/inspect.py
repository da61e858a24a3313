"""``lakelog inspect`` (without ``--columns``): what each data file carries for skipping.

Per file: row groups (count, rows, median bytes) and the columns each row group
declares itself sorted by; per column: whether the page index (column and offset
index) and a bloom filter exist in every row group (``yes``), some (``partial``) or
none (``no``). With ``--filter`` it also says how many files and row groups a read
with that filter would skip before reading data (statistics and bloom filters).
"""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from ..io.footers import FileLayout, describe_files
from ..scan.skipping import SkipStats, collect_skip_stats
from .common import add_filter_arg, human_bytes, open_from_args, print_json, print_rows


def add_inspect_files_args(p: argparse.ArgumentParser) -> None:
    """The options of this report on the ``inspect`` parser (registered by
    :mod:`lakelog.cli.cluster`, whose ``--columns`` report shares the command)."""
    add_filter_arg(
        p,
        help='only files that may hold rows matching EXPR (e.g. "customer_id = 42"), and '
        "report what a read with it skips",
    )
    p.add_argument("--per-column", action="store_true", help="one line per file and column")


def _file_row(f: FileLayout) -> dict[str, Any]:
    def listed(kind: str) -> str:
        names = [c.name for c in f.columns if getattr(c, kind) == "yes"]
        partial = [c.name + "?" for c in f.columns if getattr(c, kind) == "partial"]
        return ",".join(names + partial) or "-"

    return {
        "path": f.path,
        "rows": f.num_rows,
        "size": human_bytes(f.size_bytes),
        "row_groups": f.row_groups,
        "rg_median": human_bytes(f.median_row_group_bytes),
        "page_index": listed("page_index"),
        "bloom": listed("bloom"),
        "sorted_by": ",".join(f.sorting_columns) or "-",
    }


def cmd_inspect_files(args: argparse.Namespace) -> int:
    table = open_from_args(args)
    snap = table.snapshot(args.version)
    files = list(snap.files(args.filter))
    layouts = describe_files(table.storage, files)
    skipped: dict[str, Any] | None = None
    # (row groups are skipped through a plain Dataset, which a table whose columns are
    # stored under other names cannot have: no skip figures for it)
    if args.filter is not None and not snap.reads_through_lakelog:
        with collect_skip_stats() as stats:
            fragments = list(snap.dataset(args.filter, deleted="include").get_fragments())
        groups = {table.storage.full(f.path): f.row_groups for f in layouts}
        read = sum(
            groups.get(fr.path, 0) if fr.row_groups is None else len(fr.row_groups)
            for fr in fragments
        )
        skipped = _skip_dict(snap.num_files, len(files), len(fragments), read, stats)
    if args.json:
        out: dict[str, Any] = {
            "version": snap.version,
            "files": [
                {
                    **msgspec.to_builtins(f),
                    "columns": [
                        {**msgspec.to_builtins(c), "page_index": c.page_index, "bloom": c.bloom}
                        for c in f.columns
                    ],
                }
                for f in layouts
            ],
        }
        if skipped is not None:
            out["skipping"] = skipped
        print_json(out)
        return 0
    if args.per_column:
        print_rows(
            [
                {
                    "path": f.path,
                    "column": c.name,
                    "type": c.physical_type,
                    "row_groups": c.row_groups,
                    "page_index": c.page_index,
                    "bloom": c.bloom,
                    "bloom_bytes": human_bytes(c.bloom_filter_bytes) if c.bloom_filter else "-",
                    "bytes": human_bytes(c.compressed_bytes),
                }
                for f in layouts
                for c in f.columns
            ]
        )
    else:
        print_rows([_file_row(f) for f in layouts])
    total_groups = sum(f.row_groups for f in layouts)
    print(
        f"{len(layouts)} files, {total_groups} row groups, "
        f"{human_bytes(sum(f.size_bytes for f in layouts))} (version {snap.version})"
    )
    if skipped is not None:
        s = skipped
        print(
            f"filter {args.filter!r}: reads {s['row_groups_read']} row groups of "
            f"{s['files_read']} of {s['files']} files ({s['files_skipped_by_log']} skipped by "
            f"the log's statistics; inside files, row-group statistics skip "
            f"{s['row_groups_by_stats']} row groups and bloom filters "
            f"{s['row_groups_by_bloom']}, from {s['bloom_filters_read']} filters read)"
        )
    return 0


def _skip_dict(
    total_files: int, candidates: int, files_read: int, groups_read: int, s: SkipStats
) -> dict[str, Any]:
    return {
        "files": total_files,
        "files_read": files_read,
        "files_skipped_by_log": total_files - candidates,
        "files_skipped_in_footers": candidates - files_read,
        "row_groups_read": groups_read,
        "row_groups_by_stats": s.row_groups_by_stats,
        "row_groups_by_bloom": s.row_groups_by_bloom,
        "bloom_filters_read": s.bloom_filters_read,
        "bloom_bytes_read": s.bloom_bytes_read,
    }
