"""``maintain``: a cost model decides what each table needs (:mod:`.model`, pure), from
what the table already records (:mod:`.stats`), and :mod:`.run` runs the best actions
within a byte budget through the existing operations."""

from .model import Candidate, TableStats, candidates
from .report import ActionResult, MaintainReport
from .run import (
    DEFAULT_BUDGET_BYTES,
    maintain_catalog,
    maintain_table,
    maintain_tables,
)

__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "ActionResult",
    "Candidate",
    "MaintainReport",
    "TableStats",
    "candidates",
    "maintain_catalog",
    "maintain_table",
    "maintain_tables",
]
