"""write_table when another writer creates the table between its check and its commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
import lakelog.table as table_module


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_table_created_concurrently_gets_the_written_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    uri = str(tmp_path / "t")
    rival = pa.table({"id": [100, 101]})
    real_create = table_module.create_with_files

    def create_after_rival(*args: Any, **kwargs: Any) -> lakelog.Table:
        monkeypatch.setattr(table_module, "create_with_files", real_create)
        lakelog.write_table(uri, rival)  # the rival wins version 0
        return real_create(*args, **kwargs)

    monkeypatch.setattr(table_module, "create_with_files", create_after_rival)
    ours = pa.table({"id": [1, 2, 3]})
    # a one-shot stream: it cannot be read a second time
    reader = pa.RecordBatchReader.from_batches(ours.schema, ours.to_batches())
    result = lakelog.write_table(uri, reader, mode=mode)  # type: ignore[arg-type]

    assert result.version == 1
    got = sorted(lakelog.open_table(uri).snapshot().to_arrow().column("id").to_pylist())
    expected = [1, 2, 3] if mode == "overwrite" else [1, 2, 3, 100, 101]
    assert got == expected
