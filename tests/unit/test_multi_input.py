"""Operators with several named inputs, without a broker: per-input watermark bookkeeping,
the reader's view of named inputs, union in the plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pytest

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.ids import TopicPartition
from spillway.channels.inputmarks import InputMark, WriterMark, combine, input_mark
from spillway.channels.reader import ChannelReader, InputChannel
from spillway.channels.wire.envelope import Kind
from spillway.spark_jobs.api.pipeline import Pipeline, union
from tests.unit.channelfakes import SCHEMA, Msg, ScriptedConsumer
from tests.unit.multiinputfakes import EVENT, OTHER, gen

LIVE, IDLE, ENDED = (False, False), (False, True), (True, False)


def w(status: tuple[bool, bool], wm: int | None) -> WriterMark:
    return WriterMark(status[0], status[1], wm)


# -- per-input watermark bookkeeping ------------------------------------------------------


def test_an_input_is_the_minimum_over_its_live_writers() -> None:
    assert input_mark([w(LIVE, 300), w(LIVE, 100), w(ENDED, 5)]) == InputMark(100, False, False)
    # A live writer that never reported may be far behind: the input waits for it.
    assert input_mark([w(LIVE, 300), w(LIVE, None)]) == InputMark(None, False, False)
    # An idle writer is left out; it holds nothing back, even without a watermark.
    assert input_mark([w(LIVE, 300), w(IDLE, 10), w(IDLE, None)]) == InputMark(300, False, False)


def test_an_input_whose_live_writers_are_all_idle_is_idle_with_their_largest_mark() -> None:
    assert input_mark([w(IDLE, 40), w(IDLE, 70), w(ENDED, 1)]) == InputMark(70, True, False)
    assert input_mark([w(IDLE, None)]) == InputMark(None, True, False)
    assert input_mark([w(ENDED, 9), w(ENDED, None)]) == InputMark(None, False, True)
    assert input_mark([]) == InputMark(None, False, True)


def test_the_operator_is_the_minimum_over_inputs_leaving_idle_and_ended_ones_out() -> None:
    a, b = InputMark(500, False, False), InputMark(200, False, False)
    assert combine({"a": a, "b": b}) == 200
    # b idle: left out, however far behind it is; a alone counts.
    assert combine({"a": a, "b": InputMark(10, True, False)}) == 500
    # b ended: left out.
    assert combine({"a": a, "b": InputMark(None, False, True)}) == 500
    # b live without a watermark yet: the operator waits, even though a is far ahead.
    assert combine({"a": a, "b": InputMark(None, False, False)}) is None
    # Every input idle: what they promised still holds (the largest), as Flink's valve.
    assert combine({"a": InputMark(30, True, False), "b": InputMark(80, True, False)}) == 80
    assert combine({"a": InputMark(None, True, False)}) is None
    assert combine({"a": InputMark(None, False, True)}) is None


# -- the reader with two named inputs -----------------------------------------------------


@dataclass
class TopicMsg(Msg):
    on: str = "ta"

    def topic(self) -> str:
        return self.on


Consumer = ScriptedConsumer  # tests.unit.channelfakes


def test_the_reader_combines_watermarks_per_named_input() -> None:
    consumer = Consumer()
    inputs = [InputChannel("ta", 0, SCHEMA, 2, "a"), InputChannel("tb", 0, SCHEMA, 1, "b")]
    reader = ChannelReader(cast(Any, consumer), inputs)
    reader.start()

    def feed(*msgs: TopicMsg) -> None:
        consumer.pending = list(msgs)
        reader.poll()

    assert reader.input_of(TopicPartition("tb", 0)) == "b"
    feed(TopicMsg(0, 0, Kind.WATERMARK, 100, "ta"), TopicMsg(1, 1, Kind.WATERMARK, 400, "ta"))
    assert reader.input_marks() == {
        "a": InputMark(100, False, False),
        "b": InputMark(None, False, False),
    }
    assert reader.watermark() is None  # input b has not spoken
    feed(TopicMsg(0, 0, Kind.WATERMARK, 50, "tb"))
    assert reader.watermark() == 50
    feed(TopicMsg(1, 0, Kind.IDLE, 0, "tb"))  # b idle: a alone
    assert reader.watermark() == 100
    feed(TopicMsg(2, 0, Kind.END_OF_STREAM, 0, "ta"))  # a's writer 0 ended: a is writer 1
    assert reader.watermark() == 400
    feed(TopicMsg(2, 0, Kind.WATERMARK, 600, "tb"))  # b speaks again and is ahead
    assert reader.input_marks()["b"] == InputMark(600, False, False)
    assert reader.watermark() == 400


# -- union and connect in the plan --------------------------------------------------------


def test_union_of_two_schemas_is_a_planning_error_naming_both() -> None:
    p = Pipeline("u")
    with pytest.raises(PipelineDefinitionError) as err:
        union(gen(p, "left", EVENT), gen(p, "right", OTHER))
    msg = str(err.value)
    assert "stream 'left' and stream 'right' have different schemas" in msg
    assert "k: string vs n: long" in msg


def test_union_feeds_one_operator_from_every_input_each_named_after_its_upstream() -> None:
    p = Pipeline("u")
    a, b, c = gen(p, "a", EVENT, 2), gen(p, "b", EVENT, 1), gen(p, "c", EVENT, 2)
    a.union(b, c).key_by(lambda r: r["k"]).aggregate(
        "count", init=lambda: 0, add=lambda n, r: n + 1, result=lambda k, n: {"k": k},
        schema=EVENT, parallelism=2,
    ).write_jsonl("out", "/x")  # fmt: skip
    plan = p.plan("u")
    ins = plan.inputs_of("count")
    assert [(e.upstream, e.input_name, e.kind) for e in ins] == [
        ("a", "a", "hash"),
        ("b", "b", "hash"),
        ("c", "c", "hash"),
    ]
    with pytest.raises(PipelineDefinitionError, match="stream 'a' is given twice"):
        union(a, b, a)
