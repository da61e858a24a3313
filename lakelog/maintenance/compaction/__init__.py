"""Compaction: bin-pack small files per partition, rewrite each group into files of the target size.

* :mod:`.planner`: the pure planner (snapshot in, :class:`CompactionPlan` out);
* :mod:`.rewrite`: one group's rewrite (any worker: a thread, a Spark task);
* :mod:`.run`: the entry point: options resolved once, plan, the shared executor
  (:mod:`lakelog.maintenance.executor`), the commit, the report.
"""
