"""Property: random sequences of append, delete, update, merge and compaction give the
rows of a plain in-memory model, at every version (time travel included, also through a
table opened again from its manifests), with deletion vectors on and off."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import lakelog

SCHEMA = pa.schema([("id", pa.int64()), ("g", pa.string()), ("k", pa.int64()), ("v", pa.int64())])
Row = dict[str, Any]
_UPSERT = ("update", "insert", "ignore")


@dataclass(frozen=True)
class Pred:
    """A predicate as lakelog's string form and as the model's three-valued function."""

    text: str
    fn: Callable[[Row], bool | None]


def _cmp(col: str, op: str, x: Any) -> Pred:
    ops: dict[str, Callable[[Any, Any], bool]] = {
        "=": lambda a, b: a == b,
        "!=": lambda a, b: a != b,
        "<": lambda a, b: a < b,
        ">=": lambda a, b: a >= b,
    }
    lit = f"'{x}'" if isinstance(x, str) else str(x)
    return Pred(f"{col} {op} {lit}", lambda r: None if r[col] is None else ops[op](r[col], x))


def _and(a: Pred, b: Pred) -> Pred:
    def fn(r: Row) -> bool | None:
        x, y = a.fn(r), b.fn(r)
        if x is False or y is False:
            return False
        return None if x is None or y is None else True

    return Pred(f"({a.text}) and ({b.text})", fn)


def _or(a: Pred, b: Pred) -> Pred:
    def fn(r: Row) -> bool | None:
        x, y = a.fn(r), b.fn(r)
        if x is True or y is True:
            return True
        return None if x is None or y is None else False

    return Pred(f"({a.text}) or ({b.text})", fn)


atoms = st.one_of(
    st.builds(_cmp, st.just("k"), st.sampled_from(["=", "!=", "<", ">="]), st.integers(0, 7)),
    st.builds(_cmp, st.just("v"), st.sampled_from(["=", "<", ">="]), st.integers(0, 40)),
    st.builds(_cmp, st.just("g"), st.sampled_from(["=", "!="]), st.sampled_from(["a", "b"])),
    st.builds(_cmp, st.just("id"), st.sampled_from(["<", ">="]), st.integers(0, 60)),
)
preds = st.one_of(
    atoms,
    st.builds(_and, atoms, atoms),
    st.builds(_or, atoms, atoms),
    st.just(Pred("true", lambda r: True)),
)

row_st = st.fixed_dictionaries(
    {
        "g": st.sampled_from(["a", "b"]),
        "k": st.one_of(st.none(), st.integers(0, 7)),
        "v": st.one_of(st.none(), st.integers(0, 40)),
    }
)
rows_st = st.lists(row_st, min_size=0, max_size=6)
# merge sources: few distinct keys, so duplicates and matches are common
source_st = st.lists(
    st.fixed_dictionaries(
        {
            "g": st.sampled_from(["a", "b"]),
            "k": st.one_of(st.none(), st.integers(0, 3)),
            "v": st.one_of(st.none(), st.integers(0, 40)),
        }
    ),
    min_size=1,
    max_size=6,
)

ops = st.one_of(
    st.tuples(st.just("append"), rows_st),
    st.tuples(st.just("delete"), preds),
    st.tuples(st.just("update"), preds, st.sampled_from(["const", "plus", "null", "move"])),
    st.tuples(
        st.just("merge"),
        source_st,
        st.sampled_from(["update", "delete", "ignore"]),
        st.sampled_from(["insert", "ignore"]),
        st.sampled_from(["ignore", "ignore", "delete"]),
        st.sampled_from(["last", "first"]),
    ),
    st.tuples(st.just("compact")),
)


class Model:
    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.next_id = 0

    def new_rows(self, drawn: list[Row]) -> list[Row]:
        out = []
        for r in drawn:
            out.append({"id": self.next_id, **r})
            self.next_id += 1
        return out

    def delete(self, p: Pred) -> None:
        self.rows = [r for r in self.rows if p.fn(r) is not True]

    def update(self, p: Pred, what: str) -> None:
        for r in self.rows:
            if p.fn(r) is True:
                if what == "const":
                    r["v"] = 7
                elif what == "plus":
                    r["v"] = None if r["v"] is None else r["v"] + 1
                elif what == "null":
                    r["v"] = None
                else:
                    r["g"] = "b" if r["g"] == "a" else "a"

    def merge(
        self, src: list[Row], matched: str, not_matched: str, by_source: str, dup: str
    ) -> None:
        keyed: dict[int, Row] = {}
        for r in src if dup == "last" else reversed(src):
            if r["k"] is not None:
                keyed[r["k"]] = r
        hit: set[int] = set()
        out = []
        for r in self.rows:
            s = keyed.get(r["k"]) if r["k"] is not None else None
            if s is not None:
                hit.add(r["k"])
                if matched == "update":
                    out.append(dict(s))
                elif matched == "ignore":
                    out.append(r)
            elif by_source == "ignore":
                out.append(r)
        if not_matched == "insert":
            # surviving source rows in source order (null keys always: they match nothing)
            keep = {id(r) for r in keyed.values()}
            out += [dict(r) for r in src if (r["k"] is None or id(r) in keep) and r["k"] not in hit]
        self.rows = out


def _table(rows: list[Row]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _sorted(rows: list[Row]) -> list[tuple[Any, ...]]:
    return sorted(
        ((r["id"], r["g"], r["k"], r["v"]) for r in rows),
        key=lambda t: tuple((x is None, x) for x in t),
    )


@pytest.mark.parametrize("vectors", [False, True], ids=["copy-on-write", "deletion-vectors"])
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    partitioned=st.booleans(),
    interval=st.sampled_from([1, 2, 3]),
    steps=st.lists(ops, min_size=1, max_size=8),
)
@example(
    partitioned=True,
    interval=2,
    steps=[
        ("append", [{"g": "a", "k": 1, "v": None}, {"g": "b", "k": 2, "v": 3}]),
        ("merge", [{"g": "b", "k": 1, "v": 1}, {"g": "a", "k": 1, "v": 2}], *_UPSERT, "last"),
        ("merge", [{"g": "a", "k": 2, "v": 5}, {"g": "b", "k": 2, "v": 6}], *_UPSERT, "first"),
        ("update", Pred("v < 4", lambda r: None if r["v"] is None else r["v"] < 4), "move"),
        ("compact",),
        ("delete", Pred("v >= 5", lambda r: None if r["v"] is None else r["v"] >= 5)),
    ],
)
@example(  # one file changed again and again: with vectors, each change extends its vector
    partitioned=False,
    interval=1,
    steps=[
        ("append", [{"g": "a", "k": i, "v": i} for i in range(6)]),
        ("delete", _cmp("k", "=", 1)),
        ("update", _cmp("k", ">=", 4), "plus"),
        ("merge", [{"g": "b", "k": 2, "v": 9}], "update", "ignore", "ignore", "last"),
        ("delete", _cmp("v", "<", 1)),
        ("compact",),
    ],
)
def test_random_changes_match_the_model(
    vectors: bool, partitioned: bool, interval: int, steps: list[tuple[Any, ...]]
) -> None:
    model = Model()
    properties = {"lakelog.manifest_interval": str(interval)}
    if vectors:
        properties["lakelog.deletion_vectors"] = "true"
    with tempfile.TemporaryDirectory() as root:
        t = lakelog.create_table(
            f"{root}/t",
            SCHEMA,
            partition_by=("g",) if partitioned else (),
            properties=properties,
        )
        seen = [(t.version, [])]
        for step in steps:
            kind = step[0]
            if kind == "append":
                new = model.new_rows(step[1])
                t.append(_table(new))
                model.rows += [dict(r) for r in new]
            elif kind == "delete":
                t.delete(step[1].text)
                model.delete(step[1])
            elif kind == "update":
                what = step[2]
                value: Any = {
                    "const": {"v": 7},
                    "plus": {"v": pc.field("v") + 1},
                    "null": {"v": None},
                    "move": {"g": pc.if_else(pc.field("g") == "a", "b", "a")},
                }[what]
                t.update(step[1].text, set=value)
                model.update(step[1], what)
            elif kind == "merge":
                src = model.new_rows(step[1])
                t.merge(
                    _table(src),
                    on="k",
                    when_matched=step[2],
                    when_not_matched=step[3],
                    when_not_matched_by_source=step[4],
                    duplicates=step[5],
                )
                model.merge(src, *step[2:])
            else:
                t.compact(min_input_files=2)
            got = t.snapshot().to_arrow().to_pylist()
            assert _sorted(got) == _sorted(model.rows), step
            seen.append((t.version, [dict(r) for r in model.rows]))
        # time travel: every version reads as the model did then, also through a table
        # opened again (its manifests and leaves carry the vectors), and counts its rows
        again = lakelog.open_table(t.uri)
        for version, expected in seen:
            for table in (t, again):
                snap = table.snapshot(version)
                assert _sorted(snap.to_arrow().to_pylist()) == _sorted(expected), version
                assert snap.num_rows == len(expected), version
