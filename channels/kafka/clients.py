"""The plain confluent-kafka clients Spillway makes besides its typed wrappers.

Every Kafka client of the package is created in :mod:`spillway.channels.kafka`: the
subtask's transactional and idempotent producers and the assigned consumer are classes of
their own; the small producers of the job's control topics (events, read marks, global
checkpoint records) and the local broker's readiness probe are made here, from
:class:`~spillway.channels.config.KafkaSettings`, so security and client settings reach
every one of them the same way.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from spillway.channels.config import KafkaSettings


def ordered_producer(settings: KafkaSettings) -> Producer:
    """A producer whose messages arrive in the order produced and leave at once.

    Not idempotent: an idempotent producer asks for a producer id first, which delays its
    first message by up to 500 ms; one request in flight keeps the order instead. A message
    can arrive twice only if an answer was lost, so use it for records where a repeat only
    restates a fact (events, read marks)."""
    return Producer(
        {
            **settings.base(),
            "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 1,
            "linger.ms": 0,
        }
    )


def idempotent_producer(settings: KafkaSettings, *, linger_ms: int | None = None) -> Producer:
    """An idempotent producer (no duplicates from the broker's retries); ``linger_ms``
    overrides librdkafka's batching delay (``0``: send each message at once)."""
    config: dict[str, Any] = {**settings.base(), "enable.idempotence": True}
    if linger_ms is not None:
        config["linger.ms"] = linger_ms
    return Producer(config)


def admin_client(bootstrap: str) -> AdminClient:
    """An admin client of the broker at ``bootstrap``, without security settings (the local
    broker's readiness probe; jobs use :class:`~spillway.channels.kafka.admin.Admin`)."""
    return AdminClient({"bootstrap.servers": bootstrap})
