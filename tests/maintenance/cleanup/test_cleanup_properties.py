"""Cleanup defaults come from table properties; arguments override them; the
``lakelog expire`` and ``lakelog vacuum`` commands."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _cleanup_helpers import Model, age, check_table, make_table, rewrite

import lakelog
from lakelog.cli import main
from lakelog.properties import DEFAULTS

DAY = 24 * 3600


def _history(uri: str, properties: dict[str, Any] | None = None, n: int = 5) -> Model:
    model = Model(make_table(uri, properties=properties))
    for i in range(n):
        model.append(10 * i)
    rewrite(model.table)
    model.record()
    return model


def test_documented_defaults() -> None:
    assert DEFAULTS["lakelog.expire.older_than_seconds"] == str(7 * DAY)
    assert DEFAULTS["lakelog.expire.retain_last"] == "10"
    assert DEFAULTS["lakelog.vacuum.older_than_seconds"] == str(3 * DAY)
    assert DEFAULTS["lakelog.vacuum.min_age_seconds"] == "3600"


def test_expire_defaults_come_from_properties(local_backend: Any) -> None:
    model = _history(
        local_backend.uri,
        {"lakelog.expire.older_than_seconds": 0, "lakelog.expire.retain_last": 3},
    )
    t = model.table
    latest = t.version
    report = t.expire_snapshots()
    model.record()
    assert report.oldest_version == latest - 2
    check_table(t, model)
    # an argument beats the property
    report = t.expire_snapshots(retain_last=1)
    assert report.oldest_version == t.version - 1 == report.latest_version
    # and a property set later is used by the next run
    t.set_properties({"lakelog.expire.older_than_seconds": 7 * DAY})
    assert t.expire_snapshots(retain_last=1).versions_expired == 0


def test_vacuum_defaults_come_from_properties(local_backend: Any) -> None:
    model = _history(local_backend.uri)
    t = model.table
    stray = "stray.parquet"
    t.storage.write_bytes(stray, b"x")
    age(t.storage.full(stray), 2 * DAY)
    assert t.vacuum().files == ()  # default: 3 days
    t.set_properties({"lakelog.vacuum.older_than_seconds": DAY})
    report = t.vacuum()
    assert report.dry_run and report.files == (stray,) and report.older_than_s == DAY
    # a minimum age above the default refuses it, until forced or lowered
    t.set_properties({"lakelog.vacuum.min_age_seconds": 2 * DAY})
    with pytest.raises(lakelog.InvalidArgumentError, match="min_age_seconds"):
        t.vacuum()
    assert t.vacuum(force=True).files == (stray,)
    t.set_properties({"lakelog.vacuum.min_age_seconds": 0, "lakelog.vacuum.older_than_seconds": 0})
    assert t.vacuum(dry_run=False).files == (stray,)
    assert not t.storage.exists(stray)
    model.record()
    check_table(t, model)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("lakelog.expire.older_than_seconds", "soon"),
        ("lakelog.expire.older_than_seconds", "-5"),
        ("lakelog.vacuum.older_than_seconds", "later"),
        ("lakelog.vacuum.min_age_seconds", "x"),
    ],
)
def test_bad_property_values_are_refused(local_backend: Any, key: str, value: str) -> None:
    # refused up front; a bad value stored by hand falls back to the default
    # (tests/core/test_properties.py)
    with pytest.raises(lakelog.InvalidArgumentError, match=key):
        make_table(local_backend.uri, properties={key: value})


def test_retain_last_property_must_be_positive(local_backend: Any) -> None:
    with pytest.raises(lakelog.InvalidArgumentError, match="retain_last"):
        make_table(local_backend.uri, properties={"lakelog.expire.retain_last": 0})


# -- the CLI -------------------------------------------------------------------------


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_expire(local_backend: Any, capsys: pytest.CaptureFixture[str]) -> None:
    model = _history(local_backend.uri)
    t = model.table
    latest = t.version
    code, out, _ = _run(
        capsys, "expire", t.uri, "--older-than", "0s", "--retain-last", "1", "--dry-run", "--json"
    )
    assert code == 0
    dry = json.loads(out)
    assert dry["dry_run"] and dry["oldest_version"] == latest and dry["num_data_files"] == 5
    assert dry["versions_expired"] == latest and "data_files" not in dry
    assert t.refresh().version == latest
    code, out, _ = _run(capsys, "expire", t.uri, "--older-than", "0s", "--retain-last", "1")
    assert code == 0
    assert f"versions expired       {latest}\n" in out
    assert "data files deleted     5" in out
    model.record()
    check_table(t, model)
    code, out, _ = _run(capsys, "expire", t.uri, "--json", "--paths")
    assert json.loads(out)["versions_expired"] == 0 and json.loads(out)["data_files"] == []
    code, _, err = _run(capsys, "expire", t.uri, "--retain-last", "0")
    assert code == 1 and "--retain-last" in err


def test_cli_vacuum(local_backend: Any, capsys: pytest.CaptureFixture[str]) -> None:
    model = _history(local_backend.uri)
    t = model.table
    t.storage.write_bytes("stray.bin", b"12345")
    age(t.storage.full("stray.bin"), 2 * DAY)
    code, out, _ = _run(capsys, "vacuum", t.uri, "--older-than", "1d", "--paths")
    assert code == 0 and "stray.bin" in out and "dry run" in out
    assert "files to delete    1 (5 B)" in out
    assert t.storage.exists("stray.bin")
    code, out, err = _run(capsys, "vacuum", t.uri, "--older-than", "10m", "--no-dry-run")
    assert code == 1 and "min_age_seconds" in err
    code, out, _ = _run(
        capsys, "vacuum", t.uri, "--older-than", "0s", "--force", "--no-dry-run", "--json"
    )
    report = json.loads(out)
    assert code == 0 and report["num_files"] == 1 and report["bytes"] == 5
    assert not report["dry_run"] and "files" not in report
    assert not t.storage.exists("stray.bin")
    check_table(t, model)


def test_cli_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "expire" in out and "vacuum" in out
    with pytest.raises(SystemExit):
        main(["vacuum", "--help"])
    out = capsys.readouterr().out
    assert "--no-dry-run" in out and "--force" in out and "--older-than" in out
