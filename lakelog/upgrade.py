"""Upgrading a table to the newest format version (``Table.upgrade``, ``lakelog upgrade``).

A table declaring an older format version first gets a ``metadata`` commit declaring
the newest one (:data:`~lakelog.log.format.NEW_TABLE`: version 3 lets maintenance
runs claim their files); like every metadata change it conflicts with concurrent
commits, and is retried by running upgrade again. Then the latest version gets a
version-2 manifest (root and leaves) unless it has one, replacing a version-1 manifest
there (a version-1 table would move to that layout by itself at its next checkpoint).
Running it again is a no-op (``docs/format.md``, "Upgrading a table").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from .errors import CorruptLogError
from .log.checkpoint import write_checkpoint
from .log.format import NEW_TABLE, ROOTS
from .log.manifests import manifest_path, read_manifest_header, read_root
from .properties import get_int

if TYPE_CHECKING:
    from .core.handle import TableHandle

__all__ = ["UpgradeReport", "upgrade_table"]


@dataclass(frozen=True)
class UpgradeReport:
    """What ``upgrade`` found and did."""

    version: int
    """The version whose manifest is now a version-2 root."""
    previous_format: int | None
    """Layout of the manifest at that version before (None: there was none)."""
    written: bool
    """Whether this run wrote the root (False: it was there already)."""
    leaves: int
    files: int
    declared_before: int = NEW_TABLE
    """The format version the table declared before (its ``metadata`` action)."""
    declared: int = NEW_TABLE
    """The format version it declares now."""

    def summary(self) -> str:
        declared = (
            f"declared format version {self.declared} (was {self.declared_before}); "
            if self.declared != self.declared_before
            else ""
        )
        return declared + self._layout()

    def _layout(self) -> str:
        if not self.written:
            return (
                f"version {self.version} already has a format version {ROOTS.version} manifest "
                f"({self.leaves} leaves, {self.files} files); nothing to do"
            )
        before = (
            "no manifest"
            if self.previous_format is None
            else f"a format version {self.previous_format} manifest"
        )
        return (
            f"version {self.version}: wrote a format version {ROOTS.version} manifest "
            f"({self.leaves} leaves, {self.files} files) in place of {before}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "format_version": ROOTS.version,
            "previous_format": self.previous_format,
            "written": self.written,
            "declared_before": self.declared_before,
            "declared": self.declared,
            "leaves": self.leaves,
            "files": self.files,
        }


def upgrade_table(table: TableHandle) -> UpgradeReport:
    """Declare the newest format version, then write a version-2 manifest at the latest
    version of ``table`` unless it has one."""
    snap = table.refresh().snapshot()
    declared_before = snap.metadata.format_version
    if declared_before < NEW_TABLE:
        md = msgspec.structs.replace(snap.metadata, format_version=NEW_TABLE)
        table.commit(
            [md],
            operation="UPGRADE",
            kind="metadata",
            read_snapshot=snap,
            parameters={"format_version": NEW_TABLE, "previous": declared_before},
        )
        snap = table.snapshot()
    storage = table.storage
    before = read_manifest_header(storage, snap.version)
    if before is not None and ROOTS.declared_by(before.format_version):
        root = read_root(storage, snap.version)
        if root is not None:
            return UpgradeReport(
                snap.version,
                before.format_version,
                False,
                len(root),
                root.header.num_files,
                declared_before=declared_before,
            )
    leaf_files = get_int(snap.properties, "lakelog.manifest.leaf_files")
    write_checkpoint(snap, leaf_files=leaf_files, format_version=ROOTS.version)
    root = read_root(storage, snap.version)
    if root is None:
        raise CorruptLogError(
            f"expected the manifest just written at {manifest_path(snap.version)} of "
            f"{storage.uri} to read back, found it missing or damaged; check the storage "
            f"and run upgrade again."
        )
    return UpgradeReport(
        snap.version,
        None if before is None else before.format_version,
        True,
        len(root),
        root.header.num_files,
        declared_before=declared_before,
    )
