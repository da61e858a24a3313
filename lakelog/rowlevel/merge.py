"""``merge``: upsert a source into the table by key columns.

The source is read into memory once, checked against the table schema and
deduplicated by key (``duplicates=``); memory then holds the source plus one
batch of one target file per worker, never the table. A target row *matches*
when every key column equals the source row's (a null key matches nothing, as
in SQL). What then happens is said by the merge's WHEN clauses
(:mod:`.clauses`, Delta's): per matched target row the first ``when_matched``
clause whose condition holds updates or deletes it; per unmatched target row the
first ``when_not_matched_by_source`` clause (then every file is read); per source
row no target row matched, the first ``when_not_matched`` clause inserts it, in
source order. The string forms (``when_matched="update"``...) are one clause each.

Target files are pruned by the source's keys: a file is read only if, for every
key column, its partition value is a source key or some source key lies within
its min/max statistics.
"""

from __future__ import annotations

import bisect
import copy
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError
from ..filters import FileStatsColumns
from ..io.guards import guards_of, refuse_given_identity
from ..io.schema import check_schema, conform, to_reader
from ..io.writer import WriteOptions, write_files
from ..log import mapping
from ..log.actions import DataFile
from ..log.feed import INSERT
from ..log.snapshot import Snapshot
from ..partitioning import partition_scalar
from ..stats import stats_scalar
from ..storage import Storage
from ..transforms import PartitionSpec
from .base import Counts, RowChange, Written
from .clauses import (
    DELETE,
    UPDATE,
    Clauses,
    MergeClause,
    TextReader,
    legacy,
    when_matched_delete,
    when_matched_update,
    when_not_matched_by_source_delete,
    when_not_matched_by_source_update,
    when_not_matched_insert,
)

if TYPE_CHECKING:
    from .change_files import ChangeWriter

__all__ = [
    "MatchedAction",
    "MergeChange",
    "MergeClause",
    "NotMatchedAction",
    "SourceKeys",
    "check_keys",
    "put_values",
    "refuse_assigned_identity",
    "slice_within",
    "sortable_keys",
    "when_matched_delete",
    "when_matched_update",
    "when_not_matched_by_source_delete",
    "when_not_matched_by_source_update",
    "when_not_matched_insert",
]

MatchedAction = Literal["update", "delete", "ignore"]
NotMatchedAction = Literal["insert", "ignore"]
BySourceAction = Literal["ignore", "delete"]
Duplicates = Literal["error", "last", "first"]

_ROW = "__lakelog_source_row"
_TARGET = "__lakelog_target_row"
_CODE_LIMIT = 2.0**62
"""Combined key codes must stay below this (else several key columns use a hash join)."""


def _choice(name: str, value: object, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        listed = ", ".join(repr(a) for a in allowed)
        raise InvalidArgumentError(f"expected {name} to be one of {listed}, found {value!r}")
    return value


def check_keys(on: Any, schema: pa.Schema) -> tuple[str, ...]:
    """``on=`` as a tuple of distinct key columns of the table with comparable types."""
    keys = (on,) if isinstance(on, str) else tuple(on) if isinstance(on, (list, tuple)) else None
    if not keys or not all(isinstance(k, str) for k in keys):
        raise InvalidArgumentError(
            f"expected on= to name the key column(s), such as on=['id'], found {on!r}"
        )
    if len(set(keys)) != len(keys):
        raise InvalidArgumentError(f"expected distinct key columns in on=, found {list(keys)}")
    for k in keys:
        if k not in schema.names:
            raise InvalidArgumentError(
                f"expected key columns of the table in on=, found {k!r}; the table's "
                f"columns are {schema.names}"
            )
        t = schema.field(k).type
        if pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_null(t):
            raise InvalidArgumentError(
                f"expected key columns of a plain type (numbers, strings, dates, ...), found "
                f"{k!r} of type {t}; merge on another column."
            )
    return keys


class KeyIndex:
    """Finds source rows by key for a set of source rows (all of them, or the ones one
    target file's bounds allow), built once and used for every batch.

    One key column: Arrow's hash lookup (``index_in``) over the key values. Several:
    each column's values become codes among its distinct source values, combined into
    one integer per row and looked up the same way (a hash join if the codes would
    not fit 63 bits).
    """

    def __init__(self, sub: pa.Table, keys: tuple[str, ...], rows: np.ndarray) -> None:
        self.keys = keys
        self.rows = rows
        """The global source row of each row of ``sub`` (the key columns)."""
        self._uniques: list[pa.Array] = []
        self._join: pa.Table | None = None
        if len(keys) == 1:
            self._values = sub.column(keys[0]).combine_chunks()
            return
        self._uniques = [pc.unique(sub.column(k).combine_chunks()) for k in keys]
        if float(np.prod([max(1, len(u)) for u in self._uniques], dtype=np.float64)) >= _CODE_LIMIT:
            self._join = sub.select(list(keys)).append_column(_ROW, pa.array(rows))
            return
        self._values = pa.array(self._codes(sub))

    def _codes(self, table: pa.Table | pa.RecordBatch) -> np.ndarray:
        """One integer per row from the key columns' codes (-1 where one has no code)."""
        n = table.num_rows
        out = np.zeros(n, dtype=np.int64)
        missing = np.zeros(n, dtype=bool)
        for k, unique in zip(self.keys, self._uniques, strict=True):
            pos = pc.index_in(table.column(k), value_set=unique, skip_nulls=True)
            code = np.asarray(pos.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
            missing |= code < 0
            out = out * len(unique) + np.maximum(code, 0)
        out[missing] = -1
        return out

    def match(self, batch: pa.RecordBatch) -> np.ndarray:
        """Per row of ``batch``: the global source row with the same key, or -1."""
        n = batch.num_rows
        if not len(self.rows) or not n:
            return np.full(n, -1, dtype=np.int64)
        if self._join is not None:
            left = pa.table({**{k: batch.column(k) for k in self.keys}, _TARGET: np.arange(n)})
            joined = left.join(self._join, list(self.keys), join_type="inner", use_threads=False)
            out = np.full(n, -1, dtype=np.int64)
            out[joined.column(_TARGET).to_numpy()] = joined.column(_ROW).to_numpy()
            return out
        probe = batch.column(self.keys[0]) if len(self.keys) == 1 else pa.array(self._codes(batch))
        pos = pc.index_in(probe, value_set=self._values, skip_nulls=True)
        idx = np.asarray(pos.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
        if len(self.keys) > 1:
            idx[np.asarray(probe) < 0] = -1  # a key value no source row has
        return np.where(idx >= 0, self.rows[np.maximum(idx, 0)], -1)


class SourceKeys:
    """The deduplicated source and how to find its rows by key."""

    def __init__(self, source: pa.Table, keys: tuple[str, ...], duplicates: Duplicates) -> None:
        self.keys = keys
        self.given = source.num_rows
        table, self.dropped = _dedupe(source, keys, duplicates)
        # one chunk: each batch takes its matched rows from it (a take from a table of
        # many small chunks, as sources built batch by batch are, costs per chunk)
        self.table = table.combine_chunks()
        del table
        valid = np.ones(self.table.num_rows, dtype=bool)
        for k in keys:
            valid &= np.asarray(self.table.column(k).is_valid().to_numpy(zero_copy_only=False))
        rows = np.flatnonzero(valid)
        keyed = self.table.select(list(keys)).take(pa.array(rows))
        self._lead: np.ndarray | list[Any] | None = None
        """The first key column's values in ascending order, when it is not floating
        point: the key rows are sorted by it, so a file's bounds select a slice."""
        if len(rows) and not pa.types.is_floating(keyed.schema.field(keys[0]).type):
            order = pc.sort_indices(keyed, [(keys[0], "ascending")]).to_numpy()
            keyed, rows = keyed.take(pa.array(order)), rows[order]
            lead = sortable_keys(keyed.column(keys[0]).combine_chunks())
            self._lead = lead.tolist() if lead.dtype == object else lead
        self._rows = rows
        """Source rows with every key set (only they can match)."""
        self._keys_table = keyed
        self._sorted: dict[str, np.ndarray] = {}
        self._values: dict[str, pa.Array] = {}
        for k in keys if len(self._rows) else ():
            unique = pc.unique(self._keys_table.column(k).combine_chunks())
            self._values[k] = unique
            self._sorted[k] = sortable_keys(unique.take(pc.sort_indices(unique)))
        self.index = KeyIndex(self._keys_table, keys, self._rows)
        """Every matchable source row."""

    @property
    def empty(self) -> bool:
        return not len(self._rows)

    def match(self, batch: pa.RecordBatch) -> np.ndarray:
        """Per row of ``batch``: the source row with the same key, or -1."""
        return self.index.match(batch)

    def index_for(self, file: DataFile, schema: pa.Schema) -> KeyIndex:
        """An index of only the source rows ``file``'s partition values and min/max
        statistics allow: every target row of the file has its key within them, so
        no other source row can match it, and the lookups stay small. The first key's
        bounds select a slice of the sorted key rows; the others filter that slice."""
        n = len(self._rows)
        if not n:
            return self.index
        start, stop = 0, n
        lead = self.bounds(file, schema, self.keys[0])
        if self._lead is not None and lead is not None:
            start, stop = slice_within(self._lead, *lead)
        sub = self._keys_table.slice(start, stop - start)
        keep = np.ones(stop - start, dtype=bool)
        for k in self.keys if self._lead is None else self.keys[1:]:
            bounds = self.bounds(file, schema, k)
            if bounds is None:
                continue
            lo, hi = bounds
            column = sub.column(k)
            hit = pc.and_(pc.greater_equal(column, lo), pc.less_equal(column, hi))
            keep &= np.asarray(hit.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
        if stop - start == n and keep.all():
            return self.index
        rows = self._rows[start:stop]
        if keep.all():
            return KeyIndex(sub, self.keys, rows)
        return KeyIndex(sub.filter(pa.array(keep)), self.keys, rows[keep])

    @staticmethod
    def bounds(file: DataFile, schema: pa.Schema, key: str) -> tuple[pa.Scalar, pa.Scalar] | None:
        """The values of ``key`` the rows of ``file`` lie within (its partition value, or
        its min/max statistics), or None when unknown or floating point (bounds never
        hold NaN)."""
        t = schema.field(key).type
        if key in file.partition:
            value = partition_scalar(file.partition[key], t)
            return value, value
        stats = file.stats
        stored = mapping.physical_name(schema.field(key))  # the log's key (format.md)
        if stats is None or stored not in stats.min or stored not in stats.max:
            return None
        if pa.types.is_floating(t):
            return None
        try:
            return stats_scalar(stats.min[stored], t), stats_scalar(stats.max[stored], t)
        except (pa.ArrowException, ValueError, TypeError, ArithmeticError):
            return None

    def prune(self, files: FileStatsColumns) -> np.ndarray:
        """Per file: whether some source key may be in it (every key column agrees)."""
        n = len(files.num_rows)
        if self.empty:
            return np.zeros(n, dtype=bool)
        keep = np.ones(n, dtype=bool)
        for k in self.keys:
            if k in files.partition:
                hit = pc.is_in(files.partition[k], value_set=self._values[k])
                keep &= np.asarray(hit.fill_null(False).to_numpy(zero_copy_only=False), bool)
                continue
            lo, hi = files.min.get(k), files.max.get(k)
            if lo is None or hi is None:
                continue
            keep &= _any_within(self._sorted[k], lo, hi)
        return keep


def _dedupe(
    source: pa.Table, keys: tuple[str, ...], duplicates: Duplicates
) -> tuple[pa.Table, int]:
    """One row per key (rows with a null key are kept: they match nothing)."""
    n = source.num_rows
    if not n:
        return source, 0
    index = pa.array(np.arange(n))
    valid = np.ones(n, dtype=bool)
    for k in keys:
        valid &= np.asarray(source.column(k).is_valid().to_numpy(zero_copy_only=False))
    keyed = source.select(list(keys)).append_column(_ROW, index).filter(pa.array(valid))
    groups = keyed.group_by(list(keys), use_threads=False).aggregate(
        [(_ROW, "count"), (_ROW, "min"), (_ROW, "max")]
    )
    counts = groups.column(f"{_ROW}_count").to_numpy()
    repeated = int(np.count_nonzero(counts > 1))
    if not repeated:
        return source, 0
    if duplicates == "error":
        first = groups.filter(pa.array(counts > 1)).slice(0, 3).select(list(keys)).to_pylist()
        shown = [row[keys[0]] if len(keys) == 1 else row for row in first]
        raise InvalidArgumentError(
            f"expected one source row per key of on={list(keys)}, found {repeated} key(s) "
            f"more than once (e.g. {shown}); pass duplicates='last' or duplicates='first' "
            f"to keep one row per key, or deduplicate the source. Nothing was written."
        )
    pick = groups.column(f"{_ROW}_max" if duplicates == "last" else f"{_ROW}_min").to_numpy()
    keep = np.sort(np.concatenate([pick, np.flatnonzero(~valid)]))
    return source.take(pa.array(keep)), n - len(keep)


def sortable_keys(values: pa.Array) -> np.ndarray:
    """Sorted key values as a numpy array that compares like the column's type."""
    t = values.type
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return np.asarray(values.to_numpy(zero_copy_only=False))
    if pa.types.is_temporal(t):
        width = pa.int32() if t.bit_width == 32 else pa.int64()
        return np.asarray(values.cast(width).to_numpy(zero_copy_only=False))
    return np.asarray(values.to_pylist(), dtype=object)


def slice_within(keys: np.ndarray | list[Any], lo: pa.Scalar, hi: pa.Scalar) -> tuple[int, int]:
    """The positions ``[start, stop)`` of the sorted ``keys`` (from :func:`sortable_keys`; a
    list where that gives objects) within ``[lo, hi]``; everything when a bound is null."""
    if not lo.is_valid or not hi.is_valid:
        return 0, len(keys)
    low, high = _sortable_scalar(lo), _sortable_scalar(hi)
    if isinstance(keys, list):
        return bisect.bisect_left(keys, low), bisect.bisect_right(keys, high)
    return int(np.searchsorted(keys, low, side="left")), int(
        np.searchsorted(keys, high, side="right")
    )


def _sortable_scalar(value: pa.Scalar) -> Any:
    """One value as :func:`sortable_keys` gives it, so that the two compare."""
    t = value.type
    if pa.types.is_temporal(t):
        return value.cast(pa.int32() if t.bit_width == 32 else pa.int64()).as_py()
    return value.as_py()


def _any_within(keys: np.ndarray, lo: pa.Array, hi: pa.Array) -> np.ndarray:
    """Per file: some of the sorted ``keys`` lies in ``[lo, hi]``; a file whose bounds
    are unknown (null) is kept."""
    unknown = np.asarray(
        pc.or_(lo.is_null(), hi.is_null()).to_numpy(zero_copy_only=False), dtype=bool
    )
    found = unknown.copy()
    known = ~unknown
    if not len(keys) or not known.any():
        return found
    mask = pa.array(known)
    los, his = sortable_keys(lo.filter(mask)), sortable_keys(hi.filter(mask))
    if keys.dtype == object:
        ordered = keys.tolist()
        hits = [
            bisect.bisect_right(ordered, h) > bisect.bisect_left(ordered, low)
            for low, h in zip(los.tolist(), his.tolist(), strict=True)
        ]
        found[known] = np.asarray(hits, dtype=bool)
    else:
        found[known] = np.searchsorted(keys, his, side="right") > np.searchsorted(
            keys, los, side="left"
        )
    return found


class MergeChange(RowChange):
    """``merge(source, on=...)`` as a :class:`RowChange`: its clauses
    (:class:`~.clauses.Clauses`) decide per row."""

    operation = "MERGE"

    def __init__(
        self,
        schema: pa.Schema,
        partition_by: tuple[str, ...],
        source: Any,
        on: Any,
        *,
        when_matched: Any,
        when_not_matched: Any,
        when_not_matched_by_source: Any,
        duplicates: str,
        options: WriteOptions,
        extra: pa.Table | None = None,
        text: TextReader | None = None,
        spec: PartitionSpec | None = None,
    ) -> None:
        self.duplicates = _choice("duplicates", duplicates, ("error", "last", "first"))
        self.keys = check_keys(on, schema)
        self.forms = {
            "when_matched": when_matched,
            "when_not_matched": when_not_matched,
            "when_not_matched_by_source": when_not_matched_by_source,
        }
        reader = to_reader(source)
        given = reader.schema
        refuse_given_identity(given.names, schema, where="the merge's source")
        if all(isinstance(f, str) for f in self.forms.values()):
            check_schema(given, schema)  # the string forms: the table's columns exactly
        own, others, missing = source_columns(given, schema, self.keys)
        self.numbers = tuple(c for c in guards_of(schema).identity if c in missing)
        every_extra = [*others, *(extra.schema if extra is not None else [])]
        self.clauses = Clauses(
            schema,
            self.keys,
            legacy("matched", when_matched),
            legacy("not_matched", when_not_matched),
            legacy("not_matched_by_source", when_not_matched_by_source),
            extra=pa.schema(every_extra) if every_extra else None,
            missing=missing,
            kept=self.numbers,
            text=text,
        )
        refuse_assigned_identity(self.clauses, schema)
        self.schema = schema
        self.partition_by = partition_by
        self.partition_spec = spec
        self.options = options
        table = _source_table(reader, schema, own, others)
        if extra is not None:  # computed source columns (Spark), row for row
            for name in extra.column_names:
                table = table.append_column(name, extra.column(name))
        self.source = SourceKeys(table, self.keys, self.duplicates)  # type: ignore[arg-type]
        self.matched = np.zeros(self.source.table.num_rows, dtype=bool)
        """Source rows some target row matched (set by :meth:`probe` and :meth:`apply`)."""
        self._lock = threading.Lock()
        self._index = self.source.index
        self.inserted = 0
        self.by_source = bool(self.clauses.by_source)
        """Whether target rows no source row matches may change (every file is read)."""
        # with WHEN NOT MATCHED BY SOURCE clauses nearly every file changes: no probe
        probe = tuple(dict.fromkeys([*self.keys, *self.clauses.target_columns(), *self.numbers]))
        self.probe_columns = None if self.by_source else probe
        self.conflict_columns = self.keys
        # rows updated from the source row as it is need only the columns that decide;
        # values computed from the target row need every column
        self.split_columns = probe if self.clauses.plain_update and not self.by_source else None

    def for_file(self, file: DataFile) -> MergeChange:
        """This merge for the rows of one target file: lookups among only the source
        rows its bounds allow (what it records is shared with the merge)."""
        index = self.source.index_for(file, self.schema)
        if index is self._index:
            return self
        view = copy.copy(self)
        view._index = index
        return view

    @property
    def noop(self) -> bool:
        """Whether this merge cannot change anything."""
        return self.clauses.noop

    def parameters(self) -> dict[str, Any]:
        out: dict[str, Any] = {"on": list(self.keys)}
        for option, when in (
            ("when_matched", "matched"),
            ("when_not_matched", "not_matched"),
            ("when_not_matched_by_source", "not_matched_by_source"),
        ):
            form = self.forms[option]
            plain = isinstance(form, str) or form is None
            out[option] = form if plain else self.clauses.describe(when)  # type: ignore[arg-type]
        out["duplicates"] = self.duplicates
        return out

    def metrics(self) -> dict[str, Any]:
        return {
            "num_source_rows": self.source.given,
            "num_source_duplicates": self.source.dropped,
            "num_inserted_rows": self.inserted,
        }

    def candidates(self, snapshot: Snapshot) -> Sequence[DataFile]:
        if self.noop:
            return []
        files = list(snapshot.files())
        if self.by_source:
            return files
        if self.source.empty:
            return []
        keep = self.source.prune(snapshot.stats_columns)
        return [f for f, k in zip(files, keep.tolist(), strict=True) if k]

    def prune(self, files: FileStatsColumns) -> np.ndarray:
        if self.by_source:
            return np.ones(len(files.num_rows), dtype=bool)
        return self.source.prune(files)

    def _decide(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row: the matched source row (-1: none), what happens to it (KEEP, UPDATE,
        DELETE) and the clause that decided."""
        idx = self._index.match(batch)
        hit = idx >= 0
        if hit.any():
            with self._lock:
                self.matched[idx[hit]] = True
        action, which = self.clauses.decide(batch, self.source.table, idx)
        return idx, action, which

    def probe(self, batch: pa.RecordBatch) -> Counts:
        _, action, _ = self._decide(batch)
        return _counts(action == UPDATE, action == DELETE)

    def apply(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, Counts]:
        idx, action, which = self._decide(batch)
        updated, deleted = action == UPDATE, action == DELETE
        counts = _counts(updated, deleted)
        if not counts.changed:
            return batch, counts
        out = batch
        if updated.any():
            rows = np.flatnonzero(updated)
            new = self.clauses.new_rows(batch, self.source.table, idx, which, rows)
            mask = pa.array(updated)
            arrays = [
                put_values(batch.column(f.name), mask, new.column(f.name)) for f in self.schema
            ]
            out = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        if deleted.any():
            out = out.filter(pa.array(~deleted))
        return out, counts

    def split(self, batch: pa.RecordBatch) -> tuple[np.ndarray, pa.RecordBatch | None, Counts]:
        leaving, _, new, counts = self.split_changes(batch)
        return leaving, new, counts

    def split_changes(
        self, batch: pa.RecordBatch
    ) -> tuple[np.ndarray, np.ndarray, pa.RecordBatch | None, Counts]:
        idx, action, which = self._decide(batch)
        updated, deleted = action == UPDATE, action == DELETE
        counts = _counts(updated, deleted)
        if not updated.any():
            return deleted, updated, None, counts
        new = self.clauses.new_rows(batch, self.source.table, idx, which, np.flatnonzero(updated))
        return updated | deleted, updated, new, counts

    def conflicts(self, batch: pa.RecordBatch) -> bool:
        if self.by_source:
            return bool(batch.num_rows > 0)
        idx = self._index.match(batch)
        return bool((idx >= 0).any())

    def _unmatched(self) -> Iterator[pa.Table]:
        rows = np.flatnonzero(~self.matched)
        step = 65536
        for start in range(0, len(rows), step):
            yield self.source.table.take(pa.array(rows[start : start + step]))

    def after(
        self, storage: Storage, lease_id: str, *, feed: ChangeWriter | None = None
    ) -> Written:
        if not self.clauses.not_matched or self.matched.all():
            return Written()
        counted = [0]

        identity = self.identity if self.numbers else None

        def batches() -> Iterator[pa.RecordBatch]:
            for part in self._unmatched():
                for b in self.clauses.inserts(part):
                    if identity is not None and b.num_rows:  # numbered by the write
                        b = conform(identity.fill(b.drop_columns(list(self.numbers))), self.schema)
                    counted[0] += b.num_rows
                    if feed is not None:
                        feed.add(b, INSERT)
                    yield b

        adds = write_files(
            storage,
            batches(),
            schema=self.schema,
            partition_by=self.partition_by,
            options=self.options,
            lease_id=lease_id,
            spec=self.partition_spec,
        )
        self.inserted = counted[0]
        return Written(tuple(adds), counted[0])

    def planned_inserts(self) -> int:
        """Source rows no target row matched so far that a clause inserts (what
        :meth:`after` would insert)."""
        if not self.clauses.not_matched:
            return 0
        return sum(self.clauses.count_inserts(part) for part in self._unmatched())


def refuse_assigned_identity(clauses: Clauses, schema: pa.Schema) -> None:
    """Refuse a clause that sets a GENERATED ALWAYS identity column."""
    for compiled in (*clauses.matched, *clauses.not_matched, *clauses.by_source):
        if compiled.values:
            refuse_given_identity(
                compiled.values, schema, where=f"a {compiled.clause.action} clause's values"
            )


def source_columns(
    given: pa.Schema, schema: pa.Schema, keys: Sequence[str]
) -> tuple[pa.Schema, list[pa.Field], list[str]]:
    """A merge source's columns: those of the table (checked against its types), the
    others (``source.<col>`` in clauses), and the table's columns it lacks (it must
    hold the keys)."""
    lacking = [k for k in keys if k not in given.names]
    if lacking:
        raise InvalidArgumentError(
            f"expected the merge source to hold the key columns {list(keys)}, found it lacks "
            f"{lacking} (its columns: {given.names})"
        )
    own = pa.schema([schema.field(n) for n in schema.names if n in given.names])
    check_schema(pa.schema([given.field(n) for n in own.names]), own)
    others = [given.field(n) for n in given.names if n not in schema.names]
    return own, others, [n for n in schema.names if n not in given.names]


def _source_table(
    reader: pa.RecordBatchReader, schema: pa.Schema, own: pa.Schema, others: list[pa.Field]
) -> pa.Table:
    """The source as the merge holds it: the table's columns (null where the source
    lacks one: no clause reads it), then the source's other columns."""
    full = pa.schema([*schema, *others])
    batches = []
    for b in reader:
        if not b.num_rows:
            continue
        mine = conform(b.select(own.names), own)
        arrays = [
            mine.column(f.name) if f.name in own.names else pa.nulls(b.num_rows, f.type)
            for f in schema
        ]
        arrays += [b.column(f.name) for f in others]
        batches.append(pa.RecordBatch.from_arrays(arrays, schema=full))
    return pa.Table.from_batches(batches, schema=full)


def put_values(column: pa.Array, mask: pa.BooleanArray, values: pa.Array) -> pa.Array:
    """``column`` with the rows where ``mask`` is true replaced by ``values``, in order."""
    try:
        return pc.replace_with_mask(column, mask, values)
    except pa.ArrowNotImplementedError:  # nested types: spread the values out first
        where = np.cumsum(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=np.int64)) - 1
        spread = values.take(pa.array(np.maximum(where, 0)))
        return pc.if_else(mask, spread, column)


def _counts(updated: np.ndarray, deleted: np.ndarray) -> Counts:
    n = len(updated)
    d = int(np.count_nonzero(deleted))
    u = int(np.count_nonzero(updated & ~deleted))
    return Counts(deleted=d, updated=u, kept=n - d - u)
