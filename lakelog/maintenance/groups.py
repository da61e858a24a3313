"""The unit of every rewrite: a group of files, what rewriting it produced, and what a plan is.

A plan (compaction or clustering) is a read version plus groups. Each
:class:`FileGroup` is rewritten on its own, by any worker, into a
:class:`GroupResult` (files written, not committed); the commit step swaps
sources for outputs. Groups of one plan never share a source file.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptLogError, InvalidArgumentError, UnsupportedFormatError
from ..log.actions import AddFile, DataFile
from ..log.files import vectors_of
from ..log.format import DELETION_VECTORS
from ..log.snapshot import Snapshot

__all__ = [
    "FileGroup",
    "GroupResult",
    "RewritePlan",
    "SavedPlan",
    "changed_sources",
    "check_group_rows",
    "stale_groups",
]


class FileGroup(msgspec.Struct, frozen=True, kw_only=True):
    """Files of one partition rewritten together into new files.

    ``group_id`` is derived from the source paths, so the same files always
    make the same id (a worker or a retry can be matched to its group).
    """

    group_id: str
    partition: dict[str, str | None]
    files: tuple[DataFile, ...]
    estimated_output_files: int = 1

    @property
    def total_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def num_rows(self) -> int:
        """Live rows (deletion vectors' rows not counted): what a rewrite writes."""
        return sum(f.live_rows for f in self.files)

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]


class GroupResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one group's rewrite produced: files written but not yet committed."""

    group_id: str
    added: tuple[AddFile, ...]
    bytes_read: int
    bytes_written: int
    num_rows: int
    duration_s: float = 0.0
    spilled_runs: int = 0
    """Sorted runs a clustering rewrite spilled to disk (0 when it sorted in memory)."""

    @classmethod
    def of(
        cls,
        group: FileGroup,
        added: Sequence[AddFile],
        *,
        duration_s: float,
        spilled_runs: int = 0,
    ) -> GroupResult:
        """The result of rewriting ``group`` into ``added`` (checked with
        :func:`check_group_rows` first)."""
        return cls(
            group_id=group.group_id,
            added=tuple(added),
            bytes_read=group.total_bytes,
            bytes_written=sum(a.size_bytes for a in added),
            num_rows=sum(a.num_rows for a in added),
            duration_s=duration_s,
            spilled_runs=spilled_runs,
        )


def check_group_rows(group: FileGroup, added: Sequence[AddFile], *, where: str = "") -> None:
    """The files a rewrite wrote hold exactly the group's rows, as the log records them;
    otherwise a source file does not match the log and nothing may be committed.
    ``where``: where the rows were counted, for the message (e.g. after a Spark job)."""
    got = sum(a.num_rows for a in added)
    if got != group.num_rows:
        raise CorruptLogError(
            f"expected {group.num_rows} rows from the {len(group.files)} files of group "
            f"{group.group_id} (as the log records), found {got}{where}; a data file does not "
            f"match the log. Nothing was committed; check the files with `lakelog files`."
        )


class RewritePlan(Protocol):
    """What the executor, the commit and the report need of a plan (compaction or clustering)."""

    @property
    def table_id(self) -> str: ...
    @property
    def read_version(self) -> int: ...
    @property
    def groups(self) -> Sequence[FileGroup]: ...
    @property
    def snapshot_file_count(self) -> int: ...
    @property
    def snapshot_total_bytes(self) -> int: ...
    @property
    def options(self) -> Any: ...
    @property
    def estimated_after_file_count(self) -> int: ...
    @property
    def source_file_count(self) -> int: ...
    @property
    def source_bytes(self) -> int: ...


class _Probe(msgspec.Struct):
    plan_format: int | None = None
    kind: str | None = None


P = TypeVar("P", bound="SavedPlan")


class SavedPlan(msgspec.Struct, frozen=True, kw_only=True):
    """The base of the rewrite plans (compaction's and clustering's): saved as JSON with
    :meth:`to_json` and loaded back with :meth:`from_json`, which checks first that the
    text is a plan of this kind in a format this lakelog reads. Each plan names its kind
    (the ``kind`` field), its newest format and its command in the class attributes."""

    KIND: ClassVar[str]
    """The plan's ``kind`` field: the operation that runs it."""
    FORMAT: ClassVar[int]
    """The plan format this library writes and the newest it reads."""
    NOUN: ClassVar[str]
    """The plan in words, for errors: ``"compaction plan"``."""
    OTHER_KIND_HINT: ClassVar[str] = ""
    """What to do with a plan of another kind, appended to that error."""

    if TYPE_CHECKING:  # fields of every plan (declared by each, in its own order)
        groups: tuple[FileGroup, ...]
        snapshot_file_count: int

    @property
    def source_file_count(self) -> int:
        """Files the plan rewrites."""
        return sum(len(g.files) for g in self.groups)

    @property
    def source_bytes(self) -> int:
        """Bytes the plan rewrites."""
        return sum(g.total_bytes for g in self.groups)

    @property
    def estimated_after_file_count(self) -> int:
        """Live files once every group landed, as planned."""
        out = sum(g.estimated_output_files for g in self.groups)
        return self.snapshot_file_count - self.source_file_count + out

    def to_json(self) -> str:
        """The plan as JSON text, for :meth:`from_json` (here or elsewhere)."""
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_json(cls: type[P], text: str | bytes) -> P:
        """Load a plan saved with :meth:`to_json`."""
        try:
            probe = msgspec.json.decode(text, type=_Probe)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise InvalidArgumentError(
                f"expected a {cls.NOUN} saved by lakelog (JSON), found undecodable content: "
                f"{e}. Save plans with {cls.__name__}.to_json() or "
                f"`lakelog {cls.KIND} --plan-out`."
            ) from e
        if probe.plan_format is not None and probe.plan_format > cls.FORMAT:
            raise UnsupportedFormatError(
                f"expected {cls.NOUN} format <= {cls.FORMAT}, found {probe.plan_format}; the "
                f"plan was made by a newer lakelog. Upgrade lakelog or plan again with this one."
            )
        if probe.kind is not None and probe.kind != cls.KIND:
            raise InvalidArgumentError(
                f"expected a {cls.NOUN} (kind {cls.KIND!r}), found kind {probe.kind!r}"
                f"{cls.OTHER_KIND_HINT}"
            )
        try:
            return msgspec.json.decode(text, type=cls)
        except msgspec.ValidationError as e:
            raise InvalidArgumentError(
                f"expected a complete {cls.NOUN}, found an invalid one: {e}"
            ) from e


def changed_sources(snapshot: Snapshot, files: Iterable[DataFile]) -> set[str]:
    """Paths of ``files`` that ``snapshot`` does not hold as they are: not live, or live
    with another deletion vector than the one the file was read with.

    A rewrite reads its sources with the vectors its plan recorded; landing it on a
    snapshot where a source's vector changed would write deleted rows back (or the old
    image of an updated row beside the new one). Only paths are compared on tables
    that cannot have vectors."""
    want = {f.path: f.deleted for f in files}
    if not want:
        return set()
    vectors = DELETION_VECTORS.declared_by(snapshot.metadata.format_version)
    if not vectors and all(v is None for v in want.values()):
        live = set(snapshot.paths())
        return {p for p in want if p not in live}
    table = snapshot.entries
    hit = table.filter(pc.is_in(table.column("path"), value_set=pa.array(list(want))))
    have = dict(zip(hit.column("path").to_pylist(), vectors_of(hit), strict=True))
    return {p for p, v in want.items() if p not in have or have[p] != v}


def stale_groups(snapshot: Snapshot, groups: Iterable[FileGroup]) -> list[str]:
    """Ids of the ``groups`` with a source :func:`changed_sources` finds changed in
    ``snapshot``: they must not be rewritten on top of it."""
    groups = list(groups)
    changed = changed_sources(snapshot, (f for g in groups for f in g.files))
    return [g.group_id for g in groups if not changed.isdisjoint(g.paths)]
