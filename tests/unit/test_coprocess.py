"""connect(a, b).key_by(...).process(...) without a broker: the plan, and the co-process
logic's keyed state and timers shared by its two inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from spillway.channels.errors import PipelineDefinitionError, RecordError
from spillway.channels.ids import TopicPartition
from spillway.channels.reader import Delivery
from spillway.channels.wire.envelope import Kind
from spillway.recovery.job.inputs import input_call
from spillway.recovery.runtime.requests import Step
from spillway.spark_jobs.api.coprocess import CoProcessLogic
from spillway.spark_jobs.api.pipeline import Pipeline, connect
from spillway.spark_jobs.operators.process import ProcessContext
from tests.unit.multiinputfakes import EVENT, OTHER, gen
from tests.unit.operatorfakes import Ctx, restored
from tests.unit.processorfakes import ScriptedReader, processor


def test_connect_builds_a_keyed_two_input_operator() -> None:
    p = Pipeline("c")
    a, b = gen(p, "a", EVENT), gen(p, "b", OTHER, 2)
    connect(a, b).key_by(lambda r: r["k"], lambda r: str(r["n"])).process(
        "join", lambda r, ctx: [r], lambda r, ctx: None, schema=EVENT, parallelism=3
    ).write_jsonl("out", "/x")
    plan = p.plan("c")
    op = plan.operator("join")
    assert (op.parallelism, op.stateful, op.description["op"]) == (3, True, "co_process")
    assert [(e.input_name, e.kind, e.schema) for e in plan.inputs_of("join")] == [
        ("a", "hash", EVENT),
        ("b", "hash", OTHER),
    ]
    with pytest.raises(PipelineDefinitionError, match="stream 'a' is on both sides"):
        connect(a, a)


# -- the co-process logic -----------------------------------------------------------------


def remember(r: dict[str, Any], ctx: ProcessContext) -> list[dict[str, Any]]:
    """Input b: keep the latest value per key; release the a records waiting for it."""
    ctx.value("b").update(r["v"])
    waiting = ctx.list("waiting").get()
    ctx.list("waiting").clear()
    return [{"k": ctx.key, "seq": s, "v": r["v"]} for s in waiting]


def enrich(r: dict[str, Any], ctx: ProcessContext) -> list[dict[str, Any]]:
    """Input a: joined with b's latest value of the key, or kept until one comes."""
    if r.get("bad"):
        ctx.value("b").update("spoiled")
        raise ValueError("bad a record")
    v = ctx.value("b").value()
    if v is None:
        ctx.list("waiting").add(r["seq"])
        ctx.timers.register_event_time(10_000)
        return []
    return [{"k": ctx.key, "seq": r["seq"], "v": v}]


def unmatched(ts: int, ctx: ProcessContext) -> list[dict[str, Any]]:
    return [{"k": ctx.key, "seq": s, "v": None} for s in ctx.list("waiting").get()]


def co() -> CoProcessLogic:
    return CoProcessLogic(
        {"a": (lambda r: r["k"], enrich, None), "b": (lambda r: r["key"], remember, None)},
        unmatched,
    )


def test_co_process_inputs_share_keyed_state_and_timers() -> None:
    logic, ctx = co(), Ctx()
    logic.open(ctx)
    a = logic.process_input
    assert a("a", [{"k": "x", "seq": 1}, {"k": "y", "seq": 2}]) == []
    assert logic.process_input("b", [{"key": "x", "v": "X1"}]) == [{"k": "x", "seq": 1, "v": "X1"}]
    assert a("a", [{"k": "x", "seq": 3}]) == [{"k": "x", "seq": 3, "v": "X1"}]
    # A call that fails changes nothing (it would be dead-lettered and not applied).
    with pytest.raises(ValueError, match="bad a record"):
        a("a", [{"k": "x", "seq": 4}, {"k": "x", "bad": True}])
    assert a("a", [{"k": "x", "seq": 5}]) == [{"k": "x", "seq": 5, "v": "X1"}]
    # After a restart, state and the pending timer come back from the keyed state.
    again = co()
    again.open(restored(ctx, None))
    assert again.process_input("b", [{"key": "x", "v": "X2"}]) == []
    assert again.process_input("a", [{"k": "x", "seq": 6}]) == [{"k": "x", "seq": 6, "v": "X2"}]
    assert again.on_end() == [{"k": "y", "seq": 2, "v": None}]  # y's b never came
    with pytest.raises(PipelineDefinitionError, match="input 'c'"):
        again.process_input("c", [{}])
    with pytest.raises(TypeError, match="process_input"):
        again.process([{}])


def test_the_processor_calls_process_input_with_the_input_name() -> None:
    logic, ctx = co(), Ctx()
    logic.open(ctx)
    input_call(logic, lambda: "b")([{"key": "x", "v": "X"}])
    got = input_call(logic, lambda: "a")([{"k": "x", "seq": 1}])
    assert got == [{"k": "x", "seq": 1, "v": "X"}]
    assert input_call(logic, None) == logic.process  # no channel input: plain process


# -- the processor hands each channel message to its input's function ---------------------

TA, TB = TopicPartition("spillway.j.ch.a.join", 0), TopicPartition("spillway.j.ch.b.join", 0)


@dataclass
class TwoInputReader(ScriptedReader):
    def input_of(self, tp: TopicPartition) -> str:
        return {TA: "a", TB: "b"}[tp]


def test_the_processor_gives_each_message_to_the_function_of_its_input() -> None:
    reader = TwoInputReader(
        [
            [Delivery(TA, 0, 0, Kind.DATA, [{"k": "x", "seq": 1}])],
            [Delivery(TB, 0, 0, Kind.DATA, [{"key": "x", "v": "X"}])],
            [Delivery(TA, 1, 0, Kind.DATA, [{"k": "x", "seq": 2}, {"k": "x", "bad": True}])],
        ]
    )
    logic, ctx = co(), Ctx()
    logic.open(ctx)
    p, _caught, writer = processor(reader, logic=logic)
    assert p.step() == Step(ended=False)
    assert p.step() == Step(ended=False)
    assert writer.written == [{"k": "x", "seq": 1, "v": "X"}]
    # A failing record is named with its input's channel and offset; nothing of the
    # failed call is applied or written.
    with pytest.raises(RecordError, match=r"operator 'double' failed on .*ch\.a\.join.*1"):
        p.step()
    assert writer.written == [{"k": "x", "seq": 1, "v": "X"}]
    assert ctx.state.get(("v", "x", "b")) == "X"


def test_each_input_brings_its_own_event_time_to_ctx_timestamp() -> None:
    seen: list[tuple[str, int | None]] = []

    def note(side: str) -> Any:
        return lambda r, ctx: seen.append((side, ctx.timestamp))

    logic = CoProcessLogic(
        {"a": (lambda r: 1, note("a"), lambda r: r["t"]), "b": (lambda r: 1, note("b"), None)}
    )
    logic.open(Ctx())
    logic.process_input("a", [{"t": 7}])
    logic.process_input("b", [{"t": 9}])
    assert seen == [("a", 7), ("b", None)]
