"""The one path protocol (spillway.recovery.runtime.path): which path a subtask's objects
choose, that the processor chooses it once, and each path built from fakes doing what the
processor did per message before: origins, set-asides, crash point, counts, fallbacks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pyarrow as pa
import pytest

from spillway.channels.errors import PipelineDefinitionError, RecordError
from spillway.channels.ids import JobId, OperatorName, SubtaskId, TopicPartition
from spillway.channels.reader import Delivery
from spillway.channels.wire.batchread import ArrowRows
from spillway.channels.wire.envelope import Kind
from spillway.recovery.job.origins import UNKNOWN, Origins, Same, TopicOffset
from spillway.recovery.job.plan import SetAside
from spillway.recovery.runtime import processor as processor_module
from spillway.recovery.runtime.arrowpath import BatchPath, FoldingBatchPath
from spillway.recovery.runtime.batchpath import reads_batches, source_reads_batches
from spillway.recovery.runtime.cadence import IntervalCadence
from spillway.recovery.runtime.crashpoints import CrashPoints
from spillway.recovery.runtime.eventtime import SetAsides
from spillway.recovery.runtime.faults import Faults
from spillway.recovery.runtime.options import RunOptions, SubtaskResult
from spillway.recovery.runtime.outputs import Outputs
from spillway.recovery.runtime.passthrough import ForwardBatches, ForwardRecords, SinkPath
from spillway.recovery.runtime.path import Path, PathParts
from spillway.recovery.runtime.pathchoice import choose_path
from spillway.recovery.runtime.processor import Continuation, Processor
from spillway.recovery.runtime.recordpath import RecordPath
from spillway.spark_jobs.connectors.batchsources import BatchFileSource, BatchKafkaSource
from spillway.spark_jobs.connectors.sinks import KafkaTopicSink
from spillway.spark_jobs.operators.batchagg import BatchAggregateLogic
from spillway.spark_jobs.operators.batchops import MapBatchesLogic
from spillway.spark_jobs.operators.operators import MapLogic
from tests.unit.processorfakes import ScriptedReader

SUB = SubtaskId(JobId("j"), OperatorName("op"), 0)
TP = TopicPartition("spillway.j.ch.a.op", 2)


def batch(*values: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"v": pa.array(values, pa.int64())})


def at(offset: int) -> TopicOffset:
    return TopicOffset(TP.topic, TP.partition, offset)


# -- fakes ---------------------------------------------------------------------------------


@dataclass
class Log:
    """One ordered log of what the fakes were asked, to check what comes before what."""

    events: list[Any] = field(default_factory=list)


@dataclass
class Writer:
    """A channel writer refusing the records in ``refuse`` (one at a time or in a batch)."""

    log: Log
    refuse: frozenset[int] = frozenset()

    def write_many(self, records: list[Any]) -> None:
        bad = [r for r in records if (r["v"] if isinstance(r, dict) else r) in self.refuse]
        if bad:
            raise RecordError(f"refused {bad[0]}")
        self.log.events.append(("rows", list(records)))

    def write_batch(self, b: pa.RecordBatch) -> None:
        if any(v in self.refuse for v in b.column("v").to_pylist()):
            raise RecordError("refused a batch")
        self.log.events.append(("batch", b.column("v").to_pylist()))

    def tick(self) -> None:
        """Nothing lingers in this fake."""

    def end_of_stream(self) -> None:
        self.log.events.append("end-of-stream")


@dataclass
class Crash:
    """Crash points armed, recording where ``before_output`` is passed."""

    log: Log
    armed: bool = True

    def before_output(self) -> None:
        self.log.events.append("before-output")


@dataclass
class Sink:
    log: Log
    takes_batches: bool = False

    def write(self, records: Sequence[Any]) -> None:
        self.log.events.append(("sink", records))


@dataclass
class DeadLetters:
    sent: list[tuple[str, Any, Any]] = field(default_factory=list)

    def send(
        self, *, stage: str, error: Any, origin: Any, record: Any = None, raw: Any = None
    ) -> None:
        self.sent.append((stage, origin, record))


@dataclass
class Tripling:
    """A record logic; sets one record aside per call that saw a 0."""

    calls: list[list[Any]] = field(default_factory=list)
    _aside: list[SetAside] = field(default_factory=list)

    def process(self, records: Sequence[Any]) -> list[Any]:
        self.calls.append(list(records))
        self._aside = [SetAside("late", "a zero", r) for r in records if r == 0]
        return [r * 3 for r in records if r != 0]

    def on_watermark(self, watermark: int) -> list[Any]:
        return [watermark]

    def on_end(self) -> list[Any]:
        return [-1]

    def set_aside(self) -> list[SetAside]:
        out, self._aside = self._aside, []
        return out


@dataclass
class TwoInputs(Tripling):
    """A multi-input record logic: tags each record with the input it came from."""

    def process_input(self, name: str, records: Sequence[Any]) -> list[Any]:
        return [(name, r) for r in records]


@dataclass
class Timed(Tripling):
    now: list[int] = field(default_factory=list)

    def on_processing_time(self, now: int) -> list[Any]:
        self.now.append(now)
        return [7]


@dataclass
class Doubling:
    """A batch logic: doubles column ``v``; records each call's rows and origins."""

    calls: list[tuple[list[int], list[Any]]] = field(default_factory=list)

    def run_batch(self, b: pa.RecordBatch, origins: Origins, dead_letters: Any) -> list[Any]:
        self.calls.append((b.column("v").to_pylist(), [origins.at(k) for k in range(b.num_rows)]))
        doubled = pa.compute.multiply(b.column("v"), 2)
        return [pa.RecordBatch.from_pydict({"v": doubled})]

    def on_watermark(self, watermark: int) -> list[Any]:
        return []

    def on_end(self) -> list[Any]:
        return [batch(100)]

    def set_aside(self) -> list[SetAside]:
        return []


@dataclass
class FoldingDoubling(Doubling):
    folds_per_poll = True


def parts(
    log: Log,
    logic: Any = None,
    sink: Any = None,
    *,
    refuse: frozenset[int] = frozenset(),
    dead: DeadLetters | None = None,
    inputs: dict[TopicPartition, str] | None = None,
) -> tuple[PathParts, SubtaskResult, SetAsides]:
    result = SubtaskResult(str(SUB), 1, "running")
    aside = SetAsides(SUB, cast(Any, dead))
    writers = [cast(Any, Writer(log, refuse))] if sink is None or logic is not None else []
    outputs = Outputs(SUB, "op", writers, sink, cast(Any, dead), cast(Any, Crash(log)), result)
    input_of = inputs.__getitem__ if inputs is not None else None
    return (
        PathParts(SUB, "op", logic, sink, outputs, aside, cast(Any, dead), input_of),
        result,
        aside,
    )


# -- the choice ----------------------------------------------------------------------------


def test_each_kind_of_subtask_chooses_its_path() -> None:
    log = Log()
    record_logic, batch_logic = cast(Any, Tripling()), cast(Any, Doubling())
    folding = cast(Any, FoldingDoubling())
    record_source = cast(Any, object())
    batch_source = cast(Any, BatchFileSource.__new__(BatchFileSource))
    sink_batches = cast(Any, Sink(log, takes_batches=True))
    sink_records = cast(Any, Sink(log, takes_batches=False))
    assert choose_path(None, record_logic, None, chunked=False) is RecordPath
    assert choose_path(None, batch_logic, None, chunked=False) is BatchPath
    assert choose_path(None, folding, None, chunked=False) is FoldingBatchPath
    # Unaligned checkpoints may fall between a message's chunks: nothing may be held.
    assert choose_path(None, folding, None, chunked=True) is BatchPath
    assert choose_path(None, record_logic, sink_records, chunked=False) is RecordPath
    assert choose_path(None, batch_logic, sink_batches, chunked=False) is BatchPath
    assert choose_path(None, None, sink_batches, chunked=False) is SinkPath
    assert choose_path(None, None, sink_records, chunked=False) is SinkPath
    assert (reads_batches(None, sink_batches), reads_batches(None, sink_records)) == (True, False)
    assert choose_path(record_source, record_logic, None, chunked=False) is RecordPath
    assert choose_path(batch_source, batch_logic, None, chunked=False) is BatchPath
    assert choose_path(record_source, None, None, chunked=False) is ForwardRecords
    assert choose_path(record_source, None, sink_records, chunked=False) is ForwardRecords
    assert choose_path(batch_source, None, None, chunked=False) is ForwardBatches
    with pytest.raises(PipelineDefinitionError):
        choose_path(None, None, None, chunked=False)


def test_the_real_operators_and_sources_choose_as_their_fakes() -> None:
    agg = cast(Any, BatchAggregateLogic.__new__(BatchAggregateLogic))
    mapped = cast(Any, MapBatchesLogic.__new__(MapBatchesLogic))
    assert choose_path(None, agg, None, chunked=False) is FoldingBatchPath
    assert choose_path(None, mapped, None, chunked=False) is BatchPath
    assert choose_path(None, cast(Any, MapLogic(abs)), None, chunked=False) is RecordPath
    assert source_reads_batches(BatchKafkaSource.__new__(BatchKafkaSource))
    assert source_reads_batches(BatchFileSource.__new__(BatchFileSource))
    assert not source_reads_batches(KafkaTopicSink("t"))
    columnar, keyed = KafkaTopicSink("t", batches=True), KafkaTopicSink("t", lambda r: r)
    assert choose_path(None, None, cast(Any, columnar), chunked=False) is SinkPath
    assert (reads_batches(None, columnar), reads_batches(None, keyed)) == (True, False)


class Forwarding:
    """Wraps a source and forwards its attributes (as a gated benchmark source does)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_wrapped_batch_source_reads_batches_as_the_one_it_wraps() -> None:
    wrapped = Forwarding(BatchFileSource.__new__(BatchFileSource))
    assert choose_path(cast(Any, wrapped), None, None, chunked=False) is ForwardBatches


class NoMarks:
    """A progress log whose read mark is never due."""

    def due(self, now: float) -> bool:
        return False


def processor(
    logic: Any, polls: list[list[Delivery]], writer: Writer, source: Any = None
) -> Processor:
    return Processor(
        SUB,
        SUB.operator,
        RunOptions(),
        (source, logic, None),
        None,
        SetAsides(SUB, None),
        CrashPoints(Faults(SUB, 1, "")),
        SubtaskResult(str(SUB), 1, "running"),
        cast(Any, NoMarks()),
        lambda: None,
        cast(Any, ScriptedReader(polls)) if source is None else None,
        [cast(Any, writer)],
        IntervalCadence(),
        Continuation(),
    )


def test_the_processor_chooses_once_and_calls_only_the_chosen_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chosen: list[Any] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        made = choose_path(*args, **kwargs)
        chosen.append(made)
        return made

    monkeypatch.setattr(processor_module, "choose_path", counting)
    log = Log()
    logic = FoldingDoubling()
    tp = TopicPartition(TP.topic, 0)  # the scripted reader's positions are of partition 0
    polls = [
        [
            Delivery(tp, 0, 0, Kind.DATA, ArrowRows(batch(1))),
            Delivery(tp, 1, 0, Kind.DATA, ArrowRows(batch(2))),
        ],
        [Delivery(tp, 2, 0, Kind.DATA, ArrowRows(batch(3)))],
    ]
    p = processor(logic, polls, Writer(log))
    assert isinstance(p.path, FoldingBatchPath)
    # Flags set on the logic after the task was built change nothing: nothing asks again.
    logic.folds_per_poll = False
    cast(Any, logic).on_processing_time = lambda now: [batch(9)]
    while not p.step().ended:
        p.tick(ended=False)
    p.end()
    assert chosen == [FoldingBatchPath]
    assert [values for values, _ in logic.calls] == [[1, 2], [3]]  # one call per poll
    assert log.events == [("batch", [2, 4]), ("batch", [6]), ("batch", [100]), "end-of-stream"]


# -- each path from fakes ------------------------------------------------------------------


def test_the_record_path_runs_a_message_with_its_origin_and_takes_set_asides() -> None:
    log = Log()
    logic = Tripling()
    made, result, aside = parts(log, logic)
    path: Path = RecordPath(made)
    path.message([1, 0, 2], TP, 40)
    path.poll_done()
    path.watermark(5)
    path.timers()  # a logic without timers: nothing
    path.end()
    assert logic.calls == [[1, 0, 2]]
    # Every write passes the crash point first (the first of a transaction may crash).
    assert log.events == [
        "before-output",
        ("rows", [3, 6]),
        "before-output",
        ("rows", [5]),
        "before-output",
        ("rows", [-1]),
    ]
    assert result.records_out == 4
    assert aside.counts() == {"late": 1}


def test_the_record_path_tells_a_multi_input_logic_the_messages_input() -> None:
    log = Log()
    made, _, _ = parts(log, TwoInputs(), inputs={TP: "left"})
    RecordPath(made).message([1, 2], TP, 0)
    assert log.events == ["before-output", ("rows", [("left", 1), ("left", 2)])]


def test_the_record_path_fires_processing_time_timers_of_a_logic_that_has_them() -> None:
    log = Log()
    logic = Timed()
    made, _, _ = parts(log, logic)
    RecordPath(made).timers()
    assert len(logic.now) == 1
    assert log.events == ["before-output", ("rows", [7])]


def test_the_record_path_diverts_a_refused_output_with_its_message_as_origin() -> None:
    log, dead = Log(), DeadLetters()
    made, result, _ = parts(log, Tripling(), refuse=frozenset({6}), dead=dead)
    RecordPath(made).message([1, 2, 3], TP, 8)
    assert dead.sent == [("emit", at(8), 6)]
    assert log.events == ["before-output", ("rows", [3]), ("rows", [9])]
    assert result.records_out == 2


def test_a_record_source_chained_with_a_transform_runs_it_on_each_read() -> None:
    log = Log()
    logic = Tripling()
    made, _, _ = parts(log, logic)
    path = RecordPath(made)
    assert path.rows([4, 5]) == 2
    path.read([4, 5], UNKNOWN)
    assert logic.calls == [[4, 5]]
    assert log.events == ["before-output", ("rows", [12, 15])]


def test_the_batch_path_runs_each_message_as_one_batch_and_a_chained_sink_takes_it() -> None:
    log = Log()
    logic = Doubling()
    sink = Sink(log, takes_batches=True)
    made, result, _ = parts(log, logic, sink)
    path = BatchPath(made)
    path.message(ArrowRows(batch(1, 2, 3)), TP, 11)
    path.message(ArrowRows(batch(4)), TP, 12)
    assert logic.calls == [([1, 2, 3], [at(11)] * 3), ([4], [at(12)])]
    kinds = [e if isinstance(e, str) else e[0] for e in log.events]
    assert kinds == ["before-output", "batch", "sink", "before-output", "batch", "sink"]
    sunk = [e[1] for e in log.events if e[0] == "sink"]
    assert all(isinstance(s, ArrowRows) for s in sunk)
    assert [list(s) for s in sunk] == [[{"v": 2}, {"v": 4}, {"v": 6}], [{"v": 8}]]
    assert result.records_out == 4


def test_a_batch_a_writer_refuses_is_split_into_rows_to_divert_the_bad_ones() -> None:
    log, dead = Log(), DeadLetters()
    made, result, _ = parts(log, Doubling(), refuse=frozenset({4}), dead=dead)
    BatchPath(made).message(ArrowRows(batch(1, 2, 3)), TP, 30)
    assert dead.sent == [("emit", at(30), {"v": 4})]
    assert log.events == ["before-output", ("rows", [{"v": 2}]), ("rows", [{"v": 6}])]
    assert result.records_out == 2


def test_a_batch_a_writer_refuses_without_dead_letters_fails_naming_the_row() -> None:
    log = Log()
    made, _, _ = parts(log, Doubling(), refuse=frozenset({4}))
    with pytest.raises(RecordError, match=r"spillway\.j\.ch\.a\.op\[2\]@30"):
        BatchPath(made).message(ArrowRows(batch(1, 2, 3)), TP, 30)


def test_a_batch_source_chained_with_a_batch_transform_runs_it_on_the_read() -> None:
    log = Log()
    logic = Doubling()
    made, result, _ = parts(log, logic)
    path = BatchPath(made)
    read = [batch(1, 2), batch(3)]
    assert path.rows(read) == 3
    path.read(read, Same(TopicOffset("src", 0, 0)))
    path.read([], UNKNOWN)  # only rejected rows, or none yet: nothing to run or write
    assert [values for values, _ in logic.calls] == [[1, 2, 3]]
    assert log.events == ["before-output", ("batch", [2, 4, 6])]
    assert result.records_out == 3


def test_the_folding_batch_path_holds_a_poll_and_runs_it_once() -> None:
    log = Log()
    logic = FoldingDoubling()
    made, _, _ = parts(log, logic)
    path = FoldingBatchPath(made)
    path.message(ArrowRows(batch(1)), TP, 1)
    path.message(ArrowRows(batch(2, 3)), TP, 2)
    assert log.events == []  # held until the poll is over
    path.poll_done()
    path.poll_done()  # nothing held: no call
    assert logic.calls == [([1, 2, 3], [at(1), at(2), at(2)])]
    assert log.events == ["before-output", ("batch", [2, 4, 6])]


def test_a_sink_alone_writes_each_message_as_it_arrived() -> None:
    log = Log()
    sink = Sink(log, takes_batches=True)
    made, result, _ = parts(log, None, sink)
    path = SinkPath(made)
    rows = ArrowRows(batch(1, 2))
    path.message(rows, TP, 0)
    path.message([], TP, 1)  # nothing to write: no crash point, no rows
    path.watermark(9)
    path.end()
    assert log.events == ["before-output", ("sink", rows), ("sink", [])]
    assert log.events[1][1] is rows  # the batch as it arrived, not rows made of it
    assert result.records_out == 2


def test_a_source_alone_writes_what_it_reads_in_its_form() -> None:
    log = Log()
    made, result, _ = parts(log)
    records, batches = ForwardRecords(made), ForwardBatches(made)
    assert (records.rows([1, 2]), batches.rows([batch(1, 2), batch(3)])) == (2, 3)
    records.read([{"v": 1}], Same(TopicOffset("f", 0, 0)))
    batches.read([batch(1, 2), batch(3)], UNKNOWN)
    batches.read([], UNKNOWN)
    assert log.events == [
        "before-output",
        ("rows", [{"v": 1}]),
        "before-output",
        ("batch", [1, 2, 3]),
    ]
    assert result.records_out == 4


@dataclass
class Reads:
    """A batch source returning scripted reads, then the end."""

    reads: list[list[pa.RecordBatch]]
    returns_batches = True

    def read(self, max_records: int) -> list[pa.RecordBatch] | None:
        return self.reads.pop(0) if self.reads else None

    def rejected(self) -> list[Any]:
        return []

    def origins(self) -> Origins:
        return UNKNOWN

    def watermark(self) -> int | None:
        return None

    def idle(self) -> bool:
        return False


def test_a_batch_source_with_a_batch_transform_goes_on_after_an_empty_read() -> None:
    log = Log()
    logic = Doubling()
    p = processor(logic, [], Writer(log), source=Reads([[], [batch(5, 6)], []]))
    assert isinstance(p.path, BatchPath)
    while not p.step().ended:
        pass
    assert [values for values, _ in logic.calls] == [[5, 6]]
    assert log.events == [("batch", [10, 12])]
    assert (p.result.records_in, p.result.records_out) == (2, 2)
