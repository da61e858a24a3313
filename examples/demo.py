"""lakelog end to end on local disk: the main job, no Spark needed.

A telemetry archive: an ingest job commits small batches every few seconds;
an analyst reads the table (and the table as it was earlier); maintenance
keeps the file count down while ingest goes on.

Run with ``make demo`` (or ``python examples/demo.py [FOLDER]``).
"""

from __future__ import annotations

import datetime as dt
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import lakelog


def telemetry_batch(i: int, rows: int = 5_000) -> pa.Table:
    """One ingest batch: sensor readings for one day of a small fleet."""
    rng = np.random.default_rng(i)
    day = dt.date(2026, 11, 1) + dt.timedelta(days=i % 3)
    return pa.table(
        {
            "day": pa.array([day] * rows, pa.date32()),
            "ts": pa.array(np.sort(rng.integers(i * 10**6, (i + 1) * 10**6, rows)), pa.int64()),
            "sensor_id": pa.array(rng.integers(0, 10_000, rows), pa.int64()),
            "value": pa.array(rng.normal(20.0, 5.0, rows)),
            "status": pa.array(rng.choice(["ok", "warn", "fail"], rows, p=[0.9, 0.08, 0.02])),
        }
    )


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 66 - len(title)))


def main(folder: str) -> None:
    uri = str(Path(folder) / "telemetry")
    section("create a partitioned table")
    table = lakelog.create_table(
        uri,
        telemetry_batch(0).schema,
        partition_by=["day"],
        properties={"lakelog.target_file_size": str(4 * 1024 * 1024)},
    )
    print(f"created {table.uri} at version {table.version}")

    section("ingest: 60 small commits")
    t0 = time.perf_counter()
    for i in range(60):
        table.append(telemetry_batch(i))
    took = time.perf_counter() - t0
    snap = table.snapshot()
    print(
        f"version {snap.version}: {snap.num_files} files, {snap.num_rows:,} rows, "
        f"{snap.total_bytes / 1e6:.1f} MB ({took / 60 * 1000:.0f} ms per commit)"
    )
    before_maintenance = snap.version
    checkpoint_time = snap.timestamp

    section("read: the analyst's query, pruned by partition and stats")
    query = (pc.field("day") == dt.date(2026, 11, 2)) & (pc.field("ts") < 5 * 10**6)
    files = snap.files(query)
    result = snap.to_arrow(columns=["sensor_id", "value"], filter=query)
    print(f"{len(files)} of {snap.num_files} files can match; {result.num_rows:,} rows read")

    section("more ingest, then time travel")
    for i in range(60, 66):
        table.append(telemetry_batch(i))
    now = table.snapshot()
    then = table.snapshot(as_of=checkpoint_time)
    old = table.snapshot(version=3)
    print(f"latest: version {now.version}, {now.num_rows:,} rows")
    print(f"as of {checkpoint_time:%H:%M:%S.%f}: version {then.version}, {then.num_rows:,} rows")
    print(f"version 3: {old.num_rows:,} rows in {old.num_files} files")

    section("compaction while ingest keeps committing")
    stop = threading.Event()
    ingested = []

    def ingest() -> None:
        writer = lakelog.open_table(uri)
        i = 66
        while not stop.is_set():
            writer.append(telemetry_batch(i))
            ingested.append(i)
            i += 1

    thread = threading.Thread(target=ingest)
    thread.start()
    report = table.compact()
    stop.set()
    thread.join()
    print(report.summary())
    after = table.snapshot()
    print(
        f"{len(ingested)} appends landed during compaction; now {after.num_files} files, "
        f"{after.num_rows:,} rows (expected {(66 + len(ingested)) * 5000:,})"
    )
    assert after.num_rows == (66 + len(ingested)) * 5000, "rows lost or duplicated"

    section("clustering on two columns (Hilbert curve, rank-normalized keys)")
    cols = ["sensor_id", "ts"]
    before = table.clustering_report(cols)
    report = table.optimize(zorder_by=cols, incremental=False, target_file_size=256 * 1024)
    clustered = table.clustering_report(cols)
    print(report.summary())
    print(
        f"expected fraction of bytes read by a 1% range query on both columns: "
        f"{before.box_fraction:.2f} before, {clustered.box_fraction:.2f} after"
    )
    hot = pc.field("sensor_id") < 100
    print(
        f"'sensor_id < 100' now touches {len(table.snapshot().files(hot))} of "
        f"{table.snapshot().num_files} files"
    )

    section("a correction and a rename, without rewriting files")
    fixed = table.delete("status = 'fail' and sensor_id < 50")  # deletion vectors: the default
    print(fixed.summary())
    table.rename_column("ts", "event_time")  # column ids: old files read the new name
    early = pc.field("event_time") < 5 * 10**6
    renamed = table.snapshot()
    print(
        f"'event_time < 5000000': {renamed.to_arrow(filter=early).num_rows:,} rows from "
        f"{len(renamed.files(early))} of {renamed.num_files} files (statistics still prune)"
    )

    section("time travel across maintenance")
    old_snap = table.snapshot(version=before_maintenance)
    print(
        f"version {old_snap.version} still reads {old_snap.to_arrow().num_rows:,} rows "
        f"from its original {old_snap.num_files} small files"
    )

    section("cleanup: expire old versions, then vacuum (a dry run by default)")
    expired = table.expire_snapshots(older_than=dt.timedelta(0), retain_last=3)
    print(expired.summary())
    print(table.vacuum(older_than=dt.timedelta(0), force=True).summary())
    try:
        table.snapshot(version=before_maintenance)
    except lakelog.VersionExpiredError as e:
        print(f"reading version {before_maintenance} now raises VersionExpiredError: {e}")
    final = table.snapshot()
    print(f"latest version {final.version}: {final.num_rows:,} rows in {final.num_files} files")

    section("history")
    for h in table.history(limit=4):
        print(f"  v{h.version:<4} {h.operation:<18} {h.metrics}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory(prefix="lakelog-demo-") as tmp:
            main(tmp)
