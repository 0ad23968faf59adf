"""A producer without transactions, for the at-least-once guarantee's outputs.

Every message is visible as soon as the broker has it. Idempotence still keeps
broker-side retries from writing a message twice; what repeats under at-least-once is
what a restarted subtask re-sends after its last checkpoint (spillway.recovery.runtime.collector).
"""

from __future__ import annotations

from spillway.channels.config import KafkaSettings
from spillway.channels.kafka.producerbase import ProducerBase


class IdempotentProducer(ProducerBase):
    """An idempotent producer with client id ``client_id``; :meth:`start` creates it."""

    def __init__(self, settings: KafkaSettings, client_id: str) -> None:
        super().__init__(
            {
                **settings.base(),
                "enable.idempotence": True,
                "linger.ms": 5,
                "client.id": client_id,
            },
            client_id,
        )
