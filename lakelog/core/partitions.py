"""Partition evolution: :meth:`lakelog.Table.set_partitioning` appends a spec to the
table's ``partition_specs`` (format version 8, ``docs/format.md``, "Partition transforms
and evolution"). New data goes into the new spec; files keep the spec they were written
in, so nothing is rewritten; compaction and clustering move what they rewrite into the
current spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from ..errors import InvalidArgumentError
from ..log.actions import Metadata
from ..transaction import CommitResult
from ..transforms import parse_fields

if TYPE_CHECKING:
    from .handle import TableHandle

__all__ = ["set_partitioning"]


def set_partitioning(table: TableHandle, partition_by: Sequence[str] | str) -> CommitResult:
    """:meth:`lakelog.Table.set_partitioning`: one ``metadata`` commit adding a spec of
    ``partition_by``'s fields (checked against the schema) when it differs from the
    current one; otherwise nothing is committed (``skipped``)."""
    snap = table.snapshot()
    if snap.partition_by:
        wanted = [partition_by] if isinstance(partition_by, str) else list(partition_by)
        raise InvalidArgumentError(
            f"expected a table whose data files hold every column, found one partitioned "
            f"by the columns {list(snap.partition_by)}, which its files do not hold; its "
            f"partitioning cannot change. Write the rows into a new table created with "
            f"partition_by={wanted}."
        )
    fields = parse_fields(partition_by, snap.schema)
    texts = tuple(f.text for f in fields)
    specs = snap.metadata.partition_specs
    if (specs and specs[-1] == texts) or (not specs and not texts):
        return CommitResult(
            version=snap.version, attempts=0, operation="SET PARTITIONING", skipped=True
        )
    md: Metadata = msgspec.structs.replace(snap.metadata, partition_specs=(*specs, texts))
    return table.commit(
        [md],
        operation="SET PARTITIONING",
        kind="metadata",
        read_snapshot=snap,
        parameters={"partition_by": list(texts), "spec_id": len(specs)},
    )
