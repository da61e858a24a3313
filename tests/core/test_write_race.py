"""write_table when another writer creates the table between its check and its commit."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from _races import race_at

import lakelog


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_table_created_concurrently_gets_the_written_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    uri = str(tmp_path / "t")
    rival = pa.table({"id": [100, 101]})
    ours = pa.table({"id": [1, 2, 3]})
    # a one-shot stream: it cannot be read a second time
    reader = pa.RecordBatchReader.from_batches(ours.schema, ours.to_batches())
    # our create has written its files and stops before its put; the rival wins version 0
    result = race_at(
        monkeypatch,
        "commit:before-put:CREATE TABLE AS WRITE",
        tmp_path / "gate",
        lambda: lakelog.write_table(uri, reader, mode=mode),  # type: ignore[arg-type]
        lambda: lakelog.write_table(uri, rival),
    )

    assert result.version == 1
    got = sorted(lakelog.open_table(uri).snapshot().to_arrow().column("id").to_pylist())
    expected = [1, 2, 3] if mode == "overwrite" else [1, 2, 3, 100, 101]
    assert got == expected
