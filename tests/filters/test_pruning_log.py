"""Same answers from the log: pruning through snapshots equals pruning the model.

Random commit sequences (appends, rewrites, partition overwrites, expiry) of virtual
files (only the log exists) are replayed against a plain in-memory model of the live
files and their statistics. At random versions, cold (resolved from the log, through
manifests) and warm (a table advanced commit by commit), ``snapshot.files(filter)``
must return exactly the model's files that :func:`lakelog.filters.prune_mask` keeps
when it is given the model's statistics directly: the typed columns the snapshot
builds from the log (and carries over from one version to the next) are the model's.
"""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakelog
from lakelog.filters import FileStatsColumns, parse_filter, prune_mask
from lakelog.log.actions import AddFile, FileStats
from lakelog.log.snapshot import load_snapshot
from lakelog.storage import Storage

SCHEMA = pa.schema(
    [
        ("day", pa.date32()),
        ("cid", pa.int64()),
        ("score", pa.float64()),
        ("name", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)
DAYS = [dt.date(2026, 11, d) for d in range(1, 6)]
EPOCH = dt.date(1970, 1, 1)
_names = itertools.count()


def _stats(draw: Any) -> FileStats | None:
    if draw(st.integers(0, 9)) == 0:
        return None  # a file without statistics
    lo = draw(st.integers(-50, 50))
    hi = lo + draw(st.integers(0, 30))
    mins: dict[str, Any] = {"cid": lo, "ts": 1_700_000_000_000_000 + lo * 1_000_000}
    maxs: dict[str, Any] = {"cid": hi, "ts": 1_700_000_000_000_000 + hi * 1_000_000}
    if draw(st.booleans()):
        mins["score"], maxs["score"] = lo / 4, hi / 4
    if draw(st.booleans()):
        a, b = sorted(draw(st.lists(st.sampled_from("abcdefgh"), min_size=2, max_size=2)))
        mins["name"], maxs["name"] = a, b
    nulls = {"cid": draw(st.integers(0, 2)), "name": draw(st.integers(0, 3))}
    return FileStats(min=mins, max=maxs, null_count=nulls)


@st.composite
def _add(draw: Any) -> AddFile:
    day = draw(st.sampled_from([*DAYS, None]))
    part = None if day is None else day.isoformat()
    return AddFile(
        path=f"day={part or '__HIVE_DEFAULT_PARTITION__'}/f{next(_names)}.parquet",
        size_bytes=100,
        num_rows=3,
        partition={"day": part},
        stats=_stats(draw),
    )


_STEP = st.one_of(
    st.tuples(st.just("append"), st.lists(_add(), min_size=1, max_size=6)),
    st.tuples(st.just("rewrite"), st.integers(1, 4), _add()),
    st.tuples(st.just("overwrite"), st.sampled_from(DAYS), st.lists(_add(), max_size=3)),
    st.tuples(st.just("expire"), st.integers(1, 3)),
)

_FILTERS = st.one_of(
    st.builds(lambda d: [("day", "=", d)], st.sampled_from(DAYS)),
    st.builds(
        lambda op, v: [("cid", op, v)],
        st.sampled_from(["=", "<", ">=", "!="]),
        st.integers(-60, 90),
    ),
    st.builds(
        lambda a, b: f"cid between {a} and {a + b}", st.integers(-60, 60), st.integers(0, 20)
    ),
    st.builds(lambda s: f"name = '{s}' or name is null", st.sampled_from("abcdh")),
    st.builds(lambda v: f"score < {v} and day is not null", st.integers(-10, 20)),
    st.builds(
        lambda d, v: f"day in ('{d}', '2026-11-04') and not cid > {v}",
        st.sampled_from(DAYS),
        st.integers(-40, 60),
    ),
    st.builds(lambda v: f"ts >= '2023-11-14 22:13:{v:02d}+00:00'", st.integers(0, 59)),
)


def _model_columns(files: list[AddFile]) -> FileStatsColumns:
    def col(kind: str, name: str, t: pa.DataType) -> pa.Array:
        values = [getattr(f.stats, kind).get(name) if f.stats else None for f in files]
        if pa.types.is_date(t) or pa.types.is_timestamp(t):
            return pa.array(values, pa.int64()).cast(t)
        return pa.array(values, t)

    types = {f.name: f.type for f in SCHEMA if f.name != "day"}
    return FileStatsColumns(
        num_rows=pa.array([f.num_rows for f in files], pa.int64()),
        partition={
            "day": pa.array(
                [
                    None
                    if f.partition["day"] is None
                    else dt.date.fromisoformat(f.partition["day"])
                    for f in files
                ],
                pa.date32(),
            )
        },
        min={n: col("min", n, t) for n, t in types.items()},
        max={n: col("max", n, t) for n, t in types.items()},
        null_count={n: col("null_count", n, pa.int64()) for n in types},
    )


def _expected(model: dict[str, AddFile], flt: Any) -> list[str]:
    files = list(model.values())
    pred = parse_filter(flt, SCHEMA)
    if not files:
        return []
    mask = prune_mask(pred, _model_columns(files)).to_pylist()
    return sorted(f.path for f, keep in zip(files, mask, strict=True) if keep)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(_STEP, min_size=1, max_size=12), data=st.data())
def test_pruned_files_equal_the_model_cold_and_warm(
    tmp_path_factory: Any, steps: Any, data: Any
) -> None:
    uri = str(tmp_path_factory.mktemp("prune") / "t")
    t = lakelog.create_table(
        uri, SCHEMA, partition_by=["day"], properties={"lakelog.manifest_interval": 3}
    )
    warm = lakelog.open_table(uri)
    model: dict[str, AddFile] = {}
    history: dict[int, dict[str, AddFile]] = {0: {}}
    for step in steps:
        kind = step[0]
        if kind == "append":
            t.commit(step[1], operation="APPEND", kind="append")
            model.update({a.path: a for a in step[1]})
        elif kind == "rewrite" and model:
            gone = sorted(model)[: step[1]]
            live = {f.path: f for f in t.snapshot().files()}
            actions: list[Any] = [live[p].to_remove(deletion_ms=0, data_change=False) for p in gone]
            actions.append(step[2])
            t.commit(actions, operation="REWRITE", kind="rewrite")
            for p in gone:
                del model[p]
            model[step[2].path] = step[2]
        elif kind == "overwrite":
            day = step[1].isoformat()
            adds = [a for a in step[2] if a.partition["day"] == day] or []
            replaced = [f for f in t.snapshot().files() if f.partition.get("day") == day]
            t.commit(
                [*(f.to_remove(deletion_ms=0) for f in replaced), *adds],
                operation="OVERWRITE",
                kind="overwrite",
                replaced_partitions=[{"day": day}],
            )
            for f in replaced:
                del model[f.path]
            model.update({a.path: a for a in adds})
        elif kind == "expire":
            t.expire_snapshots(older_than=dt.timedelta(0), retain_last=step[1])
        history[t.refresh().version] = dict(model)
        flt = data.draw(_FILTERS)
        got = sorted(f.path for f in warm.refresh().snapshot().files(flt))
        assert got == _expected(model, flt), (flt, "warm")
    oldest = t.snapshot().oldest_version
    for v in data.draw(st.lists(st.sampled_from(sorted(history)), max_size=4)):
        if v < oldest:
            continue
        snap = load_snapshot(Storage(uri, {}), v)
        flt = data.draw(_FILTERS)
        got = sorted(f.path for f in snap.files(flt))
        assert got == _expected(history[v], flt), (flt, "cold", v)


def test_refreshed_snapshots_carry_their_columns_over(tmp_path: Any) -> None:
    """A refreshed snapshot shares its base (manifest leaves or version-1 file table,
    with the typed columns already built for it) with the previous one, so only the
    files added since are parsed; it gets the same answers as one resolved cold."""
    uri = str(tmp_path / "t")
    t = lakelog.create_table(uri, SCHEMA, partition_by=["day"])
    adds = [
        AddFile(
            path=f"day={d.isoformat()}/c{i}.parquet",
            size_bytes=1,
            num_rows=3,
            partition={"day": d.isoformat()},
            stats=FileStats(min={"cid": i}, max={"cid": i + 5}, null_count={"cid": 0}),
        )
        for i, d in enumerate(DAYS)
    ]
    t.commit(adds[:3], operation="APPEND", kind="append")
    warm = lakelog.open_table(uri)
    filters = ["cid between 3 and 4", [("day", "=", DAYS[3])], "day > '2026-11-01' and cid < 3"]
    for flt in filters:
        warm.snapshot().files(flt)  # build each column set once
    live = {f.path: f for f in t.snapshot().files()}
    t.commit(
        [live[adds[0].path].to_remove(deletion_ms=0), *adds[3:]], operation="SWAP", kind="rewrite"
    )
    before = warm.snapshot(warm.version)  # the cached one, not refreshed
    snap = warm.refresh().snapshot()
    assert snap.version == before.version + 1
    assert snap._state.base is before._state.base  # shared, not rebuilt from the log
    cold = load_snapshot(Storage(uri, {}))
    for flt in filters:
        assert sorted(f.path for f in snap.files(flt)) == sorted(f.path for f in cold.files(flt))
