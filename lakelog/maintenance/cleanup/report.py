"""What ``expire_snapshots`` and ``vacuum`` deleted, or would delete in a dry run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..report import human_bytes

__all__ = ["ExpireReport", "VacuumReport"]


@dataclass(frozen=True)
class ExpireReport:
    """Outcome of :meth:`lakelog.Table.expire_snapshots`.

    ``data_files`` and ``log_files`` are root-relative paths deleted (or, with
    ``dry_run``, that would be); ``data_bytes`` sums the sizes the log records.
    """

    dry_run: bool
    latest_version: int
    oldest_version: int
    """Oldest readable version after the expiry."""
    previous_oldest_version: int
    """Oldest readable version before it."""
    expire_commit_version: int | None
    """Version that records the expiry (None when nothing new expired, or a dry run)."""
    data_files: tuple[str, ...]
    data_bytes: int
    log_files: tuple[str, ...]
    duration_s: float

    @property
    def versions_expired(self) -> int:
        """Versions that stopped being readable (or would) in this run."""
        return self.oldest_version - self.previous_oldest_version

    @property
    def num_data_files(self) -> int:
        return len(self.data_files)

    @property
    def num_log_files(self) -> int:
        return len(self.log_files)

    def to_dict(self, *, paths: bool = True) -> dict[str, Any]:
        """Plain JSON-ready form; ``paths=False`` leaves out the path lists."""
        out: dict[str, Any] = {
            "dry_run": self.dry_run,
            "latest_version": self.latest_version,
            "oldest_version": self.oldest_version,
            "previous_oldest_version": self.previous_oldest_version,
            "versions_expired": self.versions_expired,
            "expire_commit_version": self.expire_commit_version,
            "num_data_files": self.num_data_files,
            "data_bytes": self.data_bytes,
            "num_log_files": self.num_log_files,
            "duration_s": round(self.duration_s, 6),
        }
        if paths:
            out["data_files"] = list(self.data_files)
            out["log_files"] = list(self.log_files)
        return out

    def summary(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        return (
            f"expired {self.versions_expired} versions (oldest readable: "
            f"{self.oldest_version}, latest: {self.latest_version}); {verb} "
            f"{self.num_data_files} data files ({human_bytes(self.data_bytes)}) and "
            f"{self.num_log_files} log files in {self.duration_s:.2f}s"
        )


@dataclass(frozen=True)
class VacuumReport:
    """Outcome of :meth:`lakelog.Table.vacuum`.

    ``files`` are the root-relative paths of the unreferenced files deleted
    (or, with ``dry_run``, that would be); ``bytes`` their listed sizes.
    """

    dry_run: bool
    older_than_s: float
    oldest_version: int
    latest_version: int
    files: tuple[str, ...]
    bytes: int
    files_scanned: int
    """Files found under the root that vacuum considered (log folder, nested tables and
    hidden files excluded)."""
    files_referenced: int
    """Scanned files that a retained version references (kept)."""
    files_too_young: int
    """Unreferenced files kept because they are younger than ``older_than``."""
    nested_tables: tuple[str, ...]
    """Folders holding another table, never entered."""
    duration_s: float
    files_hidden: int = 0
    """Files kept because their name or a folder above them is hidden (``_``/``.`` first:
    other engines' markers and checksums); not counted in ``files_scanned``."""
    files_leased: int = 0
    """Unreferenced files kept because a live writer lease covers them (a writer has
    not committed them yet), whatever their age."""
    live_leases: int = 0
    """Writer leases live when vacuum read them."""
    expired_leases: tuple[str, ...] = ()
    """Lease files of expired leases deleted (or, with ``dry_run``, that would be)."""
    finished_plans: tuple[str, ...] = ()
    """Plan files of maintenance plans no longer pending, deleted (or, with ``dry_run``,
    that would be); see ``docs/format.md``, "Maintenance plans and claims"."""

    @property
    def num_files(self) -> int:
        return len(self.files)

    def to_dict(self, *, paths: bool = True) -> dict[str, Any]:
        """Plain JSON-ready form; ``paths=False`` leaves out the path list."""
        out: dict[str, Any] = {
            "dry_run": self.dry_run,
            "older_than_s": self.older_than_s,
            "oldest_version": self.oldest_version,
            "latest_version": self.latest_version,
            "num_files": self.num_files,
            "bytes": self.bytes,
            "files_scanned": self.files_scanned,
            "files_referenced": self.files_referenced,
            "files_too_young": self.files_too_young,
            "files_hidden": self.files_hidden,
            "files_leased": self.files_leased,
            "live_leases": self.live_leases,
            "num_expired_leases": len(self.expired_leases),
            "num_finished_plans": len(self.finished_plans),
            "nested_tables": list(self.nested_tables),
            "duration_s": round(self.duration_s, 6),
        }
        if paths:
            out["files"] = list(self.files)
            out["expired_leases"] = list(self.expired_leases)
            out["finished_plans"] = list(self.finished_plans)
        return out

    def summary(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        return (
            f"{verb} {self.num_files} unreferenced files ({human_bytes(self.bytes)}) of "
            f"{self.files_scanned} scanned; kept {self.files_referenced} referenced by "
            f"versions {self.oldest_version}..{self.latest_version} and "
            f"{self.files_too_young} younger than {self.older_than_s:g}s"
            + (f" and {self.files_leased} under writer leases" if self.files_leased else "")
            + (f" and {self.files_hidden} hidden" if self.files_hidden else "")
            + f", in {self.duration_s:.2f}s"
        )
