"""Damaged logs and bad requests give the typed errors, and nothing else breaks.

The table used here has a manifest every 5 versions and versions 0..12, where
version v >= 1 appended the single row ``id = v``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog import (
    CorruptLogError,
    LakelogError,
    SchemaMismatchError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedFormatError,
    VersionNotFoundError,
)
from lakelog.log.actions import FORMAT_VERSION
from lakelog.log.commits import commit_path
from lakelog.log.manifests import LAST_MANIFEST, manifest_path

SCHEMA = pa.schema([("id", pa.int64())])
LATEST = 12


@pytest.fixture
def table(tmp_path: Path) -> lakelog.Table:
    t = lakelog.create_table(
        str(tmp_path / "t"), SCHEMA, properties={"lakelog.manifest_interval": 5}
    )
    for v in range(1, LATEST + 1):
        t.append(pa.table({"id": [v]}))
    return t


def _root(t: lakelog.Table) -> Path:
    return Path(t.storage.root)


def _ids(t: lakelog.Table, version: int | None = None) -> list[int]:
    return sorted(t.snapshot(version).to_arrow().column("id").to_pylist())


def _reopen(t: lakelog.Table) -> lakelog.Table:
    return lakelog.open_table(t.uri)


def _assert_readable(t: lakelog.Table, versions: list[int]) -> None:
    for v in versions:
        assert _ids(t, v) == list(range(1, v + 1)), v


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(b"\x00\x13 not json at all \xff" * 3)
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "wrong-shape":
        path.write_bytes(b'{"header": {"version": 7}, "actions": 3}')
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["truncated", "garbage", "empty", "wrong-shape"])
def test_damaged_commit(table: lakelog.Table, how: str) -> None:
    _damage(_root(table) / commit_path(7), how)
    t = _reopen(table)  # the latest resolves from manifest 10 + commits 11, 12
    assert t.version == LATEST
    for v in (7, 8, 9):
        with pytest.raises(CorruptLogError, match="commit 7") as info:
            t.snapshot(v)
        assert "restore" in str(info.value)  # says what to do
    # versions before the damage, and from the next manifest on, are intact
    _assert_readable(t, [0, 1, 5, 6, 10, 11, 12])
    # history reports the damaged commit instead of skipping it silently
    with pytest.raises(CorruptLogError):
        t.history()
    # new commits still land on top
    assert t.append(pa.table({"id": [13]})).version == 13
    assert _ids(_reopen(t)) == list(range(1, 14))


def test_damaged_latest_commit_is_an_error_not_a_rollback(table: lakelog.Table) -> None:
    _damage(_root(table) / commit_path(LATEST), "truncated")
    with pytest.raises(CorruptLogError, match=f"commit {LATEST}"):
        _reopen(table)
    _assert_readable(table, [0, 4, 10, 11])  # older versions stay readable


def test_corrupt_manifest_falls_back_to_replay(table: lakelog.Table) -> None:
    for how in ("truncated", "garbage"):
        _damage(_root(table) / manifest_path(10), how)
        t = _reopen(table)
        assert t.version == LATEST
        _assert_readable(t, [9, 10, 11, 12])


def test_manifest_of_the_wrong_version_is_not_trusted(table: lakelog.Table) -> None:
    root = _root(table)
    # manifest 5 copied over manifest 10: a valid Parquet file with the wrong content
    (root / manifest_path(10)).write_bytes((root / manifest_path(5)).read_bytes())
    _assert_readable(_reopen(table), [10, 11, 12])


def test_manifest_with_lying_row_count_is_not_trusted(table: lakelog.Table) -> None:
    path = _root(table) / manifest_path(10)
    t = pq.read_table(path)
    pq.write_table(t.slice(0, 3), path)  # header still says 10 files
    _assert_readable(_reopen(table), [10, 12])


def test_every_manifest_missing_or_damaged(table: lakelog.Table) -> None:
    root = _root(table)
    (root / manifest_path(0)).unlink()
    (root / manifest_path(5)).unlink()
    _damage(root / manifest_path(10), "garbage")
    _assert_readable(_reopen(table), [0, 3, 5, 10, 12])


@pytest.mark.parametrize(
    "hint",
    [b"", b"garbage", b'{"version": "x"}', b'{"version": 999}', b'{"version": 5}', b"[1]"],
)
def test_bad_last_manifest_hint(table: lakelog.Table, hint: bytes) -> None:
    (_root(table) / LAST_MANIFEST).write_bytes(hint)
    t = _reopen(table)
    assert t.version == LATEST
    assert _ids(t) == list(range(1, LATEST + 1))
    _assert_readable(t, [3, 11])


def test_missing_hint_and_missing_commit(table: lakelog.Table) -> None:
    root = _root(table)
    (root / LAST_MANIFEST).unlink()
    assert _reopen(table).version == LATEST
    (root / commit_path(3)).unlink()  # a hole in the log, no manifest covers 3 or 4
    t = _reopen(table)
    for v in (3, 4):
        with pytest.raises(VersionNotFoundError, match="commit 3 missing"):
            t.snapshot(v)
    _assert_readable(t, [0, 2, 5, 7, 12])


def test_missing_table(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError, match="create_table") as info:
        lakelog.open_table(str(tmp_path / "nothing"))
    assert isinstance(info.value, FileNotFoundError)  # also a FileNotFoundError
    (tmp_path / "empty" / "_lakelog").mkdir(parents=True)
    with pytest.raises(TableNotFoundError):
        lakelog.open_table(str(tmp_path / "empty"))
    with pytest.raises(TableNotFoundError):
        lakelog.open_table("memory://lakelog-never-created-here")


def test_missing_table_on_every_backend(backend: Any) -> None:
    with pytest.raises(TableNotFoundError):
        lakelog.open_table(backend.uri, storage_options=backend.storage_options)


def test_versions_not_in_the_log(table: lakelog.Table) -> None:
    with pytest.raises(VersionNotFoundError, match=f"between 0 and {LATEST}"):
        table.snapshot(LATEST + 1)
    with pytest.raises(VersionNotFoundError):
        table.snapshot(-3)
    _assert_readable(table, [LATEST])


def _rewrite_json(path: Path, edit: Any) -> None:
    doc = msgspec.json.decode(path.read_bytes())
    edit(doc)
    path.write_bytes(msgspec.json.encode(doc))


def test_newer_format_in_a_commit_header(table: lakelog.Table) -> None:
    def bump(doc: dict[str, Any]) -> None:
        doc["header"]["format_version"] = FORMAT_VERSION + 1

    _rewrite_json(_root(table) / commit_path(8), bump)
    t = _reopen(table)
    for v in (8, 9):
        with pytest.raises(UnsupportedFormatError, match="upgrade lakelog"):
            t.snapshot(v)
    _assert_readable(t, [7, 10, 12])


def test_newer_format_in_metadata(table: lakelog.Table) -> None:
    def bump(doc: dict[str, Any]) -> None:
        doc["actions"][0]["format_version"] = FORMAT_VERSION + 1

    _rewrite_json(_root(table) / commit_path(0), bump)
    (_root(table) / manifest_path(0)).unlink()  # else version 0..4 resolve from it
    t = _reopen(table)
    for v in (0, 3):
        with pytest.raises(UnsupportedFormatError, match="table format version"):
            t.snapshot(v)
    _assert_readable(t, [5, 12])


def test_newer_format_in_a_manifest_is_refused(table: lakelog.Table) -> None:
    """A manifest from a newer writer is refused, never misread; versions
    resolved without it stay readable."""
    path = _root(table) / manifest_path(10)
    t = pq.read_table(path)
    meta = json.loads(t.schema.metadata[b"lakelog"])
    meta["format_version"] = FORMAT_VERSION + 1
    pq.write_table(t.replace_schema_metadata({b"lakelog": json.dumps(meta).encode()}), path)
    with pytest.raises(UnsupportedFormatError, match="upgrade lakelog"):
        _reopen(table)
    for v in (10, 11):  # (12 is the version this handle has cached)
        with pytest.raises(UnsupportedFormatError):
            table.snapshot(v)
    _assert_readable(table, [4, 9])


def test_new_action_type_from_a_newer_writer(table: lakelog.Table) -> None:
    path = _root(table) / commit_path(LATEST)
    path.write_bytes(path.read_bytes().replace(b'"type":"add"', b'"type":"deletion_vector"'))
    with pytest.raises(UnsupportedFormatError):
        _reopen(table)
    _assert_readable(table, [11])


def test_schema_mismatch_and_table_exists(table: lakelog.Table) -> None:
    with pytest.raises(SchemaMismatchError, match="expected int64, found string"):
        table.append(pa.table({"id": ["x"]}))
    with pytest.raises(SchemaMismatchError, match="missing column 'id'"):
        lakelog.write_table(table.uri, pa.table({"other": [1]}))
    with pytest.raises(TableExistsError):
        lakelog.create_table(table.uri, SCHEMA)
    with pytest.raises(TableExistsError):
        lakelog.write_table(table.uri, pa.table({"id": [1]}), mode="error")
    assert _reopen(table).version == LATEST
    _assert_readable(table, [LATEST])


def test_every_error_is_a_lakelog_error_with_guidance(table: lakelog.Table) -> None:
    cases = [
        lambda: table.snapshot(99),
        lambda: table.append(pa.table({"id": ["x"]})),
        lambda: lakelog.create_table(table.uri, SCHEMA),
        lambda: lakelog.open_table(table.uri + "-nope"),
    ]
    for case in cases:
        with pytest.raises(LakelogError) as info:
            case()
        msg = str(info.value)
        assert "expected" in msg and "found" in msg, msg
