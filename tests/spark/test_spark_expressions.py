"""One expression rule for the Spark read and change APIs: a filter, condition or SET
value is a Spark Column or a Spark SQL string, meaning what it means in Spark.

* Every call form (Column, ``F.expr``, SQL string) gives the same table, and the table
  Spark itself computes (NaN and nulls included) for delete, update and merge.
* Wrong types, unknown columns and parts lakelog does not evaluate are one-line
  ``InvalidArgumentError``s naming the caller's parameter; PySpark's JSON log of the
  analysis error is not printed.
* Hadoop-style URIs (``file:/...``) reach the same table from Spark, and the data-file
  URLs Spark reports match the log's paths.
"""

from __future__ import annotations

import math
import shutil
import urllib.parse
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.errors import InvalidArgumentError, SchemaMismatchError
from lakelog.storage import Storage

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.float64())])
ROWS = {
    "id": [1, 2, 3, 4, 5, 6, None],
    "p": ["a", "b", None, "a", "b", "a", "c"],
    "v": [0.5, 2.0, math.nan, None, 3.5, -1.0, 7.0],
}


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    v = row["v"]
    return (
        row["id"] is None,
        row["id"] or 0,
        str(row["p"]),
        v is None,
        math.isnan(v) if v is not None else False,
        0.0 if v is None or math.isnan(v) else v,
    )


def _rows(uri: str) -> list[tuple[Any, ...]]:
    return sorted(_key(r) for r in lakelog.open_table(uri).snapshot().to_arrow().to_pylist())


def _spark_rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(_key(r.asDict()) for r in df.collect())


@pytest.fixture
def base(tmp_path: Path) -> str:
    uri = str(tmp_path / "base")
    lakelog.write_table(uri, pa.table(ROWS, schema=SCHEMA))
    lakelog.write_table(uri, pa.table({"id": [7], "p": ["b"], "v": [1.5]}, schema=SCHEMA))
    return uri


def _copy(base: str, name: str) -> str:
    uri = str(Path(base).parent / name)
    shutil.copytree(base, uri)
    return uri


CONDITIONS = [
    "v > 1",
    "v >= 2.0",
    "v < 3",
    "not (v <= 2)",
    "v = double('NaN')",
    "v <=> null",
    "id in (1, 3, null)",
    "not (id in (1, null))",
    "id * 2 + 1 > 7",
    "id / 2 >= 2",
    "case when id > 3 then v else 0 end > 1",
    "coalesce(v, 100) > 50",
    "id between 2 and 4",
    "p = 'a' or v is null",
    "if(p = 'b', v, -v) < 0",
]


@pytest.mark.parametrize("condition", CONDITIONS)
def test_delete_keeps_what_spark_keeps(spark: Any, base: str, condition: str) -> None:
    from pyspark.sql import functions as F

    want = _spark_rows(lspark.read(spark, base).where(~F.coalesce(F.expr(condition), F.lit(False))))
    as_string, as_column = _copy(base, "s"), _copy(base, "c")
    lspark.delete(spark, as_string, condition)
    lspark.delete(spark, as_column, F.expr(condition))
    assert _rows(as_string) == want
    assert _rows(as_column) == want


def test_update_sets_what_spark_computes(spark: Any, base: str) -> None:
    from pyspark.sql import functions as F

    where = "id >= 2 and p <> 'c'"
    sets = {"v": "v * 2 + id", "p": "case when id > 3 then 'x' else p end"}
    df = lspark.read(spark, base)
    hit = F.coalesce(F.expr(where), F.lit(False))
    want = _spark_rows(
        df.select(
            "id",
            F.when(hit, F.expr(sets["p"])).otherwise(F.col("p")).alias("p"),
            F.when(hit, F.expr(sets["v"])).otherwise(F.col("v")).alias("v"),
        )
    )
    forms = {
        "strings": (where, sets),
        "columns": (
            (F.col("id") >= 2) & (F.col("p") != "c"),
            {
                "v": F.col("v") * 2 + F.col("id"),
                "p": F.when(F.col("id") > 3, F.lit("x")).otherwise(F.col("p")),
            },
        ),
    }
    for name, (w, s) in forms.items():
        uri = _copy(base, name)
        r = lspark.update(spark, uri, w, set=s)
        assert r.updated_rows == 5, name
        assert _rows(uri) == want, name


def test_update_column_gives_the_embedded_table(spark: Any, base: str) -> None:
    """The issue's example: ``set={"amount": F.col("amount") * 2}`` was refused."""
    from pyspark.sql import functions as F

    ours, theirs = _copy(base, "ours"), _copy(base, "theirs")
    lspark.update(spark, ours, F.col("id") == 5, set={"v": F.col("v") * 2})
    lakelog.open_table(theirs).update("id = 5", set={"v": pc.field("v") * 2})
    assert _rows(ours) == _rows(theirs)


def test_merge_values_and_conditions_in_every_form(spark: Any, base: str) -> None:
    from pyspark.sql import functions as F

    source = spark.createDataFrame(
        [(1, "s", 10.0), (2, "s", 20.0), (5, "s", 1.0), (9, "s", 9.0)],
        "id long, p string, v double",
    )
    forms = {
        "string": ({"v": "v * 2", "p": "upper(p)"}, "v < source.v"),
        "expr": ({"v": F.expr("v * 2"), "p": F.upper("p")}, "v < source.v"),
        "arrow": (
            {"v": pc.field("source.v") * 2, "p": F.upper("p")},
            pc.field("v") < pc.field("source.v"),
        ),
    }
    results = {}
    for name, (values, condition) in forms.items():
        uri = _copy(base, name)
        r = lspark.merge(
            spark, uri, source, on="id", when_matched=values, matched_condition=condition
        )
        assert (r.updated_rows, r.inserted_rows) == (2, 1), name  # id 5: 3.5 < 1.0 is false
        results[name] = _rows(uri)
    assert results["string"] == results["expr"] == results["arrow"]
    got = {
        r["id"]: (r["p"], r["v"]) for r in lakelog.open_table(uri).snapshot().to_arrow().to_pylist()
    }
    assert got[1] == ("S", 20.0) and got[2] == ("S", 40.0) and got[5] == ("b", 3.5)


def test_read_filter_column_and_string_agree(spark: Any, base: str) -> None:
    from pyspark.sql import functions as F

    a = _spark_rows(lspark.read(spark, base, filter="v > 1 and p = 'b'"))
    b = _spark_rows(lspark.read(spark, base, filter=(F.col("v") > 1) & (F.col("p") == "b")))
    assert a == b and len(a) == 3


def test_wrong_types_name_the_parameter(spark: Any, base: str) -> None:
    from pyspark.sql import functions as F

    source = spark.createDataFrame([(1, "s", 1.0)], "id long, p string, v double")
    with pytest.raises(InvalidArgumentError, match=r"set=\{'v': \.\.\.\}"):
        lspark.update(spark, base, "id = 1", set={"v": "vv * 2"})
    with pytest.raises(InvalidArgumentError, match=r"set=\{'p': \.\.\.\}.*F\.lit\('closed'\)"):
        lspark.update(spark, base, "id = 1", set={"p": "closed"})  # a string is SQL
    with pytest.raises(InvalidArgumentError, match=r"set=\{'v': \.\.\.\}.*reverse"):
        lspark.update(spark, base, "id = 1", set={"v": F.reverse("p").cast("double")})
    with pytest.raises(InvalidArgumentError, match=r"when_matched=\{'v': \.\.\.\}.*'nope'"):
        lspark.merge(spark, base, source, on="id", when_matched={"v": "nope * 2"})
    with pytest.raises(SchemaMismatchError, match="when_matched="):  # was set=
        lspark.merge(spark, base, source, on="id", when_matched={"v": [1, 2]})
    with pytest.raises(InvalidArgumentError, match=r"matched_condition=.*'nope'"):
        lspark.merge(spark, base, source, on="id", matched_condition=F.col("nope") > 1)
    with pytest.raises(InvalidArgumentError, match="where"):
        lspark.delete(spark, base, 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="filter="):
        lspark.read(spark, base, filter=42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"where=.*Syntax error"):
        lspark.delete(spark, base, "id = = 1")
    assert lakelog.open_table(base).version == 1  # nothing was written


@pytest.mark.parametrize(
    "call",
    [
        lambda spark, uri: lspark.read(spark, uri, filter="idd = 5"),
        lambda spark, uri: lspark.delete(spark, uri, "idd = 5"),
        lambda spark, uri: lspark.update(spark, uri, "idd = 5", set={"v": 1.0}),
    ],
    ids=["read", "delete", "update"],
)
def test_an_unknown_column_is_one_line_naming_the_closest(
    spark: Any, base: str, capfd: pytest.CaptureFixture[str], call: Any
) -> None:
    capfd.readouterr()
    with pytest.raises(InvalidArgumentError) as info:
        call(spark, base)
    message = str(info.value)
    assert "\n" not in message
    assert "'idd'" in message and "did you mean 'id'" in message
    assert "['id', 'p', 'v']" in message
    out, err = capfd.readouterr()
    assert "SQLQueryContextLogger" not in err + out and "UNRESOLVED_COLUMN" not in err + out


def test_hadoop_uris_from_spark(spark: Any, tmp_path: Path) -> None:
    """``file:/...`` (as ``CREATE TABLE ... LOCATION`` hands it over) reaches the table,
    and the URLs Spark reports for its rows are the log's files."""
    from pyspark.sql import functions as F

    folder = tmp_path / "a b" / "t"
    lakelog.write_table(str(folder), pa.table(ROWS, schema=SCHEMA))
    hadoop = "file:" + urllib.parse.quote(str(folder))
    df = lspark.read(spark, hadoop)
    assert df.count() == 7
    urls = {
        r[0]
        for r in df.select(F.input_file_name()).collect()
        + df.select("_metadata.file_path").collect()
    }
    storage = Storage(hadoop)
    assert {storage.relative_url(u) for u in urls} == set(
        lakelog.open_table(str(folder)).snapshot().paths()
    )
    lspark.delete(spark, hadoop, "id = 1")
    assert lakelog.open_table(str(folder)).snapshot().num_rows == 6
    lspark.write(df.where("id = 2"), "file://localhost" + urllib.parse.quote(str(folder)))
    assert lakelog.open_table(str(folder)).snapshot().num_rows == 7


def test_spark_connect_takes_strings_and_refuses_what_it_cannot_see(
    connect_client: Any, tmp_path: Path
) -> None:
    """On Spark Connect lakelog cannot see a plan: a string where/matched_condition is
    read by lakelog's own filter parser and a SET value's SQL text by its SQL reader, a
    merge's values are computed by Spark, and a Column where is refused naming the
    parameter (the test session's one Connect server)."""
    out = connect_client.run("connect_expressions", root=str(tmp_path))
    assert out["delete_string"] == 1 and out["update_literal"] == 1
    assert out["update_sql_value"] == 1
    after = dict(zip(out["after_sql_value"]["id"], out["after_sql_value"]["v"], strict=True))
    assert after[3] == 6.0  # v * 2
    assert out["merge_sql_value"] == 1  # id 4: v 4.0 > 3, set to 1.0 * 10
    assert out["delete_column"].startswith("InvalidArgumentError: expected where= as a SQL")
    assert out["merge_arithmetic_condition"].startswith(
        "InvalidArgumentError: expected matched_condition="
    )
    rows = {r["id"]: r["v"] for r in out["rows"]}
    assert rows == {i: {3: 5.0, 4: 10.0}.get(i, float(i)) for i in range(10) if i != 1}
