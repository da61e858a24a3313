"""Statements -> plans, without a catalog or an engine (lakelog.sql.parser is pure)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lakelog.errors import SqlSyntaxError, UnsupportedStatementError
from lakelog.sql import parse
from lakelog.sql import plan as p
from lakelog.sql.values import set_value


def test_create_table_with_partitions_and_properties() -> None:
    plan = parse(
        "CREATE TABLE IF NOT EXISTS Sales.Orders (id BIGINT NOT NULL, day STRING, "
        "amount DECIMAL(10, 2), at TIMESTAMP) USING lakelog PARTITIONED BY (day) "
        "TBLPROPERTIES ('lakelog.change_data_feed' = 'true')"
    )
    assert plan == p.CreateTable(
        "sales.orders",
        pa.schema(
            [
                pa.field("id", pa.int64(), nullable=False),
                ("day", pa.string()),
                ("amount", pa.decimal128(10, 2)),
                ("at", pa.timestamp("us", tz="UTC")),
            ]
        ),
        ("day",),
        (("lakelog.change_data_feed", "true"),),
        True,
    )


def test_register_ctas_drop_rename_namespaces() -> None:
    assert parse("CREATE TABLE a.t USING lakelog LOCATION '/data/t'") == p.CreateTable(
        "a.t", location="/data/t"
    )
    ctas = parse("CREATE TABLE a.t USING lakelog PARTITIONED BY (d) AS SELECT * FROM a.s")
    assert isinstance(ctas, p.CreateTable) and ctas.query is not None
    assert ctas.query.tables == (p.TableRef("a.s"),) and ctas.partition_by == ("d",)
    assert parse("DROP TABLE IF EXISTS a.t") == p.DropTable("a.t", if_exists=True)
    assert parse("DROP TABLE a.t PURGE") == p.DropTable("a.t", purge=True)
    assert parse("ALTER TABLE a.t RENAME TO b.u") == p.RenameTable("a.t", "b.u")
    assert parse("CREATE NAMESPACE IF NOT EXISTS a") == p.CreateNamespace("a", True)
    assert parse("CREATE SCHEMA a") == p.CreateNamespace("a")
    assert parse("CREATE DATABASE a") == p.CreateNamespace("a")
    assert parse("DROP DATABASE IF EXISTS a CASCADE") == p.DropNamespace("a", True, True)
    assert parse("SHOW TABLES IN a") == p.ShowTables("a")
    assert parse("SHOW TABLES") == p.ShowTables(None)
    assert parse("SHOW NAMESPACES") == p.ShowNamespaces()


def test_delta_statements_sqlglot_keeps_as_commands() -> None:
    assert parse("DESCRIBE HISTORY a.t LIMIT 2") == p.DescribeHistory("a.t", 2)
    assert parse("DESCRIBE DETAIL a.t") == p.DescribeDetail("a.t")
    assert parse("OPTIMIZE a.t WHERE day >= '2026-01-01' ZORDER BY (x, y)") == p.Optimize(
        "a.t", "day >= '2026-01-01'", ("x", "y")
    )
    assert parse("OPTIMIZE a.t") == p.Optimize("a.t")
    assert parse("VACUUM a.t RETAIN 168 HOURS DRY RUN") == p.Vacuum("a.t", 168.0, True)
    assert parse("VACUUM a.t") == p.Vacuum("a.t")
    assert parse("RESTORE TABLE a.t TO VERSION AS OF 3") == p.Restore("a.t", version=3)
    assert parse("RESTORE a.t TO TIMESTAMP AS OF '2026-11-02'") == p.Restore(
        "a.t", timestamp="2026-11-02"
    )
    assert parse("ALTER TABLE a.t UNSET TBLPROPERTIES IF EXISTS ('k')") == p.UnsetProperties(
        "a.t", ("k",), True
    )


def test_alter_table_columns_and_properties() -> None:
    assert parse("ALTER TABLE a.t ADD COLUMNS (c INT, d STRING)") == p.AddColumns(
        "a.t", pa.schema([("c", pa.int32()), ("d", pa.string())])
    )
    assert parse("ALTER TABLE a.t RENAME COLUMN c TO e") == p.RenameColumn("a.t", "c", "e")
    assert parse("ALTER TABLE a.t DROP COLUMN c") == p.DropColumns("a.t", ("c",))
    assert parse("ALTER TABLE a.t SET TBLPROPERTIES ('k' = 'v')") == p.SetProperties(
        "a.t", (("k", "v"),)
    )


def test_select_time_travel_references_and_rewrite() -> None:
    plan = parse(
        "WITH recent AS (SELECT * FROM a.t VERSION AS OF 3) "
        "SELECT r.id, u.name FROM recent r JOIN a.u TIMESTAMP AS OF '2026-11-02' AS u "
        "ON r.id = u.id WHERE r.id IN (SELECT id FROM spark_db.ids)"
    )
    assert isinstance(plan, p.Select)
    assert set(plan.query.tables) == {
        p.TableRef("a.t", version=3),
        p.TableRef("a.u", timestamp="2026-11-02"),
        p.TableRef("spark_db.ids"),
    }
    views = {p.TableRef("a.t", version=3): "v1", p.TableRef("a.u", timestamp="2026-11-02"): "v2"}
    text = plan.query.rewrite(views)
    assert "v1 AS `t`" in text and "v2 AS `u`" in text and "spark_db.ids" in text
    assert "VERSION AS OF" not in text


def test_table_changes_is_a_reference() -> None:
    plan = parse("SELECT * FROM table_changes('A.T', 1, 3)")
    assert isinstance(plan, p.Select)
    assert plan.query.changes == (p.ChangesRef("a.t", 1, 3),)


def test_insert_modes() -> None:
    ins = parse("INSERT INTO a.t VALUES (1, 'x')")
    assert isinstance(ins, p.Insert) and ins.mode == "append" and ins.columns is None
    over = parse("INSERT OVERWRITE a.t SELECT * FROM a.s")
    assert isinstance(over, p.Insert) and over.mode == "overwrite"
    rw = parse("INSERT INTO a.t REPLACE WHERE day = 'mon' SELECT * FROM a.s")
    assert isinstance(rw, p.Insert) and (rw.mode, rw.where) == ("replace_where", "day = 'mon'")
    cols = parse("INSERT INTO a.t (id) VALUES (1)")
    assert isinstance(cols, p.Insert) and cols.columns == ("id",)


def test_delete_and_update_values() -> None:
    assert parse("DELETE FROM a.t WHERE id > 3") == p.Delete("a.t", "id > 3")
    assert parse("DELETE FROM a.t") == p.Delete("a.t", None)
    up = parse("UPDATE a.t SET amount = amount * 2 + 1, note = 'x' WHERE id = 1")
    assert isinstance(up, p.Update) and up.where == "id = 1"
    values = dict((c, set_value(v, "SET")) for c, v in up.set)
    assert values["note"] == "x"
    got = pa.table({"amount": [1, 5]}).to_batches()[0]
    import pyarrow.dataset as ds

    out = ds.dataset(pa.Table.from_batches([got])).to_table(columns={"v": values["amount"]})
    assert out["v"].to_pylist() == [3, 11]


def test_merge_clauses() -> None:
    m = parse(
        "MERGE INTO a.t AS t USING (SELECT * FROM a.s VERSION AS OF 2) AS s ON t.id = s.id "
        "AND t.day = s.day WHEN MATCHED THEN UPDATE SET amount = t.amount + s.amount "
        "WHEN NOT MATCHED THEN INSERT * WHEN NOT MATCHED BY SOURCE THEN DELETE"
    )
    assert isinstance(m, p.Merge)
    assert m.keys == ("id", "day") and m.source.tables == (p.TableRef("a.s", version=2),)
    (update,), (insert,), (delete,) = m.matched, m.not_matched, m.by_source
    assert (update.action, update.values, update.condition) == (
        "update",
        {"amount": "`amount` + `source`.`amount`"},
        None,
    )
    assert (insert.action, insert.values, delete.action) == ("insert", None, "delete")
    cond = parse(
        "MERGE INTO a.t USING a.s ON t.id = s.id WHEN MATCHED AND s.x > t.x OR t.y IS NULL "
        "THEN DELETE"
    )
    assert isinstance(cond, p.Merge)
    assert cond.matched[0].condition == "`source`.`x` > `x` OR `y` IS NULL"
    simple = parse("MERGE INTO a.t USING a.s ON t.id = s.id WHEN MATCHED THEN DELETE")
    assert isinstance(simple, p.Merge)
    assert [c.action for c in simple.matched] == ["delete"] and not simple.not_matched


def test_merge_maps_every_clause_in_order() -> None:
    m = parse(
        "MERGE INTO a.t t USING a.s s ON t.id = s.id "
        "WHEN MATCHED AND s.op = 'd' THEN DELETE "
        "WHEN MATCHED AND s.v > t.v THEN UPDATE SET v = s.v, n = t.n + 1 "
        "WHEN MATCHED THEN UPDATE SET * "
        "WHEN NOT MATCHED AND op <> 'd' THEN INSERT (id, v) VALUES (s.id, v * 2) "
        "WHEN NOT MATCHED BY TARGET THEN INSERT * "
        "WHEN NOT MATCHED BY SOURCE AND t.v < 0 THEN UPDATE SET v = 0 "
        "WHEN NOT MATCHED BY SOURCE THEN DELETE"
    )
    assert isinstance(m, p.Merge)
    got = [(c.when, c.action, c.condition, c.values) for c in m.clauses()]
    assert got == [
        ("matched", "delete", "`source`.`op` = 'd'", None),
        ("matched", "update", "`source`.`v` > `v`", {"v": "`source`.`v`", "n": "`n` + 1"}),
        ("matched", "update", None, None),
        (
            "not_matched",
            "insert",
            "`source`.`op` <> 'd'",
            {"id": "`source`.`id`", "v": "`source`.`v` * 2"},
        ),
        ("not_matched", "insert", None, None),
        ("not_matched_by_source", "update", "`v` < 0", {"v": "0"}),
        ("not_matched_by_source", "delete", None, None),
    ]


@pytest.mark.parametrize(
    ("statement", "clause"),
    [
        (
            "MERGE INTO a.t USING a.s ON t.id = s.id WHEN NOT MATCHED BY SOURCE THEN UPDATE SET *",
            "WHEN NOT MATCHED BY SOURCE THEN UPDATE SET *",
        ),
        ("MERGE INTO a.t USING a.s ON t.id < s.id WHEN MATCHED THEN DELETE", "t.id < s.id"),
        ("CREATE TABLE a.t (x INT) USING parquet", "USING parquet"),
        ("CREATE TABLE a.t (x ARRAY<INT>) USING lakelog", "ARRAY<INT>"),
        ("UPDATE a.t SET x = upper(y)", "UPPER(y)"),
        ("CREATE OR REPLACE TABLE a.t (x INT) USING lakelog", "CREATE OR REPLACE"),
    ],
)
def test_unsupported_clauses_are_named(statement: str, clause: str) -> None:
    with pytest.raises(UnsupportedStatementError) as e:
        plan = parse(statement)
        if isinstance(plan, p.Update):
            for _, v in plan.set:
                set_value(v, "UPDATE ... SET")
    assert clause in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "statement",
    [
        "SELEC * FRM a.t",
        "SELECT * FROM (",
        "SELECT 1; SELECT 2",
        "VACUUM a.t RETAIN many HOURS",
        "DESCRIBE HISTORY t",
        "OPTIMIZE a.t WHERE ZORDER BY (x)",
        "RESTORE a.t TO VERSION AS OF 'x'",
        "",
    ],
)
def test_syntax_errors_are_one_line(statement: str) -> None:
    with pytest.raises(SqlSyntaxError) as e:
        parse(statement)
    assert str(e.value).startswith("expected") and "\n" not in str(e.value)


_ident = st.sampled_from(["id", "day", "amount", "k2"])


@settings(max_examples=40, deadline=None)
@given(
    keys=st.lists(_ident, min_size=1, max_size=3, unique=True),
    matched=st.sampled_from(["", "UPDATE SET *", "DELETE", "UPDATE SET amount = s.amount"]),
    insert=st.booleans(),
    by_source=st.booleans(),
    alias=st.sampled_from(["t", "tgt"]),
)
def test_generated_merges_map_clause_by_clause(
    keys: list[str], matched: str, insert: bool, by_source: bool, alias: str
) -> None:
    on = " AND ".join(f"{alias}.{k} = s.{k}" for k in keys)
    clauses = []
    if matched:
        clauses.append(f"WHEN MATCHED THEN {matched}")
    if insert:
        clauses.append("WHEN NOT MATCHED THEN INSERT *")
    if by_source:
        clauses.append("WHEN NOT MATCHED BY SOURCE THEN DELETE")
    assume(clauses)  # MERGE needs a clause: without one it is a syntax error
    statement = f"MERGE INTO a.t {alias} USING (SELECT * FROM b.src) s ON {on} {' '.join(clauses)}"
    m = parse(statement)
    assert isinstance(m, p.Merge)
    assert m.keys == tuple(keys)
    expected = {"": None, "UPDATE SET *": ("update", None), "DELETE": ("delete", None)}.get(
        matched, ("update", {"amount": "`source`.`amount`"})
    )
    assert [(c.action, c.values) for c in m.matched] == ([expected] if expected else [])
    assert [c.action for c in m.not_matched] == (["insert"] if insert else [])
    assert [c.action for c in m.by_source] == (["delete"] if by_source else [])
    assert m.source.tables == (p.TableRef("b.src"),)


_refs = st.lists(
    st.tuples(
        st.sampled_from(["a.t", "a.u", "b.v"]),
        st.one_of(st.none(), st.integers(0, 50)),
        st.sampled_from(["", "x", "y", "z"]),
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=40, deadline=None)
@given(refs=_refs, cte=st.booleans())
def test_generated_selects_rewrite_every_resolved_reference(
    refs: list[tuple[str, int | None, str]], cte: bool
) -> None:
    parts = []
    for i, (name, version, alias) in enumerate(refs):
        travel = f" VERSION AS OF {version}" if version is not None else ""
        parts.append(f"{name}{travel} {alias or f'r{i}'}")
    body = "SELECT 1 AS one FROM " + " CROSS JOIN ".join(parts)
    statement = f"WITH c AS ({body}) SELECT * FROM c" if cte else body
    plan = parse(statement)
    assert isinstance(plan, p.Select)
    wanted = {p.TableRef(n, version=v) for n, v, _ in refs}
    assert set(plan.query.tables) == wanted
    views = {ref: f"view_{i}" for i, ref in enumerate(sorted(wanted, key=str)) if ref.name != "b.v"}
    text = plan.query.rewrite(views)
    again = parse(text)  # the rewritten statement is valid Spark SQL
    assert isinstance(again, p.Select)
    left = {r.name for r in again.query.tables}
    assert left == ({"b.v"} if any(n == "b.v" for n, _, _ in refs) else set())
    assert all(v in text for v in views.values())
