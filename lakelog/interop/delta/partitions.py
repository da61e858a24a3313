"""The view's partition columns for a table partitioned by transforms (format 8).

Delta has no hidden partitioning, but it has *generated* partition columns: a column
the files do not hold, declared with ``delta.generationExpression``, whose value each
``add`` carries in ``partitionValues``. Where a transform has such a Delta expression
with lakelog's string form as its value, the view is partitioned by it
(``docs/delta-view.md``, "Tables partitioned by transforms"):

* ``identity(col)``: ``col`` itself (the files hold it too; readers take the value from
  ``partitionValues``, which is the same);
* ``year(col)``: ``col_year`` int, ``YEAR(col)``;
* ``month(col)``: ``col_month`` string, ``DATE_FORMAT(col, 'yyyy-MM')``;
* ``day(col)``: ``col_day`` date, ``CAST(col AS DATE)``;

for ``col`` a date or a timestamp without time zone (Delta evaluates a timestamp with
one in the session's time zone, lakelog in UTC). Anything else keeps the view
unpartitioned, which is always correct: a table with more than one spec or an
inexpressible field (``hour``, ``bucket``, ``truncate``), a table with the change data
feed on (change files record no transform values), a column-mapped view, a derived name
that is already a column, or any live file without the current spec's tag (a Delta
file must have a partition value).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ...log import mapping
from ...log.actions import Metadata
from ...log.feed import PROPERTY as CDF_PROPERTY
from ...log.snapshot import Snapshot
from ...transforms import SPEC_TAG, TAG_PREFIX, PartitionField, parse_field
from .types import view_schema

__all__ = [
    "DerivedColumn",
    "derived_delta_fields",
    "expressible",
    "view_partitioning",
]

_TYPES = {"year": "integer", "month": "string", "day": "date"}


@dataclass(frozen=True)
class DerivedColumn:
    """One partition column of the view: a spec field Delta can express."""

    field: PartitionField

    @property
    def name(self) -> str:
        return self.field.name

    @property
    def identity(self) -> bool:
        return self.field.kind == "identity"

    @property
    def expression(self) -> str:
        c = f"`{self.field.column}`"
        return {
            "year": f"YEAR({c})",
            "month": f"DATE_FORMAT({c}, 'yyyy-MM')",
            "day": f"CAST({c} AS DATE)",
        }[self.field.kind]

    def value(self, tags: Mapping[str, str]) -> str | None:
        """The file's value (its recorded tag; no tag: null)."""
        return tags.get(TAG_PREFIX + self.name)


def _time_source(t: pa.DataType) -> bool:
    return pa.types.is_date32(t) or (pa.types.is_timestamp(t) and t.tz is None)


def expressible(md: Metadata) -> tuple[DerivedColumn, ...]:
    """The view's partition columns as far as ``md`` tells (empty: unpartitioned)."""
    if md.partition_by or len(md.partition_specs) != 1:
        return ()
    if CDF_PROPERTY in md.properties:
        return ()
    schema = md.arrow_schema()
    if mapping.is_mapped(view_schema(schema)):
        return ()
    names = {n.lower() for n in schema.names}
    out = []
    for text in md.partition_specs[0]:
        f = parse_field(text)
        if f.column not in schema.names:
            return ()
        if f.kind == "identity":
            out.append(DerivedColumn(f))
            continue
        if f.kind not in _TYPES or not _time_source(schema.field(f.column).type):
            return ()
        if f.name.lower() in names:
            return ()
        names.add(f.name.lower())
        out.append(DerivedColumn(f))
    return tuple(out)


def _all_tagged(snapshot: Snapshot) -> bool:
    """Whether every live file records spec 0 (the only spec)."""
    tags = snapshot.file_table.column("tags")
    if tags.null_count:
        return False
    needle = msgspec.json.encode({SPEC_TAG: "0"}).decode()[1:-1]
    return pc.all(pc.match_substring(tags, needle)).as_py() is not False


def view_partitioning(snapshot: Snapshot) -> tuple[DerivedColumn, ...]:
    """The view's partition columns at ``snapshot`` (empty: unpartitioned)."""
    derived = expressible(snapshot.metadata)
    if derived and snapshot.file_table.num_rows and not _all_tagged(snapshot):
        return ()
    return derived


def derived_delta_fields(
    schema: pa.Schema, derived: Sequence[DerivedColumn]
) -> list[dict[str, Any]]:
    """The Delta schema fields the view adds for ``derived`` (identity columns are
    already columns)."""
    return [
        {
            "name": d.name,
            "type": _TYPES[d.field.kind],
            "nullable": True,
            "metadata": {"delta.generationExpression": d.expression},
        }
        for d in derived
        if not d.identity
    ]
