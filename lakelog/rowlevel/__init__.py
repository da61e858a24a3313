"""Row-level changes: delete, update, merge and overwrite of the rows a predicate selects.

Every change is plan -> rewrite -> commit (:mod:`.run`) over one interface
(:class:`~.base.RowChange`): a pure planner picks candidate files from the
snapshot with lakelog's pruning, an executor reads one candidate at a time per
worker and rewrites only files that hold a row to change, and one commit of
``data_change=true`` removes and adds lands it under the ``rowlevel`` conflict
rules (``docs/format.md``, "Conflict rules for row-level changes").

Invariants:

* The rest of a rewritten file is kept row for row, in the same order; updated
  rows stay where they were (unless their partition changes).
* A change that changes nothing commits nothing; bad arguments are refused
  before anything is written, and any failure leaves the table unchanged.
* Memory holds the merge source (if any) plus one batch per worker, never a file
  group, partition or table.

Modules: :mod:`.predicate` (delete, update, overwrite), :mod:`.merge` (with its WHEN
clauses, :mod:`.clauses`),
:mod:`.execute` (probe and rewrite), :mod:`.conflicts` (the rebase check),
:mod:`.run`, :mod:`.result`, :mod:`.read`. Schema evolution and restore, the
table-level changes of the same issue, live beside them in :mod:`.schema` and
:mod:`.restore`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..core import write_options_from
from ..errors import InvalidArgumentError
from ..io.guards import refuse_given_identity
from .clauses import (
    MergeClause,
    TextReader,
    when_matched_delete,
    when_matched_update,
    when_not_matched_by_source_delete,
    when_not_matched_by_source_update,
    when_not_matched_insert,
)
from .merge import MergeChange
from .predicate import DeleteChange, OverwriteChange, UpdateChange, Where
from .result import ChangeResult, FileChange, MergeReport
from .run import run_change

if TYPE_CHECKING:
    from ..core.handle import TableHandle
    from ..filters import FilterLike

__all__ = [
    "ChangeResult",
    "FileChange",
    "MergeClause",
    "MergeReport",
    "delete_rows",
    "merge_rows",
    "overwrite_rows",
    "update_rows",
    "when_matched_delete",
    "when_matched_update",
    "when_not_matched_by_source_delete",
    "when_not_matched_by_source_update",
    "when_not_matched_insert",
]


def _dry_run(value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"expected dry_run to be True or False, found {value!r}")
    return value


def delete_rows(table: TableHandle, where: FilterLike, *, dry_run: bool = False) -> ChangeResult:
    """Delete the rows matching ``where`` (see :meth:`lakelog.Table.delete`)."""
    dry = _dry_run(dry_run)
    snap = table.snapshot()
    change = DeleteChange(Where(where, snap.schema, operation="DELETE"))
    return run_change(table, change, snap, dry_run=dry)


def update_rows(
    table: TableHandle, where: FilterLike, assignments: Mapping[str, Any], *, dry_run: bool = False
) -> ChangeResult:
    """Set columns of the rows matching ``where`` (see :meth:`lakelog.Table.update`)."""
    dry = _dry_run(dry_run)
    snap = table.snapshot()
    if isinstance(assignments, Mapping):
        refuse_given_identity(assignments, snap.schema, where="the update's set=")
    change = UpdateChange(Where(where, snap.schema, operation="UPDATE"), snap.schema, assignments)
    return run_change(table, change, snap, dry_run=dry)


def overwrite_rows(table: TableHandle, data: Any, where: FilterLike) -> ChangeResult:
    """Replace the rows matching ``where`` by ``data`` (see :meth:`lakelog.Table.overwrite`)."""
    snap = table.snapshot()
    change = OverwriteChange(
        Where(where, snap.schema, operation="OVERWRITE"),
        snap.schema,
        snap.partition_by,
        data,
        write_options_from(snap.properties),
        spec=snap.partition_spec,
    )
    return run_change(table, change, snap)


def merge_rows(
    table: TableHandle,
    source: Any,
    on: Any,
    *,
    when_matched: Any = "update",
    when_not_matched: Any = "insert",
    when_not_matched_by_source: Any = "ignore",
    duplicates: str = "error",
    dry_run: bool = False,
    text: TextReader | None = None,
) -> MergeReport:
    """Upsert ``source`` by the key columns ``on`` (see :meth:`lakelog.Table.merge`);
    ``text`` reads the clauses' SQL strings."""
    dry = _dry_run(dry_run)
    snap = table.snapshot()
    change = MergeChange(
        snap.schema,
        snap.partition_by,
        source,
        on,
        when_matched=when_matched,
        when_not_matched=when_not_matched,
        when_not_matched_by_source=when_not_matched_by_source,
        duplicates=duplicates,
        options=write_options_from(snap.properties),
        text=text,
        spec=snap.partition_spec,
    )
    result = run_change(table, change, snap, dry_run=dry)
    assert isinstance(result, MergeReport)
    return result
