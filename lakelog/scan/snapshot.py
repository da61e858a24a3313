"""Reading the rows of a snapshot: Arrow tables, batches, scanners, datasets, engines.

:class:`Snapshot` is the public snapshot: the log's resolved version
(:class:`lakelog.log.snapshot.Snapshot`, a pure value of the log) plus reading its
rows. Files are pruned by the log's partition values and statistics, row groups by
footers and bloom filters (:mod:`lakelog.scan.skipping`), and the rows a deletion
vector marks are dropped (:mod:`lakelog.scan.rows`). The log never imports this
package: reading sits above resolving.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..errors import (
    DataFileMissingError,
    DeletedRowsError,
    InvalidArgumentError,
    LakelogError,
    SchemaMismatchError,
)
from ..filters import (
    FilterLike,
    Predicate,
    ReadFilter,
    rename_columns,
    to_expression,
)
from ..log import mapping
from ..log.actions import DataFile
from ..log.snapshot import Snapshot as ResolvedSnapshot
from ..stats import file_guarantee, filter_may_select_nan, referenced_columns
from .engines import check_columns, has_unknown, to_duckdb, to_pandas, to_polars
from .rows import live_batches
from .skipping import prune_fragments, wants_footers

__all__ = ["Snapshot", "readable"]


class Snapshot(ResolvedSnapshot):
    """The table as of one version (immutable), with its rows readable.

    Everything about the version (files, counts, schema, properties) comes from the
    log's :class:`lakelog.log.snapshot.Snapshot`; this adds reading the rows.
    """

    @classmethod
    def of(cls, resolved: ResolvedSnapshot) -> Snapshot:
        """The readable form of a resolved snapshot, sharing its state and caches."""
        if isinstance(resolved, cls):
            return resolved
        out = cls.__new__(cls)
        out.__dict__.update(resolved.__dict__)
        return out

    # -- reading ---------------------------------------------------------------
    def dataset(
        self, filter: FilterLike = None, *, deleted: str = "refuse"
    ) -> ds.FileSystemDataset:
        """A pyarrow Dataset over exactly this snapshot's files.

        Each fragment carries its partition values and (null-safe) min/max
        ranges, so pyarrow prunes too; ``filter`` pre-prunes the file list, and,
        when it constrains a data column, the row groups inside the files by their
        statistics and bloom filters (:mod:`lakelog.scan.skipping`; a file gone
        missing is then a :class:`DataFileMissingError`). Reading it directly gives
        pyarrow's own errors (a missing file is a bare ``FileNotFoundError``);
        :meth:`to_arrow` and :meth:`to_batches` type them.

        A plain Dataset cannot drop the rows a deletion vector marks (format.md,
        "Deletion vectors"): when a selected file has one, this refuses with
        :class:`DeletedRowsError` (``deleted="refuse"``, the default) or, with
        ``deleted="include"``, returns every physical row, deleted ones too. Read such
        a table with :meth:`to_arrow`, :meth:`to_batches`, :meth:`scanner` or the
        engine readers, which drop them.

        Nor can it read columns stored under other names: a table with column ids whose
        columns were renamed (or added back after a drop), or that has struct columns
        (whose fields may have evolved), is refused with :class:`SchemaMismatchError`
        whatever ``deleted`` says (format.md, "Column ids"); the readers above map them.

        Args:
            filter: a :data:`~lakelog.FilterLike` (SQL-like string, DNF tuples or pyarrow
                Expression) that prunes files and row groups; rows are not filtered (pass
                it to the Dataset's reads too). Default None.
            deleted: ``"refuse"`` (default) or ``"include"``, for files with deleted rows.
        """
        if deleted not in ("refuse", "include"):
            raise InvalidArgumentError(
                f"expected deleted to be 'refuse' or 'include', found {deleted!r}"
            )
        if self.reads_through_lakelog:
            raise SchemaMismatchError(
                f"expected a table whose data files store every column under its name for "
                f"a plain pyarrow Dataset of version {self.version} of {self.storage.uri}, "
                f"found renamed columns or evolved nested fields, which files store under "
                f"physical names or in older shapes (docs/format.md, 'Column ids'): a "
                f"Dataset would read them as nulls. Read with snapshot.to_arrow(), "
                f"to_batches() or scanner() (or to_duckdb/to_polars/to_pandas), which map "
                f"them."
            )
        parsed = self.read_filter(filter)  # parsed once, for the files and the fragments
        files = list(self.files(parsed))  # built once: read below more than once
        if deleted == "refuse":
            marked = [f.path for f in files if f.deleted is not None]
            if marked:
                raise DeletedRowsError(
                    f"expected files without deleted rows for a plain pyarrow Dataset of "
                    f"version {self.version} of {self.storage.uri}, found {len(marked)} with "
                    f"a deletion vector (e.g. {marked[0]!r}), whose deleted rows a Dataset "
                    f"would return. Read with snapshot.to_arrow(), to_batches() or "
                    f"scanner() (or to_duckdb/to_polars/to_pandas), which drop them; or "
                    f"compact the table to rewrite those files; or pass deleted='include' "
                    f"to see every physical row."
                )
        return self._dataset_of(files, parsed)

    def _dataset_of(
        self,
        files: Sequence[DataFile],
        filter: FilterLike | ReadFilter,
        *,
        physical: _Physical | None = None,
    ) -> ds.FileSystemDataset:
        """A Dataset of ``files`` pruned by ``filter``, over the table's names; or, given
        ``physical`` (a filter already renamed, :meth:`_path`), over the names the files
        store columns by, pruned by that."""
        schema = mapping.strip(self.physical_schema if physical else self.schema)
        fmt = ds.ParquetFileFormat()
        fs = self.storage.arrow_filesystem()
        true = pc.scalar(True)
        frags = []
        for f in files:
            g = file_guarantee(f, schema, null_safe=True)
            frags.append(
                fmt.make_fragment(
                    self.storage.full(f.path),
                    filesystem=fs,
                    partition_expression=true if g is None else g,
                    file_size=f.size_bytes,
                )
            )
        pred, expr = self.read_filter(filter) if physical is None else physical.filter
        if expr is not None and wants_footers(pred, self.partition_by):
            try:
                frags = prune_fragments(self.storage, frags, pred, expr, schema)  # type: ignore[arg-type]
            except FileNotFoundError as e:
                raise self._missing_file(e) from e
        return ds.FileSystemDataset(frags, schema, fmt, fs)

    def to_arrow(self, columns: Sequence[str] | None = None, filter: FilterLike = None) -> pa.Table:
        """Read the snapshot (or the matching rows and columns) into a Table.

        A referenced data file deleted outside lakelog is a :class:`DataFileMissingError`.

        Args:
            columns: the columns to read, in this order; default None, all of them.
            filter: rows to keep, a :data:`~lakelog.FilterLike` (SQL-like string, DNF tuples
                or pyarrow Expression); it also prunes files and row groups. Default None.
        """
        parsed, cols, files, path = self._plan_read(columns, filter)
        expr = parsed.expression
        if path == "live":
            out = self._out_schema(cols)
            with self._reading():  # in this thread: no pyarrow thread holds the generator
                got = list(self._live_batches(files, cols, parsed, 65536))
            return pa.Table.from_batches(got, schema=out)
        if isinstance(path, _Physical):  # renamed columns: a Dataset under the files' names
            with self._reading():
                got = self._dataset_of(files, None, physical=path).to_table(
                    columns=self._physical_columns(cols), filter=path.filter[1]
                )
            return pa.Table.from_arrays(got.columns, schema=self._out_schema(cols))
        dataset = self._dataset_of(files, parsed)
        with self._reading():
            if expr is not None and filter_may_select_nan(expr, self.schema):
                wide = _with_filter_columns(cols, expr, self.schema)
                got = dataset.to_table(columns=wide).filter(expr)
                return got if cols is None else got.select(cols)
            return dataset.to_table(columns=cols, filter=expr)

    def to_batches(
        self,
        columns: Sequence[str] | None = None,
        filter: FilterLike = None,
        *,
        batch_size: int = 65536,
    ) -> Iterator[pa.RecordBatch]:
        """Stream the snapshot as record batches of up to ``batch_size`` rows (bounded
        memory). Arguments are checked on the call, errors are typed as in :meth:`to_arrow`.

        Args:
            columns: the columns to read, in this order; default None, all of them.
            filter: rows to keep, a :data:`~lakelog.FilterLike` (SQL-like string, DNF tuples
                or pyarrow Expression); it also prunes files and row groups. Default None.
            batch_size: the most rows per batch; default 65,536.
        """
        _check_batch_size(batch_size)
        parsed, cols, files, path = self._plan_read(columns, filter)
        expr = parsed.expression
        if path == "live":
            return self._typed(self._live_batches(files, cols, parsed, batch_size))
        if isinstance(path, _Physical):
            return self._typed(self._physical_batches(files, cols, path, batch_size))
        return self._stream(self._dataset_of(files, parsed), cols, expr, batch_size)

    def scanner(
        self,
        columns: Sequence[str] | None = None,
        filter: FilterLike = None,
        *,
        batch_size: int = 65536,
    ) -> ds.Scanner:
        """A pyarrow Scanner over the live rows of the snapshot that match ``filter``
        (files and row groups pruned as in :meth:`dataset`; rows deletion vectors mark
        dropped): what DuckDB and polars read through :meth:`to_duckdb` and
        :meth:`to_polars` when they cannot read the files themselves. Errors while
        scanning are pyarrow's, as for :meth:`dataset`. Arguments as for
        :meth:`to_batches`.
        """
        _check_batch_size(batch_size)
        parsed, cols, files, path = self._plan_read(columns, filter)
        expr = parsed.expression
        if path != "plain":
            rows = (
                self._physical_batches(files, cols, path, batch_size)
                if isinstance(path, _Physical)
                else self._live_batches(files, cols, parsed, batch_size)
            )
            return ds.Scanner.from_batches(
                rows,
                schema=self._out_schema(cols),
                batch_size=batch_size,
                use_threads=False,
            )
        return self._dataset_of(files, parsed).scanner(
            columns=cols, filter=expr, batch_size=batch_size
        )

    @cached_property
    def reads_through_lakelog(self) -> bool:
        """Whether the data files must be read through lakelog's readers (which map
        columns), not a plain Arrow dataset: some column is stored under another name
        (renamed, or added back after a drop), or the table has column ids and nested
        types, whose fields may have evolved (format.md, "Column ids")."""
        return self.relabelled or self._nested_ids

    @cached_property
    def _nested_ids(self) -> bool:
        """Column ids and nested types: a struct's fields may have evolved or be stored
        under other names, which only lakelog's per-file reader maps."""
        schema = self.schema
        return mapping.is_mapped(schema) and any(pa.types.is_nested(f.type) for f in schema)

    def _own_reader(self, files: Sequence[DataFile]) -> bool:
        """Whether ``files`` are read through :meth:`_live_batches` only: a file has a
        deletion vector, or a struct may have evolved."""
        return self._nested_ids or any(f.deleted is not None for f in files)

    def _plan_read(
        self, columns: Sequence[str] | None, filter: FilterLike
    ) -> tuple[ReadFilter, list[str] | None, list[DataFile], _Read]:
        """What :meth:`to_arrow`, :meth:`to_batches` and :meth:`scanner` start from: the
        filter parsed once for the whole read, the columns checked, the files (built once:
        read more than once after) and how they are read (:meth:`_path`)."""
        parsed = self.read_filter(filter)
        cols = check_columns(self.schema, columns)
        files = list(self.files(parsed))
        return parsed, cols, files, self._path(files, parsed)

    def _path(self, files: Sequence[DataFile], parsed: ReadFilter) -> _Read:
        """How ``files`` are read with ``expr``: ``"live"`` (:meth:`_live_batches`),
        ``"plain"`` (a Dataset under the table's names), or a :class:`_Physical` filter for
        a Dataset under the names the files store columns by (renamed columns, top level
        only). A filter lakelog does not model cannot be renamed, nor one that may select
        NaN be pushed into a scan: those read live. The filter is renamed once, here."""
        if self._own_reader(files):
            return "live"
        if not self.relabelled:
            return "plain"
        pred, expr = parsed
        if expr is None:
            return _Physical((None, None))
        if filter_may_select_nan(expr, self.schema):
            return "live"
        if pred is None:
            return _Physical((None, None))
        if has_unknown(pred):
            return "live"
        renamed = rename_columns(pred, mapping.physical_names(self.schema))
        return _Physical((renamed, to_expression(renamed)))

    def _physical_columns(self, columns: list[str] | None) -> list[str]:
        names = self.schema.names if columns is None else columns
        return [mapping.physical_name(self.schema.field(n)) for n in names]

    def _physical_batches(
        self,
        files: Sequence[DataFile],
        columns: list[str] | None,
        physical: _Physical,
        batch_size: int,
    ) -> Iterator[pa.RecordBatch]:
        """The matching rows of ``files`` of a table with renamed columns, read by a
        Dataset under the names the files store columns by and relabelled (zero-copy)."""
        out = self._out_schema(columns)
        dataset = self._dataset_of(files, None, physical=physical)
        with self._reading():
            for batch in dataset.to_batches(
                columns=self._physical_columns(columns),
                filter=physical.filter[1],
                batch_size=batch_size,
            ):
                yield pa.RecordBatch.from_arrays(batch.columns, schema=out)

    def _out_schema(self, columns: list[str] | None) -> pa.Schema:
        schema = mapping.strip(self.schema)
        if columns is None:
            return schema
        return pa.schema([schema.field(n) for n in columns])

    def _live_batches(
        self,
        files: Sequence[DataFile],
        columns: list[str] | None,
        parsed: ReadFilter,
        batch_size: int,
    ) -> Iterator[pa.RecordBatch]:
        """The matching rows of ``files``, some with deletion vectors: those are read
        through :func:`lakelog.scan.rows.live_batches` (positions dropped, several files at
        once), the rest through a Dataset as usual; both filtered and projected."""
        if self.reads_through_lakelog:
            plain, marked = [], list(files)
        else:
            plain = [f for f in files if f.deleted is None]
            marked = [f for f in files if f.deleted is not None]
        if plain:
            expr = parsed.expression
            yield from self._stream(self._dataset_of(plain, parsed), columns, expr, batch_size)
        yield from live_batches(
            self.storage,
            marked,
            self.schema,
            self.partition_by,
            columns=columns,
            filter=parsed.expression,
            version=self.version,
            batch_size=batch_size,
        )

    def _typed(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with self._reading():
            yield from batches

    def _stream(
        self,
        dataset: ds.FileSystemDataset,
        columns: list[str] | None,
        expr: pc.Expression | None,
        batch_size: int,
    ) -> Iterator[pa.RecordBatch]:
        with self._reading():
            if expr is None or not filter_may_select_nan(expr, self.schema):
                yield from dataset.to_batches(columns=columns, filter=expr, batch_size=batch_size)
                return
            wide = _with_filter_columns(columns, expr, self.schema)
            for batch in dataset.to_batches(columns=wide, batch_size=batch_size):
                got = pa.Table.from_batches([batch]).filter(expr)
                if columns is not None:
                    got = got.select(columns)
                yield from got.to_batches()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Typed errors for reading the data files: a filter over unknown columns, a
        data file deleted outside lakelog."""
        try:
            yield
        except FileNotFoundError as e:
            if isinstance(e, LakelogError):
                raise
            raise self._missing_file(e) from e
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            if "No match for FieldRef" in str(e):
                raise InvalidArgumentError(
                    f"expected a filter over the table's columns {self.schema.names}: {e}"
                ) from e
            raise

    def _missing_file(self, error: FileNotFoundError) -> DataFileMissingError:
        """The error for a data file of this version that is gone: the one the
        filesystem error names, else the first that no longer exists."""
        text = str(error)
        named = [f.path for f in self._all_files if self.storage.full(f.path) in text]
        path = max(named, key=len) if named else None
        if path is None:
            path = next((f.path for f in self._all_files if not self.storage.exists(f.path)), "")
        where = f"{path!r}" if path else f"({error})"
        return DataFileMissingError(
            f"expected data file {where}, which version {self.version} of {self.storage.uri} "
            f"references, found it missing: it was deleted outside lakelog (lakelog only "
            f"deletes files that no retained version references). Restore it from a backup, "
            f"or read a version that does not reference it (time travel with "
            f"table.snapshot(version)); to drop it for good, overwrite the rows or partition "
            f"it held.",
            path=path,
            version=self.version,
        )

    # -- other engines (lakelog.scan.engines; docs/reading.md) -----------------
    def to_duckdb(self, con: Any = None, *, name: str, filter: FilterLike = None) -> Any:
        """Register this snapshot on a DuckDB connection (None: DuckDB's default one) as
        the temporary view ``name`` and return its relation: DuckDB's own ``read_parquet``
        over the snapshot's files pruned by ``filter``, deleted rows removed inside
        DuckDB's plan; queries on it prune row groups (docs/reading.md).

        Args:
            con: a DuckDB connection; default None, DuckDB's default one.
            name: the view's name.
            filter: limits the view to matching rows, a :data:`~lakelog.FilterLike`;
                default None.
        """
        return to_duckdb(self, con, name=name, filter=filter)

    def to_polars(self, *, columns: Sequence[str] | None = None, filter: FilterLike = None) -> Any:
        """This snapshot as a polars LazyFrame: polars' own ``scan_parquet`` over the
        snapshot's files pruned by ``filter``, deleted rows filtered out by a row index
        inside the scan (docs/reading.md).

        Args:
            columns: the columns to read, in this order; default None, all of them.
            filter: rows to keep, a :data:`~lakelog.FilterLike` (SQL-like string, DNF tuples
                or pyarrow Expression); it also prunes files and row groups. Default None.
        """
        return to_polars(self, columns=columns, filter=filter)

    def to_pandas(
        self, *, columns: Sequence[str] | None = None, filter: FilterLike = None, **options: Any
    ) -> Any:
        """The matching rows as a pandas DataFrame.

        Args:
            columns: the columns to read, in this order; default None, all of them.
            filter: rows to keep, a :data:`~lakelog.FilterLike` (SQL-like string, DNF tuples
                or pyarrow Expression); it also prunes files and row groups. Default None.
            options: passed to ``pyarrow.Table.to_pandas``.
        """
        return to_pandas(self, columns=columns, filter=filter, **options)


def _check_batch_size(batch_size: Any) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise InvalidArgumentError(
            f"expected batch_size to be an integer > 0 (rows), found {batch_size!r}; "
            f"pass a whole number of rows such as batch_size=65536."
        )


def _with_filter_columns(
    columns: list[str] | None, expr: pc.Expression, schema: pa.Schema
) -> list[str] | None:
    """``columns`` plus those ``expr`` may refer to (to filter after the scan)."""
    if columns is None:
        return None
    return [*columns, *(c for c in referenced_columns(expr, schema.names) if c not in columns)]


def readable(resolved: ResolvedSnapshot) -> Snapshot:
    """The readable form of a resolved snapshot (see :meth:`Snapshot.of`)."""
    return Snapshot.of(resolved)


@dataclass(frozen=True)
class _Physical:
    """A read under the names files store columns by: the filter (predicate and
    expression) renamed to them; ``(None, None)`` for none."""

    filter: tuple[Predicate | None, pc.Expression | None]


_Read: TypeAlias = "Literal['live', 'plain'] | _Physical"
