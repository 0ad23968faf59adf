"""A write_kafka topic's message limit (spillway.channels.kafka.limits): the effective limit,
the sizes it is checked against, reading it, and what the sink and the subtask's outputs
do with a record over it (spillway.recovery.runtime.outputs, .sinklimit)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import RecordError, RecordTooLargeError, SpillwayError
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.channels.kafka import limits
from spillway.channels.kafka.idempotent import IdempotentProducer
from spillway.channels.kafka.limits import (
    MessageLimit,
    message_size,
    producer_bytes,
    read_message_limit,
)
from spillway.channels.wire.batchread import ArrowRows
from spillway.recovery.job.origins import Runs, Same, TopicOffset
from spillway.recovery.runtime.options import SubtaskResult
from spillway.recovery.runtime.outputs import Outputs
from spillway.recovery.runtime.sinklimit import LimitedSink, SinkRefusal
from spillway.spark_jobs.connectors.sinks import JsonlFileSink, KafkaTopicSink

SUB = SubtaskId(JobId("j"), OperatorName("sink"), 1)
LIMIT = MessageLimit("out", 1000, 8_000_000)  # the topic's limit sets it
PAYLOAD = 1000 - 61 - 36  # key + value bytes a message to "out" may carry


# -- the limit, pure -------------------------------------------------------------------------


def test_the_limit_is_the_smaller_setting_and_names_it() -> None:
    assert (LIMIT.bytes, LIMIT.batch_size, LIMIT.payload_bytes) == (1000, 939, PAYLOAD)
    assert LIMIT.setting == "topic out's max.message.bytes (now 1000)"
    by_producer = MessageLimit("out", 2_000_000, 1_000_000)
    assert (by_producer.bytes, by_producer.batch_size) == (1_000_000, 999_939)
    assert by_producer.setting.startswith("the producer's message.max.bytes (now 1000000;")
    unread = MessageLimit("out", None, 500)
    assert (unread.bytes, unread.setting[:34]) == (500, "the producer's message.max.bytes (")


def test_a_message_is_sized_as_librdkafka_sizes_it() -> None:
    assert message_size(None, b"") == 97
    assert message_size(b"kk", b"v" * 100) == 97 + 102
    assert message_size(b"k", b"v", [("h", b"12"), ("hdr", b"")]) == 99 + (10 + 3) + (10 + 3)
    assert LIMIT.fits(message_size(None, b"v" * PAYLOAD))
    assert not LIMIT.fits(message_size(None, b"v" * (PAYLOAD + 1)))
    assert not LIMIT.fits(message_size(b"k", b"v" * PAYLOAD))


def test_a_refusal_says_size_limit_and_the_setting_to_raise() -> None:
    assert LIMIT.refusal(1200) == (
        "its message to topic out is 1200 bytes, over the limit of 1000 bytes set by topic "
        "out's max.message.bytes (now 1000); raise that (and the broker's message.max.bytes "
        "if it is lower), or make the record smaller"
    )


def test_a_producer_limit_and_its_batch_cap() -> None:
    assert producer_bytes({}) == 1_000_000
    assert producer_bytes({"message.max.bytes": "2048"}) == 2048
    p = IdempotentProducer(KafkaSettings("localhost:1"), "c")
    p.cap_batch_size(939)
    p.cap_batch_size(5000)  # a cap never raises what an earlier one lowered
    assert (p.message_max_bytes, p._config["batch.size"]) == (1_000_000, 939)


# -- reading it ----------------------------------------------------------------------------


class FakeAdmin:
    config: ClassVar[dict[str, str] | Exception] = {}

    def __init__(self, settings: Any) -> None:
        pass

    def topic_config(self, topic: str) -> dict[str, str]:
        if isinstance(self.config, Exception):
            raise self.config
        return self.config


def test_the_topic_limit_is_read_or_the_producer_limit_applies_with_a_log_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(limits, "Admin", FakeAdmin)
    settings = KafkaSettings("localhost:1")
    FakeAdmin.config = {"max.message.bytes": "100000", "retention.ms": "1"}
    assert read_message_limit(settings, "out", 8_000_000) == MessageLimit("out", 100000, 8_000_000)
    FakeAdmin.config = KafkaException(KafkaError(KafkaError._TIMED_OUT, "no answer"))
    with caplog.at_level(logging.WARNING, "spillway.producer"):
        assert read_message_limit(settings, "out", 5000) == MessageLimit("out", None, 5000)
    assert [r.getMessage()[:45] for r in caplog.records] == [
        "cannot read max.message.bytes of topic out (K"
    ]
    assert "against the producer's message.max.bytes (5000) alone" in caplog.records[0].message


def test_the_kafka_sink_reads_its_limit_once_before_its_producer_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "Admin", FakeAdmin)
    FakeAdmin.config = {"max.message.bytes": "1000"}
    sink = KafkaTopicSink("out")
    assert isinstance(sink, LimitedSink)
    assert not isinstance(JsonlFileSink("/nowhere"), LimitedSink)
    assert sink.read_limit(KafkaSettings("localhost:1"), 8_000_000) == 939
    FakeAdmin.config = {"max.message.bytes": "5"}
    assert sink.read_limit(KafkaSettings("localhost:1"), 8_000_000) == 939
    assert sink.limit == LIMIT


# -- the sink and the outputs ----------------------------------------------------------------


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes]] = []

    def produce_many(self, topic: str, messages: Any) -> None:
        self.sent += [(topic, k, v) for k, v in messages]


class DeadLetters:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any, Any]] = []

    def send(self, *, stage: str, error: Any, origin: Any, record: Any = None) -> None:
        self.sent.append((stage, f"{type(error).__name__}: {error}", origin, record))


def row(n: int, size: int) -> dict[str, Any]:
    """A record whose JSON message (no key) is ``size`` bytes: {"n":N,"p":"xx…"}."""
    head = len(f'{{"n":{n},"p":""}}')
    return {"n": n, "p": "x" * (size - head)}


def limited_sink(producer: FakeProducer, batches: bool = False) -> KafkaTopicSink:
    sink = KafkaTopicSink("out", batches=batches)
    sink.limit = LIMIT
    sink.open(cast(Any, None), {}, producer)
    return sink


def test_the_sink_refuses_a_write_with_a_record_over_the_limit_and_produces_none() -> None:
    producer = FakeProducer()
    sink = limited_sink(producer)
    records = [row(0, 20), row(1, PAYLOAD + 1), row(2, PAYLOAD), row(3, 5000)]
    with pytest.raises(SinkRefusal) as refused:
        sink.write(records)
    assert producer.sent == []
    assert refused.value.refused == ((1, LIMIT.refusal(1001)), (3, LIMIT.refusal(5097)))
    assert str(refused.value).startswith("2 of 4 records too large for topic out: the first")
    sink.write([records[0], records[2]])
    assert [len(v) for _, _, v in producer.sent] == [20, PAYLOAD]


class Crash:
    armed = False


class Writer:
    """A channel writer refusing the records whose ``n`` is in ``refuse``."""

    def __init__(self, refuse: set[int]) -> None:
        self.refuse = refuse
        self.took: list[Any] = []

    def write_many(self, records: list[Any]) -> None:
        if any(r["n"] in self.refuse for r in records):
            raise RecordError("refused by the writer")
        self.took += records


def outputs(
    sink: KafkaTopicSink, dead: DeadLetters | None, writers: Sequence[Writer] = ()
) -> tuple[Outputs, SubtaskResult]:
    result = SubtaskResult(str(SUB), 1, "running")
    made = Outputs(
        SUB, "sink", cast(Any, writers), sink, cast(Any, dead), cast(Any, Crash()), result
    )
    return made, result


ORIGINS = Runs(lambda place, k: TopicOffset("in", place, k))
ORIGINS.add_run(3, 40, 5)  # in[3]@40, @41, ...
RECORDS = [row(0, 20), row(1, 2000), row(2, 30), row(3, 1500), row(4, 40)]


def test_with_dead_letters_records_over_the_limit_go_there_with_their_origin() -> None:
    producer, dead = FakeProducer(), DeadLetters()
    made, result = outputs(limited_sink(producer), dead)
    made.sink_alone(RECORDS, ORIGINS)
    assert [v for _, _, v in producer.sent] == [
        b'{"n":0,"p":"' + b"x" * 6 + b'"}',
        b'{"n":2,"p":"' + b"x" * 16 + b'"}',
        b'{"n":4,"p":"' + b"x" * 26 + b'"}',
    ]
    assert dead.sent == [
        (
            "sink",
            f"RecordTooLargeError: {LIMIT.refusal(2097)}",
            TopicOffset("in", 3, 41),
            RECORDS[1],
        ),
        (
            "sink",
            f"RecordTooLargeError: {LIMIT.refusal(1597)}",
            TopicOffset("in", 3, 43),
            RECORDS[3],
        ),
    ]
    assert result.records_out == 3


def test_a_record_the_sink_refuses_after_a_writer_refused_another_keeps_its_origin() -> None:
    producer, dead, writer = FakeProducer(), DeadLetters(), Writer({0})
    made, result = outputs(limited_sink(producer), dead, [writer])
    made.records(RECORDS, ORIGINS)
    assert [(d[0], d[2], d[3]["n"]) for d in dead.sent] == [
        ("emit", TopicOffset("in", 3, 40), 0),
        ("sink", TopicOffset("in", 3, 41), 1),
        ("sink", TopicOffset("in", 3, 43), 3),
    ]
    assert writer.took == RECORDS[1:]
    assert [json.loads(v)["n"] for _, _, v in producer.sent] == [2, 4]
    assert result.records_out == 4  # what the writer took


def test_dead_letters_of_a_batch_sink_are_its_rows() -> None:
    producer, dead = FakeProducer(), DeadLetters()
    made, result = outputs(limited_sink(producer, batches=True), dead)
    rows = ArrowRows(pa.RecordBatch.from_pylist(RECORDS))
    made.sink_alone(rows, Same(TopicOffset("ch", 0, 7)))
    assert [v for _, _, v in producer.sent] == [
        b'{"n":0,"p":"' + b"x" * 6 + b'"}',
        b'{"n":2,"p":"' + b"x" * 16 + b'"}',
        b'{"n":4,"p":"' + b"x" * 26 + b'"}',
    ]
    assert [(d[0], d[2], d[3]) for d in dead.sent] == [
        ("sink", TopicOffset("ch", 0, 7), RECORDS[1]),
        ("sink", TopicOffset("ch", 0, 7), RECORDS[3]),
    ]
    assert result.records_out == 3


def test_without_dead_letters_the_first_record_over_the_limit_stops_the_job() -> None:
    producer = FakeProducer()
    made, result = outputs(limited_sink(producer), None)
    with pytest.raises(RecordTooLargeError) as stopped:
        made.records(RECORDS, ORIGINS)
    e = stopped.value
    assert str(e) == (
        "j/sink[1]: the sink of operator 'sink' cannot write the record at in[3]@41: "
        f"{LIMIT.refusal(2097)}. Nothing from there on is committed; fix the limit or the "
        "record, or run with --dead-letter to divert bad records to spillway.j.dlq"
    )
    assert (e.deterministic, e.origin, e.subtasks, producer.sent) == (
        True,
        "in[3]@41",
        frozenset([SUB]),
        [],
    )
    assert isinstance(e, SpillwayError)
    assert result.records_out == 5  # the (no) writers took them before the sink refused
