"""The catalog: ``namespace.table`` names -> lakelog tables (``docs/catalog.md``).

Embedded (SQLite, the default: ``~/.lakelog/catalog.db``) or shared (PostgreSQL), through
SQLAlchemy Core. The catalog records where each table lives; each table's own log stays
its only commit point, so nothing of the commit protocol is here.

* :mod:`.names`: the identifiers (checked before they become folders);
* :mod:`.schema`: the catalog database's tables and their version;
* :mod:`.database`: URLs, engines, transactions, and typed errors for an unreachable one;
* :mod:`.catalog`: :class:`Catalog` and :func:`connect_catalog`.

SQLAlchemy is imported when a catalog is opened, not with ``import lakelog``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .catalog import Catalog, TableEntry

__all__ = ["CATALOG_ENV", "Catalog", "TableEntry", "connect_catalog"]

CATALOG_ENV = "LAKELOG_CATALOG"
"""The environment variable naming the catalog when no URL is given."""


def connect_catalog(
    url: str | None = None,
    *,
    warehouse: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Catalog:
    """Open (and, the first time, set up) a catalog; see
    :func:`lakelog.catalog.catalog.connect_catalog`.

    >>> import lakelog, tempfile
    >>> tmp = tempfile.mkdtemp()
    >>> catalog = lakelog.connect_catalog("sqlite:///" + tmp + "/c.db", warehouse=tmp + "/wh")
    >>> catalog.create_namespace("sales")
    >>> catalog.list_namespaces()
    ['sales']
    >>> catalog.close()
    """
    from .catalog import connect_catalog as connect

    return connect(url, warehouse=warehouse, storage_options=storage_options)


def __getattr__(name: str) -> Any:
    if name in ("Catalog", "TableEntry"):
        from . import catalog

        return getattr(catalog, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
