"""Changes selected by a predicate: ``delete``, ``update`` and ``overwrite(data, where=...)``.

A row matches where the predicate is true; where it is false or null (a
comparison with a null) the row is left alone, as in SQL. Candidate files are
the ones lakelog's pruning keeps for the predicate (partition values and
min/max statistics); a probe of the predicate's columns then tells which of
them hold a matching row, and only those are rewritten.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..errors import InvalidArgumentError, SchemaMismatchError
from ..filters import (
    Const,
    FileStatsColumns,
    FilterLike,
    Predicate,
    parse_filter,
    prune_mask,
    to_expression,
)
from ..filters.bind import cast_value
from ..io.guards import regenerate, stale_generated
from ..io.schema import check_schema, conform, to_reader
from ..io.writer import WriteOptions, write_files
from ..log.actions import DataFile
from ..log.feed import INSERT
from ..log.snapshot import Snapshot
from ..stats import referenced_columns
from ..storage import Storage
from ..transforms import PartitionSpec
from .base import Counts, RowChange, Written, as_mask

if TYPE_CHECKING:
    from .change_files import ChangeWriter
from .read import evaluate, matched

__all__ = ["DeleteChange", "OverwriteChange", "UpdateChange", "Where", "check_assignments"]


class Where:
    """A required row predicate, parsed once against the table schema."""

    def __init__(self, where: FilterLike, schema: pa.Schema, *, operation: str) -> None:
        pred = parse_filter(where, schema, argument="where")
        if pred is None:
            raise InvalidArgumentError(
                f"expected a predicate selecting the rows to {operation.lower()}, such as "
                f'"id = 42" (a string, DNF tuples or a pyarrow Expression), found '
                f'{where!r}; to {operation.lower()} every row pass "true".'
            )
        self.predicate: Predicate = pred
        self.expression: pc.Expression = (
            where if isinstance(where, pc.Expression) else to_expression(pred)
        )
        self.text = where.strip() if isinstance(where, str) else str(self.expression)
        self.columns = tuple(referenced_columns(self.expression, schema.names))

    @property
    def never(self) -> bool:
        """Whether the predicate is the constant false (nothing can match)."""
        return isinstance(self.predicate, Const) and not self.predicate.value

    def candidates(self, snapshot: Snapshot) -> Sequence[DataFile]:
        if self.never:
            return []
        return list(snapshot.files(self.predicate))  # read more than once, by index too

    def prune(self, files: FileStatsColumns) -> np.ndarray:
        return as_mask(prune_mask(self.predicate, files))

    def mask(self, batch: pa.RecordBatch) -> pa.BooleanArray:
        return matched(evaluate(batch, {"match": self.expression})["match"])


class _PredicateChange(RowChange):
    rebase_rewrites = True

    def __init__(self, where: Where) -> None:
        self.where = where
        self.probe_columns = where.columns

    def parameters(self) -> dict[str, Any]:
        return {"predicate": self.where.text}

    def candidates(self, snapshot: Snapshot) -> Sequence[DataFile]:
        return self.where.candidates(snapshot)

    def prune(self, files: FileStatsColumns) -> np.ndarray:
        return self.where.prune(files)

    def probe(self, batch: pa.RecordBatch) -> Counts:
        hits = _count(self.where.mask(batch))
        return self._counts(hits, batch.num_rows)

    def conflicts(self, batch: pa.RecordBatch) -> bool:
        return _count(self.where.mask(batch)) > 0

    def _counts(self, hits: int, rows: int) -> Counts:
        return Counts(deleted=hits, kept=rows - hits)

    def _hits(self, batch: pa.RecordBatch) -> tuple[pa.BooleanArray, np.ndarray]:
        mask = self.where.mask(batch)
        return mask, np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def _count(mask: pa.BooleanArray) -> int:
    return int(pc.sum(mask).as_py() or 0)


class DeleteChange(_PredicateChange):
    """``delete(where)``: drop the matching rows."""

    operation = "DELETE"

    @property
    def split_columns(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.where.columns

    def split(self, batch: pa.RecordBatch) -> tuple[np.ndarray, pa.RecordBatch | None, Counts]:
        _, hits = self._hits(batch)
        return hits, None, self._counts(int(hits.sum()), batch.num_rows)

    def apply(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, Counts]:
        mask = self.where.mask(batch)
        hits = _count(mask)
        out = batch.filter(pc.invert(mask)) if hits else batch
        return out, self._counts(hits, batch.num_rows)


class UpdateChange(_PredicateChange):
    """``update(where, set=...)``: new values in the matching rows, in place."""

    operation = "UPDATE"

    def __init__(self, where: Where, schema: pa.Schema, assignments: Mapping[str, Any]) -> None:
        super().__init__(where)
        self.schema = schema
        self.values, self.shown = check_assignments(schema, assignments)
        self.stale = stale_generated(schema, self.values)
        """Generated columns the update computes again (it changes what they read)."""

    def parameters(self) -> dict[str, Any]:
        return {"predicate": self.where.text, "set": self.shown}

    def _counts(self, hits: int, rows: int) -> Counts:
        return Counts(updated=hits, kept=rows - hits)

    def apply(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, Counts]:
        mask = self.where.mask(batch)
        hits = _count(mask)
        if not hits:
            return batch, self._counts(0, batch.num_rows)
        return self._assign(batch, mask), self._counts(hits, batch.num_rows)

    def _assign(self, batch: pa.RecordBatch, mask: pa.BooleanArray | None) -> pa.RecordBatch:
        """``batch`` with the new values where ``mask`` is true (None: in every row)."""
        exprs = {c: v for c, v in self.values.items() if isinstance(v, pc.Expression)}
        computed = evaluate(batch, exprs) if exprs else {}
        if mask is None:
            mask = pa.array(np.ones(batch.num_rows, dtype=bool))
        arrays = []
        for field in self.schema:
            col = batch.column(field.name)
            if field.name in self.values:
                new = computed.get(field.name, self.values[field.name])
                col = _set_where(mask, new, col, field)
            arrays.append(col)
        out = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        return conform(regenerate(out, self.schema, self.stale), self.schema)

    def split(self, batch: pa.RecordBatch) -> tuple[np.ndarray, pa.RecordBatch | None, Counts]:
        mask, hits = self._hits(batch)
        if not hits.any():
            return hits, None, self._counts(0, batch.num_rows)
        out = self._assign(batch.filter(mask), None)  # the matching rows, new values
        return hits, out, self._counts(int(hits.sum()), batch.num_rows)


def _set_where(mask: pa.BooleanArray, new: Any, old: pa.Array, field: pa.Field) -> pa.Array:
    try:
        if isinstance(new, (pa.Array, pa.ChunkedArray)) and new.type != field.type:
            new = new.cast(field.type, safe=True)
        out = pc.if_else(mask, new, old)
        return out if out.type == field.type else out.cast(field.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise InvalidArgumentError(
            f"expected the new values of column {field.name!r} in set= to fit its type "
            f"{field.type}, found: {e}. Nothing was committed."
        ) from e


def check_assignments(
    schema: pa.Schema, assignments: Mapping[str, Any], *, argument: str = "set"
) -> tuple[dict[str, pa.Scalar | pc.Expression], dict[str, Any]]:
    """``set=`` checked against the schema before anything is read or written.

    A value is a literal (cast to the column's type only where that keeps it; a
    string is parsed for dates and timestamps) or a :class:`pyarrow.compute.Expression`
    over the row's current values, whose type must convert to the column's type.
    Returns the bound values and their text for the commit header. ``argument`` is the
    caller's name for the mapping in messages (a merge's ``when_matched``).
    """
    if not isinstance(assignments, Mapping) or not assignments:
        raise InvalidArgumentError(
            f"expected {argument}= to map column names to new values, such as "
            f"{argument}={{'status': 'closed'}}, found {assignments!r}"
        )
    values: dict[str, pa.Scalar | pc.Expression] = {}
    shown: dict[str, Any] = {}
    empty = schema.empty_table()
    for name, value in assignments.items():
        if not isinstance(name, str) or name not in schema.names:
            raise InvalidArgumentError(
                f"expected columns of the table in {argument}=, found {name!r}; the table's "
                f"columns are {schema.names}"
            )
        field = schema.field(name)
        if isinstance(value, pc.Expression):
            try:
                got = ds.dataset(empty).to_table(columns={"v": value}).schema.field("v").type
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
                raise InvalidArgumentError(
                    f"expected an expression over the table's columns for {name!r} in {argument}=, "
                    f"found {value} ({e})"
                ) from e
            if not _convertible(got, field.type):
                raise SchemaMismatchError(
                    f"expected an expression of type {field.type} for column {name!r} in "
                    f"{argument}=, found {got} ({value}); cast it, e.g. "
                    f"pc.field(...).cast(pa.{field.type})."
                )
            values[name] = value
            shown[name] = str(value)
            continue
        values[name] = _literal(name, field, value, argument)
        shown[name] = _json_value(values[name])
    return values, shown


def _literal(name: str, field: pa.Field, value: Any, argument: str = "set") -> pa.Scalar:
    t = field.type
    if value is None:
        if not field.nullable:
            raise SchemaMismatchError(
                f"expected a value for column {name!r}, which the schema declares "
                f"non-nullable, found None in {argument}="
            )
        return pa.scalar(None, t)
    try:
        s = value if isinstance(value, pa.Scalar) else pa.scalar(value)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        s = None
    bound = None if s is None else (s if s.type == t else cast_value(s, t))
    text_into_other = (
        s is not None
        and pa.types.is_string(s.type)
        and not (pa.types.is_string(t) or pa.types.is_large_string(t))
        and not (pa.types.is_temporal(t) or pa.types.is_decimal(t))
    )
    if bound is None or text_into_other:
        raise SchemaMismatchError(
            f"expected a value of type {t} for column {name!r} in {argument}=, found {value!r}"
            f" ({type(value).__name__}); pass a value of the column's type."
        )
    return bound


def _convertible(got: pa.DataType, want: pa.DataType) -> bool:
    if got == want or pa.types.is_null(got):
        return True
    texts = (pa.string(), pa.large_string(), pa.string_view())
    if (got in texts) != (want in texts):
        return False
    try:
        pa.array([], got).cast(want)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


def _json_value(s: pa.Scalar) -> Any:
    v = s.as_py()
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)


class OverwriteChange(DeleteChange):
    """``overwrite(data, where=...)``: the rows matching ``where`` are replaced by
    ``data``, every row of which must match ``where`` too."""

    operation = "OVERWRITE"

    def __init__(
        self,
        where: Where,
        schema: pa.Schema,
        partition_by: tuple[str, ...],
        data: Any,
        options: WriteOptions,
        *,
        spec: PartitionSpec | None = None,
    ) -> None:
        super().__init__(where)
        self.schema = schema
        self.partition_by = partition_by
        self.partition_spec = spec
        self.options = options
        self.reader = to_reader(data)
        check_schema(self.reader.schema, schema)

    def parameters(self) -> dict[str, Any]:
        return {"where": self.where.text}

    def before(
        self, storage: Storage, lease_id: str, *, feed: ChangeWriter | None = None
    ) -> Written:
        rows = 0

        def checked() -> Iterator[pa.RecordBatch]:
            nonlocal rows
            for b in self.reader:
                if not b.num_rows:
                    continue
                batch = conform(b, self.schema)
                outside = batch.num_rows - _count(self.where.mask(batch))
                if outside:
                    raise InvalidArgumentError(
                        f"expected every row of the data to match where= {self.where.text!r} "
                        f"(overwrite replaces exactly those rows), found {outside} row(s) "
                        f"outside it; filter the data or widen where=. Nothing was committed."
                    )
                rows += batch.num_rows
                if feed is not None:
                    feed.add(batch, INSERT)
                yield batch

        adds = write_files(
            storage,
            checked(),
            schema=self.schema,
            partition_by=self.partition_by,
            options=self.options,
            lease_id=lease_id,
            spec=self.partition_spec,
        )
        return Written(tuple(adds), rows)
