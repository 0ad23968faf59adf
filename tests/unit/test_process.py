"""The keyed process function: state, timers, TTL, failure atomicity, restore. No broker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spillway.channels.errors import PipelineDefinitionError
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.operators.operators import ChainedLogic, MapLogic
from spillway.spark_jobs.operators.process import ProcessContext, ProcessLogic
from tests.integration import keyedops
from tests.unit.operatorfakes import Ctx, restored


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def per_second(r: dict[str, Any], ctx: ProcessContext) -> Iterator[dict[str, Any]]:
    """Counts a key's records per second of event time; a timer closes each second."""
    assert ctx.timestamp is not None
    ctx.value("count").update(ctx.value("count").value(0) + 1)
    ctx.list("seqs").add(r["seq"])
    ctx.map("last").put("seq", r["seq"])
    ctx.timers.register_event_time(ctx.timestamp - ctx.timestamp % 1000 + 1000)
    if r.get("bad"):
        raise ValueError("bad record")
    yield from ()


def close_second(ts: int, ctx: ProcessContext) -> list[dict[str, Any]]:
    out = {
        "key": ctx.key,
        "ts": ts,
        "n": ctx.value("count").value(),
        "seqs": ctx.list("seqs").get(),
    }
    assert ctx.time_domain == "event"
    assert ctx.map("last").contains("seq")
    ctx.value("count").clear()
    ctx.list("seqs").clear()
    return [out]


def make(clock: Clock | None = None, **kw: Any) -> ProcessLogic:
    return ProcessLogic(
        lambda r: r["key"], per_second, close_second, lambda r: r["t"], clock=clock or Clock(), **kw
    )


def test_event_time_timers_fire_once_in_order_with_the_keys_state() -> None:
    logic, ctx = make(), Ctx()
    logic.open(ctx)
    recs = [
        {"key": k, "t": t, "seq": i}
        for i, (k, t) in enumerate([("a", 100), ("b", 1500), ("a", 900), ("a", 1200)])
    ]
    assert logic.process(recs) == []
    assert len(logic.event) == 3  # (a, 1000), (b, 2000), (a, 2000): one per key and time
    assert logic.on_watermark(999) == []
    assert logic.on_watermark(2000) == [
        # state is per key, not per timer: a's 1200 arrived before the 1000 timer fired
        {"key": "a", "ts": 1000, "n": 3, "seqs": [0, 2, 3]},
        {"key": "a", "ts": 2000, "n": None, "seqs": []},
        {"key": "b", "ts": 2000, "n": 1, "seqs": [1]},
    ]
    assert logic.on_watermark(5000) == []
    # Only the map state is left; fired timers are gone from state too.
    assert sorted(k for k, _ in ctx.state.items()) == [("m", "a", "last"), ("m", "b", "last")]


def test_pending_timers_and_state_are_restored_from_keyed_state() -> None:
    recs = [{"key": f"k{i % 3}", "t": 137 * i, "seq": i} for i in range(40)]
    whole, ctx = make(), Ctx()
    whole.open(ctx)
    expected = whole.process(recs[:20]) + whole.on_watermark(1000)
    expected += whole.process(recs[20:]) + whole.on_end()
    first, ctx = make(), Ctx()
    first.open(ctx)
    got = first.process(recs[:20]) + first.on_watermark(1000)
    second = make()
    second.open(restored(ctx, 1000))  # as after a kill: timers come back from the state
    assert len(second.event) == len(first.event) > 0
    got += second.process(recs[20:]) + second.on_end()
    assert got == expected
    assert sum(o["n"] or 0 for o in got) == 40


def test_a_failing_call_changes_neither_state_nor_timers() -> None:
    logic, ctx = make(), Ctx()
    logic.open(ctx)
    logic.process([{"key": "a", "t": 10, "seq": 1}])
    before = sorted(ctx.state.items(), key=repr)
    with pytest.raises(ValueError, match="bad record"):
        logic.process(
            [{"key": "a", "t": 20, "seq": 2}, {"key": "b", "t": 3000, "seq": 3, "bad": True}]
        )
    assert sorted(ctx.state.items(), key=repr) == before
    assert len(logic.event) == 1


def test_processing_time_timers_fire_on_the_clock() -> None:
    def fn(r: dict[str, Any], ctx: ProcessContext) -> None:
        ctx.timers.register_processing_time(r["at"])
        if r.get("cancel"):
            ctx.timers.delete_processing_time(r["cancel"])

    def on_timer(ts: int, ctx: ProcessContext) -> list[Any]:
        assert ctx.time_domain == "processing"
        return [(ctx.key, ts)]

    logic, ctx = ProcessLogic(lambda r: r["key"], fn, on_timer, clock=Clock()), Ctx()
    logic.open(ctx)
    logic.process(
        [
            {"key": "a", "at": 5000},
            {"key": "b", "at": 3000},
            {"key": "a", "at": 4000, "cancel": 5000},
        ]
    )
    assert logic.on_processing_time(2999) == []
    assert logic.on_processing_time(10_000) == [("b", 3000), ("a", 4000)]
    assert len(ctx.state) == 0
    assert logic.on_end() == []


def test_state_ttl_hides_expired_state_and_a_timer_removes_it() -> None:
    clock = Clock()

    def fn(r: dict[str, Any], ctx: ProcessContext) -> list[Any]:
        seen = ctx.value("seen")
        out = [(ctx.key, seen.value(), ctx.list("keep").get())]
        seen.update(r["v"])
        ctx.list("keep").add(r["v"])
        return out

    logic, ctx = ProcessLogic(lambda r: r["key"], fn, clock=clock, ttl_ms={"seen": 500}), Ctx()
    logic.open(ctx)
    assert logic.process([{"key": "a", "v": 1}]) == [("a", None, [])]
    clock.now += 499
    assert logic.process([{"key": "a", "v": 2}]) == [("a", 1, [1])]  # the write renews it
    clock.now += 499
    assert logic.process([{"key": "a", "v": 3}]) == [("a", 2, [1, 2])]
    clock.now += 500
    assert logic.process([{"key": "b", "v": 9}]) == [("b", None, [])]
    assert logic.process([{"key": "a", "v": 4}]) == [("a", None, [1, 2, 3])]  # expired: unseen
    clock.now += 10_000
    assert ("v", "a", "seen") in dict(ctx.state.items())
    logic.on_processing_time(clock.now)
    keys = sorted(k for k, _ in ctx.state.items())
    assert keys == [("l", "a", "keep"), ("l", "b", "keep")]  # TTL'd state cleaned, the rest kept
    # After a restore the clean-up timers come back from the state's write times.
    again = ProcessLogic(lambda r: r["key"], fn, clock=clock, ttl_ms={"seen": 500})
    logic.process([{"key": "c", "v": 1}])
    again.open(restored(ctx, None))
    assert len(again.processing) == 1
    again.on_processing_time(clock.now + 500)
    assert ("v", "c", "seen") not in dict(again._state().items())


def test_a_chain_passes_the_clock_to_its_process_function() -> None:
    def fn(r: dict[str, Any], ctx: ProcessContext) -> None:
        ctx.timers.register_processing_time(r["at"])

    def on_timer(ts: int, ctx: ProcessContext) -> list[Any]:
        return [{"key": ctx.key, "ts": ts}]

    chain = ChainedLogic(
        [MapLogic(dict), ProcessLogic(lambda r: r["key"], fn, on_timer, clock=Clock())]
    )
    chain.open(Ctx())
    chain.process([{"key": "a", "at": 50}])
    assert chain.on_processing_time(49) == []
    assert chain.on_processing_time(50) == [{"key": "a", "ts": 50}]


def test_process_through_the_pipeline_api() -> None:
    p = Pipeline("proc")
    events = p.read_kafka("events", "in", schema=keyedops.EVENT, timestamp=lambda r: r["ts"])
    events.key_by(lambda r: r["key"]).process(
        "proc", keyedops.per_second, on_timer=keyedops.close_second, schema=keyedops.WINDOW
    ).write_jsonl("out", "/x")
    op = p.plan("j").operator("proc")
    assert op.stateful
    assert op.description == {"op": "process", "ttl_ms": {}}
    assert op.make_logic is not None
    logic = op.make_logic()
    logic.open(Ctx())
    logic.process([{"seq": 1, "key": "a", "ts": 1500, "kind": "on"}])
    assert list(logic.on_watermark(2000)) == [
        {"key": "a", "start": 1000, "end": 2000, "count": 1, "seqs": 1}
    ]
    with pytest.raises(PipelineDefinitionError, match="ttl_ms\\['x'\\] must be >= 1, got 0"):
        events.key_by(lambda r: r["key"]).process(
            "p2", keyedops.per_second, ttl_ms={"x": 0}, schema=keyedops.WINDOW
        )
    with pytest.raises(PipelineDefinitionError, match="operator 'p3' has no schema"):
        events.key_by(lambda r: r["key"]).process("p3", keyedops.per_second)
