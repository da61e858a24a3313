"""``lakelog.spark.convert``: ``lakelog.convert`` with the footers read in Spark tasks.

The Spark conversion must give the log the embedded one gives (same files, sizes, row
counts, partition values and statistics, including statistics taken again over a
widened type), fail with the same errors on the same bad folders, and never read a
footer on the driver.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.errors import InvalidArgumentError, LakelogError
from lakelog.log.actions import AddFile, Metadata
from lakelog.log.commits import read_commit
from lakelog.storage import Storage

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]


def _part(i: int, *, narrow: bool = False) -> pa.Table:
    """Three rows of every kind of statistic: integers (one file's narrower), floats with
    a NaN, strings, dates, timestamps, decimals, a column of nulls in some files."""
    base = 10 * i
    return pa.table(
        {
            "id": pa.array(range(base, base + 3), pa.int32() if narrow else pa.int64()),
            "x": pa.array([base / 7, float("nan") if i % 3 == 0 else 1.5, -2.0]),
            "name": pa.array([f"n{i}", None, "zz" if i % 2 else "a"]),
            "day": pa.array([dt.date(2026, 1, 1 + i % 20)] * 3),
            "ts": pa.array(
                [dt.datetime(2026, 1, 1, i % 24, tzinfo=dt.timezone.utc), None, None],
                pa.timestamp("us", tz="UTC"),
            ),
            "price": pa.array([Decimal(f"{i}.25"), None, Decimal("-1.50")], pa.decimal128(9, 2)),
        }
    )


def _folder(root: Path, *, partitioned: bool, files: int = 12) -> Path:
    for i in range(files):
        where = root / f"region=r{i % 3}" / f"year={2024 + i % 2}" if partitioned else root
        where.mkdir(parents=True, exist_ok=True)
        pq.write_table(_part(i, narrow=i == 4), where / f"part-{i:03d}.parquet")
    (root / "_SUCCESS").write_text("")  # hidden: skipped by both
    return root


def _version_zero(path: Path) -> tuple[Metadata, list[AddFile], Any]:
    commit = read_commit(Storage(str(path)), 0)
    md = next(a for a in commit.actions if isinstance(a, Metadata))
    adds = sorted((a for a in commit.actions if isinstance(a, AddFile)), key=lambda a: a.path)
    return md, adds, commit.header


@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "hive"])
def test_the_log_is_the_embedded_convert_log(spark: Any, tmp_path: Path, partitioned: bool) -> None:
    embedded = _folder(tmp_path / "embedded", partitioned=partitioned)
    distributed = tmp_path / "spark"
    shutil.copytree(embedded, distributed)  # copy2: the same modification times

    lakelog.convert(str(embedded), properties={"team": "ingest"})
    # several tasks, so their payloads are put back together in the listing's order
    table = lspark.convert(spark, str(distributed), properties={"team": "ingest"}, files_per_task=5)

    md_e, adds_e, head_e = _version_zero(embedded)
    md_s, adds_s, head_s = _version_zero(distributed)
    assert md_s.arrow_schema() == md_e.arrow_schema()
    assert md_s.arrow_schema().field("id").type == pa.int64()  # widened over the int32 file
    assert (md_s.partition_by, md_s.properties) == (md_e.partition_by, md_e.properties)
    assert md_s.partition_by == (("region", "year") if partitioned else ())
    assert len(adds_s) == 12
    assert adds_s == adds_e  # paths, sizes, rows, partition values, stats, times
    narrow = next(a for a in adds_s if a.path.endswith("part-004.parquet"))
    assert narrow.stats is not None and narrow.stats.min["id"] == 40
    assert (head_s.operation, head_s.parameters, head_s.metrics) == (
        head_e.operation,
        head_e.parameters,
        head_e.metrics,
    )

    # readable afterwards: lakelog and Spark give the rows that were written
    want = sorted(r["id"] for i in range(12) for r in _part(i).to_pylist())
    assert sorted(table.snapshot().to_arrow(["id"]).column("id").to_pylist()) == want
    assert sorted(r.id for r in lspark.read(spark, str(distributed)).select("id").collect()) == want


def _existing_table(root: Path) -> None:
    lakelog.write_table(str(root), _part(0))


def _delta_table(root: Path) -> None:
    _folder(root, partitioned=False, files=2)
    (root / "_delta_log").mkdir()
    (root / "_delta_log" / "00000000000000000000.json").write_text("{}")


def _empty(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "notes.txt").write_text("not parquet")


def _mixed_schemas(root: Path) -> None:
    _folder(root, partitioned=False, files=3)
    pq.write_table(_part(9).set_column(0, "id", pa.array(["a", "b", "c"])), root / "z.parquet")


def _mixed_layouts(root: Path) -> None:
    _folder(root, partitioned=True, files=3)
    pq.write_table(_part(9), root / "loose.parquet")


def _not_parquet(root: Path) -> None:
    _folder(root, partitioned=False, files=3)
    (root / "broken.parquet").write_bytes(b"this is not a parquet file at all")


def _partition_column_inside(root: Path) -> None:
    (root / "day=2026-01-01").mkdir(parents=True)
    pq.write_table(_part(1), root / "day=2026-01-01" / "a.parquet")


BAD: dict[str, Callable[[Path], None]] = {
    "existing-table": _existing_table,
    "delta-table": _delta_table,
    "empty-folder": _empty,
    "mixed-schemas": _mixed_schemas,
    "mixed-partition-folders": _mixed_layouts,
    "not-parquet": _not_parquet,
    "partition-column-inside": _partition_column_inside,
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_the_same_errors_as_the_embedded_convert(spark: Any, tmp_path: Path, case: str) -> None:
    root = tmp_path / "raw"
    root.mkdir()
    BAD[case](root)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))

    # a refusal commits nothing, so both run on the one folder and name it alike
    with pytest.raises(LakelogError) as embedded:
        lakelog.convert(str(root))
    with pytest.raises(LakelogError) as distributed:
        lspark.convert(spark, str(root), files_per_task=2)
    assert type(distributed.value) is type(embedded.value)
    assert str(distributed.value) == str(embedded.value)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_the_driver_reads_no_footer(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every footer read in this process is counted (from the footer reader's debug log);
    Spark's Python workers are other processes, whose logs this does not capture. The
    embedded convert, counted the same way, shows that the count would catch a footer
    read on the driver."""
    caplog.set_level(logging.DEBUG, logger="lakelog")

    def seen() -> list[tuple[int | None, str]]:
        return [
            (r.process, r.getMessage())
            for r in caplog.records
            if r.getMessage().startswith("reading the footer of ")
        ]

    on_spark = _folder(tmp_path / "spark", partitioned=True, files=6)
    here = tmp_path / "here"
    shutil.copytree(on_spark, here)

    table = lspark.convert(spark, str(on_spark))
    assert seen() == []
    assert table.snapshot().num_files == 6

    lakelog.convert(str(here))
    assert len(seen()) >= 6 and {pid for pid, _ in seen()} == {os.getpid()}


def test_what_the_tasks_cannot_run_on_is_refused(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="in-memory filesystem"):
        lspark.convert(spark, "memory://convert-me")
    with pytest.raises(InvalidArgumentError, match="files_per_task"):
        lspark.convert(spark, str(tmp_path), files_per_task=0)


def test_a_conversion_into_transforms_records_the_embedded_values(
    spark: Any, tmp_path: Path
) -> None:
    fields = ["day(day)", "bucket(4, id)"]
    for where in ("embedded", "spark"):
        root = tmp_path / where
        root.mkdir()
        for i in range(6):  # one day and one bucket per file: one id per file
            rows = _part(i).slice(0, 1)
            pq.write_table(rows, root / f"part-{i:03d}.parquet")
    lakelog.convert(str(tmp_path / "embedded"), partition_by=fields)
    table = lspark.convert(spark, str(tmp_path / "spark"), partition_by=fields, files_per_task=2)
    md, adds, _ = _version_zero(tmp_path / "spark")
    want_md, want_adds, _ = _version_zero(tmp_path / "embedded")
    assert md.partition_specs == want_md.partition_specs == (tuple(fields),)
    assert [a.tags for a in adds] == [a.tags for a in want_adds]
    assert all(a.tags["partition.id_bucket_4"] for a in adds)
    kept = table.snapshot().files("day = '2026-01-03'")
    assert [f.path for f in kept] == ["part-002.parquet"]
