"""The change data feed through the Delta view: lakelog's change files appear as Delta
``cdc`` actions with ``delta.enableChangeDataFeed`` and the ``changeDataFeed`` writer
feature, and ``deltalake``'s ``load_cdf`` returns the rows ``table.changes`` does."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _delta_view_helpers import (
    deltalake_rows,
    duckdb_connection,
    duckdb_rows,
    lakelog_rows,
    local_path,
    polars_rows,
)

import lakelog
from lakelog.interop.delta.log import delta_commit_path, translate_commit
from lakelog.log.actions import (
    AddFile,
    ChangeFile,
    CommitHeader,
    Metadata,
    RemoveFile,
    encode_schema,
)

deltalake = pytest.importorskip("deltalake")

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("p", pa.string())])
VIEW_AND_FEED = {"lakelog.delta_view": "true", "lakelog.change_data_feed": "true"}


def _metadata(properties: dict[str, str]) -> Metadata:
    return Metadata(
        table_id="0" * 32,
        schema=encode_schema(SCHEMA),
        partition_by=["p"],
        properties=properties,
        created_ms=1,
    )


def _entry(actions: list[Any], properties: dict[str, str]) -> list[dict[str, Any]]:
    header = CommitHeader(version=3, timestamp_ms=5, operation="DELETE", txn_id="t")
    data, _ = translate_commit(header, actions, _metadata(properties), start=False)
    return [json.loads(line) for line in data.splitlines()]


def test_a_change_file_is_a_delta_cdc_action() -> None:
    change = ChangeFile(
        path="_change_data/p=a b/c 1%.parquet", size_bytes=123, num_rows=4, partition={"p": "a b"}
    )
    removed = RemoveFile(path="p=a b/f.parquet", deletion_ms=5, partition={"p": "a b"})
    added = AddFile(
        path="p=a b/g.parquet", size_bytes=9, num_rows=1, modification_ms=5, partition={"p": "a b"}
    )
    lines = _entry([removed, added, change], VIEW_AND_FEED)
    assert [next(iter(line)) for line in lines] == ["commitInfo", "remove", "add", "cdc"]
    assert lines[3]["cdc"] == {
        "path": "_change_data/p=a%20b/c%201%25.parquet",
        "partitionValues": {"p": "a b"},
        "size": 123,
        "dataChange": False,
    }


@pytest.mark.parametrize(
    ("properties", "flag", "features"),
    [
        (VIEW_AND_FEED, "true", ["changeDataFeed", "lakelogView"]),
        ({**VIEW_AND_FEED, "lakelog.change_data_feed": "false"}, "false", None),
        ({"lakelog.delta_view": "true"}, None, ["lakelogView"]),
    ],
)
def test_the_flag_and_the_writer_feature_follow_the_property(
    properties: dict[str, str], flag: str | None, features: list[str] | None
) -> None:
    """On: ``true`` with the writer feature; set back to false: ``false`` (Delta readers
    refuse a range over it, whose change commits have no change files) with the feature
    still declared; never set: the view as before the feed."""
    lines = _entry([_metadata(properties)], properties)
    configuration = lines[2]["metaData"]["configuration"]
    assert configuration.get("delta.enableChangeDataFeed") == flag
    want = features or ["changeDataFeed", "lakelogView"]
    assert lines[1]["protocol"] == {
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "writerFeatures": want,
    }


def _cdf_rows(uri: str, start: int, end: int) -> list[tuple[Any, ...]]:
    got = pa.table(
        deltalake.DeltaTable(local_path(uri)).load_cdf(starting_version=start, ending_version=end)
    )
    names = [*SCHEMA.names, "_change_type", "_commit_version"]
    return sorted(tuple(r[n] for n in names) for r in got.to_pylist())


def test_deltalake_reads_a_change_file_the_view_lists(tmp_path: Path) -> None:
    """A commit with a change file is read from it alone (its partition value from the
    ``cdc`` action); a commit without one from its added files, as inserts."""
    uri = str(tmp_path / "t")
    t = lakelog.create_table(uri, SCHEMA, partition_by=["p"], properties=VIEW_AND_FEED)
    t.append(pa.table({"id": [1, 2], "v": ["a", "b"], "p": ["x", "y"]}, schema=SCHEMA))
    rows = pa.table(
        {"id": [1, 1], "v": ["a", "z"], "_change_type": ["update_preimage", "update_postimage"]}
    )
    (tmp_path / "t" / "_change_data").mkdir()
    pq.write_table(rows, tmp_path / "t" / "_change_data" / "c.parquet")
    size = (tmp_path / "t" / "_change_data" / "c.parquet").stat().st_size
    change = ChangeFile(
        path="_change_data/c.parquet", size_bytes=size, num_rows=2, partition={"p": "x"}
    )
    v = t.commit([change], operation="UPDATE", kind="rowlevel").version
    entry = (tmp_path / "t" / delta_commit_path(v)).read_text()
    assert '"cdc"' in entry
    assert _cdf_rows(uri, 0, v) == sorted(
        [
            (1, "a", "x", "insert", 1),
            (2, "b", "y", "insert", 1),
            (1, "a", "x", "update_preimage", v),
            (1, "z", "x", "update_postimage", v),
        ]
    )


# -- the whole feed, lakelog against deltalake ----------------------------------------

FEED_KEY = [*SCHEMA.names, "_change_type", "_commit_version", "_commit_ms"]


def _key_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """The feed as a sorted multiset of (columns..., type, version, commit time in ms),
    whatever the reader's string and integer types and time zone."""
    ms = table.column("_commit_timestamp").cast(pa.timestamp("ms")).cast(pa.int64())
    t = table.append_column("_commit_ms", ms)
    return sorted(
        (tuple(r[n] for n in FEED_KEY) for r in t.to_pylist()),
        key=lambda r: tuple((v is None, str(v)) for v in r),
    )


def _delta_feed(uri: str, start: int, end: int) -> list[tuple[Any, ...]]:
    table = deltalake.DeltaTable(local_path(uri))
    return _key_rows(pa.table(table.load_cdf(starting_version=start, ending_version=end)))


def _lakelog_feed(t: lakelog.Table, start: int, end: int) -> list[tuple[Any, ...]]:
    return _key_rows(t.changes(start, end).to_arrow())


def _rows(ids: range | list[int], v: str, p: Any = None) -> pa.Table:
    ids = list(ids)
    parts = [p if p is not None else ("x", "y", None)[i % 3] for i in ids]
    return pa.table({"id": ids, "v": [f"{v}{i}" for i in ids], "p": parts}, schema=SCHEMA)


def _version(t: lakelog.Table, result: Any) -> int:
    """The version a change landed (it must have committed)."""
    assert getattr(result, "committed", True), result
    return t.refresh().version


def _history(uri: str) -> tuple[lakelog.Table, dict[str, int]]:
    """Every kind of commit, copy-on-write (the view refuses deletion vectors), in a
    partitioned table (a null partition too) whose view writes checkpoints; the
    compaction commits a claim before its swap."""
    t = lakelog.create_table(
        uri,
        SCHEMA,
        partition_by=["p"],
        properties={**VIEW_AND_FEED, "lakelog.manifest_interval": "3"},
    )
    at: dict[str, int] = {}
    at["append"] = t.append(_rows(range(0, 30), "a")).version
    at["append2"] = t.append(_rows(range(30, 45), "b")).version
    at["delete"] = _version(t, t.delete("id < 5 or id = 33"))
    at["update"] = _version(t, t.update("id >= 10 and id < 16", set={"v": "u"}))
    upsert = pa.concat_tables([_rows(range(14, 20), "m"), _rows(range(100, 104), "n")])
    at["merge"] = _version(t, t.merge(upsert, "id"))
    gone = _rows([20, 21, 200], "d")
    at["merge_delete"] = _version(
        t, t.merge(gone, "id", when_matched="delete", when_not_matched="ignore")
    )
    at["overwrite_where"] = _version(
        t, t.overwrite(_rows(range(300, 304), "o", "y"), where="p = 'y'")
    )
    at["compact"] = _version(t, t.compact(target_file_size=1 << 20, min_input_files=2))
    at["append3"] = t.append(_rows(range(400, 405), "c")).version
    at["delete_partition"] = _version(t, t.delete("p is null"))
    at["overwrite"] = t.overwrite(_rows(range(500, 506), "w")).version
    at["update2"] = _version(t, t.update("id > 503", set={"v": "last"}))
    return t, at


def test_load_cdf_equals_changes_for_every_version_and_range(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t, at = _history(uri)
    latest = t.version
    steps = list(at.values())
    assert steps == sorted(set(steps)) and steps[-1] == latest  # each step committed
    assert _lakelog_feed(t, at["compact"], at["compact"]) == []  # no data change
    rowlevel = ("delete", "update", "merge", "merge_delete", "overwrite_where", "update2")
    for k in rowlevel:
        assert '"cdc"' in (tmp_path / "t" / delta_commit_path(at[k])).read_text(), k
    ranges = [(v, v) for v in range(1, latest + 1)]
    ranges += [(1, latest), (2, at["merge"]), (at["update"], at["append3"]), (7, latest)]
    for start, end in ranges:
        assert _delta_feed(uri, start, end) == _lakelog_feed(t, start, end), (start, end)
    kinds = {r[3] for r in _lakelog_feed(t, 1, latest)}
    assert kinds == {"insert", "delete", "update_preimage", "update_postimage"}
    # the change files and the writer feature leave the snapshots as they were
    con = duckdb_connection()
    for v in (at["update"], at["overwrite_where"], latest):
        want = lakelog_rows(t, v)
        assert deltalake_rows(uri, SCHEMA.names, v) == want, v
        assert polars_rows(uri, SCHEMA.names, v) == want, v
        assert duckdb_rows(con, uri, SCHEMA.names, v) == want, v


def test_the_feed_after_an_expiry(tmp_path: Path) -> None:
    """After an expiry to ``O`` (which deletes the change files of commits up to ``O``),
    Delta readers read the feed from ``O + 1`` as lakelog does."""
    uri = str(tmp_path / "t")
    t, at = _history(uri)
    oldest = at["merge"]
    t.expire_snapshots(older_than=dt.timedelta(0), retain_last=t.version - oldest + 1)
    assert t.refresh().snapshot().oldest_version == oldest
    for start in (oldest + 1, at["overwrite_where"]):
        assert _delta_feed(uri, start, t.version) == _lakelog_feed(t, start, t.version)


def test_a_feed_set_later_and_turned_off(tmp_path: Path) -> None:
    """Set on an existing table: Delta readers read from the version that set it, or
    from an earlier one without a ``metaData`` action, as lakelog does. Turned off: they
    refuse a range over that version (the deletes after it have no change files);
    lakelog refuses a range once it holds such a delete."""
    uri = str(tmp_path / "t")
    t = lakelog.create_table(uri, SCHEMA, properties={"lakelog.delta_view": "true"})
    t.append(_rows(range(10), "a"))
    on = t.set_properties({"lakelog.change_data_feed": "true"}).version
    _version(t, t.delete("id < 3"))
    _version(t, t.update("id = 5", set={"v": "five"}))
    for start in (1, on, on + 1):
        assert _delta_feed(uri, start, t.version) == _lakelog_feed(t, start, t.version)
    with pytest.raises(Exception, match=r"(?i)change data"):
        _delta_feed(uri, 0, t.version)  # version 0's metaData does not enable the feed
    off = t.set_properties({"lakelog.change_data_feed": "false"}).version
    t.append(_rows(range(20, 22), "b"))
    with pytest.raises(Exception, match=r"(?i)change data"):
        _delta_feed(uri, on, t.version)
    assert _delta_feed(uri, off + 1, t.version) == _lakelog_feed(t, off + 1, t.version)
    _version(t, t.delete("id = 20"))
    with pytest.raises(lakelog.ChangeFeedError):
        t.changes(on, t.version).to_arrow()
