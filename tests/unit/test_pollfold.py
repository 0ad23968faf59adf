"""Folding one poll's batches (spillway.recovery.runtime.pollfold) and the processor using it: one
operator call per poll with every row's origin, none held across a poll's end, and
none in the unaligned mode (which checkpoints inside a message)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pyarrow as pa

from spillway.channels.ids import JobId, OperatorName, SubtaskId, TopicPartition
from spillway.channels.reader import Delivery
from spillway.channels.wire.batchread import ArrowRows
from spillway.channels.wire.envelope import Kind
from spillway.recovery.job.origins import UNKNOWN, Origins, Same, TopicOffset
from spillway.recovery.runtime.cadence import IntervalCadence, UnalignedCadence
from spillway.recovery.runtime.crashpoints import CrashPoints
from spillway.recovery.runtime.eventtime import SetAsides
from spillway.recovery.runtime.faults import Faults
from spillway.recovery.runtime.options import RunOptions, SubtaskResult
from spillway.recovery.runtime.pollfold import PollFold, Spans
from spillway.recovery.runtime.processor import Continuation, Processor
from spillway.spark_jobs.operators.batchops import process_batch
from tests.unit.processorfakes import FakeTriggers, ScriptedReader

SUB = SubtaskId(JobId("j"), OperatorName("agg"), 0)
TP = TopicPartition("spillway.j.ch.a.agg", 3)


def batch(*values: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"v": pa.array(values, pa.int64())})


def test_spans_give_each_row_the_origin_of_its_part() -> None:
    spans = Spans()
    spans.add(2, Same(TopicOffset("t", 0, 5)))
    spans.add(0, Same(TopicOffset("t", 0, 6)))  # an empty part adds nothing
    spans.add(3, Same(TopicOffset("t", 1, 9)))
    assert len(spans) == 5
    assert [spans.at(k) for k in range(6)] == [
        TopicOffset("t", 0, 5),
        TopicOffset("t", 0, 5),
        TopicOffset("t", 1, 9),
        TopicOffset("t", 1, 9),
        TopicOffset("t", 1, 9),
        None,
    ]


def test_poll_fold_takes_everything_held_once() -> None:
    fold = PollFold()
    assert fold.take() is None
    one = Same(TopicOffset("t", 0, 1))
    fold.add(batch(1, 2), one)
    taken = fold.take()
    assert taken is not None
    assert taken[0].equals(batch(1, 2))
    assert taken[2] is one  # one message: its origin
    fold.add(batch(3), one)
    fold.add(batch(), Same(TopicOffset("t", 0, 2)))
    fold.add(batch(4, 5), Same(TopicOffset("t", 0, 3)))
    taken = fold.take()
    assert taken is not None
    rows, origins, outputs = taken
    assert rows.equals(batch(3, 4, 5))
    assert [origins.at(k) for k in range(3)] == [
        TopicOffset("t", 0, 1),
        TopicOffset("t", 0, 3),
        TopicOffset("t", 0, 3),
    ]
    assert outputs is UNKNOWN
    assert fold.take() is None


@dataclass
class FoldingSum:
    """A batch logic that folds per poll: records each call and emits the batch's sum."""

    folds_per_poll = True
    calls: list[tuple[list[int], list[Any]]] = field(default_factory=list)

    def run_batch(self, b: pa.RecordBatch, origins: Origins, dead_letters: Any) -> list[Any]:
        self.calls.append((b.column("v").to_pylist(), [origins.at(k) for k in range(b.num_rows)]))
        return process_batch(self.total, b, origins, dead_letters, "operator 'agg'")

    def total(self, b: pa.RecordBatch) -> list[pa.RecordBatch]:
        values = b.column("v").to_pylist()
        if 13 in values:
            raise ValueError("13 is poison")
        return [pa.RecordBatch.from_pydict({"v": [sum(values)]})]

    def set_aside(self) -> list[Any]:
        return []


@dataclass
class BatchWriter:
    written: list[int] = field(default_factory=list)

    def write_batch(self, b: pa.RecordBatch) -> None:
        self.written += b.column("v").to_pylist()


def arrow(offset: int, *values: int) -> Delivery:
    return Delivery(TP, offset, 0, Kind.DATA, ArrowRows(batch(*values)))


@dataclass
class DeadLetters:
    sent: list[tuple[str, Any, Any]] = field(default_factory=list)

    def send(
        self, *, stage: str, error: Any, origin: Any, record: Any = None, raw: Any = None
    ) -> None:
        self.sent.append((stage, origin, record))


def run(
    cadence: Any, polls: list[list[Delivery]], dead: DeadLetters | None = None
) -> tuple[FoldingSum, BatchWriter]:
    logic = FoldingSum()
    writer = BatchWriter()
    p = Processor(
        SUB,
        SUB.operator,
        RunOptions(trigger_chunk=100),
        (None, cast(Any, logic), None),
        cast(Any, dead),
        SetAsides(SUB, None),
        CrashPoints(Faults(SUB, 1, "")),
        SubtaskResult(str(SUB), 1, "running"),
        cast(Any, None),
        lambda: None,
        cast(Any, ScriptedReader(polls)),
        [cast(Any, writer)],
        cadence,
        Continuation(),
    )
    while not p.step().ended:
        pass
    return logic, writer


def test_the_processor_folds_each_poll_in_one_call_with_each_rows_origin() -> None:
    polls = [[arrow(10, 1, 2), arrow(11, 3), arrow(12, 4, 5, 6)], [arrow(13, 7)]]
    logic, writer = run(IntervalCadence(), polls)
    at = [TopicOffset(TP.topic, TP.partition, o) for o in (10, 10, 11, 12, 12, 12)]
    assert logic.calls == [([1, 2, 3, 4, 5, 6], at), ([7], [TopicOffset(TP.topic, 3, 13)])]
    assert writer.written == [21, 7]  # emitted within the poll: nothing held past its end


def test_a_bad_row_of_a_fold_is_dead_lettered_with_its_own_message_as_origin() -> None:
    dead = DeadLetters()
    polls = [[arrow(20, 1, 2), arrow(21, 13, 4), arrow(22, 5)]]
    _, writer = run(IntervalCadence(), polls, dead)
    assert dead.sent == [("process", TopicOffset(TP.topic, 3, 21), {"v": 13})]
    assert sum(writer.written) == 1 + 2 + 4 + 5  # the rest of the fold goes on


def test_the_unaligned_mode_does_not_fold() -> None:
    polls = [[arrow(10, 1, 2)], [arrow(11, 3)]]
    logic, writer = run(UnalignedCadence(FakeTriggers(), 100), polls)
    assert [c[0] for c in logic.calls] == [[1, 2], [3]]
    assert writer.written == [3, 3]
