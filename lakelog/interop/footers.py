"""What Parquet files say about themselves, for adopting them (:mod:`.convert`).

:func:`read_footers` reads footers in parallel threads (one ranged read of each
file's tail, a second only for a footer over 64 KiB) and describes each file as
lakelog's writer describes its own: row count and statistics from the footer
(:func:`lakelog.stats.stats_from_metadata`). :func:`unify_schemas` finds one schema
for many files, :func:`partition_layout` reads Hive partition folders. Every check
collects all the files concerned into one error (naming up to :data:`SHOWN`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow._parquet as _parquet
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from .. import threads
from ..errors import InvalidArgumentError, SchemaMismatchError
from ..io.schema import duplicate_columns, readable_as, widens
from ..log.actions import AddFile, FileStats
from ..partitioning import NULL_PARTITION, hidden_name, parse_partition_dir, partition_string
from ..stats import StatsPlan, stats_from_metadata
from ..storage import FileInfo, Storage

__all__ = [
    "MAX_WORKERS",
    "PARQUET_SUFFIXES",
    "SHOWN",
    "Footer",
    "Unreadable",
    "add_actions",
    "check_against_table",
    "check_no_partition_columns",
    "differently_typed",
    "hidden_path",
    "is_parquet",
    "list_parquet",
    "listed",
    "partition_layout",
    "read_footers",
    "readable_footers",
    "unify_schemas",
]

log = logging.getLogger("lakelog")

MAX_WORKERS = 16
"""Footers read at once (threads) from remote stores; local disk and memory read them
in the calling thread (:func:`_workers`)."""
SHOWN = 10
"""Files named in an error message; the message says how many more there are."""
PARQUET_SUFFIXES = (".parquet", ".parq", ".pq")
"""File names ``convert`` and ``add_files`` take for Parquet (case-insensitive)."""
_TAIL = 64 * 1024
_CHUNK = 128


# -- footers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Footer:
    """What one file's footer says, described with its own (normalized) schema."""

    path: str
    size: int
    mtime_ms: int
    num_rows: int
    schema: pa.Schema
    stats: FileStats


@dataclass(frozen=True)
class Unreadable:
    path: str
    reason: str
    gone: bool = False
    """The file was there when listed and missing when read."""


def _normalized(schema: pa.Schema) -> pa.Schema:
    """A file's Arrow schema as a table column would hold it: no metadata, dictionaries
    as their value type (the statistics are the values')."""
    fields = []
    for f in schema:
        t = f.type
        if pa.types.is_dictionary(t):
            t = t.value_type
        fields.append(pa.field(f.name, t, f.nullable))
    return pa.schema(fields)


def _local(storage: Storage) -> bool:
    return isinstance(storage.fs, LocalFileSystem)


def _tail(storage: Storage, path: str, size: int, length: int) -> bytes:
    start = max(0, size - length)
    full = storage.full(path)
    if _local(storage):
        fd = os.open(full, os.O_RDONLY)
        try:
            return os.pread(fd, size - start, start)
        finally:
            os.close(fd)
    data = storage.fs.cat_file(full, start=start, end=size)
    return bytes(data)


_Shapes = dict[bytes | str, tuple[pa.Schema, StatsPlan]]
"""Per footer shape (the serialized Arrow schema, or the Parquet schema's text): the
normalized Arrow schema and the plan of its statistics. Files written alike share
them, worked out once."""


def _shape_of(
    md: pq.FileMetaData, cache: _Shapes, types: pa.Schema | None
) -> tuple[pa.Schema, StatsPlan]:
    key: bytes | str | None = (md.metadata or {}).get(b"ARROW:schema")
    if key is None:
        key = str(md.schema)
    got = cache.get(key)
    if got is None:
        schema = _normalized(md.schema.to_arrow_schema())
        got = cache.setdefault(key, (schema, StatsPlan(md, schema if types is None else types)))
    return got


_reconstruct = getattr(_parquet, "_reconstruct_filemetadata", None)
"""pyarrow's own way back from serialized footer metadata (what unpickling a
``FileMetaData`` calls): a direct parse, without the reader set-up."""


def _parse_footer(footer: bytes) -> pq.FileMetaData:
    """The metadata of a footer (its bytes with the trailing length and magic).

    Parsed directly where pyarrow allows (a third of the time of opening a reader on
    it, per file); else through pyarrow's reader (``pq.read_metadata`` would wrap it
    in a ``ParquetFile``, whose set-up costs as much again)."""
    if _reconstruct is not None:
        try:
            md: pq.FileMetaData = _reconstruct(pa.py_buffer(footer[:-8]))
            return md
        except TypeError:  # another signature in this pyarrow: the reader below
            pass
    reader = getattr(pq, "ParquetReader", None)
    if reader is None:  # a pyarrow without it in its parquet namespace
        return pq.read_metadata(pa.BufferReader(footer))
    r = reader()
    r.open(pa.BufferReader(footer))
    return r.metadata


def _read_footer(
    storage: Storage, info: FileInfo, cache: _Shapes, types: pa.Schema | None
) -> Footer | Unreadable:
    """The footer of one file (one read of its last 64 KiB; a second if it is larger);
    statistics over the column types of ``types`` (default: the file's own)."""
    path, size = info.path, info.size
    log.debug("reading the footer of %s", path)  # which process reads footers (Spark convert)
    try:
        data = _tail(storage, path, size, _TAIL)
        if len(data) < 12 or data[-4:] != b"PAR1":
            why = "an encrypted footer" if data[-4:] == b"PARE" else "no Parquet footer"
            return Unreadable(path, f"{why} (not a plain Parquet file)")
        length = int.from_bytes(data[-8:-4], "little")
        if length + 12 > size:
            return Unreadable(path, "a footer longer than the file (truncated?)")
        if length + 8 > len(data):
            data = _tail(storage, path, size, length + 8)
        md = _parse_footer(data[-(length + 8) :])
        schema, plan = _shape_of(md, cache, types)
        stats = stats_from_metadata(md, schema if types is None else types, plan=plan)
    except FileNotFoundError:
        return Unreadable(path, "gone (deleted while reading)", gone=True)
    except (OSError, pa.ArrowException, ValueError) as e:
        return Unreadable(path, f"an unreadable footer ({' '.join(str(e).split())})")
    return Footer(path, size, info.mtime_ms or 0, md.num_rows, schema, stats)


def _workers(storage: Storage) -> int:
    # decoding a footer holds the GIL most of the time: threads pay off only while they
    # wait on a remote store (measured on local disk: two threads slower than one)
    return 1 if _local(storage) or storage.protocol == "memory" else MAX_WORKERS


def read_footers(
    storage: Storage, infos: Sequence[FileInfo], *, types: pa.Schema | None = None
) -> list[Footer | Unreadable]:
    """Footers of ``infos``, in order, read in parallel (chunks of files per task), with
    statistics over the column types of ``types`` (the table's data columns; default:
    each file's own types)."""
    chunks = [infos[i : i + _CHUNK] for i in range(0, len(infos), _CHUNK)]
    cache: _Shapes = {}

    def run(chunk: Sequence[FileInfo]) -> list[Footer | Unreadable]:
        return [_read_footer(storage, info, cache, types) for info in chunk]

    workers = min(_workers(storage), len(chunks))
    if workers <= 1:
        return [r for c in chunks for r in run(c)]
    with threads.pool("lakelog-footers", workers) as pool:
        return [r for part in pool.map(run, chunks) for r in part]


def listed(paths: Sequence[str], more: int) -> str:
    shown = ", ".join(repr(p) for p in paths[:SHOWN])
    rest = len(paths) - SHOWN + more
    return shown + (f" and {rest} more" if rest > 0 else "")


def readable_footers(results: Sequence[Footer | Unreadable], *, nothing: str) -> list[Footer]:
    bad = [r for r in results if isinstance(r, Unreadable)]
    if bad:
        lines = "; ".join(f"{b.path!r}: {b.reason}" for b in bad[:SHOWN])
        more = f"; and {len(bad) - SHOWN} more" if len(bad) > SHOWN else ""
        raise InvalidArgumentError(
            f"expected Parquet files, found {len(bad)} that cannot be read as Parquet: "
            f"{lines}{more}. Remove or fix them and try again; {nothing}"
        )
    return [r for r in results if isinstance(r, Footer)]


# -- schemas ---------------------------------------------------------------------------


def unify_schemas(footers: Sequence[Footer]) -> pa.Schema:
    """One schema for files whose schemas differ only in ways a reader bridges: columns
    some files lack (nullable, read as nulls) and types that widen (``int32`` and
    ``int64`` give ``int64``). Anything else: :class:`SchemaMismatchError` naming the
    files on each side of every difference."""
    by_id: dict[int, tuple[pa.Schema, list[str]]] = {}
    for f in footers:  # files read alike share one schema object (read_footers)
        by_id.setdefault(id(f.schema), (f.schema, []))[1].append(f.path)
    groups: dict[pa.Schema, list[str]] = {}
    for schema, paths in by_id.values():
        groups.setdefault(schema, []).extend(paths)
    order: list[str] = []
    types: dict[str, pa.DataType] = {}
    nullable: dict[str, bool] = {}
    seen_in: dict[str, int] = {}
    for schema, paths in groups.items():
        dup = duplicate_columns(schema)
        if dup:
            raise SchemaMismatchError(
                f"expected distinct column names in every file, found {dup} more than once "
                f"in {listed(paths, 0)}; rewrite those files with distinct names."
            )
        for field in schema:
            name = field.name
            if name not in types:
                order.append(name)
                types[name] = field.type
                nullable[name] = field.nullable
                seen_in[name] = 0
            seen_in[name] += len(paths)
            nullable[name] = nullable[name] and field.nullable
            have = types[name]
            if have == field.type or readable_as(field.type, have, dropped=False):
                continue
            if widens(have, field.type):
                types[name] = field.type
                continue
            raise SchemaMismatchError(
                f"expected one type per column across the files, found column {name!r} as "
                f"{have} in {listed(_with(groups, name, have), 0)} and as {field.type} in "
                f"{listed(paths, 0)}, and neither widens to the other. Rewrite the files "
                f"of one side with the other's type, or adopt them as separate tables; "
                f"nothing was committed."
            )
    total = len(footers)
    fields = [
        pa.field(n, types[n], nullable[n] or seen_in[n] < total or types[n] == pa.null())
        for n in order
    ]
    if any(f.type == pa.null() for f in fields):
        empty = [f.name for f in fields if f.type == pa.null()]
        raise SchemaMismatchError(
            f"expected a type for every column, found only nulls for {empty} in every file "
            f"(type null); write at least one file with typed values, or drop the column."
        )
    return pa.schema(fields)


def differently_typed(footers: Sequence[Footer], schema: pa.Schema) -> list[Footer]:
    """Files holding a column in another type than ``schema``'s (a narrower one): their
    statistics were taken over their own types, and are taken again over the table's."""
    by_id = {id(f.schema): f.schema for f in footers}
    other = {
        key
        for key, s in by_id.items()
        if any(f.name in schema.names and schema.field(f.name).type != f.type for f in s)
    }
    return [f for f in footers if id(f.schema) in other]


def _with(groups: Mapping[pa.Schema, list[str]], name: str, t: pa.DataType) -> list[str]:
    return [
        p
        for s, paths in groups.items()
        if name in s.names and readable_as(s.field(name).type, t, dropped=False)
        for p in paths
    ]


# -- partitions ------------------------------------------------------------------------


def _folders(path: str) -> list[tuple[str, str | None]]:
    """``col=value`` folders of a root-relative path, in order (values decoded)."""
    return list(parse_partition_dir(path).items())


def _infer_type(values: Iterable[str | None]) -> pa.DataType:
    """The narrowest partition type whose string form gives back every value exactly:
    int64, date32, bool, else string (``007`` stays a string: as an integer it would
    be written ``7``)."""
    texts = [v for v in values if v is not None]
    if not texts:
        return pa.string()
    for t in (pa.int64(), pa.date32(), pa.bool_()):
        try:
            typed = pa.array(texts, pa.string()).cast(t).to_pylist()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
        if all(partition_string(v) == s for v, s in zip(typed, texts, strict=True)):
            return t
    return pa.string()


def partition_layout(
    footers: Sequence[Footer], partition_by: Sequence[str] | pa.Schema | None
) -> tuple[list[pa.Field], list[dict[str, str | None]]]:
    """Partition columns (typed) and each file's values, from its Hive-style folders.

    ``partition_by`` None: inferred (every file must have the same ``col=`` folders,
    or none); names: those folders, in that order, types inferred; a schema: also the
    types. Values are returned in their canonical string form. Work is per folder,
    not per file."""
    by_dir: dict[str, list[str]] = {}
    for f in footers:
        by_dir.setdefault(f.path.rpartition("/")[0], []).append(f.path)
    folders = {d: _folders(d + "/x") for d in by_dir}
    if partition_by is None:
        layouts: dict[tuple[str, ...], list[str]] = {}
        for d, fs in folders.items():
            layouts.setdefault(tuple(k for k, _ in fs), []).extend(by_dir[d])
        if len(layouts) > 1:
            described = "; ".join(
                f"{list(k) or 'no partition folders'}: {listed(p, 0)}"
                for k, p in list(layouts.items())[:4]
            )
            raise InvalidArgumentError(
                f"expected every file under the same Hive partition folders (col=value/), "
                f"found {len(layouts)} layouts: {described}. Move the files into one layout, "
                f"or pass partition_by; nothing was committed."
            )
        names: list[str] = list(next(iter(layouts))) if layouts else []
        given: dict[str, pa.DataType] = {}
    elif isinstance(partition_by, pa.Schema):
        names = list(partition_by.names)
        given = {f.name: f.type for f in partition_by}
    else:
        if isinstance(partition_by, str):
            partition_by = [partition_by]
        names = list(partition_by)
        given = {}
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"expected distinct partition columns, found {names}")
    wrong = [p for d, fs in folders.items() if [k for k, _ in fs] != names for p in by_dir[d]]
    if wrong:
        want = "/".join(f"{n}=..." for n in names) or "no partition folders"
        raise InvalidArgumentError(
            f"expected every file under the partition folders {want}, found "
            f"{listed(wrong, 0)} elsewhere; move them, or pass the partition_by their "
            f"folders have. Nothing was committed."
        )
    fields = []
    for n in names:
        seen = {dict(fs)[n] for fs in folders.values()}
        t = given[n] if n in given else _infer_type(seen)
        fields.append(pa.field(n, t))
    canonical = {d: _canonical(dict(fs), fields) for d, fs in folders.items()}
    return fields, [canonical[f.path.rpartition("/")[0]] for f in footers]


def _canonical(
    values: Mapping[str, str | None], fields: Sequence[pa.Field]
) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for f in fields:
        text = values.get(f.name)
        if text is None or text == NULL_PARTITION:
            out[f.name] = None
            continue
        try:
            typed = pa.array([text], pa.string()).cast(f.type)[0].as_py()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise InvalidArgumentError(
                f"expected partition values of column {f.name!r} to be {f.type}, found "
                f"{text!r}; fix the folder name or declare the column as a string."
            ) from e
        out[f.name] = partition_string(typed)
    return out


# -- listing ---------------------------------------------------------------------------


def list_parquet(storage: Storage, rel_dir: str = "") -> list[FileInfo]:
    """Parquet files below ``rel_dir`` whose path has no hidden name (``_x``, ``.x``:
    ``_lakelog/``, ``_delta_log/``, markers), sorted by path. On local disk hidden
    folders are not even entered."""
    if not _local(storage):
        found = storage.walk(rel_dir)
        return sorted(
            (i for i in found if is_parquet(i.path) and not hidden_path(i.path)),
            key=lambda i: i.path,
        )
    out: list[FileInfo] = []
    todo = [rel_dir]
    while todo:
        rel = todo.pop()
        try:
            entries = list(os.scandir(storage.full(rel)))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for e in entries:
            if hidden_name(e.name):
                continue
            child = f"{rel}/{e.name}" if rel else e.name
            if e.is_dir(follow_symlinks=False):
                todo.append(child)
            elif is_parquet(e.name) and e.is_file():
                st = e.stat()
                out.append(FileInfo(path=child, size=st.st_size, mtime_ms=st.st_mtime_ns // 10**6))
    out.sort(key=lambda i: i.path)
    return out


def is_parquet(path: str) -> bool:
    return path.lower().endswith(PARQUET_SUFFIXES)


def hidden_path(path: str) -> bool:
    return any(hidden_name(p) for p in path.split("/"))


def add_actions(
    footers: Sequence[Footer], partitions: Sequence[Mapping[str, str | None]]
) -> list[AddFile]:
    now = int(time.time() * 1000)
    return [
        AddFile(
            path=f.path,
            size_bytes=f.size,
            num_rows=f.num_rows,
            partition=dict(p),
            stats=f.stats,
            data_change=True,
            modification_ms=f.mtime_ms or now,
        )
        for f, p in zip(footers, partitions, strict=True)
    ]


def check_no_partition_columns(footers: Sequence[Footer], partition_by: Sequence[str]) -> None:
    inside = [f.path for f in footers if any(c in f.schema.names for c in partition_by)]
    if inside:
        raise SchemaMismatchError(
            f"expected the partition columns {list(partition_by)} only in folder names, "
            f"found them also inside {listed(inside, 0)}; lakelog reads partition values "
            f"from the log, so a column stored in the file would be ignored. Rewrite those "
            f"files without the partition columns (DuckDB's COPY and pyarrow's "
            f"write_dataset leave them out by default); nothing was committed."
        )


def check_against_table(footers: Sequence[Footer], file_schema: pa.Schema) -> None:
    """Every file reads as the table: no unknown columns, types that read as the
    table's, no missing non-nullable column."""
    problems: list[str] = []
    bad: list[str] = []
    for f in footers:
        mine: list[str] = []
        extra = [n for n in f.schema.names if n not in file_schema.names]
        if extra:
            mine.append(f"unknown columns {extra}")
        for field in file_schema:
            if field.name not in f.schema.names:
                if not field.nullable:
                    mine.append(f"missing non-nullable column {field.name!r}")
                continue
            got = f.schema.field(field.name).type
            if not readable_as(got, field.type, dropped=False):
                mine.append(f"column {field.name!r} is {got}, the table's is {field.type}")
        if mine:
            bad.append(f.path)
            if len(problems) < SHOWN:
                problems.append(f"{f.path!r}: {', '.join(mine)}")
    if problems:
        more = f"; and {len(bad) - SHOWN} more files" if len(bad) > SHOWN else ""
        raise SchemaMismatchError(
            f"expected files matching the table's columns {file_schema.names} (types that "
            f"read as the table's; nullable columns may be missing), found {len(bad)} that "
            f"do not: {'; '.join(problems)}{more}. Rewrite them to the table's schema, or "
            f"evolve the table's schema first; nothing was committed."
        )
