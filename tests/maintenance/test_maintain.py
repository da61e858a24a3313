"""``Table.maintain``: the cost model picks what a person would on crafted tables, the
budget bounds a round, a dry run writes nothing, history says why a rewrite happened,
and a catalog's tables are ranked together."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog.errors import InvalidArgumentError
from lakelog.log.commits import list_log, read_commit

SCHEMA = pa.schema([("p", pa.string()), ("a", pa.int64()), ("b", pa.int64())])


def _batch(rng: np.random.Generator, rows: int, parts: tuple[str, ...] = ("x",)) -> pa.Table:
    return pa.table(
        {
            "p": [parts[i % len(parts)] for i in range(rows)],
            "a": rng.integers(0, 1_000_000, rows),
            "b": rng.integers(0, 1_000_000, rows),
        },
        schema=SCHEMA,
    )


def _files(t: lakelog.Table) -> set[str]:
    return set(t.refresh().snapshot().paths())


def small_files(where: str, parts: tuple[str, ...] = ("x", "y"), batches: int = 6) -> lakelog.Table:
    t = lakelog.create_table(where, SCHEMA, partition_by=["p"])
    rng = np.random.default_rng(1)
    for _ in range(batches):
        t.append(_batch(rng, 20 * len(parts), parts))
    return t


def badly_clustered(where: str) -> lakelog.Table:
    t = lakelog.create_table(
        where,
        SCHEMA,
        properties={"lakelog.target_file_size": str(8 << 10)},
    )
    rng = np.random.default_rng(2)
    for _ in range(6):
        t.append(_batch(rng, 2000))
    t.set_clustering(zorder_by=["a", "b"])
    return t


def full_of_vectors(where: str) -> lakelog.Table:
    t = lakelog.create_table(where, SCHEMA, properties={"lakelog.deletion_vectors": "true"})
    rng = np.random.default_rng(3)
    for _ in range(3):
        t.append(_batch(rng, 2000))
    t.delete("a < 600000")  # about 60% of every file's rows
    smallest = min(f.size_bytes for f in t.snapshot().files())
    t.set_properties({"lakelog.target_file_size": str(smallest)})  # no file is small
    return t


def healthy(where: str) -> lakelog.Table:
    t = lakelog.create_table(where, SCHEMA, partition_by=["p"])
    t.append(_batch(np.random.default_rng(4), 500, ("x", "y")))
    return t


def _kinds(report: lakelog.maintenance.maintain.MaintainReport) -> list[tuple[str, object]]:
    return [(a.kind, a.partition) for a in report.actions]


def test_small_files_are_compacted_per_partition(tmp_path: Path) -> None:
    t = small_files(str(tmp_path / "t"))
    report = t.maintain()
    assert sorted(_kinds(report), key=str) == [("compact", {"p": "x"}), ("compact", {"p": "y"})]
    assert all(a.status == "planned" for a in report.actions)
    a = report.actions[0]
    assert a.score > 0 and a.candidate.rewrite_bytes > 0 and a.candidate.benefit > 0
    version = t.version
    done = t.maintain(dry_run=False)
    assert [a.status for a in done.actions] == ["done", "done"]
    # one compaction for both partitions: one commit, whose note lists them
    assert t.refresh().version == done.actions[0].version == done.actions[1].version
    since = t.history(limit=t.version - version)
    assert [h.operation for h in since].count("COMPACT") == 1
    note = t.history(limit=1)[0].parameters["maintain"]
    assert note["kind"] == "compact" and note["reason"].startswith("2 partitions: ")
    assert sorted(p["p"] for p in note["partitions"]) == ["x", "y"]
    assert sum(a.rewritten_bytes for a in done.actions) == sum(
        a.candidate.rewrite_bytes for a in report.actions
    )
    snap = t.refresh().snapshot()
    assert snap.num_files == 2 and snap.num_rows == 6 * 40
    assert t.maintain().actions == []  # nothing left to do


def test_a_badly_clustered_table_is_clustered(tmp_path: Path) -> None:
    t = badly_clustered(str(tmp_path / "t"))
    before = t.clustering_report(["a", "b"]).box_fraction
    report = t.maintain()
    assert _kinds(report) == [("cluster", None)]
    assert report.actions[0].candidate.figures["box_fraction"] == pytest.approx(before)
    t.maintain(dry_run=False)
    assert t.history(limit=1)[0].operation == "OPTIMIZE"
    assert t.clustering_report(["a", "b"]).box_fraction < before / 2
    assert t.maintain().actions == []


def test_deletion_vectors_are_purged(tmp_path: Path) -> None:
    t = full_of_vectors(str(tmp_path / "t"))
    report = t.maintain()
    assert _kinds(report) == [("purge", None)]
    assert report.actions[0].candidate.figures["files"] == 3
    rows = t.snapshot().to_arrow().num_rows
    t.maintain(dry_run=False)
    snap = t.refresh().snapshot()
    assert all(f.deleted is None for f in snap.files())
    assert snap.to_arrow().num_rows == rows
    # the purged files hold 40% of their rows: now small, so compaction is next
    assert [a.kind for a in t.maintain().actions] == ["compact"]


def test_versions_past_retention_are_expired_and_old_orphans_vacuumed(tmp_path: Path) -> None:
    t = lakelog.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        properties={
            "lakelog.expire.older_than_seconds": "0",
            "lakelog.expire.retain_last": "1",
            "lakelog.vacuum.older_than_seconds": "3600",
        },
    )
    rng = np.random.default_rng(5)
    for _ in range(4):
        t.overwrite(_batch(rng, 2000))  # each version replaces the last's file
    orphan = tmp_path / "t" / "left-by-a-crashed-writer.parquet"
    pq.write_table(_batch(rng, 10), orphan)
    old = time.time() - 7200
    os.utime(orphan, (old, old))
    report = t.maintain()
    kinds = [a.kind for a in report.actions]
    assert sorted(kinds) == ["expire", "vacuum"]
    expire = next(a for a in report.actions if a.kind == "expire")
    assert expire.candidate.figures["versions"] >= 3 and expire.candidate.figures["data_bytes"] > 0
    t.maintain(dry_run=False)
    assert not orphan.exists()
    assert t.refresh().snapshot().oldest_version >= 4
    assert t.maintain().actions == []


def test_a_healthy_table_needs_nothing(tmp_path: Path) -> None:
    t = healthy(str(tmp_path / "t"))
    report = t.maintain()
    assert report.actions == [] and report.left == []
    assert "nothing to do" in str(report)


def test_the_budget_bounds_a_round_and_the_report_says_what_was_left(tmp_path: Path) -> None:
    t = small_files(str(tmp_path / "t"))
    plan = t.maintain(budget_bytes=None)
    assert len(plan.actions) == 2
    first, second = plan.actions
    budget = first.candidate.rewrite_bytes + second.candidate.rewrite_bytes - 1
    report = t.maintain(budget_bytes=budget, dry_run=False)
    assert [a.candidate for a in report.actions] == [first.candidate]
    assert report.left == [second.candidate]
    assert report.rewritten_bytes <= budget
    assert "left over the budget" in str(report)
    snap = t.refresh().snapshot()
    left_partition = second.partition
    assert left_partition is not None
    left_files = [f for f in snap.files() if f.partition == left_partition]
    assert len(left_files) == 6  # the partition over the budget was not touched
    with pytest.raises(InvalidArgumentError, match="budget_bytes"):
        t.maintain(budget_bytes=-1)


def test_a_dry_run_writes_nothing(tmp_path: Path) -> None:
    t = small_files(str(tmp_path / "t"))
    version, files = t.version, _files(t)
    on_disk = sorted(p.relative_to(tmp_path) for p in (tmp_path / "t").rglob("*"))
    report = t.maintain()
    assert report.dry_run and report.actions
    assert t.refresh().version == version and _files(t) == files
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "t").rglob("*")) == on_disk


def test_history_records_why_each_rewrite_happened(tmp_path: Path) -> None:
    t = small_files(str(tmp_path / "t"), parts=("x",))
    report = t.maintain(dry_run=False)
    (action,) = report.actions
    header = t.history(limit=1)[0]
    assert header.operation == "COMPACT" and header.version == action.version
    note = header.parameters["maintain"]
    assert note["kind"] == "compact" and note["reason"] == action.candidate.reason
    assert note["score"] == pytest.approx(action.score, rel=1e-5)


def test_an_expiry_records_why_too(tmp_path: Path) -> None:
    t = lakelog.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        properties={"lakelog.expire.older_than_seconds": "0", "lakelog.expire.retain_last": "1"},
    )
    for _ in range(3):
        t.overwrite(_batch(np.random.default_rng(6), 100))
    report = t.maintain(dry_run=False)
    (action,) = [a for a in report.actions if a.kind == "expire"]
    assert action.version is not None
    commit = read_commit(t.storage, action.version)
    assert commit.header.operation == "EXPIRE SNAPSHOTS"
    assert commit.header.parameters["maintain"]["kind"] == "expire"


def test_a_catalog_ranks_across_its_tables(tmp_path: Path) -> None:
    catalog = lakelog.connect_catalog(
        "sqlite:///" + str(tmp_path) + "/c.db", warehouse=str(tmp_path / "wh")
    )
    catalog.create_namespace("db")
    for name, make in [("fine", healthy), ("many", small_files), ("few", None)]:
        t = catalog.create_table(f"db.{name}", SCHEMA, partition_by=["p"])
        if make is None:  # fewer, larger small files: a lower score than "many"
            rng = np.random.default_rng(7)
            for _ in range(2):
                t.append(_batch(rng, 3000, ("x",)))
        elif make is small_files:
            rng = np.random.default_rng(8)
            for _ in range(8):
                t.append(_batch(rng, 10, ("x",)))
        else:
            t.append(_batch(np.random.default_rng(9), 100, ("x",)))
    from lakelog.maintenance.maintain import maintain_catalog

    report = maintain_catalog(catalog)
    assert report.tables == ["db.few", "db.fine", "db.many"] and report.unread == {}
    assert [(a.candidate.table, a.kind) for a in report.actions] == [
        ("db.many", "compact"),
        ("db.few", "compact"),
    ]
    assert report.actions[0].score > report.actions[1].score
    budget = report.actions[0].candidate.rewrite_bytes
    run = maintain_catalog(catalog, budget_bytes=budget, dry_run=False)
    assert [a.candidate.table for a in run.actions] == ["db.many"]
    assert [c.table for c in run.left] == ["db.few"]
    assert catalog.load_table("db.many").snapshot().num_files == 1
    assert catalog.load_table("db.few").snapshot().num_files == 2
    # a table whose files are gone is left out and said so; the others are still ranked
    shutil.rmtree(catalog.describe_table("db.fine").location.removeprefix("file://"))
    again = maintain_catalog(catalog)
    assert list(again.unread) == ["db.fine"]
    assert [(a.candidate.table, a.kind) for a in again.actions] == [("db.few", "compact")]
    assert "left out, unreadable: db.fine" in str(again)


def test_commits_piling_up_without_a_manifest_get_one(tmp_path: Path) -> None:
    from lakelog.log.commits import list_log

    t = lakelog.create_table(
        str(tmp_path / "t"), SCHEMA, properties={"lakelog.manifest_interval": "4"}
    )
    rng = np.random.default_rng(10)
    t.append(_batch(rng, 2000))
    # commits another writer made without writing the manifests it should have
    for path in (tmp_path / "t" / "_lakelog").glob("*.manifest.parquet"):
        path.unlink()
    (tmp_path / "t" / "_lakelog" / "_last_manifest").unlink(missing_ok=True)
    for _ in range(2):
        t.set_properties({"owner": str(rng.integers(100))})
    assert list_log(t.storage).manifests == ()
    t = lakelog.open_table(str(tmp_path / "t"))
    report = t.maintain()
    assert [a.kind for a in report.actions] == ["manifests"]
    assert report.actions[0].candidate.figures["commits_since_manifest"] == t.version + 1
    t.maintain(dry_run=False)
    assert list_log(t.storage).manifests == (t.version,)
    assert t.maintain().actions == []


def test_a_round_that_rewrites_ends_with_a_manifest(tmp_path: Path) -> None:
    # cold opens then start from the manifest instead of replaying the rewrite's removes
    t = small_files(str(tmp_path / "t"))
    report = t.maintain(dry_run=False)
    assert [a.status for a in report.actions] == ["done", "done"]
    latest = t.refresh().version
    assert latest in list_log(t.storage).manifests
    # a dry run writes nothing
    u = small_files(str(tmp_path / "u"))
    before = list_log(u.storage).manifests
    u.maintain()
    assert list_log(u.storage).manifests == before
