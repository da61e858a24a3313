"""Numbers and timestamps printed one way in every command, in text and CSV: a float as
its shortest text, 0 and never -0; an instant as ISO 8601 in UTC with ``Z``. JSON keeps
machine forms."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
from lakelog.cli import main

CLI = [sys.executable, "-m", "lakelog.cli"]
ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_format_number() -> None:
    from lakelog.cli.common import format_number, format_value

    assert format_number(-0.0) == "0"
    assert format_number(0.0) == "0"
    assert format_number(2.0) == "2"
    assert format_number(1.5) == "1.5"
    assert format_number(1 / 3) == "0.3333333333333333"  # every digit, none invented
    assert format_number(1234.5) == "1234.5"  # not 1.23e+03
    assert format_number(1e20) == "1e+20"
    assert format_number(float("nan")) == "nan"
    assert format_value(-0.0) == "0" and format_value(True) == "True" and format_value(3) == "3"


def test_format_timestamp() -> None:
    from lakelog.cli.common import format_timestamp

    utc = dt.timezone.utc
    assert format_timestamp(dt.datetime(2026, 11, 29, 2, 6, 25, tzinfo=utc)) == (
        "2026-11-29T02:06:25.000Z"
    )
    paris = dt.timezone(dt.timedelta(hours=1))
    assert format_timestamp(dt.datetime(2026, 11, 29, 3, 6, 25, 123000, tzinfo=paris)) == (
        "2026-11-29T02:06:25.123Z"  # in UTC
    )
    assert format_timestamp(dt.datetime(2026, 11, 29, 2, 6, 25, 123456, tzinfo=utc)) == (
        "2026-11-29T02:06:25.123456Z"  # finer when the value is
    )
    assert format_timestamp(dt.datetime(2026, 11, 29, 2, 6, 25)) == "2026-11-29T02:06:25.000"


def test_text_columns_for_csv() -> None:
    """What Arrow's CSV writer gets: -0.0 made 0.0 (it would print -0), timestamps as
    ISO text (it would print a space and no T)."""
    from lakelog.cli.common import text_columns

    ts = pa.array([0], pa.timestamp("ms", tz="UTC"))
    out = text_columns(pa.table({"x": pa.array([-0.0, None]), "t": pa.concat_arrays([ts, ts])}))
    assert out.column("x").to_pylist() == [0.0, None]
    assert str(out.column("x")[0].as_py()) == "0.0"  # +0.0
    assert out.column("t").to_pylist() == ["1970-01-01T00:00:00.000Z"] * 2


@pytest.fixture
def table(tmp_path: Path) -> lakelog.Table:
    t = lakelog.create_table(
        str(tmp_path / "t"),
        pa.schema([("day", pa.string()), ("x", pa.float64())]),
        partition_by=["day"],
        properties={"lakelog.change_data_feed": "true"},
    )
    # a minimum of 0.0: Parquet statistics store it as -0.0
    t.append(pa.table({"day": ["d1", "d1"], "x": [0.0, 2.5]}))
    t.delete("x = 2.5")
    return t


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _csv(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    return list(csv.DictReader(io.StringIO(_run(capsys, *argv, "--csv"))))


def test_partitions_csv_prints_a_zero_minimum_as_zero(
    table: lakelog.Table, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _run(capsys, "partitions", table.uri, "--csv")
    assert "-0" not in text
    (row,) = list(csv.DictReader(io.StringIO(text)))
    assert (row["stats.x.min"], row["stats.x.max"]) == ("0", "2.5")
    (f,) = _csv(capsys, "files", table.uri)
    assert (f["stats.x.min"], f["stats.x.max"]) == ("0", "2.5")
    # JSON keeps machine forms: numbers
    (p,) = json.loads(_run(capsys, "partitions", table.uri, "--json"))
    assert p["stats"]["x"]["min"] == 0.0 and p["stats"]["x"]["max"] == 2.5


def _column(text: str, name: str) -> list[str]:
    """One column of a text table (cells are separated by two spaces or more)."""
    lines = text.splitlines()
    start = lines[0].index(name)
    return [line[start:].split("  ")[0].strip() for line in lines[1:] if line.strip()]


def test_timestamps_are_one_format_in_every_command(
    table: lakelog.Table, capsys: pytest.CaptureFixture[str]
) -> None:
    """The time of version 2 as history, snapshots, info, changes show it, text and CSV:
    one string, ISO 8601 UTC with Z (before: three forms, +00:00, a space, seconds)."""
    ms = {h.version: h.timestamp_ms for h in table.history()}
    when = dt.datetime.fromtimestamp(ms[2] / 1000, tz=dt.timezone.utc)
    expected = f"{when:%Y-%m-%dT%H:%M:%S}.{ms[2] % 1000:03d}Z"
    shown = {
        "history": _column(_run(capsys, "history", table.uri), "timestamp")[0],
        "history --csv": _csv(capsys, "history", table.uri)[0]["timestamp"],
        "snapshots": _column(_run(capsys, "snapshots", table.uri), "timestamp")[0],
        "snapshots --csv": _csv(capsys, "snapshots", table.uri)[0]["timestamp"],
        "changes": _column(_run(capsys, "changes", table.uri, "--from", "2"), "_commit_timestamp")[
            0
        ],
        "changes --csv": _csv(capsys, "changes", table.uri, "--from", "2")[0]["_commit_timestamp"],
    }
    info = _run(capsys, "info", table.uri)
    (stamp,) = [line.split()[1] for line in info.splitlines() if line.startswith("timestamp")]
    shown["info"] = stamp
    assert shown == dict.fromkeys(shown, expected)
    # file times too (version 1's file)
    files = _csv(capsys, "files", table.uri)
    parts = _csv(capsys, "partitions", table.uri)
    assert ISO_Z.match(files[0]["modification_time"]) and ISO_Z.match(parts[0]["last_modified"])
    # JSON keeps its forms
    (h,) = json.loads(_run(capsys, "history", table.uri, "--json", "--limit", "1"))
    assert dt.datetime.fromisoformat(h["timestamp"]).timestamp() * 1000 == ms[2]


def test_text_tables_show_floats_whole(
    table: lakelog.Table, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value of the feed in the text table is the value, not 3 significant digits."""
    table.append(pa.table({"day": ["d2"], "x": [1234.5678]}))
    out = _run(capsys, "changes", table.uri, "--from", "3")
    assert _column(out, "x") == ["1234.5678"]
    out = _run(capsys, "changes", table.uri, "--from", "2", "--to", "2")
    assert _column(out, "x") == ["2.5"]


def test_plans_show_the_claim_time_in_the_same_format(tmp_path: Path) -> None:
    """A compaction killed right after its claim landed leaves a stopped plan;
    ``lakelog plans`` shows when it was claimed as every other command shows a time
    (before: ``2026-11-29 02:06:25Z``, seconds and a space)."""
    t = lakelog.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    for i in range(3):
        t.append(pa.table({"id": [i]}))
    killed = subprocess.run(
        [*CLI, "compact", t.uri],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LAKELOG_CRASH_AT": "rewrite:claimed"},
    )
    assert killed.returncode == -9, killed.stderr
    (plan,) = t.refresh().plans()
    proc = subprocess.run([*CLI, "plans", t.uri], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (shown,) = _column(proc.stdout, "claimed")
    when = dt.datetime.fromtimestamp(plan.claimed_ms / 1000, tz=dt.timezone.utc)
    assert shown == f"{when:%Y-%m-%dT%H:%M:%S}.{plan.claimed_ms % 1000:03d}Z"
