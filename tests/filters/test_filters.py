"""The filter language (lakelog.filters): parsing, row semantics and sound pruning."""

from __future__ import annotations

import datetime as dt
import decimal
import math

import hypothesis.strategies as st
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings

from lakelog.errors import InvalidArgumentError
from lakelog.filters import (
    And,
    Compare,
    Const,
    FileStatsColumns,
    In,
    IsNull,
    Not,
    Or,
    Predicate,
    Unknown,
    parse_filter,
    prune_mask,
    to_expression,
)
from lakelog.filters.expressions import decode_expression

SCHEMA = pa.schema(
    [
        ("p", pa.int32()),  # the partition column
        ("i", pa.int64()),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("d", pa.date32()),
        ("x.y", pa.int16()),
        ("odd name", pa.string()),
    ]
)
STATS_COLUMNS = [name for name in SCHEMA.names if name != "p"]
D = [dt.date(2026, 11, day) for day in range(1, 5)]
TRUNCATE = 2  # string bounds: longer minimums are cut, longer maximums dropped


def lit(value: object, t: pa.DataType) -> pa.Scalar:
    return pa.scalar(value, t)


def i64(v: int) -> pa.Scalar:
    return lit(v, pa.int64())


def rows(table: pa.Table, expr: pc.Expression) -> list[int]:
    return table.filter(expr).column("_row").to_pylist()


# -- parsing ------------------------------------------------------------------------------

PARSED: list[tuple[str, Predicate]] = [
    ("i = 5", Compare("i", "=", i64(5))),
    ("i == 5", Compare("i", "=", i64(5))),
    ("i <> -5", Compare("i", "!=", i64(-5))),
    ("i != 5", Compare("i", "!=", i64(5))),
    ("5 < i", Compare("i", ">", i64(5), literal_first=True)),
    ("f >= 1.5e3", Compare("f", ">=", lit(1500.0, pa.float64()))),
    ("f < -.5", Compare("f", "<", lit(-0.5, pa.float64()))),
    ("f <= 2", Compare("f", "<=", lit(2.0, pa.float64()))),
    ("p > 7", Compare("p", ">", lit(7, pa.int32()))),
    ("i > 2.5", Compare("i", ">", lit(2.5, pa.float64()))),  # compared as numbers
    ("s = 'it''s'", Compare("s", "=", lit("it's", pa.string()))),
    ("d = '2026-11-02'", Compare("d", "=", lit(D[1], pa.date32()))),
    ("x.y = 3", Compare("x.y", "=", lit(3, pa.int16()))),
    ("\"odd name\" = 'a'", Compare("odd name", "=", lit("a", pa.string()))),
    ("`odd name` = 'a'", Compare("odd name", "=", lit("a", pa.string()))),
    ("i is null", IsNull("i")),
    ("i IS NOT NULL", IsNull("i", negated=True)),
    (
        "i between 1 and 3",
        And((Compare("i", ">=", i64(1)), Compare("i", "<=", i64(3)))),
    ),
    (
        "i NOT BETWEEN 1 AND 3",
        Not(And((Compare("i", ">=", i64(1)), Compare("i", "<=", i64(3))))),
    ),
    ("i in (1, 2)", In("i", (i64(1), i64(2)))),
    ("i not in (1)", In("i", (i64(1),), negated=True)),
    ("s in ('a')", In("s", (lit("a", pa.string()),))),
    ("true", Const(True)),
    ("False", Const(False)),
    ("not i = 1", Not(Compare("i", "=", i64(1)))),
    (
        "i = 1 or i = 2 and f > 0",
        Or(
            (
                Compare("i", "=", i64(1)),
                And((Compare("i", "=", i64(2)), Compare("f", ">", lit(0.0, pa.float64())))),
            )
        ),
    ),
    (
        "(i = 1 or i = 2) and not (f > 0)",
        And(
            (
                Or((Compare("i", "=", i64(1)), Compare("i", "=", i64(2)))),
                Not(Compare("f", ">", lit(0.0, pa.float64()))),
            )
        ),
    ),
    (
        "d = '2026-11-02' and i between 10 and 20",
        And(
            (
                Compare("d", "=", lit(D[1], pa.date32())),
                And((Compare("i", ">=", i64(10)), Compare("i", "<=", i64(20)))),
            )
        ),
    ),
]


@pytest.mark.parametrize(("text", "expected"), PARSED)
def test_parse_sql(text: str, expected: Predicate) -> None:
    pred = parse_filter(text, SCHEMA)
    assert pred == expected
    assert pred is not None
    for scalars in _scalars(pred), _scalars(expected):  # same types, not only values
        assert all(isinstance(s, pa.Scalar) for s in scalars)
    assert [s.type for s in _scalars(pred)] == [s.type for s in _scalars(expected)]
    assert to_expression(pred).equals(to_expression(expected))


def _scalars(pred: Predicate) -> list[pa.Scalar]:
    if isinstance(pred, Compare):
        return [pred.value]
    if isinstance(pred, In):
        return list(pred.values)
    if isinstance(pred, (And, Or)):
        return [s for p in pred.parts for s in _scalars(p)]
    if isinstance(pred, Not):
        return _scalars(pred.part)
    return []


def test_parse_nothing() -> None:
    assert parse_filter(None, SCHEMA) is None
    assert parse_filter([], SCHEMA) is None
    assert parse_filter("  ", SCHEMA) is None


ERRORS = [
    ("i >= ", "expected a literal after '>=' at column 6, found end of filter"),
    ("d = 'x'", "expected a date such as '2026-11-02' for column 'd' at column 5, found 'x'"),
    ("nope = 1", "expected a column of the table at column 1, found 'nope'"),
    ("i = 1 and nope = 1", "the table's columns are ['p', 'i', 'f', 's', 'd', 'x.y', 'odd name']"),
    ("i = f", "comparing two columns is not supported) at column 5, found 'f'"),
    ("s = 5", "expected a string for column 's' at column 5, found 5"),
    ("i = 'a'", "expected an integer for column 'i' at column 5, found 'a'"),
    ("i in (1,", "expected a literal after ',' at column 9, found end of filter"),
    ("i in 1", "expected '(' after 'in' at column 6, found '1'"),
    ("i = null", "'is null' tests for nulls) at column 5, found 'null'"),
    ("(i = 1", "expected ')' after the condition in parentheses at column 7"),
    ("i = 1 j", "expected 'and', 'or' or the end of the filter at column 7, found 'j'"),
    ("s = 'abc", "expected a closing ' for the ' at column 5"),
    ("i = 1 ; drop", "found ';'"),
    ("i between 1 or 2", "expected 'and' after between 1 at column 13, found 'or'"),
    ("i is nul", "expected 'null' after 'is' at column 6, found 'nul'"),
    ("i", "expected a comparison (=, !=, <, <=, >, >=), 'between', 'in' or 'is' after i"),
    ("5 = 6", "expected a column after '=' (one side must be a column) at column 5"),
    ("and i = 1", "expected a condition (a column, 'not', 'true', 'false' or '(') at column 1"),
]


@pytest.mark.parametrize(("text", "message"), ERRORS)
def test_parse_sql_errors(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_filter(text, SCHEMA)
    assert message in str(info.value)


def test_parse_sql_types() -> None:
    schema = pa.schema(
        [
            ("ts", pa.timestamp("ms", tz="UTC")),
            ("naive", pa.timestamp("ns")),
            ("amount", pa.decimal128(10, 2)),
            ("ok", pa.bool_()),
            ("tiny", pa.int8()),
            ("big", pa.large_string()),
        ]
    )
    utc = dt.timezone.utc
    cases: list[tuple[str, pa.Scalar]] = [
        ("ts >= '2026-11-02'", lit(dt.datetime(2026, 11, 2, tzinfo=utc), schema[0].type)),
        (
            "ts < '2026-11-02 10:30:00+01:00'",
            lit(dt.datetime(2026, 11, 2, 9, 30, tzinfo=utc), schema[0].type),
        ),
        ("naive = '2026-11-02 10:30:00'", lit(dt.datetime(2026, 11, 2, 10, 30), schema[1].type)),
        ("amount > 12.25", lit(decimal.Decimal("12.25"), schema[2].type)),
        ("ok = true", lit(True, pa.bool_())),
        ("tiny < 100", lit(100, pa.int8())),
        ("big = 'x'", lit("x", pa.large_string())),
    ]
    for text, expected in cases:
        pred = parse_filter(text, schema)
        assert isinstance(pred, Compare), text
        assert pred.value.type == expected.type and pred.value.equals(expected), text
    assert parse_filter("ok", schema) == Compare("ok", "=", lit(True, pa.bool_()))
    assert parse_filter("not ok", schema) == Not(Compare("ok", "=", lit(True, pa.bool_())))
    tiny = parse_filter("tiny < 1000", schema)  # out of int8: compared as int64
    assert isinstance(tiny, Compare) and tiny.value.type == pa.int64()
    with pytest.raises(InvalidArgumentError, match="expected a timestamp"):
        parse_filter("ts = 'soon'", schema)


def test_parse_dnf() -> None:
    single = parse_filter([("d", "=", "2026-11-02"), ("i", "in", [1, 2])], SCHEMA)
    assert single == And(
        (Compare("d", "=", lit(D[1], pa.date32())), In("i", (i64(1), i64(2)), nulls="match"))
    )
    either = parse_filter([[("p", "==", 1)], [("s", "not in", {"a"}), ("f", "<", 1)]], SCHEMA)
    assert either == Or(
        (
            Compare("p", "=", lit(1, pa.int32())),
            And(
                (
                    In("s", (lit("a", pa.string()),), negated=True, nulls="match"),
                    Compare("f", "<", lit(1.0, pa.float64())),
                )
            ),
        )
    )
    assert parse_filter([("i", "in", [])], SCHEMA) == Const(False)
    assert parse_filter((("i", "NOT IN", ()),), SCHEMA) == Const(True)
    for bad, message in [
        ([("i", "~", 1)], "expected a DNF operator"),
        ([("nope", "=", 1)], "the table's columns are"),
        ([("i", "in", 1)], "expected a list of values for 'in'"),
        ([("i", "=")], r"expected a DNF term .* found \('i', '='\)"),
        ([[("i", "=", 1)], "x"], "expected DNF tuples"),
        ([("d", "=", "x")], "expected a date"),
    ]:
        with pytest.raises(InvalidArgumentError, match=message):
            parse_filter(bad, SCHEMA)
    with pytest.raises(InvalidArgumentError, match="expected a filter"):
        parse_filter(42, SCHEMA)


def test_dnf_selects_what_pyarrow_parquet_selects() -> None:
    table = pa.table(
        {
            "_row": list(range(5)),
            "i": pa.array([1, 2, None, 4, 5], pa.int64()),
            "s": ["a", None, "b", "c", "a"],
        }
    )
    for dnf in (
        [("i", "not in", [1, 2])],  # selects the null row, as pyarrow.parquet does
        [("i", "in", [1, None])],
        [[("i", "!=", 4)], [("s", "=", "a"), ("i", ">=", 2)]],
    ):
        pred = parse_filter(dnf, table.schema)
        assert pred is not None
        assert rows(table, to_expression(pred)) == rows(table, pq.filters_to_expression(dnf))


def test_sql_not_in_skips_nulls() -> None:
    table = pa.table({"_row": [0, 1, 2], "i": pa.array([1, None, 3], pa.int64())})
    for text, expected in [
        ("i not in (1, 2)", [2]),
        ("not (i in (1, 2))", [2]),
        ("not (i not in (1, 2))", [0]),
        ("i in (1, 2) or i is null", [0, 1]),
    ]:
        pred = parse_filter(text, table.schema)
        assert pred is not None
        assert rows(table, to_expression(pred)) == expected, text


ROUND_TRIPS = [
    pc.field("i") == 5,
    pc.field("i") != pa.scalar(5, pa.int8()),
    pc.scalar(3) < pc.field("f"),
    (pc.field("d") >= D[0]) & (pc.field("d") <= D[2]) & (pc.field("s") > "a"),
    (pc.field("i") < 1) | ((pc.field("i") > 5) | (pc.field("f") == 0.5)),
    ~(pc.field("s").isin(["a", "b"])),
    pc.field("i").isin([1, None]),
    pc.is_in(pc.field("i"), value_set=pa.array([1, 2]), skip_nulls=True),
    pc.field("f").is_null(nan_is_null=True) | pc.field("f").is_valid(),
    ~pc.field("i").is_null(),
    (pc.field("i") > 1) & ((pc.field("i") < 0) | pc.scalar(False)),
    pc.scalar(True),
    pc.field("f") == float("nan"),
    pc.field("i") == pa.scalar(None, pa.int64()),
]


@pytest.mark.parametrize("expr", ROUND_TRIPS, ids=str)
def test_expression_round_trip(expr: pc.Expression) -> None:
    pred = parse_filter(expr, SCHEMA)
    assert pred is not None and not _has_unknown(pred), pred
    assert to_expression(pred).equals(expr)


def _has_unknown(pred: Predicate) -> bool:
    if isinstance(pred, Unknown):
        return True
    if isinstance(pred, (And, Or)):
        return any(_has_unknown(p) for p in pred.parts)
    return isinstance(pred, Not) and _has_unknown(pred.part)


def test_expression_decoding() -> None:
    pred = parse_filter((pc.field("i") > 3) & (pc.scalar(D[0]) <= pc.field("d")), SCHEMA)
    assert pred == And(
        (Compare("i", ">", i64(3)), Compare("d", ">=", lit(D[0], pa.date32()), True))
    )
    assert isinstance(pred, And) and pred.parts[1].literal_first  # type: ignore[union-attr]
    left_deep = (pc.field("i") == 1) | (pc.field("i") == 2) | (pc.field("i") == 3)
    assert parse_filter(left_deep, SCHEMA) == Or(
        tuple(Compare("i", "=", i64(v)) for v in (1, 2, 3))
    )
    assert parse_filter(~pc.field("i").isin([1]), SCHEMA) == Not(In("i", (i64(1),), nulls="match"))
    assert parse_filter(pc.field("i").is_valid(), SCHEMA) == IsNull("i", negated=True)


def test_expression_parts_not_understood() -> None:
    odd = [
        pc.field("i") + 1 > 2,  # a function of a column
        pc.field("i") == pc.field("x.y"),  # column against column
        pc.field("s"),  # not a predicate by itself
        pc.field("i").isin(pa.array([], pa.int64())),
        pc.scalar(None),
        pc.and_(pc.field("i") > 1, pc.field("i") < 3),  # pyarrow names this call and_
        pc.is_null(pc.field("i")),  # without options: not what IsNull rebuilds
    ]
    for part in odd:
        whole = (pc.field("p") == 1) & part
        pred = decode_expression(whole, SCHEMA)  # parse_filter also refuses what Arrow cannot run
        assert isinstance(pred, And), part
        assert pred.parts[0] == Compare("p", "=", i64(1))
        unknown = pred.parts[1]
        assert isinstance(unknown, Unknown) and unknown.expression is not None
        assert unknown.expression.equals(part)
        assert to_expression(pred).equals(whole)
    unrunnable = [odd[2], odd[4], odd[5]]  # not boolean, a null, a call Arrow does not have
    for part in unrunnable:
        with pytest.raises(InvalidArgumentError, match="Arrow can evaluate"):
            parse_filter((pc.field("p") == 1) & part, SCHEMA)
    alone = pc.field("i") + 1 > 2
    pred = parse_filter(alone, SCHEMA)
    assert isinstance(pred, Unknown) and pred.expression is not None
    assert pred.expression.equals(alone)
    with pytest.raises(InvalidArgumentError, match="the table's columns are"):
        parse_filter(pc.field("nope") == 1, SCHEMA)
    with pytest.raises(InvalidArgumentError, match="Unknown"):
        to_expression(Unknown())


def test_expression_with_odd_names_never_misdecodes() -> None:
    tricky = "a'\nend: 'x"  # a name that reads like serialized entries
    schema = pa.schema([(tricky, pa.int64()), ("it's", pa.int64())])
    quoted = parse_filter(pc.field("it's") == 1, schema)
    assert quoted == Compare("it's", "=", i64(1))
    broken = parse_filter(pc.field(tricky) == 1, schema)  # not decodable: all Unknown
    assert isinstance(broken, Unknown) and broken.expression is not None
    assert broken.expression.equals(pc.field(tricky) == 1)


# -- pruning ------------------------------------------------------------------------------


def _stats(
    files: list[pa.Table], partitions: list[int | None], unknown: set[tuple[int, str]]
) -> FileStatsColumns:
    """Stats as lakelog keeps them: bounds ignore nulls and NaN, a long string
    minimum is cut, a long maximum dropped; ``unknown`` (file, column) have none."""
    mins: dict[str, list[object]] = {c: [] for c in STATS_COLUMNS}
    maxs: dict[str, list[object]] = {c: [] for c in STATS_COLUMNS}
    nulls: dict[str, list[object]] = {c: [] for c in STATS_COLUMNS}
    for k, f in enumerate(files):
        for c in STATS_COLUMNS:
            values = [
                v
                for v in f.column(c).to_pylist()
                if v is not None and not (isinstance(v, float) and math.isnan(v))
            ]
            lo = min(values) if values else None
            hi = max(values) if values else None
            if isinstance(lo, str):
                lo = lo[:TRUNCATE]
            if isinstance(hi, str) and len(hi) > TRUNCATE:
                hi = None
            known = (k, c) not in unknown
            mins[c].append(lo if known else None)
            maxs[c].append(hi if known else None)
            nulls[c].append(f.column(c).null_count if known else None)
    return FileStatsColumns(
        num_rows=pa.array([f.num_rows for f in files], pa.int64()),
        partition={"p": pa.array(partitions, pa.int32())},
        min={c: pa.array(v, SCHEMA.field(c).type) for c, v in mins.items()},
        max={c: pa.array(v, SCHEMA.field(c).type) for c, v in maxs.items()},
        null_count={c: pa.array(v, pa.int64()) for c, v in nulls.items()},
    )


def test_prune_one_partition_of_a_thousand() -> None:
    n = 1000
    ids = pa.array(range(n), pa.int64())
    files = FileStatsColumns(
        num_rows=pa.repeat(pa.scalar(10, pa.int64()), n),
        partition={"p": pc.cast(ids, pa.int32())},
        min={"i": pc.multiply(ids, 10)},
        max={"i": pc.add(pc.multiply(ids, 10), 9)},
        null_count={"i": pa.repeat(pa.scalar(0, pa.int64()), n)},
    )
    for flt, kept in [
        ("p = 7", [7]),
        ([("p", "=", 7)], [7]),
        (pc.field("p") == 7, [7]),
        ("i between 100 and 129", [10, 11, 12]),
        ("p in (1, 999) and i > 5000", [999]),
        ("not (p <> 3)", [3]),
        ("p = 3 or i = 45", [3, 4]),
        ("i is null", []),
        ("i not in (70, 71)", list(range(n))),
    ]:
        pred = parse_filter(flt, SCHEMA)
        assert pred is not None
        mask = prune_mask(pred, files)
        assert mask.type == pa.bool_() and mask.null_count == 0 and len(mask) == n
        assert pc.indices_nonzero(mask).to_pylist() == kept, flt


def test_prune_long_partition_lists() -> None:
    n = 1000
    files = FileStatsColumns(
        num_rows=pa.repeat(pa.scalar(1, pa.int64()), n),
        partition={"p": pa.array([None, *range(1, n)], pa.int32())},
        min={},
        max={},
        null_count={},
    )
    wanted = list(range(0, n, 7))
    expected = [v for v in wanted if v != 0]  # file 0 holds the null partition
    for flt, kept in [
        ([[("p", "=", v)] for v in wanted], expected),
        (" or ".join(f"p = {v}" for v in wanted), expected),
        ("not (" + " and ".join(f"p != {v}" for v in wanted) + ")", expected),
        ("not (p = 7 and p = 14)", list(range(1, n))),
        ("not (p = 7 or p = 14)", [v for v in range(1, n) if v not in (7, 14)]),
        (
            [[("p", "=", v)] for v in wanted] + [[("p", "=", 5), ("i", ">", 1)], [("p", "==", 3)]],
            sorted([*expected, 3, 5]),
        ),
    ]:
        pred = parse_filter(flt, SCHEMA)
        assert pred is not None
        assert pc.indices_nonzero(prune_mask(pred, files)).to_pylist() == kept


def _files_for(column: str, t: pa.DataType, values: list[list[object]]) -> FileStatsColumns:
    tables = [pa.table({column: pa.array(v, t)}) for v in values]

    def bound(fn: str) -> pa.Array:
        out = []
        for tab in tables:
            col = tab.column(column)
            if pa.types.is_floating(t):
                col = pc.filter(col, pc.invert(pc.is_nan(col)))
            mm = pc.min_max(col)
            out.append(mm[fn])
        return pa.array([s.as_py() for s in out], t)

    return FileStatsColumns(
        num_rows=pa.array([tab.num_rows for tab in tables], pa.int64()),
        partition={},
        min={column: bound("min")},
        max={column: bound("max")},
        null_count={column: pa.array([tab.column(column).null_count for tab in tables])},
    )


def test_prune_nan_and_nulls_conservatively() -> None:
    # file 0 holds NaN besides 1.0: its bounds say [1, 1]
    files = _files_for("f", pa.float64(), [[1.0, float("nan")], [1.0], [None, None], [2.0]])
    schema = pa.schema([("f", pa.float64())])
    for text, kept in [
        ("f = 1", [0, 1]),
        ("f != 1", [0, 1, 3]),  # NaN != 1 is true: float files with values stay
        ("not (f < 5)", [0, 1, 3]),  # NOT (NaN < 5) is true
        ("f not in (1)", [0, 1, 3]),
        ("f is null", [2]),
        ("f is not null", [0, 1, 3]),
        ("f > 1", [3]),
    ]:
        pred = parse_filter(text, schema)
        assert pred is not None
        assert pc.indices_nonzero(prune_mask(pred, files)).to_pylist() == kept, text
    is_nan = parse_filter(pc.field("f").is_null(nan_is_null=True), schema)
    assert is_nan is not None and prune_mask(is_nan, files).to_pylist() == [True] * 4
    nan_literal = parse_filter(pc.field("f") == float("nan"), schema)
    assert nan_literal is not None and prune_mask(nan_literal, files).to_pylist()[:2] == [True] * 2


def test_prune_typed_columns() -> None:
    utc = dt.timezone.utc
    cases: list[tuple[pa.DataType, list[list[object]], str, list[int]]] = [
        (
            pa.timestamp("ms", tz="UTC"),
            [[dt.datetime(2026, 1, 1, tzinfo=utc)], [dt.datetime(2026, 6, 1, tzinfo=utc)]],
            "c >= '2026-03-01'",
            [1],
        ),
        (
            pa.timestamp("ns"),
            [[dt.datetime(2026, 1, 1)], [dt.datetime(2026, 6, 1)]],
            "c < '2026-03-01'",
            [0],
        ),
        (
            pa.decimal128(10, 2),
            [[decimal.Decimal("1.50")], [decimal.Decimal("9.99")]],
            "c > 5",
            [1],
        ),
        (pa.bool_(), [[True, True], [False, True]], "c = false", [1]),
        (pa.bool_(), [[True, True], [False, True]], "c != true", [1]),
        (pa.int8(), [[-100, 5], [6, 7]], "c in (6, 100)", [1]),
        (pa.uint32(), [[1, 2], [3, 3], [3, 4]], "c not in (3, 4)", [0, 2]),
        (pa.large_string(), [["apple"], ["melon"]], "c between 'b' and 'z'", [1]),
        (pa.date32(), [[D[0]], [D[1], D[2]]], "c <= '2026-11-01'", [0]),
    ]
    for t, values, text, kept in cases:
        files = _files_for("c", t, values)
        pred = parse_filter(text, pa.schema([("c", t)]))
        assert pred is not None
        assert pc.indices_nonzero(prune_mask(pred, files)).to_pylist() == kept, (t, text)


def test_prune_truncated_strings() -> None:
    # bounds of "abcdef".."abzz": minimum cut to "ab", maximum dropped (too long)
    files = FileStatsColumns(
        num_rows=pa.array([2], pa.int64()),
        partition={},
        min={"s": pa.array(["ab"])},
        max={"s": pa.array([None], pa.string())},
        null_count={"s": pa.array([0], pa.int64())},
    )
    for text, keep in [
        ("s = 'abcdef'", True),
        ("s > 'zz'", True),  # the maximum is unknown
        ("s < 'ab'", False),
        ("s <= 'ab'", True),
        ("s = 'aa'", False),
    ]:
        pred = parse_filter(text, SCHEMA)
        assert pred is not None
        assert prune_mask(pred, files).to_pylist() == [keep], text


def test_prune_unknown_and_missing_columns_keep() -> None:
    files = FileStatsColumns(
        num_rows=pa.array([1, 1], pa.int64()), partition={}, min={}, max={}, null_count={}
    )
    for flt in ("i = 1", "i is null", "i not in (1)", pc.field("i") + 1 > 2, "not (i > 1)"):
        pred = parse_filter(flt, SCHEMA)
        assert pred is not None
        assert prune_mask(pred, files).to_pylist() == [True, True]
    assert prune_mask(Not(Unknown()), files).to_pylist() == [True, True]
    assert prune_mask(Const(False), files).to_pylist() == [False, False]
    assert prune_mask(Compare("i", "=", pa.scalar(None, pa.int64())), files).to_pylist() == [
        False,
        False,
    ]


# every leaf, negated or not, over files with the awkward cases: all null, NaN beside
# values, a string minimum cut and a maximum dropped, unknown stats, empty files
AWKWARD: dict[str, list[list[object]]] = {
    "i": [[], [None], [None, None], [1], [1, 1, None], [0, 2], [-2, 3, None], [2, 2], [3]],
    "f": [[], [None], [math.nan], [math.nan, 1.0], [1.0], [1.0, None, math.nan], [0.0, 2.5]],
    "s": [[], [None], ["abc"], ["ab", "abc"], ["a"], ["it's", None], ["b", "ba"], [""]],
    "d": [[], [None], [D[0]], [D[0], D[2], None], [D[3]]],
}


def _awkward_files(column: str) -> tuple[pa.Table, FileStatsColumns]:
    files, partitions = [], []
    for k, values in enumerate(AWKWARD[column] * 2):  # the second half: stats unknown
        columns = {c: pa.nulls(len(values), SCHEMA.field(c).type) for c in SCHEMA.names}
        columns[column] = pa.array(values, SCHEMA.field(column).type)
        p = [None, 0, 1][k % 3]
        columns["p"] = pa.array([p] * len(values), pa.int32())
        files.append(pa.table(columns, schema=SCHEMA))
        partitions.append(p)
    half = len(AWKWARD[column])
    unknown = {(k, column) for k in range(half, 2 * half)}
    return _rows_table(files), _stats(files, partitions, unknown)


def _awkward_leaves(column: str) -> list[Predicate]:
    t = SCHEMA.field(column).type
    domain = [v for v in DOMAIN.get(column, [None, 0, 1, 2, 3]) if v is not None]
    literals = [pa.scalar(None, t)] + [pa.scalar(v, t) for v in domain]
    out: list[Predicate] = [
        IsNull(column, negated, nan) for negated in (False, True) for nan in (False, True)
    ]
    for op in ("=", "!=", "<", "<=", ">", ">="):
        out += [Compare(column, op, v) for v in literals]  # type: ignore[arg-type]
    lists = [(v,) for v in literals] + [(v, literals[0]) for v in literals[1:]]
    lists.append(tuple(literals[1:4]))
    for values in lists:
        for negated in (False, True):
            for nulls in ("sql", "match", "skip"):
                out.append(In(column, values, negated, nulls))  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("column", ["i", "f", "s", "d", "p"])
def test_every_leaf_keeps_its_matches(column: str) -> None:
    table, stats = _awkward_files("i" if column == "p" else column)
    for leaf in _awkward_leaves(column):
        for pred in (leaf, Not(leaf)):
            matching = set(table.filter(to_expression(pred)).column("_file").to_pylist())
            keep = prune_mask(pred, stats).to_pylist()
            assert all(keep[k] for k in matching), (pred, keep, sorted(matching))


# -- properties ---------------------------------------------------------------------------

INTS = [None, None, -2, 0, 1, 2, 3]
FLOATS = [None, float("nan"), float("nan"), -1.5, 0.0, 1.0, 2.5]
STRINGS = [None, None, "", "a", "ab", "abc", "b", "ba", "it's", "zzz"]
DOMAIN: dict[str, list[object]] = {
    "i": INTS,
    "f": FLOATS,
    "s": STRINGS,
    "d": [None, *D],
    "x.y": INTS,
    "odd name": STRINGS,
}


@st.composite
def file_sets(draw: st.DrawFn) -> tuple[list[pa.Table], FileStatsColumns]:
    files, partitions = [], []
    for _ in range(draw(st.integers(1, 5))):
        n = draw(st.integers(0, 4))
        p = draw(st.sampled_from([None, 0, 1, 2]))
        columns: dict[str, pa.Array] = {"p": pa.array([p] * n, pa.int32())}
        for c in STATS_COLUMNS:
            values = draw(st.lists(st.sampled_from(DOMAIN[c]), min_size=n, max_size=n))
            columns[c] = pa.array(values, SCHEMA.field(c).type)
        files.append(pa.table(columns, schema=SCHEMA))
        partitions.append(p)
    unknown = draw(
        st.sets(st.tuples(st.integers(0, len(files) - 1), st.sampled_from(STATS_COLUMNS)))
    )
    return files, _stats(files, partitions, unknown)


def _literal(draw: st.DrawFn, column: str) -> pa.Scalar:
    """A literal for ``column``, sometimes of another type Arrow compares with it."""
    t = SCHEMA.field(column).type
    if column == "p":
        v = draw(st.sampled_from([None, 0, 1, 2, 3]))
        return pa.scalar(v, draw(st.sampled_from([pa.int32(), pa.int64()])))
    v = draw(st.sampled_from(DOMAIN[column]))
    if pa.types.is_integer(t) and v is not None and draw(st.booleans()):
        return pa.scalar(float(v) + draw(st.sampled_from([0.0, 0.5])), pa.float64())
    if isinstance(v, float) and not math.isnan(v) and v == int(v) and draw(st.booleans()):
        return pa.scalar(int(v), pa.int64())
    return pa.scalar(v, t)


LEAF_COLUMNS = ["p", "p", "i", "f", "f", "f", "s", "s", "d", "x.y", "odd name"]  # weighted
UNKNOWN_PARTS = [
    pc.field("i") + 1 > 2,
    pc.field("i") == pc.field("x.y"),
    pc.field("f") < pc.field("i"),
]


@st.composite
def leaves(draw: st.DrawFn) -> Predicate:
    column = draw(st.sampled_from(LEAF_COLUMNS))
    kind = draw(st.sampled_from(["compare", "compare", "in", "null", "const", "unknown"]))
    if kind == "compare":
        op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">="]))
        return Compare(column, op, _literal(draw, column), draw(st.booleans()))
    if kind == "in":
        domain = [None, 0, 1, 2, 3] if column == "p" else DOMAIN[column]
        values = draw(st.lists(st.sampled_from(domain), min_size=1, max_size=3))
        t = SCHEMA.field(column).type
        return In(
            column,
            tuple(pa.scalar(v, t) for v in values),
            negated=draw(st.booleans()),
            nulls=draw(st.sampled_from(["sql", "match", "skip"])),
        )
    if kind == "null":
        return IsNull(column, negated=draw(st.booleans()), nan_is_null=draw(st.booleans()))
    if kind == "const":
        return Const(draw(st.booleans()))
    return Unknown(draw(st.sampled_from(UNKNOWN_PARTS)))


predicates = st.recursive(
    leaves(),
    lambda inner: st.one_of(
        st.builds(lambda ps: And(tuple(ps)), st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda ps: Or(tuple(ps)), st.lists(inner, min_size=1, max_size=3)),
        st.builds(Not, inner),
    ),
    max_leaves=6,
)

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _nan_listed(pred: Predicate) -> bool:
    if isinstance(pred, In):
        return any(
            v.is_valid and math.isnan(v.as_py()) for v in pred.values if v.type == pa.float64()
        )
    if isinstance(pred, (And, Or)):
        return any(_nan_listed(p) for p in pred.parts)
    return isinstance(pred, Not) and _nan_listed(pred.part)


def _rows_table(files: list[pa.Table]) -> pa.Table:
    table = pa.concat_tables(files)
    file_of = [k for k, f in enumerate(files) for _ in range(f.num_rows)]
    table = table.append_column("_file", pa.array(file_of, pa.int64()))
    return table.append_column("_row", pa.array(range(table.num_rows), pa.int64()))


@PROPERTY
@given(data=file_sets(), pred=predicates)
def test_pruning_keeps_every_file_with_a_match(
    data: tuple[list[pa.Table], FileStatsColumns], pred: Predicate
) -> None:
    files, stats = data
    table = _rows_table(files)
    expr = to_expression(pred)
    matching = set(table.filter(expr).column("_file").to_pylist())
    decoded = parse_filter(expr, SCHEMA)  # the same filter as pyarrow holds it
    assert decoded is not None and to_expression(decoded).equals(expr)
    if not _nan_listed(pred):  # Expression.equals never holds for NaN in an is_in list
        assert _has_unknown(decoded) <= _has_unknown(pred)
    for tree in (pred, decoded):
        keep = prune_mask(tree, stats).to_pylist()
        assert all(keep[k] for k in matching), (tree, keep, sorted(matching))


# SQL strings against Expressions built directly with SQL's meaning

SQL_COLUMNS = {
    "p": "p",
    "i": "i",
    "f": "f",
    "s": "s",
    "d": "d",
    "x.y": "x.y",
    "odd name": '"odd name"',
}


def _sql_literal(draw: st.DrawFn, column: str) -> tuple[str, object]:
    t = SCHEMA.field(column).type
    if pa.types.is_integer(t):
        text = draw(st.sampled_from(["0", "1", "-2", "3", "2.5", "1e0", "-0.5"]))
        return text, (int(text) if text.lstrip("-").isdigit() else float(text))
    if pa.types.is_floating(t):
        text = draw(st.sampled_from(["0", "1", "-1.5", "2.5", "1.0e0", ".5", "25E-1"]))
        return text, float(text)
    if pa.types.is_date(t):
        d = draw(st.sampled_from(D))
        return f"'{d.isoformat()}'", d
    s = draw(st.sampled_from([v for v in STRINGS if v is not None]))
    return "'" + s.replace("'", "''") + "'", s


def _kw(draw: st.DrawFn, word: str) -> str:
    return draw(st.sampled_from([word, word.upper(), word.capitalize()]))


@st.composite
def sql_leaves(draw: st.DrawFn) -> tuple[str, pc.Expression]:
    text, expr = draw(sql_conditions())
    if draw(st.booleans()):  # NOT binds looser than a comparison, BETWEEN or IN
        return f"{_kw(draw, 'not')} {text}", ~expr
    return text, expr


@st.composite
def sql_conditions(draw: st.DrawFn) -> tuple[str, pc.Expression]:
    column = draw(st.sampled_from(list(SQL_COLUMNS)))
    name, f = SQL_COLUMNS[column], pc.field(column)
    kind = draw(st.sampled_from(["cmp", "cmp", "between", "in", "null", "const"]))
    if kind == "cmp":
        op = draw(st.sampled_from(["=", "==", "!=", "<>", "<", "<=", ">", ">="]))
        text, value = _sql_literal(draw, column)
        fn = {"=": pc.equal, "==": pc.equal, "!=": pc.not_equal, "<>": pc.not_equal}.get(op)
        fn = fn or {"<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}[op]
        if draw(st.booleans()):
            return f"{name} {op} {text}", fn(f, pc.scalar(value))
        flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
        return f"{text} {flipped} {name}", fn(f, pc.scalar(value))
    if kind == "between":
        (lo_text, lo), (hi_text, hi) = _sql_literal(draw, column), _sql_literal(draw, column)
        inside = (f >= pc.scalar(lo)) & (f <= pc.scalar(hi))
        if draw(st.booleans()):
            return (
                f"{name} {_kw(draw, 'not')} {_kw(draw, 'between')} {lo_text} and {hi_text}",
                ~inside,
            )
        return f"{name} {_kw(draw, 'between')} {lo_text} {_kw(draw, 'and')} {hi_text}", inside
    if kind == "in":
        items = [_sql_literal(draw, column) for _ in range(draw(st.integers(1, 3)))]
        listed = ", ".join(text for text, _ in items)
        if draw(st.booleans()):  # SQL: a null row is neither in nor out of the list
            out = f != pc.scalar(items[0][1])
            for _, v in items[1:]:
                out = out & (f != pc.scalar(v))
            return f"{name} {_kw(draw, 'not')} {_kw(draw, 'in')} ({listed})", out
        out = f == pc.scalar(items[0][1])
        for _, v in items[1:]:
            out = out | (f == pc.scalar(v))
        return f"{name} {_kw(draw, 'in')} ({listed})", out
    if kind == "null":
        if draw(st.booleans()):
            return f"{name} {_kw(draw, 'is')} {_kw(draw, 'not')} {_kw(draw, 'null')}", f.is_valid()
        return f"{name} {_kw(draw, 'is')} {_kw(draw, 'null')}", f.is_null()
    value = draw(st.booleans())
    return _kw(draw, str(value).lower()), pc.scalar(value)


sql_predicates = st.recursive(
    sql_leaves(),
    lambda inner: st.one_of(
        st.tuples(inner, inner, st.sampled_from(["and", "OR"])).map(
            lambda t: (
                f"({t[0][0]}) {t[2]} ({t[1][0]})",
                (t[0][1] & t[1][1]) if t[2] == "and" else (t[0][1] | t[1][1]),
            )
        ),
        inner.map(lambda t: (f"not ({t[0]})", ~t[1])),
    ),
    max_leaves=5,
)


@PROPERTY
@given(data=file_sets(), sql=sql_predicates)
def test_sql_strings_select_what_the_expression_selects(
    data: tuple[list[pa.Table], FileStatsColumns], sql: tuple[str, pc.Expression]
) -> None:
    files, stats = data
    text, direct = sql
    table = _rows_table(files)
    pred = parse_filter(text, SCHEMA)
    assert pred is not None
    assert rows(table, to_expression(pred)) == rows(table, direct), text
    keep = prune_mask(pred, stats).to_pylist()
    assert all(keep[k] for k in table.filter(direct).column("_file").to_pylist()), text
