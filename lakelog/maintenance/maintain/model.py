"""The cost model of ``maintain``: a table's statistics in, ranked candidate actions out.

Pure: nothing here reads storage (:mod:`.stats` gathers a :class:`TableStats`,
:mod:`.run` runs what this module ranks). Every action is scored the same way::

    score = benefit / (rewrite_bytes + A)

``benefit`` is in bytes-equivalent, ``rewrite_bytes`` is what the action reads and
writes again, and ``A`` (:data:`ACTION_COST`, 1 MiB) is the fixed cost of running one
action (a plan, a commit). Opening a file costs a query ``O`` (:data:`OPEN_COST`,
4 MiB, Spark's ``spark.sql.files.openCostInBytes``) bytes-equivalent. Per action:

* ``compact`` (per partition; not on a table that declares a clustering, whose small
  files ``optimize`` merges in order): of the files below ``min_file_size`` (not
  written by clustering, not counted for ``purge``), the ``n`` smallest, ``R`` their
  bytes, ``T`` the target file size; ``benefit = O * (n - R / T)`` (files a full scan of
  the partition stops opening), ``rewrite_bytes = R``, and ``n`` (at least
  ``max(2, min_input_files)``) the one with the best score among the prefixes whose
  largest file is at most ``SIZE_RATIO`` (3) times the others together: the **snowball
  rule**. An earlier run's output joins a rewrite only once the new small files add up
  to a third of it, so each time a byte is rewritten its file has grown by a third or
  more since: a byte is rewritten ``O(log N)`` times over ``N`` batches, never once per
  round. Adding a small file no larger than the smallest, or no smaller than the
  largest, never lowers the score.

  **The query budget.** A full scan is expected to cost ``Q + O * files + bytes``
  (``Q``, :data:`QUERY_FIXED_COST`, what a query pays whatever the files: 16 opens);
  the same rows fully compacted, ``Q + O * c + bytes`` with ``c`` the partitions'
  files at the target size. While the files after the snowball-rule compactions exceed
  ``rho * c + (rho - 1) * (Q + bytes) / O`` (``rho``,
  ``lakelog.maintain.query_cost_ratio``, 1.3), the partitions where merging *all* small
  files saves a file for the fewest extra bytes are compacted fully instead, until the
  table is within the budget: the snowball rule bounds the bytes rewritten, the budget
  bounds what a query pays, and only the budget can make a byte be rewritten sooner.
* ``purge`` (per partition): the files whose deletion vector marks at least
  ``purge_ratio`` of their rows; ``benefit = sum(size * deleted / rows)`` (bytes of
  deleted rows every scan stops reading), ``rewrite_bytes = sum(size)``.
* ``cluster`` (the table, when it declares a clustering): ``f`` the clustering
  report's expected fraction of bytes read by a box query of selectivity ``s`` on
  every clustered column, ``ideal = min(1, s**k + 1 / m)`` with ``k`` columns and
  ``m = max(1, total / T)`` files after clustering; ``benefit = (f - ideal) * total
  + O * (small files merged)``, ``rewrite_bytes`` the bytes not yet clustered (all of
  them when none are). A candidate when ``f - ideal >= MIN_CLUSTER_GAIN`` or small
  files are waiting.
* ``manifests`` (the table): ``c`` commits since the newest manifest, a candidate
  when ``c >= lakelog.manifest_interval``; ``benefit = O * c`` (commit files a reader
  stops opening), ``rewrite_bytes = 0``.
* ``expire`` (the table): versions past retention (``lakelog.expire.*``);
  ``benefit = D + L * O`` with ``D`` the data bytes only they use and ``L`` the log
  files deleted; ``rewrite_bytes = 0``. A candidate when it frees data (``D > 0``)
  or at least ``lakelog.manifest_interval`` versions are due: an expiry is itself a
  commit, so expiring one version that frees nothing would only make another.
* ``vacuum`` (the table): unreferenced files older than ``lakelog.vacuum.*``;
  ``benefit`` their bytes; ``rewrite_bytes = 0``.

A ``compact`` or ``cluster`` is proposed only when its score is at least
:data:`MIN_SCORE` (0.05). For the others the table's own settings already say the work
is due (``purge_ratio``, ``manifest_interval``, the retention of ``expire`` and
``vacuum``), so any candidate is proposed; the score still ranks it.

:func:`rank` sorts candidates by score (highest first);
:func:`choose` takes them in that order while their ``rewrite_bytes`` fit the budget
and returns the others as left for a later round.

>>> files = tuple(FileStat(size=1000, rows=10) for _ in range(8))
>>> part = PartitionStats(partition=None, files=files)
>>> stats = TableStats(name="t", target_file_size=128 << 20, min_file_size=96 << 20,
...     min_input_files=2, purge_ratio=0.2, partitions=(part,))
>>> [c.kind for c in candidates(stats)]
['compact']
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..report import human_bytes

__all__ = [
    "ACTION_COST",
    "KINDS",
    "MIN_CLUSTER_GAIN",
    "MIN_SCORE",
    "OPEN_COST",
    "QUERY_FIXED_COST",
    "SIZE_RATIO",
    "Candidate",
    "ClusteringStats",
    "FileStat",
    "PartitionStats",
    "TableStats",
    "candidates",
    "choose",
    "compact_candidate",
    "query_file_budget",
    "rank",
]

Kind = Literal["compact", "cluster", "purge", "manifests", "expire", "vacuum"]
KINDS: tuple[str, ...] = ("compact", "cluster", "purge", "manifests", "expire", "vacuum")

OPEN_COST = 4 << 20
"""Bytes-equivalent a query pays to open one file (Spark's ``openCostInBytes``)."""
ACTION_COST = 1 << 20
"""Bytes-equivalent fixed cost of running one action (planning, one commit)."""
MIN_SCORE = 0.05
"""Lowest score at which a rewrite is worth its bytes."""
MIN_CLUSTER_GAIN = 0.05
"""Lowest drop in the expected fraction of bytes read that makes clustering a candidate."""
SIZE_RATIO = 3.0
"""The snowball rule: a compaction takes a larger file with smaller ones only while it is
at most this many times their bytes together."""
QUERY_FIXED_COST = 16 * OPEN_COST
"""Bytes-equivalent a query pays whatever the files (opening the table, planning): 16
file opens. ``benchmarks/bench_streaming_maintenance.py`` measured about 20 opens of a
small local file on a quiet machine and about 5 on a busy one (docs/benchmarks.md)."""


@dataclass(frozen=True)
class FileStat:
    """One live data file, as the model sees it."""

    size: int
    rows: int
    deleted: int = 0
    clustered: bool = False
    """Written by clustering (compaction leaves it to ``optimize``)."""
    path: str = ""


@dataclass(frozen=True)
class PartitionStats:
    partition: Mapping[str, str | None] | None
    """The partition's values; None for an unpartitioned table."""
    files: tuple[FileStat, ...]


@dataclass(frozen=True)
class ClusteringStats:
    """The declared clustering and how well the files follow it."""

    columns: tuple[str, ...]
    box_fraction: float
    """Expected fraction of bytes read by a box query of ``selectivity`` per column."""
    selectivity: float
    total_bytes: int
    clustered_bytes: int
    """Bytes of files written by clustering."""


@dataclass(frozen=True)
class TableStats:
    """What ``maintain`` knows of one table (:func:`.stats.table_stats` gathers it)."""

    name: str
    target_file_size: int
    min_file_size: int
    min_input_files: int
    purge_ratio: float
    partitions: tuple[PartitionStats, ...] = ()
    clustering: ClusteringStats | None = None
    commits_since_manifest: int = 0
    manifest_interval: int = 10
    expirable_versions: int = 0
    expirable_bytes: int = 0
    expirable_log_files: int = 0
    vacuum_files: int = 0
    vacuum_bytes: int = 0
    query_cost_ratio: float = 1.3
    """``lakelog.maintain.query_cost_ratio``: a full scan's expected cost allowed over
    the same rows fully compacted before compaction ignores the snowball rule."""


@dataclass(frozen=True)
class Candidate:
    """One action the model proposes, with the figures behind it."""

    kind: Kind
    table: str
    partition: Mapping[str, str | None] | None
    score: float
    rewrite_bytes: int
    benefit: float
    """Bytes-equivalent (see the module doc)."""
    reason: str
    figures: Mapping[str, Any] = field(default_factory=dict)
    paths: tuple[str, ...] = ()
    """The files a ``compact`` rewrites (not in :meth:`to_dict`)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "table": self.table,
            "partition": None if self.partition is None else dict(self.partition),
            "score": round(self.score, 6),
            "rewrite_bytes": self.rewrite_bytes,
            "benefit": round(self.benefit, 1),
            "reason": self.reason,
            "figures": dict(self.figures),
        }


def _score(benefit: float, rewrite: int) -> float:
    return benefit / (rewrite + ACTION_COST)


def _heavy(f: FileStat, ratio: float) -> bool:
    return f.deleted > 0 and f.rows > 0 and f.deleted >= f.rows * ratio


def _small(stats: TableStats, part: PartitionStats) -> list[FileStat]:
    """The partition's compaction candidates, smallest first."""
    return sorted(
        (
            f
            for f in part.files
            if f.size < stats.min_file_size and not f.clustered and not _heavy(f, stats.purge_ratio)
        ),
        key=lambda f: (f.size, f.path),
    )


def compact_candidate(
    stats: TableStats, part: PartitionStats, *, full: bool = False
) -> Candidate | None:
    """The partition's compaction: the ``n`` smallest small files with the best score,
    where a prefix longer than ``min_input_files`` is eligible only if its largest file
    is at most :data:`SIZE_RATIO` times the others together (the snowball rule);
    ``full``: all of them, whatever their sizes (the query budget asks for it)."""
    small = _small(stats, part)
    need = max(2, stats.min_input_files)
    best: tuple[float, int, int] | None = None  # score, files, bytes
    rewrite = 0
    for k, f in enumerate(small, 1):
        before, rewrite = rewrite, rewrite + f.size
        if k < need or rewrite <= 0:
            continue
        if full and k < len(small):
            continue
        if not full and k > need and f.size > SIZE_RATIO * before:
            continue
        score = _score(OPEN_COST * (k - rewrite / stats.target_file_size), rewrite)
        if best is None or score > best[0]:
            best = (score, k, rewrite)
    if best is None or (best[0] < MIN_SCORE and not full):
        return None
    score, n, rewrite = best
    saved = n - rewrite / stats.target_file_size
    why = (
        f"; the table's files over the query budget ({stats.query_cost_ratio:g}x a fully "
        "compacted table's query cost)"
        if full
        else ""
    )
    return Candidate(
        kind="compact",
        table=stats.name,
        partition=part.partition,
        score=score,
        rewrite_bytes=rewrite,
        benefit=OPEN_COST * saved,
        reason=f"{n} files below {human_bytes(stats.min_file_size)} ({human_bytes(rewrite)}): "
        f"a scan opens {saved:.1f} fewer files{why}",
        figures={"small_files": n, "files_saved": round(saved, 3), "full": full},
        paths=tuple(f.path for f in small[:n]),
    )


def _files_after(stats: TableStats, part: PartitionStats, c: Candidate | None) -> int:
    """The partition's live files after ``c`` (its outputs at the target size)."""
    if c is None:
        return len(part.files)
    n = len(c.paths)
    return len(part.files) - n + max(1, math.ceil(c.rewrite_bytes / stats.target_file_size))


def query_file_budget(stats: TableStats) -> float:
    """The most live files at which a full scan's expected cost stays within
    ``query_cost_ratio`` of the same rows fully compacted (see the module doc)."""
    total = sum(f.size for p in stats.partitions for f in p.files)
    compacted = sum(
        max(1, math.ceil(sum(f.size for f in p.files) / stats.target_file_size))
        for p in stats.partitions
        if p.files
    )
    rho = stats.query_cost_ratio
    return rho * compacted + (rho - 1) * (QUERY_FIXED_COST + total) / OPEN_COST


def _compact_candidates(stats: TableStats) -> list[Candidate]:
    """Each partition's compaction by the snowball rule; then, while the table's files
    after them exceed :func:`query_file_budget`, full compactions of the partitions
    where one saves a file for the fewest bytes."""
    chosen: dict[int, Candidate | None] = {
        i: compact_candidate(stats, part) for i, part in enumerate(stats.partitions)
    }
    after = sum(_files_after(stats, p, chosen[i]) for i, p in enumerate(stats.partitions))
    budget = query_file_budget(stats)
    if after > budget:
        fuller: list[tuple[float, int, Candidate]] = []
        for i, part in enumerate(stats.partitions):
            c = compact_candidate(stats, part, full=True)
            if c is None:
                continue
            gained = _files_after(stats, part, chosen[i]) - _files_after(stats, part, c)
            if gained > 0:
                was = chosen[i]
                extra = c.rewrite_bytes - (0 if was is None else was.rewrite_bytes)
                fuller.append((extra / gained, i, c))
        for _, i, c in sorted(fuller, key=lambda x: (x[0], x[1])):
            if after <= budget:
                break
            part = stats.partitions[i]
            after -= _files_after(stats, part, chosen[i]) - _files_after(stats, part, c)
            chosen[i] = c
    return [c for c in chosen.values() if c is not None]


def purge_candidate(stats: TableStats, part: PartitionStats) -> Candidate | None:
    heavy = [f for f in part.files if _heavy(f, stats.purge_ratio)]
    if not heavy:
        return None
    rewrite = sum(f.size for f in heavy)
    benefit = sum(f.size * f.deleted / f.rows for f in heavy)
    score = _score(benefit, rewrite)
    deleted = sum(f.deleted for f in heavy)
    return Candidate(
        kind="purge",
        table=stats.name,
        partition=part.partition,
        score=score,
        rewrite_bytes=rewrite,
        benefit=benefit,
        reason=f"{len(heavy)} files with at least {stats.purge_ratio:g} of their rows "
        f"deleted ({deleted} rows): scans stop reading {human_bytes(benefit)}",
        figures={"files": len(heavy), "deleted_rows": deleted},
    )


def cluster_candidate(stats: TableStats) -> Candidate | None:
    c = stats.clustering
    if c is None or c.total_bytes <= 0:
        return None
    k = len(c.columns)
    after = max(1.0, c.total_bytes / stats.target_file_size)
    ideal = min(1.0, c.selectivity**k + 1.0 / after)
    gain = max(0.0, c.box_fraction - ideal)
    small = sum(
        1
        for p in stats.partitions
        for f in p.files
        if f.size < stats.min_file_size and not f.clustered
    )
    merged = max(0, small - 1)
    if gain < MIN_CLUSTER_GAIN and merged == 0:
        return None
    rewrite = c.total_bytes - c.clustered_bytes if c.clustered_bytes else c.total_bytes
    if rewrite <= 0:
        return None
    benefit = gain * c.total_bytes + OPEN_COST * merged
    score = _score(benefit, rewrite)
    if score < MIN_SCORE:
        return None
    return Candidate(
        kind="cluster",
        table=stats.name,
        partition=None,
        score=score,
        rewrite_bytes=rewrite,
        benefit=benefit,
        reason=f"a query of selectivity {c.selectivity:g} on {', '.join(c.columns)} reads "
        f"{c.box_fraction:.3f} of the bytes; clustered about {ideal:.3f}",
        figures={
            "box_fraction": round(c.box_fraction, 6),
            "ideal_fraction": round(ideal, 6),
            "unclustered_small_files": small,
        },
    )


def table_candidates(stats: TableStats) -> list[Candidate]:
    """The table-wide candidates: manifests, expire, vacuum."""
    out: list[Candidate] = []
    c = stats.commits_since_manifest
    if c >= stats.manifest_interval:
        out.append(
            Candidate(
                kind="manifests",
                table=stats.name,
                partition=None,
                score=_score(OPEN_COST * c, 0),
                rewrite_bytes=0,
                benefit=OPEN_COST * c,
                reason=f"{c} commits since the newest manifest: a reader opens each",
                figures={"commits_since_manifest": c},
            )
        )
    if stats.expirable_versions > 0 and (
        stats.expirable_bytes > 0 or stats.expirable_versions >= stats.manifest_interval
    ):
        benefit = stats.expirable_bytes + OPEN_COST * stats.expirable_log_files
        out.append(
            Candidate(
                kind="expire",
                table=stats.name,
                partition=None,
                score=_score(benefit, 0),
                rewrite_bytes=0,
                benefit=benefit,
                reason=f"{stats.expirable_versions} versions past retention; frees "
                f"{human_bytes(stats.expirable_bytes)} of data and "
                f"{stats.expirable_log_files} log files",
                figures={
                    "versions": stats.expirable_versions,
                    "data_bytes": stats.expirable_bytes,
                    "log_files": stats.expirable_log_files,
                },
            )
        )
    if stats.vacuum_files > 0:
        out.append(
            Candidate(
                kind="vacuum",
                table=stats.name,
                partition=None,
                score=_score(stats.vacuum_bytes, 0),
                rewrite_bytes=0,
                benefit=float(stats.vacuum_bytes),
                reason=f"{stats.vacuum_files} unreferenced files past retention "
                f"({human_bytes(stats.vacuum_bytes)})",
                figures={"files": stats.vacuum_files, "bytes": stats.vacuum_bytes},
            )
        )
    return out


def candidates(stats: TableStats) -> list[Candidate]:
    """Every action the model proposes for one table, ranked."""
    out: list[Candidate] = []
    if stats.clustering is None:
        out.extend(_compact_candidates(stats))
    for part in stats.partitions:
        p = purge_candidate(stats, part)
        if p is not None:
            out.append(p)
    cl = cluster_candidate(stats)
    if cl is not None:
        out.append(cl)
    out.extend(table_candidates(stats))
    return rank(out)


def rank(found: Iterable[Candidate]) -> list[Candidate]:
    """Highest score first; ties by kind's order, then table and partition (stable)."""
    return sorted(
        found,
        key=lambda c: (
            -c.score,
            KINDS.index(c.kind),
            c.table,
            sorted((c.partition or {}).items(), key=lambda kv: (kv[0], kv[1] or "")),
        ),
    )


def choose(
    ranked: Sequence[Candidate], budget_bytes: int | None
) -> tuple[list[Candidate], list[Candidate]]:
    """The candidates to run (in rank order, while their rewrite fits the budget) and
    those left for a later round. ``budget_bytes`` None: no bound."""
    chosen: list[Candidate] = []
    left: list[Candidate] = []
    remaining = math.inf if budget_bytes is None else budget_bytes
    for c in ranked:
        if c.rewrite_bytes <= remaining:
            chosen.append(c)
            remaining -= c.rewrite_bytes
        else:
            left.append(c)
    return chosen, left
