"""Data files written ahead of their commit, and the one rule for removing them.

Every writer writes its files first and commits them after. Until the commit lands
they belong to no version, so a write that gives up must remove them, but only when
the commit certainly did not land: deleting the files of a commit that landed would
break the table.

* An error raised by lakelog itself (a conflict, a refused argument, an expired
  lease) comes before or instead of the put: nothing landed (:func:`not_landed`).
* Any other error (a timeout, an interrupt) may come after a put that landed: the
  files stay. They carry the writer lease's id, so vacuum removes them once the lease
  is gone if no version took them.
* An error inside :meth:`Staged.before_commit` comes before any put by construction,
  whatever raised it.

:func:`staged` applies the rule; every write path (append, overwrite, the first write
that creates a table, row-level changes, the Spark writers) stages its files with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from ..errors import LakelogError
from ..log.actions import AddFile
from ..storage import Storage

__all__ = ["Staged", "not_landed", "staged"]

log = logging.getLogger(__name__)


def not_landed(error: BaseException) -> bool:
    """Whether a write that failed with ``error`` certainly committed nothing, so its
    new files can go: lakelog's own errors are raised before or instead of a commit's
    put; any other error may have hit after the put landed."""
    return isinstance(error, LakelogError)


class Staged:
    """The files one write staged (see :func:`staged`)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._paths: list[str] = []
        self._sources: list[Callable[[], Iterable[str]]] = []

    def add(self, adds: Iterable[AddFile]) -> list[AddFile]:
        """Stage the files of ``adds``; returns them, as a list."""
        out = list(adds)
        self._paths.extend(a.path for a in out)
        return out

    def add_paths(self, paths: Iterable[str]) -> None:
        """Stage files by root-relative path."""
        self._paths.extend(paths)

    def track(self, source: Callable[[], Iterable[str]]) -> None:
        """Stage the paths ``source`` returns when the files are removed: for files
        written while the commit runs (a rebase's rewrites)."""
        self._sources.append(source)

    @property
    def paths(self) -> list[str]:
        """Every staged path, once each, in the order staged."""
        found = list(self._paths)
        for source in self._sources:
            found.extend(source())
        return list(dict.fromkeys(found))

    @contextmanager
    def before_commit(self) -> Iterator[None]:
        """A block that runs before the commit starts: any error raised in it removes
        the staged files (nothing can have landed yet)."""
        try:
            yield
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        """Delete every staged file now and forget them (the write will not commit
        them: it failed before its commit, or its batch was committed already)."""
        paths = self.paths
        self._paths.clear()
        self._sources.clear()
        if not paths:
            return
        try:
            self.storage.delete(paths)
        except Exception as e:  # noqa: BLE001 - vacuum removes what this cannot
            log.warning("could not delete %d uncommitted data files: %r", len(paths), e)


@contextmanager
def staged(storage: Storage) -> Iterator[Staged]:
    """Stage the files a write adds (:meth:`Staged.add`) before committing them: when
    the block fails and the commit certainly did not land (:func:`not_landed`), the
    files are deleted before the error propagates; after any other error they stay
    (the commit may have landed) for vacuum.

    >>> from lakelog.errors import CommitConflictError
    >>> class Store:
    ...     def delete(self, paths): print("deleted", paths)
    >>> try:
    ...     with staged(Store()) as files:
    ...         files.add_paths(["part-0.parquet"])
    ...         raise CommitConflictError("lost the race")
    ... except CommitConflictError:
    ...     pass
    deleted ['part-0.parquet']
    """
    files = Staged(storage)
    try:
        yield files
    except BaseException as e:
        if not_landed(e):
            files.discard()
        raise
