"""DuckDB, polars and pandas read a snapshot, with their filters pruned by lakelog.

Each engine gets a :class:`LakelogDataset`: a pyarrow Dataset over exactly the
snapshot's files (never a listing of the folder, which would also pick up files
that compaction replaced and the log itself). DuckDB and polars push a query's
filter into the dataset's ``scanner(filter=...)``; the dataset answers with
:meth:`lakelog.Snapshot.dataset` for that filter, so files are pruned by the log's
partition values and statistics, and row groups by footers and bloom filters,
before any data is read. Rows are then filtered by pyarrow with the same
expression, so a filter lakelog cannot use for pruning costs reads, never rows.

DuckDB, polars and pandas are optional: each is imported when first used, and a
missing one is a :class:`~lakelog.errors.MissingDependencyError` naming the
``pip install`` that fixes it.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..errors import InvalidArgumentError, MissingDependencyError
from ..filters import FilterLike, Unknown, parse_filter, to_expression

if TYPE_CHECKING:
    from .snapshot import Snapshot

__all__ = [
    "LakelogDataset",
    "check_columns",
    "require",
    "row_filter",
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
        base = row_filter(snapshot, filter)
        files = list(snapshot.files(base))
        # the fragments and schema only: scans go through scanner() below, which drops
        # deleted rows and maps renamed columns
        full = snapshot._dataset_of(files, base)
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


def row_filter(snapshot: Snapshot, filter: FilterLike) -> pc.Expression | None:
    """``filter`` (any form :meth:`Snapshot.files` takes) as a row expression over the
    snapshot's schema; None for no filter."""
    if isinstance(filter, pc.Expression):
        return filter
    pred = parse_filter(filter, snapshot.schema)
    if pred is None:
        return None
    if isinstance(pred, Unknown):  # only Expressions decode to Unknown: handled above
        raise InvalidArgumentError(f"expected a filter lakelog can read, found {filter!r}")
    return to_expression(pred)


def check_columns(snapshot: Snapshot, columns: Sequence[str] | None) -> list[str] | None:
    """``columns`` as a list, refusing names the snapshot's schema lacks."""
    if columns is None:
        return None
    if isinstance(columns, str):
        columns = [columns]
    missing = [c for c in columns if c not in snapshot.schema.names]
    if missing:
        raise InvalidArgumentError(
            f"expected columns of the table {snapshot.schema.names}, found unknown {missing}"
        )
    return list(columns)


def _and(a: pc.Expression | None, b: pc.Expression | None) -> pc.Expression | None:
    if a is None:
        return b
    return a if b is None else a & b


def to_duckdb(snapshot: Snapshot, con: Any = None, *, name: str, filter: FilterLike = None) -> Any:
    """Register the snapshot on a DuckDB connection as the view ``name``; returns its
    relation (``con.view(name)``: nothing is read yet). ``con`` None: DuckDB's default
    connection, the one ``duckdb.sql()`` uses. Queries on the view push their filters
    into lakelog's pruning; ``filter`` limits the view to matching rows."""
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
    dataset = LakelogDataset.from_snapshot(snapshot, filter)
    con.register(name, dataset)
    return con.view(name)  # lazy: con.table() would scan the whole view right away


def to_polars(
    snapshot: Snapshot, *, columns: Sequence[str] | None = None, filter: FilterLike = None
) -> Any:
    """The snapshot as a polars LazyFrame; its ``filter``/``select`` are pushed into
    lakelog's pruning and pyarrow's scan when the plan is collected."""
    pl = require("polars", purpose="snapshot.to_polars()")
    cols = check_columns(snapshot, columns)
    dataset = LakelogDataset.from_snapshot(snapshot, filter)
    try:
        frame = pl.scan_pyarrow_dataset(dataset)
    except (pl.exceptions.PolarsError, TypeError, ValueError) as e:
        raise InvalidArgumentError(
            f"expected column types polars can read, found the schema {snapshot.schema} "
            f"refused: {e}; read with snapshot.to_arrow() instead."
        ) from e
    return frame if cols is None else frame.select(cols)


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
