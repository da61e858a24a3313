"""The format registry: which version of the table format introduced what, and the
rules derived from it.

``docs/format.md`` is the specification; this module is its versioning section in
code, and the only place a format version number is written down. Readers call
:func:`check_readable` on every versioned thing they read (commit headers, the table's
``metadata``, manifest roots and leaves); writers ask :func:`commit_version`,
:func:`metadata_version` and :func:`manifest_version` what to declare. A new format
version is a change here (a :class:`Feature` in :data:`FEATURES`, and the rule that
declares it) plus the spec, written first.

Nothing here imports the rest of ``lakelog.log``: the actions import their versions
from this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ..errors import InvalidArgumentError, UnsupportedFormatError

if TYPE_CHECKING:
    from .actions import Action

__all__ = [
    "APP_TRANSACTIONS",
    "BASE",
    "CHANGE_DATA_FEED",
    "CLAIMS",
    "COLUMN_MAPPING",
    "COMMITS",
    "CONSTRAINTS",
    "CURRENT",
    "DELETION_VECTORS",
    "FEATURES",
    "FLAT_MANIFESTS",
    "NEW_TABLE",
    "PARTITION_TRANSFORMS",
    "PLANS_FILE",
    "ROOTS",
    "Feature",
    "check_readable",
    "commit_version",
    "feature",
    "manifest_layout",
    "manifest_version",
    "metadata_version",
    "readable",
    "writing_manifests",
]


@dataclass(frozen=True)
class Feature:
    """A part of the format and the version that introduced it. ``section`` is the
    heading of ``docs/format.md`` that specifies it (marked "(version N)" there from
    version 2 on)."""

    name: str
    version: int
    description: str
    section: str

    def declared_by(self, version: int) -> bool:
        """Whether a table, commit or manifest declaring ``version`` may use this
        feature."""
        return version >= self.version


COMMITS: Final = Feature(
    "commits",
    1,
    "commit files of add, remove, metadata and expire actions",
    "Commits",
)
FLAT_MANIFESTS: Final = Feature(
    "flat_manifests",
    1,
    "manifests of one row per live file",
    "Manifests",
)
APP_TRANSACTIONS: Final = Feature(
    "app_transactions",
    2,
    "app_txn actions: exactly-once output of an application, by app version",
    "App transactions",
)
ROOTS: Final = Feature(
    "manifest_roots",
    2,
    "manifests as a root listing immutable leaves, written incrementally",
    "Manifests",
)
CLAIMS: Final = Feature(
    "claims",
    3,
    "claim and release actions; pending plans in the manifest header",
    "Maintenance plans and claims",
)
PLANS_FILE: Final = Feature(
    "plans_file",
    4,
    "large pending plans in a plans file the manifest header names (manifests only)",
    "Pending plans in a file",
)
DELETION_VECTORS: Final = Feature(
    "deletion_vectors",
    5,
    "add actions carrying the positions of deleted rows",
    "Deletion vectors",
)
CHANGE_DATA_FEED: Final = Feature(
    "change_data_feed",
    6,
    "cdc actions listing change files: the rows a row-level change deleted or updated",
    "Change data feed",
)
COLUMN_MAPPING: Final = Feature(
    "column_mapping",
    7,
    "column ids and physical names: renamed columns, nested fields that evolve",
    "Column ids, renames and nested fields",
)
PARTITION_TRANSFORMS: Final = Feature(
    "partition_transforms",
    8,
    "partition specs of transformed columns (year, month, day, hour, bucket, truncate) "
    "and their evolution",
    "Partition transforms and evolution",
)
CONSTRAINTS: Final = Feature(
    "constraints",
    9,
    "NOT NULL at any depth, CHECK constraints, generated and identity columns",
    "Constraints, generated and identity columns",
)

FEATURES: Final[tuple[Feature, ...]] = (
    COMMITS,
    FLAT_MANIFESTS,
    APP_TRANSACTIONS,
    ROOTS,
    CLAIMS,
    PLANS_FILE,
    DELETION_VECTORS,
    CHANGE_DATA_FEED,
    COLUMN_MAPPING,
    PARTITION_TRANSFORMS,
    CONSTRAINTS,
)
"""Every feature, by the version that introduced it."""

BASE: Final = COMMITS.version
"""What an absent ``format_version`` means. A commit header omits the field only when
it is 1, so a version-1 reader never mistakes a newer commit for one of its own."""

CURRENT: Final = max(f.version for f in FEATURES)
"""The newest format version this lakelog reads and writes."""

NEW_TABLE: Final = CLAIMS.version
"""The version new tables declare without deletion vectors (on by default: then 5), and
the one ``lakelog upgrade`` moves a table to: version 4 changes only manifests (a writer
uses plans files on any table of version 3), and a table declares version 5 or 6 only
from the ``metadata`` action that turns deletion vectors or the change data feed on
(:func:`metadata_version`), its first one when created with them."""


def feature(name: str) -> Feature:
    """The feature called ``name``; :class:`InvalidArgumentError` for an unknown one."""
    for f in FEATURES:
        if f.name == name:
            return f
    raise InvalidArgumentError(
        f"expected one of the format features {[f.name for f in FEATURES]}, found {name!r}"
    )


# -- reading ---------------------------------------------------------------------------


def readable(version: int, *, reader_version: int = CURRENT) -> bool:
    """Whether a reader of ``reader_version`` reads something declaring ``version``."""
    return version <= reader_version


def check_readable(
    version: int, *, what: str, where: str | None = None, reader_version: int = CURRENT
) -> None:
    """Refuse what declares a format version newer than the reader's.

    ``what`` names the kind of thing (``"log"`` for a commit, ``"table"`` for the
    ``metadata`` action, ``"manifest"``, ``"manifest leaf"``), ``where`` the file.
    ``reader_version`` is the newest version the reader implements: this lakelog's,
    or an older one a caller checks a table against."""
    if readable(version, reader_version=reader_version):
        return
    at = f" in {where}" if where else ""
    raise UnsupportedFormatError(
        f"expected {what} format version <= {reader_version}, found {version}{at}; "
        f"upgrade lakelog to read this table."
    )


# -- writing ---------------------------------------------------------------------------


def commit_version(actions: Iterable[Action]) -> int:
    """The format version a commit of ``actions`` declares in its header: the highest
    any action needs.

    A ``metadata`` action needs the version it declares; an ``add`` with a deletion
    vector needs :data:`DELETION_VECTORS`; an action type introduced after version 1
    says its version with a class-level ``FORMAT`` (from the features above); plain
    adds, removes and expiries need :data:`BASE`, so a version-1 table stays readable
    by version-1 readers until it is upgraded."""
    # the actions import their versions from this module: imported when first used
    from .actions import AddFile, Metadata

    need = BASE
    for a in actions:
        if isinstance(a, Metadata):
            need = max(need, a.format_version)
        elif isinstance(a, AddFile) and a.deleted is not None:
            need = max(need, DELETION_VECTORS.version)
        else:
            value = getattr(type(a), "FORMAT", BASE)
            need = max(need, value if isinstance(value, int) else BASE)
    return need


def metadata_version(
    declared: int,
    *,
    deletion_vectors: bool,
    change_data_feed: bool = False,
    column_mapping: bool = False,
    partition_specs: bool = False,
    constraints: bool = False,
) -> int:
    """The version a ``metadata`` action declares: the one it was given
    (``declared``), raised to :data:`DELETION_VECTORS` when it turns them on, to
    :data:`CHANGE_DATA_FEED` when it turns the change data feed on and to
    :data:`COLUMN_MAPPING` when its schema has column ids, so older readers refuse the
    table from then on (instead of missing vectors or change files, or reading renamed
    columns by their old names), to :data:`PARTITION_TRANSFORMS` when it has partition
    specs (older readers would miss that data files hold every column), and to
    :data:`CONSTRAINTS` when its schema holds a constraint, a generated or identity
    column (so older writers refuse the table instead of writing rows it forbids).
    Turning any of them off again keeps the version."""
    need = declared
    if partition_specs:
        need = max(need, PARTITION_TRANSFORMS.version)
    if constraints:
        need = max(need, CONSTRAINTS.version)
    if column_mapping:
        need = max(need, COLUMN_MAPPING.version)
    if deletion_vectors:
        need = max(need, DELETION_VECTORS.version)
    if change_data_feed:
        need = max(need, CHANGE_DATA_FEED.version)
    return need


def manifest_version(
    *, layout: int, declared: int, plans: bool = False, plans_file: bool = False
) -> int:
    """The version a manifest header says: its ``layout`` (1 flat, 2 root and leaves),
    :data:`CLAIMS` when the header holds pending ``plans``, :data:`PLANS_FILE` when they
    are in a plans file; and for a table that ``declared`` deletion vectors, at least
    that version, so older readers refuse its manifests too."""
    if layout < ROOTS.version:
        return FLAT_MANIFESTS.version
    need = PLANS_FILE.version if plans_file else CLAIMS.version if plans else ROOTS.version
    if DELETION_VECTORS.declared_by(declared):
        need = max(need, declared)
    return need


_LAYOUT: ContextVar[int] = ContextVar("lakelog_manifest_layout", default=ROOTS.version)


def manifest_layout() -> int:
    """The layout of the manifests checkpoints write when not told one: roots and
    leaves, unless inside :func:`writing_manifests`."""
    return _LAYOUT.get()


@contextmanager
def writing_manifests(layout: int) -> Iterator[None]:
    """Checkpoints started in this context (this thread or task, not pools it starts)
    write manifests in ``layout``: 1 for the flat layout lakelog of version 1 reads and
    wrote, 2 for roots and leaves. The checkpoints of commits and expiries inside the
    block use it (``upgrade`` always writes roots); for tests of the version-1 layout and
    tools that must write it."""
    flat, roots = FLAT_MANIFESTS.version, ROOTS.version
    if layout not in (flat, roots):
        raise InvalidArgumentError(
            f"expected a manifest layout of {flat} (flat) or {roots} (root and leaves), "
            f"found {layout!r}"
        )
    token = _LAYOUT.set(layout)
    try:
        yield
    finally:
        _LAYOUT.reset(token)
