"""Sinks whose messages have a size limit: what they tell the subtask, and what they refuse.

A sink writing to a Kafka topic (``write_kafka``) learns the topic's message limit
(:class:`spillway.channels.kafka.limits.MessageLimit`) before the subtask's output
producer starts, so that producer's batches stay within it (:class:`LimitedSink`), and
checks every record's message against it before producing any: a record over the limit
is refused with :class:`SinkRefusal` before anything of the write was produced, so the
transaction stays usable. :class:`spillway.recovery.runtime.outputs.Outputs` then
dead-letters the refused records (stage ``sink``) or stops the job naming the first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import RecordTooLargeError


@runtime_checkable
class LimitedSink(Protocol):
    """A sink that writes messages of bounded size to Kafka."""

    def read_limit(self, settings: KafkaSettings, producer_bytes: int) -> int:
        """Read the limit of the sink's messages (I/O; once, before the output producer
        starts), given the producer's ``message.max.bytes``; the ``batch.size`` that
        producer must keep to."""
        ...


class SinkRefusal(RecordTooLargeError):
    """A sink's ``write`` refused records too large for its topic; it produced nothing.

    ``refused``: ``(position in the write, reason)`` of each, in order; the reason says
    the message's size, the limit and the setting to raise.
    """

    def __init__(self, message: str, refused: Iterable[tuple[int, str]]) -> None:
        super().__init__(message)
        self.refused = tuple(refused)
