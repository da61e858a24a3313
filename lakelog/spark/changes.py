"""Row-level changes from Spark (:mod:`lakelog.spark.rowlevel`), under the name they had
first: ``merge``, ``delete`` and ``update``."""

from __future__ import annotations

from .rowlevel import delete, merge, update

__all__ = ["delete", "merge", "update"]
