"""The merge on the driver: its files' pruning, the jobs it runs, and its one ``rowlevel``
commit with the embedded rebase."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...filters import FileStatsColumns
from ...leases import Lease
from ...log.actions import AddFile, ChangeFile, DataFile
from ...log.file_index import stats_columns
from ...log.files import files_from_adds
from ...log.snapshot import Snapshot
from ...partitioning import STAGING_DIR
from ...rowlevel.base import Counts, RowChange, Written
from ...rowlevel.conflicts import RowLevelRebase
from ...rowlevel.execute import Context, FileOutcome
from ...rowlevel.result import MergeReport
from ...rowlevel.run import commit_outcomes
from ..read import columns_of, spark_url
from ..schema import to_spark_schema
from ..write import discard_staging
from .jobs import (
    FID,
    MARK,
    RECORDS,
    ROUTE,
    TASKS_PER_CORE,
    collect_records,
    decode_records,
    discard_files,
    driver_context,
    make_job,
    map_in_arrow,
    require_executors,
    route_of,
    session_cores,
)
from .routing import probe_adds, route_source
from .source import SourceFacts
from .tasks import MergeSpec, insert_task, merge_task

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ...core import TableHandle

__all__ = ["DriverMerge", "run_merge"]


class DriverMerge(RowChange):
    """The merge as the driver sees it: its options, its source's key bounds, and what
    the tasks reported; for the commit header, the result and the rebase's pruning."""

    operation = "MERGE"
    rebase_rewrites = False

    def __init__(
        self,
        spec: MergeSpec,
        schema: pa.Schema,
        facts: SourceFacts,
        parameters: dict[str, Any],
        extra: pa.Schema | None = None,
    ) -> None:
        self.spec = spec
        self.extra = extra
        """The types of the source columns Spark computes (Column values)."""
        self.schema = schema
        self.facts = facts
        self._parameters = parameters
        self.probe_columns = spec.keys
        self.conflict_columns = spec.keys
        self.inserted = 0

    def parameters(self) -> dict[str, Any]:
        return dict(self._parameters)

    def metrics(self) -> dict[str, Any]:
        return {
            "num_source_rows": self.facts.given,
            "num_source_duplicates": self.facts.given - self.facts.kept,
            "num_inserted_rows": self.inserted,
            "engine": "spark",
        }

    def candidates(self, snapshot: Snapshot) -> Sequence[DataFile]:
        files = list(snapshot.files())
        if self.spec.by_source:
            return files
        if not self.facts.keyed:
            return []
        keep = self.prune(snapshot.stats_columns)
        return [f for f, k in zip(files, keep.tolist(), strict=True) if k]

    def prune(self, files: FileStatsColumns) -> np.ndarray:
        """Per file: whether its partition values and statistics may hold a source key
        (min/max overlap per key column; a partition key's values among the source's)."""
        n = len(files.num_rows)
        if self.spec.by_source:
            return np.ones(n, dtype=bool)
        if not self.facts.keyed:
            return np.zeros(n, dtype=bool)
        keep = np.ones(n, dtype=bool)
        for k in self.spec.keys:
            t = self.schema.field(k).type
            if pa.types.is_floating(t):
                continue  # bounds never hold NaN
            if k in files.partition and k in self.facts.values:
                values = pa.array(self.facts.values[k], t)
                hit = pc.is_in(files.partition[k], value_set=values)
                keep &= np.asarray(hit.fill_null(False).to_numpy(zero_copy_only=False), bool)
                continue
            low, high = _scalar(self.facts.low.get(k), t), _scalar(self.facts.high.get(k), t)
            if low is None or high is None:
                continue
            if k in files.partition:
                lo = hi = files.partition[k]
            else:
                lo, hi = files.min.get(k), files.max.get(k)
            if lo is None or hi is None:
                continue
            overlap = pc.and_kleene(pc.greater_equal(hi, low), pc.less_equal(lo, high))
            keep &= np.asarray(overlap.fill_null(True).to_numpy(zero_copy_only=False), bool)
            if k in files.partition:  # a null partition value holds no key
                keep &= np.asarray(lo.is_valid().to_numpy(zero_copy_only=False), bool)
        return keep

    def conflicts(self, batch: pa.RecordBatch) -> bool:
        # only with when_not_matched_by_source="delete" (any row): key probes run in Spark
        return bool(batch.num_rows > 0)

    def probe(self, batch: pa.RecordBatch) -> Counts:
        raise NotImplementedError("the Spark merge probes files in its tasks")

    def apply(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, Counts]:
        raise NotImplementedError("the Spark merge rewrites files in its tasks")

    def split(self, batch: pa.RecordBatch) -> tuple[np.ndarray, pa.RecordBatch | None, Counts]:
        raise NotImplementedError("the Spark merge marks files in its tasks")


def _scalar(value: Any, t: pa.DataType) -> pa.Scalar | None:
    """A source bound from the aggregate as a scalar of the key's type (timestamps and
    dates arrive as microseconds and days since the epoch)."""
    if value is None:
        return None
    try:
        if pa.types.is_timestamp(t):
            return pa.scalar(int(value), pa.timestamp("us", tz=t.tz)).cast(t, safe=False)
        if pa.types.is_date(t):
            return pa.scalar(int(value), pa.int32()).cast(pa.date32()).cast(t)
        return pa.scalar(value, t)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None


class _SparkRebase(RowLevelRebase):
    """The embedded rebase; whether a concurrently added file holds a source key is
    answered by a Spark job over the source, which only the executors hold."""

    probe: Callable[[list[AddFile]], set[str]]

    def conflicting(self, added: Sequence[AddFile]) -> list[AddFile]:
        change = self.change
        assert isinstance(change, DriverMerge)
        if change.spec.by_source:
            return super().conflicting(added)
        adds = [a for a in added if a.data_change and a.num_rows > 0]
        if not adds:
            return []
        files = stats_columns(files_from_adds(adds), self.ctx.schema, self.ctx.partition_by)
        adds = [a for a, k in zip(adds, change.prune(files).tolist(), strict=True) if k]
        if not adds:
            return []
        hits = self.probe(adds)
        return [a for a in adds if a.path in hits]


def run_merge(
    spark: SparkSession,
    table: TableHandle,
    snap: Snapshot,
    change: DriverMerge,
    candidates: Sequence[DataFile],
    deduped: DataFrame,
    insert: bool,
    start: float,
) -> MergeReport:
    from pyspark.sql import types as T

    spec = change.spec
    storage = table.storage
    with Lease.acquire(storage, operation="MERGE", properties=snap.properties) as lease:
        staging = f"{STAGING_DIR}/merge-{lease.lease_id}"
        job = make_job(table, snap, lease, candidates, session_cores(spark))
        outcomes: list[FileOutcome] = []
        new: list[AddFile] = []
        changes: list[ChangeFile] = []
        last: dict[str, int] = {}  # identity marks of the inserts
        numbered: list[str] = []
        try:
            require_executors(spark)
            matched_paths: list[str] = []
            if candidates:
                routed = route_source(spark, deduped, job, spec.keys)
                if spec.by_source:  # every file, with or without source rows
                    marks = spark.createDataFrame(
                        [(fid, route_of(job, fid), True) for fid in job.files],
                        T.StructType(
                            [
                                T.StructField(FID, T.IntegerType()),
                                T.StructField(ROUTE, T.IntegerType()),
                                T.StructField(MARK, T.BooleanType()),
                            ]
                        ),
                    )
                    routed = routed.unionByName(marks, allowMissingColumns=True)
                grouped = routed.repartition(len(job.slots), ROUTE).sortWithinPartitions(FID)
                tasks = map_in_arrow(grouped, merge_task(job, spec), RECORDS)
                done = decode_records(collect_records(tasks, "lakelog merge"))
                outcomes, new, changes = done.outcomes, done.new, done.changes
                matched_paths = done.matched
            if insert:
                rows = deduped
                if matched_paths:
                    # the tasks staged the matched keys under the table's (logical) names
                    # (not data files: no physical names); read exactly those columns
                    keyed = pa.schema([snap.schema.field(k) for k in spec.keys])
                    hit = spark.read.schema(to_spark_schema(keyed)).parquet(
                        *(spark_url(storage, p) for p in matched_paths)
                    )
                    rows = rows.join(hit, on=list(spec.keys), how="left_anti")
                # a few files (two tasks per core), not one per shuffle partition; a
                # partition's rows in one task
                files = TASKS_PER_CORE * session_cores(spark)
                if snap.partition_by:
                    rows = rows.repartition(files, *columns_of(snap.partition_by))
                else:
                    rows = rows.coalesce(files)
                rows = rows.select(*columns_of([*snap.schema.names, *spec.computed]))
                task = insert_task(job, spec, change.extra)
                written = map_in_arrow(rows, task, RECORDS)
                inserted = decode_records(collect_records(written, "lakelog merge: inserts"))
                new += inserted.new
                changes += inserted.changes
                numbered = [a.path for a in inserted.new]
                for task_marks in inserted.marks:  # the last value given out wins
                    for column, mark in task_marks.items():
                        before = last.get(column)
                        if before is None or (mark - before) * spec.step_of(column) > 0:
                            last[column] = mark
                change.inserted = sum(a.num_rows for a in inserted.new)
        except BaseException:
            discard_files(storage, outcomes, new, changes)
            discard_staging(storage, staging)
            raise
        probe_lock = threading.Lock()

        def probe(adds: list[AddFile]) -> set[str]:
            with probe_lock:
                return probe_adds(spark, deduped, job, spec.keys, adds)

        def rebase(ctx: Context, ch: RowChange, metrics: Any) -> RowLevelRebase:
            r = _SparkRebase(ctx, ch, metrics)
            r.probe = probe
            return r

        try:
            result = commit_outcomes(
                table,
                change,
                snap,
                driver_context(table, snap),
                outcomes,
                Written(tuple(new), change.inserted),
                lease=lease,
                start=start,
                rebase=rebase,
                changes=changes,
                marks=last,
                numbered=numbered,
            )
        finally:
            discard_staging(storage, staging)
        fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
        return MergeReport(
            **fields,
            source_rows=change.facts.given,
            source_duplicates=change.facts.given - change.facts.kept,
        )
