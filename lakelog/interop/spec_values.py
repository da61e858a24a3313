"""The transform values of files another tool wrote (``add_files`` and ``convert`` into
or of a table partitioned by transforms, format version 8).

A file lakelog writes records the values of its spec's fields in its tags
(``docs/format.md``, "Partition transforms"); a file adopted as it is gets the same
tags, found from what the file holds:

* from its footer statistics first: a field whose transform of the column's minimum
  equals that of its maximum (and the column has no nulls, or only nulls) has that one
  value; for a monotone transform (identity and truncate of integers and dates, the
  time transforms) different values of the two are two values found;
* otherwise (a bucket, whose values are not ordered like the column's; a string, whose
  footer bounds may be truncated by the writer; no statistics) by reading that one
  column of the file and transforming every value.

A file whose rows hold more than one value of a field is refused: its tags could not
say which partition it belongs to, and pruning by them would lose rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InvalidArgumentError
from ..io.schema import conform
from ..stats import stats_scalar
from ..storage import Storage
from ..transforms import PartitionField, PartitionSpec
from .footers import Footer

__all__ = ["spec_tags"]

_UNDECIDED = object()
_THREADS = 8


def _show(field: PartitionField, value: Any) -> str:
    text = field.to_string(value)
    return "null" if text is None else repr(text)


def _refuse(
    path: str, spec: PartitionSpec, field: PartitionField, a: Any, b: Any, hint: str
) -> NoReturn:
    raise InvalidArgumentError(
        f"expected each file to hold rows of one partition of the table's partitioning "
        f"{list(spec.texts)}, found {path} with {field.text} values {_show(field, a)} and "
        f"{_show(field, b)}; {hint}"
    )


def _from_stats(footer: Footer, field: PartitionField, t: pa.DataType) -> Any:
    """The field's one value by the footer's statistics, or :data:`_UNDECIDED`; two
    values the statistics prove are raised as a :class:`_Span`."""
    col = field.column
    stats = footer.stats
    nulls = stats.null_count.get(col)
    if nulls is not None and nulls == footer.num_rows:
        return None  # only nulls: the null partition
    lo, hi = stats.min.get(col), stats.max.get(col)
    if nulls is None or lo is None or hi is None:
        return _UNDECIDED
    if field.kind == "bucket":  # not ordered like the column: the bounds cannot say
        return _UNDECIDED
    a = field.apply(pa.array([stats_scalar(lo, t)], t))[0].as_py()
    b = field.apply(pa.array([stats_scalar(hi, t)], t))[0].as_py()
    if a == b:  # a monotone transform: every value between the bounds has it too
        if nulls:
            raise _Span(a, None)
        return a
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):  # exact bounds
        raise _Span(a, b)
    return _UNDECIDED  # a writer may have cut the bounds of strings short


class _Span(Exception):  # an internal signal, never reaches a caller
    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


def _read_column(storage: Storage, path: str, column: str, t: pa.DataType) -> pa.Array:
    with storage.open_input(path) as fh:
        got = pq.read_table(fh, columns=[column])
    values = got.column(0).combine_chunks()
    if values.type != t:
        batch = pa.record_batch([values], names=[column])
        values = conform(batch, pa.schema([(column, t)])).column(0)
    return values


def spec_tags(
    storage: Storage,
    footers: Sequence[Footer],
    spec: PartitionSpec,
    schema: pa.Schema,
    *,
    hint: str,
) -> list[dict[str, str]]:
    """The tags of each of ``footers``' files in ``spec`` (its id and each field's value),
    in their order; a file with rows of several values of a field is refused with an
    :class:`InvalidArgumentError` naming the file, the field and two values found
    (``hint`` ends the message: what to do, and that nothing was committed)."""
    values: list[list[Any]] = []
    todo: list[tuple[int, int]] = []
    for i, footer in enumerate(footers):
        row: list[Any] = []
        for j, field in enumerate(spec.fields):
            t = schema.field(field.column).type
            if field.column not in footer.schema.names:
                row.append(None)  # a missing column reads as nulls
                continue
            try:
                v = _from_stats(footer, field, t)
            except _Span as span:
                _refuse(footer.path, spec, field, span.a, span.b, hint)
            if v is _UNDECIDED:
                todo.append((i, j))
            row.append(v)
        values.append(row)

    def decide(item: tuple[int, int]) -> tuple[int, int, list[Any]]:
        i, j = item
        field = spec.fields[j]
        column = _read_column(
            storage, footers[i].path, field.column, schema.field(field.column).type
        )
        found = pc.unique(field.apply(column)).to_pylist()
        return i, j, found[:2]

    if todo:
        with ThreadPoolExecutor(min(_THREADS, len(todo))) as pool:
            for i, j, found in pool.map(decide, todo):
                if len(found) > 1:
                    _refuse(footers[i].path, spec, spec.fields[j], found[0], found[1], hint)
                values[i][j] = found[0] if found else None
    return [spec.tags(row) for row in values]
