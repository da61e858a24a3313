"""ALTER TABLE ... SET/UNSET TBLPROPERTIES without Spark (lakelog.sql.execute)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lakelog
from lakelog.errors import LakelogError
from lakelog.sql import execute


def test_unset_tblproperties(tmp_path: Path) -> None:
    catalog = lakelog.connect_catalog(
        "sqlite:///" + str(tmp_path) + "/c.db", warehouse=str(tmp_path / "wh")
    )
    try:
        catalog.create_namespace("s")
        catalog.create_table("s.t", pa.schema([("id", pa.int64())]))
        execute("ALTER TABLE s.t SET TBLPROPERTIES ('owner' = 'ops')", catalog=catalog)
        assert catalog.load_table("s.t").properties["owner"] == "ops"
        execute("ALTER TABLE s.t UNSET TBLPROPERTIES ('owner')", catalog=catalog)
        assert "owner" not in catalog.load_table("s.t").properties
        version = catalog.load_table("s.t").version
        with pytest.raises(LakelogError, match="owner"):
            execute("ALTER TABLE s.t UNSET TBLPROPERTIES ('owner')", catalog=catalog)
        execute("ALTER TABLE s.t UNSET TBLPROPERTIES IF EXISTS ('owner')", catalog=catalog)
        assert catalog.load_table("s.t").version == version  # nothing to remove: no commit
    finally:
        catalog.close()
