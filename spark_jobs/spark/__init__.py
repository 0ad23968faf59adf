"""Running a job on Spark: the driver that submits every subtask as one long-running Spark
task, what it prepares before a run, task attempts and fail-fast, operator jobs, live
rescale in the driver, shipping the pipeline's code, PySpark's worker daemon, and the
driver's metrics endpoint and progress line.

The only room that imports pyspark. May import :mod:`spillway.recovery` and the layers
below; never the pipeline API.
"""
