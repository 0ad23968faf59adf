"""How big a message to one topic may be, checked before it is produced.

Two settings bound a message: the topic's ``max.message.bytes`` (the broker refuses a
larger record batch) and the producer's ``message.max.bytes`` (librdkafka refuses a
larger message before sending it). A refusal by the broker arrives inside the open
transaction and spoils it, so a sink checks each message against the smaller of the two
(:class:`MessageLimit`) before producing it, and its producer keeps batches below the
topic's limit (:attr:`MessageLimit.batch_size`): a batch of small messages is never
refused as a whole.

Sizes are counted as librdkafka counts them (``rd_kafka_msg_max_wire_size``): the record
batch's framing, the most one record's framing takes, key, value and headers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import SpillwayError
from spillway.channels.kafka.admin import Admin

log = logging.getLogger("spillway.producer")

RECORD_BATCH_OVERHEAD = 61  # a v2 record batch's header (RD_KAFKAP_MESSAGESET_V2_HDR_SIZE)
RECORD_OVERHEAD = 36  # the most one record's varints and attributes take in a v2 batch
HEADER_OVERHEAD = 10  # the two varint lengths of one header, at most
# librdkafka's default message.max.bytes, and the broker's default max.message.bytes.
PRODUCER_DEFAULT_BYTES = 1_000_000


def message_size(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]] = ()
) -> int:
    """The most bytes a message of ``key``, ``value`` and ``headers`` takes alone in a
    record batch (what both the broker's and the producer's limit are checked against)."""
    size = RECORD_BATCH_OVERHEAD + RECORD_OVERHEAD + len(key or b"") + len(value or b"")
    return size + sum(HEADER_OVERHEAD + len(name.encode()) + len(v) for name, v in headers)


def producer_bytes(config: dict[str, Any]) -> int:
    """The ``message.max.bytes`` a producer made with ``config`` enforces."""
    return int(config.get("message.max.bytes", PRODUCER_DEFAULT_BYTES))


@dataclass(frozen=True)
class MessageLimit:
    """The largest message ``topic`` takes from a producer.

    ``topic_bytes``: the topic's ``max.message.bytes`` (``None``: it could not be read;
    the producer's limit alone then applies); ``producer_bytes``: the producer's
    ``message.max.bytes``.
    """

    topic: str
    topic_bytes: int | None
    producer_bytes: int

    @property
    def bytes(self) -> int:
        """The effective limit: the smaller of the two."""
        if self.topic_bytes is None:
            return self.producer_bytes
        return min(self.topic_bytes, self.producer_bytes)

    @property
    def setting(self) -> str:
        """The setting that sets :attr:`bytes`, with its value: the one to raise."""
        if self.topic_bytes is not None and self.topic_bytes <= self.producer_bytes:
            return f"topic {self.topic}'s max.message.bytes (now {self.topic_bytes})"
        return (
            f"the producer's message.max.bytes (now {self.producer_bytes}; a client "
            "setting, --kafka-config message.max.bytes=N)"
        )

    @property
    def batch_size(self) -> int:
        """The ``batch.size`` that keeps a record batch of many messages within the limit."""
        return max(1, self.bytes - RECORD_BATCH_OVERHEAD)

    @property
    def payload_bytes(self) -> int:
        """The most key and value bytes together a message without headers may carry."""
        return self.bytes - RECORD_BATCH_OVERHEAD - RECORD_OVERHEAD

    def fits(self, size: int) -> bool:
        """True if a message of ``size`` bytes (:func:`message_size`) is within the limit."""
        return size <= self.bytes

    def refusal(self, size: int) -> str:
        """What is wrong with a message of ``size`` bytes, and which setting to raise."""
        return (
            f"its message to topic {self.topic} is {size} bytes, over the limit of "
            f"{self.bytes} bytes set by {self.setting}; raise that (and the broker's "
            "message.max.bytes if it is lower), or make the record smaller"
        )


def read_message_limit(settings: KafkaSettings, topic: str, producer_limit: int) -> MessageLimit:
    """``topic``'s :class:`MessageLimit` for a producer enforcing ``producer_limit``.

    Reads the topic's ``max.message.bytes`` with the admin client (retrying retriable
    errors a bounded number of times); if it cannot be read, the producer's limit alone
    applies and a log line says so.
    """
    try:
        value = Admin(settings).topic_config(topic).get("max.message.bytes")
        topic_bytes = None if value is None else int(value)
    except (KafkaException, SpillwayError, ValueError) as e:
        log.warning(
            "cannot read max.message.bytes of topic %s (%s); checking its messages against "
            "the producer's message.max.bytes (%d) alone",
            topic,
            e,
            producer_limit,
        )
        topic_bytes = None
    return MessageLimit(topic, topic_bytes, producer_limit)
