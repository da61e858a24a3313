"""Same answers from the log, on version-1 and version-2 manifests, as from a plain model.

Random commit sequences of virtual files (only the log exists): appends, rewrites of
random live files, partition and whole-table overwrites, a removed path added again,
and expiry, are replayed against a plain in-memory model of the live files. Tables
are written with version-1 manifests (in
``lakelog.log.format.writing_manifests(1)``) or version-2 roots with tiny leaves (2 to 5
files, so that removes land in shared leaves and fragmented and small leaves merge),
and manifests every 1 to 3 versions.

After every commit, warm (a table advanced commit by commit) and at random retained
versions cold (resolved from the log with an empty leaf cache), ``snapshot.files``
with a random filter must return exactly the model's files that
:func:`lakelog.filters.prune_mask` keeps given the model's own statistics, and the
counts must be the model's. Unfiltered, the files must equal the model's entries.
"""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakelog
from lakelog.filters import FileStatsColumns, parse_filter, prune_mask
from lakelog.log.actions import AddFile, DataFile, FileStats
from lakelog.log.commits import list_log
from lakelog.log.format import writing_manifests
from lakelog.log.leaves import CACHE
from lakelog.log.manifests import read_manifest_header
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
_names = itertools.count()


@st.composite
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
def _add(draw: Any, path: str | None = None) -> AddFile:
    day = draw(st.sampled_from([*DAYS, None]))
    part = None if day is None else day.isoformat()
    folder = part or "__HIVE_DEFAULT_PARTITION__"
    rows = draw(st.integers(0, 5))
    stats = draw(_stats())
    if stats is not None:  # as a footer says them: never more nulls than rows
        nulls = {k: min(v, rows) for k, v in stats.null_count.items()}
        stats = FileStats(min=stats.min, max=stats.max, null_count=nulls)
    return AddFile(
        path=path or f"day={folder}/f{next(_names):05d}.parquet",
        size_bytes=draw(st.integers(1, 1000)),
        num_rows=rows,
        partition={"day": part},
        stats=stats,
    )


_STEP = st.one_of(
    st.tuples(st.just("append"), st.lists(_add(), min_size=1, max_size=7)),
    st.tuples(st.just("rewrite"), st.lists(st.integers(0, 10**6), min_size=1, max_size=4), _add()),
    st.tuples(st.just("overwrite"), st.sampled_from([*DAYS, None]), st.lists(_add(), max_size=4)),
    st.tuples(st.just("readd"), st.integers(0, 10**6), _add()),
    st.tuples(st.just("expire"), st.integers(1, 3)),
)

_FILTERS = st.one_of(
    st.builds(lambda d: [("day", "=", d)], st.sampled_from(DAYS)),
    st.builds(lambda d: f"day >= '{d}'", st.sampled_from(DAYS)),
    st.just("day is null"),
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
    """The model's statistics as pruning columns, straight from the adds."""

    def col(kind: str, name: str, t: pa.DataType) -> pa.Array:
        values = [getattr(f.stats, kind).get(name) if f.stats else None for f in files]
        if pa.types.is_date(t) or pa.types.is_timestamp(t):
            return pa.array(values, pa.int64()).cast(t)
        return pa.array(values, t)

    types = {f.name: f.type for f in SCHEMA if f.name != "day"}
    days = [f.partition["day"] for f in files]
    return FileStatsColumns(
        num_rows=pa.array([f.num_rows for f in files], pa.int64()),
        partition={"day": pa.array([d and dt.date.fromisoformat(d) for d in days], pa.date32())},
        min={n: col("min", n, t) for n, t in types.items()},
        max={n: col("max", n, t) for n, t in types.items()},
        null_count={n: col("null_count", n, pa.int64()) for n in types},
    )


def _expected(model: dict[str, AddFile], flt: Any) -> list[str]:
    files = list(model.values())
    if not files:
        return []
    mask = prune_mask(parse_filter(flt, SCHEMA), _model_columns(files)).to_pylist()
    return sorted(f.path for f, keep in zip(files, mask, strict=True) if keep)


def _normal(f: DataFile | AddFile) -> tuple[Any, ...]:
    """A file as the log keeps it: floats for float bounds, no empty stats."""
    stats = f.stats
    if stats is not None:
        mins = {k: float(v) if k == "score" else v for k, v in stats.min.items()}
        maxs = {k: float(v) if k == "score" else v for k, v in stats.max.items()}
        stats = FileStats(min=mins, max=maxs, null_count=dict(stats.null_count))
    return (f.path, f.size_bytes, f.num_rows, dict(f.partition), stats, dict(f.tags))


def _check(snap: Any, model: dict[str, AddFile], flt: Any, where: str) -> None:
    got = sorted(f.path for f in snap.files(flt))
    assert got == _expected(model, flt), (flt, where)
    live = list(model.values())
    counts = (len(live), sum(f.num_rows for f in live), sum(f.size_bytes for f in live))
    assert (snap.num_files, snap.num_rows, snap.total_bytes) == counts, where


def _commit(t: lakelog.Table, step: Any, model: dict[str, AddFile], gone: list[AddFile]) -> None:
    kind = step[0]
    live = {f.path: f for f in t.snapshot().files()}
    if kind == "append":
        t.commit(step[1], operation="APPEND", kind="append")
        model.update({a.path: a for a in step[1]})
    elif kind == "rewrite" and model:
        order = sorted(model)
        paths = sorted({order[i % len(order)] for i in step[1]})
        actions: list[Any] = [live[p].to_remove(deletion_ms=0, data_change=False) for p in paths]
        t.commit([*actions, step[2]], operation="REWRITE", kind="rewrite")
        for p in paths:
            gone.append(model.pop(p))
        model[step[2].path] = step[2]
    elif kind == "overwrite":
        day = None if step[1] is None else step[1].isoformat()
        adds = [a for a in step[2] if day is None or a.partition["day"] == day]
        replaced = [f for f in live.values() if day is None or f.partition.get("day") == day]
        t.commit(
            [*(f.to_remove(deletion_ms=0) for f in replaced), *adds],
            operation="OVERWRITE",
            kind="overwrite",
            replaced_partitions=None if day is None else [{"day": day}],
        )
        for f in replaced:
            gone.append(model.pop(f.path))
        model.update({a.path: a for a in adds})
    elif kind == "readd" and gone:
        old = gone[step[1] % len(gone)]
        if old.path not in model:  # the same path again, in its old partition
            again = AddFile(
                path=old.path,
                size_bytes=step[2].size_bytes,
                num_rows=step[2].num_rows,
                partition=old.partition,
                stats=step[2].stats,
            )
            t.commit([again], operation="RESTORE", kind="append")
            model[again.path] = again
    elif kind == "expire":
        t.expire_snapshots(older_than=dt.timedelta(0), retain_last=step[1])


@pytest.mark.parametrize("layout", [1, 2])
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.lists(_STEP, min_size=1, max_size=12),
    leaf_files=st.integers(2, 5),
    interval=st.integers(1, 3),
    data=st.data(),
)
def test_pruned_files_equal_the_model_cold_and_warm(
    tmp_path_factory: Any, layout: int, steps: Any, leaf_files: int, interval: int, data: Any
) -> None:
    with writing_manifests(layout):
        _run(tmp_path_factory, layout, steps, leaf_files, interval, data)


def _run(
    tmp_path_factory: Any, layout: int, steps: Any, leaf_files: int, interval: int, data: Any
) -> None:
    uri = str(tmp_path_factory.mktemp("model") / "t")
    props = {
        "lakelog.manifest_interval": interval,
        "lakelog.manifest.leaf_files": leaf_files,
        # no vectors: a root of a table with them declares 5, not the layout under test
        "lakelog.deletion_vectors": "false",
    }
    t = lakelog.create_table(uri, SCHEMA, partition_by=["day"], properties=props)
    warm = lakelog.open_table(uri)
    model: dict[str, AddFile] = {}
    gone: list[AddFile] = []
    history: dict[int, dict[str, AddFile]] = {0: {}}
    for step in steps:
        _commit(t, step, model, gone)
        history[t.refresh().version] = dict(model)
        _check(warm.refresh().snapshot(), model, data.draw(_FILTERS), "warm")
    storage = Storage(uri, {})
    formats = {
        h.format_version
        for m in list_log(storage).manifests
        if (h := read_manifest_header(storage, m)) is not None
    }
    assert formats <= {layout}, formats  # the layout under test, nothing else
    oldest = t.snapshot().oldest_version
    retained = [v for v in sorted(history) if v >= oldest]
    for v in data.draw(st.lists(st.sampled_from(retained), min_size=1, max_size=4)):
        CACHE.clear()  # cold: every leaf read again
        snap = load_snapshot(Storage(uri, {}), v)
        _check(snap, history[v], data.draw(_FILTERS), f"cold v{v}")
        want = sorted(_normal(f) for f in history[v].values())
        assert sorted(_normal(f) for f in snap.files()) == want, f"entries at v{v}"
