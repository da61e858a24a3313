"""MERGE conformance: random tables, sources and clause combinations (conditions, SET and
VALUES expressions, NOT MATCHED BY SOURCE, null keys, duplicate source keys) give the
same table and counts through a pure-Python oracle of Delta's rules, ``Table.merge``,
``lakelog.sql.execute`` (embedded) and ``lakelog.spark.sql`` (fewer examples); duplicate
source keys are the same typed error everywhere, with nothing written."""

from __future__ import annotations

import dataclasses
import tempfile
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakelog
import lakelog.sql
from lakelog import (
    InvalidArgumentError,
    MergeClause,
    when_matched_delete,
    when_matched_update,
    when_not_matched_by_source_delete,
    when_not_matched_by_source_update,
    when_not_matched_insert,
)

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string())])
Row = dict[str, Any]


# -- SQL's three-valued logic for the oracle ----------------------------------------------


def _gt(a: Any, b: Any) -> bool | None:
    return None if a is None or b is None else a > b


def _eq(a: Any, b: Any) -> bool | None:
    return None if a is None or b is None else a == b


def _add(a: Any, b: Any) -> Any:
    return None if a is None or b is None else a + b


def _cat(a: Any, b: Any) -> Any:
    return None if a is None or b is None else a + b


@dataclasses.dataclass(frozen=True)
class Expr:
    """One condition or value: its text with ``{t}`` (the target's qualifier: ``t.`` in
    SQL, nothing in the API) and ``{s}`` (``s`` in SQL, ``source`` in the API), and what
    it means for a target row and a source row (either None when absent)."""

    text: str
    fn: Callable[[Row, Row], Any]

    def api(self) -> str:
        return self.text.format(t="", s="source")

    def sql(self) -> str:
        return self.text.format(t="t.", s="s")


MATCHED_CONDITIONS = [
    Expr("{s}.v > {t}v", lambda t, s: _gt(s["v"], t["v"])),
    Expr("{t}s = 'a'", lambda t, s: _eq(t["s"], "a")),
    Expr("{s}.s IS NULL", lambda t, s: s["s"] is None),
    Expr("{t}v < 0 OR {s}.s = 'b'", lambda t, s: _or(_gt(0, t["v"]), _eq(s["s"], "b"))),
]
MATCHED_SETS = [
    {"v": Expr("{t}v + {s}.v", lambda t, s: _add(t["v"], s["v"]))},
    {"s": Expr("'u'", lambda t, s: "u"), "v": Expr("{s}.v", lambda t, s: s["v"])},
    {"s": Expr("{t}s || {s}.s", lambda t, s: _cat(t["s"], s["s"]))},
]
INSERT_CONDITIONS = [
    Expr("{s}.v > 1", lambda t, s: _gt(s["v"], 1)),
    Expr("{s}.s IS NOT NULL", lambda t, s: s["s"] is not None),
]
INSERT_VALUES = [
    {"id": Expr("{s}.id", lambda t, s: s["id"]), "v": Expr("{s}.v * 3", lambda t, s: _mul3(s))},
    {"id": Expr("{s}.id", lambda t, s: s["id"]), "s": Expr("'new'", lambda t, s: "new")},
]
BY_SOURCE_CONDITIONS = [
    Expr("{t}v > 2", lambda t, s: _gt(t["v"], 2)),
    Expr("{t}s IS NULL", lambda t, s: t["s"] is None),
]
BY_SOURCE_SETS = [
    {"s": Expr("'gone'", lambda t, s: "gone")},
    {"v": Expr("{t}v + 1", lambda t, s: _add(t["v"], 1))},
]


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _mul3(s: Row) -> Any:
    return None if s["v"] is None else s["v"] * 3


@dataclasses.dataclass(frozen=True)
class Clause:
    when: str  # matched, not_matched, not_matched_by_source
    action: str
    condition: Expr | None
    values: dict[str, Expr] | None

    def api(self) -> MergeClause:
        cond = self.condition.api() if self.condition else None
        vals = {k: v.api() for k, v in self.values.items()} if self.values else None
        if self.when == "matched":
            if self.action == "delete":
                return when_matched_delete(condition=cond)
            return when_matched_update(set=vals, condition=cond)
        if self.when == "not_matched":
            return when_not_matched_insert(values=vals, condition=cond)
        if self.action == "delete":
            return when_not_matched_by_source_delete(condition=cond)
        assert vals is not None
        return when_not_matched_by_source_update(set=vals, condition=cond)

    def sql(self) -> str:
        when = {
            "matched": "WHEN MATCHED",
            "not_matched": "WHEN NOT MATCHED",
            "not_matched_by_source": "WHEN NOT MATCHED BY SOURCE",
        }[self.when]
        cond = f" AND {self.condition.sql()}" if self.condition else ""
        if self.action == "delete":
            return f"{when}{cond} THEN DELETE"
        if self.action == "insert":
            if self.values is None:
                return f"{when}{cond} THEN INSERT *"
            cols = ", ".join(self.values)
            vals = ", ".join(v.sql() for v in self.values.values())
            return f"{when}{cond} THEN INSERT ({cols}) VALUES ({vals})"
        if self.values is None:
            return f"{when}{cond} THEN UPDATE SET *"
        sets = ", ".join(f"{k} = {v.sql()}" for k, v in self.values.items())
        return f"{when}{cond} THEN UPDATE SET {sets}"


def _kind(draw: Any, when: str) -> list[Clause]:
    n = draw(st.integers(0, 3 if when == "matched" else 2))
    out = []
    for i in range(n):
        last = i == n - 1
        if when == "matched":
            conds, action = MATCHED_CONDITIONS, draw(st.sampled_from(["update", "delete"]))
            values = draw(st.sampled_from([None, *MATCHED_SETS])) if action == "update" else None
        elif when == "not_matched":
            conds, action = INSERT_CONDITIONS, "insert"
            values = draw(st.sampled_from([None, *INSERT_VALUES]))
        else:
            conds, action = BY_SOURCE_CONDITIONS, draw(st.sampled_from(["update", "delete"]))
            values = draw(st.sampled_from(BY_SOURCE_SETS)) if action == "update" else None
        # only the last clause of a kind may go without a condition
        options = [None, *conds] if last else conds
        cond = draw(st.sampled_from(options))
        out.append(Clause(when, action, cond, values))
    return out


@st.composite
def merges(draw: Any) -> tuple[list[Row], list[Row], list[Clause]]:
    small = st.one_of(st.none(), st.integers(-3, 6))
    text = st.sampled_from([None, "a", "b", "c"])
    target_ids = draw(st.lists(st.integers(0, 8), max_size=7, unique=True))
    target = [{"id": i, "v": draw(small), "s": draw(text)} for i in target_ids]
    if draw(st.booleans()):
        target.append({"id": None, "v": draw(small), "s": draw(text)})  # a null key
    source_ids = draw(st.lists(st.one_of(st.none(), st.integers(0, 10)), max_size=6))
    if not draw(st.integers(0, 5)):  # now and then a key twice
        source_ids += source_ids[:1]
    source = [{"id": i, "v": draw(small), "s": draw(text)} for i in source_ids]
    clauses = [*_kind(draw, "matched"), *_kind(draw, "not_matched")]
    clauses += _kind(draw, "not_matched_by_source")
    if not clauses:
        clauses = [Clause("not_matched", "insert", None, None)]  # MERGE needs one
    return target, source, clauses


class Duplicate(Exception):
    pass


def oracle(
    target: list[Row], source: list[Row], clauses: list[Clause]
) -> tuple[list[Row], tuple[int, int, int]]:
    """Delta's rules in plain Python: the table after the merge and (updated, deleted,
    inserted)."""
    keyed = [r["id"] for r in source if r["id"] is not None]
    if len(keyed) != len(set(keyed)):
        raise Duplicate
    by_key = {r["id"]: r for r in source if r["id"] is not None}
    target_keys = {r["id"] for r in target if r["id"] is not None}
    out: list[Row] = []
    updated = deleted = inserted = 0
    none = {"id": None, "v": None, "s": None}
    for row in target:
        match = by_key.get(row["id"]) if row["id"] is not None else None
        when = "matched" if match is not None else "not_matched_by_source"
        src = match or none
        chosen = next(
            (
                c
                for c in clauses
                if c.when == when and (c.condition is None or c.condition.fn(row, src) is True)
            ),
            None,
        )
        if chosen is None:
            out.append(row)
        elif chosen.action == "delete":
            deleted += 1
        else:
            updated += 1
            if chosen.values is None:
                out.append(dict(src))
            else:
                new = dict(row)
                for col, e in chosen.values.items():
                    new[col] = e.fn(row, src)
                out.append(new)
    for src in source:
        if src["id"] is not None and src["id"] in target_keys:
            continue
        chosen = next(
            (
                c
                for c in clauses
                if c.when == "not_matched"
                and (c.condition is None or c.condition.fn(none, src) is True)
            ),
            None,
        )
        if chosen is None:
            continue
        inserted += 1
        if chosen.values is None:
            out.append(dict(src))
        else:
            out.append(
                {
                    col: (e.fn(none, src) if (e := chosen.values.get(col)) else None)
                    for col in SCHEMA.names
                }
            )
    return out, (updated, deleted, inserted)


def canonical(rows: list[Row]) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(r[c] for c in SCHEMA.names) for r in rows),
        key=lambda t: tuple((x is None, x if x is not None else 0) for x in t),
    )


def _options(clauses: list[Clause]) -> dict[str, list[MergeClause]]:
    return {
        "when_matched": [c.api() for c in clauses if c.when == "matched"],
        "when_not_matched": [c.api() for c in clauses if c.when == "not_matched"],
        "when_not_matched_by_source": [
            c.api() for c in clauses if c.when == "not_matched_by_source"
        ],
    }


def statement(name: str, src: str, clauses: list[Clause]) -> str:
    ordered = sorted(
        clauses, key=lambda c: ["matched", "not_matched", "not_matched_by_source"].index(c.when)
    )
    body = " ".join(c.sql() for c in ordered)
    return f"MERGE INTO {name} t USING {src} s ON t.id = s.id {body}"


@pytest.fixture(scope="module")
def catalog() -> Iterator[Any]:
    folder = tempfile.mkdtemp()
    cat = lakelog.connect_catalog(f"sqlite:///{folder}/c.db", warehouse=f"{folder}/wh")
    cat.create_namespace("m")
    try:
        yield cat
    finally:
        cat.close()


def tables(catalog: Any, target: list[Row], source: list[Row]) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:10]
    name, src = f"m.t_{tag}", f"m.s_{tag}"
    t = catalog.create_table(name, SCHEMA)
    if target:
        t.append(pa.Table.from_pylist(target, schema=SCHEMA))
    s = catalog.create_table(src, SCHEMA)
    if source:
        s.append(pa.Table.from_pylist(source, schema=SCHEMA))
    return name, src


def counts(result: pa.Table | Any) -> tuple[int, int, int]:
    row = result.to_pylist()[0] if isinstance(result, pa.Table) else result.collect()[0].asDict()
    return row["num_updated_rows"], row["num_deleted_rows"], row["num_inserted_rows"]


CHECKS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@settings(max_examples=120, deadline=None, suppress_health_check=CHECKS)
@given(case=merges())
def test_table_merge_and_embedded_sql_match_the_oracle(
    catalog: Any, case: tuple[list[Row], list[Row], list[Clause]]
) -> None:
    target, source, clauses = case
    name, src = tables(catalog, target, source)
    api = catalog.load_table(name)
    name2, _ = tables(catalog, target, [])
    by_sql = catalog.load_table(name2)
    try:
        want, want_counts = oracle(target, source, clauses)
    except Duplicate:
        before = (api.snapshot().version, by_sql.snapshot().version)
        with pytest.raises(InvalidArgumentError, match="more than once"):
            api.merge(pa.Table.from_pylist(source, schema=SCHEMA), "id", **_options(clauses))
        with pytest.raises(InvalidArgumentError, match="more than once"):
            lakelog.sql.execute(statement(name2, src, clauses), catalog=catalog)
        assert (api.snapshot().version, by_sql.snapshot().version) == before
        return
    r = api.merge(pa.Table.from_pylist(source, schema=SCHEMA), "id", **_options(clauses))
    assert canonical(api.snapshot().to_arrow().to_pylist()) == canonical(want)
    assert (r.updated_rows, r.deleted_rows, r.inserted_rows) == want_counts
    out = lakelog.sql.execute(statement(name2, src, clauses), catalog=catalog)
    assert canonical(by_sql.snapshot().to_arrow().to_pylist()) == canonical(want)
    assert counts(out) == want_counts


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
@settings(max_examples=8, deadline=None, suppress_health_check=CHECKS)
@given(case=merges())
def test_spark_sql_matches_the_oracle(
    spark: Any, catalog: Any, case: tuple[list[Row], list[Row], list[Clause]]
) -> None:
    from lakelog.spark import sql

    target, source, clauses = case
    name, src = tables(catalog, target, source)
    table = catalog.load_table(name)
    try:
        want, want_counts = oracle(target, source, clauses)
    except Duplicate:
        version = table.snapshot().version
        with pytest.raises(InvalidArgumentError, match="more than once"):
            sql(spark, statement(name, src, clauses), catalog=catalog)
        assert table.snapshot().version == version
        return
    out = sql(spark, statement(name, src, clauses), catalog=catalog)
    assert canonical(table.snapshot().to_arrow().to_pylist()) == canonical(want)
    assert counts(out) == want_counts
