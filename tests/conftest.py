"""Shared test services: one moto S3 server and one SparkSession per test session.

Both are started lazily by the first test that asks for them, bound to
127.0.0.1, and stopped at the end of the session. Under pytest-xdist each
worker is its own session; Spark tests carry ``xdist_group("spark")`` so one
worker runs them all and only one SparkSession starts.

Every test that reaches the moto server carries the ``s3`` marker (added here at
collection), so ``-m "not s3"`` (``make test-fast``) never starts it.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import lakelog

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

from _services import PostgresUnavailableError, start_moto_server, start_postgres_server


@dataclass
class Backend:
    """A place to put a table: its URI and the storage options to reach it."""

    name: str
    uri: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def child(self, name: str) -> Backend:
        return Backend(self.name, f"{self.uri}/{name}", self.storage_options)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[Any]:
    server = start_moto_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_bucket(moto_server: Any) -> str:
    name = f"lakelog-{uuid.uuid4().hex[:12]}"
    moto_server.create_bucket(name)
    return name


@pytest.fixture
def s3_backend(moto_server: Any, s3_bucket: str) -> Backend:
    return Backend("s3", f"s3://{s3_bucket}/{uuid.uuid4().hex}", moto_server.storage_options())


@pytest.fixture
def memory_backend() -> Iterator[Backend]:
    from fsspec.implementations.memory import MemoryFileSystem

    root = f"/lakelog-test-{uuid.uuid4().hex}"
    yield Backend("memory", f"memory://{root}")
    for key in [k for k in list(MemoryFileSystem.store) if k.startswith(root)]:
        MemoryFileSystem.store.pop(key, None)
    dirs = MemoryFileSystem.pseudo_dirs
    dirs[:] = [d for d in dirs if not d.startswith(root)]


@pytest.fixture
def local_backend(tmp_path: Path) -> Backend:
    return Backend("local", str(tmp_path / "table"))


S3_FIXTURES = frozenset({"moto_server", "s3_bucket", "s3_backend"})


def _uses_s3(item: pytest.Item) -> bool:
    """Whether ``item`` reaches the moto server: through one of its fixtures, or through a
    backend chosen by a parameter named ``s3`` (``request.getfixturevalue(f"{name}_backend")``)."""
    if S3_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    return any(isinstance(v, str) and v == "s3" for v in params)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _uses_s3(item):
            item.add_marker(pytest.mark.s3)


@pytest.fixture(params=["local", "memory", "s3"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Every storage backend the commit protocol must hold on."""
    return request.getfixturevalue(f"{request.param}_backend")  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="pyspark is in the 'spark' extra; make test installs it")
    from _services import build_spark_session

    session = build_spark_session()
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def connect_client() -> Iterator[Any]:
    """A Spark Connect client process (:class:`_services.ConnectClient`) on the test
    session's one Connect server (its own process, a free port), started once."""
    pytest.importorskip("grpc", reason="pyspark[connect] is in the dev extra")
    from _services import ConnectClient, start_connect_server

    server = start_connect_server()
    try:
        client = ConnectClient(server)
        try:
            yield client
        finally:
            client.stop()
    finally:
        server.stop()


# -- catalogs (tests/catalog): an SQLite file, and a database of a real PostgreSQL server
# started once per test session by tests/_services.py (one fresh database per test)


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
