"""A sink's or source's context and a recording Kafka producer, for the connector tests
(no broker): test_sinks_sources, test_arrowjson, test_batchavroencode, test_batchpath, test_lines,
test_jsonschema_registry, test_protobuf_registry and test_origins_failures share them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spillway.channels.ids import JobId, OperatorName, SubtaskId


@dataclass
class FakeContext:
    """A connector's subtask context: the subtask and, for a stateful one, its state."""

    subtask: SubtaskId
    state: Any = None


def ctx(index: int = 0, operator: str = "out") -> FakeContext:
    """The context of subtask ``operator[index]`` of job ``j``, without state."""
    return FakeContext(SubtaskId(JobId("j"), OperatorName(operator), index))


class FakeProducer:
    """A Kafka producer that records every ``(topic, key, value)`` it was given, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes]] = []

    def produce_many(self, topic: str, messages: Any) -> None:
        self.sent += [(topic, k, v) for k, v in messages]
