"""Every ``lakelog.spark`` operation on Spark Connect, with the same result as on classic
Spark: each operation of ``_connect_ops`` runs on the test session's classic SparkSession
and on a Connect session (a client process on the test session's one Connect server, its
own process on a free port), and both give the same rows and the same log.

The Connect client runs in a process of its own: PySpark decides per process whether
``pyspark.sql.functions`` build Connect or classic Columns (see ``tests/_connect_client.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import _connect_ops
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]


def _both(spark: Any, client: Any, root: Path, op: str, **args: Any) -> tuple[Any, Any]:
    """``op`` on the classic session (in this process) and on Spark Connect, each in a
    fresh folder; both results as JSON."""
    (root / "classic").mkdir()
    (root / "connect").mkdir()
    fn = getattr(_connect_ops, op)
    classic = json.loads(json.dumps(fn(spark, str(root / "classic"), **args), default=str))
    remote = client.run(op, root=str(root / "connect"), **args)
    return classic, remote


def _ids(result: dict[str, Any]) -> list[int]:
    return sorted(r["id"] for r in result["rows"])


def test_the_client_is_a_connect_session(connect_client: Any) -> None:
    assert connect_client.session.startswith("pyspark.sql.connect")


def test_write_in_every_mode(spark: Any, connect_client: Any, tmp_path: Path) -> None:
    classic, remote = _both(spark, connect_client, tmp_path, "write_modes")
    assert remote == classic
    assert _ids(remote) == [100, 102, 201, 300, 400]
    assert [r.get("w") for r in remote["rows"] if r["id"] == 300] == ["x"]
    assert (remote["outside"], remote["exists"]) == ("InvalidArgumentError", "TableExistsError")
    assert remote["once"] == [False, True]
    assert _ids(remote["full"]) == [5, 6]
    assert [op for _, op, _ in remote["log"]][:2] == [
        "SPARK CREATE TABLE AS WRITE",
        "SPARK WRITE",
    ]


def test_the_lakelog_format(spark: Any, connect_client: Any, tmp_path: Path) -> None:
    classic, remote = _both(spark, connect_client, tmp_path, "format_write")
    assert remote == classic
    assert _ids(remote) == list(range(1, 9))
    assert remote["read"] == list(range(4, 9))


def test_the_streaming_source_and_sink(spark: Any, connect_client: Any, tmp_path: Path) -> None:
    classic, remote = _both(spark, connect_client, tmp_path, "streaming")
    assert remote == classic
    assert _ids(remote) == list(range(8))


def test_merge_delete_update(spark: Any, connect_client: Any, tmp_path: Path) -> None:
    classic, remote = _both(spark, connect_client, tmp_path, "row_level")
    assert remote == classic
    assert remote["counts"] == [[1, 2, 0], [3], [1]]
    assert [r["v"] for r in remote["rows"] if r["id"] == 20] == [200.0]


def test_compact(spark: Any, connect_client: Any, tmp_path: Path) -> None:
    classic, remote = _both(spark, connect_client, tmp_path, "compact")
    assert remote == classic
    assert remote["files"] == 1 and len(remote["rows"]) == 120
    assert remote["compacted"] == [6, 1] and remote["failed"] == {}


def test_optimize_in_tasks_and_as_spark_jobs(
    spark: Any, connect_client: Any, tmp_path: Path
) -> None:
    classic, remote = _both(spark, connect_client, tmp_path, "optimize")
    assert remote == classic
    assert remote["large_groups"] == [0, 1]  # the second: cluster_job's Spark jobs
    assert remote["failed"] == [{}, {}]
    assert len(remote["small"]["rows"]) == 80 and len(remote["large"]["rows"]) == 800
    assert remote["compacted"] == [4, 4]


def test_convert(spark: Any, connect_client: Any, tmp_path: Path) -> None:
    classic, remote = _both(spark, connect_client, tmp_path, "convert")
    assert remote == classic
    assert remote["version"] == 0 and len(remote["rows"]) == 24 and remote["files"] == 6


def test_change_feed_and_history(spark: Any, connect_client: Any, tmp_path: Path) -> None:
    classic, remote = _both(spark, connect_client, tmp_path, "changes_and_history")
    assert remote == classic
    assert [v for v, _ in remote["history"]] == [2, 1, 0]
    assert [3, "c", "delete", 2] in remote["changes"]


def test_column_filters_prune_on_connect(spark: Any, connect_client: Any, tmp_path: Path) -> None:
    classic, remote = _both(spark, connect_client, tmp_path, "read_filters")
    for name, got in remote.items():
        if name == "unusable":
            continue
        assert "error" not in got, (name, got)
        assert got["rows"] == classic[name]["rows"], name
    # four files of ten ids each (0-9 on 2024-01-01, ..., 30-39 on 2024-01-04)
    skipped = {name: got["skipped"] for name, got in remote.items() if name != "unusable"}
    assert skipped == {
        "gt": 2,
        "lit_left": 2,
        "and_or": 2,
        "not": 3,
        "in": 2,
        "date": 3,
        "between": 3,
        "ne": 0,
        "float_gt": 3,  # x > 30.0 left to Spark (its NaN is above every number)
        "partly": 3,  # length(s) > 1 left out, id > 30 used
        "null": 2,
        "string": 2,
    }
    # what Connect could not use is named, in a lakelog error (classic prunes nothing)
    assert classic["unusable"] is None
    assert remote["unusable"]["error"] == "InvalidArgumentError"
    assert "length(s) > 1" in remote["unusable"]["message"]


def test_deletion_vectors(spark: Any, connect_client: Any, tmp_path: Path) -> None:
    classic, remote = _both(spark, connect_client, tmp_path, "deletion_vectors")
    assert remote == classic
    assert remote["read"] == remote["format"] == remote["embedded"]
    assert len(remote["read"]) == 89
    assert remote["filtered"] == [i for i in remote["embedded"] if i < 70]


keys = st.lists(st.one_of(st.none(), st.integers(0, 40)), min_size=0, max_size=8)


@settings(
    max_examples=4,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ids=keys,
    partitioned=st.booleans(),
    vectors=st.booleans(),
    matched=st.sampled_from(["update", "delete"]),
    by_source=st.sampled_from([None, "delete"]),
    cut=st.integers(0, 30),
    second=st.sampled_from(["delete", "update"]),
)
def test_connect_merges_give_the_embedded_rows(
    connect_client: Any,
    tmp_path_factory: pytest.TempPathFactory,
    ids: list[int | None],
    partitioned: bool,
    vectors: bool,
    matched: str,
    by_source: str | None,
    cut: int,
    second: str,
) -> None:
    """``test_spark_changes``' property (Spark merge, delete, update against the embedded
    ones) on Spark Connect, with few examples."""
    root = tmp_path_factory.mktemp("connect-prop")
    got = connect_client.run(
        "merge_like_embedded",
        root=str(root),
        ids=ids,
        partitioned=partitioned,
        vectors=vectors,
        matched=matched,
        by_source=by_source,
        cut=cut,
        second=second,
    )
    assert got["same"]
    assert got["counts"][0] == got["counts"][1]
    assert got["second"][0] == got["second"][1]


def test_refusals_are_lakelog_errors_on_both(
    spark: Any, connect_client: Any, tmp_path: Path
) -> None:
    classic, remote = _both(spark, connect_client, tmp_path, "refusals")
    assert remote == classic
    assert remote["duplicates"] == "InvalidArgumentError"
    assert remote["schema"] == "SchemaMismatchError"
    assert remote["memory"] == "InvalidArgumentError"
    assert remote["no_table"] == "TableNotFoundError"
    assert None not in (remote["where"], remote["replace_where"])
    assert [r["id"] for r in remote["rows"]] == [1, 2, 3]


def test_a_failed_group_is_reported_alike(spark: Any, connect_client: Any, tmp_path: Path) -> None:
    classic, remote = _both(spark, connect_client, tmp_path, "failed_group")
    assert (remote["failed"], remote["abandoned"], remote["committed"]) == (1, 1, True)
    assert (classic["failed"], classic["abandoned"], classic["committed"]) == (1, 1, True)
    # the line that says what went wrong, as on classic Spark (Connect's message ends
    # with a line of its own holding the SQL state)
    assert remote["error"] == classic["error"]
    assert remote["error"].startswith("pyarrow.lib.ArrowInvalid: Parquet magic bytes")


def test_sql_statements(spark: Any, connect_client: Any, tmp_path: Path) -> None:
    classic, remote = _both(spark, connect_client, tmp_path, "sql")
    assert remote == classic
    assert _ids(remote) == [2, 3, 4]
    assert remote["v1"] == [1, 2, 3]
    assert remote["widened"] == "bigint"  # ALTER COLUMN ... TYPE over Connect
    assert [r["v"] for r in sorted(remote["rows"], key=lambda r: r["id"])] == [20.0, 30.0, 4.0]


def test_merge_clauses(spark: Any, connect_client: Any, tmp_path: Path) -> None:
    classic, remote = _both(spark, connect_client, tmp_path, "merge_clauses")
    assert remote == classic
    assert remote["sql"] == remote["api"] == remote["embedded"]
    assert [r["id"] for r in remote["sql"]] == [1, 3, 4, 7]
    assert remote["counts"]["num_inserted_rows"] == 1 and remote["api_counts"] == [2, 1, 1]
