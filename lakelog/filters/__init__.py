"""One filter language: pyarrow Expressions, DNF tuples and SQL-like strings become one
predicate tree, which prunes files with a few vectorized comparisons.

The language: comparisons (``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``) of a column
with a literal, ``in`` / ``not in``, ``between``, ``is null`` / ``is not null``,
``and``, ``or``, ``not``, and the constants true and false. Anything else in a pyarrow
Expression is kept as :class:`Unknown`.

Guarantees:

* A tree means what :func:`to_expression` makes of it: Arrow's three-valued row
  semantics (a comparison with a null is null; NaN compares false, except that it is
  ``!=`` everything); a row is selected where the filter is true.
* Pruning is conservative: :func:`prune_mask` keeps every file that may hold a
  selected row. Whatever it cannot reason about (:class:`Unknown`, values that do not
  compare, missing statistics) keeps files. It runs pyarrow compute over one array per
  column, never Python per file.
* Decoding a pyarrow Expression never guesses: the decoded tree is verified by
  rebuilding an Expression equal to the input, or the whole filter is :class:`Unknown`.
* A filter Arrow could not evaluate over the table is refused when it is parsed, in
  any form, with an :class:`~lakelog.errors.InvalidArgumentError` naming the column and
  its type: comparisons take integers, floating-point numbers, decimals, strings,
  binary, booleans, dates, times, timestamps and durations; a list, struct or map
  column takes only ``is null`` / ``is not null`` (:func:`.bind.comparable`).

Modules:

* :mod:`.tree`: the predicate dataclasses, :class:`FileStatsColumns`, :func:`to_expression`.
* :mod:`.bind`: binding and casting literals to column types, shared by the parsers.
* :mod:`.parse`: :func:`parse_filter`, the one entry point, and the DNF tuple front end.
* :mod:`.sql`: the SQL-like string parser.
* :mod:`.expressions`: decoding pyarrow Expressions through their serialized form.
* :mod:`.prune`: :func:`prune_mask`.

>>> import pyarrow as pa
>>> schema = pa.schema([("day", pa.date32()), ("n", pa.int64())])
>>> pred = parse_filter("day = '2026-11-02' and n > 5", schema)
>>> to_expression(pred)
<pyarrow.compute.Expression ((day == 2026-11-02) and (n > 5))>
>>> files = FileStatsColumns(
...     num_rows=pa.array([10, 10]),
...     partition={"day": pa.array(["2026-11-02", "2026-11-02"]).cast(pa.date32())},
...     min={"n": pa.array([0, 0])},
...     max={"n": pa.array([9, 3])},
...     null_count={"n": pa.array([0, 0])},
... )
>>> prune_mask(pred, files).to_pylist()
[True, False]
"""

from .parse import (
    DNF,
    DNFTerm,
    FilterLike,
    PartitionFilterLike,
    ReadFilter,
    parse_filter,
    read_filter,
)
from .prune import prune_mask
from .tree import (
    And,
    Compare,
    Const,
    FileStatsColumns,
    In,
    IsNull,
    Not,
    Or,
    Predicate,
    Unknown,
    predicate_columns,
    rename_columns,
    to_expression,
)

__all__ = [
    "And",
    "Compare",
    "Const",
    "DNF",
    "DNFTerm",
    "FileStatsColumns",
    "FilterLike",
    "In",
    "IsNull",
    "Not",
    "Or",
    "PartitionFilterLike",
    "Predicate",
    "ReadFilter",
    "Unknown",
    "parse_filter",
    "prune_mask",
    "predicate_columns",
    "read_filter",
    "rename_columns",
    "to_expression",
]
