"""The names and the one rule of the change data feed that every part shares.

``docs/format.md``, "Change data feed (version 6)": change files hold the table's
columns (without partition columns) plus :data:`CHANGE_TYPE`; the feed adds
:data:`COMMIT_VERSION` and :data:`COMMIT_TIMESTAMP`. A commit that changes rows inside
files (:func:`needs_change_files`) has a complete feed only through its ``cdc``
actions. Writers (``lakelog.rowlevel``), the reader (``lakelog.scan.feed``), the Delta
view and Spark import these names from here.
"""

from __future__ import annotations

from typing import Final

from .actions import ChangeFile, Commit, CommitHeader

__all__ = [
    "CHANGE_DIR",
    "CHANGE_TYPE",
    "CHANGE_TYPES",
    "COMMIT_TIMESTAMP",
    "COMMIT_VERSION",
    "DELETE",
    "INSERT",
    "PROPERTY",
    "ROW_LEVEL_OPERATIONS",
    "UPDATE_POST",
    "UPDATE_PRE",
    "change_files",
    "needs_change_files",
]

PROPERTY: Final = "lakelog.change_data_feed"
"""The table property that turns recording change files on."""

CHANGE_DIR: Final = "_change_data"
"""The folder of change files, in the table root."""

CHANGE_TYPE: Final = "_change_type"
COMMIT_VERSION: Final = "_commit_version"
COMMIT_TIMESTAMP: Final = "_commit_timestamp"

INSERT: Final = "insert"
DELETE: Final = "delete"
UPDATE_PRE: Final = "update_preimage"
UPDATE_POST: Final = "update_postimage"
CHANGE_TYPES: Final[tuple[str, ...]] = (DELETE, UPDATE_PRE, UPDATE_POST, INSERT)

ROW_LEVEL_OPERATIONS: Final = frozenset({"DELETE", "UPDATE", "MERGE"})
"""Operations that always change rows inside files (``OVERWRITE`` does with ``where``)."""


def needs_change_files(commit: Commit | CommitHeader) -> bool:
    """Whether the commit changes rows inside files, so that only its ``cdc`` actions give
    its feed: a ``DELETE``, ``UPDATE`` or ``MERGE``, or an ``OVERWRITE`` with a ``where``
    parameter. Such a commit without ``cdc`` actions has no complete feed."""
    header = commit.header if isinstance(commit, Commit) else commit
    if header.operation in ROW_LEVEL_OPERATIONS:
        return True
    return header.operation == "OVERWRITE" and "where" in header.parameters


def change_files(commit: Commit) -> list[ChangeFile]:
    """The commit's ``cdc`` actions."""
    return [a for a in commit.actions if isinstance(a, ChangeFile)]
