"""A catalog on each backend: an SQLite file, and a database of a real PostgreSQL server
(started once per test session by ``tests/_services.py``, one fresh database per test)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _services import PostgresUnavailableError, start_postgres_server

import lakelog


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    try:
        server = start_postgres_server()
    except PostgresUnavailableError as e:
        pytest.skip(str(e))
    try:
        yield server
    finally:
        server.stop()


@dataclass
class CatalogPlace:
    """Where a test's catalog lives: its URL and its warehouse folder."""

    backend: str
    url: str
    warehouse: Path

    def connect(self, **kwargs: Any) -> Any:
        return lakelog.connect_catalog(self.url, warehouse=str(self.warehouse), **kwargs)


@pytest.fixture(params=["sqlite", "postgres"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> CatalogPlace:
    warehouse = tmp_path / "warehouse"
    if request.param == "sqlite":
        return CatalogPlace("sqlite", f"sqlite:///{tmp_path}/catalog.db", warehouse)
    server = request.getfixturevalue("postgres_server")
    url = server.create_database(f"c_{uuid.uuid4().hex[:12]}")
    return CatalogPlace("postgres", url, warehouse)


@pytest.fixture
def catalog(place: CatalogPlace) -> Iterator[Any]:
    cat = place.connect()
    try:
        yield cat
    finally:
        cat.close()
