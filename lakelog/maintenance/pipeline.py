"""One flow for every rewrite, whatever runs its groups: a prepared run in, a report out.

A :class:`Prepared` run is a plan with everything resolved: made now by
:func:`~lakelog.maintenance.compaction.run.prepare_compaction` or
:func:`~lakelog.maintenance.clustering.run.prepare_clustering` (options checked and
filled from the table once), or a saved plan (:func:`prepare_plan`). :func:`run_prepared`
does the rest the same way for ``Table.compact``/``optimize``/``resume``, their Spark
twins and the CLI: a dry run, or a plan without groups, reports what the plan would do
and writes nothing; otherwise an executor rewrites and commits the groups
(:class:`ThreadExecutor` in this process; Spark's in :mod:`lakelog.spark.maintenance`),
and the report is built, logged, and raised as an error if every group failed.

What differs between compaction and clustering (commit parameters, the report's
fields, how one group is rewritten) is a :class:`RewriteKind`; what differs between
engines is a :class:`RewriteExecutor`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ..log.snapshot import Snapshot
from .executor import GroupRunner, ProgressCallback, RunOutcome, check_plan_table, execute_groups
from .groups import FileGroup, GroupResult, RewritePlan
from .options import ExecutionOptions, ExecutionSettings, check_flag
from .report import MaintenanceReport, raise_if_all_failed, rewrite_report

if TYPE_CHECKING:
    from ..core.handle import TableHandle

__all__ = [
    "Executed",
    "Prepared",
    "RewriteExecutor",
    "RewriteKind",
    "ThreadExecutor",
    "prepare_plan",
    "run_in_threads",
    "run_prepared",
]

PlanT = TypeVar("PlanT", bound=RewritePlan)


@dataclass(frozen=True)
class RewriteKind(Generic[PlanT]):
    """What a kind of rewrite (compaction, clustering) brings to the shared flow."""

    name: str
    """The report's operation: ``compact`` or ``optimize``."""
    operation: str
    """The commit's operation: ``COMPACT`` or ``OPTIMIZE``."""
    parameters: Callable[[PlanT], dict[str, Any]]
    """The commit's parameters, from the plan."""
    report_fields: Callable[[PlanT, Sequence[GroupResult]], dict[str, Any]]
    """The kind's own fields of the report (:func:`~lakelog.maintenance.report.rewrite_report`'s
    ``extra``), from the plan and the group results that landed; an engine's fields go
    over them."""
    runner: Callable[[TableHandle, PlanT, Snapshot | None, str], GroupRunner]
    """The in-process rewrite of one group: table, plan, the snapshot it was made from
    (None: a saved plan) and the run's lease id in; a :data:`GroupRunner` out."""


@dataclass(frozen=True)
class Prepared(Generic[PlanT]):
    """A rewrite ready to run: options resolved, plan made (or loaded)."""

    table: TableHandle
    kind: RewriteKind[PlanT]
    plan: PlanT
    execution: ExecutionSettings
    snapshot: Snapshot | None = None
    """The snapshot the plan was just made from; None for a saved plan, whose groups
    whose sources are gone since are dropped (reported as abandoned) before the run."""
    dry_run: bool = False
    started: float = field(default_factory=time.monotonic)
    """``time.monotonic()`` when preparation began (the report's duration counts it)."""
    plan_id: str | None = None
    """Resume this pending plan's claim instead of claiming anew (``Table.resume``)."""


@dataclass
class Executed:
    """What an executor committed and abandoned, and the report fields it adds."""

    outcome: RunOutcome
    extra: dict[str, Any] = field(default_factory=dict)


class RewriteExecutor(Protocol):
    """Runs a prepared plan's groups and commits them (threads here, or Spark jobs)."""

    def idle_extra(self, prepared: Prepared[Any]) -> dict[str, Any]:
        """The report fields of a run that rewrote nothing (a dry run, no group)."""
        ...

    def execute(self, prepared: Prepared[Any], progress: ProgressCallback | None) -> Executed:
        """Rewrite and commit the plan's groups."""
        ...

    def failure_advice(self, report: MaintenanceReport) -> str:
        """What to do when every group failed (the end of the error's message)."""
        ...


class ThreadExecutor:
    """The embedded executor: groups rewritten by threads of this process
    (:func:`lakelog.maintenance.executor.execute_groups`); it stops at the first group
    that fails and raises its error, so a report never holds failed groups."""

    def idle_extra(self, prepared: Prepared[Any]) -> dict[str, Any]:
        return {}

    def execute(self, prepared: Prepared[Any], progress: ProgressCallback | None) -> Executed:
        return Executed(run_in_threads(prepared, progress))

    def failure_advice(self, report: MaintenanceReport) -> str:
        return "Fix the cause of the first error and run again."


def run_in_threads(
    prepared: Prepared[Any],
    progress: ProgressCallback | None,
    *,
    on_failure: Callable[[FileGroup, Exception], None] | None = None,
) -> RunOutcome:
    """Rewrite and commit ``prepared``'s groups in threads of this process, each by its
    kind's runner (:func:`~lakelog.maintenance.executor.execute_groups`): the work of
    :class:`ThreadExecutor` and of the auto-compaction's executor, which passes
    ``on_failure`` to go on past a group that fails."""
    table, plan, kind = prepared.table, prepared.plan, prepared.kind

    def make_runner(lease_id: str) -> GroupRunner:
        return kind.runner(table, plan, prepared.snapshot, lease_id)

    return execute_groups(
        table,
        plan,
        make_runner,
        execution=prepared.execution,
        operation=kind.operation,
        parameters=kind.parameters(plan),
        progress=progress,
        read_snapshot=prepared.snapshot,
        plan_id=prepared.plan_id,
        on_failure=on_failure,
    )


def prepare_plan(
    table: TableHandle,
    kind: RewriteKind[PlanT],
    plan: PlanT,
    execution: ExecutionOptions | None = None,
    *,
    dry_run: bool = False,
    plan_id: str | None = None,
) -> Prepared[PlanT]:
    """A saved plan (or, with ``plan_id``, the pending rest of one) ready to run on
    ``table``; ``execution`` is resolved against the table's properties."""
    started = time.monotonic()
    check_flag("dry_run", dry_run)
    check_plan_table(table, plan)
    return Prepared(
        table=table,
        kind=kind,
        plan=plan,
        execution=(execution or ExecutionOptions()).resolve(table.properties),
        dry_run=dry_run,
        started=started,
        plan_id=plan_id,
    )


def run_prepared(
    prepared: Prepared[PlanT],
    executor: RewriteExecutor | None = None,
    *,
    progress: ProgressCallback | None = None,
) -> MaintenanceReport:
    """Report a dry run, or execute the plan with ``executor`` (default:
    :class:`ThreadExecutor`) and report what landed (see the module doc)."""
    executor = ThreadExecutor() if executor is None else executor
    plan, kind = prepared.plan, prepared.kind

    def report_of(outcome: RunOutcome, extra: Mapping[str, Any]) -> MaintenanceReport:
        report = rewrite_report(
            kind.name,
            plan,
            committed=outcome.committed,
            commits=outcome.commits,
            abandoned=outcome.abandoned,
            duration_s=time.monotonic() - prepared.started,
            dry_run=prepared.dry_run,
            paced_seconds=outcome.paced_seconds,
            extra={**kind.report_fields(plan, outcome.committed), **extra},
        )
        report.emit()
        return report

    if prepared.dry_run or not plan.groups:
        return report_of(RunOutcome(), executor.idle_extra(prepared))
    run = executor.execute(prepared, progress)
    report = report_of(run.outcome, run.extra)
    if report.failed_groups:
        raise_if_all_failed(report, what_to_do=executor.failure_advice(report))
    return report
