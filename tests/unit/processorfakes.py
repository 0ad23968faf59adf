"""A processor with fake neighbours given at construction: a scripted reader, doubling logic,
a recording writer, fake triggers (no broker): test_processor, test_pollfold, test_paths and
test_coprocess share them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from spillway.channels.ids import JobId, Offset, OperatorName, SubtaskId, TopicPartition
from spillway.channels.reader import Delivery
from spillway.recovery.runtime.cadence import Cadence, UnalignedCadence
from spillway.recovery.runtime.crashpoints import CrashPoints
from spillway.recovery.runtime.eventtime import SetAsides
from spillway.recovery.runtime.faults import Faults
from spillway.recovery.runtime.options import RunOptions, SubtaskResult
from spillway.recovery.runtime.processor import Continuation, Processor

SUB = SubtaskId(JobId("j"), OperatorName("double"), 0)
TP = TopicPartition("spillway.j.ch.a.double", 0)


@dataclass
class ScriptedReader:
    """A channel reader that returns ``polls`` one poll at a time and records what it was
    asked; it is finished once they are used up."""

    polls: list[list[Delivery]]
    pos: int = 0
    asked: list[tuple[int, float, bool]] = field(default_factory=list)

    def poll(self, n: int, wait_s: float, *, stop_after_barrier: bool = False) -> list[Delivery]:
        self.asked.append((n, wait_s, stop_after_barrier))
        out = self.polls.pop(0) if self.polls else []
        if out:
            self.pos = out[-1].offset + 1
        return out

    def positions(self) -> dict[TopicPartition, Offset]:
        return {TP: Offset(self.pos)}

    def watermark(self) -> int | None:
        return None

    def idle(self) -> bool:
        return False

    def finished(self) -> bool:
        return not self.polls


@dataclass
class Doubling:
    """Operator logic that doubles each record and sets nothing aside."""

    def process(self, records: Sequence[Any]) -> list[Any]:
        return [r * 2 for r in records]

    def set_aside(self) -> list[Any]:
        return []


@dataclass
class FakeWriter:
    """A channel writer that keeps what it was given."""

    written: list[Any] = field(default_factory=list)

    def write_many(self, records: list[Any]) -> None:
        self.written.extend(records)


@dataclass
class FakeTriggers:
    """Checkpoint triggers that always report trigger ``n`` (-1: none yet), never seen."""

    n: int = -1

    def trigger(self) -> int:
        return self.n

    def seen_at(self, n: int) -> float | None:
        return None


def processor(
    reader: ScriptedReader,
    logic: Any = None,
    cadence: Cadence | None = None,
    continuation: Continuation | None = None,
) -> tuple[Processor, list[str], FakeWriter]:
    """A :class:`Processor` of subtask :data:`SUB` over ``reader`` (default logic
    :class:`Doubling`, unaligned cadence), the list its caught-up callback appends to, and
    its one :class:`FakeWriter`."""
    caught: list[str] = []
    result = SubtaskResult(str(SUB), 1, "running")
    writer = FakeWriter()
    p = Processor(
        SUB,
        SUB.operator,
        RunOptions(trigger_chunk=2),
        (None, logic if logic is not None else cast(Any, Doubling()), None),
        None,
        SetAsides(SUB, None),
        CrashPoints(Faults(SUB, 1, "")),
        result,
        cast(Any, None),  # no read marks in this test (tick is not called)
        lambda: caught.append("caught up"),
        cast(Any, reader),
        [cast(Any, writer)],
        cadence if cadence is not None else UnalignedCadence(FakeTriggers(), 2),
        continuation if continuation is not None else Continuation(),
    )
    return p, caught, writer
