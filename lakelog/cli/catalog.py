"""``lakelog catalog ...``, and table names in every command that takes a table.

The catalog is ``--catalog URL``, else ``$LAKELOG_CATALOG``, else the embedded
``~/.lakelog/catalog.db`` (for name lookups only once that file exists).
:func:`table_uri` is the one place a command's table argument becomes a location: a
``namespace.table`` that is not an existing path, with a catalog configured, is
looked up by name; anything else is a path or URL as before.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..catalog import CATALOG_ENV, connect_catalog
from ..catalog.names import looks_like_name
from ..errors import LakelogError
from .common import print_json, print_rows

if TYPE_CHECKING:
    from ..catalog import Catalog

__all__ = ["add_catalog_arg", "catalog_url", "cli_words", "register", "table_uri"]

_DEFAULT_FILE = Path.home() / ".lakelog" / "catalog.db"


def add_catalog_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--catalog",
        metavar="URL",
        default=None,
        help=f"catalog of table names: sqlite:///FILE or postgresql://USER@HOST/DB "
        f"(default ${CATALOG_ENV}, else ~/.lakelog/catalog.db)",
    )


def catalog_url(args: argparse.Namespace, *, existing_only: bool) -> str | None:
    given = getattr(args, "catalog", None) or os.environ.get(CATALOG_ENV, "").strip()
    if given:
        return str(given)
    if existing_only and not _DEFAULT_FILE.exists():
        return None
    return "sqlite:///" + str(_DEFAULT_FILE)


def table_uri(args: argparse.Namespace) -> str:
    """The location of the command's table: ``args.uri`` itself, or, when it reads as
    ``namespace.table``, is no existing path and a catalog is configured, the location
    the catalog names."""
    text = str(args.uri)
    if "://" in text or not looks_like_name(text) or os.path.exists(text):
        return text
    url = catalog_url(args, existing_only=True)
    if url is None:
        return text
    with cli_words(), connect_catalog(url) as catalog:
        return catalog.describe_table(text).location


_CALLS = [
    (re.compile(r"list_tables\('([^']*)'\)"), r"`lakelog catalog tables \1`"),
    (re.compile(r"drop_table\('([^']*)'\)"), r"`lakelog catalog drop \1`"),
    (re.compile(r"create_namespace\('([^']*)'\)"), r"`lakelog catalog create-namespace \1`"),
    (re.compile(r"rename_table"), "`lakelog catalog rename`"),
    (re.compile(r"register_table\('([^']*)', '([^']*)'\)"), r"`lakelog catalog register \1 \2`"),
    (re.compile(r"register_table"), "`lakelog catalog register`"),
    (re.compile(r"cascade=True"), "--cascade"),
    (re.compile(r"without purge"), "without --purge"),
    (re.compile(r"load_table\('([^']*)'\)"), r"`lakelog info \1`"),
]


@contextlib.contextmanager
def cli_words() -> Iterator[None]:
    """Errors of catalog calls with the library's calls named as the commands that do
    them."""
    try:
        yield
    except LakelogError as e:
        message = str(e)
        for pattern, command in _CALLS:
            message = pattern.sub(command, message)
        e.args = (message,)
        raise


def register(sub: Any) -> None:
    top = sub.add_parser(
        "catalog",
        help="table names: namespaces, tables, register, rename, drop",
        description="Names (namespace.table) for tables, kept in a catalog database. "
        "Every command that takes a table also takes its name.",
    )
    commands = top.add_subparsers(dest="catalog_command", required=True, metavar="SUBCOMMAND")

    def parser(name: str, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = commands.add_parser(name, help=help, description=help)
        add_catalog_arg(p)
        p.add_argument("--json", action="store_true", help="print JSON")
        return p

    p = parser("namespaces", "list the namespaces")
    p.set_defaults(func=cmd_namespaces)

    p = parser("create-namespace", "create a namespace")
    p.add_argument("namespace")
    p.add_argument("--exist-ok", action="store_true", help="succeed if it exists already")
    p.set_defaults(func=cmd_create_namespace)

    p = parser("drop-namespace", "drop an empty namespace")
    p.add_argument("namespace")
    p.add_argument(
        "--cascade", action="store_true", help="drop the names of its tables too (data kept)"
    )
    p.set_defaults(func=cmd_drop_namespace)

    p = parser("tables", "list the tables (of one namespace) with their locations")
    p.add_argument("namespace", nargs="?", default=None)
    p.set_defaults(func=cmd_tables)

    p = parser("register", "name an existing lakelog table")
    p.add_argument("name", help="namespace.table")
    p.add_argument("uri", help="the table's location")
    p.set_defaults(func=cmd_register)

    p = parser("rename", "move a name to another (the data stays)")
    p.add_argument("old")
    p.add_argument("new")
    p.set_defaults(func=cmd_rename)

    p = parser("drop", "forget a name; the data is kept unless --purge")
    p.add_argument("name")
    p.add_argument(
        "--purge",
        action="store_true",
        help="also delete the table's files (only for tables under the warehouse)",
    )
    p.set_defaults(func=cmd_drop)


@contextlib.contextmanager
def _open(args: argparse.Namespace) -> Iterator[Catalog]:
    url = catalog_url(args, existing_only=False)
    with cli_words(), connect_catalog(url) as catalog:
        yield catalog


def _done(args: argparse.Namespace, value: dict[str, Any], text: str) -> int:
    if args.json:
        print_json(value)
    else:
        print(text)
    return 0


def cmd_namespaces(args: argparse.Namespace) -> int:
    with _open(args) as catalog:
        names = catalog.list_namespaces()
    if args.json:
        print_json(names)
    else:
        print("\n".join(names) if names else "(none)")
    return 0


def cmd_create_namespace(args: argparse.Namespace) -> int:
    with _open(args) as catalog:
        catalog.create_namespace(args.namespace, exist_ok=args.exist_ok)
    ns = args.namespace.lower()
    return _done(args, {"namespace": ns, "created": True}, f"created namespace {ns}")


def cmd_drop_namespace(args: argparse.Namespace) -> int:
    with _open(args) as catalog:
        catalog.drop_namespace(args.namespace, cascade=args.cascade)
    ns = args.namespace.lower()
    return _done(args, {"namespace": ns, "dropped": True}, f"dropped namespace {ns}")


def cmd_tables(args: argparse.Namespace) -> int:
    with _open(args) as catalog:
        rows = [{"name": e.name, "location": e.location} for e in catalog.entries(args.namespace)]
    if args.json:
        print_json(rows)
    else:
        print_rows(rows, ["name", "location"])
    return 0


def cmd_register(args: argparse.Namespace) -> int:
    with _open(args) as catalog:
        catalog.register_table(args.name, args.uri)
        entry = catalog.describe_table(args.name)
    return _done(
        args,
        {"name": entry.name, "location": entry.location},
        f"registered {entry.name} -> {entry.location}",
    )


def cmd_rename(args: argparse.Namespace) -> int:
    with _open(args) as catalog:
        catalog.rename_table(args.old, args.new)
        entry = catalog.describe_table(args.new)
    return _done(
        args,
        {"old": args.old.lower(), "name": entry.name, "location": entry.location},
        f"renamed {args.old.lower()} -> {entry.name} (data stays at {entry.location})",
    )


def cmd_drop(args: argparse.Namespace) -> int:
    with _open(args) as catalog:
        entry_location = catalog.drop_table(args.name, purge=args.purge)
    name = args.name.lower()
    kept = "deleted" if args.purge else "kept"
    return _done(
        args,
        {"name": name, "location": entry_location, "purged": args.purge},
        f"dropped {name}; its data at {entry_location} was {kept}",
    )
