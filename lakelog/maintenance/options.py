"""The options of a rewrite, as objects: what to compact or cluster, and how to run it.

Every entry point (``Table.compact``, ``Table.optimize``, ``Table.resume``, their Spark
twins, the CLI) takes the same public objects, or the same names as keyword arguments:

* :class:`CompactionOptions`: which files compaction rewrites and how the new ones look;
* :class:`ClusteringOptions`: what ``optimize`` clusters, by which columns and curve;
* :class:`ExecutionOptions`: how a run executes its plan's groups (threads or Spark
  jobs, pacing, partial progress).

They are frozen msgspec Structs: values are checked when an object is made (a bad value
is an :class:`~lakelog.errors.InvalidArgumentError` naming the field), and they
round-trip to JSON (``msgspec.json.encode`` / ``decode(..., type=...)``) except for a
partition filter given as a pyarrow Expression. A field left unset (None) is filled
when the run starts, from the table property its doc names. The plan's own, resolved
copy of the first two (:class:`~lakelog.maintenance.compaction.planner.CompactionSettings`,
:class:`~lakelog.maintenance.clustering.planner.ClusterSettings`) travels with a saved
plan; :class:`ExecutionSettings` never does, so a plan can run elsewhere with other
parallelism or pacing.

>>> import msgspec
>>> options = CompactionOptions(target_file_size=64 << 20, partition_filter=[("day", "=", "x")])
>>> msgspec.json.decode(msgspec.json.encode(options), type=CompactionOptions) == options
True
>>> with_keywords(options, target_rows=10_000).target_rows
10000
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec
import pyarrow.compute as pc

from ..errors import InvalidArgumentError
from ..io.writer import check_codec
from ..properties import get_int
from .clustering.spec import CURVES

if TYPE_CHECKING:
    from ..filters import PartitionFilterLike

    PartitionFilter = PartitionFilterLike
else:  # msgspec reads field types at run time and cannot decode a pyarrow Expression
    PartitionFilter = Any

__all__ = [
    "MAX_INT_OPTION",
    "ClusteringOptions",
    "CompactionOptions",
    "ExecutionOptions",
    "ExecutionSettings",
    "check_flag",
    "execution_from_arguments",
    "from_arguments",
    "positive_int",
    "with_keywords",
]

MAX_INT_OPTION = 2**63 - 1
"""Largest count or size option: what a 64-bit integer holds (Arrow compares sizes
and row counts as int64; a larger Python int would overflow there)."""


def positive_int(name: str, value: Any, *, unit: str = "") -> int:
    """``value`` as an int in 1..:data:`MAX_INT_OPTION`, or :class:`InvalidArgumentError`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_INT_OPTION:
        raise InvalidArgumentError(
            f"expected {name} to be an integer from 1 to 2**63 - 1"
            f"{f' ({unit})' if unit else ''}, found {value!r}; pass a whole number in "
            f"that range."
        )
    return value


def check_flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"expected {name} to be True or False, found {value!r}")


def _optional_int(name: str, value: Any, unit: str) -> None:
    if value is not None:
        positive_int(name, value, unit=unit)


def _filter(value: Any) -> Any:
    """A partition filter in one form, so a filter read back from JSON (lists) equals the
    one given: DNF as a list of term tuples (or a list of such lists), empty as None.
    Any other shape stays as it is, for the planner to refuse in its own words."""
    if not isinstance(value, (list, tuple)):
        return value
    if not value:
        return None
    return [_dnf_part(v) for v in value]


def _dnf_part(value: Any) -> Any:
    if not isinstance(value, (list, tuple)):
        return value
    if value and isinstance(value[0], str):  # a term: (column, operator, value)
        return tuple(value)
    return [tuple(t) if isinstance(t, (list, tuple)) else t for t in value]


def _columns(value: Any) -> Any:
    """Column names as a tuple (one name given alone is a tuple of one)."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return value


class CompactionOptions(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """What compaction rewrites and how it writes (``Table.compact(options=...)``).

    Candidates are files below ``min_file_size`` (or below 75% of ``target_rows``),
    bin-packed per partition into groups of at most the target.
    """

    target_file_size: int | None = None
    """Output file size in bytes; None: ``lakelog.target_file_size`` (128 MiB), unless
    ``target_rows`` alone bounds files."""
    target_rows: int | None = None
    """Rows per output file; None: files are not bounded by rows. Alone, files are
    packed and cut by rows; with a size, by whichever bound comes first."""
    min_file_size: int | None = None
    """Files below this many bytes are candidates; None: the target size times
    ``lakelog.compaction.min_file_size_ratio`` (0.75)."""
    min_input_files: int | None = None
    """Fewest files in a group worth rewriting; None:
    ``lakelog.compaction.min_input_files`` (2)."""
    partition_filter: PartitionFilter = None
    """Only the partitions it matches (DNF tuples or a pyarrow Expression over partition
    columns); None: the whole table."""
    compression: str | None = None
    """Parquet codec of the new files; None: ``lakelog.compression`` (zstd)."""
    row_group_size: int | None = None
    """Rows per row group of the new files; None: ``lakelog.row_group_size``."""

    def __post_init__(self) -> None:
        _optional_int("target_file_size", self.target_file_size, "bytes")
        _optional_int("target_rows", self.target_rows, "rows")
        _optional_int("min_file_size", self.min_file_size, "bytes")
        _optional_int("min_input_files", self.min_input_files, "files")
        _optional_int("row_group_size", self.row_group_size, "rows")
        if self.compression is not None:
            check_codec(self.compression)
        msgspec.structs.force_setattr(self, "partition_filter", _filter(self.partition_filter))


class ClusteringOptions(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """What ``optimize`` clusters and how it writes (``Table.optimize(options=...)``).

    With neither ``zorder_by`` nor ``sort_by``, the run keeps the clustering the table
    declares (``Table.set_clustering``, or ``lakelog clustering``).
    """

    zorder_by: Sequence[str] | None = None
    """Columns of a space-filling curve (``curve``); exclusive with ``sort_by``."""
    sort_by: Sequence[str] | None = None
    """Columns of a linear sort; exclusive with ``zorder_by``."""
    curve: Literal["hilbert", "zorder"] = "hilbert"
    """The curve over ``zorder_by``: ``hilbert`` (the default) or ``zorder``."""
    target_file_size: int | None = None
    """Output file size in bytes; None: ``lakelog.target_file_size`` (128 MiB)."""
    partition_filter: PartitionFilter = None
    """Only the partitions it matches (as in :class:`CompactionOptions`)."""
    incremental: bool = True
    """Cluster new files into the existing key ranges within a rewrite budget
    (``lakelog.clustering.max_rewrite_ratio``); False: recluster everything with fresh
    boundaries."""
    max_group_bytes: int | None = None
    """In-memory sort budget in bytes: larger groups are sorted in spilled runs; None:
    ``lakelog.clustering.max_group_bytes`` (1 GiB)."""
    compression: str | None = None
    """Parquet codec of the new files; None: ``lakelog.compression`` (zstd)."""
    row_group_size: int | None = None
    """Rows per row group of the new files; None: the smaller of
    ``lakelog.row_group_size`` and ``lakelog.clustering.row_group_size``."""

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "zorder_by", _columns(self.zorder_by))
        msgspec.structs.force_setattr(self, "sort_by", _columns(self.sort_by))
        if self.curve not in CURVES:
            raise InvalidArgumentError(
                f"expected curve one of {list(CURVES)}, found {self.curve!r}"
            )
        _optional_int("target_file_size", self.target_file_size, "bytes")
        check_flag("incremental", self.incremental)
        _optional_int("max_group_bytes", self.max_group_bytes, "bytes")
        if self.compression is not None:
            check_codec(self.compression)
        _optional_int("row_group_size", self.row_group_size, "rows")
        msgspec.structs.force_setattr(self, "partition_filter", _filter(self.partition_filter))


class ExecutionOptions(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """How a run executes its plan's groups (never part of a plan)."""

    max_concurrent_groups: int | None = None
    """Groups rewritten at once (threads, or Spark jobs); None:
    ``lakelog.compaction.max_concurrent_groups`` (2), on Spark the session's
    ``defaultParallelism``."""
    max_bytes_per_second: float | None = None
    """Total read rate of the run in bytes per second (on Spark, each running task
    reads at its share); None: unpaced."""
    partial_progress: bool = False
    """Commit every ``lakelog.compaction.groups_per_commit`` (10) finished groups, so a
    long run that stops keeps what it committed; False: one commit at the end."""

    def __post_init__(self) -> None:
        _optional_int("max_concurrent_groups", self.max_concurrent_groups, "groups")
        rate = self.max_bytes_per_second
        if rate is not None and (
            isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0
        ):
            raise InvalidArgumentError(
                f"expected max_bytes_per_second to be a number > 0 (bytes per second) or "
                f"None, found {rate!r}"
            )
        check_flag("partial_progress", self.partial_progress)

    def resolve(
        self, properties: Mapping[str, str], *, default_concurrency: int | None = None
    ) -> ExecutionSettings:
        """The settings an executor runs with: unset fields filled from ``properties``
        (``default_concurrency``, e.g. Spark's parallelism, before the property)."""
        workers = self.max_concurrent_groups
        if workers is None:
            workers = (
                default_concurrency
                if default_concurrency is not None
                else get_int(properties, "lakelog.compaction.max_concurrent_groups")
            )
        rate = self.max_bytes_per_second
        return ExecutionSettings(
            max_concurrent_groups=positive_int("max_concurrent_groups", workers, unit="groups"),
            max_bytes_per_second=None if rate is None else float(rate),
            groups_per_commit=(
                get_int(properties, "lakelog.compaction.groups_per_commit")
                if self.partial_progress
                else None
            ),
        )


class ExecutionSettings(msgspec.Struct, frozen=True, kw_only=True):
    """:class:`ExecutionOptions` resolved against a table: what the executors read."""

    max_concurrent_groups: int
    """Groups rewritten at once (threads, or Spark jobs)."""
    max_bytes_per_second: float | None = None
    """Total read rate of the run; None: unpaced."""
    groups_per_commit: int | None = None
    """Partial progress: commit every this many finished groups; None: one commit."""


Options = TypeVar("Options", CompactionOptions, ClusteringOptions, ExecutionOptions)


def with_keywords(options: Options, *, argument: str = "options", **keywords: Any) -> Options:
    """``options`` with the fields a caller passed beside it as keyword arguments.

    A keyword left at its default says nothing. A field set both in ``options`` (to
    other than its default) and as a keyword must have the same value in both, or
    this raises :class:`InvalidArgumentError` naming both (``argument`` is the name
    the caller gave the object); there is no silent precedence. An unknown keyword is a
    :class:`TypeError`, as for any function.
    """
    given = type(options)(**keywords)  # checks each keyword, in the caller's names
    default = type(options)()
    changes: dict[str, Any] = {}
    for name in keywords:
        value = getattr(given, name)
        if _same(value, getattr(default, name)):
            continue
        held = getattr(options, name)
        if not _same(held, getattr(default, name)) and not _same(held, value):
            raise InvalidArgumentError(
                f"expected {name} in one place, found {name}={value!r} and "
                f"{argument}.{name}={held!r}; pass it either as a keyword or in "
                f"{argument}={type(options).__name__}(...), not both."
            )
        changes[name] = value
    return msgspec.structs.replace(options, **changes) if changes else options


Request = TypeVar("Request", CompactionOptions, ClusteringOptions)


def from_arguments(
    kind: type[Request],
    options: Request | None,
    execution: ExecutionOptions | None,
    arguments: Mapping[str, Any],
) -> tuple[Request, ExecutionOptions]:
    """The options objects of a ``compact`` or ``optimize`` call, from its arguments: the
    one place where every entry point (``Table.compact``/``optimize`` and their Spark
    twins) turns its keyword arguments into objects.

    ``arguments`` maps the call's parameter names to the values given (``locals()`` at
    the top of the entry point); each field of ``kind`` and of :class:`ExecutionOptions`
    is taken from it by name and joined to ``options`` / ``execution`` by the rule of
    :func:`with_keywords`. Other names (``dry_run``, the table's location...) are the
    caller's.
    """
    own = {n: arguments[n] for n in kind.__struct_fields__ if n in arguments}
    return with_keywords(options or kind(), **own), execution_from_arguments(execution, arguments)


def execution_from_arguments(
    execution: ExecutionOptions | None, arguments: Mapping[str, Any]
) -> ExecutionOptions:
    """:class:`ExecutionOptions` of a call (``resume``, or within :func:`from_arguments`):
    ``execution`` with the fields given beside it in ``arguments``."""
    run = {n: arguments[n] for n in ExecutionOptions.__struct_fields__ if n in arguments}
    return with_keywords(execution or ExecutionOptions(), argument="execution", **run)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, pc.Expression) or isinstance(b, pc.Expression):
        return isinstance(a, pc.Expression) and isinstance(b, pc.Expression) and a.equals(b)
    return bool(a == b)
