"""A store that ignores put-if-absent is refused, not trusted.

Some S3-compatible stores accept the conditional-put header and ignore it: every
commit then becomes "the last writer wins". The stores here are made to behave so
by the fault point ``storage:ignore-put-condition`` (``LAKELOG_FAULT_AT``, see
``lakelog._failpoints``): under an armed folder, put-if-absent overwrites an existing
key, as such a store does. Creating a table there, or
committing to one whose store was never checked, raises
:class:`~lakelog.StorageConsistencyError` and commits nothing; the check runs once
per store (recorded in ``_lakelog/_storage_check.json``), and the table property
``lakelog.storage.check_put_if_absent=false`` skips it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog import StorageConsistencyError, TableNotFoundError
from lakelog.cli import main
from lakelog.log.commits import list_log
from lakelog.storage import Storage
from lakelog.storage_check import CHECK_PROPERTY, MARKER, PROBE_PREFIX, check_storage

SCHEMA = pa.schema([("id", pa.int64())])
ROWS = pa.table({"id": [1, 2, 3]})


FAULT = "storage:ignore-put-condition"


@dataclass
class Stores:
    """Which roots ignore put-if-absent, and the probe keys every store was sent (read
    from the check's debug log)."""

    monkeypatch: pytest.MonkeyPatch
    caplog: pytest.LogCaptureFixture
    broken: list[str] = field(default_factory=list)

    def ignore_condition_under(self, root: Path) -> None:
        self.broken.append(str(root))
        self.monkeypatch.setenv("LAKELOG_FAULT_AT", ",".join(f"{FAULT}:{r}" for r in self.broken))

    @property
    def probes(self) -> set[str]:
        return {
            str(r.args[-1])
            for r in self.caplog.records
            if r.name == "lakelog"
            and r.getMessage().startswith("checking put-if-absent of ")
            and isinstance(r.args, tuple)
        }


@pytest.fixture
def stores(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Iterator[Stores]:
    monkeypatch.delenv("LAKELOG_FAULT_AT", raising=False)
    caplog.set_level(logging.DEBUG, logger="lakelog")
    yield Stores(monkeypatch, caplog)


def _log_names(root: Path) -> list[str]:
    log = root / "_lakelog"
    return sorted(os.listdir(log)) if log.exists() else []


def _marker(root: Path) -> dict[str, Any]:
    value = json.loads((root / MARKER).read_text())
    assert isinstance(value, dict)
    return value


# -- a store that ignores the condition is refused -------------------------------------


def test_create_table_refuses_a_store_that_ignores_put_if_absent(
    tmp_path: Path, stores: Stores
) -> None:
    stores.ignore_condition_under(tmp_path)
    uri = str(tmp_path / "t")
    with pytest.raises(StorageConsistencyError) as info:
        lakelog.create_table(uri, SCHEMA)
    message = str(info.value)
    assert message.startswith("expected the store of ")
    assert "found it accepted" in message and "Nothing was committed" in message
    assert CHECK_PROPERTY in message
    assert isinstance(info.value, lakelog.StorageNotSupportedError)  # caught by old handlers
    assert len(stores.probes) == 1
    # nothing half-created: no commit, no marker, no probe left behind
    assert _log_names(tmp_path / "t") == []
    with pytest.raises(TableNotFoundError):
        lakelog.open_table(uri)


def test_write_table_and_convert_refuse_it_before_writing(tmp_path: Path, stores: Stores) -> None:
    stores.ignore_condition_under(tmp_path)
    with pytest.raises(StorageConsistencyError):
        lakelog.write_table(str(tmp_path / "w"), ROWS)
    assert [p for p in (tmp_path / "w").rglob("*") if p.is_file()] == []  # no data, no log

    folder = tmp_path / "c"
    folder.mkdir()
    pq.write_table(ROWS, folder / "a.parquet")
    with pytest.raises(StorageConsistencyError):
        lakelog.convert(str(folder))
    assert _log_names(folder) == [] and sorted(os.listdir(folder)) == ["_lakelog", "a.parquet"]


def test_commits_to_a_table_whose_store_was_never_checked(tmp_path: Path, stores: Stores) -> None:
    """A table made before the check (no marker) whose store turns out to ignore the
    condition: the first commit checks, refuses, and leaves no data file behind."""
    root = tmp_path / "t"
    lakelog.create_table(str(root), SCHEMA)
    (root / MARKER).unlink()
    stores.ignore_condition_under(root)
    t = lakelog.open_table(str(root))
    before = sorted(p.name for p in root.iterdir())
    with pytest.raises(StorageConsistencyError):
        t.append(ROWS)
    assert lakelog.open_table(str(root)).version == 0
    assert sorted(p.name for p in root.iterdir()) == before
    assert not (root / MARKER).exists()


# -- the property skips the check ----------------------------------------------------


def test_the_property_skips_the_check_at_creation(tmp_path: Path, stores: Stores) -> None:
    stores.ignore_condition_under(tmp_path)
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, properties={CHECK_PROPERTY: False})
    assert t.properties[CHECK_PROPERTY] == "false"
    t.append(ROWS)
    r = lakelog.write_table(str(tmp_path / "w"), ROWS, properties={CHECK_PROPERTY: "false"})
    assert r.version == 0
    assert stores.probes == set()
    assert not (tmp_path / "t" / MARKER).exists()


def test_the_property_can_be_set_on_a_store_that_fails(tmp_path: Path, stores: Stores) -> None:
    """The commit that turns the check off is not itself refused by it."""
    root = tmp_path / "t"
    lakelog.create_table(str(root), SCHEMA)
    (root / MARKER).unlink()
    stores.ignore_condition_under(root)
    t = lakelog.open_table(str(root))
    t.set_properties({CHECK_PROPERTY: "false"})
    assert t.append(ROWS).version == 2
    with pytest.raises(lakelog.InvalidArgumentError, match=CHECK_PROPERTY):
        lakelog.create_table(str(tmp_path / "u"), SCHEMA, properties={CHECK_PROPERTY: "maybe"})


# -- once per store -------------------------------------------------------------------


def test_the_check_runs_once_per_store(tmp_path: Path, stores: Stores) -> None:
    root = tmp_path / "t"
    t = lakelog.create_table(str(root), SCHEMA)
    assert len(stores.probes) == 1
    marker = _marker(root)
    assert marker["refused_second_put"] is True
    assert marker["store"] == t.uri and marker["engine"] == f"lakelog/{lakelog.__version__}"
    assert isinstance(marker["checked_ms"], int)

    t.append(ROWS)
    with pytest.raises(lakelog.TableExistsError):
        lakelog.create_table(str(root), SCHEMA)
    lakelog.open_table(str(root)).append(ROWS)  # another handle reads the marker
    lakelog.write_table(str(root), ROWS)
    assert len(stores.probes) == 1

    # the probe cleaned up after itself and is no commit
    assert list_log(Storage(str(root))).commits == (0, 1, 2, 3)
    assert not any(n.startswith(".") for n in _log_names(root))

    (root / MARKER).unlink()  # a table from before the check: its next writer checks
    lakelog.open_table(str(root)).append(ROWS)
    assert len(stores.probes) == 2 and _marker(root)["store"] == t.uri
    lakelog.open_table(str(root)).append(ROWS)
    assert len(stores.probes) == 2


def test_a_marker_of_another_store_is_not_trusted(tmp_path: Path, stores: Stores) -> None:
    """A copied table carries the marker of its old store: the new one is checked."""
    lakelog.create_table(str(tmp_path / "a"), SCHEMA)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    stores.ignore_condition_under(tmp_path / "b")
    with pytest.raises(StorageConsistencyError):
        lakelog.open_table(str(tmp_path / "b")).append(ROWS)
    assert len(stores.probes) == 2


def test_a_probe_left_by_a_killed_check_is_vacuumed(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = lakelog.create_table(str(root), SCHEMA)
    left = root / f"{PROBE_PREFIX}{'0' * 32}.tmp"
    left.write_bytes(b"first")
    os.utime(left, (1, 1))
    assert lakelog.open_table(str(root)).version == 0  # readers ignore it
    report = t.vacuum(older_than=None, dry_run=False, force=True)
    assert not left.exists(), report
    assert (root / MARKER).exists()


# -- the backends lakelog supports keep the promise ------------------------------------


def test_memory_store_passes(memory_backend: Any) -> None:
    t = lakelog.create_table(memory_backend.uri, SCHEMA)
    assert check_storage(t.storage).refused_second_put
    assert t.storage.exists(MARKER)


@pytest.mark.s3
def test_s3_store_passes(s3_backend: Any) -> None:
    """moto honours If-None-Match: * as S3 does."""
    opts = s3_backend.storage_options
    t = lakelog.create_table(s3_backend.uri, SCHEMA, storage_options=opts)
    marker = json.loads(t.storage.read_bytes(MARKER))
    assert marker["refused_second_put"] is True
    assert marker["store"] == f"{t.uri} at {opts['client_kwargs']['endpoint_url']}"
    result = check_storage(Storage(s3_backend.uri, opts))
    assert result.refused_second_put and result.marker == MARKER
    assert not [n for n in t.storage.list_names("_lakelog") if n.startswith(".")]
    lakelog.open_table(s3_backend.uri, storage_options=opts).append(ROWS)


# -- lakelog check-storage -------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_reports_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "check-storage", str(tmp_path / "none"))
    assert (code, err) == (0, "")
    assert "put-if-absent  ok" in out and "not recorded (no table here yet" in out
    assert _log_names(tmp_path / "none") == []  # the probe cleaned up

    root = tmp_path / "t"
    lakelog.create_table(str(root), SCHEMA)
    (root / MARKER).unlink()
    code, out, err = _cli(capsys, "check-storage", str(root), "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["ok"] is True and report["marker"] == MARKER
    assert report["store"] == Storage(str(root)).uri
    assert _marker(root)["refused_second_put"] is True


def test_cli_refuses_a_broken_store(
    tmp_path: Path, stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "t"
    lakelog.create_table(str(root), SCHEMA)
    stores.ignore_condition_under(root)
    code, out, err = _cli(capsys, "check-storage", str(root), "--json")
    assert code == 1
    assert json.loads(out)["ok"] is False
    # with --json the failure is a JSON object too (on stderr; stdout holds the result)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    failure = json.loads(err)
    assert failure["error"] == "StorageConsistencyError"
    assert failure["message"].startswith("expected the store of ") and "accepted" in err
    code, out, err = _cli(capsys, "check-storage", str(root))
    assert code == 1
    assert err.startswith("lakelog: error: expected the store of ") and "accepted" in err
    assert not (root / MARKER).exists()  # writers check again, and refuse
    with pytest.raises(StorageConsistencyError):
        lakelog.open_table(str(root)).append(ROWS)


CHILD = textwrap.dedent(
    """
    import sys
    sys.argv = ["lakelog", *sys.argv[1:]]
    from lakelog.cli import run
    run()
    """
)


@pytest.mark.parametrize("store", ["honours", "broken"])
def test_cli_in_a_real_process(tmp_path: Path, store: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LAKELOG_FAULT_AT"}
    if store == "broken":
        env["LAKELOG_FAULT_AT"] = f"{FAULT}:{tmp_path}"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, "check-storage", str(tmp_path / "t")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    if store == "honours":
        assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
        assert "put-if-absent  ok" in proc.stdout
    else:
        assert proc.returncode == 1
        assert proc.stderr.startswith("lakelog: error: expected the store of ")
        assert "Traceback" not in proc.stderr
        assert "FAILED" in proc.stdout
