"""Row-level changes from Spark: merge a DataFrame, delete and update, on the executors.

Modules, by step: :mod:`.source` (the merge source on the driver), :mod:`.values` (its
conditions and values), :mod:`.routing` (source rows to candidate files), :mod:`.tasks`
(the rewrites and inserts in Spark tasks), :mod:`.commit` (the driver's jobs and commit),
:mod:`.predicate` (delete and update), :mod:`.jobs` (what they share), :mod:`.merge`.

:func:`merge`, :func:`delete` and :func:`update` mean what :meth:`lakelog.Table.merge`,
:meth:`~lakelog.Table.delete` and :meth:`~lakelog.Table.update` mean
(``docs/row-level-changes.md``),
and run the embedded change code (:mod:`lakelog.rowlevel`) file by file inside Spark tasks:

1. **Plan on the driver.** The latest snapshot; for a merge, ONE aggregate over the
   source (row count, duplicates, min/max of each key column, the distinct values of key
   columns that partition the table) prunes the target files. The driver never holds
   source or target rows.
2. **Route (merge).** A Spark job sends every source row (its key non-null) to each
   candidate file whose partition values and min/max statistics hold its key, so a file
   no source key can be in is never read; files are spread over a few tasks by size.
3. **Rewrite in tasks.** Each task reads its files with lakelog's deletion-vector-aware
   row reader, matches them with the source rows routed to them (:class:`MergeChange`,
   :class:`DeleteChange`, :class:`UpdateChange`, the embedded classes) and rewrites only
   the files with a row to change, or, with ``lakelog.deletion_vectors=true``, marks the
   changed rows in vectors and writes updated rows to new files (:mod:`.execute`'s
   ``process_file``), under the run's writer lease. Only file actions and row counts go
   back to the driver; a merge's tasks stage the keys they matched as Parquet.
4. **Insert (merge).** The source rows whose key matched nothing (an anti-join with the
   staged keys) are written by Spark tasks with lakelog's file writer.
5. **Commit on the driver.** One ``rowlevel`` commit through
   :func:`lakelog.rowlevel.run.commit_outcomes`, the embedded path, with the embedded
   :class:`~lakelog.rowlevel.conflicts.RowLevelRebase`: the conflict rules are the same.
   For a merge, whether a concurrently added file holds a source key is answered by a
   Spark job (the source lives on the executors), not by reading the source on the driver.

A failed job or a refused commit commits nothing and deletes the files it knows of; a
task killed mid-write leaves files under the expired lease for ``vacuum``.
"""

from __future__ import annotations

from .merge import merge
from .predicate import delete, update

__all__ = ["delete", "merge", "update"]
