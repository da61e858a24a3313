"""Clustering: order rows by a space-filling curve (or a linear sort) and cut them into files.

* :mod:`.spec`: the clustering spec (columns, curve, boundaries, tiling), as stored in
  files' footers and tags;
* :mod:`.curves`, :mod:`.tiling`: keys of rows (rank-normalized curves, tiles);
* :mod:`.sampling`: choosing a run's spec (reused, or from a sample of the rows);
* :mod:`.planner`: the incremental planner (snapshot and spec in, :class:`ClusterPlan` out);
* :mod:`.sort`: bounded-memory ordering by key and writing the ordered rows;
* :mod:`.rewrite`: one group's rewrite (any worker: a thread, a Spark task);
* :mod:`.run`: the entry point: options resolved once, spec, plan, the shared
  executor (:mod:`lakelog.maintenance.executor`), the commit, the report;
* :mod:`.layout`: how well a layout skips data, from file stats alone.
"""
