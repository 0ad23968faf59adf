"""Identifiers with their own types.

A subtask is ``(operator, index)`` with a stable index in ``0..p-1``; it always reads the
same partitions, owns the same state and uses the same transactional id. Offsets are
plain non-negative ints wrapped in :class:`Offset`; "no offset" is ``None``, never a
sentinel such as librdkafka's -1001. Checked constructors of names are in
:mod:`spillway.channels.naming`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

JobId = NewType("JobId", str)
OperatorName = NewType("OperatorName", str)
CheckpointId = NewType("CheckpointId", int)
Offset = NewType("Offset", int)
"""The next offset to read (Kafka's convention for committed offsets). Never negative."""

def offset(value: int) -> Offset:
    """``value`` as an :class:`Offset`; ``ValueError`` for negative (sentinel) values."""
    if value < 0:
        raise ValueError(f"{value} is not an offset (negative values are librdkafka sentinels)")
    return Offset(value)


@dataclass(frozen=True, order=True)
class SubtaskId:
    """One parallel instance of an operator: ``job/operator[index]``."""

    job: JobId
    operator: OperatorName
    index: int

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"subtask index must be >= 0, got {self.index}")

    @property
    def transactional_id(self) -> str:
        """The Kafka ``transactional.id``: stable across restarts so a restart fences its zombie."""
        return f"spillway.{self.job}.{self.operator}.{self.index}"

    @property
    def group_id(self) -> str:
        """The per-subtask consumer group its positions are committed to (visible to lag tools)."""
        return f"spillway.{self.job}.{self.operator}.{self.index}"

    def __str__(self) -> str:
        return f"{self.job}/{self.operator}[{self.index}]"


@dataclass(frozen=True, order=True)
class TopicPartition:
    """A partition of a topic. Hashable, ordered, and typed (unlike confluent's mutable one)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"
