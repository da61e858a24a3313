"""Restore: make the latest version read exactly like an earlier one, in one commit.

The commit removes every file live now and not then, adds back every file live then and
not now (with the entries recorded for it then), and puts back that version's metadata
(schema, partitioning, properties) when it differs. Nothing is rewritten: the files of
the earlier version must still exist, and are checked before anything is committed
(``expire_snapshots`` and ``vacuum`` delete files only older versions reference).
Recorded app versions (exactly-once ingest) are kept. See ``docs/format.md``, "Restore".
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from .. import threads
from ..errors import CommitConflictError, DataFileMissingError, InvalidArgumentError
from ..log.actions import Action, Commit, DataFile, ExpireVersions, Metadata
from ..log.snapshot import Snapshot
from ..storage import Storage
from ..transaction import CommitResult

if TYPE_CHECKING:
    from ..core.handle import TableHandle

__all__ = ["restore_table"]

_EXISTS_WORKERS = 16
_SERIAL = 4
_NAMED = 10


def restore_table(
    table: TableHandle, version: int | None = None, *, as_of: dt.datetime | None = None
) -> CommitResult:
    """Commit the latest version back to ``version`` (or the version current at
    ``as_of``); ``skipped`` when it already reads like it."""
    if version is None and as_of is None:
        raise InvalidArgumentError(
            "expected the version to restore: pass version=N or as_of=<datetime> "
            "(table.history() lists the versions)."
        )
    latest = table.snapshot()  # refreshed
    target = table.snapshot(version, as_of=as_of)
    if target.version > latest.version:  # committed since the refresh above
        latest = table.snapshot()
    actions: list[Action] = []
    md = _metadata(latest.metadata, target.metadata)
    if md is not None:
        actions.append(md)
    now_files = {f.path: f for f in latest.files()}
    then_files = {f.path: f for f in target.files()}
    # a file in both with another deletion vector is removed and added back with N's
    revectored = [
        f for p, f in then_files.items() if p in now_files and now_files[p].deleted != f.deleted
    ]
    removed = [f for p, f in now_files.items() if p not in then_files]
    removed += [now_files[f.path] for f in revectored]
    restored = [f for p, f in then_files.items() if p not in now_files]
    if not actions and not removed and not restored:
        return CommitResult(version=latest.version, attempts=0, operation="RESTORE", skipped=True)
    _check_exist(table.storage, restored, target.version)
    now = int(time.time() * 1000)
    actions += [f.to_remove(deletion_ms=now) for f in removed]
    actions += [f.to_add() for f in [*restored, *revectored]]
    parameters: dict[str, Any] = {"version": target.version}
    if as_of is not None:
        parameters["as_of"] = as_of.isoformat()
    return table.commit(
        actions,
        operation="RESTORE",
        kind="overwrite",
        read_snapshot=latest,
        parameters=parameters,
        metrics={
            "num_removed_files": len(removed),
            "num_removed_bytes": sum(f.size_bytes for f in removed),
            "num_restored_files": len(restored),
            "num_restored_bytes": sum(f.size_bytes for f in restored),
        },
        rebase=_KeepReadable(target),
    )


def _metadata(latest: Metadata, target: Metadata) -> Metadata | None:
    """The metadata action that puts ``target``'s schema, partitioning and properties
    back (None: they are the latest's already). Never lowers the format version."""
    same = (
        latest.schema == target.schema
        and latest.partition_by == target.partition_by
        and latest.properties == target.properties
    )
    if same:
        return None
    return msgspec.structs.replace(
        latest,
        schema=target.schema,
        partition_by=target.partition_by,
        properties=dict(target.properties),
        format_version=max(latest.format_version, target.format_version),
    )


def _check_exist(storage: Storage, files: Sequence[DataFile], version: int) -> None:
    """Refuse (nothing committed) when a file to add back is gone."""
    if not files:
        return
    if len(files) <= _SERIAL or storage.protocol in ("file", "local", "memory"):
        present = [storage.exists(f.path) for f in files]  # a stat each: threads cost more
    else:  # one request each on object stores: in parallel
        with threads.pool("lakelog-exists", min(_EXISTS_WORKERS, len(files))) as pool:
            present = list(pool.map(lambda f: storage.exists(f.path), files))
    missing = [f.path for f, ok in zip(files, present, strict=True) if not ok]
    if not missing:
        return
    named = ", ".join(repr(p) for p in missing[:_NAMED])
    more = f" and {len(missing) - _NAMED} more" if len(missing) > _NAMED else ""
    raise DataFileMissingError(
        f"expected the data files of version {version} that the latest version no longer "
        f"has to still exist, found {len(missing)} of {len(files)} deleted ({named}{more}): "
        f"expire_snapshots or vacuum removed them, or they were deleted outside lakelog. "
        f"Nothing was committed; restore a later version whose files are all present "
        f"(table.history() lists them), or put the files back from a backup first.",
        path=missing[0],
        version=version,
    )


class _KeepReadable:
    """Rebase check of a restore: a winner that expired the restored version may delete
    the files the restore adds back, so it conflicts (the overwrite rules cover the rest)."""

    def __init__(self, target: Snapshot) -> None:
        self.version = target.version

    def __call__(self, winners: Sequence[Commit], actions: list[Action]) -> list[Action]:
        for w in winners:
            for a in w.actions:
                if isinstance(a, ExpireVersions) and a.oldest_version > self.version:
                    raise CommitConflictError(
                        f"expected version {self.version} to stay readable while it is "
                        f"restored, found it expired by version {w.header.version} "
                        f"(expire_snapshots up to {a.oldest_version}); its files may be "
                        f"deleted. Restore version {a.oldest_version} or later.",
                        winning_version=w.header.version,
                    )
        return actions
