"""Row helpers of the changes: expressions over a batch, and (from
:mod:`lakelog.scan.rows`) reading a data file's live rows with their positions."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..errors import InvalidArgumentError
from ..scan.rows import BATCH_ROWS, missing_file, read_positions, read_rows

__all__ = ["BATCH_ROWS", "evaluate", "matched", "missing_file", "read_positions", "read_rows"]


def evaluate(
    batch: pa.RecordBatch, expressions: Mapping[str, pc.Expression]
) -> dict[str, pa.Array]:
    """Each expression evaluated over the rows of ``batch`` (Arrow's row semantics)."""
    try:
        table = ds.dataset(pa.Table.from_batches([batch])).to_table(
            columns=dict(expressions), use_threads=False
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise InvalidArgumentError(
            f"expected expressions Arrow can compute over the table's rows, found an error "
            f"computing {', '.join(f'{k}: {v}' for k, v in expressions.items())}: {e}"
        ) from e
    return {name: table.column(name).combine_chunks() for name in expressions}


def matched(mask: pa.Array) -> pa.BooleanArray:
    """A filter result as a plain mask: rows where it is null do not match."""
    out = pc.fill_null(mask, False)
    assert isinstance(out, pa.BooleanArray)
    return out
