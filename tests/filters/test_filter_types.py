"""Filters on columns Arrow cannot compare (lists, structs, maps) are refused when the
filter is read, with an InvalidArgumentError naming the column and its type, from every
entry point and in every form; ``is null`` on them keeps working."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakelog
from lakelog.errors import InvalidArgumentError
from lakelog.filters import parse_filter

CLI = [sys.executable, "-m", "lakelog.cli"]
TYPES = {
    "tags": pa.list_(pa.int64()),
    "attrs": pa.struct([("a", pa.int64())]),
    "props": pa.map_(pa.string(), pa.int64()),
}
SCHEMA = pa.schema([("id", pa.int64()), *TYPES.items()])
ROWS = pa.table(
    {
        "id": [1, 2, 3],
        "tags": [[1], [2, 3], None],
        "attrs": [{"a": 1}, {"a": 2}, None],
        "props": [[("x", 1)], [("y", 2)], None],
    },
    schema=SCHEMA,
)


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> lakelog.Table:
    t = lakelog.create_table(str(tmp_path_factory.mktemp("types") / "t"), SCHEMA)
    t.append(ROWS)
    return t


FORMS: dict[str, Callable[[str], Any]] = {
    "expression >": lambda c: pc.field(c) > 1,
    "expression ==": lambda c: pc.field(c) == 1,
    "expression isin": lambda c: pc.field(c).isin([1, 2]),
    "expression or": lambda c: (pc.field(c) > 1) | (pc.field("id") == 1),
    "string >": lambda c: f"{c} > 1",
    "string =": lambda c: f"id = 1 and {c} = 1",
    "string in": lambda c: f"{c} in (1, 2)",
    "string between": lambda c: f"{c} between 1 and 2",
    "dnf >=": lambda c: [(c, ">=", 1)],
    "dnf in": lambda c: [[("id", "=", 1)], [(c, "in", [1, 2])]],
}

ENTRY_POINTS: dict[str, Callable[[lakelog.Table, Any], Any]] = {
    "files": lambda t, f: t.snapshot().files(f),
    "file_urls": lambda t, f: t.snapshot().file_urls(f),
    "to_arrow": lambda t, f: t.snapshot().to_arrow(filter=f),
    "to_batches": lambda t, f: list(t.snapshot().to_batches(filter=f)),
    "scanner": lambda t, f: t.snapshot().scanner(filter=f).to_table(),
    "dataset": lambda t, f: t.snapshot().dataset(f).to_table(),
    "to_pandas": lambda t, f: t.snapshot().to_pandas(filter=f),
    "to_polars": lambda t, f: t.snapshot().to_polars(filter=f).collect(),
    "to_duckdb": lambda t, f: t.snapshot().to_duckdb(name="v", filter=f).fetchall(),
    "inspect.files": lambda t, f: t.inspect.files(filter=f),
    "delete": lambda t, f: t.delete(f),
    "update": lambda t, f: t.update(f, set={"id": 0}),
}


@pytest.mark.parametrize("column", list(TYPES))
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_comparison_on_an_uncomparable_column_is_refused(
    table: lakelog.Table, entry: str, form: str, column: str
) -> None:
    version = table.version
    with pytest.raises(InvalidArgumentError) as info:
        ENTRY_POINTS[entry](table, FORMS[form](column))
    message = str(info.value)
    assert f"column {column!r} of type {TYPES[column]}" in message, message
    assert "'is null'" in message and "after reading" in message, message
    if entry in ("delete", "update") and not form.startswith("dnf"):
        assert "where=" in message, message  # the caller's keyword
    assert table.refresh().version == version


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_null_tests_of_uncomparable_columns_still_work(table: lakelog.Table, entry: str) -> None:
    for column in TYPES:
        for f in (
            f"{column} is null and id < 0",
            pc.field(column).is_valid() & (pc.field("id") < 0),
        ):
            ENTRY_POINTS[entry](table, f)  # selects nothing: nothing changes
    assert table.snapshot().to_arrow(filter="tags is not null").num_rows == 2
    assert table.snapshot().to_arrow(filter=pc.field("props").is_null()).num_rows == 1


def test_unmodelled_expressions_are_refused_when_read_not_by_arrow(table: lakelog.Table) -> None:
    snap = table.snapshot()
    for f in (
        pc.field("tags") == pc.field("id"),  # lakelog does not model it: Unknown
        (pc.field("attrs") > pc.field("id")) & (pc.field("id") > 0),  # Unknown inside AND
    ):
        for read in (snap.files, lambda f: snap.to_arrow(filter=f)):
            with pytest.raises(InvalidArgumentError, match=r"Arrow can evaluate") as info:
                read(f)
            assert "compares with nothing" in str(info.value)
            assert "of type list<item: int64>" in str(info.value) or "of type struct" in str(
                info.value
            )
    with pytest.raises(InvalidArgumentError, match=r"expected an integer for column 'id'"):
        snap.to_arrow(filter=pc.field("id") > "a")  # a literal its column does not compare with
    # a function of the values is Arrow's to evaluate, and does
    long = snap.to_arrow(filter=pc.list_value_length(pc.field("tags")) > 1)
    assert long.column("id").to_pylist() == [2]
    assert snap.to_arrow(filter=pc.field("attrs", "a") == 2).column("id").to_pylist() == [2]


def test_predicates_built_by_hand_are_checked_too() -> None:
    from lakelog.filters import Compare

    with pytest.raises(InvalidArgumentError, match=r"column 'tags' of type list<item: int64>"):
        parse_filter(Compare("tags", "=", pa.scalar([1], pa.list_(pa.int64()))), SCHEMA)


def test_which_types_compare() -> None:
    """The decision docs/concepts.md states."""
    from lakelog.filters.bind import comparable

    compare = [
        pa.int8(),
        pa.uint64(),
        pa.float32(),
        pa.float64(),
        pa.decimal128(10, 2),
        pa.string(),
        pa.large_string(),
        pa.binary(),
        pa.large_binary(),
        pa.binary(4),
        pa.bool_(),
        pa.date32(),
        pa.time64("us"),
        pa.timestamp("ms", tz="UTC"),
        pa.duration("s"),
        pa.dictionary(pa.int32(), pa.string()),
    ]
    never = [
        pa.list_(pa.int64()),
        pa.large_list(pa.string()),
        pa.list_(pa.int64(), 2),
        pa.struct([("a", pa.int64())]),
        pa.map_(pa.string(), pa.int64()),
        pa.float16(),
        pa.month_day_nano_interval(),
        pa.null(),
    ]
    for t in compare:
        for op in ("=", "!=", "<", ">=", "between", "in"):
            assert comparable(t, op), (t, op)
    for t in never:
        for op in ("=", "<", "between", "in"):
            assert not comparable(t, op), (t, op)


def test_partition_filters_of_maintenance_are_refused(tmp_path: Path) -> None:
    schema = pa.schema([("day", pa.date32()), ("id", pa.int64()), ("tags", TYPES["tags"])])
    t = lakelog.create_table(str(tmp_path / "t"), schema, partition_by=["day"])
    for _ in range(2):
        t.append(pa.table({"day": [dt.date(2026, 11, 2)], "id": [1], "tags": [[1]]}, schema=schema))
    for f in ([("tags", ">", 1)], pc.field("tags") > 1):
        with pytest.raises(InvalidArgumentError, match=r"partition columns.*tags"):
            t.compact(partition_filter=f)
        with pytest.raises(InvalidArgumentError, match=r"partition columns.*tags"):
            t.optimize(partition_filter=f, sort_by=["id"])
    assert t.refresh().version == 2


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("argv", "flag", "column"),
    [
        (["delete", "{uri}", "--filter", "tags > 1"], "--filter", "tags"),
        # --where: the old name of --filter, which the message names
        (["delete", "{uri}", "--where", "id = 1 or attrs = 1", "--dry-run"], "--filter", "attrs"),
        (["files", "{uri}", "--filter", "props in (1, 2)"], "--filter", "props"),
        (["inspect", "{uri}", "--filter", "tags between 1 and 2"], "--filter", "tags"),
    ],
)
def test_cli_names_the_flag_column_and_type(
    table: lakelog.Table, argv: list[str], flag: str, column: str
) -> None:
    p = _cli(*[a.format(uri=table.uri) for a in argv])
    assert p.returncode == 1 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lakelog: error: expected"), p.stderr
    assert "Traceback" not in p.stderr and "Arrow" not in p.stderr
    assert f"column {column!r} of type {TYPES[column]}" in lines[0]
    assert f"of {flag} '" in lines[0]
    assert "where=" not in lines[0] and "filter=" not in lines[0]
