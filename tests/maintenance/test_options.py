"""The options objects of compaction, clustering and execution: one request, three entry points.

They round-trip, check their values in the caller's words, give the same plan as the
keyword arguments, take their unset fields from table properties, and the CLI's
flags build the same objects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakelog
from lakelog import ClusteringOptions, CompactionOptions, ExecutionOptions, InvalidArgumentError
from lakelog.cli import build_parser
from lakelog.cli.cluster import clustering_options_of
from lakelog.cli.maintenance import compaction_options_of, execution_of
from lakelog.cli.messages import translate
from lakelog.maintenance.clustering.planner import cluster_options
from lakelog.maintenance.clustering.run import prepare_clustering
from lakelog.maintenance.compaction.run import prepare_compaction
from lakelog.maintenance.options import with_keywords

KINDS = ("x", "y", "z")


def _table(uri: str, properties: dict[str, str] | None = None) -> lakelog.Table:
    """Three partitions of four small files each."""
    rng = np.random.default_rng(3)
    t = lakelog.create_table(
        uri,
        pa.schema([("a", pa.int64()), ("b", pa.float64()), ("kind", pa.string())]),
        partition_by=["kind"],
        properties={"lakelog.target_file_size": str(200_000), **(properties or {})},
    )
    for _ in range(4):
        n = 1500
        t.append(
            pa.table(
                {
                    "a": rng.integers(0, 10_000, n),
                    "b": rng.random(n),
                    "kind": pa.array([KINDS[i % 3] for i in range(n)]),
                }
            )
        )
    return t


def _same_report(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Two reports equal but for their durations."""
    a, b = dict(a), dict(b)
    a.pop("duration_s"), b.pop("duration_s")
    assert a == b


# -- the objects -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        CompactionOptions(),
        CompactionOptions(
            target_file_size=64 << 20,
            target_rows=10_000,
            min_file_size=1 << 20,
            min_input_files=3,
            partition_filter=[("kind", "in", ["x", "y"]), ("day", "=", "2026-01-02")],
            compression="gzip",
            row_group_size=4096,
        ),
        ClusteringOptions(),
        ClusteringOptions(
            zorder_by=["a", "b"],
            curve="zorder",
            target_file_size=1 << 20,
            partition_filter=[[("kind", "=", "x")], [("kind", "=", "y")]],
            incremental=False,
            max_group_bytes=1 << 30,
            compression="snappy",
            row_group_size=1000,
        ),
        ClusteringOptions(sort_by="a"),
        ExecutionOptions(),
        ExecutionOptions(max_concurrent_groups=4, max_bytes_per_second=50e6, partial_progress=True),
    ],
)
def test_options_round_trip_through_json_and_builtins(options: Any) -> None:
    kind = type(options)
    assert msgspec.json.decode(msgspec.json.encode(options), type=kind) == options
    assert msgspec.convert(msgspec.to_builtins(options), kind) == options
    assert msgspec.structs.replace(options) == options


def test_unset_fields_are_left_out_and_lists_read_back_as_given() -> None:
    assert msgspec.json.encode(CompactionOptions()) == b"{}"
    assert msgspec.json.encode(ExecutionOptions(partial_progress=True)) == (
        b'{"partial_progress":true}'
    )
    c = ClusteringOptions(zorder_by=["a", "b"], partition_filter=[("kind", "=", "x")])
    assert c.zorder_by == ("a", "b")
    assert ClusteringOptions(zorder_by=["a"]) == ClusteringOptions(zorder_by=("a",))
    assert str(c.partition_filter) == "[('kind', '=', 'x')]"  # what the commit records
    assert ClusteringOptions(sort_by="a").sort_by == ("a",)
    assert CompactionOptions(partition_filter=[]).partition_filter is None
    expr = pc.field("kind") == "x"
    assert CompactionOptions(partition_filter=expr).partition_filter.equals(expr)


@pytest.mark.parametrize(
    "kind, field, value, words",
    [
        (CompactionOptions, "target_file_size", 0, "target_file_size"),
        (CompactionOptions, "target_file_size", True, "target_file_size"),
        (CompactionOptions, "target_rows", 1.5, "target_rows"),
        (CompactionOptions, "min_file_size", -1, "min_file_size"),
        (CompactionOptions, "min_input_files", 0, "min_input_files"),
        (CompactionOptions, "row_group_size", 2**63, "row_group_size"),
        (CompactionOptions, "compression", "zip", "codec"),
        (ClusteringOptions, "curve", "peano", "curve"),
        (ClusteringOptions, "incremental", "no", "incremental"),
        (ClusteringOptions, "max_group_bytes", 0, "max_group_bytes"),
        (ClusteringOptions, "target_file_size", -5, "target_file_size"),
        (ExecutionOptions, "max_concurrent_groups", 0, "max_concurrent_groups"),
        (ExecutionOptions, "max_bytes_per_second", -1, "max_bytes_per_second"),
        (ExecutionOptions, "max_bytes_per_second", True, "max_bytes_per_second"),
        (ExecutionOptions, "partial_progress", "yes", "partial_progress"),
    ],
)
def test_bad_values_are_refused_naming_the_field(
    kind: type[Any], field: str, value: object, words: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        kind(**{field: value})
    # read from JSON (a config file): the same check, with the field's path
    with pytest.raises(msgspec.ValidationError, match=words):
        msgspec.json.decode(msgspec.json.encode({field: value}), type=kind)


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(TypeError, match="target_size"):
        CompactionOptions(target_size=1)  # type: ignore[call-arg]
    with pytest.raises(msgspec.ValidationError, match="target_size"):
        msgspec.json.decode(b'{"target_size": 1}', type=CompactionOptions)
    with pytest.raises(TypeError, match="max_workers"):
        with_keywords(ExecutionOptions(), max_workers=2)


def test_keywords_beside_an_object_fill_it_and_must_agree_with_it() -> None:
    base = CompactionOptions(target_file_size=1 << 20)
    assert with_keywords(base, min_input_files=3) == CompactionOptions(
        target_file_size=1 << 20, min_input_files=3
    )
    assert with_keywords(base, target_file_size=1 << 20) == base  # the same value twice
    assert with_keywords(base, target_file_size=None) == base  # a keyword left unset
    with pytest.raises(
        InvalidArgumentError, match=r"target_file_size=2.*options\.target_file_size"
    ):
        with_keywords(base, target_file_size=2)
    flt = pc.field("kind") == "x"
    same = with_keywords(CompactionOptions(partition_filter=flt), partition_filter=flt)
    assert same.partition_filter.equals(flt)
    execution = ExecutionOptions(partial_progress=True)
    assert with_keywords(execution, argument="execution", partial_progress=False) == execution
    with pytest.raises(InvalidArgumentError, match=r"execution\.max_concurrent_groups=2"):
        with_keywords(
            ExecutionOptions(max_concurrent_groups=2), argument="execution", max_concurrent_groups=3
        )


# -- the object and the keywords are one request ----------------------------------------


def test_object_and_keywords_give_the_same_compaction(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    flt = [("kind", "in", ["x", "z"])]
    by_keywords = t.compact(
        dry_run=True, target_file_size=10**9, min_input_files=3, partition_filter=flt
    )
    options = CompactionOptions(target_file_size=10**9, min_input_files=3, partition_filter=flt)
    by_object = t.compact(dry_run=True, options=options)
    half = CompactionOptions(target_file_size=10**9)
    mixed = t.compact(dry_run=True, options=half, min_input_files=3, partition_filter=flt)
    assert len(by_object.planned_groups) == 2
    _same_report(by_keywords.to_dict(), by_object.to_dict())
    _same_report(by_keywords.to_dict(), mixed.to_dict())
    plan = prepare_compaction(t, options, dry_run=True).plan
    assert [g.paths for g in plan.groups] == by_object.planned_groups
    with pytest.raises(InvalidArgumentError, match="min_input_files"):
        t.compact(options=options, min_input_files=4)
    v = t.version
    with pytest.raises(InvalidArgumentError, match="max_bytes_per_second"):
        t.compact(execution=ExecutionOptions(max_bytes_per_second=1e6), max_bytes_per_second=2e6)
    assert t.refresh().version == v


def test_object_and_keywords_give_the_same_clustering(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    flt = [("kind", "=", "y")]
    by_keywords = t.optimize(dry_run=True, zorder_by=["a", "b"], partition_filter=flt)
    options = ClusteringOptions(zorder_by=["a", "b"], partition_filter=flt)
    by_object = t.optimize(dry_run=True, options=options)
    assert len(by_object.planned_groups) == 1
    _same_report(by_keywords.to_dict(), by_object.to_dict())
    first = prepare_clustering(t, options, dry_run=True).plan
    assert prepare_clustering(t, options, dry_run=True).plan == first
    assert [g.paths for g in first.groups] == by_object.planned_groups
    with pytest.raises(InvalidArgumentError, match="sort_by"):
        t.optimize(options=ClusteringOptions(sort_by=["a"]), sort_by=["b"])
    # executed with both objects: one commit of the partition's four files
    report = t.optimize(options=options, execution=ExecutionOptions(max_concurrent_groups=1))
    assert report.compacted_file_count == 4 and len(report.commits) == 1


# -- unset fields come from the table ----------------------------------------------------


def test_properties_fill_the_unset_fields(tmp_path: Path) -> None:
    props = {
        "lakelog.target_file_size": str(300_000),
        "lakelog.compaction.min_input_files": "3",
        "lakelog.compaction.max_concurrent_groups": "5",
        "lakelog.compaction.groups_per_commit": "7",
        "lakelog.compression": "gzip",
        "lakelog.row_group_size": "5000",
        "lakelog.clustering.max_group_bytes": str(1 << 22),
        "lakelog.clustering.row_group_size": "2000",
    }
    t = _table(str(tmp_path / "t"), props)
    prep = prepare_compaction(t, CompactionOptions(), ExecutionOptions(partial_progress=True))
    o = prep.plan.options
    assert (o.target_file_size, o.min_file_size, o.min_input_files) == (300_000, 225_000, 3)
    assert (o.compression, o.row_group_size, o.target_rows) == ("gzip", 5000, None)
    assert (prep.execution.max_concurrent_groups, prep.execution.groups_per_commit) == (5, 7)
    given = prepare_compaction(t, CompactionOptions(target_file_size=100_000, compression="zstd"))
    assert (given.plan.options.target_file_size, given.plan.options.min_file_size) == (
        100_000,
        75_000,
    )
    assert given.plan.options.compression == "zstd" and given.execution.groups_per_commit is None
    c = cluster_options(t.snapshot(), ClusteringOptions())
    assert (c.target_file_size, c.max_group_bytes, c.row_group_size) == (300_000, 1 << 22, 2000)
    assert cluster_options(t.snapshot(), ClusteringOptions(row_group_size=9)).row_group_size == 9
    # the executor's own default (Spark: its parallelism) before the property
    settings = ExecutionOptions().resolve(t.properties, default_concurrency=16)
    assert settings.max_concurrent_groups == 16
    explicit = ExecutionOptions(max_concurrent_groups=1).resolve(
        t.properties, default_concurrency=16
    )
    assert explicit.max_concurrent_groups == 1


# -- the CLI's flags are the same objects ------------------------------------------------


def test_cli_flags_build_the_same_objects(tmp_path: Path) -> None:
    t = _table(str(tmp_path / "t"))
    parser = build_parser()
    compact = ["compact", t.uri, "--target-file-size", "1MiB", "--min-input-files", "3"]
    compact += ["--partition", "kind=x", "--partition", "kind=y", "--compression", "gzip"]
    compact += ["--max-concurrent-groups", "4", "--max-bytes-per-second", "50MiB"]
    args = parser.parse_args([*compact, "--partial-progress"])
    assert compaction_options_of(t, args) == CompactionOptions(
        target_file_size=1 << 20,
        min_input_files=3,
        partition_filter=[("kind", "in", ["x", "y"])],
        compression="gzip",
    )
    assert execution_of(args) == ExecutionOptions(
        max_concurrent_groups=4, max_bytes_per_second=50 << 20, partial_progress=True
    )
    args = parser.parse_args(["optimize", t.uri, "--sort-by", "a,b", "--full"])
    assert clustering_options_of(t, args) == ClusteringOptions(
        sort_by=["a", "b"], incremental=False
    )
    assert execution_of(args) == ExecutionOptions()
    args = parser.parse_args(["optimize", t.uri, "--zorder-by", "a,b", "--curve", "zorder"])
    assert clustering_options_of(t, args) == ClusteringOptions(zorder_by=["a", "b"], curve="zorder")
    args = parser.parse_args(["resume", t.uri, "p-1", "--max-bytes-per-second", "1MiB"])
    assert execution_of(args) == ExecutionOptions(max_bytes_per_second=1 << 20)


def test_cli_users_read_flags_python_users_keywords() -> None:
    with pytest.raises(InvalidArgumentError) as error:
        ExecutionOptions(max_bytes_per_second=-1)
    assert "max_bytes_per_second" in str(error.value)
    flags = build_parser().get_default("cli_flags")
    for command in ("compact", "optimize", "resume"):
        line = translate(str(error.value), flags[command], flags)
        assert "--max-bytes-per-second" in line and "max_bytes_per_second" not in line
