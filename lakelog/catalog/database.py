"""Reaching the catalog database: URLs, engines, transactions, errors.

* A URL is ``sqlite:///<file>`` (embedded), ``postgresql://user:pass@host:port/db``
  (shared; driven by psycopg 3), or a bare file path (SQLite). With none, the
  ``LAKELOG_CATALOG`` environment variable, else ``~/.lakelog/catalog.db``.
* SQLite: every connection enforces foreign keys and waits up to
  :data:`BUSY_TIMEOUT_S` for another process's write; a writing transaction starts
  with ``BEGIN IMMEDIATE`` (it takes the write lock first, so two processes never both
  read and then both try to upgrade); the file is in WAL mode, so reads go on beside a
  write.
* Every database failure becomes one typed, one-line error:
  :class:`~lakelog.errors.CatalogUnavailableError` names the URL with its password
  hidden and what to check.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, exc, insert, select
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.pool import StaticPool

from ..errors import (
    CatalogUnavailableError,
    CatalogVersionError,
    InvalidArgumentError,
    MissingDependencyError,
)
from . import CATALOG_ENV
from .schema import SCHEMA_VERSION, meta, metadata

__all__ = [
    "BUSY_TIMEOUT_S",
    "CATALOG_ENV",
    "Database",
    "default_url",
    "redact",
]

BUSY_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 5
PING_IDLE_S = 10.0


def default_url() -> str:
    """``$LAKELOG_CATALOG``, else the SQLite file ``~/.lakelog/catalog.db``."""
    configured = os.environ.get(CATALOG_ENV, "").strip()
    if configured:
        return configured
    return "sqlite:///" + str(Path.home() / ".lakelog" / "catalog.db")


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except exc.ArgumentError:
        return url


def _parse(url: str) -> URL:
    if not isinstance(url, str) or not url.strip():
        raise InvalidArgumentError(
            f"expected a catalog URL such as 'sqlite:///catalog.db' or "
            f"'postgresql://user@host/db', found {url!r}"
        )
    text = url.strip()
    if "://" not in text:  # a bare path: an SQLite file
        text = "sqlite:///" + os.path.abspath(os.path.expanduser(text))
    try:
        parsed = make_url(text)
    except exc.ArgumentError as e:
        raise InvalidArgumentError(
            f"expected a catalog URL such as 'sqlite:///catalog.db' or "
            f"'postgresql://user@host/db', found {redact(url)!r}: {e}"
        ) from e
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres"):
        if parsed.get_driver_name() not in ("psycopg", "postgresql", "postgres"):
            raise InvalidArgumentError(
                f"expected a PostgreSQL catalog URL driven by psycopg 3 "
                f"('postgresql://...' or 'postgresql+psycopg://...'), found "
                f"{redact(url)!r}"
            )
        return parsed.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            parsed = parsed.set(database=os.path.expanduser(parsed.database))
        return parsed.set(drivername="sqlite")
    raise InvalidArgumentError(
        f"expected a catalog URL of SQLite ('sqlite:///path/catalog.db') or PostgreSQL "
        f"('postgresql://user@host:5432/db'), found the scheme {backend!r} in "
        f"{redact(url)!r}"
    )


class Database:
    """An engine on the catalog database, with its tables checked and created."""

    def __init__(self, url: str) -> None:
        self.parsed = _parse(url)
        self.url = redact(url.strip())
        self.dialect = self.parsed.get_backend_name()
        self.engine = self._engine()
        self.read_engine = self._read_engine()
        try:
            with self.unavailable("open the catalog"):
                self._set_up()
        except BaseException:
            self.dispose()
            raise

    # -- engines ---------------------------------------------------------------
    def _engine(self) -> Engine:
        if self.dialect == "sqlite":
            return self._sqlite_engine()
        try:
            import psycopg  # noqa: F401
        except ImportError as e:
            raise MissingDependencyError(
                f"expected psycopg 3 for the PostgreSQL catalog {self.url}, found it "
                f"missing; pip install 'lakelog[postgres]'"
            ) from e
        return self._postgres_engine()

    def _postgres_engine(self, **options: Any) -> Engine:
        engine = create_engine(
            self.parsed, connect_args={"connect_timeout": CONNECT_TIMEOUT_S}, **options
        )

        # A pooled connection idle for a while is pinged before use (a server restarted
        # meanwhile then costs no failed call); one in steady use is not, which saves a
        # round trip per lookup.
        @event.listens_for(engine, "checkout")
        def _checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
            if time.monotonic() - record.info.get("lakelog_used", 0.0) < PING_IDLE_S:
                return
            try:
                dbapi_connection.execute("SELECT 1")
            except Exception as e:  # any failure: the pool reconnects
                raise exc.DisconnectionError(str(e)) from e

        @event.listens_for(engine, "checkin")
        def _checkin(_dbapi_connection: Any, record: Any) -> None:
            record.info["lakelog_used"] = time.monotonic()

        return engine

    def _read_engine(self) -> Engine:
        """Reads on PostgreSQL run in autocommit, on a pool of their own (no BEGIN/COMMIT
        round trips: each is one statement, or a few whose only use is an error's hint);
        SQLite reads are local calls and share the writers' engine."""
        if self.dialect == "sqlite":
            return self.engine
        return self._postgres_engine(isolation_level="AUTOCOMMIT")

    def _sqlite_engine(self) -> Engine:
        database = self.parsed.database or ":memory:"
        memory = database == ":memory:"
        if not memory:
            folder = Path(database).parent
            if not folder.is_dir():
                default = Path.home() / ".lakelog"
                if folder != default:
                    raise CatalogUnavailableError(
                        f"expected the folder of the SQLite catalog {self.url} to exist, "
                        f"found no folder {str(folder)!r}; create it or check the URL "
                        f"(sqlite:/// then an absolute path has four slashes)."
                    )
                folder.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            self.parsed,
            connect_args={"timeout": BUSY_TIMEOUT_S, "check_same_thread": False},
            **({"poolclass": StaticPool} if memory else {}),
        )

        @event.listens_for(engine, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # transactions are begun below
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            if not memory:
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            write = conn.get_execution_options().get("lakelog_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine

    # -- transactions ----------------------------------------------------------
    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction."""
        with self.unavailable("read the catalog"), self.read_engine.connect() as conn:
            if self.dialect == "sqlite":
                with conn.begin():
                    yield conn
            else:
                yield conn

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """A writing transaction (committed when the block ends without an error)."""
        with self.unavailable("write the catalog"), self.engine.connect() as conn:
            conn.execution_options(lakelog_write=True)
            with conn.begin():
                yield conn

    @contextlib.contextmanager
    def unavailable(self, doing: str) -> Iterator[None]:
        """Database failures other than constraint violations as
        :class:`CatalogUnavailableError`."""
        try:
            yield
        except exc.IntegrityError:
            raise
        except exc.DBAPIError as e:
            raise CatalogUnavailableError(self._unavailable_message(doing, e)) from e

    def _unavailable_message(self, doing: str, e: exc.DBAPIError) -> str:
        cause = " ".join(str(e.orig).split()) if e.orig is not None else type(e).__name__
        if self.dialect == "sqlite":
            check = (
                "check that the file is an SQLite database this user can read and write, "
                "on a local disk"
            )
        else:
            check = (
                "check that the server is running and reachable at that host and port, "
                "that the database exists and that the user and password are right"
            )
        return f"cannot {doing} at {self.url}: {cause[:300]}; {check}."

    # -- schema ----------------------------------------------------------------
    def _set_up(self) -> None:
        """Create the tables if missing (a race of two first connects is retried) and
        check the schema version."""
        for attempt in range(3):
            try:
                self._create_once()
                break
            except (exc.IntegrityError, exc.ProgrammingError, exc.OperationalError):
                if attempt == 2:
                    raise
                time.sleep(0.05 * (attempt + 1))
        with self.read() as conn:
            found = conn.execute(select(meta.c.value).where(meta.c.key == "schema_version"))
            version = int(found.scalar_one())
        if version > SCHEMA_VERSION:
            raise CatalogVersionError(
                f"expected a catalog database of schema version {SCHEMA_VERSION} or "
                f"older, found version {version} at {self.url} (set up by a newer "
                f"lakelog); upgrade lakelog to use this catalog."
            )

    def _create_once(self) -> None:
        with self.engine.connect() as conn:
            conn.execution_options(lakelog_write=True)
            with conn.begin():
                metadata.create_all(conn, checkfirst=True)
                has_version = conn.execute(
                    select(meta.c.value).where(meta.c.key == "schema_version")
                ).first()
                if has_version is None:
                    conn.execute(
                        insert(meta).values(key="schema_version", value=str(SCHEMA_VERSION))
                    )

    def dispose(self) -> None:
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()
