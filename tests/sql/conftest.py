"""A fresh SQLite catalog per test, in the test's folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lakelog


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Any]:
    cat = lakelog.connect_catalog(
        "sqlite:///" + str(tmp_path) + "/c.db", warehouse=str(tmp_path / "wh")
    )
    try:
        yield cat
    finally:
        cat.close()
