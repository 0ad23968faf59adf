"""How operators stamp their outputs with event time, so it travels with each record
(spillway.spark_jobs.operators.stamping), on fakes. No broker."""

from __future__ import annotations

from typing import Any, cast

import pytest

from spillway.channels.errors import RecordError
from spillway.channels.ids import JobId, OperatorName, SubtaskId
from spillway.channels.wire.stamps import stamped, time_of
from spillway.recovery.job.origins import Same, TopicOffset
from spillway.recovery.runtime.failures import run_diverting
from spillway.spark_jobs.api.recordtime import FieldTime
from spillway.spark_jobs.operators.operators import (
    FilterLogic,
    FlatMapLogic,
    KeyedAggregateLogic,
    MapLogic,
)
from spillway.spark_jobs.operators.process import ProcessContext, ProcessLogic
from spillway.spark_jobs.operators.stamping import (
    CarriedTime,
    EachStamping,
    ReaderStamping,
    StampingSource,
    stamping_logic,
)
from tests.unit.aggfakes import Ctx


def test_record_at_a_time_operators_give_each_output_its_inputs_time() -> None:
    ins = [stamped({"k": "a", "v": v}, 100 + v) for v in range(6)]
    cases: list[tuple[Any, list[tuple[Any, int | None]]]] = [
        (MapLogic(lambda r: {"v": r["v"] * 2}), [(2 * v, 100 + v) for v in range(6)]),
        (
            FlatMapLogic(lambda r: [{"v": r["v"]}] * (r["v"] % 3)),
            [(v, 100 + v) for v in range(6) for _ in range(v % 3)],
        ),
        (FilterLogic(lambda r: r["v"] % 2 == 0), [(v, 100 + v) for v in (0, 2, 4)]),
    ]
    for logic, want in cases:
        stamping = EachStamping(logic)
        stamping.open(Ctx())
        got = stamping.process(ins)
        assert [(r["v"], time_of(r)) for r in got] == want
    running = stamping_logic(_running_sum(), None)  # stamps within its own call
    running.open(Ctx())
    assert [(r["v"], time_of(r)) for r in running.process(ins[:3])] == [
        (0, 100), (1, 101), (3, 102)]  # fmt: skip


def _running_sum() -> KeyedAggregateLogic:
    def add(n: int, r: dict[str, Any]) -> int:
        if r["v"] < 0:
            raise ValueError("a negative amount")
        return n + int(r["v"])

    return KeyedAggregateLogic(
        lambda r: r["k"], lambda: 0, add, lambda k, n: {"k": k, "v": n}, "updates"
    )


class _DeadLetters:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, **letter: Any) -> None:
        self.sent.append(letter)


def test_a_stateful_operator_stamping_keeps_a_failed_call_from_writing_state() -> None:
    # A message whose third record fails: the call fails whole, so with dead letters the
    # good records are run again one by one. Each must be folded in once, not twice.
    ins = [stamped({"k": "a", "v": v}, 100 + i) for i, v in enumerate([1, 2, -1, 4])]
    running = stamping_logic(_running_sum(), None)
    ctx = Ctx()
    running.open(ctx)
    dead = _DeadLetters()
    subtask = SubtaskId(JobId("j"), OperatorName("agg"), 0)
    origins = Same(TopicOffset("t", 0, 7))
    out = run_diverting(running.process, ins, origins, subtask, "agg", cast(Any, dead))
    assert [(r["v"], time_of(r)) for r in out] == [(1, 100), (3, 101), (7, 103)]
    assert ctx.state.get("a") == 7
    assert [d["record"]["v"] for d in dead.sent] == [-1]


def test_one_call_per_record_is_refused_for_an_operator_with_state() -> None:
    with pytest.raises(TypeError, match="KeyedAggregateLogic keeps state"):
        EachStamping(_running_sum())


def test_a_process_function_stamps_records_with_their_input_and_event_timers_with_their_time() -> (
    None
):
    def fn(r: dict[str, Any], ctx: ProcessContext) -> list[dict[str, Any]]:
        ctx.timers.register_event_time(ctx.timestamp + 50)
        ctx.timers.register_processing_time(10)
        return [{"at": ctx.timestamp}]

    def on_timer(ts: int, ctx: ProcessContext) -> list[dict[str, Any]]:
        return [{"at": -ts}]

    logic = stamping_logic(
        ProcessLogic(lambda r: r["k"], fn, on_timer, time_of, clock=lambda: 0), None
    )
    logic.open(Ctx())
    got = logic.process([stamped({"k": "a"}, 10), stamped({"k": "b"}, 30)])
    assert [(r["at"], time_of(r)) for r in got] == [(10, 10), (30, 30)]
    fired = logic.on_watermark(100)
    assert [(r["at"], time_of(r)) for r in fired] == [(-60, 60), (-80, 80)]  # the timers'
    later = logic.on_processing_time(20)
    assert [time_of(r) for r in later] == [None, None]  # processing time: no event time


def test_window_results_carry_end_minus_one() -> None:
    class Window:
        def open(self, ctx: Any) -> None: ...
        def process(self, rs: Any) -> list[Any]:
            return [{"end": 100}]  # emit="updates"

        def on_watermark(self, wm: int) -> list[Any]:
            return [{"end": wm}]

        def on_end(self) -> list[Any]:
            return [{"end": 7}]

        def set_aside(self) -> list[Any]:
            return []

    logic = ReaderStamping(Window(), FieldTime("end", -1))
    assert [time_of(r) for r in logic.process([])] == [99]
    assert [time_of(r) for r in logic.on_watermark(1000)] == [999]
    assert [time_of(r) for r in logic.on_end()] == [6]


def test_a_source_stamps_what_it_read_with_its_declared_time() -> None:
    class Read:
        def __init__(self) -> None:
            self.batches: list[list[Any] | None] = [[{"ts": 3}, {"ts": 1}], None]

        def read(self, n: int) -> list[Any] | None:
            return self.batches.pop(0)

        def progress(self) -> tuple[int, int]:
            return 2, 2

    src = StampingSource(cast(Any, Read()), FieldTime("ts"))
    assert [time_of(r) for r in src.read(10) or []] == [3, 1]
    assert src.read(10) is None
    assert src.progress() == (2, 2)  # the rest is the inner source's


def test_a_window_reading_carried_time_names_itself_for_a_record_without_one() -> None:
    read = CarriedTime("win")
    assert read(stamped({}, 5)) == 5
    with pytest.raises(RecordError, match="operator 'win': record \\{'a': 1\\} carries no event"):
        read({"a": 1})
