"""The checkpointer and its cadences with fake parts, every one given at construction:
order, contents, global checkpoints (asked for by the cadence, taken as the task loop
takes them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from spillway.channels.errors import PositionRegressionError
from spillway.channels.ids import (
    CheckpointId,
    JobId,
    Offset,
    OperatorName,
    SubtaskId,
    TopicPartition,
)
from spillway.channels.progress import ReaderState
from spillway.channels.reader import Delivery
from spillway.channels.wire.envelope import Kind
from spillway.offsets.checkpoint import Checkpoint
from spillway.recovery.runtime import faults
from spillway.recovery.runtime.cadence import (
    AlignedCadence,
    IntervalCadence,
    UnalignedCadence,
    make_cadence,
)
from spillway.recovery.runtime.checkpointer import Checkpointer, Observers, Parts
from spillway.recovery.runtime.crashpoints import CrashPoints
from spillway.recovery.runtime.eventtime import SetAsides
from spillway.recovery.runtime.faults import Faults
from spillway.recovery.runtime.lifecycle import Lifecycle, Phase
from spillway.recovery.runtime.livestats import LiveStats
from spillway.recovery.runtime.options import RunOptions, SubtaskResult
from spillway.recovery.runtime.processor import Continuation, Processor
from spillway.recovery.runtime.requests import AtBarrier, InsideMessage, Step
from tests.unit.checkpointfakes import checkpoint

SUB = SubtaskId(JobId("j"), OperatorName("count"), 1)
IN = TopicPartition("spillway.j.ch.a.count", 1)
LOG = TopicPartition("spillway.j.changelog.count", 1)


class Calls(list[str]):
    pass


@dataclass
class FakeReader:
    calls: Calls
    pos: dict[TopicPartition, Offset] = field(default_factory=lambda: {IN: Offset(10)})
    state: ReaderState = field(default_factory=ReaderState)

    def positions(self) -> dict[TopicPartition, Offset]:
        self.calls.append("reader")
        return dict(self.pos)

    def discard_state(self) -> dict[TopicPartition, dict[int, tuple[tuple[int, int], ...]]]:
        return {}

    def skip_state(self) -> dict[TopicPartition, dict[int, int]]:
        return {IN: {0: 12}}

    def open_records(self) -> int:
        return 0


@dataclass
class FakeWriter:
    calls: Calls
    topic: str = "spillway.j.ch.count.sink"
    counts: list[int] = field(default_factory=lambda: [3, 4])
    barriers: list[int] = field(default_factory=list)
    spanned: int = 0

    def flush_batches(self) -> None:
        self.calls.append("writer")

    def marks(self) -> tuple[int, ...]:
        return (7, 8)

    def barrier(self, n: int) -> None:
        self.calls.append(f"barrier {n}")
        self.barriers.append(n)


@dataclass
class FakeState:
    calls: Calls
    tps: tuple[TopicPartition, ...] = (LOG,)

    def flush_to(self, producer: Any) -> int:
        self.calls.append("state")
        return 2


@dataclass
class FakeSource:
    calls: Calls

    def position(self) -> dict[str, Any]:
        self.calls.append("source")
        return {"next": 5}


@dataclass
class FakeSink:
    calls: Calls
    published: list[Mapping[str, Any]] = field(default_factory=list)

    def prepare(self, checkpoint_id: int) -> dict[str, Any]:
        self.calls.append("sink prepare")
        return {"files": [checkpoint_id]}

    def committed(self, info: Mapping[str, Any]) -> None:
        self.calls.append("sink publish")
        self.published.append(info)


@dataclass
class FakeProducer:
    calls: Calls
    txn_bytes: int = 0

    def flush(self, timeout_s: float = 30.0) -> None:
        self.calls.append("producer flush")

    def last_offset(self, tp: TopicPartition) -> Offset | None:
        return Offset(41) if tp == LOG else None

    def begin(self) -> None:
        self.calls.append("begin")


@dataclass
class FakeCollector:
    calls: Calls

    def prepare_commit(self, has_writers: bool) -> None:
        self.calls.append(f"collector writers={has_writers}")


@dataclass
class FakeEvents:
    emitted: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def emit(self, kind: str, **fields: Any) -> None:
        self.emitted.append((kind, fields))


@dataclass
class FakeStore:
    pruned: list[tuple[int, int, int]] = field(default_factory=list)

    def prune(self, index: int, keep: int, keep_global: int = 0) -> None:
        self.pruned.append((index, keep, keep_global))


@dataclass
class FakeTriggers:
    n: int = -1

    def trigger(self) -> int:
        return self.n

    def seen_at(self, n: int) -> float | None:
        return None


@dataclass
class World:
    calls: Calls
    ckpt: Checkpointer
    committed: list[Checkpoint]
    events: FakeEvents
    lifecycle: Lifecycle
    sink: FakeSink
    writer: FakeWriter
    reader: FakeReader


def world(
    mode: str = "interval",
    triggers: FakeTriggers | None = None,
    crash: str = "",
    restored: Checkpoint | None = None,
    global_id: int | None = None,
    prunable: Callable[[], bool] = lambda: True,
    handing_over: Callable[[], bool] = lambda: False,
    polls: list[list[Delivery]] | None = None,
) -> World:
    """``polls``: the reader is one a processor can poll too (:class:`ScriptedReader`)."""
    calls = Calls()
    committed: list[Checkpoint] = []

    def commit(p: Any, c: Checkpoint, meta: object, reached: Callable[[str], None] | None) -> None:
        calls.append("commit")
        committed.append(c)

    lc = Lifecycle()
    lc.to(Phase.RESTORING)
    lc.to(Phase.RUNNING)
    events = FakeEvents()
    obs = Observers(
        lc,
        LiveStats(),
        SubtaskResult(str(SUB), 0, "running"),
        events,
        CrashPoints(Faults(SUB, 0, crash)),
    )
    options = RunOptions(checkpoint_mode=mode, trigger_chunk=2)
    reader = FakeReader(calls) if polls is None else ScriptedReader(calls, polls=polls)
    writer, sink = FakeWriter(calls), FakeSink(calls)
    parts = Parts(
        reader=reader,
        writers=[writer],
        state=FakeState(calls),
        source=FakeSource(calls),
        sink=sink,
        watermark=lambda: 900,
        set_aside=lambda: {"late": 2},
        mark=lambda: calls.append("mark"),
        prunable=prunable,
        handing_over=handing_over,
    )
    ckpt = Checkpointer(
        SUB,
        "fp",
        0,
        FakeProducer(calls),
        FakeCollector(calls),
        commit,
        FakeStore(),
        options,
        triggers,
        obs,
        make_cadence(mode, triggers, options.trigger_chunk, global_id),
        parts,
        restored,
    )
    return World(calls, ckpt, committed, events, lc, sink, writer, reader)


def test_a_checkpoint_asks_each_part_in_a_fixed_order() -> None:
    w = world()
    w.ckpt.take(finished=False)
    assert w.calls == [
        "writer",
        "collector writers=True",
        "source",
        "sink prepare",
        "state",
        "producer flush",
        "reader",
        "mark",
        "commit",
        "sink publish",
        "begin",
    ]
    assert w.lifecycle.phase is Phase.RUNNING


def test_each_part_has_a_field_of_its_own() -> None:
    w = world()
    c = w.ckpt.take(finished=False)
    assert w.committed == [c]
    assert c.checkpoint_id == CheckpointId(0)
    assert c.reader.inputs == {IN: Offset(10)}
    assert c.state.changelogs == {LOG: Offset(42)}  # after the last changelog record
    assert c.writers.outputs == {"spillway.j.ch.count.sink": (3, 4)}
    assert c.writers.output_marks == {"spillway.j.ch.count.sink": (7, 8)}
    assert c.reader.skip == {IN: {0: 12}}
    assert (c.source, c.sink) == ({"next": 5}, {"files": [0]})
    assert (c.operator.watermark, c.operator.set_aside, c.meta.global_id, c.meta.finished) == (
        900,
        {"late": 2},
        None,
        False,
    )
    assert w.sink.published == [{"files": [0]}]


def test_a_final_checkpoint_opens_no_transaction_and_a_stopping_one_stops() -> None:
    w = world()
    w.ckpt.take(finished=True)
    assert "begin" not in w.calls
    assert w.committed[-1].meta.finished
    w.ckpt.take(finished=False, stopping=True)
    assert w.calls.count("begin") == 0
    assert w.lifecycle.phase is Phase.STOPPED


def test_after_produce_read_counts_only_checkpoints_that_read_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    died: list[int] = []
    monkeypatch.setattr(faults, "_die", lambda: died.append(len(w.committed)))
    w = world(crash=f"{SUB.operator}:{SUB.index}:after-produce-read:0:2")
    w.ckpt._obs.result.records_in = 5
    w.ckpt.take(finished=False)  # read 5: the 1st that read
    w.ckpt.take(finished=False)  # read nothing: not counted
    w.ckpt.take(finished=False)
    assert died == []
    w.ckpt._obs.result.records_in = 6
    w.ckpt.take(finished=False)  # read 1: the 2nd that read, dies before its commit
    assert died == [3]


def test_a_position_moving_back_is_refused_before_the_commit() -> None:
    w = world()
    w.ckpt.take(finished=False)
    w.reader.pos = {IN: Offset(9)}
    with pytest.raises(
        PositionRegressionError, match=r"j/count\[1\].*ch\.a\.count\[1\] back from 10 to 9"
    ):
        w.ckpt.take(finished=False)
    assert len(w.committed) == 1


def test_restored_checkpoint_continues_ids_and_bounds_positions() -> None:
    before = checkpoint(SUB, 6, "fp", inputs={IN: Offset(11)}, changelogs={LOG: Offset(3)})
    w = world(restored=before, global_id=4)
    assert w.ckpt.cadence.last_global == 4
    with pytest.raises(PositionRegressionError):
        w.ckpt.take(finished=False)  # the reader says 10, the checkpoint restored 11
    assert w.committed == []  # (the subtask fails; its next incarnation restores again)
    w = world(restored=before, global_id=None)
    w.reader.pos = {IN: Offset(11)}
    assert w.ckpt.take(finished=False).checkpoint_id == CheckpointId(7)


def test_interval_mode_has_no_global_checkpoints() -> None:
    w = world("unaligned", triggers=None)  # no job signals: interval only
    assert isinstance(w.ckpt.cadence, IntervalCadence)
    assert w.ckpt.cadence.on_loop(True) is None
    assert w.committed == []


@dataclass
class ScriptedReader(FakeReader):
    """The reader the processor polls and the checkpointer asks: one poll, then ended."""

    polls: list[list[Delivery]] = field(default_factory=list)

    def poll(self, n: int, wait_s: float, *, stop_after_barrier: bool = False) -> list[Delivery]:
        out = self.polls.pop(0) if self.polls else []
        if out:
            self.pos = {IN: Offset(out[-1].offset + 1)}
        return out

    def watermark(self) -> int | None:
        return None

    def idle(self) -> bool:
        return False

    def finished(self) -> bool:
        return not self.polls


@dataclass
class Chunks:
    delivered: list[list[Any]] = field(default_factory=list)

    def process(self, records: Sequence[Any]) -> list[Any]:
        self.delivered.append(list(records))
        return []

    def set_aside(self) -> list[Any]:
        return []


def test_unaligned_trigger_inside_a_message_records_what_was_done() -> None:
    triggers = FakeTriggers()
    w = world("unaligned", triggers, polls=[[Delivery(IN, 20, 0, Kind.DATA, [0, 1, 2, 3, 4, 5])]])
    cadence = w.ckpt.cadence
    assert isinstance(cadence, UnalignedCadence)
    logic = Chunks()
    p = Processor(
        SUB,
        SUB.operator,
        RunOptions(trigger_chunk=2),
        (None, cast(Any, logic), None),
        None,
        SetAsides(SUB, None),
        CrashPoints(Faults(SUB, 0, "")),
        SubtaskResult(str(SUB), 0, "running"),
        cast(Any, None),
        lambda: None,
        cast(Any, w.reader),
        [],
        cadence,
        Continuation(resume={(IN, 20): 1}),  # its first record was done before a restore
    )
    triggers.n = 3
    step = p.step()
    assert step == Step(False, InsideMessage(3, (IN, 20, 3)))  # stopped inside the message
    w.ckpt.take(request=step.request)  # as the task loop does, then steps on at once
    assert p.step().request is None
    assert logic.delivered == [[1, 2], [3, 4], [5]]
    [c] = w.committed  # one checkpoint, after the first chunk (trigger 3 is then taken)
    assert c.meta.global_id == 3
    assert c.reader.inputs[IN] == Offset(20)
    assert c.reader.partial == {IN: (20, 3)}
    assert w.writer.barriers == [3]
    assert [k for k, _ in w.events.emitted] == ["checkpointed"]
    assert cadence.on_loop(True) is None  # the same trigger again: nothing new
    assert len(w.committed) == 1


def test_aligned_mode_sources_act_on_the_trigger_readers_on_barriers() -> None:
    triggers = FakeTriggers(n=2)
    w = world("aligned", triggers)
    cadence = w.ckpt.cadence
    assert isinstance(cadence, AlignedCadence)
    assert cadence.mode == "aligned"
    assert cadence.on_loop(reads_channels=True) is None
    assert w.committed == []
    n = cadence.on_loop(reads_channels=False)
    assert n is not None
    w.ckpt.take(request=AtBarrier(n))  # as the task loop does
    assert [c.meta.global_id for c in w.committed] == [2]

    @dataclass
    class Aligning:
        log: list[str] = field(default_factory=list)

        def aligned(self) -> int | None:
            return 3

        def consume_barrier(self, n: int) -> None:
            self.log.append(f"consume {n}")

        def release(self, n: int) -> None:
            self.log.append(f"release {n}")

    r = Aligning()
    n = cadence.after_poll(r, None)
    assert n is not None
    w.ckpt.take(request=AtBarrier(n))  # asked for by the processor's step, taken by the loop
    cadence.after_checkpoint(r, n)  # the processor's next step
    assert [c.meta.global_id for c in w.committed] == [2, 3]
    assert r.log == ["consume 3", "release 3"]
    assert cadence.after_poll(r, None) is None  # aligned again at 3: released, no checkpoint
    assert [c.meta.global_id for c in w.committed] == [2, 3]


def test_no_prune_while_a_rescale_handover_is_still_needed() -> None:
    released = [False]
    w = world(prunable=lambda: released[0])
    store = w.ckpt._store
    assert isinstance(store, FakeStore)
    w.ckpt._prune_now()
    assert store.pruned == []
    released[0] = True
    w.ckpt._prune_now()
    assert store.pruned == [(1, RunOptions().keep_checkpoints, 0)]


def test_a_stop_that_hands_the_subtask_over_marks_its_checkpoint() -> None:
    whole_job = world()
    whole_job.ckpt.take(finished=False, stopping=True)  # SIGTERM: every subtask stops
    assert not whole_job.committed[-1].meta.handed_over
    w = world(handing_over=lambda: True)  # this operator alone asked to stop
    w.ckpt.take(finished=False)  # a checkpoint before the stop one: not the last word
    w.ckpt.take(finished=False, stopping=True)
    assert [c.meta.handed_over for c in w.committed] == [False, True]
    assert Checkpoint.from_bytes(w.committed[-1].to_bytes()).meta.handed_over
