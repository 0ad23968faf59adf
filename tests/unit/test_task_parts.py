"""The processor, the checkpointer and the task loop built whole from fakes (every field
given at construction, none set afterwards), run together: a step says what happened and
which checkpoint it asks for, and the loop alone has the checkpointer take it."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from spillway.channels.ids import JobId, Offset, OperatorName, SubtaskId, TopicPartition
from spillway.channels.progress import ReaderState, Spans
from spillway.channels.reader import Delivery
from spillway.channels.wire.envelope import Kind
from spillway.offsets.checkpoint import Checkpoint
from spillway.recovery.runtime.cadence import make_cadence
from spillway.recovery.runtime.checkpointer import Checkpointer, Observers, Parts
from spillway.recovery.runtime.crashpoints import CrashPoints
from spillway.recovery.runtime.eventtime import SetAsides
from spillway.recovery.runtime.faults import Faults
from spillway.recovery.runtime.lifecycle import Lifecycle, Phase
from spillway.recovery.runtime.livestats import LiveStats
from spillway.recovery.runtime.options import RunOptions, SubtaskResult
from spillway.recovery.runtime.processor import Continuation, Processor
from spillway.recovery.runtime.requests import AtBarrier, InsideMessage, Step
from spillway.recovery.runtime.taskloop import Outcome, TaskLoop
from tests.unit.processorfakes import FakeTriggers

SUB = SubtaskId(JobId("j"), OperatorName("double"), 0)
TP = TopicPartition("spillway.j.ch.a.double", 0)
OUT = "spillway.j.ch.double.sink"


@dataclass
class Reader:
    """Polled by the processor, asked by the checkpointer; aligns at ``align_at`` after
    its first poll if given; ended once its polls are used up."""

    calls: list[str]
    polls: list[list[Delivery]]
    align_at: int | None = None
    pos: int = 0
    state: ReaderState = field(default_factory=ReaderState)
    _held: int | None = None

    def poll(self, n: int, wait_s: float, *, stop_after_barrier: bool = False) -> list[Delivery]:
        out = self.polls.pop(0) if self.polls else []
        if out:
            self.pos = out[-1].offset + 1
        if self.align_at is not None:
            self._held, self.align_at = self.align_at, None
        return out

    def aligned(self) -> int | None:
        return self._held

    def consume_barrier(self, n: int) -> None:
        self.calls.append(f"consume {n}")

    def release(self, n: int) -> None:
        self.calls.append(f"release {n}")
        self._held = None

    def positions(self) -> dict[TopicPartition, Offset]:
        return {TP: Offset(self.pos)}

    def discard_state(self) -> dict[TopicPartition, dict[int, Spans]]:
        return {}

    def skip_state(self) -> dict[TopicPartition, dict[int, int]]:
        return {}

    def open_records(self) -> int:
        return 0

    def watermark(self) -> int | None:
        return None

    def idle(self) -> bool:
        return False

    def finished(self) -> bool:
        return not self.polls and self._held is None


@dataclass
class Writer:
    """What the processor writes to and the checkpointer asks."""

    calls: list[str]
    written: list[Any] = field(default_factory=list)
    barriers: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=lambda: [0])
    topic: str = OUT
    spanned: int = 0

    def write_many(self, records: list[Any]) -> None:
        self.calls.append(f"write {records}")
        self.written.extend(records)

    def tick(self) -> None:
        pass

    def end_of_stream(self) -> None:
        self.calls.append("end of stream")

    def watermark(self, wm: int) -> None:
        pass

    def idle(self) -> None:
        pass

    def flush_batches(self) -> None:
        pass

    def marks(self) -> tuple[int, ...]:
        return (0,)

    def barrier(self, n: int) -> None:
        self.barriers.append(n)


@dataclass
class Doubling:
    def process(self, records: Sequence[Any]) -> list[Any]:
        return [r * 2 for r in records]

    def set_aside(self) -> list[Any]:
        return []

    def on_end(self) -> list[Any]:
        return []

    def on_watermark(self, wm: int) -> list[Any]:
        return []


@dataclass
class Progress:
    """The read-mark log: never due on its own here; records what checkpoints wrote."""

    marks: list[Mapping[TopicPartition, Offset]] = field(default_factory=list)

    def due(self, now: float) -> bool:
        return False

    def write(self, attempt: int, inputs: Mapping[TopicPartition, Offset], source: object) -> None:
        self.marks.append(dict(inputs))


@dataclass
class Producer:
    calls: list[str]
    txn_bytes: int = 0

    def flush(self, timeout_s: float = 30.0) -> None:
        pass

    def last_offset(self, tp: TopicPartition) -> Offset | None:
        return None

    def begin(self) -> None:
        self.calls.append("begin")


class Collector:
    def prepare_commit(self, has_writers: bool) -> None:
        pass


@dataclass
class Events:
    emitted: list[str] = field(default_factory=list)

    def emit(self, kind: str, **fields: Any) -> None:
        self.emitted.append(kind)


class Store:
    def prune(self, index: int, keep: int, keep_global: int = 0) -> None:
        pass


@dataclass
class Task:
    loop: TaskLoop
    processor: Processor
    checkpointer: Checkpointer
    committed: list[Checkpoint]
    calls: list[str]
    writer: Writer
    events: Events
    lifecycle: Lifecycle


def task(
    mode: str, polls: list[list[Delivery]], triggers: FakeTriggers, align_at: int | None = None
) -> Task:
    """One subtask's parts, each built with everything it works with."""
    calls: list[str] = []
    committed: list[Checkpoint] = []

    def commit(p: Any, c: Checkpoint, meta: object, reached: Callable[[str], None] | None) -> None:
        calls.append(f"commit {c.meta.global_id}")
        committed.append(c)

    lifecycle = Lifecycle()
    lifecycle.to(Phase.RESTORING)
    lifecycle.to(Phase.RUNNING)
    options = RunOptions(checkpoint_mode=mode, trigger_chunk=2)
    reader, writer, events = Reader(calls, polls, align_at), Writer(calls), Events()
    result = SubtaskResult(str(SUB), 0, "running")
    crash = CrashPoints(Faults(SUB, 0, ""))
    cadence = make_cadence(mode, triggers, options.trigger_chunk, None)
    aside = SetAsides(SUB, None)
    processor = Processor(
        SUB,
        SUB.operator,
        options,
        (None, cast(Any, Doubling()), None),
        None,
        aside,
        crash,
        result,
        cast(Any, Progress()),
        lambda: None,
        cast(Any, reader),
        [cast(Any, writer)],
        cadence,
        Continuation(),
    )
    checkpointer = Checkpointer(
        SUB,
        "fp",
        0,
        Producer(calls),
        Collector(),
        commit,
        Store(),
        options,
        triggers,
        Observers(lifecycle, LiveStats(), result, events, crash),
        cadence,
        Parts(
            reader=reader,
            writers=[writer],
            watermark=lambda: processor.watermark_out,
            set_aside=aside.counts,
            mark=processor.mark,
        ),
        None,
    )
    loop = TaskLoop(processor, checkpointer, cadence, lambda: False, True, lifecycle)
    return Task(loop, processor, checkpointer, committed, calls, writer, events, lifecycle)


def data(offset: int, records: list[int]) -> Delivery:
    return Delivery(TP, offset, 0, Kind.DATA, records)


def test_a_trigger_inside_a_message_is_taken_by_the_loop_between_its_chunks() -> None:
    t = task("unaligned", [[data(0, [1, 2, 3, 4, 5])]], FakeTriggers(n=1))
    assert t.loop.run() is Outcome.FINISHED
    # The step stopped after the first chunk; the loop took checkpoint 1 there and stepped
    # on at once with the rest of the message; then the final checkpoint.
    assert t.calls == [
        "write [2, 4]",
        "commit 1",
        "begin",
        "write [6, 8]",
        "write [10]",
        "end of stream",
        "commit None",
    ]
    partial, final = t.committed
    assert (partial.meta.global_id, partial.reader.inputs, partial.reader.partial) == (
        1,
        {TP: 0},
        {TP: (0, 2)},
    )
    assert (final.meta.global_id, final.meta.finished, final.reader.inputs) == (None, True, {TP: 1})
    assert t.writer.barriers == [1]
    assert t.events.emitted == ["checkpointed"]
    assert t.lifecycle.phase is Phase.FINISHED


def test_an_aligned_barrier_is_taken_by_the_loop_and_released_after_its_commit() -> None:
    t = task("aligned", [[data(0, [1])], [data(1, [2])]], FakeTriggers(), align_at=4)
    assert t.loop.run() is Outcome.FINISHED
    assert t.calls == [
        "write [2]",
        "consume 4",
        "commit 4",
        "begin",
        "release 4",
        "write [4]",
        "end of stream",
        "commit None",
    ]
    assert [c.meta.global_id for c in t.committed] == [4, None]
    assert t.writer.barriers == [4]


def test_a_step_reports_its_request_and_takes_nothing_itself() -> None:
    t = task("unaligned", [[data(0, [1, 2, 3])], [data(1, [4])]], FakeTriggers(n=2))
    assert t.processor.step() == Step(False, InsideMessage(2, (TP, 0, 2)))
    assert t.committed == []  # the processor holds no checkpointer: only the loop commits
    t.checkpointer.take(request=InsideMessage(2, (TP, 0, 2)))
    assert t.processor.step() == Step(ended=False)  # the rest of the message
    assert t.processor.step() == Step(ended=True)
    assert t.writer.written == [2, 4, 6, 8]
    assert [c.meta.global_id for c in t.committed] == [2]


def test_the_trigger_of_a_source_in_the_aligned_mode_comes_through_the_loop() -> None:
    t = task("aligned", [], FakeTriggers(n=3))
    cadence = t.checkpointer.cadence
    assert cadence.on_loop(reads_channels=True) is None  # readers act on barriers
    assert cadence.on_loop(reads_channels=False) == 3
    t.checkpointer.take(request=AtBarrier(3))
    assert cadence.on_loop(reads_channels=False) is None  # taken: not newer any more
    assert [c.meta.global_id for c in t.committed] == [3]


# -- no part sets another part's field -----------------------------------------------------

RUNTIME = Path(__file__).resolve().parents[2] / "recovery" / "runtime"


def _foreign_field_assignments(source: str) -> list[str]:
    """Assignments to a field of anything but ``self``; the result record
    (:class:`~spillway.recovery.runtime.options.SubtaskResult`), which the parts report
    their figures to, is the one shared record they may write."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        while targets:
            t = targets.pop()
            if isinstance(t, ast.Tuple):
                targets.extend(t.elts)
            elif isinstance(t, ast.Subscript):
                targets.append(t.value)
            elif isinstance(t, ast.Attribute):
                owner = t.value
                own = isinstance(owner, ast.Name) and owner.id == "self"
                record = isinstance(owner, ast.Attribute) and owner.attr == "result"
                if not own and not record:
                    found.append(f"{node.lineno}: {ast.unparse(t)}")
    return found


def test_no_runtime_part_sets_another_parts_field() -> None:
    modules = sorted(RUNTIME.glob("*.py"))
    assert len(modules) > 10
    found = {m.name: _foreign_field_assignments(m.read_text()) for m in modules}
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_the_check_catches_late_wiring() -> None:
    late = "def run(self):\n    self.processor.cadence = self.ckpt.cadence\n    p.reader = r\n"
    assert _foreign_field_assignments(late) == [
        "2: self.processor.cadence",
        "3: p.reader",
    ]
