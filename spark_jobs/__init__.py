"""Pipelines on Spark: the pipeline API users write and the driver that runs it.

Rooms, from the bottom: :mod:`~spillway.spark_jobs.records` (typed records, schemas,
watermark strategies), :mod:`~spillway.spark_jobs.operators`,
:mod:`~spillway.spark_jobs.connectors` (sources and sinks),
:mod:`~spillway.spark_jobs.api` (``Pipeline``, ``Stream``), and beside the API
:mod:`~spillway.spark_jobs.spark` (the driver, the only room that imports pyspark) and
:mod:`~spillway.spark_jobs.ui`. At the root: ``spillway run``'s arguments
(:mod:`~spillway.spark_jobs.cli`) and ``run.py`` for ``spark-submit``. May import
:mod:`spillway.recovery` and the layers below; never the ``spillway`` front door.
"""
