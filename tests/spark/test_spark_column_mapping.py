"""Spark on tables with column ids (format version 7): renamed columns, a column dropped
and added back, a nested field dropped and added back.

Data files store columns under physical names (``docs/format.md``, "Column ids, renames
and nested fields"). Every Spark path must read them under the table's names (a renamed
column must not read as nulls, a column added back must not read the old values) and
write them under the physical names with their ids (else the rows are lost). Each test
compares Spark's result with the embedded reader's on the same table.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.log import mapping

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema(
    [("id", pa.int64()), ("part", pa.string()), ("a", pa.string()), ("b", pa.int64())]
)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def _append(t: lakelog.Table, rows: list[dict[str, Any]]) -> None:
    schema = mapping.strip(t.snapshot().schema)
    t.append(pa.Table.from_pylist(rows, schema))


def _renamed(uri: str, *, n: int = 1, properties: dict[str, str] | None = None) -> lakelog.Table:
    """A table (partitioned by ``part``) whose column ``a`` was renamed ``name``, and
    whose ``b`` was dropped and added back; ``n`` rows per id block, appends between."""
    t = lakelog.create_table(uri, SCHEMA, partition_by=["part"], properties=properties)
    old = [
        {"id": i, "part": "p" if i % 2 else "q", "a": f"x{i}", "b": 10 * i} for i in range(1, n + 2)
    ]
    _append(t, old)
    t.rename_column("a", "name")
    # a partition value Spark does not parse from the folder name: read by its own scan
    _append(t, [{"id": 100 + i, "part": "ü", "name": f"y{i}", "b": 7} for i in range(n)])
    t.drop_columns(["b"])
    t.add_columns([pa.field("b", pa.int64())])
    _append(t, [{"id": 200 + i, "part": "p", "name": f"z{i}", "b": 40 + i} for i in range(n)])
    return t


def _spark_rows(df: Any) -> list[dict[str, Any]]:
    return _rows(df.toArrow())


def _physical(t: lakelog.Table) -> dict[str, str]:
    return mapping.physical_names(t.snapshot().schema)


def _check_files(t: lakelog.Table, paths: set[str]) -> None:
    """The files ``paths`` hold every column under its physical name, with its id as
    Parquet field id, and the log keys their statistics by physical name."""
    snap = t.snapshot()
    stored = mapping.physical_schema(snap.file_schema)
    for f in snap.files():
        if f.path not in paths:
            continue
        found = pq.read_schema(f"{t.uri}/{f.path}")
        assert found.names == stored.names, f.path
        for got, want in zip(found, stored, strict=True):
            assert got.type == want.type, (f.path, got, want)
            assert (got.metadata or {}).get(b"PARQUET:field_id") == want.metadata[
                b"PARQUET:field_id"
            ]
        assert f.stats is not None and set(f.stats.min) <= set(stored.names)


def _new_paths(t: lakelog.Table, before: set[str]) -> set[str]:
    return {f.path for f in t.snapshot().files()} - before


# -- reads ---------------------------------------------------------------------------


def test_every_version_reads_as_embedded(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _renamed(uri, properties={"lakelog.change_data_feed": "true"})
    assert _physical(t)["name"] == "a" and _physical(t)["b"].startswith("col-")
    latest = _rows(t.snapshot().to_arrow())
    # the renamed column reads, the values of the dropped b never come back
    assert [(r["id"], r["name"], r["b"]) for r in latest] == [
        (1, "x1", None),
        (2, "x2", None),
        (100, "y0", None),
        (200, "z0", 40),
    ]
    assert lspark.plan_read(spark, uri).grouped  # the "ü" partition's scan
    lspark.register(spark)
    for version in range(t.version + 1):
        want = _rows(t.snapshot(version).to_arrow())
        native = lspark.read(spark, uri, version=version)
        assert native.columns == t.snapshot(version).schema.names
        assert _spark_rows(native) == want, version
        if version in (1, 3, t.version):  # before the rename, after it, the latest
            source = spark.read.format("lakelog").option("versionAsOf", version).load(uri)
            assert _spark_rows(source) == want, version
    # the change feed (change rows read by lakelog in Spark tasks)
    feed = lspark.read_changes(spark, uri, 1).drop("_commit_timestamp")
    want = t.changes(1).to_arrow().drop_columns(["_commit_timestamp"])
    key = ("id", "_commit_version")
    assert sorted(feed.toArrow().to_pylist(), key=lambda r: [r[k] for k in key]) == sorted(
        want.to_pylist(), key=lambda r: [r[k] for k in key]
    )


def test_filters_on_renamed_and_readded_columns_prune(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _renamed(uri)
    snap = t.snapshot()
    for text, ids in [("name = 'y0'", [100]), ("b = 40", [200]), ("b = 10", [])]:
        plan = lspark.plan_read(spark, uri, filter=text)
        embedded = [f.path for f in snap.files(text)]
        assert [f.path for f in plan.files] == embedded, text
        df = plan.to_dataframe(spark)
        assert [r["id"] for r in _spark_rows(df)] == ids, text
        assert ids == [r["id"] for r in _rows(snap.to_arrow(filter=text))]
    # statistics keyed by physical names still prune after the rename
    assert len(lspark.plan_read(spark, uri, filter="name = 'y0'").files) == 1
    # files written before b was added back have no statistics for it: kept, as embedded
    assert len(lspark.plan_read(spark, uri, filter="b = 40").files) == len(snap.files("b = 40"))
    # a column selection and a filter together
    df = lspark.read(spark, uri, filter="name >= 'y'", columns=["b", "name"])
    assert df.columns == ["b", "name"]
    assert sorted(map(tuple, df.collect()), key=lambda r: r[1]) == [(None, "y0"), (40, "z0")]


# -- writes --------------------------------------------------------------------------


def test_spark_writes_land_under_physical_names(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _renamed(uri)
    t.set_properties({"lakelog.parquet.bloom_filter_columns": "name"})
    spark_schema = "id long, part string, name string, b long"
    before = {f.path for f in t.snapshot().files()}

    df = spark.createDataFrame([(300, "p", "w0", 50), (301, "q", "w1", None)], spark_schema)
    lspark.write(df, uri)
    added = _new_paths(t, before)
    assert len(added) == 2
    _check_files(t, added)
    got = {r["id"]: (r["name"], r["b"]) for r in t.snapshot().to_arrow().to_pylist()}
    assert got[300] == ("w0", 50) and got[301] == ("w1", None) and got[1] == ("x1", None)
    # the bloom filter is on the physical column
    new = next(iter(added))
    meta = pq.ParquetFile(f"{uri}/{new}").metadata.row_group(0)
    cols = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    assert set(cols) == {"id", "a", _physical(t)["b"]}
    assert cols["a"].bloom_filter_offset and not cols["id"].bloom_filter_offset

    # replace_where on the renamed column: exactly its rows are replaced
    before = {f.path for f in t.snapshot().files()}
    df = spark.createDataFrame([(302, "q", "y0", 8)], spark_schema)
    lspark.write(df, uri, mode="overwrite", replace_where="name = 'y0'")
    _check_files(t, _new_paths(t, before))
    got = {r["id"]: (r["name"], r["b"]) for r in t.snapshot().to_arrow().to_pylist()}
    assert 100 not in got and got[302] == ("y0", 8) and len(got) == 6
    with pytest.raises(lakelog.InvalidArgumentError, match="outside"):
        lspark.write(df, uri, mode="overwrite", replace_where="name = 'other'")

    # the data source's writer (lakelog's file writer in tasks)
    lspark.register(spark)
    before = {f.path for f in t.snapshot().files()}
    df = spark.createDataFrame([(303, "p", "v0", 9)], spark_schema)
    df.write.format("lakelog").mode("append").save(uri)
    _check_files(t, _new_paths(t, before))

    # a full overwrite
    before = {f.path for f in t.snapshot().files()}
    df = spark.createDataFrame([(400, "p", "o0", 1), (401, "p", "o1", 2)], spark_schema)
    lspark.write(df, uri, mode="overwrite")
    _check_files(t, _new_paths(t, before))
    want = [{"id": 400, "part": "p", "name": "o0", "b": 1}]
    want.append({"id": 401, "part": "p", "name": "o1", "b": 2})
    assert _rows(t.snapshot().to_arrow()) == want
    assert _spark_rows(lspark.read(spark, uri)) == want


def test_merge_schema_write_adds_a_column_under_its_physical_name(
    spark: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    t = _renamed(uri)
    df = spark.createDataFrame(
        [(500, "p", "m0", 5, 1.5)], "id long, part string, name string, b long, c double"
    )
    lspark.write(df, uri, schema_mode="merge")
    assert t.snapshot().schema.names == ["id", "part", "name", "b", "c"]
    got = {r["id"]: r for r in t.snapshot().to_arrow().to_pylist()}
    assert (got[500]["c"], got[500]["b"], got[1]["c"]) == (1.5, 5, None)
    assert _spark_rows(lspark.read(spark, uri)) == _rows(t.snapshot().to_arrow())

    # b dropped again and added back by merge writes: a fresh physical name each time,
    # which the commit keeps as the files hold it (the data source plans twice)
    lspark.register(spark)
    for k, how in enumerate(["native", "source"]):
        t.drop_columns(["b"])
        row = (600 + k, "p", how, None, 60 + k)
        df = spark.createDataFrame([row], "id long, part string, name string, c double, b long")
        if how == "native":
            lspark.write(df, uri, schema_mode="merge")
        else:
            df.write.format("lakelog").mode("append").option("mergeSchema", "true").save(uri)
        got = {r["id"]: r["b"] for r in t.snapshot().to_arrow().to_pylist()}
        assert got[600 + k] == 60 + k and got[500] is None, how
    assert _spark_rows(lspark.read(spark, uri)) == _rows(t.snapshot().to_arrow())


def test_plans_made_twice_keep_the_written_names(tmp_path: Path) -> None:
    from pyspark.sql.types import StructType

    from lakelog.spark.modes import as_written, dataframe_plan
    from lakelog.spark.source import _restored

    uri = str(tmp_path / "t")
    t = _renamed(uri)
    t.drop_columns(["b"])
    spark_schema = StructType.fromDDL("id long, part string, name string, b long")
    snap = t.snapshot()
    first = dataframe_plan(spark_schema, snap, "merge")
    second = dataframe_plan(spark_schema, snap, "merge")
    assert _physical_of(first.schema) != _physical_of(second.schema)  # col-<random>
    kept = as_written(second, first.schema, snap)
    assert kept.schema.equals(first.schema, check_metadata=True)
    assert kept.metadata is not None and kept.metadata.arrow_schema().equals(first.schema)
    # b added back by another commit meanwhile: the files' b is not the table's
    t.add_columns([pa.field("b", pa.int64())])
    later = t.snapshot()
    with pytest.raises(lakelog.SchemaMismatchError, match="'b'"):
        as_written(dataframe_plan(spark_schema, later, "merge"), first.schema, later)
    # a stream that started before sees the column move, not a readable change
    assert _restored(later.schema, t.snapshot(snap.version - 2).schema) == "b"
    assert _restored(later.schema, later.schema) is None


def _physical_of(schema: pa.Schema) -> list[str]:
    return mapping.physical_schema(schema).names


# -- row-level changes ---------------------------------------------------------------


def test_merge_update_delete_keep_every_row(spark: Any, tmp_path: Path) -> None:
    uri, twin = str(tmp_path / "spark"), str(tmp_path / "embedded")
    _renamed(uri, n=3, properties={"lakelog.deletion_vectors": "true"})
    shutil.copytree(uri, twin)
    t, e = lakelog.open_table(uri), lakelog.open_table(twin)
    source_rows = [(2, "q", "merged", 77), (101, "q", "merged", None), (900, "p", "new", 9)]
    source = spark.createDataFrame(source_rows, "id long, part string, name string, b long")
    report = lspark.merge(spark, uri, source, on="id")
    arrow_source = pa.Table.from_pylist(
        [dict(zip(["id", "part", "name", "b"], r, strict=True)) for r in source_rows],
        mapping.strip(e.snapshot().schema),
    )
    e.merge(arrow_source, on="id")
    assert report.inserted_rows == 1
    assert _rows(t.snapshot().to_arrow()) == _rows(e.snapshot().to_arrow())

    # a merge keyed by the renamed column, inserts checked against the matched keys
    again = [{"id": 102, "part": "q", "name": "y2", "b": 1}]
    again.append({"id": 950, "part": "p", "name": "fresh", "b": 2})
    source = spark.createDataFrame(
        [tuple(r.values()) for r in again], "id long, part string, name string, b long"
    )
    report = lspark.merge(spark, uri, source, on="name")
    assert report.inserted_rows == 1 and report.updated_rows == 1
    e.merge(pa.Table.from_pylist(again, mapping.strip(e.snapshot().schema)), on="name")
    got = {r["id"]: (r["name"], r["b"]) for r in t.snapshot().to_arrow().to_pylist()}
    assert got[102] == ("y2", 1) and got[950] == ("fresh", 2)
    assert _rows(t.snapshot().to_arrow()) == _rows(e.snapshot().to_arrow())

    lspark.update(spark, uri, "name = 'merged'", set={"b": pc.field("id") * 2})
    e.update("name = 'merged'", set={"b": pc.field("id") * 2})
    lspark.delete(spark, uri, "b = 41")
    e.delete("b = 41")
    assert _rows(t.snapshot().to_arrow()) == _rows(e.snapshot().to_arrow())
    assert {r["id"]: r["b"] for r in t.snapshot().to_arrow().to_pylist()}[101] == 202
    plan = lspark.plan_read(spark, uri)
    assert plan.vectors  # files read by scans that drop their deleted rows
    assert _spark_rows(lspark.read(spark, uri)) == _rows(e.snapshot().to_arrow())


# -- clustering of a large group by Spark jobs ------------------------------------------


def test_cluster_job_keeps_every_row(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = lakelog.create_table(uri, SCHEMA)
    for k in range(3):
        _append(
            t,
            [
                {"id": k * 100 + i, "part": "p", "a": f"s{(i * 7) % 50:02d}", "b": i}
                for i in range(100)
            ],
        )
    t.rename_column("a", "name")
    t.drop_columns(["b"])
    t.add_columns([pa.field("b", pa.int64())])
    for k in range(3, 5):
        _append(
            t,
            [
                {"id": k * 100 + i, "part": "p", "name": f"s{(i * 3) % 50:02d}", "b": i % 13}
                for i in range(100)
            ],
        )
    before = _rows(t.snapshot().to_arrow())
    twin = str(tmp_path / "compacted")
    shutil.copytree(uri, twin)
    lspark.compact(spark, twin)  # groups rewritten by lakelog in Spark tasks
    compacted = lakelog.open_table(twin).snapshot()
    assert compacted.num_files == 1 and _rows(compacted.to_arrow()) == before
    paths = {f.path for f in t.snapshot().files()}
    report = lspark.optimize(
        spark, uri, zorder_by=["name", "b"], max_group_bytes=1_000, target_file_size=8_000
    )
    assert report.extra["large_groups"] == 1 and report.extra["failed_groups"] == {}
    assert _rows(t.snapshot().to_arrow()) == before
    _check_files(t, _new_paths(t, paths))
    assert _spark_rows(lspark.read(spark, uri)) == before


# -- nested fields ---------------------------------------------------------------------


def test_nested_fields_added_and_readded(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema(
        [("id", pa.int64()), ("s", pa.struct([("x", pa.int32()), ("y", pa.int32())]))]
    )
    t = lakelog.create_table(uri, schema)
    _append(t, [{"id": 1, "s": {"x": 1, "y": 11}}, {"id": 2, "s": None}])
    t.add_columns({("s", "z"): pa.string()})  # a field added later
    _append(t, [{"id": 3, "s": {"x": 3, "y": 33, "z": "c"}}])
    t.drop_columns([("s", "x")])
    t.add_columns({("s", "x"): pa.int32()})  # back under a new physical name
    t.rename_column("s", "st")
    _append(t, [{"id": 4, "st": {"y": 44, "z": "d", "x": 4}}])
    snap = t.snapshot()
    inner = mapping.physical_schema(snap.schema).field("s").type
    assert [f.name for f in inner][:2] == ["y", "z"] and inner.field(2).name.startswith("col-")
    latest = _rows(snap.to_arrow())
    assert [r["st"] for r in latest] == [
        {"y": 11, "z": None, "x": None},
        None,
        {"y": 33, "z": "c", "x": None},
        {"y": 44, "z": "d", "x": 4},
    ]
    lspark.register(spark)
    for version in range(1, t.version + 1):
        want = _rows(t.snapshot(version).to_arrow())
        assert _spark_rows(lspark.read(spark, uri, version=version)) == want, version
        source = spark.read.format("lakelog").option("versionAsOf", version).load(uri)
        assert _spark_rows(source) == want, version

    # Spark writes the struct under its physical field names, with their ids
    before = {f.path for f in snap.files()}
    df = spark.createDataFrame([(5, (55, "e", 5))], "id long, st struct<y:int, z:string, x:int>")
    lspark.write(df, uri)
    added = _new_paths(t, before)
    _check_files(t, added)
    file_type = pq.read_schema(f"{uri}/{next(iter(added))}").field("s").type
    assert file_type.equals(inner)
    assert [f.metadata[b"PARQUET:field_id"] for f in file_type] == [
        f.metadata[b"PARQUET:field_id"] for f in inner
    ]
    want = _rows(t.snapshot().to_arrow())
    assert want[-1]["st"] == {"y": 55, "z": "e", "x": 5}
    assert _spark_rows(lspark.read(spark, uri)) == want
    assert _spark_rows(spark.read.format("lakelog").load(uri)) == want

    # a merge write whose struct has the table's fields in another order: by name
    df = spark.createDataFrame([(6, (6, 66, "f"))], "id long, st struct<x:int, y:int, z:string>")
    lspark.write(df, uri, schema_mode="merge")
    df = spark.createDataFrame([(7, (7,))], "id long, st struct<x:int>")  # y, z missing
    lspark.write(df, uri, schema_mode="merge")
    got = {r["id"]: r["st"] for r in t.snapshot().to_arrow().to_pylist()}
    assert got[6] == {"y": 66, "z": "f", "x": 6} and got[7] == {"y": None, "z": None, "x": 7}
    assert _spark_rows(lspark.read(spark, uri)) == _rows(t.snapshot().to_arrow())
