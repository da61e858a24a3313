"""The catalog: ``namespace.table`` names -> table locations, in a database.

Each table's own log stays its only commit point; the catalog records where a table
lives, never a version or a schema. Every change of a name is one statement the
database decides under its constraints (``docs/catalog.md``, "Races"):

* ``create_table`` first inserts the name in the state ``creating`` (the primary key
  decides between two creates: the loser gets :class:`TableAlreadyExistsError` and
  has written nothing), then creates the table through lakelog's own create, then
  marks the name ``ready``. A create that fails removes its row again.
* ``rename_table`` is one ``UPDATE`` of the row; ``drop_table`` one conditional
  ``DELETE`` (with ``purge``: the row goes ``dropping``, the files are deleted, then
  the row). A name that is ``creating`` or ``dropping`` is not loaded or listed.
* A location has one name (a unique constraint), so a rename never lets a new create
  reuse the renamed table's folder.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlalchemy import delete, exc, func, insert, select, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql import Select

from .._failpoints import failpoint
from ..core import TableCore, create_with_files, declare_rules
from ..errors import (
    CatalogError,
    InvalidArgumentError,
    MissingDependencyError,
    NamespaceExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
    TableExistsError,
    TableLocationEmptyError,
    TableNotFoundError,
)
from ..properties import validate_properties
from ..storage import Storage, normalize_uri
from ..table import Table
from .database import Database, default_url
from .names import check_identifier, close_names, split_name
from .schema import CREATING, DROPPING, READY, meta, namespaces, tables

__all__ = ["STALE_AFTER_S", "Catalog", "TableEntry", "connect_catalog"]

STALE_AFTER_S = 600
"""A name ``creating`` or ``dropping`` for longer than this was left by a crashed
process: ``drop_table`` clears it (sooner, it may still be under way)."""


@dataclass(frozen=True)
class TableEntry:
    """What the catalog records of one name."""

    name: str
    """``namespace.table``."""
    location: str
    """The table's root (a normalized URI)."""
    state: str
    """``ready``; ``creating`` or ``dropping`` while (or if a crash left) a create or a
    purging drop under way."""
    created_at: dt.datetime
    updated_at: dt.datetime


def connect_catalog(
    url: str | None = None,
    *,
    warehouse: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Catalog:
    """Open (and, the first time, set up) a catalog.

    Args:
        url: the catalog database: ``sqlite:///path/catalog.db`` (embedded) or
            ``postgresql://user:password@host:5432/db`` (shared by every job of a
            team). None: ``$LAKELOG_CATALOG``, else ``~/.lakelog/catalog.db``.
        warehouse: where new tables go (``<warehouse>/<namespace>/<table>``), a path or
            fsspec URL. The first one given is remembered by the catalog; None uses the
            remembered one, else for an SQLite file the folder ``warehouse`` beside it.
        storage_options: fsspec options for the tables' filesystem; default none.

    Raises:
        CatalogUnavailableError: the database cannot be reached (the message names the
            URL, password hidden, and what to check).
        CatalogVersionError: the database was set up by a newer lakelog.
    """
    db = Database(default_url() if url is None else url)
    try:
        return Catalog(db, warehouse=warehouse, storage_options=storage_options)
    except BaseException:
        db.dispose()
        raise


def _now_ms() -> int:
    return int(time.time() * 1000)


def _when(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)


class Catalog:
    """Names -> lakelog tables. Open with :func:`lakelog.connect_catalog`."""

    def __init__(
        self,
        db: Database,
        *,
        warehouse: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._db = db
        self._storage_options = dict(storage_options or {})
        self.warehouse: str | None = self._resolve_warehouse(warehouse)
        """The root of new tables (a normalized URI), or None when none is set."""

    @property
    def url(self) -> str:
        """The catalog database's URL, password hidden."""
        return self._db.url

    def __repr__(self) -> str:
        return f"Catalog({self.url!r}, warehouse={self.warehouse!r})"

    def close(self) -> None:
        """Close the catalog's database connections."""
        self._db.dispose()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- settings ----------------------------------------------------------------
    def _resolve_warehouse(self, given: str | None) -> str | None:
        stored = self._meta("warehouse")
        if given is not None:
            if not isinstance(given, str) or not given.strip():
                raise InvalidArgumentError(
                    f"expected warehouse to be a path or URL such as '/data/warehouse', "
                    f"found {given!r}"
                )
            chosen = normalize_uri(given)
        elif stored is not None:
            return stored
        elif self._db.dialect == "sqlite" and self._db.parsed.database not in (None, ":memory:"):
            chosen = normalize_uri(str(Path(str(self._db.parsed.database)).parent / "warehouse"))
        else:
            return None
        if stored is None:
            self._set_meta("warehouse", chosen, replace=False)
        return chosen

    def _meta(self, key: str) -> str | None:
        with self._db.read() as conn:
            value = conn.execute(select(meta.c.value).where(meta.c.key == key)).scalar()
        return None if value is None else str(value)

    def _set_meta(self, key: str, value: str, *, replace: bool) -> None:
        try:
            with self._db.write() as conn:
                if replace:
                    conn.execute(delete(meta).where(meta.c.key == key))
                conn.execute(insert(meta).values(key=key, value=value))
        except exc.IntegrityError as e:
            if replace:
                raise CatalogError(
                    f"expected to store the catalog setting {key!r}, found another client "
                    f"storing it at the same moment; try again."
                ) from e
            # another client stored its value first; that one holds

    def set_default_properties(self, properties: Mapping[str, Any]) -> None:
        """Table properties every ``create_table`` of this catalog applies (those given to
        the create win); replaces the previous defaults. Checked like any properties."""
        checked = validate_properties(properties)
        self._set_meta("default_properties", json.dumps(checked, sort_keys=True), replace=True)

    def default_properties(self) -> dict[str, str]:
        """The properties :meth:`set_default_properties` stored (empty by default)."""
        stored = self._meta("default_properties")
        return {} if stored is None else dict(json.loads(stored))

    # -- namespaces ----------------------------------------------------------------
    def create_namespace(self, namespace: str, *, exist_ok: bool = False) -> None:
        """Create a namespace.

        Raises:
            NamespaceExistsError: it exists (unless ``exist_ok``).
        """
        ns = check_identifier(namespace)
        try:
            with self._db.write() as conn:
                conn.execute(insert(namespaces).values(name=ns, created_ms=_now_ms()))
        except exc.IntegrityError as e:
            if exist_ok:
                return
            raise NamespaceExistsError(
                f"expected a new namespace, found {ns!r} already in the catalog {self.url}; "
                f"pass exist_ok=True to accept an existing one."
            ) from e

    def list_namespaces(self) -> list[str]:
        """Every namespace, sorted."""
        with self._db.read() as conn:
            rows = conn.execute(select(namespaces.c.name).order_by(namespaces.c.name))
            return [str(r) for r in rows.scalars()]

    def namespace_exists(self, namespace: str) -> bool:
        ns = check_identifier(namespace)
        with self._db.read() as conn:
            return self._namespace_exists(conn, ns)

    @staticmethod
    def _namespace_exists(conn: Connection, ns: str) -> bool:
        found = conn.execute(select(namespaces.c.name).where(namespaces.c.name == ns))
        return found.first() is not None

    def drop_namespace(self, namespace: str, *, cascade: bool = False) -> None:
        """Drop a namespace. A namespace with tables is refused unless ``cascade``, which
        drops their names too (never their data).

        Raises:
            NoSuchNamespaceError: there is no such namespace.
            NamespaceNotEmptyError: it holds tables and ``cascade`` is False.
        """
        ns = check_identifier(namespace)
        try:
            with self._db.write() as conn:
                if cascade:
                    conn.execute(delete(tables).where(tables.c.namespace == ns))
                else:
                    names = conn.execute(
                        select(tables.c.name)
                        .where(tables.c.namespace == ns)
                        .order_by(tables.c.name)
                        .limit(4)
                    ).scalars()
                    held = [f"{ns}.{n}" for n in names]
                    if held:
                        raise NamespaceNotEmptyError(self._not_empty(ns, held))
                if conn.execute(delete(namespaces).where(namespaces.c.name == ns)).rowcount != 1:
                    raise self._no_namespace(conn, ns)
        except exc.IntegrityError as e:  # a table created meanwhile (the foreign key)
            raise NamespaceNotEmptyError(self._not_empty(ns, [])) from e

    def _not_empty(self, ns: str, held: Sequence[str]) -> str:
        found = (
            f"tables ({', '.join(held[:3])}{', ...' if len(held) > 3 else ''})"
            if held
            else ("a table created meanwhile")
        )
        return (
            f"expected an empty namespace to drop, found {found} in {ns!r}; drop them "
            f"first, or pass cascade=True to drop their names too (their data is kept)."
        )

    def _no_namespace(self, conn: Connection, ns: str) -> NoSuchNamespaceError:
        names = conn.execute(select(namespaces.c.name)).scalars().all()
        close = close_names(ns, [str(n) for n in names])
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        return NoSuchNamespaceError(
            f"expected an existing namespace, found no {ns!r} in the catalog {self.url};"
            f" create it with create_namespace({ns!r}).{hint}",
            namespace=ns,
            close=close,
        )

    # -- tables ----------------------------------------------------------------------
    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        *,
        partition_by: Sequence[str] = (),
        properties: Mapping[str, Any] | None = None,
        location: str | None = None,
        constraints: Mapping[str, str] | None = None,
        generated: Mapping[str, str] | None = None,
        identity: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Table:
        """Create a lakelog table and register it as ``name`` (``namespace.table``).

        Args:
            name: the new name; its namespace must exist.
            schema: the table's columns.
            partition_by: the partition columns, in order; default none.
            properties: table properties, over the catalog's defaults
                (:meth:`set_default_properties`); default none.
            location: where the table goes; default ``<warehouse>/<namespace>/<table>``
                (when a renamed table still holds that folder: ``<table>-<8 hex digits>``
                beside it).
            constraints: CHECK constraints, name to SQL text; default none.
            generated: generated columns, column to SQL text; default none.
            identity: identity columns, column to ``start``/``step``/``always``; default
                none (all three as :func:`lakelog.create_table` takes them).

        Returns:
            The table, at version 0.

        Raises:
            TableAlreadyExistsError: the name or the location is already registered
                (of two racing creates exactly one wins; the other writes nothing).
            NoSuchNamespaceError: the namespace does not exist.
            TableExistsError: a table not in the catalog is at the location already.
        """
        ns, tb = split_name(name)
        if not isinstance(schema, pa.Schema):
            raise InvalidArgumentError(f"expected a pyarrow.Schema, found {type(schema).__name__}")
        schema = declare_rules(
            schema, constraints=constraints, generated=generated, identity=identity
        )
        props = {**self.default_properties(), **validate_properties(properties or {})}
        loc = self._location_for(ns, tb, location)
        storage = Storage(loc, self._storage_options)
        token = uuid.uuid4().hex
        try:
            self._insert(ns, tb, storage.uri, CREATING, token)
        except TableAlreadyExistsError:
            if location is not None or not self._held_by_another(ns, tb, storage.uri):
                raise
            # the default folder is a renamed table's: this one gets a folder of its own
            storage = Storage(f"{loc}-{token[:8]}", self._storage_options)
            self._insert(ns, tb, storage.uri, CREATING, token)
        failpoint("catalog:create:after-insert")
        try:
            created = create_with_files(
                storage, schema, partition_by=partition_by, properties=props, adds=None
            )
        except BaseException as e:
            self._forget(ns, tb, token)
            if isinstance(e, TableExistsError):
                raise TableExistsError(
                    f"expected no table at {storage.uri} to create {ns}.{tb}, found one "
                    f"that the catalog does not name (kept by an earlier drop_table?); "
                    f"register it with register_table({f'{ns}.{tb}'!r}, {storage.uri!r}), "
                    f"or pass another location=."
                ) from e
            raise
        failpoint("catalog:create:after-table")
        with self._db.write() as conn:
            marked = conn.execute(
                update(tables)
                .where(tables.c.namespace == ns, tables.c.name == tb, tables.c.token == token)
                .values(state=READY, updated_ms=_now_ms())
            ).rowcount
        if marked != 1:
            raise CatalogError(
                f"expected to register {ns}.{tb} after creating it at {storage.uri}, found "
                f"the name dropped meanwhile; the table is at that location: "
                f"register_table it again if it is wanted."
            )
        return Table(storage, created)

    def _location_for(self, ns: str, tb: str, location: str | None) -> str:
        if location is not None:
            if not isinstance(location, str) or not location.strip():
                raise InvalidArgumentError(
                    f"expected location to be a path or URL, found {location!r}"
                )
            return normalize_uri(location)
        if self.warehouse is None:
            raise InvalidArgumentError(
                f"expected a warehouse to place {ns}.{tb} in, found none set for the catalog "
                f"{self.url}; pass warehouse= to connect_catalog once (it is remembered), "
                f"or location= to create_table."
            )
        return f"{self.warehouse}/{ns}/{tb}"

    def register_table(self, name: str, location: str) -> Table:
        """Name an existing lakelog table (its data stays where it is).

        Raises:
            TableLocationEmptyError: there is no lakelog table at ``location``.
            TableAlreadyExistsError: the name or the location is already registered.
            NoSuchNamespaceError: the namespace does not exist.
        """
        ns, tb = split_name(name)
        if not isinstance(location, str) or not location.strip():
            raise InvalidArgumentError(
                f"expected location to be a table's path or URL, found {location!r}"
            )
        storage = Storage(location, self._storage_options)
        try:
            table = Table.from_core(TableCore.load(storage))
        except TableNotFoundError as e:
            raise TableLocationEmptyError(
                f"expected a lakelog table at {storage.uri} to register as {ns}.{tb}, found "
                f"none (no _log/ there); create one with create_table instead."
            ) from e
        self._insert(ns, tb, storage.uri, READY, uuid.uuid4().hex)
        return table

    def _insert(self, ns: str, tb: str, location: str, state: str, token: str) -> None:
        now = _now_ms()
        try:
            with self._db.write() as conn:
                conn.execute(
                    insert(tables).values(
                        namespace=ns,
                        name=tb,
                        location=location,
                        state=state,
                        token=token,
                        created_ms=now,
                        updated_ms=now,
                    )
                )
        except exc.IntegrityError as e:
            raise self._taken(ns, tb, location) from e

    def _taken(self, ns: str, tb: str, location: str | None) -> CatalogError:
        """Why an insert (or rename) to ``ns.tb`` at ``location`` broke a constraint."""
        with self._db.read() as conn:
            if not self._namespace_exists(conn, ns):
                return self._no_namespace(conn, ns)
            row = conn.execute(
                select(tables.c.location).where(tables.c.namespace == ns, tables.c.name == tb)
            ).first()
            if row is not None:
                return TableAlreadyExistsError(
                    f"expected a new name, found {ns}.{tb} already in the catalog (at "
                    f"{row.location}); load_table({f'{ns}.{tb}'!r}) opens it, or choose "
                    f"another name."
                )
            if location is not None:
                other = conn.execute(
                    select(tables.c.namespace, tables.c.name).where(tables.c.location == location)
                ).first()
                if other is not None:
                    return TableAlreadyExistsError(
                        f"expected a location no name holds, found {location} registered "
                        f"as {other.namespace}.{other.name}; one table has one name: "
                        f"rename_table that one, or pass another location=."
                    )
        return CatalogError(
            f"expected to record {ns}.{tb}, found the catalog changed meanwhile (a "
            f"concurrent drop or rename); try again."
        )

    def _held_by_another(self, ns: str, tb: str, location: str) -> bool:
        """Whether another name than ``ns.tb`` holds ``location``."""
        with self._db.read() as conn:
            holder = conn.execute(
                select(tables.c.namespace, tables.c.name).where(tables.c.location == location)
            ).first()
        return holder is not None and (holder.namespace, holder.name) != (ns, tb)

    def _forget(self, ns: str, tb: str, token: str) -> None:
        with self._db.write() as conn:
            conn.execute(
                delete(tables).where(
                    tables.c.namespace == ns, tables.c.name == tb, tables.c.token == token
                )
            )

    def load_table(self, name: str) -> Table:
        """The table named ``name``, at its latest version.

        Raises:
            NoSuchTableError: no such name (the message lists close ones).
            NoSuchNamespaceError: no such namespace.
            TableLocationEmptyError: the name's location holds no table any more.
        """
        entry = self.describe_table(name)
        storage = Storage(entry.location, self._storage_options)
        try:
            return Table.from_core(TableCore.load(storage))
        except TableNotFoundError as e:
            raise TableLocationEmptyError(
                f"expected the lakelog table named {entry.name} at {entry.location}, found "
                f"no table there (deleted outside the catalog?); drop_table"
                f"({entry.name!r}) forgets the name, register_table names another location."
            ) from e

    def describe_table(self, name: str) -> TableEntry:
        """What the catalog records of ``name`` (raises like :meth:`load_table`)."""
        ns, tb = split_name(name)
        with self._db.read() as conn:
            row = conn.execute(
                select(tables).where(tables.c.namespace == ns, tables.c.name == tb)
            ).first()
            if row is None or row.state != READY:
                raise self._no_table(conn, ns, tb, row.state if row is not None else None)
        return TableEntry(
            name=f"{ns}.{tb}",
            location=str(row.location),
            state=str(row.state),
            created_at=_when(int(row.created_ms)),
            updated_at=_when(int(row.updated_ms)),
        )

    def _no_table(
        self, conn: Connection, ns: str, tb: str, state: str | None
    ) -> NoSuchNamespaceError | NoSuchTableError:
        if not self._namespace_exists(conn, ns):
            return self._no_namespace(conn, ns)
        if state is not None:
            doing = "being created" if state == CREATING else "being dropped"
            return NoSuchTableError(
                f"expected a ready table named {ns}.{tb}, found it {doing}; if that process "
                f"crashed, drop_table({f'{ns}.{tb}'!r}) clears the name once it is "
                f"{STALE_AFTER_S // 60} minutes old.",
                name=f"{ns}.{tb}",
            )
        rows = conn.execute(
            select(tables.c.namespace, tables.c.name).where(tables.c.state == READY)
        ).all()
        close = close_names(f"{ns}.{tb}", [f"{r.namespace}.{r.name}" for r in rows])
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        return NoSuchTableError(
            f"expected a table named {ns}.{tb} in the catalog {self.url}, found none;"
            f" list_tables({ns!r}) shows its tables.{hint}",
            name=f"{ns}.{tb}",
            close=close,
        )

    def table_exists(self, name: str) -> bool:
        """Whether ``name`` is a ready table (invalid names raise)."""
        ns, tb = split_name(name)
        with self._db.read() as conn:
            found = conn.execute(
                select(tables.c.state).where(tables.c.namespace == ns, tables.c.name == tb)
            ).scalar()
        return found == READY

    def _ready_rows(self, query: Select[Any], namespace: str | None) -> Sequence[Row[Any]]:
        """The rows of ``query`` (over the ready tables) of ``namespace`` (None: all;
        :class:`NoSuchNamespaceError` if it does not exist), sorted by name."""
        with self._db.read() as conn:
            if namespace is not None:
                ns = check_identifier(namespace)
                if not self._namespace_exists(conn, ns):
                    raise self._no_namespace(conn, ns)
                query = query.where(tables.c.namespace == ns)
            return conn.execute(query.order_by(tables.c.namespace, tables.c.name)).all()

    def list_tables(self, namespace: str | None = None) -> list[str]:
        """The ready tables' names (``namespace.table``) of ``namespace`` (None: all),
        sorted.

        Raises:
            NoSuchNamespaceError: ``namespace`` does not exist.
        """
        query = select(tables.c.namespace, tables.c.name).where(tables.c.state == READY)
        rows = self._ready_rows(query, namespace)
        return [f"{r.namespace}.{r.name}" for r in rows]

    def entries(self, namespace: str | None = None) -> list[TableEntry]:
        """What the catalog records of every ready table (of ``namespace``; None: all),
        sorted by name, in one query."""
        query = select(tables).where(tables.c.state == READY)
        rows = self._ready_rows(query, namespace)
        return [
            TableEntry(
                name=f"{r.namespace}.{r.name}",
                location=str(r.location),
                state=str(r.state),
                created_at=_when(int(r.created_ms)),
                updated_at=_when(int(r.updated_ms)),
            )
            for r in rows
        ]

    def count_tables(self) -> int:
        """How many names the catalog holds (every state)."""
        with self._db.read() as conn:
            return int(conn.execute(select(func.count()).select_from(tables)).scalar_one())

    def rename_table(self, old: str, new: str) -> None:
        """Move a name (the data stays at its location). Two renames of one name: one
        moves it, the other gets :class:`NoSuchTableError`.

        Raises:
            NoSuchTableError: no table ``old``.
            TableAlreadyExistsError: ``new`` is taken.
            NoSuchNamespaceError: the namespace of ``new`` (or ``old``) does not exist.
        """
        ons, otb = split_name(old)
        nns, ntb = split_name(new)
        try:
            with self._db.write() as conn:
                moved = conn.execute(
                    update(tables)
                    .where(
                        tables.c.namespace == ons,
                        tables.c.name == otb,
                        tables.c.state == READY,
                    )
                    .values(namespace=nns, name=ntb, updated_ms=_now_ms())
                ).rowcount
        except exc.IntegrityError as e:
            raise self._taken(nns, ntb, None) from e
        if moved != 1:
            with self._db.read() as conn:
                state = conn.execute(
                    select(tables.c.state).where(tables.c.namespace == ons, tables.c.name == otb)
                ).scalar()
                raise self._no_table(conn, ons, otb, None if state is None else str(state))

    def drop_table(self, name: str, *, purge: bool = False) -> str:
        """Forget ``name``. The data is kept unless ``purge``: then the table's files are
        deleted too, which is refused (before anything changes) for a table outside the
        warehouse. A name a crashed process left ``creating`` or ``dropping`` for longer
        than :data:`STALE_AFTER_S` is dropped too. Returns the table's location.

        Raises:
            NoSuchTableError: no such name (of two racing drops, one gets this).
            InvalidArgumentError: ``purge`` for a table outside the warehouse.
        """
        ns, tb = split_name(name)
        with self._db.read() as conn:
            row = conn.execute(
                select(
                    tables.c.location, tables.c.token, tables.c.state, tables.c.updated_ms
                ).where(tables.c.namespace == ns, tables.c.name == tb)
            ).first()
            busy = row is not None and row.state != READY
            if row is None or (busy and _now_ms() - int(row.updated_ms) < STALE_AFTER_S * 1000):
                raise self._no_table(conn, ns, tb, None if row is None else str(row.state))
        location, token = str(row.location), str(row.token)
        if purge:
            self._check_purgeable(f"{ns}.{tb}", location)
            dropping = uuid.uuid4().hex
            with self._db.write() as conn:  # the token read above: one claimer wins
                claimed = conn.execute(
                    update(tables)
                    .where(tables.c.namespace == ns, tables.c.name == tb, tables.c.token == token)
                    .values(state=DROPPING, token=dropping, updated_ms=_now_ms())
                ).rowcount
            if claimed != 1:
                raise self._gone(ns, tb)
            failpoint("catalog:drop:after-claim")
            self._delete_files(location)
            token = dropping
        with self._db.write() as conn:
            dropped = conn.execute(
                delete(tables).where(
                    tables.c.namespace == ns, tables.c.name == tb, tables.c.token == token
                )
            ).rowcount
        if dropped != 1:
            raise self._gone(ns, tb)
        return location

    def _gone(self, ns: str, tb: str) -> NoSuchTableError | NoSuchNamespaceError:
        with self._db.read() as conn:
            return self._no_table(conn, ns, tb, None)

    def _check_purgeable(self, name: str, location: str) -> None:
        root = self.warehouse
        if root is None or not location.startswith(root.rstrip("/") + "/"):
            raise InvalidArgumentError(
                f"expected a table under the warehouse {root} to purge, found {name} at "
                f"{location}; nothing was dropped. lakelog deletes files only under its "
                f"warehouse: drop_table({name!r}) without purge, then delete the files "
                f"yourself."
            )

    def _delete_files(self, location: str) -> None:
        storage = Storage(location, self._storage_options)
        try:
            storage.fs.rm(storage.root, recursive=True)
        except FileNotFoundError:
            pass

    # -- engines -----------------------------------------------------------------------
    def to_duckdb(self, con: Any = None, *, namespace: str | None = None) -> list[str]:
        """Make every table (of ``namespace``; None: all) a DuckDB view
        ``namespace.table`` on ``con`` (None: DuckDB's default connection), reading the
        table's latest version through ``snapshot.to_duckdb``. A DuckDB schema is
        created per namespace. Returns the views' names.

        The views read the snapshot they were made from: call again to see later
        commits. On a DuckDB file database they last only as long as the connection.
        """
        try:
            import duckdb
        except ImportError as e:
            raise MissingDependencyError(
                f"expected the duckdb package for catalog.to_duckdb(), found it missing "
                f"({e}); install it with `pip install duckdb`."
            ) from e
        if con is None:
            con = duckdb.default_connection()
        made = []
        for entry in self.entries(namespace):
            name = entry.name
            ns, tb = name.split(".")
            table = self.load_table(name)
            source = f"__lakelog_{ns}__{tb}"
            table.snapshot().to_duckdb(con, name=source)
            con.execute(f'CREATE SCHEMA IF NOT EXISTS "{ns}"')
            con.execute(f'CREATE OR REPLACE VIEW "{ns}"."{tb}" AS SELECT * FROM "{source}"')
            made.append(name)
        return made
