"""Helpers shared by the CLI commands: options, tables, JSON, sizes, durations."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidArgumentError
from ..table import Table, open_table

__all__ = [
    "add_execution_args",
    "add_run_args",
    "add_table_args",
    "count_arg",
    "human_bytes",
    "open_from_args",
    "parse_duration",
    "parse_size",
    "print_json",
    "print_rows",
    "size_arg",
]


def add_table_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("uri", help="table location: a path, file://, s3://, memory://")
    p.add_argument(
        "--storage-option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fsspec storage option (repeatable), e.g. -o anon=true",
    )
    p.add_argument(
        "--single-writer",
        action="store_true",
        help="only one process ever writes this table: allows filesystems that cannot "
        "create a file only if absent (e.g. GCS, HTTP)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    from .catalog import add_catalog_arg  # the table may be given by its catalog name

    add_catalog_arg(p)


def storage_options(pairs: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise InvalidArgumentError(f"expected KEY=VALUE for --storage-option, found {pair!r}")
        k, v = pair.split("=", 1)
        value: Any = v
        if v.lower() in ("true", "false"):
            value = v.lower() == "true"
        if k.startswith("endpoint_url"):
            out.setdefault("client_kwargs", {})["endpoint_url"] = v
            continue
        out[k] = value
    return out


def open_from_args(args: argparse.Namespace) -> Table:
    from .catalog import table_uri  # a catalog name -> its location

    return open_table(
        table_uri(args),
        storage_options=storage_options(args.storage_option),
        single_writer=args.single_writer,
    )


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, default=str, sort_keys=False)
    sys.stdout.write("\n")


def print_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> None:
    """A plain aligned text table."""
    if not rows:
        print("(none)")
        return
    cols = list(columns or rows[0].keys())
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, default=str, separators=(",", ":"))
    return str(v)


def human_bytes(n: float | int | None) -> str:
    if n is None:
        return "-"
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x:.1f} TiB"


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str) -> int:
    """``128MiB``, ``128MB``, ``128m`` or ``134217728`` -> bytes (binary units)."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a size like 128MiB or 1048576, found {text!r}")
    unit = (m.group(2) or "").lower().replace("i", "").replace("b", "")
    return int(float(m.group(1)) * _UNITS[unit])


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> dt.timedelta:
    """``7d``, ``12h``, ``30m``, ``90s`` or a number of seconds -> timedelta."""
    m = _DURATION.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration like 7d, 12h or 30m, found {text!r}")
    return dt.timedelta(seconds=float(m.group(1)) * _SECONDS[(m.group(2) or "s").lower()])


def count_arg(text: str) -> int:
    """argparse type: a whole number > 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, found {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, found {text!r}")
    return value


def size_arg(text: str) -> int:
    """argparse type: a size > 0 such as ``128MiB``."""
    value = parse_size(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a size > 0, found {text!r}")
    return value


def add_execution_args(p: argparse.ArgumentParser, *, verb: str) -> None:
    """The flags of :class:`lakelog.ExecutionOptions`, for every command that runs a
    plan (compact, optimize, resume); ``verb`` says what happens to a group."""
    g = p.add_argument_group("execution")
    g.add_argument(
        "--max-concurrent-groups",
        type=count_arg,
        metavar="N",
        help=f"groups {verb} in parallel (default 2)",
    )
    g.add_argument(
        "--max-bytes-per-second",
        type=size_arg,
        metavar="SIZE",
        help="pace reads to this rate in total, e.g. 50MiB",
    )
    g.add_argument(
        "--partial-progress",
        action="store_true",
        help="commit every lakelog.compaction.groups_per_commit groups",
    )


def add_run_args(p: argparse.ArgumentParser, *, verb: str) -> None:
    """The execution and plan options every rewrite command (compact, optimize) takes;
    ``verb`` says what happens to a group ("rewritten", "clustered")."""
    add_execution_args(p, verb=verb)
    g = p.add_argument_group("plans")
    g.add_argument("--dry-run", action="store_true", help="plan and report; write nothing")
    g.add_argument("--plan-out", metavar="FILE", help="save the plan as JSON")
    g.add_argument(
        "--plan", metavar="FILE", help="execute a plan saved with --plan-out instead of planning"
    )
    g.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="with --dry-run, list every source file of the plan",
    )
