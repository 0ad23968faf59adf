"""The logic behind the pipeline API's operators: stateless transforms, keyed aggregates,
the keyed process function and its timers, event-time windows, joins, and the batch
operators of the columnar path.

May import :mod:`spillway.spark_jobs.records` and the layers below.
"""
