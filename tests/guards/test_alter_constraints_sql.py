"""Constraints on an existing table in SQL, Delta's syntax (docs/sql.md): ``ALTER TABLE
t ADD CONSTRAINT c CHECK (expr)``, ``DROP CONSTRAINT [IF EXISTS] c``, ``ALTER COLUMN c SET
NOT NULL``, through ``lakelog.sql.execute`` and ``lakelog.spark.sql``. Rows already there
that break the rule are one typed line naming it and a sample row, nothing written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import lakelog
from lakelog import ConstraintViolationError, InvalidArgumentError
from lakelog.errors import SqlError, UnsupportedStatementError

Run = Callable[[str], Any]


def _embedded(tmp_path: Path) -> tuple[lakelog.Catalog, Run]:
    from lakelog import sql

    catalog = lakelog.connect_catalog(f"sqlite:///{tmp_path}/c.db", warehouse=str(tmp_path / "wh"))
    return catalog, lambda s: sql.execute(s, catalog=catalog)


def _check_alter_constraints(catalog: lakelog.Catalog, run: Run) -> None:
    run("CREATE NAMESPACE shop")
    run("CREATE TABLE shop.pay (k BIGINT, amount DOUBLE) USING lakelog")
    run("INSERT INTO shop.pay VALUES (1, 5.0), (2, -1.0), (3, NULL)")
    version = catalog.load_table("shop.pay").version
    with pytest.raises(ConstraintViolationError, match=r"'positive'.*-1\.0") as e:
        run("ALTER TABLE shop.pay ADD CONSTRAINT positive CHECK (amount > 0)")
    assert "\n" not in str(e.value)
    assert catalog.load_table("shop.pay").version == version  # nothing written
    run("DELETE FROM shop.pay WHERE amount < 0")
    run("ALTER TABLE shop.pay ADD CONSTRAINT positive CHECK (amount > 0)")
    assert catalog.load_table("shop.pay").constraints == {"positive": "amount > 0"}
    with pytest.raises(ConstraintViolationError, match="'positive'"):
        run("INSERT INTO shop.pay VALUES (4, -2.0)")
    run("ALTER TABLE shop.pay DROP CONSTRAINT positive")
    assert catalog.load_table("shop.pay").constraints == {}
    run("INSERT INTO shop.pay VALUES (4, -2.0)")
    with pytest.raises(InvalidArgumentError, match="'positive'"):
        run("ALTER TABLE shop.pay DROP CONSTRAINT positive")
    run("ALTER TABLE shop.pay DROP CONSTRAINT IF EXISTS positive")

    version = catalog.load_table("shop.pay").version
    with pytest.raises(ConstraintViolationError, match="'amount'"):
        run("ALTER TABLE shop.pay ALTER COLUMN amount SET NOT NULL")
    assert catalog.load_table("shop.pay").version == version
    run("ALTER TABLE shop.pay ALTER COLUMN k SET NOT NULL")
    assert not catalog.load_table("shop.pay").schema.field("k").nullable
    with pytest.raises(ConstraintViolationError, match="'k'"):
        run("INSERT INTO shop.pay VALUES (NULL, 1.0)")
    with pytest.raises(UnsupportedStatementError, match="DROP NOT NULL"):
        run("ALTER TABLE shop.pay ALTER COLUMN k DROP NOT NULL")
    with pytest.raises(SqlError, match="'zz'"):
        run("ALTER TABLE shop.pay ALTER COLUMN zz SET NOT NULL")


def test_alter_table_constraints_embedded(tmp_path: Path) -> None:
    _check_alter_constraints(*_embedded(tmp_path))


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_alter_table_constraints_on_spark(spark: Any, tmp_path: Path) -> None:
    import lakelog.spark as lspark

    catalog = lakelog.connect_catalog(f"sqlite:///{tmp_path}/c.db", warehouse=str(tmp_path / "wh"))
    _check_alter_constraints(catalog, lambda s: lspark.sql(spark, s, catalog=catalog).collect())
