"""Every command's ``--help`` against the code: the defaults it states are the ones the
library applies, the properties it names exist, and a filter has one name everywhere."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import lakelog
from lakelog.cli import build_parser
from lakelog.cli.common import parse_duration, parse_size
from lakelog.properties import PROPERTIES

CLI = [sys.executable, "-m", "lakelog.cli"]
FILTER_COMMANDS = ("files", "partitions", "inspect", "changes", "delete")


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _help(command: str) -> str:
    return _commands()[command].format_help()


def _all_help() -> str:
    """Every description and option help, as written (not wrapped)."""
    texts = []
    for p in _commands().values():
        texts.append(p.description or "")
        texts.extend(a.help or "" for a in p._actions if a.help != argparse.SUPPRESS)
    return "\n".join(texts)


def test_delete_help_says_rows_are_marked_in_deletion_vectors() -> None:
    """New tables get lakelog.deletion_vectors=true (lakelog.core.create): a delete marks
    rows and rewrites no file. The help said it rewrites the files holding them."""
    text = " ".join(_help("delete").split())
    assert "deletion vector" in text
    assert "lakelog.deletion_vectors=true" in text and "new tables" in text
    assert "rewrites only the files" not in text
    summary = _commands()["delete"].description or ""
    assert "By default no file is rewritten" in summary


def test_delete_does_what_its_help_says(tmp_path: Path) -> None:
    """A default table marks rows (no file rewritten); one created with the Delta view
    rewrites the file: the two cases the help names."""
    data = pa.table({"id": list(range(10))})
    lakelog.write_table(str(tmp_path / "a"), data)
    lakelog.write_table(str(tmp_path / "b"), data, properties={"lakelog.delta_view": "true"})
    for name, marked, rewritten in (("a", 1, 0), ("b", 0, 1)):
        proc = subprocess.run(
            [*CLI, "delete", str(tmp_path / name), "--filter", "id < 3", "--json"],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)
        assert (result["files_marked"], result["files_removed"]) == (marked, rewritten)


_DEFAULT = re.compile(r"(lakelog\.[a-z_.]*[a-z_])(?:,| \()\s*([^);]+)[);]")
"""A property and the value a help gives it: ``lakelog.x, 2)`` or ``lakelog.x (1h;``."""


def _value(text: str) -> float:
    text = text.strip().replace(" ", "")
    if re.fullmatch(r"[\d.]+[KMGT]iB", text):
        return float(parse_size(text))
    if re.fullmatch(r"[\d.]+[smhdw]", text):
        return parse_duration(text).total_seconds()
    return float(text)


def test_stated_defaults_are_the_properties_defaults() -> None:
    """Each value a help gives a property (``default: lakelog.x, 2``) is its declared
    default; there are many, so this cannot pass by finding none."""
    stated = _DEFAULT.findall(_all_help())
    assert len({name for name, _ in stated}) >= 12, stated
    for name, shown in stated:
        default = PROPERTIES[name].default
        if shown.strip() == default:
            continue
        assert _value(shown) == pytest.approx(float(default)), (name, shown, default)


def test_named_properties_exist() -> None:
    """Every ``lakelog.x`` a help names is a declared property (not a Python module)."""
    named = set(re.findall(r"\blakelog(?:\.[a-z_]+)+(?![\w*]|\.[\w*])", _all_help()))
    assert len(named) >= 10, named
    unknown = {n for n in named if n not in PROPERTIES}
    assert unknown == set(), unknown


def test_one_name_for_a_filter() -> None:
    """``--filter EXPR`` in every command that filters rows or files, ``--where`` in none
    of their helps (delete and changes took --where; it stays accepted there)."""
    for command in FILTER_COMMANDS:
        text = _help(command)
        assert "--filter EXPR" in text, command
        assert "--where" not in text, command


def test_delete_takes_filter_and_its_old_name(tmp_path: Path) -> None:
    lakelog.write_table(str(tmp_path / "t"), pa.table({"id": [1, 2, 3]}))
    for flag, left in (("--filter", 2), ("--where", 1)):
        proc = subprocess.run(
            [*CLI, "delete", str(tmp_path / "t"), flag, f"id = {left}"],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        assert lakelog.open_table(str(tmp_path / "t")).snapshot().num_rows == left
