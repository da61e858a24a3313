"""Spark filters on array, struct and map columns: a type mismatch Spark refuses is an
InvalidArgumentError naming the column and its type; pushdown leaves such columns to
Spark, which compares arrays and structs itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.errors import InvalidArgumentError
from lakelog.spark.pushdown import translate_pushed

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("tags", pa.list_(pa.int64())),
        ("attrs", pa.struct([("a", pa.int64())])),
        ("props", pa.map_(pa.string(), pa.int64())),
    ]
)


def test_read_refuses_type_mismatches_with_the_column_and_its_type(
    spark: Any, tmp_path: Path
) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    rows = {"id": [1, 2], "tags": [[1], [2, 3]], "attrs": [{"a": 1}, None], "props": [None, None]}
    t.append(pa.table(rows, schema=SCHEMA))
    for text, column in (("tags > 1", "tags"), ("id = 1 or props = 1", "props")):
        with pytest.raises(InvalidArgumentError) as info:
            lspark.read(spark, t.uri, filter=text)
        message = str(info.value)
        assert f"column {column!r} of type {SCHEMA.field(column).type}" in message, message
        assert "size(tags)" in message  # what to write instead
    # what Spark can compare keeps working, evaluated by Spark
    assert [r.id for r in lspark.read(spark, t.uri, filter="tags = array(2, 3)").collect()] == [2]
    assert [r.id for r in lspark.read(spark, t.uri, filter="attrs.a = 1").collect()] == [1]


def test_pushdown_leaves_uncomparable_columns_to_spark() -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThan, In

    pushed = [
        EqualTo(("tags",), [1]),
        GreaterThan(("attrs",), {"a": 1}),
        In(("props",), ({"x": 1},)),
        GreaterThan(("id",), 1),
    ]
    pred = translate_pushed(pushed, SCHEMA)
    assert pred is not None and pred == translate_pushed([GreaterThan(("id",), 1)], SCHEMA)
