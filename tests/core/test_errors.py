"""Damaged logs and bad requests give the typed errors, and nothing else breaks.

The table used here has a manifest every 5 versions and versions 0..12, where
version v >= 1 appended the single row ``id = v``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog import (
    CorruptLogError,
    DataFileMissingError,
    InvalidArgumentError,
    LakelogError,
    SchemaMismatchError,
    StorageNotSupportedError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedFormatError,
    VersionNotFoundError,
)
from lakelog.log.commits import commit_path
from lakelog.log.format import CURRENT
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
    for v in (3, 4):  # a gap in the log is damage on every path
        with pytest.raises(CorruptLogError, match=r"commit 3 .*missing while commit 4 exists"):
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
        doc["header"]["format_version"] = CURRENT + 1

    _rewrite_json(_root(table) / commit_path(8), bump)
    t = _reopen(table)
    for v in (8, 9):
        with pytest.raises(UnsupportedFormatError, match="upgrade lakelog"):
            t.snapshot(v)
    _assert_readable(t, [7, 10, 12])


def test_newer_format_in_metadata(table: lakelog.Table) -> None:
    def bump(doc: dict[str, Any]) -> None:
        doc["actions"][0]["format_version"] = CURRENT + 1

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
    meta["format_version"] = CURRENT + 1
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


# -- bad input gets a typed error and changes nothing ----------------------------------

KSCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string())])
LONG = "x" * 300  # its folder name "k=xxx..." exceeds the 255-byte name limit
NOT_NULL = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.string())])


def _stream(*tables: pa.Table) -> pa.RecordBatchReader:
    """One stream of the tables' batches, in order (a bad batch after good ones)."""
    batches = [b for t in tables for b in t.to_batches()]
    return pa.RecordBatchReader.from_batches(tables[0].schema, batches)


def _duplicated() -> pa.Table:
    return pa.Table.from_arrays(
        [pa.array([1]), pa.array(["a"]), pa.array([2])], names=["id", "k", "id"]
    )


def _nulls_after_good_rows() -> pa.RecordBatchReader:
    # the first rows are written to a file (row groups of 1 row) before the bad batch
    good = pa.table({"id": [7, 8], "k": ["a", "b"]}, schema=NOT_NULL)
    bad = pa.table({"id": [9, None], "k": ["a", "b"]}, schema=NOT_NULL)
    return _stream(good, bad)


def _long_value_after_good_rows() -> pa.RecordBatchReader:
    return _stream(pa.table({"id": [7, 8], "k": ["a", "b"]}), pa.table({"id": [9], "k": [LONG]}))


@pytest.fixture
def ktable(tmp_path: Path) -> lakelog.Table:
    """Partitioned by ``k``, row groups of one row: writes hit the disk at once."""
    t = lakelog.create_table(
        str(tmp_path / "k"),
        KSCHEMA,
        partition_by=["k"],
        properties={"lakelog.row_group_size": 1},
    )
    t.append(pa.table({"id": [1, 2], "k": ["a", "b"]}))
    t.append(pa.table({"id": [3], "k": ["a"]}))
    return t


def _state(t: lakelog.Table) -> tuple[int, list[str], list[str]]:
    """Latest version, its live files, and every file under the root (orphans too)."""
    latest = lakelog.open_table(t.uri)
    return (
        latest.version,
        sorted(f.path for f in latest.snapshot().files()),
        sorted(f.path for f in t.storage.walk()),
    )


BAD_INPUT: dict[str, tuple[Any, type[LakelogError], list[str]]] = {
    "duplicate columns, append": (
        lambda t: t.append(_duplicated()),
        SchemaMismatchError,
        ["distinct column names", "['id']", "rename"],
    ),
    "duplicate columns, overwrite": (
        lambda t: t.overwrite(_duplicated()),
        SchemaMismatchError,
        ["distinct column names", "['id']", "rename"],
    ),
    "duplicate columns, write_table": (
        lambda t: lakelog.write_table(t.uri, _duplicated()),
        SchemaMismatchError,
        ["distinct column names", "['id']", "rename"],
    ),
    "nulls in a column the data declares non-nullable": (
        lambda t: t.append(_nulls_after_good_rows()),
        SchemaMismatchError,
        ["no nulls in column 'id'", "data's own schema", "non-nullable", "fill or drop"],
    ),
    "nulls, overwrite of a partition": (
        lambda t: t.overwrite(
            pa.table({"id": [None], "k": ["a"]}, schema=NOT_NULL), partitions=[{"k": "a"}]
        ),
        SchemaMismatchError,
        ["no nulls in column 'id'", "fill or drop"],
    ),
    "partition folder name too long": (
        lambda t: t.append(_long_value_after_good_rows()),
        InvalidArgumentError,
        ["at most 255 bytes", "302 bytes", "column 'k'", "shorter derived value"],
    ),
    "compact target_file_size beyond 64 bits": (
        lambda t: t.compact(target_file_size=10**30),
        InvalidArgumentError,
        ["target_file_size", "2**63 - 1", str(10**30)],
    ),
    "compact min_file_size beyond 64 bits": (
        lambda t: t.compact(min_file_size=2**63),
        InvalidArgumentError,
        ["min_file_size", "2**63 - 1"],
    ),
    "optimize max_group_bytes beyond 64 bits": (
        lambda t: t.optimize(zorder_by=["id"], max_group_bytes=10**30),
        InvalidArgumentError,
        ["max_group_bytes", "2**63 - 1"],
    ),
    "history limit as a string": (
        lambda t: t.history(limit="3"),
        InvalidArgumentError,
        ["limit", "integer > 0", "'3'"],
    ),
    "history limit as a bool": (
        lambda t: t.history(limit=True),
        InvalidArgumentError,
        ["limit", "integer > 0", "True"],
    ),
    "to_batches batch_size 0 (raised on the call)": (
        lambda t: t.snapshot().to_batches(batch_size=0),
        InvalidArgumentError,
        ["batch_size", "integer > 0", "found 0"],
    ),
    "to_batches batch_size as a float": (
        lambda t: t.snapshot().to_batches(batch_size=10.5),
        InvalidArgumentError,
        ["batch_size", "found 10.5"],
    ),
    "storage_options not a mapping": (
        lambda t: lakelog.open_table(t.uri, storage_options=[("anon", True)]),
        InvalidArgumentError,
        ["storage_options", "mapping", "found list"],
    ),
    "storage_options a string": (
        lambda t: lakelog.write_table(
            t.uri, pa.table({"id": [5], "k": ["a"]}), storage_options="x"
        ),
        InvalidArgumentError,
        ["storage_options", "mapping", "found str"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_typed_and_changes_nothing(ktable: lakelog.Table, case: str) -> None:
    call, error, words = BAD_INPUT[case]
    before = _state(ktable)
    with pytest.raises(error) as info:
        call(ktable)
    msg = str(info.value)
    assert "expected" in msg and "found" in msg, msg
    for word in words:
        assert word in msg, (word, msg)
    # no commit, and nothing half-written left behind (no orphan data files either)
    assert _state(ktable) == before
    assert sorted(_ids(ktable)) == [1, 2, 3]


NEW_TABLE_INPUT: dict[str, tuple[Any, list[str], type[LakelogError], str]] = {
    "duplicate columns": (_duplicated, [], SchemaMismatchError, "distinct column names"),
    "nulls in a non-nullable column": (
        _nulls_after_good_rows,
        ["k"],
        SchemaMismatchError,
        "non-nullable",
    ),
    "partition folder name too long": (
        _long_value_after_good_rows,
        ["k"],
        InvalidArgumentError,
        "at most 255 bytes",
    ),
}


@pytest.mark.parametrize("case", list(NEW_TABLE_INPUT))
def test_bad_data_creates_no_table(tmp_path: Path, case: str) -> None:
    data, partition_by, error, words = NEW_TABLE_INPUT[case]
    root = tmp_path / "new"
    with pytest.raises(error, match=words):
        lakelog.write_table(
            str(root),
            data(),
            partition_by=partition_by,
            properties={"lakelog.row_group_size": 1},
        )
    assert not [p for p in root.rglob("*") if p.is_file()]  # no log, no data file
    with pytest.raises(TableNotFoundError):
        lakelog.open_table(str(root))


def test_create_table_refuses_duplicate_column_names(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("id", pa.string())])
    with pytest.raises(InvalidArgumentError, match=r"distinct column names.*\['id'\]"):
        lakelog.create_table(str(tmp_path / "t"), schema)
    assert not (tmp_path / "t").exists()


PATH_CALLS: dict[str, Any] = {
    "open_table": lambda uri: lakelog.open_table(uri),
    "create_table": lambda uri: lakelog.create_table(uri, SCHEMA),
    "write_table": lambda uri: lakelog.write_table(uri, pa.table({"id": [1]})),
}


@pytest.mark.parametrize("below", [False, True], ids=["a file", "below a file"])
@pytest.mark.parametrize("call", list(PATH_CALLS))
def test_table_path_that_is_a_file(tmp_path: Path, call: str, below: bool) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("not a table")
    uri = str(file / "t") if below else str(file)
    with pytest.raises(InvalidArgumentError) as info:
        PATH_CALLS[call](uri)
    msg = str(info.value)
    assert "expected a folder" in msg and str(file) in msg and "another location" in msg
    assert ("lies below the file" if below else "it is a file") in msg
    assert file.read_text() == "not a table"
    assert sorted(tmp_path.iterdir()) == [file]


@pytest.mark.parametrize("call", list(PATH_CALLS))
def test_unknown_uri_scheme(call: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"known scheme.*'nosuch'.*spelling"):
        PATH_CALLS[call]("nosuch://bucket/t")


def test_uri_scheme_whose_driver_is_missing() -> None:
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    with pytest.raises(StorageNotSupportedError, match=r"gcs:// URIs.*gcsfs.*Install that package"):
        lakelog.open_table("gcs://bucket/t")


def test_storage_options_with_non_string_names(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="storage_options"):
        lakelog.create_table(str(tmp_path / "t"), SCHEMA, storage_options={1: "x"})
    assert not (tmp_path / "t").exists()


# -- a data file deleted outside lakelog -----------------------------------------------

READS: dict[str, Any] = {
    "to_arrow": lambda s: s.to_arrow(),
    "to_arrow with a filter": lambda s: s.to_arrow(columns=["id"], filter=pc.field("id") > 0),
    "to_batches": lambda s: list(s.to_batches(batch_size=1)),
}


@pytest.mark.parametrize("read", list(READS))
def test_read_after_a_data_file_was_deleted(backend: Any, read: str) -> None:
    t = lakelog.create_table(backend.uri, SCHEMA, storage_options=backend.storage_options)
    t.append(pa.table({"id": [1]}))
    t.append(pa.table({"id": [2]}))
    old = {f.path for f in t.snapshot(1).files()}
    (gone,) = [f.path for f in t.snapshot().files() if f.path not in old]
    t.storage.fs.rm_file(t.storage.full(gone))  # behind lakelog's back
    t = lakelog.open_table(backend.uri, storage_options=backend.storage_options)
    with pytest.raises(DataFileMissingError) as info:
        READS[read](t.snapshot())
    e = info.value
    assert isinstance(e, LakelogError) and isinstance(e, FileNotFoundError)
    assert (e.path, e.version) == (gone, 2)
    msg = str(e)
    for word in (gone, "version 2", "references", "deleted outside lakelog", "backup"):
        assert word in msg, (word, msg)
    assert "time travel" in msg and "overwrite" in msg
    # as the message says: an earlier version that does not reference it reads fine
    assert READS["to_arrow"](t.snapshot(1)).column("id").to_pylist() == [1]
    assert t.version == 2
