"""The producer's error policy for errors librdkafka reports from poll/flush (no broker)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import (
    ProducerFencedError,
    RecordTooLargeError,
    SpillwayError,
    TransactionAbortedError,
)
from spillway.channels.ids import Offset, TopicPartition
from spillway.channels.kafka import producer as producer_module
from spillway.channels.kafka.producer import TransactionalProducer, pending_kafka_exception


def _fenced() -> KafkaException:
    return KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))


class _FlushRaisesWrapped:
    """What confluent-kafka 2.16 does when fencing is found during flush: the fatal error is
    pending when a delivery callback returns, and CPython reports a SystemError caused by it."""

    def __init__(self, inner: BaseException) -> None:
        self.inner = inner

    def flush(self, timeout: float = 0.0) -> int:
        try:
            raise self.inner
        except BaseException as e:
            msg = "<function _on_delivery> returned a result with an exception set"
            raise SystemError(msg) from e

    poll = flush

    def abort_transaction(self, timeout: float) -> None:
        raise _fenced()


def _producer(fake: Any) -> TransactionalProducer:
    p = TransactionalProducer(KafkaSettings(bootstrap_servers="127.0.0.1:1"), "spillway.j.op.0")
    p._producer = fake
    p._in_txn = True
    return p


def test_pending_kafka_exception_follows_the_chain() -> None:
    k = _fenced()
    with pytest.raises(SystemError) as info:
        _FlushRaisesWrapped(k).flush()
    assert pending_kafka_exception(info.value) is k
    assert pending_kafka_exception(SystemError("no cause")) is None


@pytest.mark.parametrize("call", ["flush", "poll"])
def test_fencing_reported_through_a_system_error_is_fencing(call: str) -> None:
    p = _producer(_FlushRaisesWrapped(_fenced()))
    with pytest.raises(ProducerFencedError, match="fenced by a newer incarnation"):
        getattr(p, call)(0.1)
    assert not p.in_transaction


class _FlushReturnsNull(_FlushRaisesWrapped):
    """confluent-kafka ending flush with a bare SystemError after fencing: nothing chained
    (chaos suite, zombie fault: 'returned NULL without setting an exception')."""

    def flush(self, timeout: float = 0.0) -> int:
        raise SystemError("<built-in method flush> returned NULL without setting an exception")

    poll = flush


@pytest.mark.parametrize("call", ["flush", "poll"])
def test_fencing_behind_a_bare_system_error_is_fencing(call: str) -> None:
    p = _producer(_FlushReturnsNull(_fenced()))
    with pytest.raises(ProducerFencedError, match="fenced by a newer incarnation"):
        getattr(p, call)(0.1)
    assert not p.in_transaction


def test_an_unrelated_system_error_is_not_disguised() -> None:
    p = _producer(_FlushRaisesWrapped(ValueError("bug")))
    with pytest.raises(SystemError):
        p.flush(0.1)


def test_close_after_fencing_does_not_raise() -> None:
    p = _producer(_FlushRaisesWrapped(_fenced()))
    p.close()
    assert p._producer is None
    assert not p.in_transaction


def test_other_fatal_errors_stop_with_the_cause() -> None:
    err = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied", fatal=True))
    p = _producer(_FlushRaisesWrapped(err))
    with pytest.raises(SpillwayError, match="fatal error"):
        p.flush(0.1)


class _ProduceRefused(_FlushRaisesWrapped):
    """What librdkafka does when a produce meets a producer fenced meanwhile: _STATE."""

    def produce(self, *args: Any, **kw: Any) -> None:
        raise KafkaException(KafkaError(KafkaError._STATE, "Unable to produce message"))


def test_a_produce_refused_by_a_fenced_producer_is_fencing() -> None:
    p = _producer(_ProduceRefused(_fenced()))
    with pytest.raises(ProducerFencedError, match="fenced by a newer incarnation"):
        p.produce("t", 0, b"k", b"v")
    assert not p.in_transaction


class _QueueFullOnce:
    """A producer whose local queue is full for the first positional produce call."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None, int]] = []
        self.full = True
        self.polls = 0

    def produce(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None:
        if self.full and not kw:
            self.full = False
            raise BufferError("queue full")
        self.sent.append((topic, key, value, kw.get("partition", -1)))

    def poll(self, timeout: float = 0.0) -> int:
        self.polls += 1
        return 0


def test_produce_many_sends_every_message_once_even_when_the_queue_is_full() -> None:
    fake = _QueueFullOnce()
    p = _producer(fake)
    p.txn_bytes = 0
    msgs = [(b"k1", b"v1"), (None, b"v22"), (b"k3", b"v333")]
    p.produce_many("out", msgs)
    assert [(t, k, v) for t, k, v, _ in fake.sent] == [("out", k, v) for k, v in msgs]
    assert all(part == -1 for *_, part in fake.sent)  # librdkafka's partitioner places them
    assert p.txn_bytes == 2 + 2 + 3 + 2 + 4


class _SendOffsetsHangs:
    """librdkafka's send_offsets_to_transaction while the group coordinator is dead: it
    ignores its timeout (confluentinc/librdkafka#5456) until something else happens."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def send_offsets_to_transaction(self, tps: Any, metadata: Any, timeout: float) -> None:
        self.calls += 1
        self.release.wait(30)


class _SendOffsetsTransportThenOk:
    def __init__(self) -> None:
        self.calls = 0

    def send_offsets_to_transaction(self, tps: Any, metadata: Any, timeout: float) -> None:
        self.calls += 1
        if self.calls == 1:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "TxnCoordinator/2 down"))


def test_send_offsets_past_its_deadline_aborts_instead_of_hanging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(producer_module, "SEND_OFFSETS_DEADLINE_S", 0.2)
    fake = _SendOffsetsHangs()
    p = _producer(fake)
    started = time.monotonic()
    try:
        with pytest.raises(TransactionAbortedError, match="did not return within 0s"):
            p.send_offsets({TopicPartition("t", 0): Offset(5)}, object())
    finally:
        fake.release.set()
    assert time.monotonic() - started < 10  # bounded by the deadline, not the hang
    assert fake.calls == 1  # an abandoned call is not retried on the same producer


def test_send_offsets_retries_a_transport_error() -> None:
    fake = _SendOffsetsTransportThenOk()
    _producer(fake).send_offsets({TopicPartition("t", 0): Offset(5)}, object())
    assert fake.calls == 2


class _RefusesLarge:
    """librdkafka refusing a message bigger than the producer's message.max.bytes, as
    produce() does before sending it."""

    def __init__(self) -> None:
        self.aborted = 0

    def produce(self, *args: Any, **kwargs: Any) -> None:
        raise KafkaException(
            KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large")
        )

    def abort_transaction(self, timeout: float) -> None:
        self.aborted += 1


@pytest.mark.parametrize("call", ["produce", "produce_many"])
def test_a_message_refused_as_too_large_is_a_deterministic_record_error(call: str) -> None:
    fake = _RefusesLarge()
    p = _producer(fake)
    send = {
        "produce": lambda: p.produce("spillway.j.changelog.count", 0, b"k", b"x" * 2000),
        "produce_many": lambda: p.produce_many("out", [(b"k", b"x" * 2000)]),
    }[call]
    with pytest.raises(RecordTooLargeError) as info:
        send()
    assert info.value.deterministic
    assert fake.aborted == 0  # refused before queuing: the transaction can still commit
    text = str(info.value)
    assert "message.max.bytes (now 1000000; a client setting)" in text
    assert "topic's max.message.bytes" in text
    if call == "produce":
        assert "a message of 2001 bytes to spillway.j.changelog.count is too large" in text
    else:
        assert "a message to out is too large" in text


def test_a_too_large_refusal_seen_after_sending_aborts_the_transaction() -> None:
    fake = _RefusesLarge()
    p = _producer(fake)
    refused = KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: too large"))
    error = p._translate(refused)  # as flush() or commit() see it
    assert isinstance(error, RecordTooLargeError)
    assert error.deterministic
    assert fake.aborted == 1
    assert str(error).startswith("producer spillway.j.op.0: a message is too large")
