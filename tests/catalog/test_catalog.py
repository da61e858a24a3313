"""Every catalog operation, on SQLite and on a real PostgreSQL server; bad input is one
typed error and writes nothing."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
import sqlalchemy as sa

import lakelog
from lakelog.errors import (
    CatalogUnavailableError,
    CatalogVersionError,
    InvalidArgumentError,
    InvalidNameError,
    NamespaceExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    SchemaMismatchError,
    TableAlreadyExistsError,
    TableExistsError,
    TableLocationEmptyError,
)

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string())])
ROWS = pa.table({"id": [1, 2, 3], "day": ["a", "a", "b"]})


def rows_of(place: Any) -> list[tuple[Any, ...]]:
    """Every row of the catalog's table of names, read straight from the database."""
    engine = sa.create_engine(place.url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text("SELECT namespace, name, state FROM lakelog_tables")))
    finally:
        engine.dispose()


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


# -- namespaces ----------------------------------------------------------------------------


def test_namespaces_are_created_listed_and_dropped(catalog: Any) -> None:
    catalog.create_namespace("sales")
    catalog.create_namespace("Ops")  # names are case-insensitive, kept in lower case
    assert catalog.list_namespaces() == ["ops", "sales"]
    assert catalog.namespace_exists("OPS")
    with pytest.raises(NamespaceExistsError, match="exist_ok=True"):
        catalog.create_namespace("sales")
    catalog.create_namespace("sales", exist_ok=True)
    catalog.drop_namespace("ops")
    assert catalog.list_namespaces() == ["sales"]


def test_a_namespace_with_tables_is_dropped_only_with_cascade_and_keeps_data(
    catalog: Any, place: Any
) -> None:
    catalog.create_namespace("sales")
    table = catalog.create_table("sales.orders", SCHEMA)
    table.append(ROWS)
    with pytest.raises(NamespaceNotEmptyError, match=r"sales\.orders.*cascade=True"):
        catalog.drop_namespace("sales")
    assert catalog.list_tables("sales") == ["sales.orders"]
    catalog.drop_namespace("sales", cascade=True)
    assert catalog.list_namespaces() == [] and rows_of(place) == []
    assert lakelog.open_table(table.uri).snapshot().num_rows == 3  # names only


def test_an_unknown_namespace_is_named_with_close_ones(catalog: Any) -> None:
    catalog.create_namespace("sales")
    with pytest.raises(NoSuchNamespaceError, match="Did you mean 'sales'") as info:
        catalog.drop_namespace("sale")
    assert info.value.close == ("sales",)
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_tables("salez")
    with pytest.raises(NoSuchNamespaceError, match="create_namespace"):
        catalog.create_table("salez.orders", SCHEMA)
    assert not (Path(catalog.warehouse[len("file://") :]) / "salez").exists()


# -- tables ---------------------------------------------------------------------------


def test_create_load_list_and_exists(catalog: Any, place: Any) -> None:
    catalog.create_namespace("sales")
    created = catalog.create_table(
        "sales.Orders", SCHEMA, partition_by=["day"], properties={"owner": "ana"}
    )
    assert created.version == 0 and created.partition_by == ("day",)
    assert created.uri == f"file://{place.warehouse}/sales/orders"
    created.append(ROWS)
    loaded = catalog.load_table("SALES.orders")
    assert isinstance(loaded, lakelog.Table)
    assert loaded.version == 1 and loaded.snapshot().num_rows == 3
    assert loaded.properties["owner"] == "ana"
    assert catalog.list_tables() == ["sales.orders"] == catalog.list_tables("sales")
    assert catalog.table_exists("sales.orders") and not catalog.table_exists("sales.other")
    entry = catalog.describe_table("sales.orders")
    assert (entry.name, entry.state, entry.location) == ("sales.orders", "ready", created.uri)
    assert catalog.entries() == [entry] == catalog.entries("sales")


def test_catalog_default_properties_apply_at_create(catalog: Any) -> None:
    catalog.create_namespace("sales")
    catalog.set_default_properties({"lakelog.manifest_interval": 5, "team": "data"})
    assert catalog.default_properties() == {"lakelog.manifest_interval": "5", "team": "data"}
    table = catalog.create_table("sales.orders", SCHEMA, properties={"team": "sales"})
    assert table.properties["lakelog.manifest_interval"] == "5"
    assert table.properties["team"] == "sales"
    with pytest.raises(InvalidArgumentError):
        catalog.set_default_properties({"lakelog.manifest_interval": -1})
    assert catalog.default_properties()["lakelog.manifest_interval"] == "5"


def test_the_warehouse_is_remembered_by_the_catalog(place: Any) -> None:
    first = place.connect()
    first.close()
    again = lakelog.connect_catalog(place.url)  # no warehouse given
    try:
        assert again.warehouse == f"file://{place.warehouse}"
    finally:
        again.close()


def test_two_creates_of_one_name_leave_one_table(catalog: Any, place: Any) -> None:
    catalog.create_namespace("sales")
    catalog.create_table("sales.orders", SCHEMA).append(ROWS)
    before = files_under(place.warehouse)
    with pytest.raises(TableAlreadyExistsError, match="already in the catalog"):
        catalog.create_table("sales.orders", pa.schema([("x", pa.int8())]))
    assert files_under(place.warehouse) == before
    assert catalog.load_table("sales.orders").schema == SCHEMA


def test_create_where_an_unnamed_table_is_refuses_and_forgets_the_name(
    catalog: Any, place: Any
) -> None:
    catalog.create_namespace("sales")
    lakelog.write_table(str(place.warehouse / "sales" / "orders"), ROWS)
    with pytest.raises(TableExistsError, match="register_table"):
        catalog.create_table("sales.orders", SCHEMA)
    assert rows_of(place) == []


def test_a_bad_schema_writes_nothing(catalog: Any, place: Any) -> None:
    catalog.create_namespace("sales")
    with pytest.raises(InvalidArgumentError):
        catalog.create_table("sales.orders", pa.schema([("a", pa.int8()), ("a", pa.int8())]))
    with pytest.raises(SchemaMismatchError):
        catalog.create_table("sales.orders", SCHEMA, partition_by=["nope"])
    assert rows_of(place) == [] and files_under(place.warehouse) == []


def test_register_an_existing_table(catalog: Any, tmp_path: Path) -> None:
    catalog.create_namespace("ext")
    lakelog.write_table(str(tmp_path / "outside"), ROWS)
    catalog.register_table("ext.events", str(tmp_path / "outside"))
    assert catalog.load_table("ext.events").snapshot().num_rows == 3
    with pytest.raises(TableAlreadyExistsError, match=r"registered as ext\.events"):
        catalog.register_table("ext.again", str(tmp_path / "outside") + "/")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TableLocationEmptyError, match="found none"):
        catalog.register_table("ext.empty", str(tmp_path / "empty"))
    assert catalog.list_tables() == ["ext.events"]


def test_an_unknown_table_lists_close_names(catalog: Any) -> None:
    catalog.create_namespace("sales")
    catalog.create_table("sales.orders", SCHEMA)
    with pytest.raises(NoSuchTableError, match=r"Did you mean 'sales\.orders'") as info:
        catalog.load_table("sales.order")
    assert info.value.close == ("sales.orders",)
    assert len(str(info.value).splitlines()) == 1
    with pytest.raises(NoSuchNamespaceError, match="Did you mean 'sales'"):
        catalog.load_table("sals.orders")


def test_a_name_whose_table_was_deleted_says_so(catalog: Any) -> None:
    catalog.create_namespace("sales")
    table = catalog.create_table("sales.orders", SCHEMA)
    shutil.rmtree(table.uri[len("file://") :])
    with pytest.raises(TableLocationEmptyError, match="no table there"):
        catalog.load_table("sales.orders")


def test_rename_moves_the_name_not_the_data(catalog: Any) -> None:
    catalog.create_namespace("sales")
    catalog.create_namespace("archive")
    table = catalog.create_table("sales.orders", SCHEMA)
    table.append(ROWS)
    catalog.rename_table("sales.orders", "archive.orders_2025")
    assert catalog.list_tables() == ["archive.orders_2025"]
    moved = catalog.load_table("archive.orders_2025")
    assert moved.uri == table.uri and moved.snapshot().num_rows == 3
    with pytest.raises(NoSuchTableError):
        catalog.rename_table("sales.orders", "sales.x")
    with pytest.raises(NoSuchNamespaceError):
        catalog.rename_table("archive.orders_2025", "nowhere.x")
    catalog.create_table("sales.other", SCHEMA)
    with pytest.raises(TableAlreadyExistsError):
        catalog.rename_table("sales.other", "archive.orders_2025")
    # the old name's default folder is the renamed table's: a new create goes beside it
    again = catalog.create_table("sales.orders", SCHEMA)
    assert again.uri.startswith(table.uri + "-") and again.version == 0
    assert lakelog.open_table(table.uri).version == 1
    # an explicit location held by another name is refused before any write
    with pytest.raises(TableAlreadyExistsError, match=r"registered as archive\.orders_2025"):
        catalog.create_table("sales.third", SCHEMA, location=table.uri)


def test_drop_keeps_data_by_default_and_purge_deletes_it(catalog: Any, place: Any) -> None:
    catalog.create_namespace("sales")
    kept = catalog.create_table("sales.kept", SCHEMA)
    kept.append(ROWS)
    assert catalog.drop_table("sales.kept") == kept.uri
    assert not catalog.table_exists("sales.kept")
    assert lakelog.open_table(kept.uri).snapshot().num_rows == 3
    gone = catalog.create_table("sales.gone", SCHEMA)
    gone.append(ROWS)
    catalog.drop_table("sales.gone", purge=True)
    assert not (place.warehouse / "sales" / "gone").exists()
    assert (place.warehouse / "sales" / "kept").exists()
    with pytest.raises(NoSuchTableError):
        catalog.drop_table("sales.gone")


def test_purge_outside_the_warehouse_is_refused_before_anything(
    catalog: Any, tmp_path: Path
) -> None:
    catalog.create_namespace("ext")
    lakelog.write_table(str(tmp_path / "outside"), ROWS)
    catalog.register_table("ext.events", str(tmp_path / "outside"))
    with pytest.raises(InvalidArgumentError, match="only under its warehouse"):
        catalog.drop_table("ext.events", purge=True)
    assert catalog.table_exists("ext.events")
    assert lakelog.open_table(str(tmp_path / "outside")).snapshot().num_rows == 3


def test_a_name_left_creating_by_a_crash_is_not_loaded_and_drop_clears_it(
    catalog: Any, place: Any
) -> None:
    catalog.create_namespace("sales")
    catalog.create_table("sales.orders", SCHEMA)
    engine = sa.create_engine(place.url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE lakelog_tables SET state = 'creating'"))
    with pytest.raises(NoSuchTableError, match="being created"):
        catalog.load_table("sales.orders")
    assert catalog.list_tables() == []
    with pytest.raises(NoSuchTableError, match="10 minutes old"):  # may still be under way
        catalog.drop_table("sales.orders", purge=True)
    with engine.begin() as conn:  # as a crash 11 minutes ago leaves it
        stale = int((time.time() - 660) * 1000)
        conn.execute(sa.text(f"UPDATE lakelog_tables SET updated_ms = {stale}"))
    engine.dispose()
    catalog.drop_table("sales.orders", purge=True)
    assert rows_of(place) == [] and not (place.warehouse / "sales" / "orders").exists()


# -- names are never paths ----------------------------------------------------------------

BAD_NAMES = ["..", "a/b", "", "x" * 129, "-rf", "a b", "a\\b", "../../etc", ".", "é"]


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_bad_identifiers_are_refused_and_write_nothing(
    catalog: Any, place: Any, bad: str, tmp_path: Path
) -> None:
    catalog.create_namespace("sales")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(InvalidNameError) as info:
        catalog.create_namespace(bad)
    assert len(str(info.value).splitlines()) == 1
    for name in (f"sales.{bad}", f"{bad}.orders", f"sales.{bad}.x", bad):
        with pytest.raises(InvalidNameError):
            catalog.create_table(name, SCHEMA)
        with pytest.raises(InvalidNameError):
            catalog.load_table(name)
        with pytest.raises(InvalidNameError):
            catalog.register_table(name, str(tmp_path))
    assert catalog.list_namespaces() == ["sales"] and rows_of(place) == []
    assert sorted(os.listdir(tmp_path)) == before and files_under(place.warehouse) == []


# -- the database ------------------------------------------------------------------------


def test_an_unreachable_postgres_is_one_line_naming_the_url_without_password() -> None:
    from _services import find_free_port

    url = f"postgresql://ana:s3cret@127.0.0.1:{find_free_port()}/lake"
    with pytest.raises(CatalogUnavailableError) as info:
        lakelog.connect_catalog(url)
    message = str(info.value)
    assert "s3cret" not in message and "ana:***@127.0.0.1" in message
    assert "server is running" in message and len(message.splitlines()) == 1


def test_an_sqlite_file_in_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogUnavailableError, match="create it or check the URL"):
        lakelog.connect_catalog(f"sqlite:///{tmp_path}/nope/catalog.db")
    assert not (tmp_path / "nope").exists()


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    (tmp_path / "c.db").write_text("not a database, just text " * 100)
    with pytest.raises(CatalogUnavailableError, match="SQLite database"):
        lakelog.connect_catalog(f"sqlite:///{tmp_path}/c.db")


def test_an_unknown_scheme_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"SQLite.*PostgreSQL"):
        lakelog.connect_catalog("mysql://u@h/db")


def test_a_newer_catalog_schema_is_refused(place: Any) -> None:
    place.connect().close()
    engine = sa.create_engine(place.url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE lakelog_catalog_meta SET value = '99' WHERE key = 'schema_version'")
        )
    engine.dispose()
    with pytest.raises(CatalogVersionError, match="found version 99"):
        place.connect()


def test_the_default_catalog_is_a_file_under_home_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAKELOG_CATALOG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with lakelog.connect_catalog() as cat:
        assert cat.warehouse == f"file://{tmp_path}/.lakelog/warehouse"
    assert (tmp_path / ".lakelog" / "catalog.db").is_file()
    monkeypatch.setenv("LAKELOG_CATALOG", f"sqlite:///{tmp_path}/env.db")
    with lakelog.connect_catalog() as cat:
        assert cat.url == f"sqlite:///{tmp_path}/env.db"
        assert cat.warehouse == f"file://{tmp_path}/warehouse"


# -- engines ---------------------------------------------------------------------------


def test_to_duckdb_makes_a_view_per_table_in_a_schema_per_namespace(catalog: Any) -> None:
    catalog.create_namespace("sales")
    catalog.create_namespace("ops")
    catalog.create_table("sales.orders", SCHEMA).append(ROWS)
    catalog.create_table("ops.runs", pa.schema([("n", pa.int32())])).append(
        pa.table({"n": pa.array([7], pa.int32())})
    )
    con = duckdb.connect()
    assert catalog.to_duckdb(con) == ["ops.runs", "sales.orders"]
    assert con.sql("SELECT count(*) FROM sales.orders WHERE day = 'a'").fetchall() == [(2,)]
    assert con.sql("SELECT n FROM ops.runs").fetchall() == [(7,)]
    con.close()


def test_a_restarted_postgres_server_costs_no_failed_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from _services import PostgresUnavailableError, start_postgres_server

    from lakelog.catalog import database

    try:
        server = start_postgres_server()
    except PostgresUnavailableError as e:
        pytest.skip(str(e))
    try:
        catalog = lakelog.connect_catalog(server.url(), warehouse=str(tmp_path / "wh"))
        catalog.create_namespace("sales")
        catalog.create_table("sales.orders", SCHEMA)
        server.restart()
        monkeypatch.setattr(database, "PING_IDLE_S", 0.0)  # as if idle for a while
        assert catalog.load_table("sales.orders").version == 0
        catalog.create_namespace("ops")
        catalog.close()
    finally:
        server.stop()


def test_a_warehouse_on_s3(tmp_path: Path, moto_server: Any, s3_bucket: str) -> None:
    options = moto_server.storage_options()
    warehouse = f"s3://{s3_bucket}/wh-{tmp_path.name}"
    with lakelog.connect_catalog(
        f"sqlite:///{tmp_path}/c.db", warehouse=warehouse, storage_options=options
    ) as catalog:
        catalog.create_namespace("sales")
        table = catalog.create_table("sales.orders", SCHEMA)
        table.append(ROWS)
        assert table.uri == f"{warehouse}/sales/orders"
        assert catalog.load_table("sales.orders").snapshot().num_rows == 3
        fs = moto_server.filesystem()
        assert fs.find(f"{warehouse}/sales/orders")
        catalog.drop_table("sales.orders", purge=True)
        assert fs.find(f"{warehouse}/sales/orders") == []
