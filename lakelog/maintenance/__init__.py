"""Table maintenance: rewrites that keep a table fast, and cleanup that keeps it small.

Rewrites (compaction, clustering) share one pipeline, each step in its own module here:

1. the entry point (``Table``, Spark, the CLI) takes the public options objects
   (:mod:`.options`: ``CompactionOptions``, ``ClusteringOptions``, ``ExecutionOptions``)
   and resolves them once against the table, in one ``prepare_*`` per operation
   (:func:`.compaction.run.prepare_compaction`, :func:`.clustering.run.prepare_clustering`;
   a saved plan: :func:`.pipeline.prepare_plan`); from there one flow
   (:func:`.pipeline.run_prepared`) reports a dry run or runs steps 3 to 5 with the
   executor plugged in;
2. a pure planner turns a snapshot into a plan: a read version and
   :class:`~lakelog.maintenance.groups.FileGroup`\\ s (:mod:`.compaction.planner`,
   :mod:`.clustering.planner`), leaving out files another run claimed
   (:func:`.claims.claimed_files`); a plan is a msgspec Struct that round-trips to JSON;
3. the run claims its groups' files on the log (:mod:`.claims`; :mod:`.resume` finishes
   a plan whose run stopped), then the executor (:mod:`.executor`; on Spark,
   :mod:`lakelog.spark.jobs`) runs each group's rewrite (:mod:`.compaction.rewrite`,
   :mod:`.clustering.rewrite`, reading through :mod:`.sources`, paced by :mod:`.pacing`)
   and hands the results to
4. the commit (:mod:`.commit`): ``data_change=false`` on the claim's version (the plan's
   without claims), releasing the groups it lands, rebased over appends, abandoning
   only the groups whose sources a concurrent commit removed;
5. the report (:mod:`.report`).

:mod:`.cleanup` (expiry, vacuum) deletes and never rewrites. Every function here takes
the table core (:class:`~lakelog.core.TableHandle`), never the ``Table`` facade, which
calls in and is never called back.
"""
