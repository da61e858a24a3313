"""Identity values of one write, and what a lost race does to them (format.md,
"Constraints, generated and identity columns").

A write gives out values from the high-water mark of the snapshot it read
(:class:`~lakelog.io.guards.IdentityAllocator`), writes its files, and commits them with
a ``metadata`` action whose marks are the last values it gave out. When another write
that gave out values of the same column landed first, :class:`IdentityWrite` (the
transaction's rebase callback) rewrites this write's files with each generated value
shifted past the winner's mark, before the retry: the values stay in the same order
(so a writer's values increase from commit to commit) and never repeat a committed one.
The rewritten files are staged like the first ones; the first ones are deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import CommitConflictError
from ..io.guards import IdentityAllocator, marks_of, with_marks
from ..io.writer import RollingWriter, WriteOptions
from ..log import mapping
from ..log.actions import Action, AddFile, Commit, Metadata, encode_schema
from ..storage import Storage

if TYPE_CHECKING:
    from .staged import Staged

__all__ = ["IdentityWrite"]


class IdentityWrite:
    """The identity values of one write of ``schema`` and its rebase callback.

    ``fill`` numbers each batch; :meth:`metadata` is the ``metadata`` action recording
    the marks (None when no value was given out); the object itself is the ``rebase``
    callback of the commit."""

    def __init__(
        self,
        storage: Storage,
        schema: pa.Schema,
        *,
        partition_by: Sequence[str],
        options: WriteOptions,
        lease_id: str | None,
        files: Staged,
    ) -> None:
        self.storage = storage
        self.schema = schema
        self.allocator = IdentityAllocator(schema)
        self.partition_by = tuple(partition_by)
        self.options = options
        self.lease_id = lease_id
        self.files = files
        self.identity_base: dict[str, int | None] = dict(self.allocator.bases)
        """The marks this write's values are given out from (read by the transaction's
        check that no mark goes back, ``transaction._carry_marks``)."""
        self.shifts = 0
        self.only: set[str] | None = None
        """The paths of the files holding this write's values, when the commit adds
        others too (a merge's rewritten files keep their values); None: every file."""
        self.recorded = False
        """Whether the values were recorded elsewhere too (a change data feed): then a
        lost race is a conflict, since moving them would make the two disagree."""

    def __bool__(self) -> bool:
        return bool(self.allocator)

    def fill(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return self.allocator.fill(batch)

    def metadata(self, md: Metadata) -> Metadata | None:
        """``md`` with the marks of the values given out, or None if none were."""
        if not self.allocator.marks:
            return None
        schema = with_marks(md.arrow_schema(), self.allocator.marks)
        return msgspec.structs.replace(md, schema=encode_schema(schema))

    def __call__(self, winners: Sequence[Commit], actions: list[Action]) -> list[Action]:
        latest = None
        for commit in winners:
            for a in commit.actions:
                if isinstance(a, Metadata):
                    latest = a
        if latest is None or not self.allocator.marks:
            return actions
        won = marks_of(latest.arrow_schema())
        shifts: dict[str, int] = {}
        for column in self.allocator.marks:
            w, base = won.get(column), self.identity_base.get(column)
            if w is None or w == base:
                continue
            step = self.allocator.identity[column].step
            first = self.allocator.identity[column].start if base is None else base + step
            shifts[column] = w + step - first
        if not shifts:
            return actions
        if self.recorded:
            column = next(iter(shifts))
            raise CommitConflictError(
                f"expected identity column {column!r} to be given out from mark "
                f"{self.identity_base.get(column)}, found it moved to {won[column]} by a "
                f"concurrent write (the change data feed recorded this write's values); "
                f"write again (the values are given out anew)."
            )
        out: list[Action] = []
        for a in actions:
            if (
                isinstance(a, AddFile)
                and a.data_change
                and (self.only is None or a.path in self.only)
            ):
                moved = self._shifted(a, shifts)
                if self.only is not None:
                    self.only.update(m.path for m in moved)
                out.extend(moved)
            elif isinstance(a, Metadata):
                marks = {c: m + shifts.get(c, 0) for c, m in self.allocator.marks.items()}
                # on the winner's metadata: its properties and marks, this write's marks
                out.append(
                    msgspec.structs.replace(
                        latest, schema=encode_schema(with_marks(latest.arrow_schema(), marks))
                    )
                )
            else:
                out.append(a)
        for c, shift in shifts.items():
            self.allocator.marks[c] += shift
        self.identity_base = {**self.identity_base, **{c: won[c] for c in shifts}}
        self.shifts += 1
        return out

    def shifted(self, add: AddFile, shifts: dict[str, int]) -> list[AddFile]:
        """``add``'s file written again with the identity values moved by ``shifts``
        (column to the amount added), staged with this write's files; ``add``'s file is
        deleted. Spark's writers move each task's values to its place in the write with
        it (``lakelog.spark.modes.numbered_tasks``)."""
        return self._shifted(add, shifts)

    def _shifted(self, add: AddFile, shifts: dict[str, int]) -> list[AddFile]:
        """``add``'s file written again with the identity values moved by ``shifts``."""
        file_schema = pa.schema([f for f in self.schema if f.name not in self.partition_by])
        physical = mapping.physical_schema(file_schema)
        with self.storage.open_input(add.path) as f:
            stored = pq.read_table(f, schema=physical)
        batch = mapping.to_logical(
            pa.RecordBatch.from_arrays(
                [stored.column(i).combine_chunks() for i in range(stored.num_columns)],
                schema=physical,
            ),
            file_schema,
        )
        arrays = list(batch.columns)
        for column, shift in shifts.items():
            i = file_schema.get_field_index(column)
            arrays[i] = pc.add_checked(arrays[i], pa.scalar(shift, arrays[i].type))
        writer = RollingWriter(
            self.storage,
            file_schema=file_schema,
            partition=add.partition,
            partition_by=self.partition_by,
            options=self.options,
            lease_id=self.lease_id,
        )
        try:
            writer.write(pa.RecordBatch.from_arrays(arrays, schema=file_schema))
            written = writer.close()
        except BaseException:
            self.storage.delete(writer.abort())
            raise
        self.files.add(written)
        self.storage.delete([add.path])
        return [msgspec.structs.replace(w, tags={**add.tags, **w.tags}) for w in written]
