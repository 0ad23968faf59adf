"""A Kafka source whose broker is replaced by a script, its messages and its subtask's
context (no broker): test_watermarks and test_tombstones share them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from spillway.channels.ids import JobId, OperatorName, SubtaskId

SRC0 = SubtaskId(JobId("j"), OperatorName("src"), 0)


class SourceMsg:
    """A Kafka message of a JSON value at ``p``/``off``, with a CreateTime ``ts`` or none."""

    def __init__(self, p: int, off: int, value: dict[str, Any], ts: int | None) -> None:
        self.p, self.off, self.v, self.ts = p, off, value, ts

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.off

    def value(self) -> bytes:
        return json.dumps(self.v).encode()

    def timestamp(self) -> tuple[int, int]:
        # (TIMESTAMP_CREATE_TIME, ms), or (TIMESTAMP_NOT_AVAILABLE, -1)
        return (1, self.ts) if self.ts is not None else (0, -1)


class Broker:
    """Stands in for Admin and AssignedConsumer: a topic of 3 partitions, scripted reads."""

    batches: ClassVar[list[list[SourceMsg]]] = []

    def __init__(self, *_a: Any) -> None:
        pass

    def partition_counts(self) -> dict[str, int]:
        return {"in": 3}

    def watermarks(self, tp: Any) -> tuple[int, int]:
        return 0, 100

    def assign(self, starts: Any) -> None:
        pass

    def consume(self, n: int, timeout: float) -> list[SourceMsg]:
        return Broker.batches.pop(0) if Broker.batches else []


def kafka_source(monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Any:
    """A :class:`KafkaTopicSource` of topic ``in`` reading :class:`Broker`'s scripted
    batches instead of a broker."""
    import spillway.spark_jobs.connectors.sources as sources

    monkeypatch.setattr(sources, "Admin", Broker)
    monkeypatch.setattr(sources, "AssignedConsumer", Broker)
    src = sources.KafkaTopicSource("in", 1, False, **kw)
    return src


def ctx0() -> Any:
    """The context of source subtask :data:`SRC0`, without Kafka settings."""

    @dataclass
    class C:
        subtask: SubtaskId = SRC0
        kafka: Any = None

    return C()
