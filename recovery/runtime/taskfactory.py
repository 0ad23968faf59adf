"""Builds one subtask's task from what its restore returned, every part whole.

Restore first, then build (as Kafka Streams' ActiveTaskCreator builds a complete
StreamTask): :func:`build_task` takes the plan, the restored result
(:class:`spillway.recovery.restore.restorer.Restored`) and the clients, opens the reader,
the writers and the operator at the restored positions, and returns a :class:`Task` whose
parts have every field set when they are constructed. No part sets another part's field:
what one part needs of another it is given when it is built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import SubtaskId
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.channels.modes import CheckpointMode
from spillway.channels.reader import ChannelReader, InputChannel, ReaderModes
from spillway.channels.routing.keygroups import Ownership
from spillway.channels.writer import ChannelWriter, OutputChannel
from spillway.offsets.store import CheckpointStore, check_retention, commit_checkpoint
from spillway.recovery.job.plan import JobPlan, Logic, OperatorPlan, Sink, Source
from spillway.recovery.observe.events import JobSignals
from spillway.recovery.restore.progress import ProgressLog, Replay, SourceReplay, replay_ends
from spillway.recovery.restore.rescale import handover_released
from spillway.recovery.restore.restorer import Restored
from spillway.recovery.restore.state import ChangelogState
from spillway.recovery.runtime.batchpath import reads_batches
from spillway.recovery.runtime.cadence import make_cadence
from spillway.recovery.runtime.checkpointer import Checkpointer, Observers, Parts
from spillway.recovery.runtime.collector import OutputCollector
from spillway.recovery.runtime.deadletter import DeadLetters
from spillway.recovery.runtime.eventtime import SetAsides
from spillway.recovery.runtime.options import RunOptions
from spillway.recovery.runtime.processor import Continuation, Processor
from spillway.recovery.runtime.taskloop import TaskLoop

OperatorObjects = tuple[Source | None, Logic | None, Sink | None]


class OperatorContext:
    """What an operator's ``open`` is given: its subtask, its state, the Kafka settings and
    the watermark restored from its checkpoint."""

    def __init__(
        self,
        subtask: SubtaskId,
        state: ChangelogState | None,
        kafka: KafkaSettings,
        watermark: int | None,
    ) -> None:
        self._subtask = subtask
        self._state = state
        self._kafka = kafka
        self._watermark = watermark

    @property
    def kafka(self) -> KafkaSettings:
        """The cluster the job runs on."""
        return self._kafka

    @property
    def watermark(self) -> int | None:
        """The operator's watermark restored from its checkpoint (None: none yet)."""
        return self._watermark

    @property
    def subtask(self) -> SubtaskId:
        """The subtask the operator runs in."""
        return self._subtask

    @property
    def state(self) -> ChangelogState:
        """The subtask's keyed state; an error for an operator that is not stateful."""
        if self._state is None:
            raise RuntimeError(f"{self._subtask}: operator is not stateful")
        return self._state


def input_channels(plan: JobPlan, op: OperatorPlan, owned: Ownership) -> list[InputChannel]:
    """The input partitions a subtask reads: the partitions of each input it owns."""
    return [
        InputChannel(
            plan.topic_of(e),
            part,
            e.schema,
            plan.operator(e.upstream).parallelism,
            e.input_name,
            e.earlier_schemas,
            e.carries_time,
        )
        for e in plan.inputs_of(op.name)
        for part in owned.of_topic(plan.topic_of(e))
    ]


def _padded(values: tuple[int, ...], n: int) -> tuple[int, ...]:
    """``values`` per partition, with 0 for partitions added since they were recorded."""
    return values + (0,) * (n - len(values))


@dataclass(frozen=True)
class Clients:
    """What the runner opened before the restore (and closes after the run)."""

    settings: KafkaSettings
    producer: TransactionalProducer
    out: OutputCollector
    store: CheckpointStore
    progress: ProgressLog
    signals: JobSignals | None
    dead_letters: DeadLetters | None
    # Opens the consumer of the input channels (called only if the subtask reads some).
    consumer: Callable[[], AssignedConsumer]


@dataclass(frozen=True)
class TaskSpec:
    """The subtask to build: its plan, its options, what it owns and its operator's
    objects (made from the plan, not opened yet); ``state`` is restored already."""

    plan: JobPlan
    subtask: SubtaskId
    options: RunOptions
    attempt: int
    owned: Ownership
    state: ChangelogState | None
    operator: OperatorObjects


@dataclass(frozen=True)
class Hooks:
    """What the task tells its runner: a replay caught up, a restart phase passed; and
    what it asks of it: whether to stop."""

    caught_up: Callable[[], None]
    lap: Callable[[str], None]
    should_stop: Callable[[], bool]


@dataclass(frozen=True)
class Task:
    """One subtask's parts, built whole: run :attr:`loop`."""

    processor: Processor
    checkpointer: Checkpointer
    loop: TaskLoop


class _HandoverReleased:
    """Whether old checkpoints may be pruned
    (:func:`spillway.recovery.restore.rescale.handover_released`); once True, for good."""

    def __init__(self, options: RunOptions, op: OperatorPlan, store: CheckpointStore) -> None:
        self._options = options
        self._op = op
        self._store = store
        self._released = False

    def __call__(self) -> bool:
        self._released = self._released or handover_released(
            self._options.rescale, self._op.name, self._op.parallelism, self._store.latest
        )
        return self._released


def _open_reader(
    spec: TaskSpec,
    restored: Restored,
    clients: Clients,
    inputs: list[InputChannel],
    checkpoints: CheckpointMode,
) -> tuple[ChannelReader, AssignedConsumer, Replay]:
    """The channel reader (and its consumer), from the restored positions; what the replay
    will cover."""
    _source, logic, sink = spec.operator
    consumer = clients.consumer()
    try:
        reader = ChannelReader(
            consumer,
            inputs,
            ReaderModes(
                bad="fail" if clients.dead_letters is None else "deliver",
                checkpoints=checkpoints,
                form="batches" if reads_batches(logic, sink) else "rows",
                guarantee=spec.options.guarantee,
            ),
        )
        start = restored.start(ch.tp for ch in inputs)
        marks = {ch.tp: consumer.watermarks(ch.tp) for ch in inputs}
        check_retention(spec.subtask, start, marks)
        reader.start(start, restored.reader_state())
    except BaseException:
        consumer.close()  # nobody else holds it yet
        raise
    ends, basis = replay_ends(
        start, {tp: m[1] for tp, m in marks.items()}, restored.mark, restored.checkpoint is not None
    )
    return reader, consumer, Replay(start, ends, basis)


def _open_writers(spec: TaskSpec, restored: Restored, out: OutputCollector) -> list[ChannelWriter]:
    """One channel writer per output edge, continuing the restored counts and marks."""
    plan, subtask = spec.plan, spec.subtask
    writers = []
    for e in plan.outputs_of(subtask.operator):
        p = plan.partitions_of(e)  # key groups on a keyed edge (ownership.py)
        topic = plan.topic_of(e)
        route = plan.partitioner_of(e, subtask.index)  # by slot: a batch at a time
        w = ChannelWriter(
            out,
            OutputChannel(topic, e.schema, route, p, e.carries_time),
            subtask.index,
            spec.options.channel,
        )
        counts, marks = restored.output(topic)
        # A topic grown by a rescale (spillway.recovery.restore.rescale): its new partitions
        # start at 0.
        if counts is not None:
            w.restore_counts(_padded(counts, p))
        if marks is not None:
            w.restore_marks(_padded(marks, p))
        writers.append(w)
    return writers


def build_task(
    spec: TaskSpec,
    restored: Restored,
    clients: Clients,
    observers: Observers,
    hooks: Hooks,
) -> Task:
    """The task of ``spec``, continuing from ``restored``: the reader and writers opened at
    the restored positions, the operator opened (source, sink, logic), the processor, the
    checkpointer and the loop, each given everything it works with."""
    plan, subtask, options = spec.plan, spec.subtask, spec.options
    op = plan.operator(subtask.operator)
    source, logic, sink = spec.operator
    triggers = clients.signals
    last_global = restored.global_taken[0] if restored.global_taken else None
    cadence = make_cadence(options.checkpoint_mode, triggers, options.trigger_chunk, last_global)
    inputs = input_channels(plan, op, spec.owned)
    reader: ChannelReader | None = None
    consumer: AssignedConsumer | None = None
    replay = Replay({}, {}, None)
    if inputs:
        reader, consumer, replay = _open_reader(spec, restored, clients, inputs, cadence.mode)
    try:
        writers = _open_writers(spec, restored, clients.out)
        hooks.lap("inputs")
        ctx = OperatorContext(subtask, spec.state, clients.settings, restored.watermark)
        aside = SetAsides(subtask, clients.dead_letters)
        aside.restore(restored.set_aside)
        source_replay = SourceReplay(None, None)
        if source is not None:
            source.open(ctx, restored.source_position)
            source_replay = SourceReplay(source, restored.mark.source if restored.mark else None)
        if sink is not None:
            sink.open(ctx, restored.sink_position, clients.out)
        if logic is not None:
            logic.open(ctx)
    except BaseException:
        if reader is not None:
            reader.close()  # the task that would own it is not built
        raise
    processor = Processor(
        subtask,
        op.name,
        options,
        spec.operator,
        clients.dead_letters,
        aside,
        observers.crash,
        observers.result,
        clients.progress,
        hooks.caught_up,
        reader,
        writers,
        cadence,
        Continuation(replay, source_replay, restored.resume(), restored.watermark),
    )
    consumer_meta = consumer.group_metadata if consumer is not None else (lambda: None)
    parts = Parts(
        reader=reader,
        writers=writers,
        state=spec.state,
        source=source,
        sink=sink,
        watermark=lambda: processor.watermark_out,
        set_aside=aside.counts,
        group_metadata=consumer_meta,
        mark=processor.mark,
        owned=spec.owned,
        prunable=_HandoverReleased(options, op, clients.store),
        handing_over=triggers.handing_over if triggers is not None else (lambda: False),
    )
    producer, store = clients.producer, clients.store
    checkpointer = Checkpointer(
        subtask,
        plan.fingerprint,
        spec.attempt,
        producer,
        clients.out,
        lambda p, c, meta, reached: commit_checkpoint(producer, store, c, meta, reached),
        store,
        options,
        triggers,
        observers,
        cadence,
        parts,
        restored.checkpoint,
    )
    loop = TaskLoop(
        processor, checkpointer, cadence, hooks.should_stop, reader is not None, observers.lifecycle
    )
    return Task(processor, checkpointer, loop)
