"""A table's rules on every embedded write path (docs/constraints.md): NOT NULL at any
depth, CHECK constraints, generated and identity columns; refusals are one-line typed
errors naming the rule, the column and a row, and leave nothing behind."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lakelog
from lakelog import CommitConflictError, ConstraintViolationError, InvalidArgumentError
from lakelog.errors import UnsupportedFormatError
from lakelog.log import format as fmt

UTC = dt.timezone.utc
TS = dt.datetime(2026, 1, 2, 23, 30, tzinfo=UTC)
SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("amount", pa.float64()),
        ("currency", pa.string()),
    ]
)


def _rows(k: list[int], amount: list[float | None], currency: str = "EUR") -> pa.Table:
    return pa.table(
        {"k": k, "amount": amount, "currency": [currency] * len(k)},
        schema=SCHEMA,
    )


def _checked(tmp_path: Path, **kw: Any) -> lakelog.Table:
    return lakelog.create_table(
        str(tmp_path / "t"),
        kw.pop("schema", SCHEMA),
        constraints=kw.pop(
            "constraints",
            {"positive": "amount > 0", "known_currency": "currency IN ('EUR', 'USD')"},
        ),
        **kw,
    )


def _left_alone(t: lakelog.Table, version: int) -> None:
    """Nothing committed since ``version`` and no data file outside the table."""
    t.refresh()
    assert t.version == version
    root = Path(t.uri.removeprefix("file://"))
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*.parquet")}
    on_disk = {p for p in on_disk if not p.startswith("_")}
    assert on_disk == set(t.snapshot().paths())


def _refused(fn: Any, *match: str) -> ConstraintViolationError:
    with pytest.raises(ConstraintViolationError) as info:
        fn()
    text = str(info.value)
    assert "\n" not in text
    for m in match:
        assert m in text, text
    return info.value


# -- format version --------------------------------------------------------------------


def test_a_table_with_rules_declares_version_9_which_older_readers_refuse(
    tmp_path: Path,
) -> None:
    plain = lakelog.create_table(str(tmp_path / "plain"), SCHEMA)
    assert plain.metadata.format_version < fmt.CONSTRAINTS.version
    t = _checked(tmp_path)
    assert t.metadata.format_version == fmt.CONSTRAINTS.version == 9
    with pytest.raises(UnsupportedFormatError, match="<= 8, found 9"):
        fmt.check_readable(t.metadata.format_version, what="table", reader_version=8)
    # adding the first constraint to an older table moves it to 9
    plain.add_constraint("positive", "amount > 0")
    assert plain.refresh().metadata.format_version == 9


# -- CHECK constraints on every write path ---------------------------------------------


def test_append_and_overwrite_refuse_a_violating_batch_and_write_nothing(tmp_path: Path) -> None:
    t = _checked(tmp_path)
    t.append(_rows([1, 2], [1.0, None]))  # null passes a CHECK, as in SQL
    v = t.version
    e = _refused(
        lambda: t.append(_rows([3, 4], [5.0, -2.0])), "'positive'", "'amount': -2.0", "Nothing"
    )
    assert (e.constraint, e.column) == ("positive", "amount")
    assert "-2.0" in e.row
    _refused(lambda: t.overwrite(_rows([3], [1.0], "GBP")), "'known_currency'", "'GBP'")
    _left_alone(t, v)
    assert t.snapshot().to_arrow().num_rows == 2


def test_update_and_merge_refuse_violating_new_rows(tmp_path: Path) -> None:
    t = _checked(tmp_path)
    t.append(_rows([1, 2], [1.0, 2.0]))
    v = t.version
    _refused(lambda: t.update("k = 1", set={"amount": -1.0}), "'positive'")
    _refused(lambda: t.update("k = 1", set={"amount": pc.field("amount") - 5}), "-4.0")
    _refused(lambda: t.merge(_rows([1], [-3.0]), on="k"), "'positive'")  # updated row
    _refused(lambda: t.merge(_rows([9], [-3.0]), on="k"), "'k': 9")  # inserted row
    _left_alone(t, v)
    t.merge(_rows([1, 9], [3.0, 9.0]), on="k")
    assert sorted(t.snapshot().to_arrow()["amount"].to_pylist()) == [2.0, 3.0, 9.0]


def test_add_files_refuses_files_whose_rows_break_a_rule(tmp_path: Path) -> None:
    t = _checked(tmp_path)
    pq.write_table(_rows([5], [-1.0]), Path(t.uri) / "outside.parquet")
    v = t.version
    _refused(lambda: t.add_files(["outside.parquet"]), "'positive'", "outside.parquet")
    assert t.refresh().version == v
    pq.write_table(_rows([5], [1.0]), Path(t.uri) / "fine.parquet")
    t.add_files(["fine.parquet"])
    assert t.snapshot().to_arrow().num_rows == 1


def test_add_constraint_checks_existing_rows_first(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    for i in range(3):  # three files: the check reads them one by one
        t.append(_rows([i], [float(i)]))
    v = t.version
    e = _refused(lambda: t.add_constraint("positive", "amount > 0"), "'amount': 0.0")
    assert e.constraint == "positive"
    assert t.refresh().version == v and t.constraints == {}
    t.add_constraint("non_negative", pc.field("amount") >= 0)  # a pyarrow Expression
    assert t.constraints == {"non_negative": "amount >= 0"}
    _refused(lambda: t.append(_rows([9], [-1.0])), "'non_negative'")
    t.drop_constraint("NON_NEGATIVE")  # names are case-insensitive
    t.append(_rows([9], [-1.0]))
    assert t.constraints == {}


@pytest.mark.parametrize(
    ("name", "expr", "message"),
    [
        ("c", "amout > 0", "found 'amout' (did you mean 'amount'?)"),
        ("c", "amount >", "expected a column, literal"),
        ("c", "amount + 1", "to be true or false"),
        ("c", "amount > 'x'", "to compute over the table's columns"),
        ("c", "nope(amount)", "expected a function of"),
        ("bad name", "amount > 0", "expected a constraint name"),
        ("positive", "amount > 1", "already on the table"),
    ],
)
def test_bad_constraints_are_one_line_errors_and_commit_nothing(
    tmp_path: Path, name: str, expr: str, message: str
) -> None:
    t = _checked(tmp_path)
    v = t.version
    with pytest.raises(InvalidArgumentError) as info:
        t.add_constraint(name, expr)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert t.refresh().version == v


def test_dropping_an_unknown_constraint_is_refused_unless_missing_ok(tmp_path: Path) -> None:
    t = _checked(tmp_path)
    with pytest.raises(InvalidArgumentError, match="expected a constraint of the table"):
        t.drop_constraint("nope")
    assert t.drop_constraint("nope", missing_ok=True).skipped


def test_a_writer_that_read_the_table_before_a_constraint_cannot_land_a_violating_row(
    tmp_path: Path,
) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(_rows([1], [1.0]))
    stale = lakelog.open_table(t.uri)  # reads version 1
    t.add_constraint("positive", "amount > 0")
    # the stale handle writes without the rule, then loses the race to the rule's commit
    with pytest.raises((CommitConflictError, ConstraintViolationError)):
        stale.append(_rows([2], [-1.0]))
    assert pc.min(t.snapshot().to_arrow()["amount"]).as_py() > 0


# -- NOT NULL ----------------------------------------------------------------------------

NESTED = pa.schema(
    [
        ("k", pa.int64()),
        pa.field("s", pa.struct([pa.field("x", pa.string(), nullable=False), ("y", pa.int64())])),
        pa.field("tags", pa.list_(pa.field("item", pa.string(), nullable=False))),
    ]
)


def test_not_null_holds_at_any_depth(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), NESTED)
    assert t.metadata.format_version == 9
    ok = pa.table({"k": [1, 2], "s": [{"x": "a", "y": None}, None], "tags": [["a"], None]})
    t.append(ok.cast(NESTED))  # a null struct holds no field; a null list no element
    v = t.version
    bad_field = pa.table(
        {"k": [3], "s": [{"x": None, "y": 1}], "tags": [[]]},
        schema=pa.schema(
            [
                ("k", pa.int64()),
                ("s", pa.struct([("x", pa.string()), ("y", pa.int64())])),
                ("tags", pa.list_(pa.string())),
            ]
        ),
    )
    e = _refused(lambda: t.append(bad_field), "'s.x'", "NOT NULL")
    assert (e.constraint, e.column) == ("NOT NULL", "s.x")
    bad_item = pa.table(
        {"k": [3, 4], "s": [{"x": "a", "y": 1}] * 2, "tags": [["a"], ["b", None]]},
        schema=bad_field.schema,
    )
    e = _refused(lambda: t.append(bad_item), "'tags[]'", "'k': 4")
    _left_alone(t, v)


def test_set_not_null_checks_existing_rows_then_refuses_nulls(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(_rows([1, 2], [1.0, None]))
    v = t.version
    _refused(lambda: t.set_not_null("amount"), "'amount'", "e.g. row {'amount': None}")
    assert t.refresh().version == v
    t.set_not_null("currency")
    assert not t.refresh().schema.field("currency").nullable
    _refused(
        lambda: t.append(pa.table({"k": [3], "amount": [1.0], "currency": [None]}, schema=SCHEMA)),
        "'currency'",
    )
    with pytest.raises(InvalidArgumentError, match="expected a column of the table"):
        t.set_not_null("nope")


def test_set_not_null_on_a_nested_field(tmp_path: Path) -> None:
    schema = pa.schema([("k", pa.int64()), ("s", pa.struct([("x", pa.string())]))])
    t = lakelog.create_table(str(tmp_path / "t"), schema)
    t.append(pa.table({"k": [1], "s": [{"x": "a"}]}, schema=schema))
    t.set_not_null("s.x")
    _refused(lambda: t.append(pa.table({"k": [2], "s": [{"x": None}]}, schema=schema)), "'s.x'")


# -- generated columns -----------------------------------------------------------------

EVENTS = pa.schema(
    [("ts", pa.timestamp("us", tz="UTC")), ("amount", pa.float64()), ("day", pa.date32())]
)


def test_a_generated_column_is_computed_when_absent_and_checked_when_given(
    tmp_path: Path,
) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), EVENTS, generated={"day": "CAST(ts AS DATE)"})
    t.append(pa.table({"ts": [TS], "amount": [1.0]}))
    t.append(pa.table({"ts": [TS], "amount": [2.0], "day": [dt.date(2026, 1, 2)]}))
    assert t.snapshot().to_arrow()["day"].to_pylist() == [dt.date(2026, 1, 2)] * 2
    v = t.version
    e = _refused(
        lambda: t.append(pa.table({"ts": [TS], "amount": [3.0], "day": [dt.date(2020, 1, 1)]})),
        "'day'",
        "CAST(ts AS DATE)",
    )
    assert e.constraint == "GENERATED"
    _left_alone(t, v)
    assert t.schema.field("day").metadata[b"lakelog.generation_expression"] == b"CAST(ts AS DATE)"


def test_bad_generated_columns_are_refused_at_creation(tmp_path: Path) -> None:
    for generated, message in [
        ({"day": "CAST(tss AS DATE)"}, "did you mean 'ts'"),
        ({"nope": "1"}, "expected generated= to name columns"),
        ({"day": "amount * 2"}, "to give date32"),
    ]:
        with pytest.raises(InvalidArgumentError, match=message):
            lakelog.create_table(str(tmp_path / "t"), EVENTS, generated=generated)
        assert not (tmp_path / "t").exists()


# -- identity columns ------------------------------------------------------------------

IDS = pa.schema([("id", pa.int64()), ("v", pa.string())])


def test_identity_always_numbers_rows_and_refuses_given_values(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), IDS, identity={"id": {"start": 100, "step": 10}})
    t.append(pa.table({"v": ["a", "b"]}))
    t.append(pa.table({"v": ["c"]}))
    got = t.snapshot().to_arrow().sort_by("id")
    assert got["id"].to_pylist() == [100, 110, 120]
    v = t.version
    e = _refused(lambda: t.append(pa.table({"id": [5], "v": ["x"]})), "GENERATED ALWAYS")
    assert e.constraint == "IDENTITY"
    _left_alone(t, v)


def test_identity_by_default_keeps_given_values(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), IDS, identity={"id": {"always": False}})
    t.append(pa.table({"id": [1000], "v": ["given"]}))
    t.append(pa.table({"v": ["generated"]}))
    assert sorted(t.snapshot().to_arrow()["id"].to_pylist()) == [1, 1000]


def test_a_stale_writer_moves_its_identity_values_past_the_winners(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), IDS, identity={"id": {}})
    stale = lakelog.open_table(t.uri)  # its snapshot has no mark yet
    t.append(pa.table({"v": ["a", "b", "c"]}))  # gives out 1..3
    r = stale.append(pa.table({"v": ["x", "y"]}))  # wrote 1..2, lost the race: 4..5
    assert r.attempts == 2
    rows = t.snapshot().to_arrow().sort_by("id")
    assert rows["id"].to_pylist() == [1, 2, 3, 4, 5]
    assert rows["v"].to_pylist() == ["a", "b", "c", "x", "y"]
    _left_alone(t, t.refresh().version)  # the first files of the stale write are gone


def test_a_check_on_an_identity_column_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="read no identity or generated column"):
        lakelog.create_table(
            str(tmp_path / "t"), IDS, identity={"id": {}}, constraints={"c": "id > 0"}
        )
    with pytest.raises(InvalidArgumentError, match="expected an integer column"):
        lakelog.create_table(str(tmp_path / "t"), IDS, identity={"v": {}})


def test_update_and_merge_refuse_values_for_an_always_identity_column(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), IDS, identity={"id": {}})
    t.append(pa.table({"v": ["a"]}))
    v = t.version
    _refused(lambda: t.update("v = 'a'", set={"id": 7}), "GENERATED ALWAYS", "set=")
    _refused(lambda: t.merge(pa.table({"id": [1], "v": ["b"]}), on="id"), "merge's source")
    assert t.refresh().version == v


def test_a_batch_cannot_skip_the_generated_check_by_its_own_metadata(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), EVENTS, generated={"day": "CAST(ts AS DATE)"})
    wrong = pa.table({"ts": [TS], "amount": [1.0], "day": [dt.date(2020, 1, 1)]}, schema=EVENTS)
    wrong = wrong.replace_schema_metadata({"lakelog.computed_columns": "day"})
    _refused(lambda: t.append(wrong), "'day'")
