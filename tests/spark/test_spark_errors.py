"""lakelog's errors keep their class through Spark.

A lakelog error raised where Spark runs lakelog's Python (the change feed's reader, a
data source task, a row-level change's task, the streaming source and sink) reaches the
caller of a ``lakelog.spark`` function as the same class, with its details and its
message first (raised ``from None``: no Spark exception above it); code that calls Spark
itself gets it with ``lakelog.spark.typed_errors()`` or ``lakelog.spark.unwrap``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import _connect_ops
import pyarrow as pa
import pytest

import lakelog
import lakelog.spark as lspark
from lakelog.errors import (
    ChangeFeedError,
    DataFileMissingError,
    LakelogError,
    SchemaMismatchError,
    VersionExpiredError,
)

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema([("id", pa.int64())])


def _append(uri: str, ids: list[int] | range) -> int:
    rows = pa.table({"id": pa.array(list(ids), pa.int64())}, schema=SCHEMA)
    if not os.path.exists(uri):
        return lakelog.write_table(uri, rows).version  # type: ignore[no-any-return]
    return lakelog.open_table(uri).append(rows).version  # type: ignore[no-any-return]


def _raised_alone(error: BaseException) -> None:
    """Raised ``from None``: a traceback shows no exception above it."""
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__


def test_read_changes_raises_the_errors_it_documents(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _append(uri, range(4))
    deleted = lakelog.open_table(uri).delete("id = 1").version

    with pytest.raises(ChangeFeedError) as e:
        lspark.read_changes(spark, uri, 0).collect()
    assert e.value.version == deleted
    assert str(e.value).startswith(f"expected change files in commit {deleted}")
    _raised_alone(e.value)

    for i in range(3):
        _append(uri, [10 + i])
    oldest = (
        lakelog.open_table(uri)
        .expire_snapshots(older_than=dt.timedelta(0), retain_last=1)
        .oldest_version
    )
    with pytest.raises(VersionExpiredError) as expired:
        lspark.read_changes(spark, uri, 0).collect()
    assert expired.value.oldest_version == oldest


def _missing_file(tmp_path: Path) -> tuple[str, str]:
    uri = str(tmp_path / "m")
    _append(uri, range(10))
    (path,) = [f.path for f in lakelog.open_table(uri).snapshot().files()]
    os.remove(os.path.join(uri, path))
    return uri, path


def test_an_error_in_a_task_keeps_its_class_and_details(spark: Any, tmp_path: Path) -> None:
    uri, path = _missing_file(tmp_path)

    # a row-level change: lakelog's tasks in a mapInArrow job
    source = spark.createDataFrame([(1,)], "id long")
    with pytest.raises(DataFileMissingError) as e:
        lspark.merge(spark, uri, source, on="id")
    assert (e.value.path, e.value.version) == (path, 0)
    assert str(e.value).startswith(f"expected data file {path!r}")
    _raised_alone(e.value)

    # the data source, called through Spark: typed_errors() and unwrap()
    lspark.register(spark)
    with pytest.raises(DataFileMissingError) as task, lspark.typed_errors():
        spark.read.format("lakelog").load(uri).collect()
    assert (task.value.path, task.value.version) == (path, 0)
    _raised_alone(task.value)
    with pytest.raises(Exception) as spark_error:  # Spark's own, the traceback as text
        spark.read.format("lakelog").load(uri).collect()
    assert not isinstance(spark_error.value, LakelogError)
    found = lspark.unwrap(spark_error.value)
    assert isinstance(found, DataFileMissingError) and found.path == path


def _stream(spark: Any, uri: str, checkpoint: Path) -> Any:
    """A query on ``uri`` into a sink that keeps nothing, run until it read what is there;
    the finished or failed query (``awaitTermination`` left to the caller)."""
    lspark.register(spark)
    return (
        spark.readStream.format("lakelog")
        .option("startingVersion", "0")
        .load(uri)
        .writeStream.foreachBatch(lambda frame, batch: frame.count())
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_a_stream_restarted_after_expiry_says_only_that(spark: Any, tmp_path: Path) -> None:
    uri, checkpoint = str(tmp_path / "t"), tmp_path / "ck"
    _append(uri, [0])
    _stream(spark, uri, checkpoint).awaitTermination()
    for i in range(1, 5):
        _append(uri, [i])
    expired = lakelog.open_table(uri).expire_snapshots(older_than=dt.timedelta(0), retain_last=1)

    query = _stream(spark, uri, checkpoint)
    with pytest.raises(Exception) as spark_error:  # Spark's StreamingQueryException
        query.awaitTermination()
    # the worker's traceback in Spark's message holds the expiry, not the hole it explains
    assert "VersionExpiredError" in str(spark_error.value)
    assert "LogGapError" not in str(spark_error.value)
    assert "restore" not in str(spark_error.value).lower()
    found = lspark.unwrap(spark_error.value)
    assert isinstance(found, VersionExpiredError)
    assert str(found).startswith("expected the commit of version 1, the next this")
    assert found.oldest_version == expired.oldest_version

    query = _stream(spark, uri, checkpoint)
    with pytest.raises(VersionExpiredError) as e, lspark.typed_errors():
        query.awaitTermination()
    _raised_alone(e.value)


def test_an_error_in_the_sink_keeps_its_class(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _append(uri, [0])
    src = tmp_path / "src"
    src.mkdir()
    (src / "0.json").write_text(json.dumps({"id": 1, "note": "x"}) + "\n")
    frame = spark.readStream.schema("id long, note string").json(str(src))
    lspark.register(spark)
    query = (
        frame.writeStream.format("lakelog")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(uri)
    )
    matching = "expected a DataFrame matching the table"
    with pytest.raises(SchemaMismatchError, match=matching), lspark.typed_errors():
        query.awaitTermination()
    assert lakelog.open_table(uri).version == 0


def test_a_traceback_without_the_marker_gives_the_class_of_its_last_line() -> None:
    """Code that does not mark its errors: the exception line ending the worker's
    traceback names the class; an error raised while handling one is not it."""
    from lakelog.spark.errors import MARKER, lakelog_error

    plain = RuntimeError(
        "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
        '  File "x.py", line 1, in read\n'
        "lakelog.errors.SchemaMismatchError: expected id long, found id string"
    )
    found = lakelog_error(plain)
    assert isinstance(found, SchemaMismatchError)
    assert str(found) == "expected id long, found id string"
    handled = RuntimeError(
        f"{plain}\n\nDuring handling of the above exception, another exception occurred:\n"
        "KeyError: 'x'"
    )
    assert lakelog_error(handled) is None
    assert lakelog_error(RuntimeError(f"{MARKER}{{not json")) is None


def test_errors_keep_their_class_on_spark_connect(
    spark: Any, connect_client: Any, tmp_path: Path
) -> None:
    """The same classes from Spark Connect's exceptions as from classic Spark's, and the
    workers' check runs there too (the test session's one Connect server)."""
    (tmp_path / "classic").mkdir()
    (tmp_path / "connect").mkdir()
    classic = _connect_ops.typed_errors(spark, str(tmp_path / "classic"))
    out = connect_client.run("typed_errors", root=str(tmp_path / "connect"))
    same = json.loads(json.dumps(classic).replace(classic["path"], out["path"]))
    assert out == same  # the missing file's name differs, nothing else
    assert out["checked"]
    assert out["read_changes"] == ["ChangeFeedError", out["deleted"]]
    assert out["unwrap"] == ["DataFileMissingError", out["path"]]
    assert out["typed"] == [out["path"], 0]
