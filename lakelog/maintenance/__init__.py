"""Table maintenance: rewrites that keep a table fast, and cleanup that keeps it small.

Rewrites (compaction, clustering) share one pipeline, each step in its own module here:

1. the entry point resolves every option once (:mod:`.options`);
2. a pure planner turns a snapshot into a plan: a read version and
   :class:`~lakelog.maintenance.groups.FileGroup`\\ s (:mod:`.compaction.planner`,
   :mod:`.clustering.planner`); a plan is a msgspec Struct that round-trips to JSON;
3. the executor (:mod:`.executor`; on Spark, :mod:`lakelog.spark.jobs`) runs each
   group's rewrite (:mod:`.compaction.rewrite`, :mod:`.clustering.rewrite`, reading
   through :mod:`.sources`, paced by :mod:`.pacing`) and hands the results to
4. the commit (:mod:`.commit`), the only step that writes the log: ``data_change=false``
   on the plan's read version, rebased over appends, abandoning only the groups whose
   sources a concurrent commit removed;
5. the report (:mod:`.report`).

:mod:`.cleanup` (expiry, vacuum) deletes and never rewrites. No module here imports
:class:`~lakelog.table.Table` except for type checking: ``Table`` calls in, not back.
"""
