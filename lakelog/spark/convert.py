"""Converting a folder of Parquet files in place, with the footers read by Spark's executors.

:func:`lakelog.convert` reads every footer in the calling process. On an object store
each footer is a request of tens of milliseconds, so for the largest folders (millions
of files) one process is busy for an hour or more even with its threads, and the
decoding runs on one core. :func:`convert` is the same conversion with only that step
moved to Spark:

1. The driver lists the folder and checks it (:func:`~lakelog.interop.convert.
   convert_listing`: no table there yet, no Delta table, at least one Parquet file).
2. The listed files (path, size, modification time) are cut into chunks of
   ``files_per_task``, one Spark task each; each task reads its files' footers with
   :func:`~lakelog.interop.footers.read_footers` (so the statistics are exactly the
   embedded conversion's, physical values included) and sends back one compressed
   payload: per file its size, row count, statistics and the index of its schema among
   the task's distinct schemas, or why it could not be read.
3. The driver turns the payloads back into footers (files of one schema share one
   schema object, as :func:`read_footers` gives them) and
   :func:`~lakelog.interop.convert.convert_files` does the rest, as it does for
   :func:`lakelog.convert`: every check of the files, a second round of tasks for files
   whose statistics are taken again over the table's wider types, one commit.

The tasks are one Spark job of payload rows run with ``mapInArrow``
(:func:`lakelog.spark.runner.run_payloads`), as maintenance's are: no pandas needed, and
the same on a classic session and on Spark Connect. They read through fsspec in Spark's
Python workers, which need lakelog installed and the same ``storage_options``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import pyarrow as pa

from ..errors import InvalidArgumentError, SparkEnvironmentError
from ..interop.convert import convert_files, convert_listing
from ..interop.footers import Footer, Unreadable, read_footers
from ..log.actions import FileStats
from ..storage import FileInfo, Storage
from .environment import SHIP_ENVIRONMENT, check_executors, import_problem
from .jobs import short_error
from .read import spark_url
from .runner import default_parallelism, run_payloads

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..core import TableCore

__all__ = ["convert", "read_footers_task"]

MAX_FILES_PER_TASK = 2000
"""Default upper bound of files per task: small enough that a lost task is cheap to
redo and the work spreads over a large cluster, large enough that 2 million files are
1,000 tasks, not 2 million."""
MIN_FILES_PER_TASK = 256
"""Default lower bound: below it, a task's start-up (a Python worker, imports) costs
more than its footers."""
_CODEC = "zstd"


class _Read(msgspec.Struct, array_like=True, gc=False):
    path: str
    size: int
    mtime_ms: int
    num_rows: int
    schema: int
    """Index into :attr:`_Payload.schemas`."""
    stats: FileStats


class _Failed(msgspec.Struct, array_like=True, gc=False):
    path: str
    reason: str
    gone: bool


class _Payload(msgspec.Struct, array_like=True):
    """What one task sends back to the driver."""

    schemas: list[bytes]
    """The distinct (normalized) schemas of the task's files, Arrow IPC."""
    read: list[_Read]
    failed: list[_Failed]


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(_Payload)


def _encode(results: Sequence[Footer | Unreadable]) -> bytes:
    index: dict[int, int] = {}
    schemas: list[bytes] = []
    read: list[_Read] = []
    failed: list[_Failed] = []
    for r in results:
        if isinstance(r, Unreadable):
            failed.append(_Failed(r.path, r.reason, r.gone))
            continue
        at = index.get(id(r.schema))
        if at is None:  # read_footers shares one schema object per footer shape
            at = index[id(r.schema)] = len(schemas)
            schemas.append(r.schema.serialize().to_pybytes())
        read.append(_Read(r.path, r.size, r.mtime_ms, r.num_rows, at, r.stats))
    raw = _ENCODER.encode(_Payload(schemas, read, failed))
    packed: bytes = pa.compress(raw, codec=_CODEC, asbytes=True)
    return len(raw).to_bytes(8, "little") + packed


class _Chunk(msgspec.Struct, array_like=True):
    """What one task is handed: its files (path, size, modification time)."""

    files: list[tuple[str, int, int | None]]


_CHUNK_ENCODER = msgspec.msgpack.Encoder()
_CHUNK_DECODER = msgspec.msgpack.Decoder(_Chunk)


def read_footers_task(
    chunk: bytes | Sequence[tuple[str, int, int | None]],
    *,
    uri: str,
    storage_options: Mapping[str, Any],
    types: bytes | None,
) -> bytes:
    """The executor side: the footers of one chunk of files (path, size, modification
    time; or those as an encoded :class:`_Chunk`), as one compressed payload."""
    if isinstance(chunk, bytes):
        chunk = _CHUNK_DECODER.decode(chunk).files
    # the tasks only read: no commit, so no put-if-absent needed from the store
    storage = Storage(uri, storage_options, single_writer=True)
    schema = None if types is None else pa.ipc.read_schema(pa.py_buffer(types))
    infos = [FileInfo(path=p, size=s, mtime_ms=m) for p, s, m in chunk]
    return _encode(read_footers(storage, infos, types=schema))


def _decode(payloads: Sequence[bytes], infos: Sequence[FileInfo]) -> list[Footer | Unreadable]:
    shared: dict[bytes, pa.Schema] = {}
    found: dict[str, Footer | Unreadable] = {}
    for data in payloads:
        size = int.from_bytes(data[:8], "little")
        raw = pa.decompress(data[8:], decompressed_size=size, codec=_CODEC, asbytes=True)
        payload = _DECODER.decode(raw)
        schemas = []
        for blob in payload.schemas:
            if blob not in shared:
                shared[blob] = pa.ipc.read_schema(pa.py_buffer(blob))
            schemas.append(shared[blob])
        for f in payload.read:
            found[f.path] = Footer(
                f.path, f.size, f.mtime_ms, f.num_rows, schemas[f.schema], f.stats
            )
        for u in payload.failed:
            found[u.path] = Unreadable(u.path, u.reason, u.gone)
    missing = [i.path for i in infos if i.path not in found]
    if missing:
        raise SparkEnvironmentError(
            f"expected Spark's tasks to return the footer of each of the {len(infos)} files "
            f"handed to them, found {len(missing)} without one (e.g. {missing[0]!r}); "
            f"nothing was committed. Check that the executors run the driver's lakelog."
        )
    return [found[i.path] for i in infos]


def _files_per_task(spark: SparkSession, n: int, given: int | None) -> int:
    if given is not None:
        return given
    # two tasks per core, so a slow task (a slow store, a busy node) holds up less
    wanted = math.ceil(n / (2 * default_parallelism(spark)))
    return max(MIN_FILES_PER_TASK, min(MAX_FILES_PER_TASK, wanted))


class _SparkFooters:
    """A :data:`~lakelog.interop.convert.ReadFooters` that reads in Spark tasks."""

    def __init__(self, spark: SparkSession, storage: Storage, files_per_task: int | None):
        self.spark = spark
        self.storage = storage
        self.files_per_task = files_per_task

    def __call__(
        self, infos: Sequence[FileInfo], types: pa.Schema | None
    ) -> list[Footer | Unreadable]:
        per_task = _files_per_task(self.spark, len(infos), self.files_per_task)
        chunks = [
            _CHUNK_ENCODER.encode(
                _Chunk([(i.path, i.size, i.mtime_ms) for i in infos[k : k + per_task]])
            )
            for k in range(0, len(infos), per_task)
        ]
        run = functools.partial(
            read_footers_task,
            uri=self.storage.uri,
            storage_options=dict(self.storage.storage_options),
            types=None if types is None else types.serialize().to_pybytes(),
        )
        what = f"lakelog: read the footers of {len(infos):,} files to convert"
        try:
            payloads = run_payloads(self.spark, chunks, run, description=what)
        except Exception as e:  # Py4J / PySpark errors of the job
            error = short_error(e)
            if import_problem(error):
                raise SparkEnvironmentError(
                    f"expected Spark's executors to import lakelog to read the footers, "
                    f"found: {error}. Nothing was committed. {SHIP_ENVIRONMENT}"
                ) from None
            raise
        return _decode(payloads, infos)


def convert(
    spark: SparkSession,
    uri: str,
    *,
    partition_by: Sequence[str] | pa.Schema | None = None,
    properties: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    single_writer: bool = False,
    files_per_task: int | None = None,
) -> TableCore:
    """Turn the Parquet files under ``uri`` into a lakelog table in place, as
    :func:`lakelog.convert` does, with the footers read by Spark tasks.

    The listing, the checks (and their errors), the statistics and the one commit on the
    driver are :func:`lakelog.convert`'s. Runs on a classic session and on Spark Connect.

    Args:
        spark: the session whose tasks read the footers.
        uri: the folder of Parquet files, which becomes the table's root.
        partition_by: as for :func:`lakelog.convert`; default None infers partitions.
        properties: table properties; default none.
        storage_options: fsspec options, used by the driver and by the executors, which
            read the files through fsspec (not Spark's Hadoop filesystems); default none.
        single_writer: as for :func:`lakelog.convert`; default False.
        files_per_task: files whose footers one task reads; default None, about two
            tasks per core of the application, from 256 to 2,000 files each.

    Returns:
        The new table, at version 0.
    """
    if files_per_task is not None and (
        isinstance(files_per_task, bool)
        or not isinstance(files_per_task, int)
        or files_per_task < 1
    ):
        raise InvalidArgumentError(
            f"expected files_per_task to be a positive integer, found {files_per_task!r}"
        )
    storage = Storage(uri, storage_options, single_writer=single_writer)
    spark_url(storage)  # refuses fsspec's in-memory filesystem, which executors cannot see
    props, infos = convert_listing(storage, properties)
    check_executors(spark)
    return convert_files(
        storage, props, infos, partition_by, read=_SparkFooters(spark, storage, files_per_task)
    )
