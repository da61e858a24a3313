"""``lakelog catalog ...`` and table names in the table commands (``--catalog URL`` or
``$LAKELOG_CATALOG``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
from lakelog.cli import main

ROWS = pa.table({"id": [1, 2, 3]})


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_catalog_commands_with_json(
    place: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cat = ("--catalog", place.url)
    place.connect().close()  # sets the warehouse
    assert run_json(capsys, "catalog", "create-namespace", "sales", *cat) == {
        "namespace": "sales",
        "created": True,
    }
    assert run_json(capsys, "catalog", "namespaces", *cat) == ["sales"]
    lakelog.write_table(str(tmp_path / "t"), ROWS)
    registered = run_json(capsys, "catalog", "register", "sales.orders", str(tmp_path / "t"), *cat)
    assert registered == {"name": "sales.orders", "location": f"file://{tmp_path}/t"}
    assert run_json(capsys, "catalog", "tables", "sales", *cat) == [registered]
    renamed = run_json(capsys, "catalog", "rename", "sales.orders", "sales.o2", *cat)
    assert renamed["name"] == "sales.o2" and renamed["location"] == registered["location"]
    dropped = run_json(capsys, "catalog", "drop", "sales.o2", *cat)
    assert dropped == {"name": "sales.o2", "location": registered["location"], "purged": False}
    assert run_json(capsys, "catalog", "tables", *cat) == []
    assert lakelog.open_table(str(tmp_path / "t")).snapshot().num_rows == 3
    code, out, _ = run(capsys, "catalog", "drop-namespace", "sales", *cat)
    assert code == 0 and "dropped namespace sales" in out


def test_table_commands_take_a_name(
    place: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    with place.connect() as cat:
        cat.create_namespace("sales")
        cat.create_table("sales.orders", ROWS.schema).append(ROWS)
    info = run_json(capsys, "info", "sales.orders", "--catalog", place.url)
    assert info["num_rows"] == 3 and info["uri"] == f"file://{place.warehouse}/sales/orders"
    monkeypatch.setenv("LAKELOG_CATALOG", place.url)
    assert run_json(capsys, "history", "sales.orders")[0]["version"] == 1
    # an existing path wins over a name
    monkeypatch.chdir(tmp_path)
    lakelog.write_table("sales.orders", pa.table({"id": [9]}))
    assert run_json(capsys, "info", "sales.orders")["num_rows"] == 1


def test_an_unknown_name_is_one_line_in_the_commands_words(
    place: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with place.connect() as cat:
        cat.create_namespace("sales")
        cat.create_table("sales.orders", ROWS.schema)
    code, out, err = run(capsys, "info", "sales.ordrs", "--catalog", place.url)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("lakelog: error: ")
    assert "Did you mean 'sales.orders'" in err and "`lakelog catalog tables sales`" in err
    code, _, err = run(capsys, "catalog", "drop-namespace", "sales", "--catalog", place.url)
    assert code == 1 and "--cascade" in err and "cascade=True" not in err
    lakelog.write_table(str(tmp_path / "outside"), ROWS)
    outside = str(tmp_path / "outside")
    run_json(capsys, "catalog", "register", "sales.ext", outside, "--catalog", place.url)
    code, _, err = run(capsys, "catalog", "drop", "sales.ext", "--purge", "--catalog", place.url)
    assert code == 1 and "`lakelog catalog drop sales.ext` without --purge" in err


def test_bad_names_and_unreachable_catalogs_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/c.db"
    code, _, err = run(capsys, "catalog", "create-namespace", "../etc", "--catalog", url)
    assert code == 1 and err.count("\n") == 1 and "'..' or '/' are refused" in err
    code, _, err = run(capsys, "catalog", "register", "a/b.c", str(tmp_path), "--catalog", url)
    assert code == 1 and err.count("\n") == 1
    from _services import find_free_port

    pg = f"postgresql://ana:s3cret@127.0.0.1:{find_free_port()}/db"
    code, _, err = run(capsys, "catalog", "namespaces", "--catalog", pg)
    assert code == 1 and err.count("\n") == 1 and "s3cret" not in err and "ana:***@" in err
    assert run_json(capsys, "catalog", "tables", "--catalog", url) == []
    assert run_json(capsys, "catalog", "namespaces", "--catalog", url) == []
