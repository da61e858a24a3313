"""Adopting Parquet files written by other tools: :func:`convert` and :func:`add_files`.

``convert`` turns a folder of Parquet files into a table in place: one commit at
version 0 holding the table's metadata and one ``add`` per file. ``add_files``
adopts files written later by another tool (a DuckDB ``COPY ... TO``, a Spark job)
into an existing table, in one ``append`` commit. Neither moves, rewrites or
deletes a data file.

Invariants:

* Files are described exactly as lakelog's writer describes its own: size, row
  count and statistics from the footer (:func:`lakelog.stats.stats_from_metadata`
  over the table's column types), partition values from Hive-style folders
  (``col=value/``), in their string form (``docs/format.md``, "Data files").
* Footers are read in parallel threads (:func:`.footers.read_footers`) (one ranged read
  of each file's tail), and only footers: no data page is read. ``lakelog.spark.convert``
  reads them in Spark tasks and shares everything else (:func:`convert_listing`,
  :func:`convert_files`).
* Everything is checked before anything is committed; a problem in any file is one
  error listing the files concerned (up to :data:`~.footers.SHOWN`), and the table (or the
  folder) is left as it was.
* A file already in the table is refused, also when a concurrent commit added it
  (the transaction's rebase check), so no file is ever live twice.
* Partition columns are not stored inside data files (``docs/format.md``): a file
  that holds one is refused.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import pyarrow as pa

from ..core import OPEN_HINT, TableCore, create_with_files
from ..errors import (
    AdoptedFilesMissingError,
    CommitConflictError,
    ConstraintViolationError,
    InvalidArgumentError,
    SchemaMismatchError,
    TableExistsError,
)
from ..io.guards import check_rows, guards_of
from ..io.parquet_settings import check_parquet_properties
from ..io.schema import conform
from ..leases import Lease
from ..log import mapping
from ..log.actions import Action, AddFile, Commit
from ..log.commits import list_log
from ..log.snapshot import Snapshot
from ..partitioning import check_partition_columns
from ..paths import bad_data_path
from ..properties import get_float, validate_properties
from ..scan.rows import read_rows
from ..storage import FileInfo, Storage
from ..transaction import CommitResult
from ..transforms import PartitionSpec, parse_fields, uses_transforms
from .footers import (
    Footer,
    Unreadable,
    add_actions,
    check_against_table,
    check_no_partition_columns,
    differently_typed,
    hidden_path,
    is_parquet,
    list_parquet,
    listed,
    partition_layout,
    read_footers,
    readable_footers,
    unify_schemas,
)
from .spec_values import spec_tags

if TYPE_CHECKING:
    from ..core.handle import TableHandle

__all__ = ["ReadFooters", "add_files", "convert", "convert_files", "convert_listing"]

DELTA_LOG = "_delta_log"


# -- convert ---------------------------------------------------------------------------


def convert(
    uri: str,
    *,
    partition_by: Sequence[str] | pa.Schema | None = None,
    properties: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    single_writer: bool = False,
) -> TableCore:
    """Turn the Parquet files under ``uri`` into a lakelog table in place.

    Every Parquet file below the folder (``*.parquet``, ``*.parq``, ``*.pq``; hidden
    names, starting with ``_`` or ``.``, are skipped) becomes part of version 0, with
    statistics from its footer. Hive folders (``day=2024-01-02/``) are partition
    columns: inferred from the folders (types too: integer, date, boolean, else
    string), or named by ``partition_by`` (a list of names, or a ``pyarrow.Schema``
    that also gives their types). File schemas are unified (missing columns and
    widening types are fine); anything else, or a file that is not Parquet, is one
    error listing the files, and nothing is committed. No data file is moved or
    rewritten.

    Args:
        uri: the folder of Parquet files, which becomes the table's root.
        partition_by: partition column names, or a schema that also gives their types;
            default None infers them from the ``k=v`` folders. With a partition
            transform (``["day(ts)", "bucket(16, id)"]``) the files (outside Hive
            folders) are the table's partitions of those fields, each file's values
            found from its rows; a file holding several values of a field is refused.
        properties: ``lakelog.*`` table properties, validated; default none.
        storage_options: passed to the fsspec filesystem; default none.
        single_writer: allow a store without put-if-absent, promising that no other
            process writes the table; default False.

    Returns:
        The new table, at version 0.
    """
    storage = Storage(uri, storage_options, single_writer=single_writer)
    props, infos = convert_listing(storage, properties)
    return convert_files(
        storage, props, infos, partition_by, read=functools.partial(_read_here, storage)
    )


ReadFooters = Callable[[Sequence[FileInfo], pa.Schema | None], Sequence[Footer | Unreadable]]
"""How :func:`convert_files` gets footers: those of the given files, in their order, with
statistics over the given column types (None: each file's own). :func:`convert` reads
them in this process, ``lakelog.spark.convert`` in Spark tasks."""


def _read_here(
    storage: Storage, infos: Sequence[FileInfo], types: pa.Schema | None
) -> list[Footer | Unreadable]:
    return read_footers(storage, infos, types=types)


def convert_listing(
    storage: Storage, properties: Mapping[str, Any] | None
) -> tuple[dict[str, str], list[FileInfo]]:
    """The checks of a conversion before any footer is read (no table there yet, no
    Delta table, valid properties, at least one Parquet file): the validated properties
    and the files to adopt, sorted by path."""
    listing = list_log(storage)
    if listing.commits or listing.manifests:
        raise TableExistsError(
            f"expected a folder of Parquet files at {storage.uri}, found a lakelog table "
            f"there already (version {max(listing.commits[-1:] + listing.manifests[-1:])}); "
            f"adopt new files with table.add_files() (`lakelog add-files`) instead."
        )
    if storage.list_names(DELTA_LOG):
        raise InvalidArgumentError(
            f"expected a plain folder of Parquet files at {storage.uri}, found a Delta table "
            f"({DELTA_LOG}/): its folder can hold files Delta already removed, which a "
            f"listing would adopt as live rows. Copy the rows of its latest version into a "
            f"lakelog table instead (e.g. lakelog.write_table(uri, deltalake.DeltaTable("
            f"path).to_pyarrow_dataset().scanner().to_reader()))."
        )
    props = validate_properties(properties or {})
    infos = list_parquet(storage)
    if not infos:
        raise InvalidArgumentError(
            f"expected Parquet files (*.parquet) under {storage.uri}, found none; to start "
            f"an empty table use lakelog.create_table(uri, schema)."
        )
    return props, infos


def convert_files(
    storage: Storage,
    props: dict[str, str],
    infos: Sequence[FileInfo],
    partition_by: Sequence[str] | pa.Schema | None,
    *,
    read: ReadFooters,
) -> TableCore:
    """Version 0 over the files of :func:`convert_listing`, their footers got by ``read``:
    every check of the files (readable, one partition layout, no partition column inside,
    schemas that unify), statistics over the table's types, and one put-if-absent commit.
    Returns the new table."""
    nothing = "nothing was committed."
    footers = readable_footers(read(infos, None), nothing=nothing)
    texts: list[str] = []  # partition transforms (the files' rows give their values)
    if isinstance(partition_by, str):
        partition_by = [partition_by]
    if isinstance(partition_by, Sequence) and uses_transforms(partition_by):
        texts = list(partition_by)
        _no_hive_folders(footers, texts)
    fields, partitions = partition_layout(footers, [] if texts else partition_by)
    parts = [f.name for f in fields]
    check_no_partition_columns(footers, parts)
    data_schema = unify_schemas(footers)
    redo = differently_typed(footers, data_schema)
    if redo:  # statistics over the table's types, exactly as its writer takes them
        again = readable_footers(
            read([FileInfo(f.path, f.size, f.mtime_ms) for f in redo], data_schema),
            nothing=nothing,
        )
        fixed = {f.path: f for f in again}
        footers = [fixed.get(f.path, f) for f in footers]
    schema = pa.schema(list(data_schema) + fields)
    check_partition_columns(schema, parts)
    check_parquet_properties(props, schema, tuple(parts))
    adds = add_actions(footers, partitions)
    if texts:
        spec = PartitionSpec(0, parse_fields(texts, schema))
        parts = texts
        tags = spec_tags(
            storage,
            footers,
            spec,
            schema,
            hint=f"write its rows with table.append after converting the others, or "
            f"convert without partition_by and set the partitioning later "
            f"(table.set_partitioning); {nothing}",
        )
        adds = [msgspec.structs.replace(a, tags=t) for a, t in zip(adds, tags, strict=True)]
    snap = create_with_files(
        storage,
        schema,
        partition_by=parts,
        properties=props,
        adds=adds,
        operation="CONVERT",
        metrics=_metrics(adds),
        hint=f"{OPEN_HINT} and adopt files with table.add_files() (`lakelog add-files`)",
    )
    return TableCore(storage, snap)


def _no_hive_folders(footers: Sequence[Footer], partition_by: Sequence[str]) -> None:
    """A conversion into partition transforms takes files outside Hive folders: their
    values come from the files' rows, not from folder names."""
    inside = [f.path for f in footers if "=" in f.path.rpartition("/")[0]]
    if inside:
        raise InvalidArgumentError(
            f"expected files outside Hive partition folders (col=value/) to convert with "
            f"partition transforms {list(partition_by)!r}, found {listed(inside, 0)}; "
            f"convert with the partition_by of their folders, then change the layout for "
            f"new data with table.set_partitioning. Nothing was committed."
        )


def _metrics(adds: Sequence[AddFile]) -> dict[str, int]:
    return {
        "num_files": len(adds),
        "num_rows": sum(a.num_rows for a in adds),
        "num_bytes": sum(a.size_bytes for a in adds),
    }


# -- add_files -------------------------------------------------------------------------


def _expand(storage: Storage, paths: Sequence[str]) -> list[FileInfo]:
    """The files named by ``paths`` (root-relative, absolute or URLs; a folder stands
    for the Parquet files below it), with size and modification time."""
    out: dict[str, FileInfo] = {}
    missing: list[str] = []
    outside: list[str] = []
    for given in paths:
        rel = _relative(storage, given)
        if rel is None or bad_data_path(rel):  # the rule of every path in the log
            outside.append(given)
            continue
        full = storage.full(rel)
        try:
            info = storage.fs.info(full)
        except FileNotFoundError:
            missing.append(given)
            continue
        if info.get("type") == "directory":
            for f in list_parquet(storage, rel):
                out.setdefault(f.path, f)
            continue
        mtime = _mtime(storage, rel)
        out.setdefault(rel, FileInfo(path=rel, size=int(info.get("size") or 0), mtime_ms=mtime))
    if outside:
        raise InvalidArgumentError(
            f"expected data files under the table root {storage.uri} (outside _lakelog/), "
            f"found {listed(outside, 0)}; copy them into the table's folder first."
        )
    if missing:
        raise InvalidArgumentError(
            f"expected existing files under {storage.uri}, found {listed(missing, 0)} "
            f"missing; give paths relative to the table's root, or absolute."
        )
    return list(out.values())


def _mtime(storage: Storage, rel: str) -> int | None:
    try:
        return int(storage.fs.modified(storage.full(rel)).timestamp() * 1000)
    except (NotImplementedError, OSError, AttributeError, ValueError):
        return None


def _relative(storage: Storage, given: str) -> str | None:
    if not isinstance(given, str) or not given.strip():
        raise InvalidArgumentError(
            f"expected file paths as strings (relative to the table root, or absolute), "
            f"found {given!r}"
        )
    text = given.strip()
    if "://" in text or text.startswith("/") or text.lower().startswith("file:"):
        found = storage.relative_url(text)  # any spelling: file:/, s3a://, %-escaped
        if found is None:
            try:
                found = storage.relative(text)
            except InvalidArgumentError:
                return None
        rel = found
    else:
        rel = text.strip("/")
    return "/".join(p for p in rel.split("/") if p not in ("", "."))


def add_files(table: TableHandle, paths: Sequence[str] | str) -> CommitResult:
    """Adopt Parquet files already under the table's root (written by another tool) in
    one ``append`` commit, without moving or rewriting them.

    ``paths``: files or folders (all Parquet files below them), relative to the root,
    absolute, or URLs. Refused, with nothing committed: files outside the root or under
    ``_lakelog/``, hidden names, files already in the table (also when a concurrent
    commit adds them first), files that are not Parquet, columns the table lacks or of
    types that do not read as the table's (missing nullable columns read as nulls),
    partition columns stored inside the file, and partition folders that do not match
    the table's partition columns or types. Into a table partitioned by transforms each
    file records its values of the current spec (:func:`.spec_values.spec_tags`); a file
    whose rows hold several values of a field is refused.
    """
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, Sequence) or not paths:
        raise InvalidArgumentError(
            f"expected a non-empty list of file paths, found {paths!r}; pass e.g. "
            f"['day=2024-01-02/new.parquet']."
        )
    storage = table.storage
    snap = table.snapshot()
    infos = _expand(storage, list(paths))
    hidden = [i.path for i in infos if hidden_path(i.path) or not is_parquet(i.path)]
    if hidden:
        raise InvalidArgumentError(
            f"expected Parquet file names (*.parquet) that readers do not skip, found "
            f"{listed(hidden, 0)}: names starting with '_' or '.' are hidden from Spark "
            f"and other readers. Rename them."
        )
    if not infos:
        raise InvalidArgumentError(
            f"expected Parquet files in {list(paths)}, found none (folders are searched for "
            f"*.parquet files)."
        )
    live = set(snap.paths())
    already = [i.path for i in infos if i.path in live]
    if already:
        raise InvalidArgumentError(
            f"expected files not yet in the table, found {listed(already, 0)} already in "
            f"version {snap.version}; nothing was committed."
        )
    infos.sort(key=lambda i: i.path)
    if snap.relabelled:
        renamed = [f.name for f in snap.schema if mapping.physical_name(f) != f.name]
        raise SchemaMismatchError(
            f"expected a table whose columns are stored under their own names to adopt "
            f"files into, found columns {renamed} stored under other names (renamed, or "
            f"added back after a drop; docs/format.md, 'Column ids'): files written by "
            f"another tool would hold them under their new names, which lakelog would "
            f"not read. Append the files' rows instead (table.append). Nothing was "
            f"committed."
        )
    # The files carry no lease id: the lease names them, so vacuum keeps them from now
    # on; a vacuum that read the leases just before may still take the old ones.
    with Lease.acquire(
        storage, operation="ADD FILES", properties=snap.properties, paths=[i.path for i in infos]
    ) as lease:
        read = read_footers(storage, infos, types=snap.file_schema)
        gone = [r.path for r in read if isinstance(r, Unreadable) and r.gone]
        if gone:
            raise AdoptedFilesMissingError(
                f"expected the {len(infos)} files to adopt to exist while reading their "
                f"footers, found {listed(gone, 0)} deleted meanwhile (by a vacuum that "
                f"started before this add_files took its writer lease, or another process). "
                f"Nothing was committed. Write the files again and adopt them while they "
                f"are young, or outside vacuum runs.",
                missing_files=tuple(gone),
            )
        footers = readable_footers(read, nothing="nothing was committed.")
        parts = list(snap.partition_by)
        schema = snap.schema
        given = pa.schema([schema.field(c) for c in parts])
        _, partitions = partition_layout(footers, given)
        check_no_partition_columns(footers, parts)
        check_against_table(footers, snap.file_schema)
        adds = add_actions(footers, partitions)
        check_adopted_rows(storage, adds, snap)
        spec = snap.partition_spec
        if spec is not None:  # a table of transforms: each file's values of its spec
            tags = spec_tags(
                storage,
                footers,
                spec,
                schema,
                hint="split the file by that field (or write its rows with table.append); "
                "nothing was committed.",
            )
            adds = [msgspec.structs.replace(a, tags=t) for a, t in zip(adds, tags, strict=True)]
        lease.confirm_adopted(_vacuumable(infos, snap.properties))
        return table.commit(
            adds,
            operation="ADD FILES",
            kind="append",
            read_snapshot=snap,
            metrics=_metrics(adds),
            rebase=_RefuseAddedTwice({a.path for a in adds}),
            lease=lease,
        )


def check_adopted_rows(storage: Storage, adds: Sequence[AddFile], snap: Snapshot) -> None:
    """Refuse files to adopt whose rows break the table's rules (docs/constraints.md),
    reading them one batch at a time; only for a table that has rules."""
    guards = guards_of(snap.schema)
    if not guards and all(f.nullable for f in snap.schema):
        return
    always = sorted(c for c, i in guards.identity.items() if i.always)
    if always:
        raise InvalidArgumentError(
            f"expected a table without GENERATED ALWAYS identity columns to adopt files "
            f"into, found {always}: their values are given out by lakelog only. Append "
            f"the files' rows without those columns instead (table.append). Nothing was "
            f"committed."
        )
    for add in adds:
        for batch in read_rows(storage, add, snap.schema, snap.partition_by):
            try:
                check_rows(conform(batch, snap.schema), guards)
            except ConstraintViolationError as e:
                raise ConstraintViolationError(
                    f"{e} (in file {add.path!r} to adopt: nothing was committed)",
                    constraint=e.constraint,
                    column=e.column,
                    row=e.row,
                ) from None


def _vacuumable(infos: Sequence[FileInfo], properties: Mapping[str, str]) -> list[str]:
    """Files a vacuum may delete without ``force``: older than
    ``lakelog.vacuum.min_age_seconds`` less one lease TTL (the skew allowed between the
    storage's clock and ours), or of unknown age."""
    limit_ms = 1000 * (
        get_float(properties, "lakelog.vacuum.min_age_seconds")
        - get_float(properties, "lakelog.lease.ttl_seconds")
    )
    now_ms = time.time() * 1000
    return [i.path for i in infos if i.mtime_ms is None or now_ms - i.mtime_ms > limit_ms]


class _RefuseAddedTwice:
    """Rebase check of ``add_files``: a concurrent commit that added one of the same
    files wins; this commit then fails instead of adding the file a second time."""

    def __init__(self, paths: set[str]) -> None:
        self.paths = paths

    def __call__(self, winners: Sequence[Commit], actions: list[Action]) -> list[Action]:
        for w in winners:
            dup = sorted(
                a.path for a in w.actions if isinstance(a, AddFile) and a.path in self.paths
            )
            if dup:
                raise CommitConflictError(
                    f"expected files not yet in the table, found {listed(dup, 0)} added by "
                    f"version {w.header.version} ({w.header.operation}) concurrently; nothing "
                    f"was committed.",
                    winning_version=w.header.version,
                    conflicting_files=tuple(dup),
                )
        return actions
