"""add_files and convert into (or of) a table partitioned by transforms: each adopted
file records its spec and values, found from its footer statistics or, where they
cannot decide, from its column, so filters on the source columns prune it; a file
whose rows span several values of a field is refused, nothing committed."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog.errors import InvalidArgumentError
from lakelog.transforms import SPEC_TAG, parse_field

SCHEMA = pa.schema(
    [("ts", pa.timestamp("us", tz="UTC")), ("id", pa.int64()), ("name", pa.string())]
)
FIELDS = ["day(ts)", "bucket(4, id)", "truncate(2, name)"]
T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
BUCKET = parse_field("bucket(4, id)")


def _ids_of_bucket(b: int, n: int) -> list[int]:
    out, i = [], 0
    while len(out) < n:
        if BUCKET.apply(pa.array([i], pa.int64())).to_pylist()[0] == b:
            out.append(i)
        i += 1
    return out


def _part(day: int, bucket: int, prefix: str, n: int = 6) -> pa.Table:
    ids = _ids_of_bucket(bucket, n)
    return pa.table(
        {
            "ts": [T0 + dt.timedelta(days=day, minutes=7 * i) for i in range(n)],
            "id": ids,
            "name": [f"{prefix}{i}" for i in ids],
        },
        schema=SCHEMA,
    )


def _want_tags(data: pa.Table) -> dict[str, str]:
    """The tags lakelog's own writer gives a file of these rows."""
    out = {SPEC_TAG: "0"}
    for text in FIELDS:
        f = parse_field(text)
        (v,) = set(f.apply(data[f.column]).to_pylist())
        out[f"partition.{f.name}"] = str(f.to_string(v))
    return out


PARTS = [(0, 1, "ab"), (0, 2, "ab"), (1, 1, "cd"), (2, 3, "ab")]


@pytest.mark.parametrize("statistics", [True, False])
def test_add_files_records_the_values_of_the_spec(tmp_path: Path, statistics: bool) -> None:
    table = lakelog.create_table(str(tmp_path / "t"), SCHEMA, partition_by=FIELDS)
    want: dict[str, dict[str, str]] = {}
    for i, (day, bucket, prefix) in enumerate(PARTS):
        data = _part(day, bucket, prefix)
        pq.write_table(data, tmp_path / "t" / f"other-{i}.parquet", write_statistics=statistics)
        want[f"other-{i}.parquet"] = _want_tags(data)
    table.add_files(list(want))
    snap = table.snapshot()
    assert {f.path: dict(f.tags) for f in snap.files()} == want
    # filters on the source columns prune by the recorded values
    probe = _ids_of_bucket(2, 1)[0]  # within every file's id range: only its bucket prunes
    assert [f.path for f in snap.files(f"id = {probe}")] == ["other-1.parquet"]
    day1 = "ts >= '2024-03-02T00:00:00+00:00' and ts <= '2024-03-02T23:59:59+00:00'"
    assert [f.path for f in snap.files(day1)] == ["other-2.parquet"]
    assert sorted(f.path for f in snap.files("name = 'cd5'")) == ["other-2.parquet"]
    assert snap.to_arrow(filter=f"id = {probe}").num_rows == 1


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (pa.concat_tables([_part(0, 1, "ab"), _part(1, 1, "ab")]), "day(ts)"),
        (pa.concat_tables([_part(0, 1, "ab"), _part(0, 2, "ab")]), "bucket(4, id)"),
        (pa.concat_tables([_part(0, 1, "ab"), _part(0, 1, "xy")]), "truncate(2, name)"),
    ],
)
def test_add_files_refuses_a_file_spanning_values(
    tmp_path: Path, data: pa.Table, field: str
) -> None:
    table = lakelog.create_table(str(tmp_path / "t"), SCHEMA, partition_by=FIELDS)
    pq.write_table(_part(0, 1, "ab"), tmp_path / "t" / "good.parquet")
    pq.write_table(data, tmp_path / "t" / "mixed.parquet")
    with pytest.raises(InvalidArgumentError) as e:
        table.add_files(["good.parquet", "mixed.parquet"])
    message = str(e.value)
    assert "\n" not in message
    assert "mixed.parquet" in message and field in message
    f = parse_field(field)
    found = sorted({str(f.to_string(v)) for v in f.apply(data[f.column]).to_pylist()})
    assert all(repr(v) in message for v in found), message
    assert table.refresh().snapshot().version == 0  # nothing committed


def test_a_file_of_nulls_and_values_is_refused(tmp_path: Path) -> None:
    table = lakelog.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["day(ts)"])
    data = _part(0, 1, "ab").set_column(
        0, "ts", pa.array([T0, None, T0, T0, T0, T0], SCHEMA[0].type)
    )
    pq.write_table(data, tmp_path / "t" / "mixed.parquet")
    with pytest.raises(
        InvalidArgumentError, match=r"mixed.parquet with day\(ts\) values '2024-03-01' and null"
    ):
        table.add_files(["mixed.parquet"])


def test_convert_an_unpartitioned_folder_into_transforms(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    want: dict[str, dict[str, str]] = {}
    for i, (day, bucket, prefix) in enumerate(PARTS):
        data = _part(day, bucket, prefix)
        pq.write_table(data, root / f"f{i}.parquet")
        want[f"f{i}.parquet"] = _want_tags(data)
    table = lakelog.convert(str(root), partition_by=FIELDS)
    snap = table.snapshot()
    assert snap.partitioning == FIELDS and snap.partition_by == ()
    assert {f.path: dict(f.tags) for f in snap.files()} == want
    probe = _ids_of_bucket(2, 1)[0]
    assert [f.path for f in snap.files(f"id = {probe}")] == ["f1.parquet"]
    # the same rows as appending them
    got = snap.to_arrow().sort_by("id")
    assert got.equals(pa.concat_tables(_part(*p) for p in PARTS).sort_by("id"))


def test_convert_refuses_spanning_files_and_hive_folders(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    pq.write_table(_part(0, 1, "ab"), root / "f0.parquet")
    pq.write_table(pa.concat_tables([_part(0, 1, "ab"), _part(3, 1, "ab")]), root / "f1.parquet")
    with pytest.raises(
        InvalidArgumentError,
        match=r"f1.parquet with day\(ts\) values '2024-03-01' and '2024-03-04'",
    ):
        lakelog.convert(str(root), partition_by=["day(ts)"])
    hive = tmp_path / "h"
    (hive / "region=eu").mkdir(parents=True)
    pq.write_table(_part(0, 1, "ab"), hive / "region=eu" / "f.parquet")
    with pytest.raises(InvalidArgumentError, match="Hive partition folders"):
        lakelog.convert(str(hive), partition_by=["day(ts)"])
    # the refusal committed nothing: the folder converts (unpartitioned) afterwards
    assert lakelog.convert(str(root)).snapshot().version == 0
