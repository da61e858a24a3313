"""Exactly-once ingest, schema evolution and restore, side by side with delta-rs.

Same data, same machine, same run; each figure is the median of ``--runs`` rounds
(every round builds fresh tables), in milliseconds per operation:

* **ingest**: ``--commits`` appends of ``--rows`` rows each, plain and exactly-once
  (lakelog: ``append(app_id=, app_version=)``; delta-rs: ``transaction_version`` checked
  before each write, then ``write_deltalake`` with an app transaction in
  ``CommitProperties``), and the same batches retried (lakelog: skipped by ``append``;
  delta-rs: the ``transaction_version`` check alone).
* **evolve**: adding a nullable column (``add_columns`` vs ``alter.add_columns``), a
  ``schema_mode="merge"`` append that adds one, and a full read of the evolved table
  (half of its files written before the changes); each timed ``REPEAT`` times per round.
* **restore**: restoring the table to its middle version and back to the latest,
  ``REPEAT`` times (``restore`` vs ``DeltaTable.restore``).

Usage: ``python benchmarks/bench_evolution.py [--commits 40] [--rows 10000] [--runs 3]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import print_table, write_json_result

import lakelog

APP = "ingest-7"


REPEAT = 8
"""Schema changes, reads and restores timed per round (their mean is one sample)."""


def _batch(i: int, rows: int, *, extra: str | None = None) -> pa.Table:
    rng = np.random.default_rng(i)
    cols: dict[str, Any] = {
        "batch": np.full(rows, i, dtype=np.int64),
        "id": np.arange(i * rows, (i + 1) * rows, dtype=np.int64),
        "value": rng.random(rows),
    }
    if extra is not None:
        cols[extra] = pa.array([f"s{i % 7}"] * rows)
    return pa.table(cols)


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _lakelog_round(root: Path, commits: int, rows: int) -> dict[str, float]:
    out: dict[str, float] = {}
    plain = lakelog.create_table(str(root / "ll-plain"), _batch(0, 1).schema)
    once = lakelog.create_table(str(root / "ll-once"), _batch(0, 1).schema)
    out["ingest plain"] = out["ingest exactly-once"] = 0.0
    for i in range(commits):  # interleaved: both see the same disk
        data = _batch(i, rows)
        out["ingest plain"] += _timed(lambda d=data: plain.append(d))
        out["ingest exactly-once"] += _timed(
            lambda d=data, n=i: once.append(d, app_id=APP, app_version=n)
        )
    assert once.append(_batch(0, rows), app_id=APP, app_version=0).skipped
    batches = [_batch(i, rows) for i in range(commits)]
    out["retry (skipped)"] = _timed(
        lambda: [once.append(b, app_id=APP, app_version=i) for i, b in enumerate(batches)]
    )
    assert once.refresh().snapshot().num_rows == commits * rows
    scale = commits / REPEAT  # main() divides every figure by `commits`
    out["add column"] = scale * _timed(
        lambda: [plain.add_columns({f"note{k}": pa.string()}) for k in range(REPEAT)]
    )
    merged = [_batch(commits + k, rows, extra=f"site{k}") for k in range(REPEAT)]
    out["merge append (new column)"] = scale * _timed(
        lambda: [plain.append(b, schema_mode="merge") for b in merged]
    )
    for i in range(commits + REPEAT, 2 * commits):
        plain.append(_batch(i, rows, extra="site0"), schema_mode="merge")
    latest = plain.version
    out["read evolved table"] = scale * _timed(
        lambda: [plain.snapshot().to_arrow() for _ in range(REPEAT)]
    )
    middle = commits // 2
    out["restore"] = scale * _timed(
        lambda: [plain.restore(middle if k % 2 == 0 else latest) for k in range(REPEAT)]
    )
    assert plain.snapshot().num_rows == 2 * commits * rows
    return out


def _delta_round(root: Path, commits: int, rows: int) -> dict[str, float]:
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    out: dict[str, float] = {}
    plain_uri = str(root / "dl-plain")
    write_deltalake(plain_uri, _batch(0, 0))
    plain = DeltaTable(plain_uri)
    once_uri = str(root / "dl-once")
    write_deltalake(once_uri, _batch(0, 0))
    once = DeltaTable(once_uri)

    def exactly_once(i: int, data: pa.Table) -> bool:
        once.update_incremental()  # the latest recorded version, as lakelog reads it
        recorded = once.transaction_version(APP)
        if recorded is not None and recorded >= i:
            return False
        props = CommitProperties(app_transactions=[Transaction(app_id=APP, version=i)])
        write_deltalake(once, data, mode="append", commit_properties=props)
        return True

    out["ingest plain"] = out["ingest exactly-once"] = 0.0
    for i in range(commits):  # interleaved, as for lakelog; both reuse a loaded table
        data = _batch(i, rows)
        out["ingest plain"] += _timed(lambda d=data: write_deltalake(plain, d, mode="append"))
        out["ingest exactly-once"] += _timed(lambda d=data, n=i: exactly_once(n, d))
    batches = [_batch(i, rows) for i in range(commits)]
    out["retry (skipped)"] = _timed(lambda: [exactly_once(i, b) for i, b in enumerate(batches)])
    assert DeltaTable(once_uri).count() == commits * rows
    plain = DeltaTable(plain_uri)
    from deltalake.schema import Field, PrimitiveType

    scale = commits / REPEAT  # main() divides every figure by `commits`
    out["add column"] = scale * _timed(
        lambda: [
            plain.alter.add_columns([Field(f"note{k}", PrimitiveType("string"))])
            for k in range(REPEAT)
        ]
    )
    merged = [_batch(commits + k, rows, extra=f"site{k}") for k in range(REPEAT)]
    out["merge append (new column)"] = scale * _timed(
        lambda: [write_deltalake(plain, b, mode="append", schema_mode="merge") for b in merged]
    )
    for i in range(commits + REPEAT, 2 * commits):
        write_deltalake(plain, _batch(i, rows, extra="site0"), mode="append", schema_mode="merge")
    latest = plain.version()
    out["read evolved table"] = scale * _timed(
        lambda: [DeltaTable(plain_uri).to_pyarrow_table() for _ in range(REPEAT)]
    )
    middle = commits // 2  # version 0 is the empty create, as for lakelog

    def restore(k: int) -> None:
        plain.restore(middle if k % 2 == 0 else latest)
        plain.update_incremental()

    out["restore"] = scale * _timed(lambda: [restore(k) for k in range(REPEAT)])
    assert DeltaTable(plain_uri).count() == 2 * commits * rows
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=40)
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    samples: dict[str, dict[str, list[float]]] = {"lakelog": {}, "delta-rs": {}}
    for _ in range(args.runs):
        root = Path(tempfile.mkdtemp(prefix="lakelog-bench-evolution-"))
        try:
            for name, fn in (("lakelog", _lakelog_round), ("delta-rs", _delta_round)):
                for key, seconds in fn(root, args.commits, args.rows).items():
                    samples[name].setdefault(key, []).append(seconds / args.commits)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    rows = []
    for key in samples["lakelog"]:
        ll = statistics.median(samples["lakelog"][key]) * 1000
        dl = statistics.median(samples["delta-rs"][key]) * 1000
        rows.append({"operation": key, "lakelog ms": ll, "delta-rs ms": dl, "ratio": ll / dl})
    overhead = {
        name: statistics.median(
            (o - p) * 1000 for o, p in zip(s["ingest exactly-once"], s["ingest plain"], strict=True)
        )
        for name, s in samples.items()
    }
    rows.append(
        {
            "operation": "exactly-once cost per commit",
            "lakelog ms": overhead["lakelog"],
            "delta-rs ms": overhead["delta-rs"],
        }
    )
    print(
        f"{args.commits} commits of {args.rows:,} rows; medians of {args.runs} runs; "
        f"ms per operation (ingest: per commit)"
    )
    print_table(rows)
    write_json_result("evolution", {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
