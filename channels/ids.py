"""Identifiers with their own types.

A subtask is ``(operator, index)`` with a stable index in ``0..p-1``; it always reads the
same partitions, owns the same state and uses the same transactional id. Offsets are
plain non-negative ints wrapped in :class:`Offset`; "no offset" is ``None``, never a
sentinel such as librdkafka's -1001.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NewType

from channels.errors import ConfigError

JobId = NewType("JobId", str)
OperatorName = NewType("OperatorName", str)
CheckpointId = NewType("CheckpointId", int)
Offset = NewType("Offset", int)
"""The next offset to read (Kafka's convention for committed offsets). Never negative."""

# Names end up inside Kafka topic names and transactional ids. Kafka allows
# [a-zA-Z0-9._-]; we keep '.' for our own separators so names stay unambiguous.
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def job_id(value: str) -> JobId:
    """``value`` as a :class:`JobId`; :class:`ConfigError` if it is not a valid name."""
    _check_name(value, "job id")
    return JobId(value)


def operator_name(value: str) -> OperatorName:
    """Return ``value`` as an :class:`OperatorName`; raise :class:`ConfigError` if invalid."""
    _check_name(value, "operator name")
    return OperatorName(value)


def offset(value: int) -> Offset:
    """``value`` as an :class:`Offset`; ``ValueError`` for negative (sentinel) values."""
    if value < 0:
        raise ValueError(f"{value} is not an offset (negative values are librdkafka sentinels)")
    return Offset(value)


def _check_name(value: str, what: str) -> None:
    if not _NAME.match(value):
        raise ConfigError(
            f"invalid {what} {value!r}: use 1-64 characters from A-Z, a-z, 0-9, '_' and '-'"
        )


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
