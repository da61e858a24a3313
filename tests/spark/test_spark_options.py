"""Every option of every ``lakelog`` Spark entry point is checked by name.

A typo in an option name must never change what a call does: ``replaceWher`` on an
overwrite would otherwise replace the whole table instead of one day. Each entry point
(``spark.read``/``df.write``/``spark.readStream``/``df.writeStream`` with
``format("lakelog")``, and the keyword dicts of ``lakelog.spark.*``) refuses a name it does
not know before anything is read or written, naming the closest valid one. The registry
tests at the end run without Spark.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.errors import InvalidArgumentError, UnknownOptionError
from lakelog.spark import options as registry

DOCS = Path(__file__).resolve().parents[2] / "docs" / "spark.md"


def _days(uri: str) -> None:
    """A table partitioned by day: two days, one file each."""
    rows = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "day": pa.array([dt.date(2024, 1, 1)] * 2 + [dt.date(2024, 1, 2)] * 2),
        }
    )
    lakelog.write_table(uri, rows, partition_by=["day"])


def _state(uri: str) -> tuple[int, list[tuple[Any, ...]], list[str]]:
    """(version, sorted rows, data files on disk) of a table."""
    table = lakelog.open_table(uri)
    rows = sorted(tuple(r.values()) for r in table.snapshot().to_arrow().to_pylist())
    files = sorted(
        str(p.relative_to(uri)) for p in Path(uri).rglob("*.parquet") if "_lakelog" not in p.parts
    )
    return table.version, rows, files


def _unknown(error: BaseException, closest: str) -> None:
    """What the user sees of an unknown name: the typed error, or (through a Spark wrapper
    of a ``format("lakelog")`` call) its name and message, with the closest valid name."""
    text = str(error)
    assert f"did you mean {closest!r}?" in text, text
    assert isinstance(error, UnknownOptionError) or "UnknownOptionError" in text, text


# -- the format: typos refused before anything is read or written ---------------------------


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_a_typo_in_replace_where_leaves_the_table_unchanged(spark: Any, tmp_path: Path) -> None:
    """The issue's case: without the check, the typo'd option was ignored and the write
    was an overwrite of the whole table (both days' files removed)."""
    lspark.register(spark)
    uri = str(tmp_path / "t")
    _days(uri)
    before = _state(uri)
    day = lspark.read(spark, uri).where("day = '2024-01-01'")
    with pytest.raises(Exception) as e:
        day.write.format("lakelog").mode("overwrite").option(
            "replaceWher", "day = '2024-01-01'"
        ).save(uri)
    _unknown(e.value, "replaceWhere")
    assert "Nothing was read or written" in str(e.value)
    assert _state(uri) == before  # same version, same rows, no new data file

    # spelled right (in any case), it replaces exactly that day
    writer = day.write.format("lakelog").mode("overwrite")
    writer.option("REPLACEWHERE", "day = '2024-01-01'").save(uri)
    version, rows, _ = _state(uri)
    assert version == before[0] + 1 and rows == before[1]
    assert lakelog.open_table(uri).history(1)[0].operation == "OVERWRITE"


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_misspelled_read_options_are_refused(spark: Any, tmp_path: Path) -> None:
    """Without the check, ``versionAsOff`` read the latest version."""
    lspark.register(spark)
    uri = str(tmp_path / "t")
    _days(uri)
    lakelog.open_table(uri).append(pa.table({"id": [5], "day": [dt.date(2024, 1, 3)]}))
    with pytest.raises(Exception) as e:
        spark.read.format("lakelog").option("versionAsOff", 0).load(uri).collect()
    _unknown(e.value, "versionAsOf")
    # an option of the stream, or of the feed without readChangeFeed, is no read option
    with pytest.raises(Exception, match="maxFilesPerTrigger"):
        spark.read.format("lakelog").option("maxFilesPerTrigger", 1).load(uri).collect()
    with pytest.raises(Exception, match="only with readChangeFeed 'true'"):
        spark.read.format("lakelog").option("startingVersion", 0).load(uri).collect()
    # with a schema given, Spark asks no schema: the reader checks
    reader = spark.read.format("lakelog").schema("id long, day date")
    with pytest.raises(Exception) as e:
        reader.option("versionAsOff", 0).load(uri).collect()
    _unknown(e.value, "versionAsOf")
    assert spark.read.format("lakelog").option("VERSIONASOF", 0).load(uri).count() == 4


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_misspelled_stream_options_are_refused(spark: Any, tmp_path: Path) -> None:
    """Without the check, ``maxFilesPerTriger`` ran the stream with the default limit and
    a typo on the sink was ignored."""
    lspark.register(spark)
    uri, sink = str(tmp_path / "t"), str(tmp_path / "sink")
    _days(uri)
    with pytest.raises(Exception) as e:
        spark.readStream.format("lakelog").option("maxFilesPerTriger", 1).load(uri)
    _unknown(e.value, "maxFilesPerTrigger")
    # with a schema given, the stream's reader checks when the query starts
    stream = spark.readStream.format("lakelog").schema("id long, day date")
    query = (
        stream.option("maxFilesPerTriger", 1)
        .load(uri)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck0"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception) as e:
        query.awaitTermination()
    _unknown(e.value, "maxFilesPerTrigger")

    source = spark.readStream.format("lakelog").load(uri)
    query = (
        source.writeStream.format("lakelog")
        .option("checkpointLocation", str(tmp_path / "ck1"))
        .option("partitionBy", "day")
        .option("mergeSchem", "true")
        .trigger(availableNow=True)
        .start(sink)
    )
    with pytest.raises(Exception) as e:
        query.awaitTermination()
    _unknown(e.value, "mergeSchema")
    assert not (tmp_path / "sink").exists() or not list((tmp_path / "sink").rglob("*.parquet"))

    # Spark's own options (path, checkpointLocation, queryName) and lakelog's, any case
    query = (
        spark.readStream.format("lakelog")
        .option("MAXFILESPERTRIGGER", 1)
        .load(uri)
        .writeStream.format("lakelog")
        .option("checkpointLocation", str(tmp_path / "ck2"))
        .queryName("copy_days")
        .option("partitionby", "day")
        .trigger(availableNow=True)
        .start(sink)
    )
    query.awaitTermination()
    assert _state(sink)[1] == _state(uri)[1]
    assert lakelog.open_table(sink).version == 1  # one file per micro-batch


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_spark_generic_options_and_table_properties_as_options(spark: Any, tmp_path: Path) -> None:
    lspark.register(spark)
    uri = str(tmp_path / "t")
    df = spark.createDataFrame([(1, "a")], "id long, name string")
    with pytest.raises(Exception, match=r"did you mean 'lakelog\.compression'"):
        df.write.format("lakelog").mode("append").option("lakelog.compresion", "zstd").save(uri)
    assert not (tmp_path / "t").exists() or not list((tmp_path / "t").rglob("*.parquet"))
    # spelled right: a property of the table the write creates
    writer = df.write.format("lakelog").mode("append")
    writer.option("lakelog.compression", "zstd").option("path", uri).save()
    assert lakelog.open_table(uri).properties["lakelog.compression"] == "zstd"
    assert spark.read.format("lakelog").option("path", uri).load().count() == 1
    assert spark.read.format("lakelog").load([uri]).count() == 1  # Spark's "paths"
    with pytest.raises(Exception, match="expected one table location"):
        spark.read.format("lakelog").load([uri, uri]).count()


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_lakelog_spark_write_refuses_an_unknown_table_property(spark: Any, tmp_path: Path) -> None:
    """Without the check, a property given to a write into an existing table was ignored."""
    uri = str(tmp_path / "t")
    df = spark.createDataFrame([(1, "a")], "id long, name string")
    lspark.write(df, uri)
    before = _state(uri)
    with pytest.raises(InvalidArgumentError, match=r"did you mean 'lakelog\.compression'"):
        lspark.write(df, uri, properties={"lakelog.compresion": "zstd"})
    assert _state(uri) == before
    with pytest.raises(InvalidArgumentError, match=r"did you mean 'lakelog\.compression'"):
        lspark.write(df, str(tmp_path / "new"), properties={"lakelog.compresion": "zstd"})
    assert not (tmp_path / "new").exists()
    lspark.write(df, uri, properties={"owner": "me"})  # the user's own names pass
    assert lakelog.open_table(uri).version == before[0] + 1


# -- the registry, without Spark ----------------------------------------------------------


def test_unknown_names_get_the_closest_valid_one() -> None:
    with pytest.raises(UnknownOptionError) as e:
        registry.write_options({"path": "/t", "replaceWher": "day = 1"}, overwrite=True)
    err = e.value
    assert isinstance(err, InvalidArgumentError)  # what `except InvalidArgumentError` catches
    assert err.option == "replaceWher" and err.closest == "replaceWhere"
    assert err.entry_point == "df.write.format('lakelog')"
    assert "replaceWhere" in err.valid and "partitionOverwriteMode" in err.valid
    assert "did you mean 'replaceWhere'?" in str(err) and "Nothing was read or written" in str(err)
    # Spark hands names lowercased: the closest name is still found
    with pytest.raises(UnknownOptionError, match="did you mean 'maxFilesPerTrigger'"):
        registry.stream_read_options({"path": "/t", "maxfilespertriger": "1"})
    with pytest.raises(UnknownOptionError, match="did you mean 'versionAsOf'"):
        registry.read_options({"path": "/t", "versionasoff": "0"})
    with pytest.raises(UnknownOptionError, match="did you mean 'versionAsOf'"):
        registry.load_options({"path": "/t", "versionAsOff": "0"})
    # nothing near: no guess, the list
    with pytest.raises(UnknownOptionError) as e:
        registry.read_options({"path": "/t", "zzz": "1"})
    assert e.value.closest is None and "did you mean" not in str(e.value)
    assert "versionAsOf" in str(e.value)


def test_names_are_case_insensitive_and_given_once() -> None:
    opts = registry.read_options({"PATH": "/t", "VersionAsOf": "3", "MAXPARTITIONBYTES": "9"})
    assert (opts.path, opts.version, opts.partition_bytes) == ("/t", 3, 9)
    spec = registry.write_options({"path": "/t", "Replace_Where": "a = 1"}, overwrite=True).spec
    assert spec.replace_where == "a = 1"
    with pytest.raises(InvalidArgumentError, match="once"):
        registry.write_options(
            {"path": "/t", "replaceWhere": "a = 1", "replace_where": "a = 2"}, overwrite=True
        )


def test_options_of_another_entry_point_are_refused() -> None:
    with pytest.raises(
        UnknownOptionError, match=r"'versionAsOf' is an option of spark\.read\.format"
    ):
        registry.stream_read_options({"path": "/t", "versionAsOf": "0"})
    with pytest.raises(UnknownOptionError):
        registry.read_options({"path": "/t", "checkpointLocation": "/ck"})
    with pytest.raises(InvalidArgumentError, match="expected no option 'replaceWhere'"):
        registry.stream_write_options({"path": "/t", "replacewhere": "a = 1"}, overwrite=False)
    with pytest.raises(InvalidArgumentError, match="only with readChangeFeed"):
        registry.read_options({"path": "/t", "endingVersion": "1"})
    with pytest.raises(InvalidArgumentError, match="readChangeFeed"):
        registry.read_options({"path": "/t", "readChangeFeed": "true", "versionAsOf": "1"})
    with pytest.raises(InvalidArgumentError, match="maxFilesPerTrigger to be a whole number >= 1"):
        registry.stream_read_options({"path": "/t", "maxfilespertrigger": "0"})
    with pytest.raises(InvalidArgumentError, match="true or false"):
        registry.read_options({"path": "/t", "readChangeFeed": "yes"})
    with pytest.raises(InvalidArgumentError, match="JSON object"):
        registry.read_options({"path": "/t", "storageOptions": "anon=true"})
    with pytest.raises(InvalidArgumentError, match=r"did you mean 'lakelog\.compression'"):
        registry.write_options({"path": "/t", "lakelog.compresion": "zstd"}, overwrite=False)
    stream = registry.stream_write_options(
        {
            "path": "/t",
            "checkpointlocation": "/ck",
            "queryname": "q",
            "txnappid": "ingest",
            "lakelog.compression": "zstd",
        },
        overwrite=False,
    )
    assert stream.app_id == "ingest" and stream.spec.properties == {"lakelog.compression": "zstd"}


def test_docs_list_every_option_of_each_entry_point() -> None:
    """docs/spark.md holds each registry's table exactly, so the docs cannot drift."""
    text = DOCS.read_text()
    for reg in registry.REGISTRIES:
        table = registry.markdown_table(reg)
        assert table in text, f"docs/spark.md lacks the table of {reg.entry}:\n{table}"
    heads = re.findall(r"^\| option \| values \| default \| meaning \|$", text, re.M)
    assert len(heads) == len(registry.REGISTRIES)
    assert "UnknownOptionError" in text
