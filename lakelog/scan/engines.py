"""DuckDB, polars and pandas read a snapshot, with their filters pruned by lakelog.

DuckDB and polars read a snapshot with their own Parquet readers over exactly its
files (never a listing of the folder, which would also pick up files that compaction
replaced and the log itself): :func:`to_duckdb` creates a view over ``read_parquet``,
:func:`to_polars` a LazyFrame over ``scan_parquet``, both over the file list pruned by
``filter=`` through the log (partition values, statistics), partition columns as
constants, renamed columns under their names and deleted rows removed inside the
engine's plan (:mod:`lakelog.scan.native`). A query's own filters prune row groups in
the engine's reader.

What the engines cannot read that way (a table off local disk, one with column ids
and nested columns, a filter lakelog does not model) is handed over as a
:class:`LakelogDataset`: a pyarrow Dataset whose ``scanner(filter=...)`` answers with
lakelog's own pruning and reader, so files are pruned by the filters the engine pushes
down, and rows deletion vectors mark are dropped by lakelog.

DuckDB, polars and pandas are optional: each is imported when first used, and a
missing one is a :class:`~lakelog.errors.MissingDependencyError` naming the
``pip install`` that fixes it.
"""

from __future__ import annotations

import contextlib
import importlib
import uuid
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..errors import InvalidArgumentError, MissingDependencyError
from ..filters import And, FilterLike, Not, Or, Predicate, Unknown
from ..log import mapping
from .native import (
    NativePlan,
    duckdb_condition,
    duckdb_literal,
    native_plan,
    partition_value,
    polars_condition,
    polars_literal,
    quote_ident,
    quote_text,
)

if TYPE_CHECKING:
    from ..log.actions import DataFile
    from .snapshot import Snapshot

__all__ = [
    "LakelogDataset",
    "check_columns",
    "duckdb_view_sql",
    "has_unknown",
    "polars_frame",
    "require",
    "to_duckdb",
    "to_pandas",
    "to_polars",
]

_PIP = {"duckdb": "duckdb", "polars": "polars", "pandas": "pandas"}


def require(module: str, *, purpose: str) -> ModuleType:
    """Import an optional engine, or raise :class:`MissingDependencyError` saying how to
    install it (``purpose``: what the caller was doing, e.g. "snapshot.to_duckdb()")."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingDependencyError(
            f"expected the {module} package for {purpose}, found it missing ({e}); install "
            f"it with `pip install {_PIP.get(module, module)}`."
        ) from e


class LakelogDataset(ds.FileSystemDataset):  # type: ignore[misc]
    """A pyarrow Dataset over one snapshot whose scans prune through lakelog.

    ``scanner(filter=...)`` (which DuckDB, polars, ``to_table`` and ``to_batches``
    call) resolves the files and row groups for that filter from the log and the
    footers, then scans only those, applying the filter to the rows. The filter given
    to :meth:`from_snapshot` limits every scan. Reads see the snapshot's version,
    however the table moves on.
    """

    _snapshot: Snapshot
    _base: pc.Expression | None
    _marked: bool

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, filter: FilterLike = None) -> LakelogDataset:
        """The dataset of ``snapshot``, limited to rows matching ``filter`` (any form
        :meth:`Snapshot.files` takes)."""
        parsed = snapshot.read_filter(filter)  # parsed once, for the files and fragments
        base = parsed.expression
        files = list(snapshot.files(parsed))
        # the fragments and schema only: scans go through scanner() below, which drops
        # deleted rows and maps renamed columns
        full = snapshot._dataset_of(files, parsed)
        dataset = cls(list(full.get_fragments()), full.schema, full.format, full.filesystem)
        dataset._snapshot = snapshot
        dataset._base = base
        # deletion vectors, renamed columns: only the snapshot's scanner reads them
        dataset._marked = snapshot._own_reader(files) or snapshot.relabelled
        return dataset

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def scanner(  # type: ignore[override]
        self, columns: Any = None, filter: pc.Expression | None = None, **options: Any
    ) -> ds.Scanner:
        expr = _and(self._base, filter)
        if self._marked:  # deletion vectors: only the snapshot's scanner drops their rows
            return self._live_scanner(columns, filter, expr, options)
        if filter is None:  # nothing new to prune by: the files resolved at creation
            return super().scanner(columns=columns, filter=expr, **options)
        try:
            pruned = self._snapshot.dataset(expr)
        except InvalidArgumentError:
            # a filter lakelog does not model in a way it can check: pyarrow prunes by
            # the fragments' guarantees and filters the rows, as for any dataset
            return super().scanner(columns=columns, filter=expr, **options)
        return pruned.scanner(columns=columns, filter=expr, **options)

    def _live_scanner(
        self,
        columns: Any,
        filter: pc.Expression | None,
        expr: pc.Expression | None,
        options: dict[str, Any],
    ) -> ds.Scanner:
        batch_size = options.get("batch_size", 65536)
        try:
            return self._snapshot.scanner(columns, expr, batch_size=batch_size)
        except InvalidArgumentError:
            if filter is None:
                raise
            # a filter lakelog does not model: it prunes by the base filter, pyarrow
            # filters the rows
            rows = self._snapshot.scanner(None, self._base, batch_size=batch_size)
            return ds.Scanner.from_batches(
                rows.to_batches(),
                schema=self.schema,
                columns=columns,
                filter=filter,
                use_threads=False,
            )


def check_columns(schema: pa.Schema, columns: Sequence[str] | None) -> list[str] | None:
    """``columns`` as a list (one name alone too), refusing names ``schema`` (the table's)
    lacks; None stays None (every column). Every read of a snapshot or of the change feed
    checks its ``columns`` argument here."""
    if columns is None:
        return None
    if isinstance(columns, str):
        columns = [columns]
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise InvalidArgumentError(
            f"expected columns of the table {schema.names}, found unknown {missing}"
        )
    return list(columns)


def _and(a: pc.Expression | None, b: pc.Expression | None) -> pc.Expression | None:
    if a is None:
        return b
    return a if b is None else a & b


def to_duckdb(snapshot: Snapshot, con: Any = None, *, name: str, filter: FilterLike = None) -> Any:
    """Register the snapshot on a DuckDB connection as the temporary view ``name``;
    returns its relation (``con.view(name)``). ``con`` None: DuckDB's default
    connection, the one ``duckdb.sql()`` uses. ``filter`` prunes the files handed to
    DuckDB (lakelog's partition and statistics pruning) and limits the view to
    matching rows.

    The view is DuckDB's own ``read_parquet`` over the pruned file list
    (:func:`duckdb_view_sql`): DuckDB prunes row groups by their statistics for the
    filters of each query; rows deleted by a deletion vector are removed inside the
    scan. A table on storage other than local disk, one DuckDB cannot read that way
    (column ids with nested columns), or a ``filter`` lakelog does not model, is
    registered as a :class:`LakelogDataset` (lakelog's scanner) instead."""
    duckdb = require("duckdb", purpose="snapshot.to_duckdb()")
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgumentError(
            f"expected name to be a non-empty string (the view's name in DuckDB), found "
            f"{name!r}; pass e.g. name='events'."
        )
    if con is None:
        con = duckdb.default_connection()
    elif not isinstance(con, duckdb.DuckDBPyConnection):
        raise InvalidArgumentError(
            f"expected con to be a duckdb connection (duckdb.connect()) or None, found "
            f"{type(con).__name__}"
        )
    sql = duckdb_view_sql(snapshot, con, name=name, filter=filter)
    if sql is None:
        dataset = LakelogDataset.from_snapshot(snapshot, filter)
        # a native view registered before under this name: register() does not replace it
        con.execute(f"DROP VIEW IF EXISTS temp.{quote_ident(name)}")
        con.register(name, dataset)
        return con.view(name)  # lazy: con.table() would scan the whole view right away
    with _duckdb_errors(snapshot, duckdb):
        con.execute(f"CREATE OR REPLACE TEMP VIEW {quote_ident(name)} AS {sql}")
    return con.view(name)


def duckdb_view_sql(
    snapshot: Snapshot, con: Any, *, name: str, filter: FilterLike = None
) -> str | None:
    """The SQL of the view :func:`to_duckdb` creates (None: DuckDB cannot read the
    table natively, see :mod:`lakelog.scan.native`).

    One branch per partition and kind of file, joined by ``UNION ALL``: ``read_parquet``
    over the partition's files, partition columns as constants (DuckDB drops a branch
    whose constants fail a query's filter), columns under their names (``physical AS
    name``), columns the files lack as typed nulls. Files with deletion vectors are read
    in branches of their own, anti-joined on ``(file_index, file_row_number)`` with their
    deleted positions, which this creates on ``con`` as the temporary table
    ``__lakelog_deleted_<name>`` (``g``: the branch). The footers are read here, once per
    branch, to learn the stored columns and types.
    """
    duckdb = require("duckdb", purpose="snapshot.to_duckdb()")
    native = _native(snapshot, filter)
    if native is None:
        return None
    pred, _, plan = native
    out = mapping.strip(snapshot.schema)
    targets = [str(t) for t in con.from_arrow(out.empty_table()).types]
    types = dict(zip(out.names, targets, strict=True))
    where = ""
    if pred is not None:
        cond = duckdb_condition(pred, out, types)
        if cond is None:
            return None
        where = f" WHERE {cond}"
    branches: list[tuple[str, dict[str, str]]] = []  # (SQL, stored column types)
    deleted: list[list[np.ndarray]] = []  # per branch reading marked files
    dv_table = quote_ident(f"__lakelog_deleted_{name}")
    for group in plan.groups:
        consts = {
            c: duckdb_literal(partition_value(plan, group, c), types[c]) for c in plan.partition_by
        }
        if any(v is None for v in consts.values()):
            return None
        if group.plain:
            branches.append(_branch(con, duckdb, snapshot, plan, group.plain, consts, types))
        if group.marked:
            branch = len(deleted)
            urls = [u for u, _ in group.marked]
            deleted.append([pos for _, pos in group.marked])
            anti = (
                f" AS s ANTI JOIN (SELECT f, r FROM {dv_table} WHERE g = {branch}) AS d"
                f" ON s.file_index = d.f AND s.file_row_number = d.r"
            )
            branches.append(_branch(con, duckdb, snapshot, plan, urls, consts, types, suffix=anti))
    if deleted:
        _deleted_table(con, dv_table, deleted)
    else:  # a view registered before under this name may have left one
        con.execute(f"DROP TABLE IF EXISTS temp.{dv_table}")
    if not branches:
        nulls = ", ".join(f"CAST(NULL AS {types[n]}) AS {quote_ident(n)}" for n in out.names)
        return f"SELECT {nulls} WHERE FALSE"
    # a column some branch stores in another (older, narrower) type: cast to the table's
    casts = []
    for n in out.names:
        differs = any(n in stored and stored[n] != types[n] for _, stored in branches)
        q = quote_ident(n)
        casts.append(f"CAST({q} AS {types[n]}) AS {q}" if differs else q)
    union = "\nUNION ALL\n".join(sql for sql, _ in branches)
    return f"SELECT {', '.join(casts)} FROM (\n{union}\n){where}"


def _branch(
    con: Any,
    duckdb: Any,
    snapshot: Snapshot,
    plan: NativePlan,
    urls: list[str],
    consts: dict[str, str | None],
    types: dict[str, str],
    *,
    suffix: str = "",
) -> tuple[str, dict[str, str]]:
    """``SELECT`` of the table's columns from ``read_parquet(urls)`` and the types the
    files store them as (by column name)."""
    source = f"read_parquet([{', '.join(quote_text(u) for u in urls)}], union_by_name=true)"
    with _duckdb_errors(snapshot, duckdb):
        described = con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()
    stored_by_physical = {row[0]: str(row[1]) for row in described}
    cols = []
    stored: dict[str, str] = {}
    for f in plan.schema:
        q = quote_ident(f.name)
        if f.name in plan.partition_by:
            cols.append(f"{consts[f.name]} AS {q}")
            continue
        phys = plan.physical(f.name)
        if phys in stored_by_physical:
            stored[f.name] = stored_by_physical[phys]
            cols.append(
                f"s.{quote_ident(phys)} AS {q}" if suffix else f"{quote_ident(phys)} AS {q}"
            )
        else:  # added after these files were written
            cols.append(f"CAST(NULL AS {types[f.name]}) AS {q}")
    return f"SELECT {', '.join(cols)} FROM {source}{suffix}", stored


def _deleted_table(con: Any, table: str, deleted: list[list[np.ndarray]]) -> None:
    """The temporary table of deleted positions: ``g`` (the branch reading the file),
    ``f`` (the file's ``file_index`` in that branch's ``read_parquet``), ``r`` (its
    ``file_row_number``); typed as DuckDB types those, so the join hashes them as is."""
    g, f, r = [], [], []
    for branch, files in enumerate(deleted):
        for index, pos in enumerate(files):
            g.append(np.full(len(pos), branch, dtype=np.int32))
            f.append(np.full(len(pos), index, dtype=np.uint64))
            r.append(pos.astype(np.int64))
    positions = pa.table({"g": np.concatenate(g), "f": np.concatenate(f), "r": np.concatenate(r)})
    scratch = f"__lakelog_positions_{uuid.uuid4().hex}"
    con.register(scratch, positions)
    try:
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT * FROM {scratch} ORDER BY g, f, r"
        )
    finally:
        con.unregister(scratch)


@contextlib.contextmanager
def _duckdb_errors(snapshot: Snapshot, duckdb: Any) -> Iterator[None]:
    """A data file gone missing, as lakelog's readers report it."""
    try:
        yield
    except duckdb.IOException as e:
        if "No files found" in str(e) or "No such file" in str(e) or "does not exist" in str(e):
            raise snapshot._missing_file(FileNotFoundError(str(e))) from e
        raise


def _native(
    snapshot: Snapshot, filter: FilterLike
) -> tuple[Predicate | None, list[DataFile], NativePlan] | None:
    """The parsed filter, the files it keeps and their plan, for an engine's own
    Parquet reader; None when the filter or the files need lakelog's scanner."""
    parsed = snapshot.read_filter(filter)  # parsed once, for the plan and the engine
    pred = parsed.predicate
    if pred is not None and has_unknown(pred):
        return None
    files = list(snapshot.files(parsed))
    plan = native_plan(snapshot, files)
    return None if plan is None else (pred, files, plan)


def has_unknown(pred: Predicate) -> bool:
    """Whether ``pred`` holds a condition lakelog does not model (an :class:`Unknown`:
    only the engine reading the rows can apply it)."""
    if isinstance(pred, Unknown):
        return True
    if isinstance(pred, (And, Or)):
        return any(has_unknown(p) for p in pred.parts)
    if isinstance(pred, Not):
        return has_unknown(pred.part)
    return False


def to_polars(
    snapshot: Snapshot, *, columns: Sequence[str] | None = None, filter: FilterLike = None
) -> Any:
    """The snapshot as a polars LazyFrame over polars' own ``scan_parquet`` of the files
    ``filter`` leaves (pruned by lakelog), partition columns as literals, deleted rows
    filtered out by a row index (:func:`polars_frame`). A table on storage other than
    local disk, or that polars cannot read natively, is scanned through lakelog's
    scanner (``scan_pyarrow_dataset`` over a :class:`LakelogDataset`)."""
    pl = require("polars", purpose="snapshot.to_polars()")
    cols = check_columns(snapshot.schema, columns)
    frame = polars_frame(snapshot, filter=filter)
    if frame is None:
        dataset = LakelogDataset.from_snapshot(snapshot, filter)
        try:
            frame = pl.scan_pyarrow_dataset(dataset)
        except (pl.exceptions.PolarsError, TypeError, ValueError) as e:
            raise InvalidArgumentError(
                f"expected column types polars can read, found the schema {snapshot.schema} "
                f"refused: {e}; read with snapshot.to_arrow() instead."
            ) from e
    return frame if cols is None else frame.select(cols)


_ROW = "__lakelog_row"


def polars_frame(snapshot: Snapshot, *, filter: FilterLike = None) -> Any:
    """A LazyFrame of ``scan_parquet`` per partition group (None: not expressible).

    Every group is one scan of its files (newest first: polars takes a scan's schema
    from its first file), its columns selected under their names and cast to the
    table's types where the files store narrower ones, columns the files lack as typed
    nulls (``missing_columns='insert'`` for older files of the scan), partition columns
    as literals. Files with deletion vectors are scanned with a row index
    (global over the scan's files, so each file's positions are offset by the rows of
    the files before it) and the deleted positions filtered out."""
    pl = require("polars", purpose="snapshot.to_polars()")
    native = _native(snapshot, filter)
    if native is None:
        return None
    pred, files, plan = native
    out = mapping.strip(snapshot.schema)
    try:
        target = pl.from_arrow(out.empty_table()).schema
    except (pl.exceptions.PolarsError, TypeError, ValueError):
        return None
    condition = None
    if pred is not None:
        condition = polars_condition(pl, pred, out)
        if condition is None:
            return None
    stored = [n for n in out.names if n not in plan.partition_by]
    by_url = {plan.url(f): f for f in files}
    cast = pl.ScanCastOptions(
        integer_cast="upcast", float_cast="upcast", datetime_cast="microsecond-upcast"
    )

    def newest_first(urls: list[str]) -> list[str]:
        # polars takes the scan's schema from its first file (no schema= given: with one,
        # polars loses the row counts its join ordering uses): the newest is the likeliest
        # to hold every column in the table's types
        return sorted(urls, key=lambda u: -by_url[u].modification_ms)

    def scan(urls: list[str], row_index: str | None = None) -> Any:
        frame = pl.scan_parquet(
            urls,
            missing_columns="insert",
            extra_columns="ignore",
            cast_options=cast,
            hive_partitioning=False,
            glob=False,
            row_index_name=row_index,
        )
        try:
            got = frame.collect_schema()  # reads the first file's footer
        except FileNotFoundError as e:  # a data file deleted outside lakelog
            raise snapshot._missing_file(e) from e
        if row_index is not None:  # deleted rows: positions offset by earlier files' rows
            offsets = np.cumsum([0] + [by_url[u].num_rows for u in urls[:-1]])
            gone = np.concatenate(
                [positions[u] + off for u, off in zip(urls, offsets, strict=True)]
            )
            # typed as the row index (no cast per row: as fast as a plain scan)
            gone_series = pl.Series(gone, dtype=pl.get_index_type())
            frame = frame.filter(~pl.col(row_index).is_in(gone_series.implode()))
        exprs = []
        for n in stored:
            phys = plan.physical(n)
            if phys not in got:  # added after these files were written
                exprs.append(pl.lit(None, dtype=target[n]).alias(n))
            elif got[phys] != target[n]:
                exprs.append(pl.col(phys).cast(target[n]).alias(n))
            else:
                exprs.append(pl.col(phys).alias(n) if phys != n else pl.col(n))
        return frame, exprs

    positions: dict[str, np.ndarray] = {}
    frames = []
    for group in plan.groups:
        lits = {
            c: polars_literal(pl, partition_value(plan, group, c)).alias(c)
            for c in plan.partition_by
        }
        scans = []
        if group.plain:
            scans.append(scan(newest_first(group.plain)))
        if group.marked:
            positions.update(group.marked)
            scans.append(scan(newest_first([u for u, _ in group.marked]), _ROW))
        for frame, exprs in scans:
            cols = iter(exprs)
            frames.append(frame.select([lits[n] if n in lits else next(cols) for n in out.names]))
    frame = pl.concat(frames, how="vertical") if frames else pl.LazyFrame(schema=target)
    return frame if condition is None else frame.filter(condition)


def to_pandas(
    snapshot: Snapshot,
    *,
    columns: Sequence[str] | None = None,
    filter: FilterLike = None,
    **options: Any,
) -> Any:
    """The matching rows and columns as a pandas DataFrame (``options`` go to
    :meth:`pyarrow.Table.to_pandas`, e.g. ``types_mapper=pd.ArrowDtype``). The whole
    result is in memory: pass ``filter`` and ``columns`` to keep it small."""
    require("pandas", purpose="snapshot.to_pandas()")
    table = snapshot.to_arrow(columns=columns, filter=filter)
    try:
        return table.to_pandas(**options)
    except TypeError as e:
        raise InvalidArgumentError(
            f"expected options of pyarrow.Table.to_pandas, found {sorted(options)}: {e}"
        ) from e
