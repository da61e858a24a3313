"""Write a synthetic Delta Lake transaction log directly (no data files).

Only ``_delta_log/`` is written: one JSON commit file per version, and, on
request, checkpoints made by delta-rs itself (``DeltaTable.create_checkpoint``),
so the checkpoint layout is always one delta-rs accepts.  Readers that only
replay the log (``DeltaTable(path)``, ``DeltaTable(path, version=v)``,
``file_uris()``) never open the data files, which is all the log-replay
benchmarks need.

The commit sequence is a pure description (:class:`AddSpec` lists + removed
paths) produced by :func:`synthetic_commit_sequence`, so another writer - e.g.
lakelog's own log - can be fed exactly the same sequence.  Commit ``c`` of the
sequence is Delta version ``c`` (version 0 also carries ``protocol`` and
``metaData``) and its timestamp is :func:`commit_timestamp_ms` ``(c)``.

Self-check / timing: ``python benchmarks/_delta_log.py [--commits N --files M]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

__all__ = [
    "ARROW_SCHEMA",
    "BASE_TIMESTAMP_MS",
    "COMMIT_INTERVAL_MS",
    "DELTA_SCHEMA_STRING",
    "TABLE_ID",
    "AddSpec",
    "Commit",
    "commit_timestamp_ms",
    "create_checkpoint",
    "delta_log_dir",
    "live_file_counts",
    "synthetic_commit_sequence",
    "write_delta_log",
]

# ------------------------------------------------------------------ table shape

ARROW_SCHEMA: pa.Schema = pa.schema([pa.field("id", pa.int64()), pa.field("value", pa.int64())])
"""Schema of the (never written) data files: ``id long, value long``."""

DELTA_SCHEMA_STRING: str = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "value", "type": "long", "nullable": True, "metadata": {}},
        ],
    },
    separators=(",", ":"),
)

TABLE_ID: str = str(uuid.uuid5(uuid.NAMESPACE_URL, "lakelog-benchmark-synthetic-delta-log"))
BASE_TIMESTAMP_MS: int = 1_700_000_000_000
"""Timestamp (ms since epoch) of version 0; also the table's ``createdTime``."""
COMMIT_INTERVAL_MS: int = 1_000
"""Commit ``c`` is stamped ``BASE_TIMESTAMP_MS + c * COMMIT_INTERVAL_MS``."""

_CLIENT_VERSION = "lakelog-bench-synthetic/1"


def commit_timestamp_ms(version: int) -> int:
    """Deterministic commit timestamp (ms) of ``version``."""
    return BASE_TIMESTAMP_MS + version * COMMIT_INTERVAL_MS


def delta_log_dir(path: str | os.PathLike[str]) -> Path:
    """``<path>/_delta_log``."""
    return Path(path) / "_delta_log"


# ------------------------------------------------------------- commit description


@dataclass(frozen=True, slots=True)
class AddSpec:
    """One data file added by a commit (a Delta ``add`` action, described)."""

    path: str
    size: int
    num_rows: int
    min_values: Mapping[str, int]
    max_values: Mapping[str, int]
    null_count: Mapping[str, int]
    partition_values: Mapping[str, str | None] = field(default_factory=dict)
    modification_time: int | None = None
    """ms since epoch; ``None`` means the commit's timestamp."""

    def stats(self) -> dict[str, Any]:
        """Delta file statistics (``numRecords``, ``minValues``, ...)."""
        return {
            "numRecords": self.num_rows,
            "minValues": dict(self.min_values),
            "maxValues": dict(self.max_values),
            "nullCount": dict(self.null_count),
        }

    def stats_json(self) -> str:
        """:meth:`stats` as the compact JSON string stored in ``add.stats``."""
        return json.dumps(self.stats(), separators=(",", ":"))


Commit = tuple[list[AddSpec], list[str]]
"""One commit: files added, paths removed (removed paths were added earlier)."""


def _file_spec(commit: int, k: int, ordinal: int, rows: int) -> AddSpec:
    """The ``k``-th file of ``commit``; ``ordinal`` counts all adds so far."""
    id_min = ordinal * rows
    value_min = (ordinal * 104_729) % 1_000_000
    return AddSpec(
        path=f"part-{commit:06d}-{k:02d}.parquet",
        size=1_000_000 + (ordinal * 7_919) % 100_000,
        num_rows=rows,
        min_values={"id": id_min, "value": value_min},
        max_values={"id": id_min + rows - 1, "value": value_min + 1_000_000},
        null_count={"id": 0, "value": 0},
    )


def synthetic_commit_sequence(
    n_commits: int = 10_000,
    n_live_files: int = 100_000,
    expired_fraction: float = 0.0,
    *,
    rows_per_file: int = 10_000,
) -> Iterator[Commit]:
    """Deterministic commits leaving ``n_live_files`` live after the last one.

    * Total adds ``A = round(n_live_files / (1 - expired_fraction))``, spread as
      evenly as integers allow: commit ``c`` adds ``A*(c+1)//C - A*c//C`` files
      (``C = n_commits``), named ``part-{c:06d}-{k:02d}.parquet``.  With the
      defaults every commit adds 10 files and removes none.
    * ``R = A - n_live_files`` removes are spread evenly over commits ``1..C-1``
      (``R*c//(C-1) - R*(c-1)//(C-1)`` in commit ``c``) and always expire the
      oldest live files added by *earlier* commits (FIFO).
    * Every file: ``rows_per_file`` rows, size ~1 MB (1,000,000 + a deterministic
      offset < 100,000), stats with min/max/nullCount for ``id`` (disjoint
      ranges, increasing with the file ordinal) and ``value``.

    Yields ``(adds, removed_paths)`` per commit; the removed paths are always
    listed in the order they were added.
    """
    if n_commits < 1:
        raise ValueError(f"n_commits must be >= 1, got {n_commits}")
    if n_live_files < 0:
        raise ValueError(f"n_live_files must be >= 0, got {n_live_files}")
    if not 0.0 <= expired_fraction < 1.0:
        raise ValueError(f"expired_fraction must be in [0, 1), got {expired_fraction}")
    total_adds = round(n_live_files / (1.0 - expired_fraction))
    total_removes = total_adds - n_live_files
    if total_removes and n_commits < 2:
        raise ValueError("removes need at least 2 commits")

    live: deque[str] = deque()
    ordinal = 0
    for c in range(n_commits):
        n_remove = 0
        if total_removes:
            n_remove = total_removes * c // (n_commits - 1) - (
                total_removes * (c - 1) // (n_commits - 1) if c else 0
            )
        if n_remove > len(live):
            raise ValueError(
                f"infeasible sequence: commit {c} must expire {n_remove} files but "
                f"only {len(live)} are live; lower expired_fraction or raise "
                "n_live_files"
            )
        removes = [live.popleft() for _ in range(n_remove)]
        n_add = total_adds * (c + 1) // n_commits - total_adds * c // n_commits
        adds = [_file_spec(c, k, ordinal + k, rows_per_file) for k in range(n_add)]
        ordinal += n_add
        live.extend(a.path for a in adds)
        yield adds, removes


def live_file_counts(commits: Iterable[Commit]) -> list[int]:
    """Live file count after each commit (index = version), by replaying ``commits``."""
    live: set[str] = set()
    counts: list[int] = []
    for adds, removes in commits:
        live.difference_update(removes)
        live.update(a.path for a in adds)
        counts.append(len(live))
    return counts


# ------------------------------------------------------------------- log writing


def _dumps(action: Mapping[str, Any]) -> str:
    return json.dumps(action, separators=(",", ":"))


def _commit_lines(
    version: int,
    adds: Sequence[AddSpec],
    removes: Sequence[str],
    sizes: Mapping[str, int],
) -> list[str]:
    ts = commit_timestamp_ms(version)
    lines = [
        _dumps(
            {
                "commitInfo": {
                    "timestamp": ts,
                    "operation": "WRITE",
                    "operationParameters": {"mode": "ErrorIfExists" if version == 0 else "Append"},
                    "isBlindAppend": not removes,
                    "clientVersion": _CLIENT_VERSION,
                }
            }
        )
    ]
    if version == 0:
        lines.append(_dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}))
        lines.append(
            _dumps(
                {
                    "metaData": {
                        "id": TABLE_ID,
                        "format": {"provider": "parquet", "options": {}},
                        "schemaString": DELTA_SCHEMA_STRING,
                        "partitionColumns": [],
                        "configuration": {},
                        "createdTime": BASE_TIMESTAMP_MS,
                    }
                }
            )
        )
    for path in removes:
        remove: dict[str, Any] = {
            "path": path,
            "deletionTimestamp": ts,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": {},
        }
        if path in sizes:
            remove["size"] = sizes[path]
        lines.append(_dumps({"remove": remove}))
    for add in adds:
        lines.append(
            _dumps(
                {
                    "add": {
                        "path": add.path,
                        "partitionValues": dict(add.partition_values),
                        "size": add.size,
                        "modificationTime": ts
                        if add.modification_time is None
                        else add.modification_time,
                        "dataChange": True,
                        "stats": add.stats_json(),
                    }
                }
            )
        )
    return lines


def create_checkpoint(path: str | os.PathLike[str]) -> None:
    """Have delta-rs write a checkpoint + ``_last_checkpoint`` at the latest version."""
    from deltalake import DeltaTable

    DeltaTable(str(path)).create_checkpoint()


def write_delta_log(
    path: str | os.PathLike[str],
    commits: Iterable[Commit],
    *,
    checkpoint_every: int | None = None,
    checkpoint_latest: bool = False,
) -> int:
    """Write ``commits`` as Delta versions ``0, 1, ...`` under ``<path>/_delta_log``.

    * Version 0 holds ``commitInfo``, ``protocol`` (reader 1 / writer 2),
      ``metaData`` (schema ``id long, value long``, unpartitioned) and the first
      commit's actions; every version holds a ``commitInfo`` with
      :func:`commit_timestamp_ms`.
    * ``checkpoint_every=k``: after writing each version ``v > 0`` with
      ``v % k == 0``, delta-rs writes a checkpoint at ``v`` (Delta's usual
      interval semantics).
    * ``checkpoint_latest=True``: one checkpoint at the last version (what a
      delta-rs table written with the default settings has at its head).

    Refuses to write into an existing non-empty ``_delta_log``.  Returns the last
    version written.
    """
    if checkpoint_every is not None and checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
    log_dir = delta_log_dir(path)
    log_dir.mkdir(parents=True, exist_ok=True)
    if any(log_dir.iterdir()):
        raise FileExistsError(f"{log_dir} is not empty")

    sizes: dict[str, int] = {}
    version = -1
    checkpointed = -1
    for version, (adds, removes) in enumerate(commits):
        lines = _commit_lines(version, adds, removes, sizes)
        for path_removed in removes:
            sizes.pop(path_removed, None)
        sizes.update((a.path, a.size) for a in adds)
        with open(log_dir / f"{version:020d}.json", "x", encoding="utf-8") as fh:
            fh.write("\n".join(lines))
            fh.write("\n")
        if checkpoint_every is not None and version > 0 and version % checkpoint_every == 0:
            create_checkpoint(path)
            checkpointed = version
    if version < 0:
        raise ValueError("commits is empty")
    if checkpoint_latest and checkpointed != version:
        create_checkpoint(path)
    return version


# ----------------------------------------------------------------- self-check


def _load_count(path: Path, version: int | None) -> int:
    from deltalake import DeltaTable

    dt = DeltaTable(str(path), version=version)
    return len(dt.file_uris())


def _verify(path: Path, expected: Sequence[int], versions: Iterable[int]) -> None:
    for v in versions:
        got = _load_count(path, v)
        if got != expected[v]:
            raise AssertionError(f"{path}: version {v} has {got} files, expected {expected[v]}")
    latest = _load_count(path, None)
    if latest != expected[-1]:
        raise AssertionError(f"{path}: latest has {latest} files, expected {expected[-1]}")


def _correctness_check(root: Path) -> None:
    """Small logs with removes, with and without interval/latest checkpoints."""

    def sequence() -> Iterator[Commit]:
        return synthetic_commit_sequence(250, 2_000, expired_fraction=0.3)

    expected = live_file_counts(sequence())
    probe = [0, 1, 99, 100, 101, 150, 200, 249]
    variants: dict[str, dict[str, Any]] = {
        "json-only": {},
        "every-100": {"checkpoint_every": 100},
        "latest": {"checkpoint_latest": True},
        "every-100+latest": {"checkpoint_every": 100, "checkpoint_latest": True},
    }
    for name, kwargs in variants.items():
        target = root / f"check-{name}"
        write_delta_log(target, sequence(), **kwargs)
        _verify(target, expected, probe)
        n_cp = len(list(delta_log_dir(target).glob("*.checkpoint.parquet")))
        print(f"  ok: {name:<17} checkpoints={n_cp} live={expected[-1]} (probed {probe})")
        if kwargs.get("checkpoint_latest"):
            # Prove the checkpoint is really read: drop every JSON commit before it.
            last = len(expected) - 1
            for version in range(last):
                (delta_log_dir(target) / f"{version:020d}.json").unlink()
            _verify(target, expected, [])
            print(f"  ok: {name:<17} latest loads from the checkpoint alone")


def _main(argv: Sequence[str] | None = None) -> int:
    from _common import median_time, print_table, write_json_result

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=1_000)
    parser.add_argument("--files", type=int, default=10_000, help="live files at the end")
    parser.add_argument("--expired-fraction", type=float, default=0.0)
    parser.add_argument("--time-travel", type=int, default=None, help="default: commits // 2")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="keep the logs here")
    parser.add_argument("--save", action="store_true", help="append to results/delta_log.json")
    parser.add_argument("--skip-check", action="store_true", help="skip the small checks")
    args = parser.parse_args(argv)

    import deltalake

    tt_version = args.commits // 2 if args.time_travel is None else args.time_travel
    with tempfile.TemporaryDirectory(prefix="lakelog-delta-log-") as tmp:
        root = Path(tmp) if args.dir is None else args.dir
        root.mkdir(parents=True, exist_ok=True)
        if not args.skip_check:
            print("correctness (delta-rs file counts vs. replayed expectation):")
            _correctness_check(root)

        params = {
            "n_commits": args.commits,
            "n_live_files": args.files,
            "expired_fraction": args.expired_fraction,
        }
        expected = live_file_counts(synthetic_commit_sequence(**params))
        table = root / f"delta-{args.commits}c-{args.files}f"
        last = write_delta_log(table, synthetic_commit_sequence(**params))
        log_bytes = sum(p.stat().st_size for p in delta_log_dir(table).iterdir())
        print(
            f"\nwrote versions 0..{last} ({args.files:,} live files, "
            f"{log_bytes / 2**20:.1f} MiB of JSON) at {table}"
        )

        rows: list[dict[str, object]] = []

        def bench(label: str, version: int | None) -> None:
            count = _load_count(table, version)
            want = expected[-1] if version is None else expected[version]
            if count != want:
                raise AssertionError(f"{label}: {count} files, expected {want}")
            med, samples = median_time(
                lambda: _load_count(table, version), repeat=args.repeat, warmup=1
            )
            rows.append(
                {
                    "load": label,
                    "version": last if version is None else version,
                    "files": count,
                    "median_s": med,
                    "min_s": min(samples),
                    "max_s": max(samples),
                }
            )

        bench("latest, no checkpoint", None)
        bench("time travel, no checkpoint", tt_version)
        create_checkpoint(table)
        bench("latest, checkpoint at latest", None)
        bench("time travel, checkpoint at latest", tt_version)

        print(
            f"\ndelta-rs {deltalake.__version__}: DeltaTable(path[, version]) + "
            f"file_uris(), median of {args.repeat} (1 warm-up)"
        )
        print_table(rows)
        if args.save:
            out = write_json_result(
                "delta_log",
                {
                    "benchmark": "delta_rs_log_replay",
                    "deltalake": deltalake.__version__,
                    **params,
                    "log_json_bytes": log_bytes,
                    "rows": rows,
                },
            )
            print(f"saved to {out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(_main())
