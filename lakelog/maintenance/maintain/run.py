"""``maintain``: rank what one table (or every table of a catalog) needs, run the best
actions within a byte budget, and report.

:func:`maintain_tables` gathers each table's statistics (:mod:`.stats`), ranks every
candidate of every table together (:mod:`.model`), keeps those whose rewrite fits the
budget (``budget_bytes``, bytes read and written again by compaction, purge and
clustering; expire, vacuum and manifests rewrite nothing) and, unless ``dry_run``,
runs them in rank order, each through the operation that already exists:

* ``compact``: the compaction pipeline on the files the model chose (a plan on the log,
  claims, pacing; the planner's ``only``); the chosen partitions of one table are
  compacted by one run, so one commit, whose note lists them;
* ``purge``: the same, with ``min_file_size=1`` so only the files whose deletion
  vectors mark ``lakelog.deletion_vectors.purge_ratio`` of their rows are rewritten;
* ``cluster``: ``optimize`` with the declared clustering (incremental);
* ``manifests``: a manifest written at the latest version;
* ``expire`` and ``vacuum``: ``expire_snapshots`` and ``vacuum`` with the table's
  retention settings.

A round that rewrote a table ends with a manifest at its latest version, so that cold
opens do not replay the rewrite's commit. A rewrite's or expiry's commit records why,
in its parameters:
``maintain: {kind, score, reason}``, so ``history`` says why it happened. The model's
estimate chooses an action; the plan's own figures bound what it rewrites: a plan's
groups beyond what is left of the budget are not run. Over several tables, a table whose
statistics cannot be read is left out and reported (``unread``). A rewrite
runs on an executor given by the caller (``execute``: threads in this process by
default; Spark's in :mod:`lakelog.spark.maintain`). An action that fails is reported
with its error; the others still run.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from ...errors import InvalidArgumentError, LakelogError
from ...log.checkpoint import write_checkpoint
from ...properties import get_int
from ..claims import claimed_files
from ..cleanup.expire import expire_snapshots
from ..cleanup.vacuum import vacuum
from ..clustering.run import prepare_clustering
from ..compaction.planner import plan_compaction
from ..compaction.run import COMPACTION, prepare_compaction
from ..options import ClusteringOptions, CompactionOptions, ExecutionOptions, check_flag
from ..pipeline import Prepared, run_prepared
from ..report import MaintenanceReport
from .model import Candidate, candidates, choose, rank
from .report import ActionResult, MaintainReport, describe_partition
from .stats import table_stats

if TYPE_CHECKING:
    from ...core.handle import TableHandle

__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "CatalogLike",
    "RewriteRunner",
    "maintain_catalog",
    "maintain_table",
    "maintain_tables",
]

log = logging.getLogger("lakelog")

DEFAULT_BUDGET_BYTES = 1 << 30
"""Bytes one ``maintain`` round may rewrite unless told otherwise (1 GiB)."""

RewriteRunner = Callable[[Prepared[Any]], MaintenanceReport]
"""Runs a prepared rewrite (default: :func:`~..pipeline.run_prepared` on threads)."""


def _note(c: Candidate) -> dict[str, Any]:
    return {"maintain": {"kind": c.kind, "score": round(c.score, 6), "reason": c.reason}}


def _noted(prepared: Prepared[Any], note: dict[str, Any]) -> Prepared[Any]:
    """``prepared`` whose commits also record why ``maintain`` ran it (``note``)."""
    base = prepared.kind.parameters

    def parameters(plan: Any) -> dict[str, Any]:
        return {**base(plan), **note}

    kind = dataclasses.replace(prepared.kind, parameters=parameters)
    return dataclasses.replace(prepared, kind=kind)


def _within(prepared: Prepared[Any], budget: float) -> Prepared[Any]:
    """``prepared`` with only the plan's groups that fit ``budget`` (in plan order): the
    model's estimate chose the action, the plan's own figures bound what it rewrites."""
    groups, spent = [], 0
    for g in prepared.plan.groups:
        if spent + g.total_bytes > budget:
            continue
        groups.append(g)
        spent += g.total_bytes
    if len(groups) == len(prepared.plan.groups):
        return prepared
    plan = msgspec.structs.replace(prepared.plan, groups=tuple(groups))
    return dataclasses.replace(prepared, plan=plan)


def _partition_filter(c: Candidate) -> list[tuple[str, str, Any]] | None:
    if not c.partition:
        return None
    return [(k, "=", v) for k, v in c.partition.items()]


def _note_of(batch: Sequence[Candidate]) -> dict[str, Any]:
    """The ``maintain`` note of one compaction over the partitions of ``batch``."""
    if len(batch) == 1:
        return _note(batch[0])
    shown = "; ".join(f"{describe_partition(c)}: {c.reason}" for c in batch[:3])
    more = f"; and {len(batch) - 3} more" if len(batch) > 3 else ""
    return {
        "maintain": {
            "kind": "compact",
            "score": round(max(c.score for c in batch), 6),
            "reason": f"{len(batch)} partitions: {shown}{more}",
            "partitions": [dict(c.partition or {}) for c in batch],
        }
    }


def _compact(
    table: TableHandle,
    batch: Sequence[Candidate],
    execute: RewriteRunner,
    default_concurrency: int | None,
    budget: float,
) -> list[ActionResult]:
    """One compaction of the files the model chose in every partition of ``batch``
    (one plan, one commit), reported per partition."""
    snap = table.snapshot()
    plan = plan_compaction(
        snap,
        CompactionOptions(),
        exclude=claimed_files(table.storage, snap),
        only=[p for c in batch for p in c.paths],
    )
    prepared: Prepared[Any] = Prepared(
        table=table,
        kind=COMPACTION,
        plan=plan,
        execution=ExecutionOptions().resolve(
            snap.properties, default_concurrency=default_concurrency
        ),
        snapshot=snap,
    )
    prepared = _within(_noted(prepared, _note_of(batch)), budget)
    report = execute(prepared)
    lost = set(report.abandoned_groups)
    out = []
    for c in batch:
        done = sum(
            g.total_bytes
            for g in prepared.plan.groups
            if g.partition == dict(c.partition or {}) and g.group_id not in lost
        )
        landed = bool(done and report.commits)
        out.append(
            ActionResult(
                c,
                "done" if landed else "nothing",
                rewritten_bytes=done if landed else 0,
                version=report.version if landed else None,
            )
        )
    return out


def _run(
    table: TableHandle,
    c: Candidate,
    execute: RewriteRunner,
    default_concurrency: int | None,
    budget: float,
) -> ActionResult:
    execution = ExecutionOptions()
    prepared: Prepared[Any] | None = None
    if c.kind in ("compact", "purge"):
        options = CompactionOptions(
            partition_filter=_partition_filter(c),
            min_file_size=1 if c.kind == "purge" else None,
        )
        prepared = prepare_compaction(
            table, options, execution, default_concurrency=default_concurrency
        )
    elif c.kind == "cluster":
        prepared = prepare_clustering(
            table, ClusteringOptions(), execution, default_concurrency=default_concurrency
        )
    if prepared is not None:
        report = execute(_within(_noted(prepared, _note(c)), budget))
        return ActionResult(
            c,
            "done" if report.commits else "nothing",
            rewritten_bytes=report.rewritten_bytes,
            version=report.version,
        )
    if c.kind == "manifests":
        snap = table.snapshot()
        write_checkpoint(snap, leaf_files=get_int(snap.properties, "lakelog.manifest.leaf_files"))
        return ActionResult(c, "done", version=snap.version)
    if c.kind == "expire":
        expired = expire_snapshots(table, parameters=_note(c))
        done = expired.expire_commit_version is not None
        return ActionResult(c, "done" if done else "nothing", version=expired.expire_commit_version)
    cleaned = vacuum(table, dry_run=False)
    return ActionResult(c, "done" if cleaned.num_files else "nothing")


def maintain_tables(
    tables: Sequence[tuple[str, TableHandle]],
    *,
    budget_bytes: int | None = DEFAULT_BUDGET_BYTES,
    dry_run: bool = True,
    execute: RewriteRunner | None = None,
    default_concurrency: int | None = None,
    unread: dict[str, str] | None = None,
) -> MaintainReport:
    """Rank the candidates of every table together and run the best within the budget
    (see the module doc). ``tables``: (name, table) pairs; ``unread``: tables the caller
    could not open (name -> error), reported as such."""
    started = time.monotonic()
    check_flag("dry_run", dry_run)
    if budget_bytes is not None and (
        isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 0
    ):
        raise InvalidArgumentError(
            f"expected budget_bytes to be a whole number of bytes >= 0 or None (no bound), "
            f"found {budget_bytes!r}"
        )
    run_rewrite: RewriteRunner = execute if execute is not None else run_prepared
    by_name = dict(tables)
    found: list[Candidate] = []
    unread = dict(unread or {})
    for name, table in tables:
        try:
            found.extend(candidates(table_stats(table, name=name)))
        except LakelogError as e:
            if len(tables) == 1 and not unread:
                raise
            log.warning("maintain: could not read %s, left out: %s", name, e)
            unread[name] = f"{type(e).__name__}: {e}"
    chosen, left = choose(rank(found), budget_bytes)
    results: list[ActionResult] = []
    remaining = math.inf if budget_bytes is None else float(budget_bytes)
    pending = list(chosen)
    while pending:
        c = pending.pop(0)
        if dry_run:
            results.append(ActionResult(c, "planned"))
            continue
        batch = [c]
        if c.kind == "compact" and c.paths:  # a table's partitions in one compaction
            batch += [o for o in pending if o.kind == "compact" and o.paths and o.table == c.table]
            pending = [o for o in pending if o not in batch]
        table = by_name[c.table].refresh()
        try:
            if len(batch) > 1 or c.paths:
                done = _compact(table, batch, run_rewrite, default_concurrency, remaining)
            else:
                done = [_run(table, c, run_rewrite, default_concurrency, remaining)]
        except LakelogError as e:
            log.warning("maintain: %s of %s failed: %s", c.kind, c.table, e)
            error = f"{type(e).__name__}: {e}"
            done = [ActionResult(b, "failed", error=error) for b in batch]
        remaining -= sum(r.rewritten_bytes for r in done)
        results.extend(done)
    if not dry_run:
        _manifest_after_rewrites(by_name, results)
    return MaintainReport(
        dry_run=dry_run,
        budget_bytes=budget_bytes,
        actions=results,
        left=left,
        tables=sorted([name for name, _ in tables] + list(unread)),
        unread=unread,
        duration_s=time.monotonic() - started,
    )


REWRITES = ("compact", "purge", "cluster")


def _manifest_after_rewrites(
    tables: dict[str, TableHandle], results: Sequence[ActionResult]
) -> None:
    """A manifest at the latest version of each table a rewrite of this round changed:
    until the next one, every cold open (each query on a fresh handle) replays the
    rewrite's commit, one remove per file it merged (on a streaming table, a round's
    rewrite cost a query a quarter more than the same files after a manifest). Never
    fails the round."""
    names = {r.candidate.table for r in results if r.kind in REWRITES and r.status == "done"}
    for name in sorted(names):
        try:
            snap = tables[name].snapshot()
            write_checkpoint(
                snap, leaf_files=get_int(snap.properties, "lakelog.manifest.leaf_files")
            )
        except LakelogError as e:
            log.warning("maintain: no manifest after the rewrites of %s: %s", name, e)


def maintain_table(
    table: TableHandle,
    *,
    budget_bytes: int | None = DEFAULT_BUDGET_BYTES,
    dry_run: bool = True,
    execute: RewriteRunner | None = None,
    default_concurrency: int | None = None,
) -> MaintainReport:
    """:func:`maintain_tables` for one table (named by its URI)."""
    return maintain_tables(
        [(table.storage.uri, table)],
        budget_bytes=budget_bytes,
        dry_run=dry_run,
        execute=execute,
        default_concurrency=default_concurrency,
    )


class CatalogLike(Protocol):
    """What :func:`maintain_catalog` needs of a catalog (:class:`lakelog.catalog.Catalog`)."""

    def list_tables(self, namespace: str | None = None) -> list[str]: ...

    def load_table(self, name: str) -> TableHandle: ...


def maintain_catalog(
    catalog: CatalogLike,
    *,
    namespace: str | None = None,
    budget_bytes: int | None = DEFAULT_BUDGET_BYTES,
    dry_run: bool = True,
    execute: RewriteRunner | None = None,
    default_concurrency: int | None = None,
) -> MaintainReport:
    """:func:`maintain_tables` over every table of ``catalog`` (of ``namespace``; None:
    all), ranked together under one budget and named by their catalog names."""
    tables: list[tuple[str, TableHandle]] = []
    unread: dict[str, str] = {}
    for name in catalog.list_tables(namespace):
        try:
            tables.append((name, catalog.load_table(name)))
        except LakelogError as e:
            log.warning("maintain: could not open %s, left out: %s", name, e)
            unread[name] = f"{type(e).__name__}: {e}"
    return maintain_tables(
        tables,
        unread=unread,
        budget_bytes=budget_bytes,
        dry_run=dry_run,
        execute=execute,
        default_concurrency=default_concurrency,
    )
