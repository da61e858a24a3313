"""The merge's routing: each source row to the candidate files its key may be in, and the
rebase's probe of concurrently added files."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import LakelogError
from ...log.actions import AddFile, DataFile
from ...rowlevel.merge import (
    SourceKeys,
    slice_within,
    sortable_keys,
)
from ...rowlevel.read import read_rows
from ...storage import Storage
from .jobs import (
    FID,
    MARK,
    RECORDS,
    ROUTE,
    Job,
    by_file,
    collect_records,
    conformed_rows,
    map_in_arrow,
    route_of,
    spread_files,
    task_record,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


__all__ = ["probe_adds", "route_source"]


def _probe_task(
    job: Job, keys: tuple[str, ...]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The body of a rebase probe task: whether each file holds a key of its routed rows
    (a file that cannot be read counts: the safe side)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        storage = Storage(job.uri, job.storage_options)
        for fid, rows in by_file(batches):
            f = job.files[fid]
            others = [n for n in job.schema.names if n not in keys]  # only keys are read
            own = conformed_rows(rows, job.schema, (), others)
            source = SourceKeys(own.select(list(keys)), keys, "error")
            index = source.index_for(f, job.schema)
            try:
                hit = any(
                    bool((index.match(b) >= 0).any())
                    for b in read_rows(storage, f, job.schema, job.partition_by, columns=keys)
                )
            except (FileNotFoundError, LakelogError, OSError):
                hit = True
            if hit:
                yield task_record("hit", f.path.encode())

    return run


class _Router:
    """Sends each source row with a key to every file whose partition values and
    min/max statistics hold that key (those of the embedded merge's per-file index)."""

    def __init__(
        self,
        schema: pa.Schema,
        keys: tuple[str, ...],
        files: Sequence[tuple[int, int, DataFile]],
    ) -> None:
        self.schema = schema
        self.keys = keys
        self.sortable = not pa.types.is_floating(schema.field(keys[0]).type)
        self.files = [
            (fid, route, [SourceKeys.bounds(f, schema, k) for k in keys]) for fid, route, f in files
        ]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            if b.num_rows:
                out = self._route(b)
                if out is not None:
                    yield out

    def _route(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        keyed = {k: batch.column(k).cast(self.schema.field(k).type) for k in self.keys}
        valid = np.ones(batch.num_rows, dtype=bool)
        for col in keyed.values():
            valid &= np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        rows = np.flatnonzero(valid)
        if not len(rows):
            return None
        lead: np.ndarray | list[Any] | None = None
        if self.sortable:
            values = keyed[self.keys[0]].take(pa.array(rows))
            order = pc.sort_indices(values).to_numpy()
            rows = rows[order]
            ordered = sortable_keys(values.take(pa.array(order)))
            lead = ordered.tolist() if ordered.dtype == object else ordered
        columns = {k: keyed[k].take(pa.array(rows)) for k in self.keys}
        picked: list[np.ndarray] = []
        fids: list[np.ndarray] = []
        routes: list[np.ndarray] = []
        for fid, route, bounds in self.files:
            start, stop = 0, len(rows)
            if lead is not None and bounds[0] is not None:
                start, stop = slice_within(lead, *bounds[0])
            if stop <= start:
                continue
            keep = np.ones(stop - start, dtype=bool)
            for i, k in enumerate(self.keys):
                bound = bounds[i]
                if bound is None or (i == 0 and lead is not None):
                    continue
                lo, hi = bound
                col = columns[k].slice(start, stop - start)
                hit = pc.and_(pc.greater_equal(col, lo), pc.less_equal(col, hi))
                keep &= np.asarray(hit.fill_null(False).to_numpy(zero_copy_only=False), bool)
            chosen = rows[start:stop][keep]
            if len(chosen):
                picked.append(chosen)
                fids.append(np.full(len(chosen), fid, dtype=np.int32))
                routes.append(np.full(len(chosen), route, dtype=np.int32))
        if not picked:
            return None
        take = np.concatenate(picked)
        out = batch.take(pa.array(take))
        n = len(take)
        arrays = [
            *out.columns,
            pa.array(np.concatenate(fids), pa.int32()),
            pa.array(np.concatenate(routes), pa.int32()),
            pa.array(np.zeros(n, dtype=bool)),
        ]
        return pa.RecordBatch.from_arrays(arrays, names=[*out.schema.names, FID, ROUTE, MARK])


def route_source(
    spark: SparkSession, deduped: DataFrame, job: Job, keys: tuple[str, ...]
) -> DataFrame:
    """The source rows, each with the candidate file(s) its key may be in."""
    from pyspark.sql import types as T

    files = [(fid, route_of(job, fid), f) for fid, f in job.files.items()]
    schema = T.StructType(
        [
            *deduped.schema.fields,
            T.StructField(FID, T.IntegerType()),
            T.StructField(ROUTE, T.IntegerType()),
            T.StructField(MARK, T.BooleanType()),
        ]
    )
    return map_in_arrow(deduped, _Router(job.schema, keys, files), schema)


def probe_adds(
    spark: SparkSession,
    deduped: DataFrame,
    job: Job,
    keys: tuple[str, ...],
    adds: list[AddFile],
) -> set[str]:
    """The paths of ``adds`` holding a key of the source: a Spark job (the rebase's probe)."""
    files = [DataFile.from_add(a) for a in adds]
    probe_job = dataclasses.replace(
        job,
        files=dict(enumerate(files)),
        slots=spread_files(files, len(job.slots) or 1),
    )
    routed = route_source(spark, deduped, probe_job, keys)
    grouped = routed.repartition(len(probe_job.slots), ROUTE).sortWithinPartitions(FID)
    tasks = map_in_arrow(grouped, _probe_task(probe_job, keys), RECORDS)
    return {
        bytes(r.payload).decode() for r in collect_records(tasks, "lakelog merge: rebase probe")
    }
