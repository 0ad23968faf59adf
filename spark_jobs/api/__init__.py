"""The pipeline API users write: ``Pipeline``, ``Stream``, ``KeyedStream`` and connected
streams, and the operator graph they build, validated before anything runs.

May import the connectors, operators and records of :mod:`spillway.spark_jobs` and the
layers below; never the Spark driver.
"""
