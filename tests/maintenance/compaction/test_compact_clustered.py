"""Compaction leaves clustered files to optimize (it would undo their order)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

import lakelog


def _batch(i: int, rows: int = 2_000) -> pa.Table:
    rng = np.random.default_rng(i)
    return pa.table({"a": rng.integers(0, 10_000, rows), "b": rng.random(rows)})


def test_compact_skips_clustered_files_and_compacts_the_rest(tmp_path: Path) -> None:
    table = lakelog.create_table(str(tmp_path / "t"), _batch(0).schema)
    for i in range(6):
        table.append(_batch(i))
    table.optimize(zorder_by=["a", "b"], incremental=False, target_file_size=16 * 1024)
    clustered = {f.path for f in table.snapshot().files()}
    assert len(clustered) > 2 and all(
        "lakelog.clustering.spec" in f.tags for f in table.snapshot().files()
    )

    for i in range(6, 9):
        table.append(_batch(i))
    report = table.compact(target_file_size=1024 * 1024)

    rewritten = {p for group in report.planned_groups for p in group}
    assert rewritten, "the three unclustered appends should be compacted"
    assert not rewritten & clustered
    live = {f.path for f in table.snapshot().files()}
    assert clustered <= live
    assert table.snapshot().num_rows == 9 * 2_000
