"""The output collector: the one way a subtask's channel and sink outputs leave it.

Like Kafka Streams' ``RecordCollector``: channel writers and sinks hand messages to a
collector; what the guarantee means is decided here and nowhere else.

* :class:`ExactlyOnceCollector`: outputs join the checkpoint's transaction (the subtask's
  transactional producer), so they become visible exactly when the checkpoint commits.
* :class:`AtLeastOnceCollector`: outputs go out through a producer of their own, without a
  transaction, visible when the broker has them; before a checkpoint commits they are
  flushed, so a restart re-sends (duplicates) what followed it and loses nothing.

State changes and checkpoint records stay transactional under both.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import Offset, SubtaskId, TopicPartition
from spillway.channels.kafka.idempotent import IdempotentProducer
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.channels.modes import Guarantee


class OutputCollector(Protocol):
    """Where channel writers and sinks send messages (spillway.channels.output.MessageOutput), plus
    what the subtask asks of its outputs around a checkpoint."""

    def start(self) -> None:
        """Be ready to send (after the subtask's producer fenced its predecessor)."""

    def produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        *,
        track: bool = True,
        origin: str | None = None,
    ) -> None:
        """Send one message to a partition."""

    def produce_many(self, topic: str, messages: Iterable[tuple[bytes | None, bytes]]) -> None:
        """Send ``(key, value)`` messages, placed by key."""

    def last_offset(self, tp: TopicPartition) -> Offset | None:
        """The highest offset acknowledged for ``tp`` (after a flush)."""
        ...

    @property
    def message_max_bytes(self) -> int:
        """The largest message the producer sending the outputs sends."""
        ...

    def cap_batch_size(self, size: int) -> None:
        """Keep the outputs' record batches within ``size`` bytes (before :meth:`start`)."""

    def flush(self) -> None:
        """Wait until everything sent is acknowledged."""

    def prepare_commit(self, has_writers: bool) -> None:
        """Before a checkpoint is built: make what it must account for acknowledged."""

    def close(self) -> None:
        """Release what the collector itself holds."""


class ExactlyOnceCollector:
    """Outputs in the checkpoint's transaction, through the subtask's own producer."""

    def __init__(self, producer: TransactionalProducer) -> None:
        self._producer = producer
        self.produce = producer.produce
        self.produce_many = producer.produce_many
        self.last_offset = producer.last_offset

    def start(self) -> None:
        """The subtask's producer is already started (it fenced the predecessor)."""

    @property
    def message_max_bytes(self) -> int:
        """The subtask's producer's ``message.max.bytes``."""
        return self._producer.message_max_bytes

    def cap_batch_size(self, size: int) -> None:
        """Caps the subtask's producer (which must not have started yet)."""
        self._producer.cap_batch_size(size)

    def flush(self) -> None:
        """Put everything sent so far on the broker (still uncommitted)."""
        self._producer.flush()

    def prepare_commit(self, has_writers: bool) -> None:
        """Channel writers need their acknowledged offsets (the output high-water marks a
        rewind uses); a sink's messages are committed with the transaction anyway."""
        if has_writers:
            self._producer.flush()

    def close(self) -> None:
        """The subtask closes its producer (after the checkpoint store it also serves)."""


class AtLeastOnceCollector:
    """Outputs visible as soon as delivered, through a non-transactional producer."""

    def __init__(self, settings: KafkaSettings, subtask: SubtaskId) -> None:
        self._producer = IdempotentProducer(settings, f"{subtask.transactional_id}.out")
        self.produce = self._producer.produce
        self.produce_many = self._producer.produce_many
        self.last_offset = self._producer.last_offset

    def start(self) -> None:
        """Create the producer (no fencing: it has no transactional id)."""
        self._producer.start()

    @property
    def message_max_bytes(self) -> int:
        """The output producer's ``message.max.bytes``."""
        return self._producer.message_max_bytes

    def cap_batch_size(self, size: int) -> None:
        """Caps the output producer (before :meth:`start`)."""
        self._producer.cap_batch_size(size)

    def flush(self) -> None:
        """Wait until everything sent is acknowledged (raise if any delivery failed)."""
        self._producer.flush()

    def prepare_commit(self, has_writers: bool) -> None:
        """Outputs are durable before the checkpoint says they were written."""
        self._producer.flush()

    def close(self) -> None:
        """Flush what is left and drop the producer."""
        self._producer.close()


def make_collector(
    guarantee: Guarantee,
    producer: TransactionalProducer,
    settings: KafkaSettings,
    subtask: SubtaskId,
) -> OutputCollector:
    """The collector of ``guarantee`` ("exactly-once" or "at-least-once")."""
    if guarantee == "at-least-once":
        return AtLeastOnceCollector(settings, subtask)
    return ExactlyOnceCollector(producer)
