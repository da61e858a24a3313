"""The fundamental property of the change feed: for random histories, applying
``changes(v0 + 1, v1)`` to the rows of ``v0`` gives exactly the rows of ``v1``.

Rows are compared whole (a ``delete`` or ``update_preimage`` row must be a row of the
state it is applied to, as it was; ``insert`` and ``update_postimage`` rows are added),
commit by commit: a commit's removals first, then its additions. Histories mix appends,
deletes, updates, merges, overwrites (whole and with ``where``), compaction, clustering,
expiry and restore, copy-on-write and with deletion vectors. With the table property
``lakelog.change_data_feed`` off, histories without row-level changes still have a
complete feed, and a delete makes every range holding it fail."""

from __future__ import annotations

import datetime as dt
import tempfile
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakelog
from lakelog.log.actions import ChangeFile
from lakelog.log.commits import read_commit

SCHEMA = pa.schema([("id", pa.int64()), ("g", pa.string()), ("k", pa.int64()), ("v", pa.int64())])
FEED = "lakelog.change_data_feed"
Row = tuple[Any, ...]

row_st = st.fixed_dictionaries(
    {
        "g": st.sampled_from(["a", "b"]),
        "k": st.one_of(st.none(), st.integers(0, 5)),
        "v": st.integers(0, 30),
    }
)
rows_st = st.lists(row_st, min_size=1, max_size=5)
preds = st.sampled_from(
    ["k = 1", "k >= 3", "v < 10", "g = 'a'", "g = 'b' and v >= 15", "k is null", "true"]
)

plain_ops = st.one_of(
    st.tuples(st.just("append"), rows_st),
    st.tuples(st.just("overwrite"), rows_st),
    st.tuples(st.just("compact")),
    st.tuples(st.just("optimize")),
    st.tuples(st.just("expire"), st.integers(2, 4)),
    st.tuples(st.just("restore"), st.integers(1, 3)),
)
row_level_ops = st.one_of(
    plain_ops,
    st.tuples(st.just("delete"), preds),
    st.tuples(st.just("update"), preds, st.sampled_from(["v", "g"])),
    st.tuples(
        st.just("merge"),
        st.lists(st.integers(0, 30), min_size=1, max_size=4, unique=True),
        rows_st,
        st.sampled_from(["update", "delete", "ignore"]),
        st.sampled_from(["insert", "ignore"]),
        st.sampled_from(["ignore", "ignore", "delete"]),
    ),
    st.tuples(st.just("overwrite_where"), st.sampled_from(["a", "b"]), rows_st),
)

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class History:
    """A table and the operations applied to it (ids stay unique: new rows get new ids)."""

    def __init__(self, root: str, *, feed: bool, vectors: bool, partitioned: bool) -> None:
        properties = {"lakelog.manifest_interval": "3"}
        if feed:
            properties[FEED] = "true"
        if vectors:
            properties["lakelog.deletion_vectors"] = "true"
        self.t = lakelog.create_table(
            f"{root}/t", SCHEMA, partition_by=("g",) if partitioned else (), properties=properties
        )
        self.next_id = 0

    def new(self, drawn: list[dict[str, Any]], g: str | None = None) -> pa.Table:
        out = []
        for r in drawn:
            out.append({**r, "id": self.next_id, **({"g": g} if g else {})})
            self.next_id += 1
        return pa.Table.from_pylist(out, schema=SCHEMA)

    def apply(self, step: tuple[Any, ...]) -> None:
        t, kind = self.t, step[0]
        if kind == "append":
            t.append(self.new(step[1]))
        elif kind == "overwrite":
            t.overwrite(self.new(step[1]))
        elif kind == "overwrite_where":
            t.overwrite(self.new(step[2], g=step[1]), where=f"g = '{step[1]}'")
        elif kind == "delete":
            t.delete(step[1])
        elif kind == "update":
            value = {"v": 99} if step[2] == "v" else {"g": "b"}
            t.update(step[1], set=value)
        elif kind == "merge":
            source = self._merge_source(step[1], step[2])
            t.merge(
                source,
                on="id",
                when_matched=step[3],
                when_not_matched=step[4],
                when_not_matched_by_source=step[5],
            )
        elif kind == "compact":
            t.compact(min_input_files=2)
        elif kind == "optimize":
            t.optimize(sort_by=["k"], incremental=False)
        elif kind == "expire":
            t.expire_snapshots(older_than=dt.timedelta(0), retain_last=step[1])
        elif kind == "restore":
            target = t.version - step[1]
            if target >= t.snapshot().oldest_version and target >= 0:
                t.restore(target)

    def _merge_source(self, ids: list[int], drawn: list[dict[str, Any]]) -> pa.Table:
        """Rows keyed by existing ids (matched) and by new ones (not matched)."""
        fresh = self.new(drawn).to_pylist()
        for r, old in zip(fresh, ids, strict=False):
            if old < self.next_id - len(fresh):
                r["id"] = old  # an id the table may hold
        unique = {r["id"]: r for r in reversed(fresh)}  # the first row of each id
        return pa.Table.from_pylist(list(unique.values())[::-1], schema=SCHEMA)


def _rows(table: pa.Table) -> Counter[Row]:
    return Counter(tuple(r[c] for c in SCHEMA.names) for r in table.to_pylist())


def _apply(state: Counter[Row], feed: pa.Table) -> Counter[Row]:
    """``state`` with the feed applied, commit by commit (removals, then additions)."""
    out = Counter(state)
    by_version: dict[int, list[dict[str, Any]]] = {}
    for r in feed.to_pylist():
        by_version.setdefault(r["_commit_version"], []).append(r)
    assert list(by_version) == sorted(by_version), "rows are ordered by commit version"
    for rows in by_version.values():
        for r in rows:
            if r["_change_type"] in ("delete", "update_preimage"):
                row = tuple(r[c] for c in SCHEMA.names)
                assert out[row] > 0, f"{r['_change_type']} of a row not in the table: {r}"
                out[row] -= 1
        for r in rows:
            if r["_change_type"] in ("insert", "update_postimage"):
                out[tuple(r[c] for c in SCHEMA.names)] += 1
            else:
                assert r["_change_type"] in ("delete", "update_preimage"), r
    return +out


def _check_ranges(h: History, data: st.DataObject) -> None:
    t = h.t.refresh()
    latest = t.version
    oldest = t.snapshot().oldest_version
    rows: dict[int, Counter[Row]] = {-1: Counter()}

    def at(v: int) -> Counter[Row]:
        if v not in rows:
            rows[v] = _rows(t.snapshot(v).to_arrow())
        return rows[v]

    first_v0 = oldest if oldest > 0 else -1
    pairs = {(v - 1, v) for v in range(max(first_v0 + 1, 0), latest + 1)}  # every commit
    pairs.add((first_v0, latest))
    for _ in range(3):
        v0 = data.draw(st.integers(first_v0, latest), label="v0")
        pairs.add((v0, data.draw(st.integers(max(v0, 0), latest), label="v1")))
    for v0, v1 in sorted(pairs):
        feed = t.changes(v0 + 1, v1).to_arrow()
        assert _apply(at(v0), feed) == at(v1), (v0, v1)


def _writes_change_files(root: str) -> bool:
    """Whether a delete on a table with the property on records change files."""
    h = History(root, feed=True, vectors=False, partitioned=False)
    h.t.append(h.new([{"g": "a", "k": 1, "v": 1}]))
    h.t.delete("k = 1")
    return any(isinstance(a, ChangeFile) for a in read_commit(h.t.storage, h.t.version).actions)


@pytest.fixture(scope="module")
def change_files() -> None:
    """The row-level histories below hold no refused commit: the writers record change
    files (else every range holding a change fails with ChangeFeedError)."""
    with tempfile.TemporaryDirectory() as root:
        assert _writes_change_files(root), "a delete with the property on wrote no change file"


@pytest.mark.parametrize("vectors", [False, True], ids=["copy-on-write", "deletion-vectors"])
@SETTINGS
@given(
    partitioned=st.booleans(), steps=st.lists(row_level_ops, min_size=1, max_size=8), data=st.data()
)
def test_the_feed_turns_one_version_into_another(
    change_files: None,
    vectors: bool,
    partitioned: bool,
    steps: list[tuple[Any, ...]],
    data: st.DataObject,
) -> None:
    with tempfile.TemporaryDirectory() as root:
        h = History(root, feed=True, vectors=vectors, partitioned=partitioned)
        for step in steps:
            h.apply(step)
        _check_ranges(h, data)


@pytest.mark.parametrize("vectors", [False, True], ids=["copy-on-write", "deletion-vectors"])
@SETTINGS
@given(partitioned=st.booleans(), steps=st.lists(plain_ops, min_size=1, max_size=8), data=st.data())
def test_without_the_property_appends_overwrites_and_maintenance_have_a_feed(
    vectors: bool, partitioned: bool, steps: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as root:
        h = History(root, feed=False, vectors=vectors, partitioned=partitioned)
        for step in steps:
            h.apply(step)
        _check_ranges(h, data)
        # a delete without change files: every range holding it is refused
        h.t.append(h.new([{"g": "a", "k": 1, "v": 1}]))
        h.t.delete("k = 1")
        v = h.t.version
        for start in (max(h.t.snapshot().oldest_version + 1, v - 2), v):
            with pytest.raises(lakelog.ChangeFeedError, match=f"commit {v} .*{FEED}=true"):
                h.t.changes(start)
        assert h.t.changes(v + 1).to_arrow().num_rows == 0
