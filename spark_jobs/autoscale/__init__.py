"""``spillway autoscale``: set each operator's parallelism from what it measures, live.

:mod:`spillway.recovery.control.autorates` measures (pure);
:mod:`spillway.recovery.control.autopolicy` decides (pure);
:mod:`spillway.spark_jobs.autoscale.loop` reads the job and applies decisions by live
rescale; :mod:`spillway.spark_jobs.autoscale.cli` is the command.
"""
