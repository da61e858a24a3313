"""The ``lakelog`` command: thin wrappers that parse, call the library, print.

Each command group lives in its own module with a ``register(subparsers)``
function; :data:`COMMAND_MODULES` lists them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from ..errors import LakelogError

__all__ = ["main"]

COMMAND_MODULES = (
    "lakelog.cli.core",
    "lakelog.cli.maintenance",
    "lakelog.cli.cleanup",
    "lakelog.cli.cluster",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakelog", description="Inspect and maintain lakelog tables."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except LakelogError as e:
        print(f"lakelog: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lakelog: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":
    raise SystemExit(main())
