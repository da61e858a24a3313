"""Reading rows of a snapshot: tables, batches, scanners, datasets, deletion vectors
applied, and the DuckDB/polars/pandas adapters. Above the log: ``lakelog.log`` resolves
versions and never imports this package."""

from .snapshot import Snapshot, readable

__all__ = ["Snapshot", "readable"]
