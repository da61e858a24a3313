"""The executor side of maintenance on Spark: run one unit of work from its payload alone.

Everything here runs inside a Spark task (a Python worker on any executor), so
it is given only plain data: a JSON payload (the plan entry, the table schema,
the options) and the storage options, and it reads and writes the table's
files through fsspec. Nothing depends on the driver's memory or local disk.

* :func:`run_group_task` rewrites one compaction or clustering group with the
  same functions the embedded executor uses (:func:`rewrite_group`,
  :func:`cluster_group`) and returns the files it wrote, as JSON.
* :func:`finalize_staged_file` turns one file that Spark's native writer
  produced for a large clustering group (rows already in key order) into a
  table file: the clustering spec in its footer, lakelog's row groups and
  codec, the key range in its tags.
* :func:`key_function` builds the Arrow UDF body that computes curve keys and
  output-file numbers on executors.

Crash points (:mod:`lakelog._failpoints`) for tests: ``spark-task:<step>``,
``spark-task:<step>:attempt-<n>`` and ``spark-task:<step>:<group id>`` with
``<step>`` ``start`` (before any file is written) or ``written`` (after the
files are written, before the result is returned).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgspec
import numpy as np
import pyarrow as pa

from .._failpoints import failpoint
from ..errors import CorruptLogError
from ..io.writer import ParquetOptions, RollingWriter, WriteOptions
from ..log.actions import AddFile, DataFile, decode_schema
from ..maintenance.clustering.planner import ClusterSettings
from ..maintenance.clustering.rewrite import cluster_group
from ..maintenance.clustering.sort import RowGroupCutter, Segment
from ..maintenance.clustering.spec import ClusterSpec, spec_tags
from ..maintenance.compaction.rewrite import RewriteOptions, rewrite_group
from ..maintenance.groups import FileGroup, GroupResult
from ..maintenance.pacing import TokenBucket
from ..maintenance.sources import dictionary_columns, file_schema_of, read_ahead, read_group
from ..storage import Storage

__all__ = [
    "GroupTask",
    "StagedFile",
    "TaskOutcome",
    "discard_staging",
    "finalize_staged_file",
    "key_function",
    "run_group_task",
    "signed_keys",
]

log = logging.getLogger("lakelog.spark")

_SIGN = np.uint64(1 << 63)


class GroupTask(msgspec.Struct, frozen=True, kw_only=True):
    """One group of a plan, with all a worker needs to rewrite it."""

    kind: Literal["compact", "cluster"]
    uri: str
    schema: str
    """The table schema (Arrow IPC, base64, as in the log and the plan)."""
    partition_by: tuple[str, ...] = ()
    group: FileGroup
    rewrite: RewriteOptions | None = None
    bytes_per_second: float | None = None
    """This task's share of the run's ``max_bytes_per_second``."""
    spec: str | None = None
    """The clustering spec as JSON (clustering)."""
    segments: tuple[Segment, ...] = ()
    cluster: ClusterSettings | None = None
    lease_id: str | None = None
    """The run's writer lease: output names carry it (compaction: in ``rewrite``)."""


class TaskOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a group's task sends back to the driver."""

    result: GroupResult
    attempt: int = 0
    paced_seconds: float = 0.0
    started: float = 0.0
    """Wall-clock start and end (``time.time()``) on the worker."""
    finished: float = 0.0
    host: str = ""
    mode: str = "task"
    """``task`` (one Spark task) or ``spark-job`` (a large clustering group)."""


class StagedFile(msgspec.Struct, frozen=True, kw_only=True):
    """One file Spark wrote for a large clustering group, to be turned into a table file."""

    uri: str
    path: str
    size_bytes: int
    num_rows: int = 0
    schema: str
    partition_by: tuple[str, ...] = ()
    partition: dict[str, str | None] = {}
    spec: str
    tier: str = "base"
    target_file_size: int
    row_group_size: int
    compression: str
    lease_id: str | None = None
    """The run's writer lease: the table file's name carries it."""
    parquet: ParquetOptions = ParquetOptions()
    """Page index, bloom filters and page size of the table file (lakelog.parquet.*)."""


def _attempt() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return 0 if ctx is None else int(ctx.attemptNumber())


def _crash_points(step: str, group_id: str, attempt: int) -> None:
    failpoint(f"spark-task:{step}")
    failpoint(f"spark-task:{step}:attempt-{attempt}")
    failpoint(f"spark-task:{step}:{group_id}")


def run_group_task(payload: bytes, storage_options: Mapping[str, Any] | None = None) -> bytes:
    """Rewrite the group of a :class:`GroupTask` payload; returns a :class:`TaskOutcome` (JSON).

    On failure the rewrite deletes what it wrote and the error propagates, so
    Spark retries the task; a crashed attempt leaves unreferenced files for
    ``vacuum``.
    """
    task = msgspec.json.decode(payload, type=GroupTask)
    started = time.time()
    attempt = _attempt()
    gid = task.group.group_id
    _crash_points("start", gid, attempt)
    storage = Storage(task.uri, storage_options)
    schema = decode_schema(task.schema)
    bucket = TokenBucket(task.bytes_per_second) if task.bytes_per_second else None
    if task.kind == "compact":
        if task.rewrite is None:
            raise CorruptLogError(
                f"expected rewrite options in the task of group {gid}, found none"
            )
        result = rewrite_group(
            storage, schema, task.partition_by, task.group, task.rewrite, pacer=bucket
        )
    else:
        if task.spec is None or task.cluster is None:
            raise CorruptLogError(
                f"expected a clustering spec and options in the task of group {gid}, found none"
            )
        spec = ClusterSpec.from_json(json.loads(task.spec), schema)
        result = cluster_group(
            storage,
            schema,
            task.partition_by,
            task.group,
            task.segments,
            spec,
            task.cluster,
            lease_id=task.lease_id,
            pacer=bucket,
        )
    _crash_points("written", gid, attempt)
    outcome = TaskOutcome(
        result=result,
        attempt=attempt,
        paced_seconds=bucket.waited_seconds if bucket is not None else 0.0,
        started=started,
        finished=time.time(),
        host=f"{socket.gethostname()}:{os.getpid()}",
    )
    return msgspec.json.encode(outcome)


# -- large clustering groups ---------------------------------------------------------------


def signed_keys(keys: np.ndarray[Any, np.dtype[np.uint64]]) -> np.ndarray[Any, np.dtype[np.int64]]:
    """``uint64`` keys as ``int64`` in the same order (Spark has no unsigned type)."""
    flipped: np.ndarray[Any, np.dtype[np.int64]] = (keys ^ _SIGN).view(np.int64)
    return flipped


_Setup = tuple[
    ClusterSpec,
    pa.Schema,
    np.ndarray[Any, np.dtype[np.uint64]],
    np.ndarray[Any, np.dtype[np.int32]],
]
_SETUPS: dict[str, _Setup] = {}


def _key_setup(text: str) -> _Setup:
    """Decode (once per worker process) the spec, key-column types, file cuts and the
    value that sends each file's rows to its own Spark partition."""
    hit = _SETUPS.get(text)
    if hit is None:
        d = json.loads(text)
        schema = decode_schema(d["schema"])
        spec = ClusterSpec.from_json(json.loads(d["spec"]), schema)
        starts = np.array([int(s) for s in d["starts"]], dtype=np.uint64)
        route = np.array(d["route"], dtype=np.int32)
        hit = _SETUPS[text] = (spec, schema, starts, route)
    return hit


def key_function(setup: str) -> Callable[..., pa.StructArray]:
    """The body of the Arrow UDF of a large clustering job.

    ``setup`` is JSON holding the spec, the Arrow types
    of the clustering columns, the first key of every output file and, per
    file, the ``int`` whose Spark hash partition is that file's number. The
    function receives the clustering columns as Arrow arrays and returns, per
    row, ``f``: the number of the output file the row belongs to, ``k``: its
    curve key as an order-preserving ``int64``, and ``p``: the value to
    hash-partition on. Vectorized, no per-row Python.
    """

    def keys_and_files(*columns: pa.Array) -> pa.StructArray:
        spec, schema, starts, route = _key_setup(setup)
        arrays = [
            c if c.type == f.type else c.cast(f.type) for c, f in zip(columns, schema, strict=True)
        ]
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        keys = spec.keys(batch)
        files = np.searchsorted(starts, keys, side="right").astype(np.int32) - 1
        return pa.StructArray.from_arrays(
            [
                pa.array(files, pa.int32()),
                pa.array(signed_keys(keys), pa.int64()),
                pa.array(route[files], pa.int32()),
            ],
            names=["f", "k", "p"],
        )

    # PySpark infers the UDF kind from annotations (these would read as an aggregate);
    # without any it is a scalar Arrow UDF, which is what this is.
    keys_and_files.__annotations__ = {}
    return keys_and_files


def finalize_staged_file(payload: bytes, storage_options: Mapping[str, Any] | None = None) -> bytes:
    """Rewrite one key-ordered file Spark staged into a table file; returns its AddFiles (JSON).

    Streams one row group at a time. The rows must arrive in key order (they
    were range-partitioned and sorted by Spark): a violation fails the task
    rather than committing a layout the tags would misdescribe.
    """
    item = msgspec.json.decode(payload, type=StagedFile)
    storage = Storage(item.uri, storage_options)
    schema = decode_schema(item.schema)
    file_schema = file_schema_of(schema, item.partition_by)
    spec = ClusterSpec.from_json(json.loads(item.spec), schema)
    footer = spec.footer_schema(file_schema)
    source = DataFile(path=item.path, size_bytes=item.size_bytes, num_rows=item.num_rows)
    stream = read_ahead(read_group(storage, file_schema, [source]))
    first = next(stream, None)
    writer = RollingWriter(
        storage,
        file_schema=footer,
        partition=item.partition,
        partition_by=item.partition_by,
        options=WriteOptions(
            target_file_size=2 * item.target_file_size,  # a safety net; Spark cut the files
            row_group_size=item.row_group_size,
            compression=item.compression,
            use_dictionary=dictionary_columns(first),
            parquet=msgspec.structs.replace(
                item.parquet, sorting_columns=spec.columns if spec.curve == "linear" else ()
            ),
        ),
        prefix="cluster",
        lease_id=item.lease_id,
    )
    key_min: int | None = None
    key_max = 0
    cutter = RowGroupCutter(writer)  # row groups end at coarse key boundaries
    try:
        for batch in itertools.chain([] if first is None else [first], stream):
            keys = spec.keys(batch)
            if not len(keys):
                continue
            if (key_min is not None and int(keys[0]) < key_max) or bool(
                np.any(keys[1:] < keys[:-1])
            ):
                raise CorruptLogError(
                    f"expected the rows Spark staged in {item.path} in key order, found them "
                    f"out of order; nothing was committed. Report this with your Spark version."
                )
            key_min = int(keys[0]) if key_min is None else key_min
            key_max = int(keys[-1])
            cutter.add(batch, keys)
        cutter.finish()
        written = writer.close()
    except BaseException:
        storage.delete(writer.abort())
        raise
    tags = spec_tags(spec, tier=item.tier, key_min=key_min or 0, key_max=key_max)
    added = [
        msgspec.structs.replace(a, data_change=False, tags={**a.tags, **tags}) for a in written
    ]
    return msgspec.json.encode(added)


def decode_added(raw: bytes) -> list[AddFile]:
    """Inverse of the encoding :func:`finalize_staged_file` returns."""
    return msgspec.json.decode(raw, type=list[AddFile])


def discard_staging(storage: Storage, staging: str) -> None:
    """Best-effort removal of a Spark job's staging folder (a root-relative path): used by
    the Spark writer and by large clustering groups; vacuum removes what remains."""
    try:
        full = storage.full(staging)
        if storage.fs.exists(full):
            storage.fs.rm(full, recursive=True)
    except Exception as e:  # noqa: BLE001 - leftovers are orphans for vacuum
        log.warning("could not remove Spark staging folder %s: %r", staging, e)
