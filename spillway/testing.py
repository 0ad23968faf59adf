"""Run a pipeline in-process, from lists to lists, without Kafka or Spark.

:class:`TestDriver` is Spillway's counterpart of Kafka Streams' ``TopologyTestDriver``:
a test sends records to a named source, moves event time and processing time by hand,
and reads what each sink received and what was dead-lettered::

    with TestDriver(pipeline) as t:
        t.send("clicks", [{"user": "a", "ts": 1000}, {"user": "b", "ts": 1500}])
        t.advance_event_time(5_000)          # as if the sources' watermark reached 5 s
        t.advance_processing_time(60_000)    # processing-time timers, idle timeouts
        assert t.output("counts") == [...]
        assert t.dead_letters() == []

It compiles the pipeline with :meth:`Pipeline.plan` and runs the plan's own parts: the
same operator logic objects (maps, keyed aggregates, windows, process functions, joins,
chains), each operator at its declared parallelism, records routed by the plan's
partitioners to the key groups each subtask owns
(:func:`spillway.recovery.restore.ownership.owned_partitions`), keyed state in the
runtime's :class:`~spillway.recovery.restore.state.ChangelogState` (never flushed: there
is no changelog topic), every channel's records encoded and decoded with the channel's
codec (so a record that does not fit its schema is refused as in a real run), watermarks
combined per writer and input by :mod:`spillway.channels.inputmarks`, source watermarks by
each source's declared strategy (its ``WatermarkTracker``, on the driver's clock), late
records set aside by the operators, and dead letters built by the runtime's
:class:`~spillway.recovery.runtime.deadletter.DeadLetters`. Order within a channel
partition is kept; subtasks run one at a time, in plan order, until nothing is left to
deliver after each call.

What differs from a run on Spark, on purpose: there are no checkpoints, restarts or
rescales (recovery is tested elsewhere); a watermark is forwarded as soon as it rises
rather than sampled every ``watermark_interval_s`` (the same windows fire, sooner);
time is the driver's clock, which only moves when the test moves it.

Not supported (a :class:`~spillway.channels.errors.PipelineDefinitionError` at
construction says so): batch operators (``map_batches``, ``aggregate_batches``, ...) and
batch sources (``batches=True``). A Kafka source is always fed by :meth:`TestDriver.send`
(records as its JSON values decode; a record that does not fit the schema is refused by
the source's channel, at stage ``emit``, as on Spark); ``generate`` and ``read_files``
sources can be fed too, or read as declared (:meth:`TestDriver.run_source`).
"""

from __future__ import annotations

import base64
import json
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from spillway.channels.config import ChannelSettings, KafkaSettings
from spillway.channels.errors import PipelineDefinitionError, RecordError
from spillway.channels.ids import SubtaskId, TopicPartition
from spillway.channels.inputmarks import WriterMark, combine, input_mark
from spillway.channels.routing.keygroups import Ownership
from spillway.channels.routing.partitioners import Partitioner, Sticky
from spillway.channels.wire.envelope import BlockCodec, writer_codec
from spillway.channels.wire.stamps import read_times, stamped, times_header, with_times
from spillway.recovery.job.inputs import Call, input_call
from spillway.recovery.job.origins import UNKNOWN, Origins, Same, TopicOffset
from spillway.recovery.job.plan import (
    EdgePlan,
    JobPlan,
    Logic,
    OperatorPlan,
    Record,
    Rejected,
    Source,
)
from spillway.recovery.restore.ownership import owned_partitions, owned_state
from spillway.recovery.restore.state import ChangelogState
from spillway.recovery.runtime.batchpath import is_batch_logic
from spillway.recovery.runtime.deadletter import DeadLetters
from spillway.recovery.runtime.eventtime import SetAsides
from spillway.recovery.runtime.failures import emit_failure, run_diverting, source_failure
from spillway.spark_jobs.api.graph import Graph
from spillway.spark_jobs.connectors.sources import FileSource, GeneratorSource, KafkaTopicSource
from spillway.spark_jobs.records.watermarks import Watermarks, WatermarkTracker, event_time

__all__ = ["DeadLetter", "TestDriver", "run"]

# Records per read when a declared source runs (run_source), as a subtask polls.
_POLL_RECORDS = 500


@dataclass(frozen=True)
class DeadLetter:
    """One dead-lettered record, as the dead-letter channel would hold it.

    ``operator``/``index``: the subtask that diverted it; ``stage``: ``source`` (the
    source could not read it), ``process`` (the operator's function raised), ``emit``
    (the output did not fit its channel's schema), ``late`` (too late for its window);
    ``origin``: where it was read, as text (a record sent to source ``s``'s subtask ``i``
    as its ``n``-th record is ``s[i]@n``; a channel message ``topic[partition]@offset``),
    or None; ``record``: the record (decoded from the letter's JSON), or None; ``raw``:
    the bytes of an input the source could not read (a file line, a message value), or
    None.
    """

    operator: str
    index: int
    stage: str
    error: str
    origin: str | None
    record: Any
    raw: bytes | None = None


# What a channel message carries (spillway.channels.wire.envelope.Kind, as the harness needs it).
_MessageKind = Literal["data", "watermark", "idle", "end"]


@dataclass
class _Message:
    """One channel message for a downstream subtask: data, watermark, idle or end."""

    tp: TopicPartition
    offset: int
    writer: int
    kind: _MessageKind
    records: list[Record] = field(default_factory=list)
    value: int = 0


class _Letters:
    """A producer stand-in that keeps what :class:`DeadLetters` writes."""

    def __init__(self) -> None:
        self.docs: list[dict[str, Any]] = []

    def produce(self, topic: str, partition: int, key: bytes, value: bytes, **_: Any) -> None:
        """Keep one dead letter's JSON document."""
        self.docs.append(json.loads(value))


class _Ctx:
    """The operator context (:class:`spillway.recovery.job.plan.Context`) of one subtask."""

    def __init__(self, subtask: SubtaskId, state: ChangelogState | None) -> None:
        self._subtask = subtask
        self._state = state
        self._kafka = KafkaSettings("in-process")

    @property
    def subtask(self) -> SubtaskId:
        return self._subtask

    @property
    def state(self) -> ChangelogState:
        if self._state is None:
            raise RuntimeError(f"{self._subtask}: operator is not stateful")
        return self._state

    @property
    def kafka(self) -> KafkaSettings:
        return self._kafka

    @property
    def watermark(self) -> int | None:
        return None  # a fresh run: nothing restored


class _Output:
    """One output edge of one subtask: routes, encodes and delivers to the owners."""

    def __init__(
        self, driver: TestDriver, edge: EdgePlan, writer: int, codec: ChannelSettings
    ) -> None:
        plan = driver.plan
        self.topic = plan.topic_of(edge)
        self.partitions = plan.partitions_of(edge)
        self.route: Partitioner = plan.partitioner_of(edge, writer)
        self.codec: BlockCodec = writer_codec(edge.schema, codec.codec)
        self.carries_time = edge.carries_time
        self.writer = writer
        self.driver = driver
        down = plan.operator(edge.downstream)
        self.owner: dict[int, _Task] = {}
        for i in range(down.parallelism):
            task = driver._task(down.name, i)
            for p in task.owned.of_topic(self.topic):
                self.owner[p] = task

    def write(self, records: Sequence[Record]) -> None:
        """All or nothing: route and encode every record, then deliver per partition
        (in order); :class:`RecordError` if one cannot be routed or encoded."""
        groups: dict[int, list[Record]] = {}
        for r in records:
            try:
                targets = self.route.targets(r)
            except Exception as e:
                raise RecordError(
                    f"cannot route record {repr(r)[:120]} to {self.topic}: {type(e).__name__}: {e}"
                ) from e
            for p in targets:
                groups.setdefault(p, []).append(r)
        decoded = {
            p: self.codec.decode_batch(self.codec.frame([self.codec.encode_block(g)]))
            for p, g in groups.items()
        }
        if self.carries_time:  # the records' times, through the channel's carrier
            for p, g in groups.items():
                decoded[p] = with_times(decoded[p], read_times([times_header(g)]) or [])
        for p in sorted(decoded):
            self._send(p, "data", decoded[p])
        if isinstance(self.route, Sticky) and groups:
            self.route.advance()  # a batch went to the current slot

    def control(self, kind: _MessageKind, value: int = 0) -> None:
        """A watermark, idle or end-of-stream record to every partition."""
        for p in range(self.partitions):
            self._send(p, kind, [], value)

    def _send(self, p: int, kind: _MessageKind, records: list[Record], value: int = 0) -> None:
        tp = TopicPartition(self.topic, p)
        offset = self.driver._next_offset(tp)
        self.owner[p].inbox.append(_Message(tp, offset, self.writer, kind, records, value))


class _Task:
    """One subtask: its logic, keyed state, inputs' marks, outputs and inbox."""

    def __init__(self, driver: TestDriver, op: OperatorPlan, index: int) -> None:
        self.driver = driver
        self.op = op
        self.id = SubtaskId(driver.plan.job, op.name, index)
        self.owned: Ownership = owned_partitions(driver.plan, self.id)
        self.state = owned_state(driver.plan, self.id, self.owned)
        self.ctx = _Ctx(self.id, self.state)
        self.logic: Logic | None = op.make_logic() if op.make_logic is not None else None
        self.sink = _sink_name(op)
        self.dead = DeadLetters(driver._letters, self.id) if driver.dead_letter else None  # type: ignore[arg-type]
        self.aside = SetAsides(self.id, self.dead)
        self.outputs: list[_Output] = []
        self.inbox: deque[_Message] = deque()
        # Per input partition: its input's name, writer count; what each writer said.
        self.inputs: dict[TopicPartition, tuple[str, int]] = {}
        self.marks: dict[TopicPartition, dict[int, int]] = {}
        self.idle_writers: dict[TopicPartition, set[int]] = {}
        self.ended: dict[TopicPartition, set[int]] = {}
        self.watermark_out: int | None = None
        self.announced_idle = False
        self.spoke = False  # wrote data or a watermark since it last announced idleness
        self.done = False

    def connect(self, settings: ChannelSettings) -> None:
        """Inputs from the plan's edges (the partitions it owns); outputs to the owners."""
        plan = self.driver.plan
        for e in plan.inputs_of(self.op.name):
            topic = plan.topic_of(e)
            writers = plan.operator(e.upstream).parallelism
            for p in self.owned.of_topic(topic):
                self.inputs[TopicPartition(topic, p)] = (e.input_name, writers)
        self.outputs = [
            _Output(self.driver, e, self.id.index, settings) for e in plan.outputs_of(self.op.name)
        ]
        if self.logic is not None:
            _set_clock(self.logic, self.driver.now_ms)
            self.logic.open(self.ctx)

    # -- input ----------------------------------------------------------------------------

    def run(self) -> bool:
        """Deliver every message waiting in the inbox; True if there was one."""
        if not self.inbox:
            return False
        while self.inbox:
            m = self.inbox.popleft()
            if m.kind == "idle":
                self.idle_writers.setdefault(m.tp, set()).add(m.writer)
            else:
                self.idle_writers.get(m.tp, set()).discard(m.writer)  # it speaks again
            if m.kind == "data":
                self._deliver(m)
            elif m.kind == "watermark":
                self.marks.setdefault(m.tp, {})[m.writer] = m.value
            elif m.kind == "end":
                self.ended.setdefault(m.tp, set()).add(m.writer)
            self.forward_watermark(self._input_watermark())
            self._announce_idle(self._inputs_idle())
        if not self.done and self.inputs and self._finished():
            self.end()
        return True

    def _deliver(self, m: _Message) -> None:
        origins = Same(TopicOffset(m.tp.topic, m.tp.partition, m.offset))
        if self.logic is not None:
            name = self.inputs[m.tp][0]
            call = input_call(self.logic, lambda: name)
            self.emit(self.process(m.records, origins, call), origins)
        elif self.sink is not None:
            self.driver._sinks[self.sink].extend(m.records)

    def _input_watermark(self) -> int | None:
        writers: dict[str, list[WriterMark]] = {}
        for tp, (name, width) in self.inputs.items():
            said = self.marks.get(tp, {})
            ended = self.ended.get(tp, set())
            idle = self.idle_writers.get(tp, set())
            writers.setdefault(name, []).extend(
                WriterMark(w in ended, w in idle, said.get(w)) for w in range(width)
            )
        return combine({name: input_mark(ws) for name, ws in writers.items()})

    def _inputs_idle(self) -> bool:
        live = [
            (tp, w)
            for tp, (_name, width) in self.inputs.items()
            for w in range(width)
            if w not in self.ended.get(tp, set())
        ]
        return bool(live) and all(w in self.idle_writers.get(tp, set()) for tp, w in live)

    def _finished(self) -> bool:
        return all(
            self.ended.get(tp, set()).issuperset(range(width))
            for tp, (_name, width) in self.inputs.items()
        )

    # -- the operator -------------------------------------------------------------------

    def process(
        self, records: Sequence[Record], origins: Origins, call: Call | None = None
    ) -> list[Record]:
        """The operator's call on one message's records; on failure, record by record,
        dead-lettering the ones that fail (or raising the runtime's error without a
        dead-letter channel), as :class:`spillway.recovery.runtime.processor.Processor`."""
        assert self.logic is not None
        return run_diverting(
            call or self.logic.process, records, origins, self.id, self.op.name, self.dead
        )

    def emit(self, records: Iterable[Record], origins: Origins = UNKNOWN) -> None:
        """Write to every output (and a chained sink), taking what the logic set aside."""
        recs = list(records)
        if self.logic is not None:
            self.aside.take(
                self.logic.set_aside(), origins.origin if isinstance(origins, Same) else None
            )
        if not recs:
            return
        try:
            self._write_all(recs)
        except RecordError as e:
            if self.dead is None:
                raise emit_failure(self.id, self.op.name, recs, origins, e, self._write_all) from e
            good = []
            for k, r in enumerate(recs):
                try:
                    self._write_all([r])
                    good.append(r)
                except RecordError as e1:
                    self.dead.send(stage="emit", error=e1, origin=origins.at(k), record=r)
            recs = good
        if self.sink is not None:
            self.driver._sinks[self.sink].extend(recs)

    def _write_all(self, records: list[Record]) -> None:
        # Encode for every output first, so a refused record delivers nothing anywhere.
        for o in self.outputs:
            o.codec.encode_block(records)
        for o in self.outputs:
            o.write(records)
        self.spoke = True

    def forward_watermark(self, wm: int | None) -> None:
        """A risen watermark: the logic's outputs for it, then downstream."""
        if wm is None or (self.watermark_out is not None and wm <= self.watermark_out):
            return
        self.watermark_out = wm
        if self.logic is not None:
            self.emit(self.logic.on_watermark(wm))
        for o in self.outputs:
            o.control("watermark", wm)
        self.spoke = True

    def _announce_idle(self, idle: bool) -> None:
        """Tell downstream that this subtask's input is idle: when it becomes idle, and
        again after it wrote while idle (which made downstream count it again), as the
        runtime's :class:`~spillway.recovery.runtime.eventtime.IdleAnnouncer` repeats."""
        if idle and (not self.announced_idle or self.spoke):
            for o in self.outputs:
                o.control("idle")
            self.spoke = False
        self.announced_idle = idle

    def idle_now(self) -> bool:
        """Whether this subtask's input is idle now (every live upstream writer idle)."""
        return self._inputs_idle()

    def tick(self, now: int) -> None:
        """Processing time is ``now``: the logic's processing-time timers fire."""
        timer = getattr(self.logic, "on_processing_time", None)
        if timer is not None and not self.done:
            self.emit(timer(now))
            self._announce_idle(self.idle_now())

    def end(self) -> None:
        """Every input ended: the logic's final outputs, then end-of-stream downstream."""
        self.done = True
        if self.logic is not None:
            self.emit(self.logic.on_end())
        for o in self.outputs:
            o.control("end")


class _SourceTask(_Task):
    """A source subtask fed by the test (:meth:`TestDriver.send`) or by its declared
    source (:meth:`TestDriver.run_source`)."""

    def __init__(self, driver: TestDriver, op: OperatorPlan, index: int) -> None:
        super().__init__(driver, op, index)
        assert op.make_source is not None
        self.declared: Source = op.make_source()
        self.timestamp, self.strategy, self.record_time = _event_time_of(self.declared)
        self.tracker = (
            None
            if self.strategy is None
            else WatermarkTracker(self.strategy, [0], driver.now_ms() / 1000)
        )
        self.floor: int | None = None  # a watermark set by hand (advance_event_time)
        self.sent = 0
        # Its records carry their event time (as the plan's stamping source does).
        self.stamps = any(e.carries_time for e in driver.plan.outputs_of(op.name))

    def feed(self, records: Sequence[Record], timestamps: Sequence[int] | None) -> None:
        """Records as this subtask's source read them, then its watermark and idleness."""
        if self.done:
            raise RuntimeError(f"{self.id}: source {self.op.name!r} has ended")
        now = self.driver.now_ms()
        good: list[Record] = []
        origins: list[TopicOffset] = []
        for k, r in enumerate(records):
            origin = TopicOffset(self.op.name, self.id.index, self.sent)
            self.sent += 1
            try:
                t = self._time_of(r, None if timestamps is None else timestamps[k], now)
            except RecordError as e:
                if self.dead is None:
                    raise _source_failure_of(self.id, self.op.name, origin, str(e)) from e
                self.dead.send(stage="source", error=str(e), origin=origin, record=r)
                continue
            if self.tracker is not None and t is not None:
                self.tracker.observe(0, t, now / 1000)
            good.append(r if t is None or not self.stamps else stamped(r, t))
            origins.append(origin)
        self._read(good, _Each(origins))
        self.pulse()

    def _time_of(self, r: Record, given: int | None, now: int) -> int | None:
        if self.timestamp is not None:
            return event_time(self.timestamp, r)
        if self.record_time:  # a Kafka source: the record's timestamp (CreateTime: now)
            return now if given is None else given
        return None

    def _read(self, records: list[Record], origins: Origins) -> None:
        if not records:
            return
        if self.logic is not None:  # a chained source: transforms run on what it read
            self.emit(self.process(records, origins))
        else:
            self.emit(records, origins)

    def pulse(self) -> None:
        """The source's watermark and idleness at the driver's clock, downstream."""
        if self.done:
            return
        now = self.driver.now_ms() / 1000
        wm = self.tracker.current(now) if self.tracker is not None else None
        if self.floor is not None:
            wm = self.floor if wm is None else max(wm, self.floor)
        self.forward_watermark(wm)
        self._announce_idle(self.idle_now())

    def idle_now(self) -> bool:
        """Whether the source is idle at the driver's clock (its strategy's idle timeout
        passed without a record); never for a source without event time or ended."""
        now = self.driver.now_ms() / 1000
        return not self.done and self.tracker is not None and self.tracker.idle(now)

    def run_declared(self) -> None:
        """Read the declared source to its end, as its subtask would (records, rejected
        inputs, watermarks), then end."""
        src = self.declared
        src.open(self.ctx, {})
        while (recs := src.read(_POLL_RECORDS)) is not None:
            for bad in src.rejected():
                if self.dead is None:
                    raise source_failure(self.id, self.op.name, bad)
                self.dead.send(stage="source", error=bad.error, raw=bad.raw, origin=bad.origin)
            self._read(recs, src.origins())
            wm = src.watermark()
            self.forward_watermark(wm if self.floor is None or wm is None else max(wm, self.floor))
            self._announce_idle(src.idle())
            self.driver._settle()
        self.end()


class _Each:
    """Origins given one by one (records sent to a source)."""

    def __init__(self, origins: list[TopicOffset]) -> None:
        self._origins = origins

    def at(self, k: int) -> TopicOffset:
        """The origin of record ``k``."""
        return self._origins[k]


def _source_failure_of(
    subtask: SubtaskId, operator: str, origin: TopicOffset, error: str
) -> RecordError:
    """The runtime's error for a record whose event time the source cannot take."""
    return source_failure(subtask, operator, Rejected(origin, error, b""))


class TestDriver:
    """A pipeline running in this process: :meth:`send` records to sources, move time with
    :meth:`advance_event_time` / :meth:`advance_processing_time`, read :meth:`output` and
    :meth:`dead_letters`. See the module docstring for what it runs and how.

    ``inputs``: records to send to each named source right away (as :meth:`send` to
    subtask 0). ``dead_letter``: as ``spillway run --dead-letter`` (the default here), bad
    records are diverted to :meth:`dead_letters`; False: the first one raises the
    :class:`RecordError` a real run would stop with. ``start_ms``: the processing-time
    clock at start (ms since the epoch). ``job_id``: the name of the compiled job, whose
    :class:`~spillway.recovery.job.plan.JobPlan` is :attr:`plan`. :class:`~spillway.
    channels.errors.PipelineDefinitionError` for an invalid pipeline or one the driver
    does not run (see the module docstring).
    """

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(
        self,
        pipeline: Graph,
        inputs: Mapping[str, Iterable[Record]] | None = None,
        *,
        dead_letter: bool = True,
        start_ms: int = 0,
        job_id: str = "test",
    ) -> None:
        self.plan: JobPlan = pipeline.plan(job_id)
        _check_supported(self.plan)
        self.dead_letter = dead_letter
        self._letters = _Letters()
        self._now = start_ms
        self._offsets: dict[TopicPartition, int] = {}
        self._sinks: dict[str, list[Record]] = {}
        self._tasks: dict[tuple[str, int], _Task] = {}
        settings = ChannelSettings()
        for op in self.plan.operators:
            sink = _sink_name(op)
            if sink is not None:
                self._sinks[sink] = []
            for i in range(op.parallelism):
                cls = _SourceTask if op.make_source is not None else _Task
                self._tasks[(op.name, i)] = cls(self, op, i)
        for t in self._tasks.values():
            t.connect(settings)
        for name, records in (inputs or {}).items():
            self.send(name, records)

    # -- context manager ------------------------------------------------------------------

    def __enter__(self) -> TestDriver:
        """The driver itself (``with TestDriver(p) as t:``)."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Nothing to release (no threads, files or clients); exceptions propagate."""
        return None

    # -- input ----------------------------------------------------------------------------

    def send(
        self,
        source: str,
        records: Iterable[Record],
        *,
        subtask: int = 0,
        timestamps: Sequence[int] | None = None,
    ) -> None:
        """Records as source ``source``'s subtask ``subtask`` reads them, in order; the
        pipeline then runs until nothing is left to deliver.

        Event time: the source's ``timestamp`` function, with its ``watermarks`` strategy
        (on the driver's clock); a Kafka source without a function takes ``timestamps``
        (one per record), else the driver's processing time, as Kafka's CreateTime.
        :class:`KeyError` for an unknown source, :class:`ValueError` for a bad subtask or
        a ``timestamps`` of another length.
        """
        task = self._source(source, subtask)
        recs = list(records)
        if timestamps is not None and len(timestamps) != len(recs):
            raise ValueError(f"{len(timestamps)} timestamps for {len(recs)} records")
        task.feed(recs, timestamps)
        self._settle()

    def run_source(self, source: str) -> None:
        """Read source ``source`` as declared (a ``generate`` or ``read_files`` source),
        every subtask to its end, and run the pipeline on it. :class:`ValueError` for a
        Kafka source or an endless generator (feed those with :meth:`send`)."""
        op = self.plan.operator(source)
        for i in range(op.parallelism):
            task = self._source(source, i)
            if not isinstance(task.declared, (GeneratorSource, FileSource)):
                raise ValueError(
                    f"source {source!r} reads Kafka: feed it with send(), not run_source()"
                )
            if isinstance(task.declared, GeneratorSource) and task.declared.count is None:
                raise ValueError(
                    f"source {source!r} generates without end (count=None): feed it with "
                    "send(), or give it a count"
                )
            task.run_declared()
        self._settle()

    def end(self, source: str | None = None) -> None:
        """Input of ``source`` (every source if None) ends, as a bounded source's end:
        operators downstream emit their final results (open windows, pending event-time
        timers, bounded aggregates) once all their inputs ended."""
        for (name, _i), t in self._tasks.items():
            if isinstance(t, _SourceTask) and (source is None or name == source) and not t.done:
                t.end()
        if source is not None:
            self.plan.operator(source)  # KeyError for an unknown name
        self._settle()

    # -- time -----------------------------------------------------------------------------

    def advance_event_time(self, watermark: int, source: str | None = None) -> None:
        """The watermark of ``source`` (every source if None) becomes at least
        ``watermark``, as if its strategy had produced it; downstream watermarks follow
        by the runtime's rules (the minimum over inputs and writers), firing windows and
        event-time timers. A watermark never goes back."""
        for (name, _i), t in self._tasks.items():
            if isinstance(t, _SourceTask) and (source is None or name == source):
                t.floor = watermark if t.floor is None else max(t.floor, watermark)
                t.pulse()
        if source is not None:
            self.plan.operator(source)
        self._settle()

    def advance_processing_time(self, ms: int) -> None:
        """Move the processing-time clock ``ms`` forward: processing-time timers (and
        state TTLs) due by then fire, and sources quiet for their strategy's idle timeout
        go idle. :class:`ValueError` if ``ms`` is negative."""
        if ms < 0:
            raise ValueError(f"processing time cannot go back ({ms} ms)")
        self._now += ms
        for t in self._tasks.values():
            if isinstance(t, _SourceTask):
                t.pulse()
        self._settle()
        for t in self._tasks.values():
            t.tick(self._now)
            self._settle()

    def now_ms(self) -> int:
        """The driver's processing time (ms)."""
        return self._now

    # -- output ---------------------------------------------------------------------------

    def sinks(self) -> list[str]:
        """The names of the pipeline's sinks."""
        return list(self._sinks)

    def output(self, sink: str) -> list[Record]:
        """Every record sink ``sink`` received so far, in arrival order (each sink
        subtask's records in its channel order). :class:`KeyError` for an unknown sink."""
        return list(self._sinks[sink])

    def take(self, sink: str) -> list[Record]:
        """What :meth:`output` gives, then forgotten (the next call gives only newer
        records), like ``TestOutputTopic.readValuesToList``."""
        out = self._sinks[sink]
        self._sinks[sink] = []
        return out

    def dead_letters(self) -> list[DeadLetter]:
        """Every record dead-lettered so far, in order, with origin, stage and error."""
        out = []
        for d in self._letters.docs:
            rec = d["record"]
            out.append(
                DeadLetter(
                    d["operator"],
                    d["index"],
                    d["stage"],
                    d["error"],
                    d["origin"],
                    None if rec is None else json.loads(rec),
                    None if d["raw"] is None else base64.b64decode(d["raw"]),
                )
            )
        return out

    def set_aside(self, operator: str) -> dict[str, int]:
        """How many records ``operator``'s subtasks set aside, per kind (``late``), as
        the checkpoints of a real run count them (with or without dead letters)."""
        op = self.plan.operator(operator)
        total: Counter[str] = Counter()
        for i in range(op.parallelism):
            total.update(self._task(operator, i).aside.counts())
        return dict(total)

    def watermark(self, operator: str, subtask: int = 0) -> int | None:
        """The watermark ``operator``'s subtask last acted on (None: none yet)."""
        return self._task(operator, subtask).watermark_out

    def state(self, operator: str, subtask: int = 0) -> dict[Any, Any]:
        """The keyed state of ``operator``'s subtask as ``{state key: value}`` (the
        operator's own layout). :class:`ValueError` if the operator keeps no state."""
        task = self._task(operator, subtask)
        if task.state is None:
            raise ValueError(f"operator {operator!r} keeps no state")
        return dict(task.state.items())

    # -- the scheduler --------------------------------------------------------------------

    def _task(self, operator: str, index: int) -> _Task:
        """The subtask ``operator[index]``; :class:`KeyError` if there is none."""
        try:
            return self._tasks[(operator, index)]
        except KeyError:
            raise KeyError(f"no subtask {operator}[{index}] in {self.plan.job}") from None

    def _source(self, name: str, index: int) -> _SourceTask:
        op = self.plan.operator(name)
        if op.make_source is None:
            raise KeyError(f"{name!r} is not a source of the pipeline")
        if not 0 <= index < op.parallelism:
            raise ValueError(f"source {name!r} has subtasks 0..{op.parallelism - 1}, not {index}")
        task = self._tasks[(name, index)]
        assert isinstance(task, _SourceTask)
        return task

    def _next_offset(self, tp: TopicPartition) -> int:
        """The next offset of channel partition ``tp``."""
        n = self._offsets.get(tp, 0)
        self._offsets[tp] = n + 1
        return n

    def _settle(self) -> None:
        """Run subtasks in plan order until no message is left to deliver."""
        busy = True
        while busy:
            busy = False
            for t in self._tasks.values():
                busy = t.run() or busy


def run(
    pipeline: Graph,
    inputs: Mapping[str, Iterable[Record]],
    *,
    dead_letter: bool = True,
) -> dict[str, list[Record]]:
    """Send ``inputs`` (per source name, to subtask 0), end every source, and return
    what each sink received: the whole run of a bounded pipeline in one call."""
    t = TestDriver(pipeline, inputs, dead_letter=dead_letter)
    t.end()
    return {name: t.output(name) for name in t.sinks()}


def _sink_name(op: OperatorPlan) -> str | None:
    """The sink's name of a sink operator or of a chain that ends in one."""
    if op.make_sink is None:
        return None
    chain = op.description.get("chain")
    if chain:
        return str(chain[-1]["name"])
    return op.name


def _event_time_of(
    source: Source,
) -> tuple[Callable[[Record], int] | None, Watermarks | None, bool]:
    """(timestamp function, watermark strategy, uses the record's own timestamp) of a
    declared source; strategy None: no event time."""
    source = getattr(source, "inner", source)  # a source that stamps: the declared one's
    if isinstance(source, GeneratorSource):
        fn = source.event_time
        return fn, source.watermarks if fn is not None else None, False
    if isinstance(source, FileSource):
        fn = source.timestamp
        return fn, source.watermarks if fn is not None else None, False
    if isinstance(source, KafkaTopicSource):
        strategy = source.watermarks
        return source.timestamp, strategy, strategy is not None and source.timestamp is None
    raise PipelineDefinitionError(f"TestDriver cannot run source type {type(source).__name__}")


def _check_supported(plan: JobPlan) -> None:
    """:class:`PipelineDefinitionError` for what the driver does not run (batch paths)."""
    for op in plan.operators:
        members = op.description.get("chain") or [op.description]
        if any(m.get("batch") for m in members):
            raise PipelineDefinitionError(
                f"TestDriver does not run batch operators or batch sources ({op.name!r}); "
                "test the record path, or run the pipeline on Spark"
            )
        if op.make_logic is not None and is_batch_logic(op.make_logic()):
            raise PipelineDefinitionError(f"TestDriver does not run batch operators ({op.name!r})")


def _set_clock(logic: Any, now: Callable[[], int]) -> None:
    """Operators that read processing time (process functions) read the driver's clock."""
    for member in getattr(logic, "members", [logic]):
        m = getattr(member, "inner", member)  # an operator that stamps: its logic's clock
        if hasattr(m, "clock"):
            m.clock = now
