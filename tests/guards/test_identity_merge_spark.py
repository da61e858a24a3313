"""Identity values given out by a Spark merge's inserts (``lakelog.spark.merge`` and
MERGE INTO through ``lakelog.spark.sql``): each insert task numbers its rows from its
own range above the snapshot's mark, so values never repeat, and the commit records the
mark (docs/constraints.md, "Identity columns")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
import lakelog.spark as lspark

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.string())])


def _table(tmp_path: Path) -> lakelog.Table:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, identity={"id": {"start": 1, "step": 1}})
    t.append(pa.table({"k": [1, 2], "v": ["a", "b"]}))
    return t


def _check(t: lakelog.Table, keys: list[int]) -> list[int]:
    t.refresh()
    rows = t.snapshot().to_arrow().sort_by("k")
    assert rows["k"].to_pylist() == keys
    ids = rows["id"].to_pylist()
    assert None not in ids and len(set(ids)) == len(ids)
    assert rows.filter(pa.compute.less_equal(rows["k"], 2))["id"].to_pylist() == [1, 2]
    assert min(i for i, k in zip(ids, keys, strict=True) if k > 2) > 2
    return ids


def test_spark_merge_numbers_its_inserts(spark: Any, tmp_path: Path) -> None:
    t = _table(tmp_path)
    source = spark.createDataFrame(
        [(k, f"n{k}") for k in [2, *range(3, 40)]], "k long, v string"
    ).repartition(4)
    lspark.merge(spark, t.uri, source, on="k")
    ids = _check(t, list(range(1, 40)))
    assert t.snapshot().to_arrow().sort_by("k")["v"][1].as_py() == "n2"  # updated, kept id
    t.append(pa.table({"k": [100], "v": ["x"]}))  # the mark covers the merge's values
    t.refresh()
    assert t.snapshot().to_arrow().sort_by("k")["id"][-1].as_py() > max(ids)


def test_spark_sql_merge_numbers_its_inserts(spark: Any, tmp_path: Path) -> None:
    catalog = lakelog.connect_catalog(f"sqlite:///{tmp_path}/c.db", warehouse=str(tmp_path / "wh"))
    lspark.sql(spark, "CREATE NAMESPACE shop", catalog=catalog)
    lspark.sql(
        spark,
        "CREATE TABLE shop.t (id BIGINT GENERATED ALWAYS AS IDENTITY, k BIGINT, v STRING)"
        " USING lakelog",
        catalog=catalog,
    )
    catalog.load_table("shop.t").append(pa.table({"k": [1, 2], "v": ["a", "b"]}))
    lspark.sql(spark, "CREATE TABLE shop.src (k BIGINT, v STRING) USING lakelog", catalog=catalog)
    lspark.sql(spark, "INSERT INTO shop.src VALUES (2, 'B'), (3, 'c'), (4, 'd')", catalog=catalog)
    lspark.sql(
        spark,
        "MERGE INTO shop.t t USING shop.src s ON t.k = s.k "
        "WHEN MATCHED THEN UPDATE SET v = s.v "
        "WHEN NOT MATCHED THEN INSERT (k, v) VALUES (s.k, s.v)",
        catalog=catalog,
    )
    _check(catalog.load_table("shop.t"), [1, 2, 3, 4])
