"""Records at the edges of user code: schemas from Python types, typed records in and
out, parsing a JSONL or CSV line, Kafka keys and tombstones, and the watermark strategies
of sources.

May import :mod:`spillway.recovery` and the layers below; nothing else of
:mod:`spillway.spark_jobs`.
"""
