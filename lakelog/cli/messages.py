"""Library messages in a shell user's words.

The library names its Python keywords (``force=True``, ``retain_last``); a shell user
passes flags (``--force``, ``--retain-last``). :func:`translate` rewrites a message
with the flags of the command that failed, read off its parser, so every flag the
CLI exposes is named the way the user types it, and a new flag needs no new entry.
Library messages stay in Python terms for Python callers.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Mapping

__all__ = ["flag_names", "one_line", "translate"]

_ALIASES = {
    "partition_filter": "partition",
    "storage_options": "storage_option",
    "where": "filter",  # delete(where=...): `lakelog delete --filter`
}
"""Library keyword -> the CLI option (dest) that feeds it, where the names differ."""

_COMMANDS = {
    "compact": "compact",
    "expire_snapshots": "expire",
    "optimize": "optimize",
    "set_properties": "set-properties",
    "vacuum": "vacuum",
}
"""Library call -> ``lakelog`` command, for advice like ``optimize(incremental=False)``."""

_TOKEN = re.compile(
    r"(?<![\w./\\-])"  # not inside a property key (lakelog.x_y), a path or a flag
    r"(?P<word>[a-z][a-z0-9]*(?:_[a-z0-9]+)*)"
    r"(?:=(?P<value>\[[^\]]*\]|'[^']*'|\"[^\"]*\"|[\w+-]+(?:\.\w+)*))?"
    r"(?![\w/\\(-]|\.\w)"  # nor a file name (x_y.parquet), a path part or a call
)
_CALL = re.compile(r"(?<![\w.])(?P<name>[a-z_]+)\((?P<args>[^()]*)\)")
_SET_PROPERTIES = re.compile(r"(?:\b[a-z_]+\.)?set_properties\(\{(?P<pairs>[^{}()]*)\}\)")
_PAIR = re.compile(
    r"""(?P<q>['"])(?P<key>[^'"]+)(?P=q)\s*:\s*(?P<v>['"]?)(?P<value>[^'",]*)(?P=v)"""
)


def flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """``keyword`` or ``keyword=True/False`` -> the option of ``parser`` that says it.

    ``dry_run`` -> ``--dry-run``, ``force=True`` -> ``--force``, ``dry_run=False`` ->
    ``--no-dry-run`` (when the parser has it), ``partition_filter`` -> ``--partition``,
    ``incremental=False`` -> ``--full``.
    """
    out: dict[str, str] = {}
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        positive = next((o for o in longs if not o.startswith("--no-")), None)
        if positive is None or action.dest in ("help", argparse.SUPPRESS):
            continue
        out[action.dest] = positive
        if action.nargs == 0:  # a switch
            out[f"{action.dest}=True"] = positive
        negative = next((o for o in longs if o.startswith("--no-")), None)
        if negative is not None:
            out[f"{action.dest}=False"] = negative
    for keyword, dest in _ALIASES.items():
        if dest in out:
            out[keyword] = out[dest]
    if "full" in out:
        out["incremental=False"] = out["full"]
    return out


def translate(
    message: str,
    flags: Mapping[str, str],
    commands: Mapping[str, Mapping[str, str]] | None = None,
    *,
    uri: str | None = None,
) -> str:
    """``message`` with the Python keywords of ``flags`` replaced by their flags.

    Identifiers with an underscore (``retain_last``) are replaced wherever they stand
    alone; plain words only as ``word=value`` (``force=True``), since ``limit`` or
    ``version`` are also ordinary words. A call of a library method that is also a
    command (``optimize(incremental=False)``) becomes that command, with its flags
    from ``commands`` (command -> its :func:`flag_names`). Advice to call
    ``table.set_properties({'k': 'v'})`` becomes ``lakelog set-properties URI k=v``, with
    the table's ``uri`` when known.
    """

    def properties(m: re.Match[str]) -> str:
        pairs = [f"{p.group('key')}={p.group('value')}" for p in _PAIR.finditer(m.group("pairs"))]
        words = [shlex.quote(uri) if uri else "URI", *map(shlex.quote, pairs)]
        return "`" + " ".join(["lakelog set-properties", *words]) + "`"

    def call(m: re.Match[str]) -> str:
        command = _COMMANDS.get(m.group("name"))
        if command is None:
            return m.group(0)
        args = [a.strip() for a in m.group("args").split(",") if a.strip()]
        words = [_words(a, (commands or {}).get(command, {})) for a in args]
        return "`" + " ".join(["lakelog", command, *words]) + "`"

    return _words(_CALL.sub(call, _SET_PROPERTIES.sub(properties, message)), flags)


def _words(text: str, flags: Mapping[str, str]) -> str:
    def token(m: re.Match[str]) -> str:
        word, value = m.group("word"), m.group("value")
        if value is not None:
            if f"{word}={value}" in flags:
                return flags[f"{word}={value}"]
            if word in flags and value not in ("True", "False"):
                return f"{flags[word]} {value}"
            return m.group(0)
        if "_" in word and word in flags:
            return flags[word]
        if word in _COMMANDS and _COMMANDS[word] != word:  # expire_snapshots
            return f"`lakelog {_COMMANDS[word]}`"
        return word

    return _TOKEN.sub(token, text)


def one_line(text: str) -> str:
    """``text`` on one line (Arrow and OS messages can span several)."""
    return " ".join(text.split())
