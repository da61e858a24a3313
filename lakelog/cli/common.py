"""Helpers shared by the CLI commands: options, tables, JSON, sizes, durations, and the
one way numbers and timestamps are printed.

Text tables and CSV show a number or an instant the same way in every command
(:func:`format_value`): a float as Arrow's CSV writer prints it (the shortest text that
reads back as the same number: ``2``, ``1.5``, ``1e+20``), ``0`` and never ``-0``; an
instant in ISO 8601, UTC with ``Z``, to the millisecond (``2026-11-29T02:06:25.123Z``;
finer when the value is), the form ``--as-of`` and ``--from`` accept. JSON keeps machine
forms (numbers as numbers).
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import re
import sys
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError
from ..maintenance.report import human_bytes as report_bytes
from ..table import Table
from ..tables import open_table

__all__ = [
    "FILTER_ALIASES",
    "add_execution_args",
    "add_filter_arg",
    "add_run_args",
    "add_storage_option_arg",
    "add_table_args",
    "count_arg",
    "format_number",
    "format_timestamp",
    "format_value",
    "human_bytes",
    "text_columns",
    "open_from_args",
    "parse_duration",
    "parse_size",
    "print_json",
    "print_rows",
    "size_arg",
]


def add_table_args(
    p: argparse.ArgumentParser,
    *,
    optional: bool = False,
    uri_help: str = "table location: a path, file://, s3://, memory://",
    json_help: str = "print JSON instead of text (a failure too: one JSON object on stderr)",
) -> None:
    """The table argument (``optional``: may be left out) and the flags every table
    command takes: storage options, ``--single-writer``, ``--json``, ``--catalog``."""
    if optional:
        p.add_argument("uri", nargs="?", default=None, help=uri_help)
    else:
        p.add_argument("uri", help=uri_help)
    add_storage_option_arg(p)
    p.add_argument(
        "--single-writer",
        action="store_true",
        help="only one process ever writes this table: allows filesystems that cannot "
        "create a file only if absent (e.g. GCS, HTTP)",
    )
    p.add_argument("--json", action="store_true", help=json_help)
    from .catalog import add_catalog_arg  # the table may be given by its catalog name

    add_catalog_arg(p)


def add_storage_option_arg(p: argparse.ArgumentParser) -> None:
    """``--storage-option KEY=VALUE`` (``-o``, repeatable): fsspec options for the
    table's filesystem, in every command that opens a location."""
    p.add_argument(
        "--storage-option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fsspec storage option (repeatable), e.g. -o anon=true",
    )


FILTER_ALIASES = ("--where",)
"""Older names of ``--filter``, still accepted; help shows ``--filter`` alone."""


def add_filter_arg(
    p: argparse.ArgumentParser,
    *,
    help: str,
    required: bool = False,
    where_alias: bool = False,
) -> None:
    """``--filter EXPR``: the one name of a row filter in every command (``files``,
    ``partitions``, ``inspect``, ``changes``, ``delete``); ``where_alias`` also accepts
    ``--where``, the name ``delete`` and ``changes`` took before (hidden from help)."""
    names = ["--filter", *(FILTER_ALIASES if where_alias else ())]
    p.add_argument(
        *names, dest="filter", required=required, default=None, metavar="EXPR", help=help
    )


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, showing an option under its first name only when its other
    names are aliases kept for old scripts (:data:`FILTER_ALIASES`), and never breaking
    a line inside a hyphenated word (``--no-dry-run``, ``lakelog set-properties``), so
    what help shows can be copied as it stands."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = self._whitespace_matcher.sub(" ", text).strip()
        return textwrap.wrap(text, width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        text = self._whitespace_matcher.sub(" ", text).strip()
        return textwrap.fill(
            text,
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
        )

    def _format_action_invocation(self, action: argparse.Action) -> str:
        shown = [o for o in action.option_strings if o not in FILTER_ALIASES]
        if shown != action.option_strings and shown:
            action = copy.copy(action)
            action.option_strings = shown
        return super()._format_action_invocation(action)


class RawDescriptionHelpFormatter(HelpFormatter):
    """:class:`HelpFormatter` keeping the description's and epilog's line breaks (the
    top level's), as :class:`argparse.RawDescriptionHelpFormatter` does."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "".join(indent + line for line in text.splitlines(keepends=True))


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
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, default=_json_value, separators=(",", ":"))
    return format_value(v)


def _json_value(v: Any) -> Any:
    """A value JSON has no form for, inside a text table's cell: as the table shows it."""
    return format_value(v)


def format_number(x: float) -> str:
    """A float as text tables and CSV show it: as Arrow's CSV writer prints a double, the
    shortest text that reads back as the same number (``2``, ``1.5``, ``1e+20``,
    ``nan``), and ``0`` for negative zero (Parquet statistics store a minimum of 0.0 as
    -0.0; Arrow would print ``-0``)."""
    text = pc.cast(pa.scalar(float(x) + 0.0, pa.float64()), pa.string()).as_py()
    return str(text)


def format_timestamp(value: dt.datetime) -> str:
    """An instant as the CLI prints it in text and CSV: ISO 8601 with milliseconds
    (microseconds or nanoseconds when the value has them), in UTC with ``Z`` when it has a
    zone (``2026-11-29T02:06:25.123Z``); a timestamp without a zone keeps none."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc)
    nanos = int(getattr(value, "nanosecond", 0) or 0)
    spec = (
        "nanoseconds" if nanos else "microseconds" if value.microsecond % 1000 else "milliseconds"
    )
    text = value.replace(tzinfo=None).isoformat(timespec=spec)
    return text + "Z" if value.tzinfo is not None else text


def timestamp_ms(ms: int) -> str:
    """Milliseconds since the epoch (commit and file times) as :func:`format_timestamp`."""
    return format_timestamp(dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc))


def format_value(v: Any) -> str:
    """One value of a text table or a CSV cell: floats by :func:`format_number`, instants
    by :func:`format_timestamp`, the rest as ``str`` (booleans as ``true``/``false`` in
    CSV is pyarrow's business: this is for text)."""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return format_number(v)
    if isinstance(v, dt.datetime):
        return format_timestamp(v)
    return str(v)


def text_columns(table: pa.Table) -> pa.Table:
    """``table`` ready for Arrow's CSV writer, so a CSV shows numbers and instants as the
    text tables do: negative zeros of float columns made 0 (Arrow would print ``-0``),
    timestamp columns as the text of :func:`format_timestamp` (Arrow would print
    ``2026-11-29 02:06:25.123Z``)."""
    columns = []
    for column in table.columns:
        t = column.type
        if pa.types.is_float32(t) or pa.types.is_float64(t):
            column = pc.add(column, pa.scalar(0.0, t))  # -0.0 + 0.0 is 0.0
        elif pa.types.is_timestamp(t):
            values = [None if v is None else format_timestamp(v) for v in column.to_pylist()]
            column = pa.chunked_array([pa.array(values, pa.string())], pa.string())
        columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names)


def human_bytes(n: float | int | None) -> str:
    if n is None:
        return "-"
    return report_bytes(n)


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
        help=f"groups {verb} in parallel (default: lakelog.compaction.max_concurrent_groups, 2)",
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
        help="commit every lakelog.compaction.groups_per_commit (10) groups, not all at the end",
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
