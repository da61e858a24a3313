"""Leaves of version-2 manifests: immutable Parquet files of file entries, typed.

A leaf holds one row per data file (``docs/format.md``, "Leaves"): path, sizes, tags,
the partition values and the ``min``/``max``/``null_count`` statistics as Arrow structs
in the table's own types. Leaves never change once written, so a process keeps the
ones it read in a bounded cache (:data:`CACHE`) keyed by table and path, shared by every
snapshot that references them.

Invariants:

* Rows are sorted by partition values (nulls last), then path (:func:`sort_entries`).
* Converting the log's JSON to typed columns and back is lossless for what lakelog's
  writers record; a value that does not convert becomes unknown (null), which prunes
  conservatively, and a partition string that is not the canonical form of its typed
  value is kept verbatim in ``partition_text``.
"""

from __future__ import annotations

import functools
import io
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import CorruptLogError, ManifestLeafError
from ..filters import FileStatsColumns
from ..paths import check_manifest_paths, check_read_paths
from ..storage import Storage
from .actions import DataFile, FileStats
from .commits import LOG_DIR
from .file_index import bounded_columns, typed_partitions, typed_stats
from .files import vectors_of
from .format import CURRENT, ROOTS, check_readable

__all__ = [
    "CACHE",
    "LEAF_DIR",
    "Leaf",
    "LeafCache",
    "conform",
    "entries_from_files",
    "leaf_path",
    "leaf_schema",
    "leaf_version",
    "plans_path",
    "load_leaves",
    "sort_entries",
    "struct_fields",
    "write_leaf",
]

LEAF_DIR = f"{LOG_DIR}/_leaves"
META_KEY = b"lakelog"
"""The key of the lakelog header in the Parquet key-value metadata of every log file
(version-1 manifests, roots, leaves)."""


def read_log_parquet(data: bytes) -> tuple[pa.Table, bytes]:
    """A log Parquet file read from memory, with the raw lakelog header of its key-value
    metadata; :class:`ValueError` when it has none (Arrow and OS errors as they come).

    Read in this thread: ``pq.read_table`` would go through the dataset scanner, whose
    pool threads can drop the last reference to the Python-owned buffer after the
    interpreter began exiting (SIGABRT at exit)."""
    table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise ValueError("no lakelog header in the Parquet metadata")
    return table, raw


_TAGS_DEC = msgspec.json.Decoder(dict[str, str])
_PART_DEC = msgspec.json.Decoder(dict[str, str | None])


class _LeafHeader(msgspec.Struct, frozen=True):
    format_version: int
    num_files: int


def leaf_path(version: int) -> str:
    """A fresh name for a leaf written for the root of ``version``."""
    return f"{LEAF_DIR}/{version:020d}-{secrets.token_hex(8)}.parquet"


def plans_path(version: int) -> str:
    """A fresh name for the plans file of the root of ``version`` (format version 4)."""
    return f"{LEAF_DIR}/{version:020d}-{secrets.token_hex(8)}{PLANS_SUFFIX}"


PLANS_SUFFIX = ".plans.json"


def leaf_version(path: str) -> int | None:
    """The root version a leaf (or a plans file, which counts as one) was written for,
    from its name; None if not such a name."""
    name = path.rsplit("/", 1)[-1]
    head, _, rest = name.partition("-")
    if len(head) != 20 or not head.isdigit() or not rest.endswith((".parquet", PLANS_SUFFIX)):
        return None
    return int(head)


# -- typed entries -------------------------------------------------------------------


def leaf_schema(schema: pa.Schema, partition_by: Sequence[str]) -> pa.Schema:
    """Columns of a leaf for a table of ``schema`` (format.md, "Leaves")."""
    fields = [
        pa.field("path", pa.string(), nullable=False),
        pa.field("size_bytes", pa.int64(), nullable=False),
        pa.field("num_rows", pa.int64(), nullable=False),
        pa.field("modification_ms", pa.int64()),
        pa.field("tags", pa.string()),
    ]
    if partition_by:
        fields.append(pa.field("partition", pa.struct([schema.field(c) for c in partition_by])))
    fields.append(pa.field("partition_text", pa.string()))
    bounds = bounded_columns(schema, tuple(partition_by))
    if bounds:
        struct = pa.struct([pa.field(c, schema.field(c).type) for c in bounds])
        fields += [pa.field("min", struct), pa.field("max", struct)]
    counted = [f.name for f in schema if f.name not in partition_by]
    if counted:
        fields.append(pa.field("null_count", pa.struct([pa.field(c, pa.int64()) for c in counted])))
    fields += [pa.field("deleted_rows", pa.int64()), pa.field("deleted_bitmap", pa.string())]
    return pa.schema(fields)


def _canonical(typed: pa.Array) -> pa.Array:
    """The string form of typed partition values (format.md, "Data files")."""
    return typed.cast(pa.string())


def entries_from_files(files: pa.Table, schema: pa.Schema, partition_by: Sequence[str]) -> pa.Table:
    """Leaf rows (:func:`leaf_schema`) of a file table (:func:`~.files.files_from_adds`), in its
    order: JSON parsed in one pass of Arrow's reader, no Python per file."""
    target = leaf_schema(schema, partition_by)
    n = files.num_rows
    if not n:
        return target.empty_table()
    tags = files.column("tags").combine_chunks()
    tags = pc.if_else(pc.fill_null(pc.equal(tags, "{}"), True), pa.nulls(n, pa.string()), tags)
    cols: dict[str, pa.Array] = {
        "path": files.column("path").combine_chunks(),
        "size_bytes": files.column("size_bytes").combine_chunks(),
        "num_rows": files.column("num_rows").combine_chunks(),
        "modification_ms": files.column("modification_ms").combine_chunks(),
        "tags": tags,
    }
    text = pa.nulls(n, pa.string())
    if partition_by:
        raw = files.column("partition").combine_chunks()
        strings, typed = typed_partitions(raw, schema, partition_by)
        differs: pa.Array = pa.repeat(pa.scalar(False), n)
        for c in partition_by:
            same = pc.equal(_canonical(typed[c]), strings[c])
            ok = pc.if_else(pc.is_null(strings[c]), pc.is_null(typed[c]), pc.fill_null(same, False))
            differs = pc.or_(differs, pc.invert(ok))
        text = pc.if_else(differs, raw, pa.nulls(n, pa.string()))
        cols["partition"] = pa.StructArray.from_arrays(
            [typed[c] for c in partition_by], fields=[schema.field(c) for c in partition_by]
        )
    cols["partition_text"] = text
    mins, maxs, nulls = typed_stats(files.column("stats"), schema, tuple(partition_by))
    for name in ("min", "max"):
        if name not in target.names:
            continue
        struct_type = target.field(name).type
        got = mins if name == "min" else maxs
        cols[name] = pa.StructArray.from_arrays(
            [got.get(f.name, pa.nulls(n, f.type)) for f in struct_type], fields=list(struct_type)
        )
    if "null_count" in target.names:
        struct_type = target.field("null_count").type
        cols["null_count"] = pa.StructArray.from_arrays(
            [nulls.get(f.name, pa.nulls(n, pa.int64())) for f in struct_type],
            fields=list(struct_type),
        )
    for name in ("deleted_rows", "deleted_bitmap"):
        cols[name] = (
            files.column(name).combine_chunks()
            if name in files.column_names
            else pa.nulls(n, target.field(name).type)
        )
    return pa.table([cols[f.name] for f in target], schema=target)


def sort_entries(entries: pa.Table) -> pa.Table:
    """Rows in leaf order: partition values (nulls last), then path."""
    if entries.num_rows <= 1:
        return entries
    keys: dict[str, pa.Array] = {}
    if "partition" in entries.column_names:
        part = entries.column("partition").combine_chunks()
        for i in range(part.type.num_fields):
            keys[f"p{i}"] = part.field(i)
    keys["path"] = entries.column("path").combine_chunks()
    order = pc.sort_indices(pa.table(keys), sort_keys=[(k, "ascending", "at_end") for k in keys])
    return entries.take(order)


def struct_fields(table: pa.Table, column: str) -> dict[str, pa.Array]:
    """The fields of a struct column by name ({} if the column is absent)."""
    if column not in table.column_names:
        return {}
    arr = table.column(column).combine_chunks()
    if not isinstance(arr, pa.StructArray):
        return {}
    flat = arr.flatten()  # fields with the struct's own nulls applied
    return {arr.type.field(i).name: flat[i] for i in range(arr.type.num_fields)}


def conform(values: pa.Array | None, t: pa.DataType) -> pa.Array | None:
    """``values`` in type ``t``; None when absent or when they do not cast (unknown)."""
    if values is None:
        return None
    if values.type == t:
        return values
    try:
        return values.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def _json_form(values: pa.Array) -> list[Any]:
    """Bounds as Python values in their JSON form (format.md, "Statistics")."""
    t = values.type
    if pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t):
        values = values.cast(pa.int32() if t.bit_width == 32 else pa.int64())
    elif pa.types.is_decimal(t):
        values = values.cast(pa.string())
    out: list[Any] = values.to_pylist()
    return out


def _strings(typed: pa.Array) -> list[str | None]:
    """The string forms of typed partition values, one Python string per distinct value
    (partition values repeat: converting the distinct ones is what costs)."""
    encoded = pc.dictionary_encode(typed)
    forms = _canonical(encoded.dictionary).to_pylist()
    forms.append(None)
    codes = pc.fill_null(encoded.indices, len(forms) - 1).to_numpy(zero_copy_only=False)
    return [forms[i] for i in codes.tolist()]


@functools.lru_cache(maxsize=64)
def _row_dicts(k: int) -> Callable[..., list[dict[str, Any]]]:
    """A function of ``k`` keys and ``k`` equal-length columns giving one dict per row.

    Built from a dict display in a comprehension (``{k0: v0, k1: v1}``), which is about
    twice as fast per row as ``dict(zip(keys, row))``; the generated source holds only
    names made from integers.
    """
    keys = ", ".join(f"k{i}" for i in range(k))
    cols = ", ".join(f"c{i}" for i in range(k))
    body = ", ".join(f"k{i}: v{i}" for i in range(k))
    rows = "v0 in c0" if k == 1 else f"{', '.join(f'v{i}' for i in range(k))} in zip({cols})"
    built: Callable[..., list[dict[str, Any]]] = eval(
        f"lambda {keys}, {cols}: [{{{body}}} for {rows}]"
    )
    return built


def _dicts(fields: dict[str, pa.Array], n: int) -> list[dict[str, Any]]:
    """One dict per row of the non-null values of ``fields`` (bounds in JSON form)."""
    names = list(fields)
    values = [_json_form(a) for a in fields.values()]
    if not names:
        return [{} for _ in range(n)]
    out = _row_dicts(len(names))(*names, *values)
    for name, arr in fields.items():
        if arr.null_count:
            for i in np.flatnonzero(~np.asarray(arr.is_valid())).tolist():
                del out[i][name]
    return out


_FLAT_COLUMNS = frozenset(
    {"path", "size_bytes", "num_rows", "modification_ms", "deleted_rows", "deleted_bitmap"}
)
"""Columns a version-1 file table and typed entries hold alike (name and type)."""


class Leaf:
    """File entries in typed columns (immutable): the rows of one manifest leaf, of a
    version-1 manifest, or of the files added since a manifest. The one in-memory form
    of live files (``docs/format.md``, "Leaves").

    Entries from a version-1 file table (:meth:`of_files`) are typed on first use of
    their partition values, statistics or tags: counts and paths read the columns both
    forms share, so resolving a version does not parse every file's statistics."""

    __slots__ = ("_cols", "_files", "_lock", "_paths", "_table", "nbytes", "path")

    def __init__(self, table: pa.Table, path: str | None = None) -> None:
        self._table: pa.Table | None = table.combine_chunks()
        self._files: tuple[pa.Table, pa.Schema, tuple[str, ...]] | None = None
        self.path = path
        self.nbytes = int(table.nbytes)
        self._paths: pa.Array | None = None
        self._cols: dict[Any, FileStatsColumns] = {}
        self._lock = threading.Lock()

    @classmethod
    def of_files(cls, files: pa.Table, schema: pa.Schema, partition_by: Sequence[str]) -> Leaf:
        """Entries of a version-1 file table (JSON columns), typed when first needed."""
        out = cls(pa.table({}))
        out._table = None
        out._files = (files.combine_chunks(), schema, tuple(partition_by))
        out.nbytes = int(files.nbytes)
        return out

    @property
    def table(self) -> pa.Table:
        """The entries as one table of the leaf schema."""
        with self._lock:
            if self._table is None:
                assert self._files is not None
                files, schema, partition_by = self._files
                self._table = entries_from_files(files, schema, partition_by).combine_chunks()
                self._files = None
            return self._table

    def _flat(self, name: str) -> pa.Table | None:
        """The version-1 file table when it holds ``name`` and is not typed yet."""
        got = self._files
        return got[0] if got is not None and name in _FLAT_COLUMNS else None

    def __len__(self) -> int:
        got = self._files
        return int(got[0].num_rows if got is not None else self.table.num_rows)

    def paths(self) -> pa.Array:
        if self._paths is None:
            self._paths = self.column("path")
        return self._paths

    def column(self, name: str) -> pa.Array:
        flat = self._flat(name)
        return (flat if flat is not None else self.table).column(name).combine_chunks()

    def live_rows(self, positions: pa.Array | None = None) -> int:
        """Rows not deleted (``num_rows`` less ``deleted_rows``) of the entries at
        ``positions`` (None: of every entry)."""
        rows = self.column("num_rows")
        deleted = self.column("deleted_rows")
        if positions is not None:
            rows, deleted = rows.take(positions), deleted.take(positions)
        total = int(pc.sum(rows).as_py() or 0)
        return total - int(pc.sum(deleted).as_py() or 0)

    def stats_columns(
        self,
        schema: pa.Schema,
        partition_by: tuple[str, ...],
        names: frozenset[str] | None,
        key: str,
    ) -> FileStatsColumns:
        """Typed columns of the rows for pruning, in the types of ``schema`` (``key``
        identifies it), only of ``names`` when given; cached."""
        with self._lock:
            got = self._cols.get((key, names))
            if got is not None:
                return got
        part = struct_fields(self.table, "partition")
        mins = struct_fields(self.table, "min")
        maxs = struct_fields(self.table, "max")
        nulls = struct_fields(self.table, "null_count")
        partition: dict[str, pa.Array] = {}
        lo: dict[str, pa.Array] = {}
        hi: dict[str, pa.Array] = {}
        counts: dict[str, pa.Array] = {}
        for c in partition_by:
            if names is None or c in names:
                typed = conform(part.get(c), schema.field(c).type)
                if typed is not None:
                    partition[c] = typed
        for c in bounded_columns(schema, partition_by):
            if names is None or c in names:
                t = schema.field(c).type
                a, b = conform(mins.get(c), t), conform(maxs.get(c), t)
                if a is not None and b is not None:
                    lo[c], hi[c] = a, b
        for f in schema:
            if f.name not in partition_by and (names is None or f.name in names):
                got_n = conform(nulls.get(f.name), pa.int64())
                if got_n is not None:
                    counts[f.name] = got_n
        built = FileStatsColumns(
            num_rows=self.column("num_rows"), partition=partition, min=lo, max=hi, null_count=counts
        )
        with self._lock:
            if len(self._cols) >= 8:
                self._cols.clear()
            self._cols[(key, names)] = built
        return built

    def data_files(self, mask: pa.Array | np.ndarray | None = None) -> list[DataFile]:
        """:class:`DataFile` objects of the rows where ``mask`` is true (all if None)."""
        t = self.table if mask is None else self.table.filter(mask)
        n = t.num_rows
        if not n:
            return []
        paths = t.column("path").to_pylist()
        sizes = t.column("size_bytes").to_pylist()
        rows = t.column("num_rows").to_pylist()
        mtimes = pc.fill_null(t.column("modification_ms"), 0).to_pylist()
        tag_col = t.column("tags")
        tags: list[Any] = (
            [None] * n
            if tag_col.null_count == n
            else [None if raw is None else _TAGS_DEC.decode(raw) for raw in tag_col.to_pylist()]
        )
        parts = self._partitions(t, n)
        stats = self._stats(t, n)
        vectors = vectors_of(t)
        return [
            DataFile(
                path=p,
                size_bytes=s,
                num_rows=r,
                partition=part,
                stats=st,
                modification_ms=m,
                tags=tg or {},
                deleted=dv,
            )
            for p, s, r, part, st, m, tg, dv in zip(
                paths, sizes, rows, parts, stats, mtimes, tags, vectors, strict=True
            )
        ]

    @staticmethod
    def _partitions(t: pa.Table, n: int) -> list[dict[str, str | None]]:
        fields = struct_fields(t, "partition")
        names = list(fields)
        if not names:
            return [{} for _ in range(n)]
        columns = [_strings(fields[c]) for c in names]
        if len(names) == 1:
            (name,), (values,) = names, columns
            parts = [{name: v} for v in values]
        else:
            parts = [dict(zip(names, vals, strict=True)) for vals in zip(*columns, strict=True)]
        text = t.column("partition_text")
        if text.null_count < n:
            for i, raw in enumerate(text.to_pylist()):
                if raw is not None:
                    parts[i] = _PART_DEC.decode(raw)
        return parts

    @staticmethod
    def _stats(t: pa.Table, n: int) -> list[FileStats | None]:
        known = np.zeros(n, dtype=bool)
        kinds: list[list[dict[str, Any]] | None] = []
        for name in ("min", "max", "null_count"):
            fields = {c: a for c, a in struct_fields(t, name).items() if a.null_count < n}
            for a in fields.values():
                known |= np.asarray(a.is_valid())
            kinds.append(_dicts(fields, n) if fields else None)
        if not known.any():
            return [None] * n
        empty: dict[str, Any] = {}
        mins, maxs, nulls = (k if k is not None else [empty] * n for k in kinds)
        return [
            FileStats(min=lo, max=hi, null_count=nc) if has else None
            for lo, hi, nc, has in zip(mins, maxs, nulls, known.tolist(), strict=True)
        ]

    # -- encoding ---------------------------------------------------------------------
    def encode(self) -> bytes:
        check_manifest_paths(self.paths(), f"manifest leaf {self.path or '(new)'}")
        header = msgspec.json.encode(_LeafHeader(ROOTS.version, len(self)))
        table = self.table.replace_schema_metadata({META_KEY: header})
        buf = io.BytesIO()
        pq.write_table(
            table,
            buf,
            compression="zstd",
            row_group_size=max(1, len(self)),
            write_statistics=False,
        )
        return buf.getvalue()

    @classmethod
    def decode(cls, data: bytes, path: str, *, reader_version: int = CURRENT) -> Leaf:
        """A leaf from its bytes; :class:`ManifestLeafError` if damaged,
        :class:`UnsupportedFormatError` if newer than ``reader_version``."""
        try:
            table, raw = read_log_parquet(data)
            header = msgspec.json.decode(raw, type=_LeafHeader)
        except (pa.ArrowException, ValueError, msgspec.DecodeError, OSError) as e:
            raise ManifestLeafError(
                f"expected a readable manifest leaf at {path}, found {e}", leaf=path
            ) from e
        check_readable(
            header.format_version, what="manifest leaf", where=path, reader_version=reader_version
        )
        missing = {"path", "size_bytes", "num_rows", "modification_ms", "tags", "partition_text"}
        missing -= set(table.column_names)
        if header.num_files != table.num_rows or missing:
            raise ManifestLeafError(
                f"expected manifest leaf {path} to hold {header.num_files} files with the "
                f"columns of format.md, found {table.num_rows} rows"
                + (f" and no column {sorted(missing)}" if missing else ""),
                leaf=path,
            )
        try:
            check_read_paths(table.column("path"), f"manifest leaf {path}")
        except CorruptLogError as e:  # damaged like any other leaf: resolved without it
            raise ManifestLeafError(str(e), leaf=path) from e
        return cls(table.replace_schema_metadata(None), path)


# -- storage and cache ----------------------------------------------------------------


class LeafCache:
    """Leaves read or written by this process, least recently used first out, within
    ``limit_bytes`` of Arrow memory. Leaves are immutable, so a cached one is never stale."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._items: OrderedDict[tuple[str, str], Leaf] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, uri: str, path: str) -> Leaf | None:
        with self._lock:
            leaf = self._items.get((uri, path))
            if leaf is not None:
                self._items.move_to_end((uri, path))
            return leaf

    def put(self, uri: str, leaf: Leaf) -> None:
        assert leaf.path is not None
        key = (uri, leaf.path)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._items[key] = leaf
            self._bytes += leaf.nbytes
            while self._bytes > self.limit_bytes and len(self._items) > 1:
                _, out = self._items.popitem(last=False)
                self._bytes -= out.nbytes

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    @property
    def nbytes(self) -> int:
        return self._bytes


CACHE = LeafCache(256 << 20)
"""The process-wide leaf cache (256 MiB of Arrow memory: about 2M file entries)."""


def load_leaves(storage: Storage, paths: Sequence[str]) -> list[Leaf]:
    """The leaves at ``paths``, from the cache or read (concurrently on object stores).

    :class:`ManifestLeafError` if one is missing or damaged.
    """
    out: dict[str, Leaf] = {}
    todo = []
    for p in paths:
        hit = CACHE.get(storage.uri, p)
        if hit is None:
            todo.append(p)
        else:
            out[p] = hit
    todo = list(dict.fromkeys(todo))
    if todo:
        for p, data in zip(todo, storage.read_many(todo), strict=True):
            if data is None:
                raise ManifestLeafError(
                    f"expected manifest leaf {p} of {storage.uri}, found it missing", leaf=p
                )
            leaf = Leaf.decode(data, p)
            CACHE.put(storage.uri, leaf)
            out[p] = leaf
    return [out[p] for p in paths]


def write_leaf(storage: Storage, version: int, entries: pa.Table) -> Leaf:
    """Write ``entries`` (sorted) as a new leaf for the root of ``version``; cached."""
    leaf = Leaf(entries, leaf_path(version))
    assert leaf.path is not None
    storage.write_bytes(leaf.path, leaf.encode())
    CACHE.put(storage.uri, leaf)
    return leaf
