"""The interface through which channel writers and sinks send messages.

Implemented by the producers (spillway.channels.kafka) and by the subtask's output collectors
(spillway.recovery.runtime.collector), which decide what the guarantee means; writers do not know
which.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from spillway.channels.ids import Offset, TopicPartition


class MessageOutput(Protocol):
    """Where encoded messages go."""

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
