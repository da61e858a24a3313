"""Real Delta readers of lakelog's Delta view: deltalake, polars and DuckDB's ``delta``
extension (loaded offline from the ``duckdb-ext-delta`` wheel), and the comparison of
what they return with what lakelog reads."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pyarrow as pa

import lakelog


def duckdb_connection() -> Any:
    """A DuckDB connection with the ``delta`` extension of the ``duckdb-ext-delta``
    package: its wheel ships ``duckdb_ext/extensions/v<duckdb>/<platform>/``, which is
    an extension directory as DuckDB lays one out, so ``LOAD delta`` needs no network."""
    import duckdb

    spec = importlib.util.find_spec("duckdb_ext")
    assert spec is not None and spec.submodule_search_locations, "pip install duckdb-ext-delta"
    folder = Path(next(iter(spec.submodule_search_locations))) / "extensions"
    con = duckdb.connect(
        config={
            "extension_directory": str(folder),
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        }
    )
    con.execute("LOAD delta")
    return con


def local_path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def rows(table: pa.Table, names: list[str]) -> list[dict[str, Any]]:
    """Rows in a canonical order (sorted by every column), columns in ``names`` order."""
    t = table.select(names)
    return sorted(t.to_pylist(), key=lambda r: tuple((v is None, str(v)) for v in r.values()))


def lakelog_rows(t: lakelog.Table, version: int) -> list[dict[str, Any]]:
    snap = t.snapshot(version)
    return rows(snap.to_arrow(), snap.schema.names)


def deltalake_rows(
    uri: str, names: list[str], version: int | None = None, storage_options: Any = None
) -> list[dict[str, Any]]:
    import deltalake

    dt = deltalake.DeltaTable(local_path(uri), version=version, storage_options=storage_options)
    return rows(dt.to_pyarrow_table(), names)


def polars_rows(uri: str, names: list[str], version: int | None = None) -> list[dict[str, Any]]:
    import polars as pl

    return rows(pl.scan_delta(local_path(uri), version=version).collect().to_arrow(), names)


def duckdb_rows(
    con: Any, uri: str, names: list[str], version: int | None = None, where: str = ""
) -> list[dict[str, Any]]:
    """``delta_scan`` for the latest version; ``ATTACH ... (TYPE delta, VERSION v)`` for
    an older one (``delta_scan`` takes no version)."""
    path = local_path(uri).replace("'", "''")
    cond = f" WHERE {where}" if where else ""
    if version is None:
        got = con.execute(f"SELECT * FROM delta_scan('{path}'){cond}").fetch_arrow_table()
    else:
        alias = f"v{version}_{abs(hash(path)) % 10**8}"
        con.execute(f"ATTACH '{path}' AS {alias} (TYPE delta, VERSION {version})")
        try:
            got = con.execute(f"SELECT * FROM {alias}{cond}").fetch_arrow_table()
        finally:
            con.execute(f"DETACH {alias}")
    return rows(got, names)
