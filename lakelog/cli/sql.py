"""``lakelog sql "<statement>"``: one SQL statement over the catalog's tables, run
without Spark (DuckDB for queries; ``docs/sql.md``)."""

from __future__ import annotations

import argparse
from typing import Any

from ..catalog import connect_catalog
from .catalog import add_catalog_arg, catalog_url, cli_words
from .common import print_json, print_rows

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sql",
        help="run a SQL statement over the catalog's tables",
        description="Run one SQL statement (Spark's dialect; Delta's syntax for DESCRIBE "
        "HISTORY, OPTIMIZE, VACUUM, RESTORE) over the tables of the catalog, without "
        "Spark: queries run on DuckDB. See docs/sql.md.",
    )
    p.add_argument("statement", help="the statement, quoted")
    add_catalog_arg(p)
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=cmd_sql)


def cmd_sql(args: argparse.Namespace) -> int:
    from ..sql import parse as check
    from ..sql.embedded import execute

    check(args.statement)
    url = catalog_url(args, existing_only=False)
    with cli_words(), connect_catalog(url) as catalog:
        rows = execute(args.statement, catalog)
    records = rows.to_pylist()
    if args.json:
        print_json(records)
    elif rows.num_columns == 0:
        print("ok")
    else:
        print_rows(records, rows.column_names)
    return 0
