"""SQL statements over the catalog's names (``docs/sql.md``).

A statement is parsed by sqlglot in Spark's dialect (Delta's syntax where Delta has the
statement) into a small plan (:mod:`.plan`), then run by an engine on the existing
operations: :func:`lakelog.spark.sql` on Spark, :func:`.embedded.execute` (``lakelog
sql``) on DuckDB for the statements that need no Spark. Nothing here reads or writes
rows itself.

* :mod:`.parser` and :mod:`.merge`: statement -> plan (pure);
* :mod:`.values`: ``SET`` values -> literals and pyarrow Expressions;
* :mod:`.run`: the statements every engine runs alike, on the catalog and the tables;
* :mod:`.embedded`: the DuckDB engine.

sqlglot is the ``sql`` extra: ``pip install 'lakelog[sql]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from ..catalog import Catalog
    from .plan import Plan

__all__ = ["default_catalog", "execute", "parse"]


def parse(statement: str) -> Plan:
    """The plan of one statement (see :func:`lakelog.sql.parser.parse`)."""
    from ..scan.engines import require

    require("sqlglot", purpose="SQL statements (the sql extra)")
    from .parser import parse as _parse

    return _parse(statement)


def execute(statement: str, *, catalog: Catalog | None = None, con: Any = None) -> pa.Table:
    """Run one statement without Spark (queries on DuckDB) and return its rows; see
    :func:`lakelog.sql.embedded.execute`.

    Args:
        statement: one statement (Spark's dialect; ``docs/sql.md``).
        catalog: the catalog whose names it uses; default None,
            :func:`lakelog.connect_catalog` with its defaults.
        con: a DuckDB connection; default None, a new in-memory one.
    """
    parse(statement)
    from .embedded import execute as _execute

    cat = default_catalog(catalog)
    try:
        return _execute(statement, cat, con=con)
    finally:
        if catalog is None:
            cat.close()


def default_catalog(catalog: Catalog | None = None, **options: Any) -> Catalog:
    """``catalog``, or :func:`lakelog.connect_catalog` with its defaults."""
    if catalog is not None:
        return catalog
    from ..catalog import connect_catalog

    return connect_catalog(**options)
