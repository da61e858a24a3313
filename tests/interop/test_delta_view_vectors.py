"""Deletion vectors through the Delta view, read by real engines.

lakelog's vectors become Delta deletion vectors (inline, or in DV files of the table
root). At every retained version, deltalake (``DeltaTable.scan``, its DataFusion
reader), polars ``scan_delta`` and DuckDB ``delta_scan`` return exactly lakelog's rows,
through deletes, updates and merges that mark rows, a compaction that purges vectors,
expiry and vacuum. deltalake's pyarrow reader (``to_pyarrow_table``) cannot apply
deletion vectors: it must refuse, never return deleted rows."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _delta_view_helpers import duckdb_connection, local_path, rows

import lakelog
from lakelog.interop.delta.log import DELTA_LOG, checkpoint_path, delta_commit_path
from lakelog.interop.delta.roaring import deserialize, read_dv_file, z85_decode
from lakelog.interop.delta.vectors import INLINE_MAX_BYTES, descriptor_file
from lakelog.log.actions import Metadata
from lakelog.log.commits import read_commit

deltalake = pytest.importorskip("deltalake")
pl = pytest.importorskip("polars")

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("p", pa.string())])
NAMES = SCHEMA.names
PARTS = ["a", "b"]
ESCAPED = ["a", "x y%"]  # a value whose folder name a URL percent-encodes
ZERO = dt.timedelta(0)
VIEW_AND_VECTORS = {"lakelog.delta_view": "true", "lakelog.deletion_vectors": "true"}


def batch(ids: Any, s: str = "v", parts: list[str] = PARTS) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {"id": ids, "s": [f"{s}{i}" for i in ids], "p": [parts[i % 2] for i in ids]},
        schema=SCHEMA,
    )


def in_list(ids: Any) -> str:
    return "id in (" + ", ".join(str(i) for i in ids) + ")"


def create(uri: str, **props: str) -> lakelog.Table:
    return lakelog.create_table(
        uri,
        SCHEMA,
        partition_by=["p"],
        properties={**VIEW_AND_VECTORS, "lakelog.manifest_interval": "3", **props},
    )


# -- readers ---------------------------------------------------------------------------


def lakelog_rows(t: lakelog.Table, version: int) -> list[dict[str, Any]]:
    return rows(t.snapshot(version=version).to_arrow(), NAMES)


def deltalake_rows(uri: str, version: int) -> list[dict[str, Any]]:
    """deltalake's own engine (DataFusion), which applies deletion vectors."""
    reader = deltalake.DeltaTable(local_path(uri), version=version).scan()
    return rows(pa.RecordBatchReader.from_stream(reader).read_all(), NAMES)


def polars_rows(uri: str, version: int) -> list[dict[str, Any]]:
    return rows(pl.scan_delta(local_path(uri), version=version).collect().to_arrow(), NAMES)


def duckdb_rows(con: Any, uri: str, version: int) -> tuple[list[dict[str, Any]], int]:
    """Rows and ``count(*)`` (a count from file statistics would count deleted rows)."""
    alias = f"v{version}_{abs(hash(uri)) % 10**8}"
    con.execute(f"ATTACH '{local_path(uri)}' AS {alias} (TYPE delta, VERSION {version})")
    try:
        got = rows(con.execute(f"SELECT * FROM {alias}").fetch_arrow_table(), NAMES)
        (count,) = con.execute(f"SELECT count(*) FROM {alias}").fetchone()
    finally:
        con.execute(f"DETACH {alias}")
    return got, count


def assert_engines_read(
    t: lakelog.Table, versions: Any, con: Any, *, with_polars: bool = True
) -> None:
    """Every engine returns lakelog's rows at each version; deltalake's pyarrow reader
    refuses wherever the view declares deletion vectors, and returns lakelog's rows
    where it does not."""
    uri = t.uri
    for v in versions:
        want = lakelog_rows(t, v)
        assert deltalake_rows(uri, v) == want, f"deltalake scan() at version {v}"
        if with_polars:
            assert polars_rows(uri, v) == want, f"polars scan_delta at version {v}"
            lazy = pl.scan_delta(local_path(uri), version=v)
            assert lazy.select(pl.len()).collect().item() == len(want), f"polars len at {v}"
        got, count = duckdb_rows(con, uri, v)
        assert got == want, f"duckdb delta_scan at version {v}"
        assert count == len(want), f"duckdb count(*) at version {v}"
        dt_ = deltalake.DeltaTable(local_path(uri), version=v)
        if "deletionVectors" in (dt_.protocol().reader_features or []):
            with pytest.raises(deltalake.exceptions.DeltaProtocolError, match="deletionVectors"):
                dt_.to_pyarrow_table()
        else:
            assert rows(dt_.to_pyarrow_table(), NAMES) == want, f"to_pyarrow_table at {v}"


# -- the Delta log ---------------------------------------------------------------------


def entry(uri: str, version: int) -> list[dict[str, Any]]:
    text = Path(local_path(uri), delta_commit_path(version)).read_text()
    return [json.loads(line) for line in text.splitlines()]


def protocol_at(uri: str, version: int) -> dict[str, Any] | None:
    found = [a["protocol"] for a in entry(uri, version) if "protocol" in a]
    return found[0] if found else None


def checkpoint_adds(uri: str, version: int) -> list[dict[str, Any]]:
    table = pq.read_table(Path(local_path(uri), checkpoint_path(version)))
    return [a for a in table.column("add").to_pylist() if a is not None]


def named_dv_files(uri: str, versions: Any) -> set[str]:
    """DV files the ``add`` actions of the entries at ``versions`` (and the checkpoints
    there) name: what Delta readers of those versions open."""
    out = set()
    for v in versions:
        adds = [a["add"] for a in entry(uri, v) if "add" in a]
        if Path(local_path(uri), checkpoint_path(v)).exists():
            adds += checkpoint_adds(uri, v)
        for add in adds:
            name = descriptor_file(add.get("deletionVector"))
            if name is not None:
                out.add(name)
    return out


def dv_files_on_disk(uri: str) -> set[str]:
    return {p.name for p in Path(local_path(uri)).glob("deletion_vector_*.bin")}


def vector_positions(uri: str, descriptor: dict[str, Any]) -> list[int]:
    """The positions a descriptor names, read back with lakelog's decoder."""
    if descriptor["storageType"] == "i":
        data = z85_decode(descriptor["pathOrInlineDv"])[: descriptor["sizeInBytes"]]
        return deserialize(data).tolist()
    name = descriptor_file(descriptor)
    assert name is not None
    content = Path(local_path(uri), name).read_bytes()
    got = read_dv_file(content, offset=descriptor["offset"], size=descriptor["sizeInBytes"])
    return got.tolist()


# -- tests -----------------------------------------------------------------------------


def test_every_retained_version_reads_the_same_in_every_engine(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = create(uri)
    t.append(batch(range(0, 400)))  # 1: one file per partition, 200 rows each
    t.append(batch(range(400, 800)))  # 2
    t.delete("id = 1 or id = 2")  # 3: one row in each file of version 1: inline vectors
    t.delete(in_list(range(400, 800, 3)))  # 4: a third of version 2's rows: DV files
    t.update("id in (10, 11, 12)", set={"s": "updated"})  # 5: marks, and a new file
    t.merge(batch([20, 21, 1000, 1001], s="merged"), on="id")  # 6
    t.delete(in_list(range(3, 150, 2)))  # 7: the vector of a marked file grows
    t.compact()  # a claim, then the compaction: purges files with >= 20% marked
    t.delete("id = 402 or id = 1000")  # a vector on a compacted file
    latest = t.refresh().version
    ops = [h.operation for h in reversed(t.history())]
    assert ops[-3:] == ["CLAIM", "COMPACT", "DELETE"], ops

    # what the view wrote: both storage types, the files, the protocol, the stats
    descriptors = [
        (a["add"], v)
        for v in range(latest + 1)
        for a in entry(uri, v)
        if "add" in a and "deletionVector" in a["add"]
    ]
    kinds = {d["deletionVector"]["storageType"] for d, _ in descriptors}
    assert kinds == {"i", "u"}
    snapshots = {v: t.snapshot(version=v) for v in range(latest + 1)}
    for add, v in descriptors:
        dv = add["deletionVector"]
        (f,) = [f for f in snapshots[v].files() if f.path == unquote(add["path"])]
        assert f.deleted is not None and dv["cardinality"] == f.deleted.rows
        assert (dv["storageType"] == "i") == (dv["sizeInBytes"] <= INLINE_MAX_BYTES)
        positions = vector_positions(uri, dv)
        assert len(positions) == f.deleted.rows and positions[-1] < f.num_rows
        stats = json.loads(add["stats"])
        assert stats["numRecords"] == f.num_rows  # the physical count
        assert stats["tightBounds"] is False
    for v in range(latest + 1):  # a vector change removes the old logical file by its DV
        adds = {a["add"]["path"]: a["add"] for a in entry(uri, v) if "add" in a}
        for r in [a["remove"] for a in entry(uri, v) if "remove" in a]:
            before = {f.path: f for f in snapshots[v - 1].files()}[unquote(r["path"])]
            assert ("deletionVector" in r) == (before.deleted is not None)
            if r["path"] in adds and "deletionVector" in r:
                assert r["deletionVector"] != adds[r["path"]].get("deletionVector")
    # the feature is declared from the entry of the first vector, not before: until then
    # the view is a table every Delta reader reads (deltalake's pyarrow reader too)
    plain = protocol_at(uri, 0)
    assert plain is not None and plain["minReaderVersion"] == 1
    assert "deletionVectors" not in plain.get("writerFeatures", [])
    first = min(v for _, v in descriptors)
    for v in range(1, first):
        before_first = protocol_at(uri, v)
        assert before_first is None or before_first["minReaderVersion"] == 1
    plain_rows = deltalake.DeltaTable(uri, version=first - 1).to_pyarrow_table()
    assert plain_rows.num_rows == t.snapshot(version=first - 1).num_rows
    protocol = protocol_at(uri, first)
    assert protocol is not None
    assert protocol["minReaderVersion"] == 3 and protocol["minWriterVersion"] == 7
    assert protocol["readerFeatures"] == ["deletionVectors"]
    assert {"deletionVectors", "lakelogView"} <= set(protocol["writerFeatures"])
    (md,) = [a["metaData"] for a in entry(uri, first) if "metaData" in a]
    assert md["configuration"]["delta.enableDeletionVectors"] == "true"
    with_dv = [
        v
        for v in range(3, latest + 1, 3)
        if any(a.get("deletionVector") for a in checkpoint_adds(uri, v))
    ]
    assert with_dv, "a checkpoint carries the descriptors"
    assert named_dv_files(uri, range(latest + 1)) <= dv_files_on_disk(uri)

    # a sync that writes the entries again from the log (as after killed writers), DV
    # files included, writes the same bytes as the committers did
    log_dir = Path(local_path(uri), DELTA_LOG)
    written = {
        v: Path(local_path(uri), delta_commit_path(v)).read_bytes() for v in range(4, latest + 1)
    }
    for v in range(4, latest + 1):
        Path(local_path(uri), delta_commit_path(v)).unlink()
        Path(local_path(uri), checkpoint_path(v)).unlink(missing_ok=True)
    for f in Path(local_path(uri)).glob("deletion_vector_*.bin"):
        f.unlink()
    assert lakelog.delta_view_status(uri).head == 3
    report = lakelog.sync_delta_view(uri)
    assert report.written == tuple(range(4, latest + 1))
    assert {v: Path(local_path(uri), delta_commit_path(v)).read_bytes() for v in written} == written
    assert named_dv_files(uri, range(latest + 1)) <= dv_files_on_disk(uri)
    assert log_dir.is_dir()

    con = duckdb_connection()
    assert_engines_read(t, range(latest + 1), con)

    # expiry, then vacuum: DV files retained versions name stay, the others go
    report = t.expire_snapshots(older_than=ZERO, retain_last=2)
    oldest = report.oldest_version
    assert oldest == latest - 1  # the compaction: the marked files it rewrote are gone
    t.delete(in_list(range(405, 700, 2)))
    latest = t.refresh().version
    retained = range(oldest, latest + 1)
    before = dv_files_on_disk(uri)
    needed = named_dv_files(uri, retained)
    vac = t.vacuum(older_than=ZERO, force=True, dry_run=False)
    after = dv_files_on_disk(uri)
    assert needed <= after
    assert after == needed, "DV files only expired versions named are vacuumed"
    assert before - after, "the DV files of the compacted files' vectors went"
    assert {Path(p).name for p in vac.files if "deletion_vector_" in p} == before - after
    assert_engines_read(t, retained, con)


def test_a_table_with_vectors_gets_the_view_and_a_rebuild(tmp_path: Path) -> None:
    """The former refusal is gone: the view starts on a table holding vectors (its
    checkpoint writes their DV files), both properties go together at creation, and a
    rebuild writes the same descriptors again."""
    uri = str(tmp_path / "t")
    t = lakelog.create_table(
        uri,
        SCHEMA,
        partition_by=["p"],
        properties={"lakelog.deletion_vectors": "true"},
    )
    t.append(batch(range(300)))
    t.delete(in_list(range(0, 300, 3)))  # 50 rows of each file: DV files
    t.delete("id = 1")
    assert not dv_files_on_disk(uri)  # lakelog's own vectors live in its log
    status = lakelog.enable_delta_view(uri)
    assert status.in_sync and status.head == t.refresh().version
    start = status.head
    assert Path(local_path(uri), checkpoint_path(start)).exists()
    cp = [a["deletionVector"] for a in checkpoint_adds(uri, start) if a.get("deletionVector")]
    assert len(cp) == 2 and {d["storageType"] for d in cp} == {"u"}
    assert named_dv_files(uri, [start]) == dv_files_on_disk(uri) != set()
    t.delete("id = 299")
    con = duckdb_connection()
    assert_engines_read(t, range(start, t.refresh().version + 1), con)
    names = dv_files_on_disk(uri)
    for f in Path(local_path(uri)).glob("deletion_vector_*.bin"):
        f.unlink()
    lakelog.enable_delta_view(uri, rebuild=True)  # writes the live ones again, same names
    rebuilt = dv_files_on_disk(uri)
    assert rebuilt and rebuilt <= names
    assert rebuilt == named_dv_files(uri, [t.refresh().version])
    assert_engines_read(t, [t.version], con)

    both = create(str(tmp_path / "both"))
    both.append(batch(range(10)))
    both.delete("id = 3")
    assert_engines_read(both, range(both.refresh().version + 1), con)


def test_the_protocol_follows_whether_files_may_carry_vectors(tmp_path: Path) -> None:
    """Turning vectors off keeps ``deletionVectors`` while a live file carries one;
    once compaction purged them, the next protocol drops it and deltalake's pyarrow
    reader reads again. A restore that brings a vector back without a metadata change
    (the properties are the same) declares the feature again in its own entry."""
    uri = str(tmp_path / "t")
    t = create(uri, **{"lakelog.deletion_vectors.purge_ratio": "0.001"})
    t.append(batch(range(100)))
    t.delete("id = 5")
    t.set_properties({"lakelog.deletion_vectors": "false", "lakelog.expire.retain_last": "9"})
    off = t.refresh().version
    assert "deletionVectors" in protocol_at(uri, off)["readerFeatures"]
    t.compact()  # every marked file is rewritten
    assert not any(f.deleted for f in t.snapshot().files())
    t.set_properties({"lakelog.expire.retain_last": "50"})
    clean = t.refresh().version
    assert protocol_at(uri, clean) == {
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "writerFeatures": ["lakelogView"],
    }
    (md,) = [a["metaData"] for a in entry(uri, clean) if "metaData" in a]
    assert "delta.enableDeletionVectors" not in md["configuration"]
    t.set_properties({"lakelog.expire.retain_last": "9"})  # the properties of ``off``
    assert "deletionVectors" not in json.dumps(protocol_at(uri, t.refresh().version))
    t.append(batch(range(100, 103)))
    t.restore(off)  # the marked file and its vector come back; no metadata action
    restored = t.refresh().version
    actions = read_commit(t.storage, restored).actions
    assert not any(isinstance(a, Metadata) for a in actions)
    assert any(f.deleted for f in t.snapshot().files())
    assert "deletionVectors" in protocol_at(uri, restored)["readerFeatures"]
    assert_engines_read(t, range(restored + 1), duckdb_connection())


def test_vacuum_keeps_the_dv_files_a_kept_view_names_and_drops_a_deleted_views(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "t")
    t = create(uri)
    t.append(batch(range(400)))  # two files of 200 rows
    t.delete(in_list(range(0, 400, 3)))  # DV files
    t.delete(in_list(range(1, 400, 3)))  # larger vectors, new DV files
    names = dv_files_on_disk(uri)
    assert len(names) == 4
    head = t.version
    frozen = lakelog_rows(t, head)
    # a view turned off and kept: its entries below the oldest version keep theirs
    t.set_properties({"lakelog.delta_view": "false"})
    t.compact(min_file_size=1 << 30)  # every file rewritten: no vector is retained
    t.expire_snapshots(older_than=ZERO, retain_last=1)
    t.vacuum(older_than=ZERO, force=True, dry_run=False)
    assert dv_files_on_disk(uri) == names
    assert lakelog.delta_view_status(uri).head == head
    assert deltalake_rows(uri, head) == frozen  # the frozen view, vectors applied
    # the view deleted: its DV files are orphans, deleted once past the grace period
    lakelog.disable_delta_view(uri)
    kept = t.vacuum(older_than=dt.timedelta(hours=1), dry_run=False)
    assert dv_files_on_disk(uri) == names and kept.files_too_young >= len(names)
    gone = t.vacuum(older_than=ZERO, force=True, dry_run=False)
    assert not dv_files_on_disk(uri)
    assert {Path(p).name for p in gone.files} >= names


def test_the_change_feed_of_marking_commits_reads_the_same(tmp_path: Path) -> None:
    """With the change data feed, deletes, updates and merges that mark rows write
    change files: deltalake's ``load_cdf`` returns lakelog's changes for them."""
    uri = str(tmp_path / "t")
    t = create(uri, **{"lakelog.change_data_feed": "true"})
    t.append(batch(range(300)))
    t.delete(in_list(range(0, 300, 5)))
    t.update("id in (1, 2)", set={"s": "u"})
    t.merge(batch([3, 4, 500], s="m"), on="id")
    t.delete("id = 7")
    names = [*NAMES, "_change_type", "_commit_version"]
    for start in range(1, t.refresh().version + 1):
        want = rows(t.changes(start).to_arrow(), names)
        got = deltalake.DeltaTable(local_path(uri)).load_cdf(starting_version=start)
        assert rows(pa.table(got.read_all()), names) == want, f"from version {start}"


@pytest.mark.xfail(
    strict=True,
    reason="deltalake 1.6.6 load_cdf reads a removed file with a deletion vector in a "
    "commit without change files (an overwrite) as its deleted rows, not its live ones",
)
def test_the_change_feed_of_an_overwrite_of_marked_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = create(uri, **{"lakelog.change_data_feed": "true"})
    t.append(batch(range(100)))
    t.delete(in_list(range(0, 100, 10)))
    t.overwrite(batch([1000]))
    v = t.refresh().version
    names = [*NAMES, "_change_type", "_commit_version"]
    want = rows(t.changes(v).to_arrow(), names)
    got = deltalake.DeltaTable(local_path(uri)).load_cdf(starting_version=v)
    assert rows(pa.table(got.read_all()), names) == want


def test_polars_and_files_whose_paths_a_url_escapes(tmp_path: Path) -> None:
    """A partition value with a space or ``%`` gives a folder name a URL escapes.
    deltalake and DuckDB apply the vectors of such files; polars 2.1.0 does not (below):
    it matches deltalake's ``deletion_vectors()`` (URLs, escaped) to ``file_uris()``
    (paths, not escaped), finds no vector and returns the deleted rows."""
    uri = str(tmp_path / "t")
    t = create(uri)
    t.append(batch(range(400), parts=ESCAPED))
    t.delete(in_list(range(0, 400, 3)))  # vectors in both partitions
    assert_engines_read(t, range(t.version + 1), duckdb_connection(), with_polars=False)
    got = polars_rows(uri, t.version)
    want = lakelog_rows(t, t.version)
    escaped = [r for r in got if r["p"] == "x y%"]
    assert [r for r in got if r["p"] == "a"] == [r for r in want if r["p"] == "a"]
    assert len(escaped) == 200 > len([r for r in want if r["p"] == "x y%"]), (
        "polars now applies these vectors: update docs/delta-view.md and this test"
    )


def test_dv_files_hold_what_lakelog_deleted(tmp_path: Path) -> None:
    """A DV file is Delta's format: version byte, big-endian size, the portable
    RoaringBitmapArray, big-endian CRC-32; the descriptor's offset points at the size."""
    uri = str(tmp_path / "t")
    t = create(uri)
    t.append(batch(range(0, 300_000, 2)))  # one file (partition "a") of 150000 rows
    # positions: 5000 in the first 16-bit container (a bitmap container), a few in the
    # second and third (array containers); the id at position i is 2 * i
    gone = [*range(0, 20_000, 4), 70_000, 70_001, 140_000, 149_999]
    t.delete(in_list(2 * i for i in gone))
    (f,) = t.snapshot().files()
    (add,) = [a["add"] for a in entry(uri, t.version) if "add" in a]
    dv = add["deletionVector"]
    assert dv["storageType"] == "u" and dv["offset"] == 1 and dv["cardinality"] == len(gone)
    content = Path(local_path(uri), descriptor_file(dv) or "").read_bytes()
    assert content[0] == 1 and int.from_bytes(content[1:5], "big") == dv["sizeInBytes"]
    assert len(content) == 1 + 4 + dv["sizeInBytes"] + 4
    from lakelog.log.deletion_vectors import deleted_positions

    assert f.deleted is not None
    assert vector_positions(uri, dv) == deleted_positions(f.deleted, f.num_rows).tolist() == gone
    assert_engines_read(t, [t.version], duckdb_connection())
    assert Path(local_path(uri), DELTA_LOG).is_dir()


def test_vectors_beside_column_mapping(tmp_path: Path) -> None:
    """A renamed column makes the view use Delta column mapping; its vectors read the
    same through deltalake and DuckDB, before and after the rename (polars refuses
    column mapping, vectors or not)."""
    uri = str(tmp_path / "t")
    t = lakelog.create_table(
        uri,
        pa.schema([("id", pa.int64()), ("s", pa.string())]),
        properties={**VIEW_AND_VECTORS, "lakelog.column_mapping": "true"},
    )
    t.append(pa.table({"id": list(range(300)), "s": [f"s{i}" for i in range(300)]}))
    t.delete(in_list(range(0, 300, 3)))
    t.rename_column("s", "name")
    t.delete("id = 1")
    con = duckdb_connection()
    for v in range(t.version + 1):
        snap = t.snapshot(version=v)
        names = snap.schema.names
        want = rows(snap.to_arrow(), names)
        reader = deltalake.DeltaTable(local_path(uri), version=v).scan()
        assert rows(pa.RecordBatchReader.from_stream(reader).read_all(), names) == want
        con.execute(f"ATTACH '{local_path(uri)}' AS cm{v} (TYPE delta, VERSION {v})")
        assert rows(con.execute(f"SELECT * FROM cm{v}").fetch_arrow_table(), names) == want
    protocol = protocol_at(uri, t.version - 1)
    assert protocol is not None
    assert protocol["readerFeatures"] == ["columnMapping", "deletionVectors"]
    with pytest.raises(deltalake.exceptions.DeltaProtocolError, match="columnMapping"):
        pl.scan_delta(local_path(uri)).collect()
