"""Bad SQL without Spark: each case is one line naming what to fix, in a SQL user's words
(the clause, never a Python argument), a typed ``LakelogError`` from
``lakelog.sql.execute`` and the same line from ``lakelog sql`` (exit code 1, no
traceback), with nothing written: the table, the catalog's names and the warehouse stay
as they were."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _services import find_free_port

import lakelog
from lakelog.cli import main
from lakelog.errors import (
    CatalogUnavailableError,
    NamespaceExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    SchemaMismatchError,
    SqlError,
    SqlSyntaxError,
    TableAlreadyExistsError,
    TableLocationEmptyError,
    UnsupportedStatementError,
)
from lakelog.sql import execute

CASES: list[tuple[str, type[Exception], str]] = [
    # unknown names
    ("SELECT * FROM sales.ordrs", NoSuchTableError, "'sales.ordrs'; close names: sales.orders"),
    ("SELECT * FROM sals.orders", NoSuchNamespaceError, "'sals'; close names: sales"),
    (
        "SELECT o.id FROM sales.orders o JOIN sals.x y ON o.id = y.id",
        NoSuchNamespaceError,
        "CREATE NAMESPACE sals",
    ),
    ("INSERT INTO sals.orders VALUES (1, 1.0)", NoSuchNamespaceError, "'sals'"),
    ("SHOW TABLES IN sals", NoSuchNamespaceError, "close names: sales"),
    ("SELECT amout FROM sales.orders", SqlError, "amout"),
    (
        "INSERT INTO sales.orders REPLACE WHERE amout > 1 SELECT 1, 1.0",
        SqlError,
        "REPLACE WHERE, found 'amout'; close names: amount",
    ),
    ("ALTER TABLE sales.orders RENAME COLUMN amout TO x", SqlError, "RENAME COLUMN, found 'amout'"),
    # syntax
    ("SELEC * FRM sales.orders", SqlSyntaxError, "expected Spark SQL"),
    ("DELETE FROM sales.orders WHERE", SqlSyntaxError, "line 1"),
    ("VACUUM sales.orders RETAIN x HOURS", SqlSyntaxError, "expected a number in VACUUM"),
    ("SELECT 1; SELECT 2", SqlSyntaxError, "run them one by one"),
    # clauses lakelog does not run
    ("GRANT SELECT ON sales.orders TO bob", UnsupportedStatementError, "GRANT"),
    (
        "CREATE OR REPLACE TABLE sales.orders (a INT) USING lakelog",
        UnsupportedStatementError,
        "OR REPLACE",
    ),
    ("CREATE TABLE sales.p (a INT) USING delta", UnsupportedStatementError, "USING lakelog"),
    (
        "ALTER TABLE sales.orders ALTER COLUMN id DROP NOT NULL",
        UnsupportedStatementError,
        "DROP NOT NULL",
    ),
    ("ALTER TABLE sales.orders ALTER COLUMN s.x TYPE BIGINT", UnsupportedStatementError, "s.x"),
    ("UPDATE sales.orders SET amount = sqrt(amount)", UnsupportedStatementError, "SQRT(amount)"),
    # clauses Delta has that lakelog would otherwise drop silently
    (
        "CREATE TABLE sales.p (a INT COMMENT 'x') USING lakelog",
        UnsupportedStatementError,
        "COMMENT",
    ),
    (
        "CREATE TABLE sales.p (a INT DEFAULT 1) USING lakelog",
        UnsupportedStatementError,
        "DEFAULT 1",
    ),
    (
        "CREATE TABLE sales.p (a INT COMMENT 'x') USING lakelog",
        UnsupportedStatementError,
        "COMMENT 'x'",
    ),
    (
        "CREATE TABLE sales.p (a INT) USING lakelog CLUSTER BY (a)",
        UnsupportedStatementError,
        "CLUSTER BY",
    ),
    (
        "CREATE TABLE sales.p (a INT) USING lakelog COMMENT 'x'",
        UnsupportedStatementError,
        "COMMENT",
    ),
    ("CREATE NAMESPACE other LOCATION '/tmp/x'", UnsupportedStatementError, "LOCATION '/tmp/x'"),
    (
        "ALTER TABLE sales.orders ADD COLUMNS (z INT AFTER id)",
        UnsupportedStatementError,
        "AFTER id",
    ),
    (
        "INSERT INTO sales.orders BY NAME SELECT 1 AS id, 1.0 AS amount",
        UnsupportedStatementError,
        "BY NAME",
    ),
    (
        "INSERT INTO sales.orders PARTITION (id = 1) SELECT 1.0",
        UnsupportedStatementError,
        "REPLACE WHERE",
    ),
    ("SELECT * FROM sales.orders@v1", UnsupportedStatementError, "VERSION AS OF"),
    # values and table rules, in SQL's words
    ("UPDATE sales.orders SET amount = 'x'", SqlError, "in UPDATE ... SET, found 'x'"),
    (
        "ALTER TABLE sales.orders ALTER COLUMN amount TYPE FLOAT",
        SchemaMismatchError,
        "ALTER COLUMN amount TYPE FLOAT: expected a widening",
    ),
    ("ALTER TABLE sales.orders ADD COLUMNS (id INT)", SqlError, "ALTER COLUMN id TYPE"),
    ("VACUUM sales.orders RETAIN 0 HOURS", SqlError, "RETAIN at least 1 HOURS"),
    ("OPTIMIZE sales.orders WHERE id > 1", SqlError, "drop the WHERE"),
    ("CREATE NAMESPACE sales", NamespaceExistsError, "write IF NOT EXISTS"),
    (
        "CREATE TABLE sales.orders (a INT) USING lakelog",
        TableAlreadyExistsError,
        "CREATE TABLE IF NOT EXISTS sales.orders",
    ),
    ("DROP NAMESPACE sales", NamespaceNotEmptyError, "write CASCADE"),
    (
        "CREATE TABLE sales.reg USING lakelog LOCATION '/nonexistent/lake/t'",
        TableLocationEmptyError,
        "CREATE TABLE ... (columns) USING lakelog LOCATION",
    ),
]

PYTHON_WORDS = ("exist_ok", "cascade=True", "load_table(", "create_table", "set=", "force=")


@pytest.fixture
def place(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    url = "sqlite:///" + str(tmp_path) + "/c.db"
    cat = lakelog.connect_catalog(url, warehouse=str(tmp_path / "wh"))
    cat.create_namespace("sales")
    t = cat.create_table("sales.orders", pa.schema([("id", pa.int64()), ("amount", pa.float64())]))
    t.append(pa.table({"id": [1, 2], "amount": [1.0, 2.0]}))
    try:
        yield url, cat
    finally:
        cat.close()


def state(cat: Any, tmp_path: Path) -> Any:
    files = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "wh").rglob("*"))
    return (
        cat.load_table("sales.orders").version,
        cat.list_namespaces(),
        cat.list_tables(),
        files,
    )


@pytest.mark.parametrize(("statement", "error", "words"), CASES)
def test_embedded(
    place: Any, tmp_path: Path, statement: str, error: type[Exception], words: str
) -> None:
    _, cat = place
    before = state(cat, tmp_path)
    with pytest.raises(error) as e:
        execute(statement, catalog=cat)
    text = str(e.value)
    assert words in text and "\n" not in text, text
    assert not any(w in text for w in PYTHON_WORDS), text
    assert state(cat, tmp_path) == before


@pytest.mark.parametrize(("statement", "error", "words"), CASES)
def test_cli(
    place: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    statement: str,
    error: type[Exception],
    words: str,
) -> None:
    url, cat = place
    before = state(cat, tmp_path)
    code = main(["sql", statement, "--catalog", url])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.startswith("lakelog: error: ") and err.count("\n") == 1, err
    assert words in err and "Traceback" not in err, err
    assert state(cat, tmp_path) == before


def unreachable(tmp_path: Path) -> list[str]:
    return [
        f"postgresql://ana:s3cret@127.0.0.1:{find_free_port()}/lake",
        "sqlite:///" + str(tmp_path / "missing" / "ro" / "c.db"),
    ]


@pytest.mark.parametrize("which", [0, 1])
def test_an_unreachable_catalog_is_one_line_and_creates_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    which: int,
) -> None:
    url = unreachable(tmp_path)[which]
    monkeypatch.setenv("LAKELOG_CATALOG", url)
    with pytest.raises(CatalogUnavailableError) as e:
        execute("SHOW TABLES")  # the default catalog: the environment's
    text = str(e.value)
    assert "\n" not in text and "s3cret" not in text
    assert ("127.0.0.1" in text) if which == 0 else ("create it or check the URL" in text)
    code = main(["sql", "CREATE NAMESPACE sales", "--catalog", url])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.strip() == f"lakelog: error: {text}"
    assert list(tmp_path.iterdir()) == []  # no folder, no file
