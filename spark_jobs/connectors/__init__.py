"""Sources and sinks: generated records, files, Kafka topics, and exactly-once JSONL,
Parquet and Delta Lake sinks, each with checkpointable positions or commits.

May import :mod:`spillway.spark_jobs.operators`, :mod:`spillway.spark_jobs.records` and
the layers below.
"""
