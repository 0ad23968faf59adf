"""The processor with fake neighbours, every one given at construction: a scripted reader,
fake logic and writers, the real unaligned cadence (the checkpoints its steps ask for are
recorded, not committed)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from spillway.channels.ids import Offset
from spillway.channels.reader import Delivery
from spillway.channels.wire.envelope import Kind
from spillway.recovery.restore.progress import Replay
from spillway.recovery.runtime.cadence import Cadence, UnalignedCadence
from spillway.recovery.runtime.crashpoints import CrashPoints
from spillway.recovery.runtime.eventtime import SetAsides
from spillway.recovery.runtime.faults import Faults
from spillway.recovery.runtime.options import RunOptions, SubtaskResult
from spillway.recovery.runtime.processor import Continuation, Processor
from spillway.recovery.runtime.requests import InsideMessage, Partial, Step
from tests.unit.processorfakes import (
    SUB,
    TP,
    Doubling,
    FakeTriggers,
    ScriptedReader,
    processor,
)


def data(offset: int, records: list[int]) -> Delivery:
    return Delivery(TP, offset, 0, Kind.DATA, records)


def steps(
    p: Processor, taken: list[tuple[int, Partial | None]], cadence: Cadence | None = None
) -> Step:
    """Step as the task loop does: record each checkpoint asked for (and tell ``cadence``
    it was taken, as the checkpointer does once it committed), go on at once inside a
    message, until a step ends between messages."""
    while True:
        step = p.step()
        if step.request is not None:
            at = step.request.at if isinstance(step.request, InsideMessage) else None
            taken.append((step.request.n, at))
            if cadence is not None:
                cadence.taken(step.request.n)
        if not step.inside_message:
            return step


def test_records_flow_through_the_logic_to_the_writers_and_replay_is_counted() -> None:
    reader = ScriptedReader([[data(0, [1, 2])], [data(1, [3])]])
    replay = Replay({TP: Offset(0)}, {TP: 2}, "read")
    p, caught, writer = processor(reader, continuation=Continuation(replay=replay))
    taken: list[tuple[int, Partial | None]] = []
    assert steps(p, taken) == Step(ended=False)
    assert caught == []
    assert steps(p, taken) == Step(ended=True)  # the reader has ended
    assert writer.written == [2, 4, 6]
    assert (p.result.records_in, p.result.records_out) == (3, 3)
    assert p.replay.figure == {str(TP): [0, 2, 3]}
    assert caught == ["caught up"]
    assert reader.asked[0] == (1, 0.01, True)  # unaligned: one message per poll
    assert taken == []


def test_a_restored_mid_message_checkpoint_skips_what_was_done_and_a_trigger_cuts_in() -> None:
    reader = ScriptedReader([[data(7, [1, 2, 3, 4, 5, 6])]])
    triggers = FakeTriggers()
    cadence = UnalignedCadence(triggers, 2)
    # Its first record was processed before the restore.
    resumed = Continuation(resume={(TP, 7): 1})
    p, _, writer = processor(reader, cadence=cadence, continuation=resumed)
    taken: list[tuple[int, Partial | None]] = []
    triggers.n = 5
    steps(p, taken, cadence)
    assert writer.written == [4, 6, 8, 10, 12]
    # After the first chunk (records 2-3 of the message): 1 + 2 done.
    assert taken == [(5, (TP, 7, 3))]
    assert p.result.records_in == 5


@dataclass
class ListSink:
    rows: list[Any] = field(default_factory=list)

    def write(self, records: Sequence[Any]) -> None:
        self.rows.extend(records)


def test_a_sink_reports_the_rows_it_wrote_as_records_out() -> None:
    """Sinks once reported records_out 0 although they wrote rows."""
    sink = ListSink()
    p = Processor(
        SUB,
        SUB.operator,
        RunOptions(),
        (None, None, cast(Any, sink)),
        None,
        SetAsides(SUB, None),
        CrashPoints(Faults(SUB, 1, "")),
        SubtaskResult(str(SUB), 1, "running"),
        cast(Any, None),
        lambda: None,
        cast(Any, ScriptedReader([[data(0, [1, 2])], [data(1, [3])]])),
        [],
        UnalignedCadence(FakeTriggers(), 2),
        Continuation(),
    )
    while not p.step().ended:
        pass
    assert sink.rows == [1, 2, 3]
    assert (p.result.records_in, p.result.records_out) == (3, 3)


@dataclass
class SlowDoubling(Doubling):
    def process(self, records: Sequence[Any]) -> list[Any]:
        time.sleep(0.05)
        return super().process(records)


@dataclass
class WaitingReader(ScriptedReader):
    def poll(self, n: int, wait_s: float, *, stop_after_barrier: bool = False) -> list[Delivery]:
        time.sleep(0.2)  # waiting for input: not busy
        return super().poll(n, wait_s, stop_after_barrier=stop_after_barrier)


def test_busy_time_counts_processing_not_waiting_for_input() -> None:
    p, _, writer = processor(WaitingReader([[data(0, [1, 2])], [data(1, [3])]]), SlowDoubling())
    while not steps(p, []).ended:
        pass
    assert writer.written == [2, 4, 6]
    # two calls of 50 ms each; the 400 ms the reader waited are not in it
    assert 0.1 <= p.result.busy_s < 0.3
