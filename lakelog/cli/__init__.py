"""The ``lakelog`` command: thin wrappers that parse, call the library, print.

Each command group lives in its own module with a ``register(subparsers)``
function; :data:`COMMAND_MODULES` lists them.

A shell user never sees a traceback: every failure is one ``lakelog: error: ...``
line on stderr, with the library's Python keywords turned into the command's flags
(:mod:`lakelog.cli.messages`). With ``--json`` that line is one JSON object instead,
``{"error": "<ClassName>", "message": "..."}`` (usage errors too: ``"UsageError"``),
still on stderr so stdout only ever holds a result, and with the same exit status.
``--debug`` or ``LAKELOG_DEBUG=1`` adds the traceback.
Exit statuses are listed in :data:`EXIT_STATUSES`. Output cut short by its reader
(``lakelog history T | head -1``) is not a failure: the command stops quietly and
exits 0, so ``set -o pipefail`` scripts that only peek at the output keep working.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import select
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from ..__about__ import __version__
from ..errors import LakelogError
from .common import FILTER_ALIASES, HelpFormatter, RawDescriptionHelpFormatter
from .messages import flag_names, one_line, translate

__all__ = ["main", "run"]

COMMAND_MODULES = (
    "lakelog.cli.core",
    "lakelog.cli.properties",
    "lakelog.cli.maintenance",
    "lakelog.cli.cleanup",
    "lakelog.cli.cluster",
    "lakelog.cli.upgrade",
    "lakelog.cli.delete",
    "lakelog.cli.feed",
    "lakelog.cli.restore",
    "lakelog.cli.delta_view",
    "lakelog.cli.metadata",
    "lakelog.cli.adopt",
    "lakelog.cli.plans",
    "lakelog.cli.check_storage",
    "lakelog.cli.schema",
    "lakelog.cli.catalog",
    "lakelog.cli.sql",
    "lakelog.cli.maintain",
)

EXIT_STATUSES = """\
exit status:
  0    success (also when the reader closes the output early, as `| head` does)
  1    failure: one `lakelog: error: ...` line on stderr
  2    usage error (unknown command or option, bad option value)
  130  interrupted (Ctrl-C)

With --json, the failure line on stderr is one JSON object instead:
{"error": "<ClassName>", "message": "..."} (usage errors: "UsageError").
Set LAKELOG_DEBUG=1 (or pass --debug) to see the traceback of a failure."""

DEBUG_ENV = "LAKELOG_DEBUG"
USAGE_ERROR = "UsageError"
"""The ``error`` of a ``--json`` failure argparse reported (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser with the CLI's help formatter (aliases hidden), whose usage
    errors name each option once and, with ``--json`` on the command line, are one JSON
    object (exit status 2 either way)."""

    json_errors = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        for alias in FILTER_ALIASES:  # "--filter/--where" in argparse's own messages
            message = message.replace(f"/{alias}", "")
        if not self.json_errors:
            super().error(message)
        _print_error(USAGE_ERROR, f"{self.prog}: {message}", as_json=True)
        self.exit(2)


def build_parser(*, json_errors: bool = False) -> argparse.ArgumentParser:
    """The ``lakelog`` parser; ``json_errors``: report usage errors as JSON."""
    parser = _Parser(
        prog="lakelog",
        description="Inspect and maintain lakelog tables.",
        epilog=EXIT_STATUSES,
        formatter_class=RawDescriptionHelpFormatter,
    )
    parser.json_errors = json_errors
    parser.add_argument("--version", action="version", version=f"lakelog {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    commands = {}
    for name, command in sub.choices.items():
        # also accepted after the command; only set when given, so the top-level one holds
        command.add_argument(
            "--debug",
            action="store_true",
            default=argparse.SUPPRESS,
            help="show the traceback of a failure",
        )
        commands[name] = flag_names(command)
        command.json_errors = json_errors
    parser.set_defaults(cli_flags=commands)
    return parser


def _wants_json(argv: Sequence[str]) -> bool:
    """Whether ``--json`` (or an abbreviation argparse accepts, ``--js``) is on the
    command line before a ``--``: decided before parsing, for usage errors."""
    for arg in argv:
        if arg == "--":
            return False
        if len(arg) > 3 and "--json".startswith(arg):
            return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its exit status (see :data:`EXIT_STATUSES`).

    Usage errors, ``--help`` and ``--version`` raise :class:`SystemExit` from
    argparse as usual; everything else is reported on one line and returned.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(json_errors=_wants_json(argv))
    args = parser.parse_args(argv)
    debug = bool(args.debug) or os.environ.get(DEBUG_ENV, "").lower() not in ("", "0", "false")
    as_json = bool(getattr(args, "json", False))
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a reader that went away shows here, not at interpreter exit
        return code
    except KeyboardInterrupt:
        return _fail(
            "interrupted", debug=debug, status=130, error="KeyboardInterrupt", as_json=as_json
        )
    except LakelogError as e:
        flags = args.cli_flags
        message = translate(str(e), flags.get(args.command, {}), flags, uri=_uri(args))
        return _fail(message, debug=debug, error=type(e).__name__, as_json=as_json)
    except Exception as e:  # noqa: BLE001 - a bug or an environment problem: still one line
        if isinstance(e, BrokenPipeError) and _stdout_closed():
            _discard_stdout()
            return 0
        hint = "" if debug else f" (run with --debug or {DEBUG_ENV}=1 for the traceback)"
        name = type(e).__name__
        return _fail(f"{name}: {e}{hint}", debug=debug, error=name, as_json=as_json)


def _uri(args: argparse.Namespace) -> str | None:
    uri = getattr(args, "uri", None)
    return uri if isinstance(uri, str) else None


def run() -> NoReturn:
    """The program: :func:`main` on ``sys.argv``, then leave without interpreter teardown.

    Once the output is flushed nothing is left to do, and tearing the interpreter
    down beside native threads that may still be winding down (Arrow's pools drop
    their last references late) can abort the process; ``os._exit`` ends it with the
    command's status instead.
    """
    try:
        code = main()
    except SystemExit as e:  # usage errors, --help, --version
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except KeyboardInterrupt:  # before the command started
        code = _fail(
            "interrupted",
            debug=False,
            status=130,
            error="KeyboardInterrupt",
            as_json=_wants_json(sys.argv[1:]),
        )
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: the output was not wanted
            pass
    os._exit(code)


def _fail(
    message: str,
    *,
    debug: bool,
    status: int = 1,
    error: str = "Error",
    as_json: bool = False,
) -> int:
    if debug:
        traceback.print_exc()
    _print_error(error, message, as_json=as_json)
    return status


def _print_error(error: str, message: str, *, as_json: bool) -> None:
    """The one line of a failure on stderr: ``lakelog: error: ...``, or with ``--json``
    the object ``{"error": "<ClassName>", "message": "..."}``."""
    text = one_line(message)
    line = json.dumps({"error": error, "message": text}) if as_json else f"lakelog: error: {text}"
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _stdout_closed() -> bool:
    """Whether stdout is a pipe or socket whose reader has gone (else the broken pipe
    came from elsewhere, e.g. a storage connection, and is a real failure)."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
    except (AttributeError, OSError, ValueError):
        return True  # no way to tell (no poll on this platform): the usual cause
    poller.register(fd, 0)  # errors and hang-ups are always reported
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so writes still buffered fail no more at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass
