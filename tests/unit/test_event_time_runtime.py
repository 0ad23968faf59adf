"""Event time inside the runtime, without a broker: idle writers in channels, late records
set aside by windows, counted and dead-lettered by the runner's helper."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from spillway.channels.config import ChannelSettings
from spillway.channels.ids import JobId, OperatorName, SubtaskId, TopicPartition
from spillway.channels.reader import ChannelReader, InputChannel
from spillway.channels.routing.partitioners import Forward
from spillway.channels.wire.envelope import Kind, headers
from spillway.channels.writer import ChannelWriter, OutputChannel
from spillway.offsets.checkpoint import Checkpoint
from spillway.recovery.job.origins import TopicOffset
from spillway.recovery.job.plan import SetAside
from spillway.recovery.restore.state import ChangelogState
from spillway.recovery.runtime.deadletter import DeadLetters
from spillway.recovery.runtime.eventtime import IdleAnnouncer, SetAsides
from spillway.spark_jobs.operators.operators import ChainedLogic, MapLogic, TumblingWindowLogic
from tests.unit.channelfakes import SCHEMA, TP, Msg, ScriptedConsumer
from tests.unit.checkpointfakes import checkpoint

SUBTASK = SubtaskId(JobId("j"), OperatorName("win"), 0)

# -- idle writers in a channel -----------------------------------------------------------


Consumer = ScriptedConsumer  # tests.unit.channelfakes


def test_an_idle_writer_is_left_out_of_the_watermark_until_it_speaks_again() -> None:
    consumer = Consumer()
    reader = ChannelReader(cast(Any, consumer), [InputChannel(TP.topic, 0, SCHEMA, 3)])
    reader.start()

    def feed(*msgs: Msg) -> None:
        consumer.pending = list(msgs)
        reader.poll()

    feed(Msg(0, 0, Kind.WATERMARK, 100), Msg(1, 1, Kind.WATERMARK, 300))
    assert reader.watermark() is None  # writer 2 never said anything: it may be far behind
    feed(Msg(2, 2, Kind.IDLE, 0))
    assert reader.watermark() == 100
    assert not reader.idle()
    feed(Msg(3, 2, Kind.DATA, 7))  # writer 2 speaks again: it holds the watermark back
    assert reader.watermark() is None
    feed(Msg(4, 2, Kind.WATERMARK, 50))
    assert reader.watermark() == 50
    feed(Msg(5, 2, Kind.IDLE, 0), Msg(6, 1, Kind.END_OF_STREAM, 0))
    assert reader.watermark() == 100  # writer 1 ended, 2 idle: 0 alone counts
    feed(Msg(7, 0, Kind.IDLE, 0))
    assert reader.idle()  # every writer that has not ended is idle: tell downstream
    # ... and keep what they promised before falling quiet: the largest (as Flink does).
    assert reader.watermark() == 100
    feed(Msg(8, 2, Kind.WATERMARK, 20))  # writer 2 is back, behind
    assert reader.watermark() == 20  # (the runner never lets its own watermark go back)
    assert not reader.idle()


def test_all_quiet_writers_give_the_largest_watermark_they_reported() -> None:
    consumer = Consumer()
    reader = ChannelReader(cast(Any, consumer), [InputChannel(TP.topic, 0, SCHEMA, 3)])
    reader.start()
    consumer.pending = [
        Msg(0, 0, Kind.WATERMARK, 100),
        Msg(1, 1, Kind.WATERMARK, 300),
        Msg(2, 2, Kind.IDLE, 0),  # never reported one
        Msg(3, 0, Kind.IDLE, 0),
        Msg(4, 1, Kind.IDLE, 0),
    ]
    reader.poll()
    assert reader.watermark() == 300
    assert reader.idle()


def test_writer_announces_idleness_to_every_downstream_partition() -> None:
    sent: list[tuple[int, bytes, Any]] = []

    class Producer:
        def produce(self, topic: str, p: int, key: bytes, value: bytes, hdrs: Any) -> None:
            sent.append((p, key, hdrs))

    channel = OutputChannel("t", SCHEMA, Forward(0, 3), 3)
    writer = ChannelWriter(cast(Any, Producer()), channel, 1, ChannelSettings())
    writer.idle()
    assert [(p, k) for p, k, _ in sent] == [(0, b"1"), (1, b"1"), (2, b"1")]
    assert all(h == headers(Kind.IDLE) for _, _, h in sent)


def test_idle_announcements_repeat_while_idle() -> None:
    a = IdleAnnouncer(repeat_s=1.0)
    assert [a.due(False, 0.0), a.due(True, 0.1), a.due(True, 0.5), a.due(True, 1.1)] == [
        False,
        True,
        False,
        True,
    ]
    assert a.due(False, 1.2) is False
    assert a.due(True, 1.3) is True  # idle again: at once


# -- late records ------------------------------------------------------------------------


@dataclass
class Ctx:
    subtask: SubtaskId = SUBTASK
    state: ChangelogState = field(default_factory=lambda: ChangelogState(TopicPartition("c", 0)))
    watermark: int | None = None


def window(ctx: Ctx) -> TumblingWindowLogic:
    w = TumblingWindowLogic(
        key_fn=lambda r: r["k"],
        time_fn=lambda r: r["t"],
        size=10,
        init=lambda: 0,
        add=lambda n, r: n + r["v"],
        result=lambda k, s, e, n: {"k": k, "start": s, "n": n},
    )
    w.open(ctx)
    return w


def rec(k: str, t: int, v: int = 1) -> dict[str, Any]:
    return {"k": k, "t": t, "v": v}


def test_late_records_are_set_aside_with_the_reason() -> None:
    w = window(Ctx())
    w.process([rec("a", 3), rec("a", 12)])
    assert w.set_aside() == []
    assert w.on_watermark(10) == [{"k": "a", "start": 0, "n": 1}]
    # 9 and 0 are late: their window [0, 10) was emitted; [10, 20) is still open.
    w.process([rec("a", 9, 100), rec("b", 10, 5), rec("b", 0, 7)])
    aside = w.set_aside()
    assert [(a.kind, a.record) for a in aside] == [
        ("late", rec("a", 9, 100)),
        ("late", rec("b", 0, 7)),
    ]
    assert aside[0].reason == (
        "late: event time 9 of key 'a' falls in window [0, 10), already emitted at watermark 10"
    )
    assert w.set_aside() == []  # handed over once
    assert w.on_end() == [{"k": "a", "start": 10, "n": 1}, {"k": "b", "start": 10, "n": 5}]


def test_a_failed_call_sets_nothing_aside() -> None:
    ctx = Ctx(watermark=10)  # restored: window [0, 10) was emitted before the restart
    w = window(ctx)
    with pytest.raises(KeyError):
        w.process([rec("a", 1), {"k": "a"}])  # the second record has no time
    assert w.set_aside() == []
    assert w.late == 0
    w.process([rec("a", 1)])  # the runner retries record by record
    assert [a.record for a in w.set_aside()] == [rec("a", 1)]
    assert w.late == 1


def test_a_chain_hands_over_what_its_window_set_aside() -> None:
    w = window(Ctx(watermark=10))
    chain = ChainedLogic([MapLogic(lambda r: {**r, "v": 2}), w])
    chain.process([rec("a", 5), rec("a", 15)])
    assert [a.record for a in chain.set_aside()] == [rec("a", 5, 2)]


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def produce(
        self, topic: str, partition: int, key: bytes, value: bytes, origin: str | None = None
    ) -> None:
        assert topic == "spillway.j.dlq"
        self.sent.append(json.loads(value))


def test_set_asides_are_counted_and_dead_lettered_with_their_origin() -> None:
    producer = FakeProducer()
    aside = SetAsides(SUBTASK, DeadLetters(cast(Any, producer), SUBTASK))
    aside.restore({"late": 4})  # from the checkpoint
    tp = TopicPartition("spillway.j.ch.src.win", 1)
    aside.take(
        [SetAside("late", "late: why", {"v": 1}), SetAside("late", "why 2", {"v": 2})],
        TopicOffset(tp.topic, tp.partition, 17),
    )
    aside.take([], TopicOffset(tp.topic, tp.partition, 18))
    assert aside.counts() == {"late": 6}
    assert [
        (d["stage"], d["topic"], d["partition"], d["offset"], d["error"], d["record"])
        for d in producer.sent
    ] == [
        ("late", tp.topic, 1, 17, "late: why", '{"v": 1}'),
        ("late", tp.topic, 1, 17, "why 2", '{"v": 2}'),
    ]


def test_without_a_dead_letter_channel_set_asides_are_counted() -> None:
    aside = SetAsides(SUBTASK, None)
    aside.take([SetAside("late", "r", 1)] * 3, None)
    assert aside.counts() == {"late": 3}


def test_checkpoint_carries_the_set_aside_counts() -> None:
    ckpt = checkpoint(SUBTASK, 3, "fp", set_aside={"late": 12})
    assert Checkpoint.from_bytes(ckpt.to_bytes()).operator.set_aside == {"late": 12}


@dataclass
class PartMsg(Msg):
    """A message of partition ``part`` of the channel topic (``Msg`` is of partition 0)."""

    part: int = 0

    def partition(self) -> int:
        return self.part


def test_the_watermark_is_the_minimum_over_every_partition_and_writer_pair() -> None:
    """The pipeline API page's example: writer 0 said 50 on partition 0 but is read only up
    to 30 on partition 1, so partition 1 holds the operator's watermark at 30."""
    consumer = Consumer()
    reader = ChannelReader(
        cast(Any, consumer),
        [InputChannel(TP.topic, 0, SCHEMA, 2), InputChannel(TP.topic, 1, SCHEMA, 2)],
    )
    reader.start()
    consumer.pending = [
        PartMsg(0, 0, Kind.WATERMARK, 50, part=0),
        PartMsg(1, 1, Kind.WATERMARK, 40, part=0),
        PartMsg(0, 0, Kind.WATERMARK, 30, part=1),
        PartMsg(1, 1, Kind.WATERMARK, 45, part=1),
    ]
    reader.poll()
    assert reader.watermark() == 30
    consumer.pending = [PartMsg(2, 0, Kind.WATERMARK, 50, part=1)]  # partition 1 read further
    reader.poll()
    assert reader.watermark() == 40
