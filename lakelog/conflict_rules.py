"""The conflict rules of a transaction (:mod:`lakelog.transaction`): whether its
actions can rebase over the commits that won the race. Pure: nothing is read.

Conflict rules (``kind``):

* ``append``: adds only; never conflicts with appends or rewrites.
* ``rewrite``: ``data_change=false`` remove+add (compaction, clustering);
  conflicts only when a winner removed one of the files it removes.
* ``overwrite``/``delete``: conflicts when a winner added or removed files in
  the partitions it replaces (the whole table when unpartitioned), or removed
  one of the files it removes.
* ``rowlevel``: a row-level change (delete, update, merge, overwrite with a
  predicate): ``data_change=true`` remove+add of the files holding changed rows.
  Conflicts when a winner removed one of the files it removes; its rebase
  callback (:mod:`lakelog.rowlevel.conflicts`) also reads the winners' added
  rows that it would have matched. See ``docs/format.md``, "Conflict rules for
  row-level changes".
* ``metadata``: a schema, partitioning or property change; conflicts with
  every winner. And every transaction conflicts with a winning metadata change,
  except an append of data files, which rebases over a change of properties alone
  (its files do not depend on them; :func:`same_shape`), also when its base was
  expired meanwhile.
* An ``app_txn`` action (exactly-once ingest) conflicts with a winner that recorded
  the same app id at the same or a later version: :class:`AppVersionCommittedError`,
  which writers report as a skipped write.
* An expiry (an ``expire`` action, committed with kind ``append``) adds and
  removes no files: it conflicts with nothing but a metadata change, and no
  transaction conflicts with it.
* So do a maintenance run's ``claim`` and ``release`` (kind ``append``); the claiming
  run's rebase callback drops the groups a winner claimed or removed
  (:mod:`lakelog.maintenance.claims`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from .app_transactions import check_app_versions
from .errors import CommitConflictError
from .io.guards import without_marks
from .log.actions import Action, AddFile, AppTransaction, Commit, Metadata, RemoveFile

__all__ = ["Kind", "check_conflicts", "data_append", "marks_only", "same_shape"]

Kind = Literal["append", "rewrite", "overwrite", "delete", "metadata", "rowlevel"]
"""The conflict rules a commit follows (see the module's docstring)."""


def _partition_key(partition: Mapping[str, str | None]) -> tuple[tuple[str, str | None], ...]:
    return tuple(sorted(partition.items(), key=lambda kv: kv[0]))


def _winner_apps(commit: Commit) -> tuple[dict[str, int], dict[str, int]]:
    versions: dict[str, int] = {}
    for a in commit.actions:
        if isinstance(a, AppTransaction) and a.app_version > versions.get(a.app_id, -1):
            versions[a.app_id] = a.app_version
    return versions, dict.fromkeys(versions, commit.header.version)


def data_append(kind: Kind, actions: Sequence[Action]) -> bool:
    """Whether ``actions`` only add rows (data files, and an app version): what a
    property change cannot affect."""
    return kind == "append" and all(
        (isinstance(a, AddFile) and a.data_change) or isinstance(a, AppTransaction) for a in actions
    )


def same_shape(a: Metadata, b: Metadata) -> bool:
    """Whether two metadata actions agree on everything files are written against:
    the table, its schema, partitioning and format version (not its properties)."""
    return (
        a.table_id == b.table_id
        and a.partition_by == b.partition_by
        and a.format_version == b.format_version
        and (
            a.schema == b.schema
            or without_marks(a.arrow_schema()).equals(
                without_marks(b.arrow_schema()), check_metadata=True
            )
        )
    )


def marks_only(a: Metadata, b: Metadata) -> bool:
    """Whether two metadata actions differ at most by identity high-water marks (a
    write that gave out identity values, format.md "Constraints, generated and identity
    columns"): nothing a writer depends on but the marks themselves."""
    return a.properties == b.properties and same_shape(a, b)


def _metadata_conflict(
    kind: Kind,
    actions: Sequence[Action],
    read_metadata: Metadata | None,
    winner: Metadata,
    v: int,
    operation: str,
) -> CommitConflictError | None:
    """The conflict a winning metadata change at ``v`` makes, or None: a data append
    rebases over a change of properties alone, since its files do not depend on them."""
    refresh = "Refresh the table (table.refresh()) and write again."
    if read_metadata is not None and kind != "metadata" and marks_only(winner, read_metadata):
        return None  # identity values given out: the marks are carried (_carry_marks)
    if read_metadata is None or not data_append(kind, actions):
        return CommitConflictError(
            f"expected no concurrent table change, found a metadata/schema change in "
            f"version {v} ({operation}). Read the table again (table.refresh()) and retry.",
            winning_version=v,
        )
    if same_shape(winner, read_metadata):
        return None
    return CommitConflictError(
        f"expected the schema, partitioning and format version this append was written "
        f"against, found them changed by version {v} ({operation}). {refresh}",
        winning_version=v,
    )


def check_conflicts(
    *,
    kind: Kind,
    actions: Sequence[Action],
    winners: Sequence[Commit],
    replaced_partitions: Sequence[Mapping[str, str | None]] | None = None,
    read_metadata: Metadata | None = None,
    rebased_removes: frozenset[str] = frozenset(),
) -> None:
    """Raise :class:`CommitConflictError` if ``actions`` cannot rebase over ``winners``.

    ``replaced_partitions`` is the overwrite scope (None = whole table).
    ``read_metadata``: the metadata the actions were made against; given, an append of
    data files rebases over a winner that changed only properties.
    ``rebased_removes``: paths of removes a rebase callback added for files the
    ``winners`` added (it checked them itself): not compared with their removes.
    Pure: nothing is read.
    """
    my_removes = {a.path for a in actions if isinstance(a, RemoveFile)} - rebased_removes
    scope = (
        None if replaced_partitions is None else {_partition_key(p) for p in replaced_partitions}
    )
    for w in winners:
        v = w.header.version
        check_app_versions(actions, *_winner_apps(w))  # the same batch landed first
        for a in w.actions:
            if isinstance(a, Metadata):
                error = _metadata_conflict(kind, actions, read_metadata, a, v, w.header.operation)
                if error is not None:
                    raise error
        if kind == "metadata":
            raise CommitConflictError(
                f"expected version {v - 1} to still be the latest for this metadata change, "
                f"found version {v} ({w.header.operation}) committed concurrently. Read the "
                f"table again and retry.",
                winning_version=v,
            )
        if kind == "append":
            continue
        lost = sorted(
            a.path for a in w.actions if isinstance(a, RemoveFile) and a.path in my_removes
        )
        if lost and kind == "rowlevel":
            raise CommitConflictError(
                f"expected files {lost[:5]}{' ...' if len(lost) > 5 else ''}, which this "
                f"change rewrites, to still be live, found them removed by version {v} "
                f"({w.header.operation}). Run the change again: it re-reads the table and "
                f"rewrites the files that hold the rows now.",
                winning_version=v,
                conflicting_files=tuple(lost),
            )
        if lost:
            raise CommitConflictError(
                f"expected files {lost[:5]}{' ...' if len(lost) > 5 else ''} to still be live, "
                f"found them removed by version {v} ({w.header.operation}). The files this "
                f"{kind} replaces were changed concurrently; read the table again and retry.",
                winning_version=v,
                conflicting_files=tuple(lost),
            )
        if kind in ("overwrite", "delete"):
            touched = [
                a.path
                for a in w.actions
                if isinstance(a, (AddFile, RemoveFile))
                and (scope is None or _partition_key(a.partition) in scope)
            ]
            if touched:
                where = "the table" if scope is None else "the partitions it replaces"
                raise CommitConflictError(
                    f"expected no concurrent change in {where}, found version {v} "
                    f"({w.header.operation}) adding or removing {touched[:5]}. Read the "
                    f"table again and retry the {kind}.",
                    winning_version=v,
                    conflicting_files=tuple(touched),
                )
