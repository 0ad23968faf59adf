"""Watching a job from what it wrote to Kafka: the event log, heartbeats, the phases of a
restart, ``status``, metrics and the model behind ``spillway ui``.

Reads only; it never changes a job. May import :mod:`spillway.recovery.job` and the
layers below (offsets, channels).
"""
