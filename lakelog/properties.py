"""Table properties: every ``lakelog.*`` property declared once, validated and typed.

Properties live in the table's ``metadata`` action as strings. Every ``lakelog.*``
property is declared in :data:`PROPERTIES` (type, range, default, meaning; the table
in ``docs/format.md`` lists the same). Other names are the user's own, free-form.

Two rules keep a typo from locking a table:

* A value a caller passes (``create_table``, ``write_table``, ``set_properties``)
  is checked by :func:`validate_properties`: a wrong type or range, or an unknown
  ``lakelog.*`` name, is refused with :class:`InvalidArgumentError`.
* A value already stored (by an older lakelog, or by hand) is read by the typed
  getters leniently: a bad one falls back to the default with one logged warning.
  Every commit reads properties, so a stored bad value must never fail one,
  least of all the ``set_properties`` that fixes it.
"""

from __future__ import annotations

import difflib
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from .errors import InvalidArgumentError
from .io.writer import CODECS

__all__ = [
    "DEFAULTS",
    "PROPERTIES",
    "Property",
    "get_bool",
    "get_float",
    "get_int",
    "get_str",
    "validate_properties",
]

log = logging.getLogger("lakelog")

MiB = 1024 * 1024
PREFIX = "lakelog."
_INT64_MAX = 2**63 - 1
_INT_RE = re.compile(r"\s*[+-]?[0-9]+\s*", re.ASCII)
_FLOAT_RE = re.compile(r"\s*[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\s*", re.ASCII)
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")

Kind = Literal["int", "float", "bool", "str", "choice"]
Value = int | float | bool | str


class _BadValue(ValueError):
    """A value that does not parse or is out of range; ``expected`` says what would."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


@dataclass(frozen=True)
class Property:
    """One declared ``lakelog.*`` property.

    ``low``/``high`` bound numbers (inclusive; ``low_open`` excludes ``low``);
    ``choices`` lists the accepted values of a ``choice`` (case-insensitive).
    """

    name: str
    kind: Kind
    default: str
    doc: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] = ()

    @property
    def expected(self) -> str:
        """What a valid value is, e.g. ``an integer >= 1`` or ``a number in (0, 1]``."""
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "bool":
            return "'true' or 'false'"
        if self.kind == "str":
            return "a string"
        what = "an integer" if self.kind == "int" else "a number"
        low, high = _fmt(self.low), _fmt(self.high)
        if self.low is not None and self.high is not None:
            return f"{what} in {'(' if self.low_open else '['}{low}, {high}]"
        if self.low is not None:
            return f"{what} {'>' if self.low_open else '>='} {low}"
        if self.high is not None:
            return f"{what} <= {high}"
        return what

    def parse(self, text: str) -> Value:
        """The typed value of ``text``; :class:`_BadValue` when it is not valid."""
        if self.kind == "str":
            return text
        if self.kind == "choice":
            choice = text.strip().lower()
            if choice not in self.choices:
                raise _BadValue(self.expected)
            return choice
        if self.kind == "bool":
            flag = text.strip().lower()
            if flag in _TRUE:
                return True
            if flag in _FALSE:
                return False
            raise _BadValue(self.expected)
        number: int | float
        if self.kind == "int":
            if not _INT_RE.fullmatch(text):
                raise _BadValue(self.expected)
            number = int(text)
            if abs(number) > _INT64_MAX:
                raise _BadValue(f"{self.expected} that fits in 64 bits")
        else:
            number = float(text) if _FLOAT_RE.fullmatch(text) else math.nan
            if not math.isfinite(number):
                raise _BadValue(self.expected)
        if self.low is not None and (number < self.low or (self.low_open and number == self.low)):
            raise _BadValue(self.expected)
        if self.high is not None and number > self.high:
            raise _BadValue(self.expected)
        return number

    def canonical(self, text: str) -> str:
        """The string stored for a valid ``text`` (choices and flags normalized)."""
        value = self.parse(text)
        if self.kind == "bool":
            return "true" if value else "false"
        return value if isinstance(value, str) else text.strip()


def _fmt(bound: float | None) -> str:
    return "" if bound is None else f"{bound:g}"


PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in [
        # log
        Property(
            "lakelog.manifest_interval", "int", "10", "write a manifest every N versions", low=1
        ),
        Property(
            "lakelog.manifest.leaf_files",
            "int",
            "16384",
            "files per leaf of a version-2 manifest",
            low=1,
        ),
        Property(
            "lakelog.manifest.plans_inline_bytes",
            "int",
            "65536",
            "pending plans whose JSON is longer go to a plans file beside the manifest",
            low=0,
        ),
        Property(
            "lakelog.commit.max_attempts",
            "int",
            "100",
            "attempts before a commit gives up",
            low=1,
        ),
        Property(
            "lakelog.commit.timeout_seconds",
            "float",
            "300",
            "total time in seconds before a commit gives up",
            low=0,
            low_open=True,
        ),
        Property(
            "lakelog.storage.check_put_if_absent",
            "bool",
            "true",
            "before the first commit through a store, check once that it refuses a second "
            "put-if-absent of the same key (lakelog/storage_check.py)",
        ),
        # writing data files
        Property(
            "lakelog.target_file_size",
            "int",
            str(128 * MiB),
            "data files roll to a new file at this size in bytes",
            low=1,
        ),
        Property(
            "lakelog.row_group_size", "int", str(256 * 1024), "rows per Parquet row group", low=1
        ),
        Property(
            "lakelog.compression",
            "choice",
            "zstd",
            "Parquet codec of new data files",
            choices=CODECS,
        ),
        # skipping inside files (lakelog/io/parquet_settings.py, docs/skipping.md)
        Property(
            "lakelog.parquet.page_index",
            "bool",
            "true",
            "write the column and offset index (per-page statistics) in new data files",
        ),
        Property(
            "lakelog.parquet.bloom_filter_columns",
            "str",
            "",
            "comma-separated columns with a bloom filter in every row group of new data files",
        ),
        Property(
            "lakelog.parquet.bloom_filter_fpp",
            "float",
            "0.01",
            "false-positive probability each bloom filter is sized for",
            low=0,
            high=0.5,
            low_open=True,
        ),
        Property(
            "lakelog.parquet.bloom_filter_ndv",
            "int",
            "0",
            "distinct values per row group each bloom filter is sized for "
            "(0: counted from each file's first row group)",
            low=0,
        ),
        Property(
            "lakelog.parquet.data_page_size",
            "int",
            str(MiB),
            "target encoded size of a Parquet data page in bytes",
            low=1024,
        ),
        # compaction (Iceberg's defaults: candidates are files below 75% of the target)
        Property(
            "lakelog.compaction.min_file_size_ratio",
            "float",
            "0.75",
            "compaction candidates are files below this fraction of the target size",
            low=0,
            high=1,
            low_open=True,
        ),
        Property(
            "lakelog.compaction.min_input_files",
            "int",
            "2",
            "fewest files compaction rewrites in one group",
            low=1,
        ),
        Property(
            "lakelog.compaction.max_concurrent_groups",
            "int",
            "2",
            "groups compacted or clustered at once",
            low=1,
        ),
        Property(
            "lakelog.compaction.groups_per_commit",
            "int",
            "10",
            "groups per commit with partial_progress",
            low=1,
        ),
        Property(
            "lakelog.maintenance.claims",
            "bool",
            "true",
            "compaction and clustering runs claim their files on the log before rewriting "
            "them, so concurrent runs pick disjoint files (format version 3 tables)",
        ),
        # auto-compaction after data commits (lakelog/maintenance/auto.py, docs/maintenance.md)
        Property(
            "lakelog.auto_compact",
            "bool",
            "false",
            "after a commit that adds data files, the writer compacts the small files of the "
            "partitions it touched once a size tier of them reaches min_files",
        ),
        Property(
            "lakelog.auto_compact.mode",
            "choice",
            "inline",
            "inline: before the write returns (its commit already landed); async: in the "
            "background (lakelog.auto_compact.worker says where)",
            choices=("inline", "async"),
        ),
        Property(
            "lakelog.auto_compact.worker",
            "choice",
            "process",
            "where async runs rewrite: process (a worker process at a lower CPU priority, "
            "sharing no lock with the writer; a store another process cannot open, such as "
            "memory://, uses a thread) or thread (a background thread of the writer)",
            choices=("process", "thread"),
        ),
        Property(
            "lakelog.auto_compact.min_files",
            "int",
            "10",
            "small files of one partition and one size tier (sizes within a factor of this "
            "number) that trigger their compaction",
            low=2,
        ),
        Property(
            "lakelog.auto_compact.target_file_size",
            "int",
            "0",
            "target size in bytes of the files auto-compaction writes (0: "
            "lakelog.target_file_size); files below lakelog.compaction.min_file_size_ratio "
            "of it are small",
            low=0,
        ),
        Property(
            "lakelog.auto_compact.max_bytes",
            "int",
            str(512 * MiB),
            "most source bytes one auto-compaction rewrites (the rest waits for the next "
            "commit to the partition)",
            low=1,
        ),
        Property(
            "lakelog.optimize_write",
            "bool",
            "false",
            "lakelog.spark.write shuffles the rows by partition (and by the declared "
            "clustering's key range) before writing, so a write makes about one "
            "target-size file per partition instead of one per task and partition",
        ),
        # clustering (optimize)
        Property(
            "lakelog.clustering.columns",
            "str",
            "",
            "the table's declared clustering columns, comma-separated (empty: none); "
            "optimize() with no columns keeps this layout",
        ),
        Property(
            "lakelog.clustering.curve",
            "choice",
            "hilbert",
            "the declared clustering's curve: hilbert, zorder, or linear (a sort)",
            choices=("hilbert", "zorder", "linear"),
        ),
        Property(
            "lakelog.clustering.max_rewrite_ratio",
            "float",
            "8",
            "an incremental optimize rewrites at most this many bytes per new byte",
            low=1,
        ),
        Property(
            "lakelog.clustering.min_delta_file_ratio",
            "float",
            str(1 / 64),
            "new clustered files smaller than this fraction of the target stay delta files",
            low=0,
            high=1,
            low_open=True,
        ),
        Property(
            "lakelog.clustering.row_group_size",
            "int",
            str(16 * 1024),
            "most rows per Parquet row group in files optimize writes (the smaller of this "
            "and lakelog.row_group_size applies)",
            low=1,
        ),
        Property(
            "lakelog.clustering.max_group_bytes",
            "int",
            str(1024 * MiB),
            "bytes above which optimize sorts a group in spilled runs",
            low=1,
        ),
        # cleanup
        Property(
            "lakelog.expire.older_than_seconds",
            "float",
            str(7 * 24 * 3600),
            "expire_snapshots default age in seconds",
            low=0,
        ),
        Property(
            "lakelog.expire.retain_last",
            "int",
            "10",
            "expire_snapshots keeps the newest N versions",
            low=1,
        ),
        Property(
            "lakelog.vacuum.older_than_seconds",
            "float",
            str(3 * 24 * 3600),
            "vacuum default age in seconds",
            low=0,
        ),
        Property(
            "lakelog.vacuum.min_age_seconds",
            "float",
            "3600",
            "smallest age in seconds vacuum accepts without force",
            low=0,
        ),
        # writer leases (lakelog/leases.py)
        Property(
            "lakelog.lease.ttl_seconds",
            "float",
            "600",
            "a writer's lease expires this many seconds after its last heartbeat",
            low=1,
        ),
        Property(
            "lakelog.maintain.query_cost_ratio",
            "float",
            "1.3",
            "maintain compacts fully the partitions that keep a full scan's expected cost "
            "above this many times the same rows fully compacted (lakelog/maintenance/"
            "maintain/model.py)",
            low=1,
        ),
        # deletion vectors (docs/format.md, "Deletion vectors"; docs/row-level-changes.md)
        Property(
            "lakelog.deletion_vectors",
            "bool",
            "false",
            "row-level changes mark deleted rows in a vector instead of rewriting files",
        ),
        Property(
            "lakelog.deletion_vectors.purge_ratio",
            "float",
            "0.2",
            "compaction rewrites a file whose deleted rows are at least this share of its rows",
            low=0,
            low_open=True,
            high=1,
        ),
        Property(
            "lakelog.deletion_vectors.max_vector_bytes",
            "int",
            str(64 * 1024),
            "a change rewrites a file instead of marking it when the file's vector would "
            "encode larger",
            low=1,
        ),
        Property(
            "lakelog.deletion_vectors.update_buffer_bytes",
            "int",
            str(64 * MiB),
            "bytes of updated rows of marked files a change buffers, then writes together",
            low=1,
        ),
        # the change data feed (docs/format.md, "Change data feed")
        Property(
            "lakelog.change_data_feed",
            "bool",
            "false",
            "row-level changes record the rows they delete, insert and update in change "
            "files, for the change feed",
        ),
        # column ids (docs/format.md, "Column ids, renames and nested fields")
        Property(
            "lakelog.column_mapping",
            "bool",
            "false",
            "every column has a stable id and a physical name, so columns can be renamed "
            "and nested fields evolve (format version 7; cannot be turned off)",
        ),
        # the Delta-compatible view (lakelog/interop/delta/, docs/delta-view.md)
        Property(
            "lakelog.delta_view",
            "bool",
            "false",
            "keep a Delta-compatible view of every version under _delta_log/",
        ),
    ]
}

DEFAULTS: dict[str, str] = {name: p.default for name, p in PROPERTIES.items()}
"""Default of every declared property, as stored (strings)."""

_warned: set[tuple[str, str]] = set()


def _declared(key: str) -> Property:
    try:
        return PROPERTIES[key]
    except KeyError:
        raise KeyError(f"{key!r} is not a declared lakelog property") from None


def _fix_hint(p: Property) -> str:
    return f"table.set_properties({{{p.name!r}: {p.default!r}}})"


def _lookup(props: Mapping[str, str], key: str) -> tuple[str, Value]:
    """Text and typed value of a stored property: the default's when unset or invalid."""
    p = _declared(key)
    raw = props.get(key)
    if raw is not None:
        try:
            return raw, p.parse(raw)
        except _BadValue as e:
            if (key, raw) not in _warned:
                _warned.add((key, raw))
                log.warning(
                    "expected table property %s to be %s, found %r; using the default %s "
                    "until it is fixed, e.g. with %s",
                    key,
                    e.expected,
                    raw,
                    p.default,
                    _fix_hint(p),
                )
    return p.default, p.parse(p.default)


def get_str(props: Mapping[str, str], key: str) -> str:
    """A declared property as text (its default when unset or invalid; a choice in
    lower case)."""
    text, value = _lookup(props, key)
    return value if isinstance(value, str) else PROPERTIES[key].canonical(text)


def get_int(props: Mapping[str, str], key: str) -> int:
    """An integer property (its default when unset or invalid)."""
    _, value = _lookup(props, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{key} is a {PROPERTIES[key].kind} property, not an int")
    return value


def get_float(props: Mapping[str, str], key: str) -> float:
    """A number property (its default when unset or invalid)."""
    _, value = _lookup(props, key)
    if isinstance(value, (bool, str)):
        raise TypeError(f"{key} is a {PROPERTIES[key].kind} property, not a number")
    return float(value)


def get_bool(props: Mapping[str, str], key: str) -> bool:
    """A true/false property (its default when unset or invalid)."""
    _, value = _lookup(props, key)
    if not isinstance(value, bool):
        raise TypeError(f"{key} is a {PROPERTIES[key].kind} property, not a bool")
    return value


def validate_properties(props: Mapping[str, object]) -> dict[str, str]:
    """Properties a caller passed, as the strings to store.

    Every ``lakelog.*`` name must be declared and its value valid; other names
    are the user's own and kept as given. Raises :class:`InvalidArgumentError`.
    """
    if not isinstance(props, Mapping):
        raise InvalidArgumentError(
            f"expected properties to be a mapping of names to values, found {type(props).__name__}"
        )
    out: dict[str, str] = {}
    for key, value in props.items():
        if not isinstance(key, str) or not key:
            raise InvalidArgumentError(
                f"expected property names to be non-empty strings, found {key!r}"
            )
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if key.lower().startswith(PREFIX):
            p = PROPERTIES.get(key)
            if p is None:
                raise InvalidArgumentError(_unknown(key))
            try:
                text = p.canonical(text)
            except _BadValue as e:
                raise InvalidArgumentError(
                    f"expected table property {key} to be {e.expected}, found {text!r}; "
                    f"pass a valid value such as {p.default!r} (the default). The properties "
                    f"are listed in docs/format.md."
                ) from None
        out[key] = text
    return out


def _unknown(key: str) -> str:
    names = list(PROPERTIES)
    by_lower = {n.lower(): n for n in names}
    closest = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.0)
    hint = f"did you mean {by_lower[closest[0]]!r}? " if closest else ""
    return (
        f"expected a known lakelog table property, found {key!r}; {hint}Names starting "
        f"with 'lakelog.' are reserved for the properties listed in docs/format.md; "
        f"name your own properties without that prefix."
    )
