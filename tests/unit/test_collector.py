"""The output collectors: what each guarantee asks of the outputs before a checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.channels.kafka.idempotent import IdempotentProducer
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.recovery.runtime.collector import (
    AtLeastOnceCollector,
    ExactlyOnceCollector,
    make_collector,
)

SUB = SubtaskId(JobId("j"), OperatorName("map"), 2)
SETTINGS = KafkaSettings("127.0.0.1:1")  # never contacted: nothing here starts a client


@dataclass
class FakeProducer:
    calls: list[str] = field(default_factory=list)

    def produce(self, topic: str, partition: int, key: Any, value: Any, *a: Any, **k: Any) -> None:
        self.calls.append(f"produce {topic}[{partition}]")

    def produce_many(self, topic: str, messages: Any) -> None:
        self.calls.append(f"produce_many {topic}")

    def last_offset(self, tp: Any) -> None:
        return None

    def flush(self, timeout_s: float = 30.0) -> None:
        self.calls.append("flush")

    def close(self) -> None:
        self.calls.append("close")


def test_exactly_once_sends_through_the_transaction_and_flushes_only_for_writers() -> None:
    p = FakeProducer()
    c = ExactlyOnceCollector(cast(TransactionalProducer, p))
    c.produce("t", 1, None, b"x")
    c.prepare_commit(has_writers=False)  # a sink's messages commit with the transaction
    assert p.calls == ["produce t[1]"]
    c.prepare_commit(has_writers=True)  # writers need acknowledged offsets (their marks)
    c.close()  # the subtask closes its own producer
    assert p.calls == ["produce t[1]", "flush"]


def test_at_least_once_has_a_producer_of_its_own_flushed_before_every_checkpoint() -> None:
    c = make_collector("at-least-once", cast(Any, None), SETTINGS, SUB)
    assert isinstance(c, AtLeastOnceCollector)
    own = c._producer
    assert isinstance(own, IdempotentProducer)
    assert not isinstance(own, TransactionalProducer)
    assert own.name == "spillway.j.map.2.out"
    assert "transactional.id" not in own._config
    p = FakeProducer()
    c._producer = cast(IdempotentProducer, p)
    c.prepare_commit(has_writers=False)
    c.close()
    assert p.calls == ["flush", "close"]


def test_exactly_once_is_the_default() -> None:
    c = make_collector("exactly-once", cast(Any, FakeProducer()), SETTINGS, SUB)
    assert isinstance(c, ExactlyOnceCollector)
