"""The catalog database's tables (SQLAlchemy Core), and their version.

Three tables (``docs/catalog.md``, "The catalog database"):

* ``lakelog_catalog_meta``: ``key``/``value`` pairs: ``schema_version`` (an integer),
  ``warehouse`` (the default root of new tables), ``default_properties`` (JSON);
* ``lakelog_namespaces``: one row per namespace;
* ``lakelog_tables``: one row per name: ``namespace``, ``name``, ``location`` (unique:
  one table has one name), ``state`` (``creating``, ``ready``, ``dropping``), ``token``
  (who set the state), times in epoch milliseconds.

The primary key of ``lakelog_tables`` is what decides a race of two creates (or
renames) of one name: the database's unique constraint, not a read before the write.
The foreign key to ``lakelog_namespaces`` decides a create racing a namespace's drop.
A database whose ``schema_version`` is higher than :data:`SCHEMA_VERSION` is refused.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKeyConstraint,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

__all__ = [
    "CREATING",
    "DROPPING",
    "READY",
    "SCHEMA_VERSION",
    "meta",
    "metadata",
    "namespaces",
    "tables",
]

SCHEMA_VERSION = 1
"""The version of the tables below; raised (with a migration) whenever they change."""

CREATING, READY, DROPPING = "creating", "ready", "dropping"

metadata = MetaData()

meta = Table(
    "lakelog_catalog_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

namespaces = Table(
    "lakelog_namespaces",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("created_ms", BigInteger, nullable=False),
)

tables = Table(
    "lakelog_tables",
    metadata,
    Column("namespace", String(128), nullable=False),
    Column("name", String(128), nullable=False),
    Column("location", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("token", String(64), nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("namespace", "name", name="lakelog_tables_pk"),
    UniqueConstraint("location", name="lakelog_tables_location_key"),
    ForeignKeyConstraint(
        ["namespace"], ["lakelog_namespaces.name"], name="lakelog_tables_namespace_fk"
    ),
)
