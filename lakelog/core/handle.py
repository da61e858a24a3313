"""Handing out a :class:`~lakelog.Table` from below the facade.

Entry points under ``Table`` that open a table from a URI or return one to the user
(``lakelog.convert``, the Delta view's functions, ``lakelog.spark``) need the class
without importing :mod:`lakelog.table`, which imports them. The facade registers its
class here when it is defined (:func:`use_table_class`); importing any part of
``lakelog`` imports the facade first, so it is registered before any of them runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..log.snapshot import Snapshot, load_snapshot
from ..storage import Storage

if TYPE_CHECKING:
    from ..table import Table

__all__ = ["load_table", "table_of", "use_table_class"]

_table_class: list[Callable[[Storage, Snapshot], Table]] = []


def use_table_class(cls: Callable[[Storage, Snapshot], Table]) -> None:
    """Register the facade's class (called once, by :mod:`lakelog.table`)."""
    _table_class[:] = [cls]


def table_of(storage: Storage, snapshot: Snapshot) -> Table:
    """The ``Table`` at ``storage`` with ``snapshot`` cached."""
    if not _table_class:  # only reachable while lakelog/__init__ itself runs
        raise RuntimeError("lakelog.table is not imported yet; import lakelog first")
    return _table_class[0](storage, snapshot)


def load_table(storage: Storage) -> Table:
    """The ``Table`` at ``storage``, at its latest version
    (:class:`~lakelog.errors.TableNotFoundError` if there is none)."""
    return table_of(storage, load_snapshot(storage))
