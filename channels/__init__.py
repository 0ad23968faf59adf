"""Persistent channels: Kafka topics that carry batched records between subtasks.

The lowest layer. Its root holds what every layer shares: the error tree
(:mod:`~spillway.channels.errors`), typed ids (:mod:`~spillway.channels.ids`), validated
configuration, topic naming and ACLs, and the reader and writer of a subtask's channels.
Its rooms: :mod:`~spillway.channels.kafka` (every Kafka client is made there),
:mod:`~spillway.channels.wire` (message formats) and :mod:`~spillway.channels.routing`
(partitioners and key groups). It imports nothing else of Spillway.
"""
