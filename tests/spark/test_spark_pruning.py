"""Pruning: the exact file list handed to Spark, and never a file Spark needs.

The correctness check reads every file with the filter applied by Spark and
asserts that every file holding a matching row is in the plan, for filters
covering Spark's semantics where they differ from Arrow's (NaN, NULL,
``<=>``, NOT over three-valued logic, casts, IN with NULL).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
import lakelog.spark as lspark

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("d", pa.date32()),
        ("i8", pa.int8()),
        ("flag", pa.bool_()),
        ("day", pa.date32()),
    ]
)


@pytest.fixture(scope="module")
def clustered(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Eight files per day-partition pair, each holding one sorted range of ``k``.

    File j of a day holds k in [100*j, 100*j + 9]; one file has a NaN and
    one only nulls in ``f``; strings and dates follow ``k``.
    """
    uri = str(tmp_path_factory.mktemp("pruning") / "t")
    table = lakelog.create_table(uri, SCHEMA, partition_by=["day"])
    nan = float("nan")
    for day in (dt.date(2024, 1, 1), dt.date(2024, 1, 2)):
        for j in range(4):
            ks = list(range(100 * j, 100 * j + 10))
            fs: list[float | None] = [k / 1000 for k in ks]
            if j == 1:
                fs[3] = nan  # Spark: NaN > every number, NaN = NaN
            if j == 2:
                fs = [None] * len(ks)
            table.append(
                pa.table(
                    {
                        "k": ks,
                        "f": fs,
                        "s": [f"s{k:04d}" for k in ks],
                        "d": [dt.date(2023, 1, 1) + dt.timedelta(days=k) for k in ks],
                        "i8": [j] * len(ks),
                        "flag": [j % 2 == 0] * len(ks),
                        "day": [day] * len(ks),
                    },
                    schema=SCHEMA,
                )
            )
    return uri


def _kept_paths(plan: lspark.ReadPlan) -> set[str]:
    return {f.path for f in plan.files}


def test_partition_filter_prunes_to_one_partition(spark: Any, clustered: str) -> None:
    plan = lspark.plan_read(spark, clustered, filter="day = '2024-01-02'")
    snap = lakelog.open_table(clustered).snapshot()
    want = [f for f in snap.files() if f.partition["day"] == "2024-01-02"]
    assert len(want) == 4 and plan.skipped_files == 4
    assert sorted(plan.urls) == sorted(snap.storage.url(f.path) for f in want)
    assert plan.to_dataframe(spark).count() == 40


def test_stats_filter_on_clustered_column(spark: Any, clustered: str) -> None:
    from pyspark.sql import functions as F

    snap = lakelog.open_table(clustered).snapshot()
    want = sorted(
        snap.storage.url(f.path) for f in snap.files() if f.stats and f.stats.min["k"] == 200
    )
    assert len(want) == 2
    for flt in ("k >= 203 AND k < 207", F.col("k").between(203, 206), "k IN (200, 205)"):
        plan = lspark.plan_read(spark, clustered, filter=flt)
        assert sorted(plan.urls) == want, flt
    # both filters together: one file
    plan = lspark.plan_read(spark, clustered, filter="k = 305 AND day = '2024-01-01'")
    assert len(plan.urls) == 1
    rows = plan.to_dataframe(spark).collect()
    assert [(r.k, r.day) for r in rows] == [(305, dt.date(2024, 1, 1))]


FILTERS = [
    "k < 105",
    "k > 390",
    "NOT (k >= 100)",
    "NOT (k < 300 OR k > 302)",
    "k = 5 OR s = 's0301'",
    "k IN (1, NULL, 201)",
    "NOT (k IN (1, 2, NULL))",
    "NOT (k IN (1, 2))",
    "f > 0.5",  # only the NaN row (Spark semantics)
    "f >= 'NaN'",
    "f < 0.0015",
    "NOT (f < 0.15)",
    "f IS NULL",
    "f <=> NULL",
    "NOT (f <=> 0.2)",
    "NOT (f = 0.2)",
    "i8 = 2 AND flag",
    "NOT flag",
    "i8 > 2.5",  # a cast of the column to decimal/double
    "cast(k AS int) < 3",
    "d >= '2023-10-29'",
    "d < date'2023-01-03' OR s LIKE 's03%'",
    "s BETWEEN 's0100' AND 's0102'",
    "upper(s) = 'S0001'",  # not understood: nothing pruned by it
    "day = '2024-01-01' AND NOT (k < 300 AND upper(s) = 'X')",
    "k = 1 AND false",
    "true",
]


@pytest.fixture(scope="module")
def everything(spark: Any, clustered: str) -> Any:
    """Every row, read without pruning, with the name of the file it came from."""
    from pyspark.sql import functions as F

    df = lspark.read(spark, clustered)
    return df.select("*", F.col("_metadata.file_name").alias("_file"))


def _key(row: Any) -> str:
    return repr(tuple(row))  # repr: NaN compares equal to NaN


@pytest.mark.parametrize("flt", FILTERS)
def test_pruning_keeps_every_file_spark_needs(
    spark: Any, clustered: str, everything: Any, flt: str
) -> None:
    plan = lspark.plan_read(spark, clustered, filter=flt)
    matching = everything.where(flt).collect()
    needed = {r["_file"] for r in matching}
    kept = {p.rsplit("/", 1)[-1] for p in _kept_paths(plan)}  # names are unique (UUIDs)
    assert needed <= kept, (flt, plan.pruning)
    got = sorted(_key(r) for r in plan.to_dataframe(spark).collect())
    assert got == sorted(_key(r[:-1]) for r in matching)


def test_expected_pruning_strength(spark: Any, clustered: str) -> None:
    """Filters that must prune (so the translation is not vacuous)."""
    cases = {
        "k < 105": 4,  # files of j=0 and j=1 in both days
        "NOT (k >= 100)": 2,
        "k IN (1, NULL, 201)": 4,
        "f < 0.0015": 4,  # j=0 (min 0.0) and j=1 (min 0.1, but has NaN? no: NaN not < 0.0015)
        "i8 = 2 AND flag": 2,
        "d >= '2023-10-29'": 2,  # k >= 301
        "k = 1 AND false": 0,
    }
    for flt, at_most in cases.items():
        plan = lspark.plan_read(spark, clustered, filter=flt)
        assert len(plan.files) <= at_most, (flt, plan.pruning, len(plan.files))
    assert lspark.plan_read(spark, clustered, filter="upper(s) = 'S0001'").pruning is None


def test_filter_type_is_checked(spark: Any, clustered: str) -> None:
    import pyarrow.compute as pc

    with pytest.raises(lakelog.InvalidArgumentError, match="Spark SQL string"):
        lspark.plan_read(spark, clustered, filter=pc.field("k") > 3)


def test_unknown_columns_are_refused(spark: Any, clustered: str, tmp_path: Path) -> None:
    with pytest.raises(lakelog.InvalidArgumentError, match="unknown"):
        lspark.plan_read(spark, clustered, columns=["k", "nope"])
