"""``spillway ui``: a live status page of any job, read from Kafka only.

:mod:`spillway.recovery.observe.jobview` folds what is read (pure);
:mod:`spillway.spark_jobs.ui.feed` tails the
job's topics; :mod:`spillway.spark_jobs.ui.server` serves the page and its JSON on loopback;
:mod:`spillway.spark_jobs.ui.cli` is the command.
"""
