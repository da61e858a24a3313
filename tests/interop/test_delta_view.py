"""The Delta view read by real engines: deltalake, polars and DuckDB return exactly
lakelog's rows at every retained version, through appends, overwrites, compaction,
clustering, row-level changes and expiry; types Delta cannot express are refused;
another engine writing to the view is detected and a rebuild recovers."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import logging
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _delta_view_helpers import (
    deltalake_rows,
    duckdb_connection,
    duckdb_rows,
    lakelog_rows,
    local_path,
    polars_rows,
    rows,
)

import lakelog
from lakelog.errors import DeltaViewError
from lakelog.interop.delta.log import (
    BROKEN_MARK,
    DELTA_LOG,
    LAST_CHECKPOINT,
    delta_commit_path,
    list_delta_log,
)
from lakelog.log.actions import AppTransaction, Metadata, encode_schema

deltalake = pytest.importorskip("deltalake")

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us", "UTC")),
        ("ntz", pa.timestamp("ms")),
        ("d", pa.date32()),
        ("dec", pa.decimal128(10, 2)),
        ("s", pa.string()),
        ("b", pa.bool_()),
        ("p", pa.string()),
    ]
)
NAMES = SCHEMA.names
PARTS = ["a/b", "x y%", None]
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def batch(start: int, n: int, part: Any = "cycle") -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": ids,
            "ts": [T0 + dt.timedelta(seconds=i, microseconds=7) for i in ids],
            "ntz": [dt.datetime(2024, 1, 1) + dt.timedelta(milliseconds=3 * i) for i in ids],
            "d": [dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in ids],
            "dec": [decimal.Decimal(i) / 4 for i in ids],
            "s": [None if i % 5 == 0 else f"s{i:03d}" for i in ids],
            "b": [i % 2 == 0 for i in ids],
            "p": [PARTS[i % 3] if part == "cycle" else part for i in ids],
        },
        schema=SCHEMA,
    )


def _table(uri: str, **props: str) -> lakelog.Table:
    return lakelog.create_table(
        uri,
        SCHEMA,
        partition_by=["p"],
        properties={"lakelog.delta_view": "true", "lakelog.manifest_interval": "4", **props},
    )


def _delta_versions(uri: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    st = lakelog.open_table(uri).storage
    listing = list_delta_log(st)
    return listing.commits, listing.checkpoints


def test_every_version_reads_the_same_in_every_engine(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri)
    t.append(batch(0, 12))
    t.append(batch(12, 12))
    t.append(batch(24, 12))
    t.overwrite(batch(100, 6, part="a/b"), partitions=[{"p": "a/b"}])
    t.compact(min_input_files=2)
    t.append(batch(150, 8))
    t.optimize(zorder_by=["id", "d"], incremental=False)
    t.delete("id < 5")
    t.update("id > 30", set={"s": "updated"})
    t.merge(batch(30, 10), on="id")
    t.append(batch(200, 5))
    latest = t.refresh().version
    ops = [h.operation for h in reversed(t.history())]
    assert ops == [
        "CREATE TABLE",
        *["APPEND"] * 3,
        *["OVERWRITE", "CLAIM", "COMPACT", "APPEND", "CLAIM", "OPTIMIZE"],
        *["DELETE", "UPDATE", "MERGE", "APPEND"],
    ], ops
    commits, checkpoints = _delta_versions(uri)
    assert commits == tuple(range(latest + 1))
    assert checkpoints == tuple(v for v in range(latest + 1) if v % 4 == 0)

    con = duckdb_connection()
    for v in range(latest + 1):
        want = lakelog_rows(t, v)
        assert deltalake_rows(uri, NAMES, v) == want, f"deltalake at version {v}"
    want = lakelog_rows(t, latest)
    assert deltalake_rows(uri, NAMES) == want
    assert polars_rows(uri, NAMES) == want
    assert duckdb_rows(con, uri, NAMES) == want
    for v in (1, 4, latest - 1):  # a plain commit, a checkpoint, one before latest
        assert polars_rows(uri, NAMES, v) == lakelog_rows(t, v), f"polars at {v}"
        assert duckdb_rows(con, uri, NAMES, v) == lakelog_rows(t, v), f"duckdb at {v}"

    # expiry: the view keeps every retained version, from a checkpoint at the oldest
    report = t.expire_snapshots(older_than=dt.timedelta(0), retain_last=3)
    oldest = report.oldest_version
    assert oldest == latest - 2
    t.append(batch(300, 4))
    latest = t.refresh().version
    commits, checkpoints = _delta_versions(uri)
    assert commits == tuple(range(oldest, latest + 1))
    assert checkpoints[0] == oldest
    for v in range(oldest, latest + 1):
        assert deltalake_rows(uri, NAMES, v) == lakelog_rows(t, v), f"deltalake at {v}"
    assert duckdb_rows(con, uri, NAMES) == lakelog_rows(t, latest)
    assert polars_rows(uri, NAMES, oldest) == lakelog_rows(t, oldest)
    with pytest.raises(Exception, match=r"(?i)version|not found|invalid|log segment"):
        deltalake.DeltaTable(local_path(uri), version=oldest - 1).to_pyarrow_table()


@pytest.fixture(scope="module")
def narrow_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[lakelog.Table, Any]:
    """Ten files of four consecutive ids each: every file holds a narrow range."""
    t = _table(str(tmp_path_factory.mktemp("narrow") / "t"))
    for start in range(0, 40, 4):
        t.append(batch(start, 4))
    con = duckdb_connection()
    con.register("mine", pa.Table.from_pylist(lakelog_rows(t, t.version), schema=SCHEMA))
    return t, con


@pytest.mark.parametrize(
    "where",
    [
        "ts > TIMESTAMPTZ '2024-01-01 00:00:20+00'",
        "ts <= TIMESTAMPTZ '2024-01-01 00:00:20.000007+00'",
        "ntz >= TIMESTAMP '2024-01-01 00:00:00.060'",
        "ntz < TIMESTAMP '2024-01-01 00:00:00.0605'",
        "d BETWEEN DATE '2024-01-10' AND DATE '2024-01-12'",
        "dec > 5.25",
        "s = 's031'",
        "s IS NULL",
        "p = 'x y%'",
        "p IS NULL",
        "b",
    ],
)
def test_filters_skip_files_by_the_converted_stats_without_losing_rows(
    narrow_files: tuple[lakelog.Table, Any], where: str
) -> None:
    """Readers skip files by the view's stats: a bound converted too tight (timestamps
    cut to milliseconds, dates, decimals) would lose rows here. The same filter over
    lakelog's rows (DuckDB over an in-memory table, no skipping) is the reference."""
    t, con = narrow_files
    expected = rows(con.execute(f"SELECT * FROM mine WHERE {where}").fetch_arrow_table(), NAMES)
    assert 0 < len(expected) < t.snapshot().num_rows
    assert duckdb_rows(con, t.uri, NAMES, where=where) == expected, "delta_scan"
    # deltalake's dataset turns each file's stats into a guarantee Arrow prunes by;
    # DuckDB pushes the filter into that scan
    con.register("view", deltalake.DeltaTable(local_path(t.uri)).to_pyarrow_dataset())
    got = con.execute(f"SELECT * FROM view WHERE {where}").fetch_arrow_table()
    assert rows(got, NAMES) == expected, "deltalake dataset"


def test_stats_are_delta_stats(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _table(uri).append(batch(3, 2, part="a/b"))
    text = Path(uri, DELTA_LOG, "00000000000000000001.json").read_text()
    lines = [json.loads(x) for x in text.splitlines()]
    assert list(lines[0]) == ["commitInfo"]
    assert lines[0]["commitInfo"]["engineInfo"].startswith("lakelog/")
    (add,) = [x["add"] for x in lines if "add" in x]
    assert add["partitionValues"] == {"p": "a/b"}
    assert add["path"].startswith("p=a%252Fb/")
    stats = json.loads(add["stats"])
    assert stats["numRecords"] == 2
    assert stats["minValues"] == {
        "id": 3,
        "ts": "2024-01-01T00:00:03.000Z",  # 3 s + 7 us: minimum rounded down
        "ntz": "2024-01-01T00:00:00.009",
        "d": "2024-01-04",
        "dec": 0.75,
        "s": "s003",
        "b": False,
    }
    assert stats["maxValues"]["ts"] == "2024-01-01T00:00:04.001Z"  # maximum rounded up
    assert stats["nullCount"] == {"id": 0, "ts": 0, "ntz": 0, "d": 0, "dec": 0, "s": 0, "b": 0}


def test_enabling_an_existing_table_starts_with_a_checkpoint(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    # without vectors, so deltalake's pyarrow reader reads the view (with them on, the
    # view declares deletionVectors, which it refuses: test_delta_view_vectors.py)
    cow = {"lakelog.deletion_vectors": "false"}
    t = lakelog.create_table(uri, SCHEMA, partition_by=["p"], properties=cow)
    for i in range(4):
        t.append(batch(10 * i, 5))
    assert not os.path.exists(os.path.join(uri, DELTA_LOG))
    status = lakelog.enable_delta_view(uri)
    enabled_at = t.refresh().version
    assert enabled_at == 5 and t.properties["lakelog.delta_view"] == "true"
    assert status.head == enabled_at and status.in_sync
    assert _delta_versions(uri) == ((enabled_at,), (enabled_at,))
    assert deltalake_rows(uri, NAMES) == lakelog_rows(t, enabled_at)
    t.append(batch(100, 3))
    assert deltalake_rows(uri, NAMES) == lakelog_rows(t, enabled_at + 1)
    assert deltalake_rows(uri, NAMES, enabled_at) == lakelog_rows(t, enabled_at)
    with pytest.raises(Exception, match=r"(?i)version|not found|invalid|log segment"):
        deltalake.DeltaTable(uri, version=enabled_at - 1).to_pyarrow_table()
    # enabling again changes nothing
    assert lakelog.enable_delta_view(uri).head == enabled_at + 1
    assert t.refresh().version == enabled_at + 1


@pytest.mark.parametrize(
    ("field", "why"),
    [
        (pa.field("u", pa.uint32()), "unsigned"),
        (pa.field("n", pa.timestamp("ns")), "microseconds"),
        (pa.field("t", pa.time64("us")), "no Delta type"),
        (pa.field("a b", pa.int64()), "column mapping"),
        (pa.field("l", pa.list_(pa.uint8())), "unsigned"),
    ],
)
def test_types_delta_cannot_express_are_refused(tmp_path: Path, field: pa.Field, why: str) -> None:
    schema = pa.schema([("id", pa.int64()), field])
    on = {"lakelog.delta_view": "true"}
    with pytest.raises(DeltaViewError, match=why):
        lakelog.create_table(str(tmp_path / "new"), schema, properties=on)
    assert not os.path.exists(tmp_path / "new" / "_lakelog" / "00000000000000000000.json")
    t = lakelog.create_table(str(tmp_path / "t"), schema)
    with pytest.raises(DeltaViewError, match=f"'{field.name}'.*{why}"):
        t.set_properties(on)
    with pytest.raises(DeltaViewError, match=why):
        lakelog.enable_delta_view(t)
    assert t.refresh().version == 0 and "lakelog.delta_view" not in t.properties
    assert not os.path.exists(tmp_path / "t" / DELTA_LOG)


def test_other_engines_cannot_write_and_a_foreign_commit_is_detected(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri)
    t.append(batch(0, 6))
    # conforming Delta writers refuse the view's writer feature
    with pytest.raises(Exception, match="lakelogView"):
        deltalake.write_deltalake(uri, batch(50, 2).drop(["ntz"]), mode="append")
    assert _delta_versions(uri)[0] == (0, 1)
    # an engine that ignores the protocol commits version 2 first
    foreign = {"commitInfo": {"timestamp": 1, "operation": "WRITE", "engineInfo": "rogue/1"}}
    Path(uri, delta_commit_path(2)).write_text(json.dumps(foreign) + "\n")
    with caplog.at_level(logging.WARNING, logger="lakelog"):
        result = t.append(batch(6, 3))  # the lakelog commit still lands
    assert result.version == 2 and t.snapshot().num_rows == 9
    assert "rogue/1" in caplog.text and "--rebuild" in caplog.text
    assert Path(uri, BROKEN_MARK).exists()
    t.append(batch(9, 1))  # and the view stays stopped
    assert _delta_versions(uri)[0] == (0, 1, 2)
    with pytest.raises(DeltaViewError, match=r"rogue/1.*--rebuild"):
        lakelog.sync_delta_view(uri)
    status = lakelog.delta_view_status(uri)
    assert status.broken and status.foreign == (2,) and not status.in_sync
    with pytest.raises(DeltaViewError, match="rebuild"):
        lakelog.enable_delta_view(uri)
    # the way out: rebuild from lakelog's latest version
    status = lakelog.enable_delta_view(uri, rebuild=True)
    assert status.in_sync and status.head == t.refresh().version == 3
    assert not Path(uri, BROKEN_MARK).exists()
    assert deltalake_rows(uri, NAMES) == lakelog_rows(t, 3)
    t.append(batch(20, 2))
    assert deltalake_rows(uri, NAMES) == lakelog_rows(t, 4)


def test_a_delta_table_already_there_is_not_replaced(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    deltalake.write_deltalake(uri, pa.table({"x": [1]}))
    t = lakelog.create_table(uri, SCHEMA)
    with pytest.raises(DeltaViewError, match=r"delta-rs.*--rebuild"):
        lakelog.enable_delta_view(t)
    assert t.refresh().version == 0
    assert deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == 1


def test_disable_deletes_the_view(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri)
    t.append(batch(0, 3))
    assert lakelog.disable_delta_view(t) >= 3
    assert not list_delta_log(t.storage).commits
    t.append(batch(3, 3))
    assert not list_delta_log(t.storage).commits
    assert lakelog.enable_delta_view(t).head == t.refresh().version
    assert deltalake_rows(uri, NAMES) == lakelog_rows(t, t.version)


def test_sync_fills_missing_entries_in_order(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri)
    for i in range(7):
        t.append(batch(10 * i, 3))
    st = t.storage
    # as if the writers of versions 5..7 had died before their entries (deleted newest
    # first, so the log never has a hole)
    st.delete([delta_commit_path(v) for v in (7, 6, 5)])
    assert deltalake_rows(uri, NAMES) == lakelog_rows(t, 4)
    status = lakelog.delta_view_status(uri)
    assert status.head == 4 and status.missing == (5, 6, 7)
    report = lakelog.sync_delta_view(uri)
    assert report.written == (5, 6, 7) and report.checkpoints == ()
    for v in range(8):
        assert deltalake_rows(uri, NAMES, v) == lakelog_rows(t, v)
    assert lakelog.sync_delta_view(uri).written == ()
    # a _last_checkpoint naming a checkpoint that is gone is pointed at the newest one
    st.write_bytes(LAST_CHECKPOINT, b'{"version": 6, "size": 3}')
    with pytest.raises(Exception, match=r"(?i)checkpoint"):
        deltalake.DeltaTable(uri).to_pyarrow_table()
    lakelog.sync_delta_view(uri)
    assert deltalake_rows(uri, NAMES) == lakelog_rows(t, 7)


def test_view_on_s3(s3_backend: Any) -> None:
    t = lakelog.create_table(
        s3_backend.uri,
        SCHEMA,
        partition_by=["p"],
        properties={"lakelog.delta_view": "true"},
        storage_options=s3_backend.storage_options,
    )
    t.append(batch(0, 5))
    t.append(batch(5, 5))
    opts = s3_backend.storage_options
    delta_opts = {
        "AWS_ENDPOINT_URL": opts["client_kwargs"]["endpoint_url"],
        "AWS_ACCESS_KEY_ID": opts["key"],
        "AWS_SECRET_ACCESS_KEY": opts["secret"],
        "AWS_REGION": opts["client_kwargs"]["region_name"],
        "AWS_ALLOW_HTTP": "true",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }
    for v in range(3):
        assert deltalake_rows(s3_backend.uri, NAMES, v, delta_opts) == lakelog_rows(t, v)


def _evolve(t: lakelog.Table, schema: pa.Schema, operation: str) -> None:
    """A schema change as ``docs/format.md`` ("Schema evolution") commits it: a
    ``metadata`` action with the new schema (the library's API for it commits the
    same)."""
    md = t.refresh().metadata
    t.commit(
        [
            Metadata(
                table_id=md.table_id,
                schema=encode_schema(schema),
                partition_by=md.partition_by,
                properties=md.properties,
                format_version=md.format_version,
                created_ms=md.created_ms,
            )
        ],
        operation=operation,
        kind="metadata",
    )


def test_schema_evolution_and_app_transactions_in_every_engine(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    v1 = pa.schema([("id", pa.int32()), ("f", pa.float32()), ("gone", pa.string())])
    t = lakelog.create_table(uri, v1, properties={"lakelog.delta_view": "true"})
    t.append(pa.table({"id": [1, 2], "f": [0.5, 1.5], "gone": ["a", "b"]}, schema=v1))
    v2 = pa.schema([("id", pa.int64()), ("f", pa.float64()), ("x", pa.string())])
    _evolve(t, v2, "WIDEN AND ADD COLUMNS")  # widen id and f, drop gone, add x
    t.refresh().commit(
        [AppTransaction(app_id="ingest", app_version=7, timestamp_ms=5)],
        operation="APPEND",
        kind="append",
    )
    t.append(pa.table({"id": [3], "f": [2.5], "x": ["new"]}, schema=v2))
    # an integer widened to a float is refused while the view is on
    v3 = pa.schema([("id", pa.float64()), ("f", pa.float64()), ("x", pa.string())])
    with pytest.raises(DeltaViewError, match=r"\['id'\] widened to a float"):
        _evolve(t, v3, "WIDEN COLUMN")
    latest = t.refresh().version
    assert latest == 4
    con = duckdb_connection()
    for v in range(latest + 1):
        names = t.snapshot(v).schema.names
        want = lakelog_rows(t, v)
        assert deltalake_rows(uri, names, v) == want, f"deltalake at {v}"
        assert polars_rows(uri, names, v) == want, f"polars at {v}"
        assert duckdb_rows(con, uri, names, v) == want, f"duckdb at {v}"
    assert deltalake.DeltaTable(uri).transaction_version("ingest") == 7
