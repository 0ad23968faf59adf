"""Rebuilding a subtask from what is durable: the restorer, keyed state and its changelog,
partition ownership, restoring under a new parallelism, the "handed over" mark of a live
rescale, and the progress record that tells a new attempt what it re-reads.

May import :mod:`spillway.recovery.job` and the layers below (offsets, channels).
"""
