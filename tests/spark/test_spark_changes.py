"""merge/delete/update of DataFrames on Spark executors (``lakelog.spark.rowlevel``).

* The same rows as the embedded ``Table.merge/delete/update`` on a copy of the table
  (a property test: keys with nulls and duplicates, partitioned or not, with and
  without deletion vectors).
* ``when_matched={...}``, ``matched_condition`` and Spark Column expressions.
* The driver's memory stays flat while the source grows ten times.
* A Spark merge racing an embedded append, a compaction and a delete in real processes.
"""

from __future__ import annotations

import os
import shutil
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from _processes import spawn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakelog
import lakelog.spark as lspark
from lakelog.errors import CommitConflictError, InvalidArgumentError

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.float64())])
ORDER = [("id", "ascending"), ("p", "ascending"), ("v", "ascending")]


def _rows(uri: str) -> pa.Table:
    return lakelog.open_table(uri).snapshot().to_arrow().sort_by(ORDER)


def _target(uri: str, *, partitioned: bool, vectors: bool, files: int = 3) -> None:
    """``files`` appends of 12 rows each (ids overlapping between files, one null id)."""
    props = {"lakelog.deletion_vectors": "true" if vectors else "false"}
    for i in range(files):
        ids: list[int | None] = [i * 8 + j for j in range(12)]
        if i == 1:
            ids[5] = None
        t = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "p": [f"p{(x or 0) % 2}" for x in ids],
                "v": [float(i * 100 + j) for j in range(12)],
            },
            schema=SCHEMA,
        )
        lakelog.write_table(uri, t, partition_by=["p"] if partitioned else [], properties=props)


def _source(spark: Any, table: pa.Table) -> Any:
    rows = [tuple(r.values()) for r in table.to_pylist()]
    return spark.createDataFrame(rows, "id long, p string, v double")


keys = st.lists(st.one_of(st.none(), st.integers(0, 40)), min_size=0, max_size=10)


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ids=keys,
    partitioned=st.booleans(),
    vectors=st.booleans(),
    duplicates=st.sampled_from(["error", "last", "first"]),
    matched=st.sampled_from(["update", "delete"]),
    by_source=st.sampled_from([None, None, "delete"]),
    cut=st.integers(0, 30),
    second=st.sampled_from(["delete", "update"]),
)
def test_spark_changes_give_the_embedded_rows(
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
    ids: list[int | None],
    partitioned: bool,
    vectors: bool,
    duplicates: str,
    matched: str,
    by_source: str | None,
    cut: int,
    second: str,
) -> None:
    root = tmp_path_factory.mktemp("prop")
    ours, theirs = str(root / "spark"), str(root / "embedded")
    _target(ours, partitioned=partitioned, vectors=vectors)
    shutil.copytree(ours, theirs)
    source = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "p": [f"p{(x or 0) % 3 % 2}" for x in ids],
            "v": [1000.0 + n for n in range(len(ids))],
        },
        schema=SCHEMA,
    )
    table = lakelog.open_table(theirs)
    try:
        want = table.merge(
            source,
            on="id",
            when_matched=matched,  # type: ignore[arg-type]
            when_not_matched_by_source=by_source or "ignore",  # type: ignore[arg-type]
            duplicates=duplicates,  # type: ignore[arg-type]
        )
    except InvalidArgumentError:
        with pytest.raises(InvalidArgumentError, match="one source row per key"):
            lspark.merge(spark, ours, _source(spark, source), on="id", duplicates=duplicates)
        assert _rows(ours).equals(_rows(theirs))
        return
    got = lspark.merge(
        spark,
        ours,
        _source(spark, source),
        on="id",
        when_matched=matched,
        when_not_matched_by_source=by_source,
        duplicates=duplicates,
    )
    assert _rows(ours).equals(_rows(theirs))
    assert (got.deleted_rows, got.updated_rows, got.inserted_rows) == (
        want.deleted_rows,
        want.updated_rows,
        want.inserted_rows,
    )
    assert (got.source_rows, got.source_duplicates) == (want.source_rows, want.source_duplicates)
    assert got.committed == want.committed
    where = f"id < {cut} or v >= 1005"
    if second == "delete":
        a = lspark.delete(spark, ours, where)
        b = lakelog.open_table(theirs).delete(where)
    else:
        values = {"v": pc.field("v") * 2, "p": "p9"}
        a = lspark.update(spark, ours, where, set={**values, "p": "'p9'"})  # SQL
        b = lakelog.open_table(theirs).update(where, set=values)
    assert (a.deleted_rows, a.updated_rows, a.committed) == (
        b.deleted_rows,
        b.updated_rows,
        b.committed,
    )
    assert _rows(ours).equals(_rows(theirs))


def test_assignments_conditions_and_spark_columns(spark: Any, tmp_path: Path) -> None:
    """``when_matched={...}`` sets only the columns named, from pyarrow expressions over
    the target row and ``source.<col>``, or Spark Columns over the source; matched rows
    the condition refuses stay as they are and are not inserted."""
    from pyspark.sql import functions as F

    for vectors in (False, True):
        uri = str(tmp_path / f"t{vectors}")
        _target(uri, partitioned=False, vectors=vectors, files=1)  # ids 0..11, v 0..11
        src = pa.table(
            {"id": pa.array([2, 3, 50], pa.int64()), "p": ["s", "s", "s"], "v": [7.0, 8.0, 9.0]},
            schema=SCHEMA,
        )
        r = lspark.merge(
            spark,
            uri,
            _source(spark, src),
            on="id",
            when_matched={
                "v": pc.field("v") + pc.field("source.v"),
                "p": F.concat("p", F.lit("!")),
            },
            matched_condition="v > 2",  # target id 3 (v 3.0) only
        )
        assert (r.updated_rows, r.inserted_rows) == (1, 1)
        got = {row["id"]: (row["p"], row["v"]) for row in _rows(uri).to_pylist()}
        assert got[2] == ("p0", 2.0) and got[3] == ("s!", 11.0) and got[50] == ("s", 9.0)
        r = lspark.merge(
            spark,
            uri,
            _source(spark, src),
            on="id",
            when_matched="delete",
            when_not_matched=None,
            matched_condition=F.col("v") < 8,  # a Spark Column over the source: id 2 only
        )
        assert (r.deleted_rows, r.inserted_rows) == (1, 0)
        assert 2 not in _rows(uri).column("id").to_pylist()
    with pytest.raises(InvalidArgumentError, match="key columns"):
        lspark.merge(spark, uri, _source(spark, src), on="id", when_matched={"id": 1})
    with pytest.raises(InvalidArgumentError, match="when_matched"):
        lspark.merge(spark, uri, _source(spark, src), on="id", when_matched="upsert")


def _peak_rss_during(fn: Any) -> int:
    """The driver process's peak resident set while ``fn`` runs, above its start."""
    proc = psutil.Process()
    start = proc.memory_info().rss
    peak = [start]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.005)

    t = threading.Thread(target=sample)
    t.start()
    try:
        fn()
    finally:
        done.set()
        t.join()
    return peak[0] - start


def test_driver_memory_stays_flat_while_the_source_grows(spark: Any, tmp_path: Path) -> None:
    """A source 10x larger (2M rows x 5 columns: ~100 MB as Arrow, far more as rows) adds
    nothing proportional to the driver's memory: it never comes to the driver."""
    from pyspark.sql import functions as F

    uri = str(tmp_path / "t")
    schema = pa.schema(
        [("id", pa.int64()), ("a", pa.int64()), ("b", pa.float64()), ("s", pa.string())]
    )
    for i in range(2):
        n = 5000
        lakelog.write_table(
            uri,
            pa.table(
                {
                    "id": pa.array(range(i * n * 20, i * n * 20 + n * 20, 20), pa.int64()),
                    "a": pa.array(range(n), pa.int64()),
                    "b": [0.5] * n,
                    "s": ["old"] * n,
                },
                schema=schema,
            ),
        )

    def source(rows: int) -> Any:
        return spark.range(0, rows, 1, numPartitions=4).select(
            F.col("id").alias("id"),
            (F.col("id") * 3).alias("a"),
            (F.col("id") / 7).alias("b"),
            F.concat(F.lit("new-row-"), F.col("id").cast("string")).alias("s"),
        )

    def run(rows: int) -> Any:
        return lspark.merge(spark, uri, source(rows), on="id", when_not_matched=None)

    run(1000)  # warm up: Python workers, imports, JIT of Spark's code paths
    small = _peak_rss_during(lambda: run(200_000))
    large = _peak_rss_during(lambda: run(2_000_000))
    # collecting the large source would hold >= 100 MB on the driver
    assert large < small + 48 * 2**20, (small, large)
    assert lakelog.open_table(uri).snapshot().to_arrow(filter="s = 'old'").num_rows == 0


# -- racing real processes -------------------------------------------------------------------

APPEND = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    import lakelog

    uri, ids = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
    schema = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.float64())])
    rows = pa.table({"id": ids, "p": [f"p{i % 2}" for i in ids], "v": [-1.0] * len(ids)},
                    schema=schema)
    lakelog.open_table(uri).append(rows)
    """
)
COMPACT = textwrap.dedent(
    """
    import sys
    import lakelog

    r = lakelog.open_table(sys.argv[1]).compact(min_file_size=1 << 30, target_file_size=1 << 30)
    assert r.commits, r
    """
)
DELETE = textwrap.dedent(
    """
    import sys
    import lakelog

    assert lakelog.open_table(sys.argv[1]).delete(sys.argv[2]).committed
    """
)


def _data_files(uri: str) -> set[str]:
    out = set()
    for folder, _, names in os.walk(uri):
        for n in names:
            if n.endswith(".parquet") and "_log" not in folder:
                out.add(os.path.relpath(os.path.join(folder, n), uri))
    return out


@pytest.mark.parametrize(
    ("other", "args", "lands"),
    [
        ("append", "101,103,105", True),  # within the source's key range, no source key
        ("append", "104,6", False),  # a source key appended meanwhile
        ("compact", "", False),  # rewrote the files the merge rewrites
        ("delete", "id = 8", False),  # rewrote a file the merge rewrites
    ],
    ids=["append-other-keys", "append-source-key", "compaction", "delete"],
)
def test_spark_merge_racing_another_process(
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    other: str,
    args: str,
    lands: bool,
) -> None:
    """The merge pauses just before its commit while a real process commits; then the
    conflict rules decide: an append of other keys rebases (after a Spark probe of the
    appended files), rows with a source key or a rewrite of its files fail the merge with
    nothing committed and its files deleted. Nothing is lost or doubled."""
    uri = str(tmp_path / "t")
    _target(uri, partitioned=True, vectors=False)  # ids 0..27, v 0..211
    expected = str(tmp_path / "expected")
    shutil.copytree(uri, expected)
    source = pa.table(
        {"id": pa.array([2, 4, 6, 120], pa.int64()), "p": ["p0"] * 4, "v": [999.0] * 4},
        schema=SCHEMA,
    )
    gate = tmp_path / "gate"
    initial = _data_files(uri)
    read_version = lakelog.open_table(uri).snapshot().version
    monkeypatch.setenv("LAKELOG_PAUSE_AT", f"commit:before-put:MERGE:{gate}")
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = lspark.merge(spark, uri, _source(spark, source), on="id")
        except BaseException as e:  # noqa: BLE001 - checked below
            box["error"] = e

    merging = threading.Thread(target=run)
    merging.start()
    try:
        deadline = time.monotonic() + 120
        while not Path(f"{gate}.paused").exists():
            assert merging.is_alive() and time.monotonic() < deadline, box
            time.sleep(0.02)
        before = _data_files(uri)  # the merge's files are there by now
        script = {"append": APPEND, "compact": COMPACT, "delete": DELETE}[other]
        proc = spawn(script, uri, *([args] if args else []))
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        winner = _data_files(uri) - before
    finally:
        gate.touch()
        merging.join(timeout=300)
    monkeypatch.delenv("LAKELOG_PAUSE_AT")
    version = lakelog.open_table(uri).snapshot().version
    if lands:
        assert "error" not in box, box
        assert box["result"].committed and box["result"].version == version
        # the same rows as the append first, the merge after it
        subprocess_append(expected, args)
        lakelog.open_table(expected).merge(source, on="id")
        assert _rows(uri).equals(_rows(expected))
        return
    assert isinstance(box.get("error"), CommitConflictError), box
    ops = [h.operation for h in lakelog.open_table(uri).history()]
    assert version > read_version and "MERGE" not in ops, ops  # the other process's only
    assert before - initial, "the merge wrote no file before its commit"
    # the merge's files are gone: on disk, what was there and what the winner wrote
    left = _data_files(uri) - initial - winner
    assert not left, left
    assert not (Path(uri) / "_spark_staging").exists() or not any(
        (Path(uri) / "_spark_staging").iterdir()
    )
    rows = _rows(uri)
    assert rows.filter(pc.field("v") == 999.0).num_rows == 0  # no merged row landed


def subprocess_append(uri: str, ids: str) -> None:
    proc = spawn(APPEND, uri, ids)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
