"""Runs one subtask: fence, restore, run, checkpoint, finish.

Why a restart of one subtask is exactly-once: downstream subtasks only ever saw this
subtask's committed outputs, which match the state and input offsets of its last
committed checkpoint (one transaction holds all of them). A restart fences the previous
incarnation (its open transaction is aborted), rebuilds that state from the changelog,
and re-reads its inputs from those offsets. Upstream subtasks never notice: channels are
durable, and nothing they need comes from this subtask.

The runner wires the parts, each with one job (docs: STYLE "Runtime parts"):
:mod:`spillway.recovery.restore.restorer` finds what to continue from,
:mod:`spillway.recovery.runtime.processor` moves
records, :mod:`spillway.recovery.runtime.collector` is where outputs leave,
:mod:`spillway.recovery.runtime.checkpointer`
(with :mod:`spillway.recovery.runtime.cadence`) checkpoints, and
:mod:`spillway.recovery.runtime.taskloop` only loops.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import ConfigError
from spillway.channels.ids import SubtaskId
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.channels.reader import ChannelReader, InputChannel
from spillway.channels.routing.keygroups import Ownership
from spillway.channels.writer import ChannelWriter, OutputChannel
from spillway.offsets.store import CheckpointStore, check_retention, commit_checkpoint
from spillway.recovery.job.plan import JobPlan, OperatorPlan
from spillway.recovery.observe.events import EventLog, JobSignals
from spillway.recovery.observe.phases import PhaseClock
from spillway.recovery.observe.phases import merge as merge_phases
from spillway.recovery.restore.ownership import owned_partitions, owned_state
from spillway.recovery.restore.progress import ProgressLog, Replay, SourceReplay, replay_ends
from spillway.recovery.restore.rescale import handover_released
from spillway.recovery.restore.restorer import Restored, Restorer
from spillway.recovery.restore.state import ChangelogState
from spillway.recovery.runtime.batchpath import reads_batches
from spillway.recovery.runtime.cadence import GlobalCadence
from spillway.recovery.runtime.checkpointer import Checkpointer, Observers, Parts
from spillway.recovery.runtime.collector import make_collector
from spillway.recovery.runtime.crashpoints import CrashPoints
from spillway.recovery.runtime.deadletter import PRODUCER_CONFIG, DeadLetters
from spillway.recovery.runtime.eventtime import SetAsides
from spillway.recovery.runtime.failures import failure_fields
from spillway.recovery.runtime.faults import Faults
from spillway.recovery.runtime.gcpolicy import streaming_collector
from spillway.recovery.runtime.lifecycle import Lifecycle, Phase
from spillway.recovery.runtime.livestats import LiveStats
from spillway.recovery.runtime.options import GUARANTEES, RunOptions, SubtaskResult
from spillway.recovery.runtime.processor import Processor
from spillway.recovery.runtime.taskloop import Outcome, TaskLoop

# Re-exported: the driver, the benchmarks and the tests import them from here.
__all__ = ["GUARANTEES", "GlobalCadence", "RunOptions", "SubtaskResult", "SubtaskRunner"]

log = logging.getLogger("spillway.subtask")


class _Ctx:
    def __init__(
        self, subtask: SubtaskId, state: ChangelogState | None, kafka: KafkaSettings
    ) -> None:
        self._subtask = subtask
        self._state = state
        self._kafka = kafka
        self.restored_watermark: int | None = None

    @property
    def kafka(self) -> KafkaSettings:
        return self._kafka

    @property
    def watermark(self) -> int | None:
        """The operator's watermark restored from its checkpoint (None: none yet)."""
        return self.restored_watermark

    @property
    def subtask(self) -> SubtaskId:
        return self._subtask

    @property
    def state(self) -> ChangelogState:
        if self._state is None:
            raise RuntimeError(f"{self._subtask}: operator is not stateful")
        return self._state


def input_channels(
    plan: JobPlan, op: OperatorPlan, owned: Ownership
) -> list[InputChannel]:
    """The input partitions a subtask reads: the partitions of each input it owns."""
    return [
        InputChannel(
            plan.topic_of(e),
            part,
            e.schema,
            plan.operator(e.upstream).parallelism,
            e.input_name,
            e.earlier_schemas,
        )
        for e in plan.inputs_of(op.name)
        for part in owned.of_topic(plan.topic_of(e))
    ]


def _padded(values: tuple[int, ...], n: int) -> tuple[int, ...]:
    """``values`` per partition, with 0 for partitions added since they were recorded."""
    return values + (0,) * (n - len(values))


class SubtaskRunner:
    """One incarnation of one subtask. Call :meth:`run` once."""

    def __init__(
        self,
        plan: JobPlan,
        subtask: SubtaskId,
        settings: KafkaSettings,
        options: RunOptions,
        attempt: int = 0,
        should_stop: Callable[[], bool] = lambda: False,
        phases: PhaseClock | None = None,
    ) -> None:
        self.phases = phases if phases is not None else PhaseClock()
        self.plan = plan
        self.subtask = subtask
        self.settings = settings
        self.options = options
        self.attempt = attempt
        if options.guarantee not in GUARANTEES:
            raise ConfigError(
                f"guarantee must be one of {', '.join(GUARANTEES)}, got {options.guarantee!r}"
            )
        self.lifecycle = Lifecycle()
        self._signals = (
            JobSignals(settings, plan.job, options.run_id, (subtask.operator, options.generation))
            if options.run_id
            else None
        )
        self._should_stop = self._signals.requested if self._signals else should_stop
        op = plan.operator(subtask.operator)
        self.op = op
        self.store = CheckpointStore(settings, plan.job, op.name, op.parallelism)
        self._released = False  # the rescale handover no longer needs old checkpoints
        self.producer = TransactionalProducer(
            settings,
            subtask.transactional_id,
            transaction_timeout_ms=options.transaction_timeout_ms,
            extra=PRODUCER_CONFIG if options.dead_letter else None,  # room for big dead letters
        )
        # Channel and sink outputs leave through the collector; state and checkpoints
        # stay transactional under either guarantee.
        self.out = make_collector(options.guarantee, self.producer, settings, subtask)
        self.events = EventLog(settings, subtask, attempt, options.run_id)
        self.live = LiveStats()
        self.result = SubtaskResult(str(subtask), attempt, "created")
        # Partition ownership (recovery/restore/ownership.py): what this subtask reads and restores.
        self.owned = owned_partitions(plan, subtask)
        self.state = owned_state(plan, subtask, self.owned, options.channel)
        self.ctx = _Ctx(subtask, self.state, settings)
        self.inputs = input_channels(plan, op, self.owned)
        self.dead_letters = DeadLetters(self.producer, subtask) if options.dead_letter else None
        self.progress = ProgressLog(settings, subtask)
        self.crash = CrashPoints(
            Faults(subtask, attempt, generation=options.generation),
            [self.out.flush, self.producer.flush, self.progress.flush],
        )
        self.processor = self._make_processor(op)
        self.checkpointer = self._make_checkpointer()
        self.processor.cadence = self.checkpointer.cadence
        self.consumer: AssignedConsumer | None = None
        p = self.processor
        self.events.extra = lambda: self.live.doc(self.result, p.reader, self.state, p.source)
        self._started = 0.0
        self.phases.lap("clients")

    def _make_processor(self, op: OperatorPlan) -> Processor:
        return Processor(
            self.subtask,
            op.name,
            self.options,
            (
                op.make_source() if op.make_source else None,
                op.make_logic() if op.make_logic else None,
                op.make_sink() if op.make_sink else None,
            ),
            self.dead_letters,
            SetAsides(self.subtask, self.dead_letters),
            self.crash,
            self.result,
            self.progress,
            self._caught_up,
        )

    def _make_checkpointer(self) -> Checkpointer:
        return Checkpointer(
            self.subtask,
            self.plan.fingerprint,
            self.attempt,
            self.producer,
            self.out,
            lambda p, c, meta, reached: commit_checkpoint(
                self.producer, self.store, c, meta, reached
            ),
            self.store,
            self.options,
            self._signals,
            Observers(self.lifecycle, self.live, self.result, self.events, self.crash),
        )

    # -- life ----------------------------------------------------------------------------

    def run(self) -> SubtaskResult:
        """Run to the end (bounded), until asked to stop, or until an error is raised."""
        try:
            self.lifecycle.to(Phase.RESTORING)
            if not self._restore():
                return self.result
            self.lifecycle.to(Phase.RUNNING)
            self.producer.begin()
            loop = TaskLoop(
                self.processor,
                self.checkpointer,
                self._should_stop,
                self.processor.reader is not None,
                self.lifecycle,
            )
            with streaming_collector():
                outcome = loop.run()
            if outcome is Outcome.FINISHED:
                self._finished()
            else:
                self._stopped()
            return self.result
        except BaseException as e:
            self.lifecycle.phase = Phase.FAILED
            self.result.status = "failed"
            log.exception("%s attempt %d failed", self.subtask, self.attempt)
            try:
                fields = failure_fields(self.subtask, e)
                self.events.emit("failed", error=f"{type(e).__name__}: {e}", **fields)
            except Exception:  # the event is best-effort; the original error matters
                log.warning("could not record the failure of %s", self.subtask)
            raise
        finally:
            self._close()

    def _restore(self) -> bool:
        """Fence, restore and open every part; False if the subtask finished earlier."""
        t0 = time.monotonic()
        self.producer.start()  # fences the previous incarnation, aborts its open transaction
        self.phases.mark("fenced")
        self.phases.lap("fence")
        self.events.emit("fencing")  # tells a fenced older copy it was replaced (driver._task)
        self.out.start()
        self.phases.lap("announce")
        restorer = Restorer(
            self.subtask, self.store, self.settings, self.progress.tp, self.op.stateful
        )
        rescale = self.options.rescale
        restored = restorer.load(
            self.plan.fingerprint,
            self.options.from_checkpoint,
            self.options.allow_rewind,
            (self.plan, rescale) if rescale is not None else None,
        )
        self.phases.lap("history")
        ckpt = restored.checkpoint
        if ckpt is not None:
            self.result.restored_from = int(ckpt.checkpoint_id)
        self.checkpointer.restored(
            ckpt, restored.global_taken[0] if restored.global_taken else None
        )
        if restored.finished:
            self._skip(restored)
            return False
        if self.state is not None:
            restorer.state(self.state, restored)
        self.phases.lap("state")
        self.crash.reached("restore")
        self._open_inputs(restored)
        self._open_writers(restored)
        self.phases.lap("inputs")
        self._open_operator(restored)
        self.result.restore_s = time.monotonic() - t0
        self._started = time.monotonic()
        self.phases.lap("opened")
        self.phases.mark("restored")
        p = self.processor
        if not p.replay.pending and not p.source_replay.pending:
            self.result.catchup_s = 0.0 if ckpt else None
            if ckpt is not None:
                self.phases.mark("caught_up", self.phases.times["restored"])
        self._announce_started(restored)
        return True

    def _skip(self, restored: Restored) -> None:
        """The subtask finished earlier: publish what its sink may not have, skip it."""
        ckpt = restored.checkpoint
        assert ckpt is not None
        sink = self.processor.sink
        if sink is not None:
            # The final commit may have happened without its files being published
            # (crash between commit and rename): publish them now.
            sink.open(self.ctx, restored.sink_position, self.out)
        self.lifecycle.to(Phase.FINISHED)
        self.result.status = "skipped"
        log.info("%s finished earlier (checkpoint %s); skipping", self.subtask, ckpt.checkpoint_id)
        self.events.emit("skipped", checkpoint=int(ckpt.checkpoint_id))

    def _open_inputs(self, restored: Restored) -> None:
        """The channel reader, from the restored positions; what the replay will cover."""
        if not self.inputs:
            return
        self.consumer = AssignedConsumer(self.settings, self.subtask.group_id)
        reader = ChannelReader(
            self.consumer,
            self.inputs,
            tolerate_bad=self.dead_letters is not None,
            align=self.checkpointer.cadence.align,
            batches=reads_batches(self.processor.logic, self.processor.sink),
            resends=self.options.guarantee == "at-least-once",
        )
        start = restored.start(ch.tp for ch in self.inputs)
        marks = {ch.tp: self.consumer.watermarks(ch.tp) for ch in self.inputs}
        check_retention(self.subtask, start, marks)
        reader.start(start, restored.reader_state())
        ckpt = restored.checkpoint
        ends, basis = replay_ends(
            start, {tp: m[1] for tp, m in marks.items()}, restored.mark, ckpt is not None
        )
        p = self.processor
        p.reader = reader
        p.resume = restored.resume()
        p.replay = Replay(start, ends, basis)
        self.result.replay, self.result.replay_basis = p.replay.figure, basis

    def _open_writers(self, restored: Restored) -> None:
        """One channel writer per output edge, continuing the restored counts and marks."""
        for e in self.plan.outputs_of(self.op.name):
            p = self.plan.partitions_of(e)  # key groups on a keyed edge (ownership.py)
            topic = self.plan.topic_of(e)
            route = self.plan.partitioner_of(e, self.subtask.index)  # by slot: a batch at a time
            w = ChannelWriter(
                self.out,
                OutputChannel(topic, e.schema, route, p),
                self.subtask.index,
                self.options.channel,
            )
            counts, marks = restored.output(topic)
            # A topic grown by a rescale (spillway.recovery.restore.rescale): its new partitions
            # start at 0.
            if counts is not None:
                w.restore_counts(_padded(counts, p))
            if marks is not None:
                w.restore_marks(_padded(marks, p))
            self.processor.writers.append(w)

    def _open_operator(self, restored: Restored) -> None:
        """Source, sink and logic continue from the restored positions and watermark."""
        p = self.processor
        self.ctx.restored_watermark = restored.watermark
        p.aside.restore(restored.set_aside)
        if p.source is not None:
            p.source.open(self.ctx, restored.source_position)
            p.source_replay = SourceReplay(
                p.source, restored.mark.source if restored.mark else None
            )
            self.result.source_replay = p.source_replay.span
        if p.sink is not None:
            p.sink.open(self.ctx, restored.sink_position, self.out)
        if p.logic is not None:
            p.logic.open(self.ctx)
        p.watermark_out = restored.watermark
        self.checkpointer.parts = Parts(
            reader=p.reader,
            writers=p.writers,
            state=self.state,
            source=p.source,
            sink=p.sink,
            watermark=lambda: p.watermark_out,
            set_aside=p.aside.counts,
            group_metadata=lambda: self.consumer.group_metadata() if self.consumer else None,
            mark=p.mark,
            owned=self.owned,
            prunable=self._handover_released,
            handing_over=self._signals.handing_over if self._signals else (lambda: False),
        )

    def _handover_released(self) -> bool:
        """Whether old checkpoints may be pruned
        (:func:`spillway.recovery.restore.rescale.handover_released`);
        once True, for good."""
        self._released = self._released or handover_released(
            self.options.rescale, self.op.name, self.op.parallelism, self.store.latest
        )
        return self._released

    def _announce_started(self, restored: Restored) -> None:
        mark = restored.mark
        self.result.phases = self._phases()
        self.events.emit(
            "started",
            restored_from=self.result.restored_from,
            replay=self.result.replay,
            restore_s=round(self.result.restore_s, 3),
            phases=self.result.phases,
            steps=self.phases.steps_dict(),
            replay_basis=self.result.replay_basis,
            source_replay=self.result.source_replay,
            replay_read_by={"attempt": mark.attempt, "time": mark.time} if mark else None,
            # A checkpoint taken inside a message: how many of its records were done.
            resumed_mid_message={str(tp): [o, d] for (tp, o), d in self.processor.resume.items()},
            handover_unmarked=restored.unmarked.to_json() if restored.unmarked else None,
        )
        if restored.global_taken is not None:
            # The previous incarnation may have died between committing global checkpoint
            # n and announcing it; announce it again (coordinators count it once).
            g, cid = restored.global_taken
            self.events.emit("checkpointed", **{"global": g, "checkpoint": cid})
        log.info(
            "%s attempt %d restored from checkpoint %s in %.2fs; replaying %s",
            self.subtask,
            self.attempt,
            self.result.restored_from,
            self.result.restore_s,
            self.result.replay or "nothing",
        )

    def _phases(self) -> dict[str, float]:
        """This attempt's restart phases so far, with Spark's (driver-side) ones once known."""
        spark = None
        if self._signals is not None and self.attempt > 0:
            spark = self._signals.spark_phases(self.subtask, self.attempt)
        return merge_phases(spark, self.phases.as_dict())

    def _caught_up(self) -> None:
        """Re-read everything the previous attempt had read: record it (once)."""
        self.result.catchup_s = time.monotonic() - self._started
        self.phases.mark("caught_up")
        self.result.phases = self._phases()
        self.events.emit(
            "caught-up",
            catchup_s=round(self.result.catchup_s, 3),
            phases=self.result.phases,
            replay=self.result.replay,
            replay_basis=self.result.replay_basis,
            source_replay=self.result.source_replay,
        )

    def _stopped(self) -> None:
        self.result.status = "stopped"
        self.result.set_aside = self.processor.aside.counts()
        self.events.emit(
            "stopped", checkpoint=self.checkpointer.seq.last, set_aside=self.result.set_aside
        )

    def _finished(self) -> None:
        p = self.processor
        self.result.status = "finished"
        self.result.set_aside = p.aside.counts()
        if self.result.catchup_s is None and (p.replay.pending or p.source_replay.pending):
            self._caught_up()
        self.result.phases = self._phases()  # Spark's phases, if they came after caught_up
        self.events.emit(
            "finished",
            checkpoint=self.checkpointer.seq.last,
            records_in=self.result.records_in,
            records_out=self.result.records_out,
            replay=self.result.replay,
            replay_basis=self.result.replay_basis,
            source_replay=self.result.source_replay,
            catchup_s=self.result.catchup_s,
            set_aside=self.result.set_aside,
            phases=self.result.phases,
        )

    def _close(self) -> None:
        self.checkpointer.close(self.settings.request_timeout_s)  # before its store closes
        closers = [
            self.events.close,
            self.producer.close,
            self.store.close,
            self.progress.close,
            self.out.close,
        ]
        if self._signals is not None:
            closers.append(self._signals.close)
        for closer in closers:
            try:
                closer()
            except Exception:  # closing must not hide the real outcome
                log.warning("closing %s failed", self.subtask, exc_info=True)
        if self.processor.reader is not None:
            try:
                self.processor.reader.close()
            except Exception:
                log.warning("closing reader of %s failed", self.subtask, exc_info=True)
