"""A filter is parsed once per read: every step of ``to_arrow``, ``to_batches``,
``scanner``, ``dataset`` and the engine readers (files, footers, the renamed-column
path) takes the one :class:`lakelog.filters.ReadFilter` the read started with.

The parse is counted at the front ends of the filter language (the SQL-like parser and
the Expression decoder, run for real), on tables whose columns are read under their
names and under physical names (renamed)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakelog
from lakelog.filters import parse as parse_module


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The front-end parses run meanwhile (each still parses for real)."""
    seen: list[str] = []

    def counting(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            seen.append(name)
            return real(*args, **kwargs)

        return run

    monkeypatch.setattr(parse_module, "parse_sql", counting("sql", parse_module.parse_sql))
    monkeypatch.setattr(
        parse_module,
        "decode_expression",
        counting("expression", parse_module.decode_expression),
    )
    yield seen


def _table(tmp_path: Path, *, renamed: bool) -> lakelog.Table:
    t = lakelog.create_table(
        str(tmp_path / "t"),
        pa.schema([("id", pa.int64()), ("v", pa.string())]),
        properties={"lakelog.column_mapping": "true"} if renamed else None,
    )
    for i in range(3):
        t.append(pa.table({"id": [i * 10, i * 10 + 1], "v": [f"a{i}", f"b{i}"]}))
    if renamed:
        t.rename_column("v", "w")
    return t


@pytest.mark.parametrize("renamed", [False, True], ids=["names", "renamed"])
@pytest.mark.parametrize(
    "filter",
    ["id > 10", pc.field("id") > 10],
    ids=["string", "expression"],
)
def test_each_read_parses_its_filter_once(
    tmp_path: Path, parses: list[str], renamed: bool, filter: Any
) -> None:
    snap = _table(tmp_path, renamed=renamed).snapshot()
    want = [11, 20, 21]
    reads: list[Callable[[], list[int]]] = [
        lambda: sorted(snap.to_arrow(filter=filter).column("id").to_pylist()),
        lambda: sorted(
            i for b in snap.to_batches(filter=filter) for i in b.column("id").to_pylist()
        ),
        lambda: sorted(snap.scanner(filter=filter).to_table().column("id").to_pylist()),
    ]
    for read in reads:
        parses.clear()
        assert read() == want
        assert len(parses) == 1, parses
    if not renamed:  # a plain Dataset refuses renamed columns
        parses.clear()
        snap.dataset(filter)
        assert len(parses) == 1, parses
