"""Runs one subtask: fence, restore, run, checkpoint, finish.

Why a restart of one subtask is exactly-once: downstream subtasks only ever saw this
subtask's committed outputs, which match the state and input offsets of its last
committed checkpoint (one transaction holds all of them). A restart fences the previous
incarnation (its open transaction is aborted), rebuilds that state from the changelog,
and re-reads its inputs from those offsets. Upstream subtasks never notice: channels are
durable, and nothing they need comes from this subtask.

The runner opens the clients, restores, then has
:mod:`spillway.recovery.runtime.taskfactory` build the task whole from what was restored.
The parts each have one job (docs/architecture.md, A subtask's parts):
:mod:`spillway.recovery.restore.restorer` finds what to continue from,
:mod:`spillway.recovery.runtime.processor` moves
records, :mod:`spillway.recovery.runtime.collector` is where outputs leave,
:mod:`spillway.recovery.runtime.checkpointer`
(with :mod:`spillway.recovery.runtime.cadence`) checkpoints, and
:mod:`spillway.recovery.runtime.taskloop` only loops, and alone asks for checkpoints.
What the attempt records about itself (restart phases, events, the result record) is
:mod:`spillway.recovery.runtime.observer`'s to write: the runner tells it what happened.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.ids import SubtaskId
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.channels.kafka.producer import TransactionalProducer
from spillway.offsets.store import CheckpointStore
from spillway.recovery.job.plan import JobPlan
from spillway.recovery.observe.events import EventLog, JobSignals
from spillway.recovery.observe.phases import PhaseClock
from spillway.recovery.restore.ownership import owned_partitions, owned_state
from spillway.recovery.restore.progress import ProgressLog
from spillway.recovery.restore.restorer import Restored, Restorer
from spillway.recovery.runtime.cadence import GlobalCadence
from spillway.recovery.runtime.checkpointer import Observers
from spillway.recovery.runtime.collector import make_collector
from spillway.recovery.runtime.crashpoints import CrashPoints
from spillway.recovery.runtime.deadletter import PRODUCER_CONFIG, DeadLetters
from spillway.recovery.runtime.faults import Faults
from spillway.recovery.runtime.gcpolicy import streaming_collector
from spillway.recovery.runtime.lifecycle import Lifecycle, Phase
from spillway.recovery.runtime.livestats import LiveStats
from spillway.recovery.runtime.observer import AttemptObserver
from spillway.recovery.runtime.options import RunOptions, SubtaskResult
from spillway.recovery.runtime.sinklimit import LimitedSink
from spillway.recovery.runtime.taskfactory import (
    Clients,
    Hooks,
    OperatorContext,
    Task,
    TaskSpec,
    build_task,
    input_channels,
)
from spillway.recovery.runtime.taskloop import Outcome

# Re-exported: the driver, the benchmarks and the tests import them from here.
__all__ = [
    "GlobalCadence",
    "RunOptions",
    "SubtaskResult",
    "SubtaskRunner",
    "input_channels",
]

log = logging.getLogger("spillway.subtask")


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
        faults: Faults | None = None,
    ) -> None:
        """``faults``: the attempt's planned crashes, counted so far (a redo within the
        attempt goes on counting: spillway.recovery.runtime.redo); None: this attempt's
        from ``SPILLWAY_CRASH_AT``."""
        self.phases = phases if phases is not None else PhaseClock()
        self.plan = plan
        self.subtask = subtask
        self.settings = settings
        self.options = options
        self.attempt = attempt
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
        self.producer = TransactionalProducer(
            settings,
            subtask.transactional_id,
            transaction_timeout_ms=options.transaction_timeout_ms,
            extra=PRODUCER_CONFIG if options.dead_letter else None,  # room for big dead letters
        )
        # Channel and sink outputs leave through the collector; state and checkpoints
        # stay transactional under either guarantee.
        self.out = make_collector(options.guarantee, self.producer, settings, subtask)
        self.live = LiveStats()
        # Built once restored (spillway.recovery.runtime.taskfactory); None until then.
        self.task: Task | None = None
        self.events = EventLog(settings, subtask, attempt, options.run_id, extra=self._live_doc)
        # The attempt's phases, events and result record are the observer's to write.
        self.observer = AttemptObserver(subtask, attempt, self.events, self.phases, self._signals)
        self.result = self.observer.result
        # Partition ownership (recovery/restore/ownership.py): what this subtask reads and restores.
        self.owned = owned_partitions(plan, subtask)
        self.state = owned_state(plan, subtask, self.owned, options.channel)
        self.dead_letters = DeadLetters(self.producer, subtask) if options.dead_letter else None
        self.progress = ProgressLog(settings, subtask)
        self.crash = CrashPoints(
            faults
            if faults is not None
            else Faults(subtask, attempt, generation=options.generation),
            [self.out.flush, self.producer.flush, self.progress.flush],
        )
        # The operator's objects, made from the plan; opened once restored.
        self.operator = (
            op.make_source() if op.make_source else None,
            op.make_logic() if op.make_logic else None,
            op.make_sink() if op.make_sink else None,
        )
        self.phases.lap("clients")

    def _live_doc(self) -> dict[str, Any]:
        """The heartbeat's figures (called from the heartbeat thread)."""
        task = self.task
        reader = task.processor.reader if task is not None else None
        return self.live.doc(self.result, reader, self.state, self.operator[0])

    @property
    def resumed_at(self) -> float | None:
        """Wall time this runner resumed processing (restored, task built); None if it
        has not (yet): what a redo's stall is measured to (spillway.recovery.runtime.redo)."""
        return self.phases.times.get("restored")

    # -- life ----------------------------------------------------------------------------

    def run(self) -> SubtaskResult:
        """Run to the end (bounded), until asked to stop, or until an error is raised."""
        try:
            self.lifecycle.to(Phase.RESTORING)
            task = self._restore()
            if task is None:
                return self.result
            self.lifecycle.to(Phase.RUNNING)
            self.producer.begin()
            with streaming_collector():
                outcome = task.loop.run()
            if outcome is Outcome.FINISHED:
                self._finished(task)
            else:
                self._stopped(task)
            return self.result
        except BaseException as e:
            self.lifecycle.fail()
            self.observer.failed(e)
            raise
        finally:
            self._close()

    def _restore(self) -> Task | None:
        """Fence, restore, then build the task from what was restored (None: the subtask
        finished earlier)."""
        obs = self.observer
        obs.restoring()
        sink: object = self.operator[2]
        if isinstance(sink, LimitedSink):  # batches within its topic's message limit
            self.out.cap_batch_size(sink.read_limit(self.settings, self.out.message_max_bytes))
        self.producer.start()  # fences the previous incarnation, aborts its open transaction
        obs.fenced()
        self.out.start()
        obs.lap("announce")
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
        obs.lap("history")
        obs.found(restored.checkpoint)
        if restored.finished:
            self._skip(restored)
            return None
        if self.state is not None:
            restorer.state(self.state, restored)
        obs.lap("state")
        self.crash.reached("restore")
        task = self._build(restored)
        p = task.processor
        obs.started(
            restored,
            p.replay,
            p.source_replay,
            {str(tp): [o, d] for (tp, o), d in p.resume.items()},
        )
        return task

    def _build(self, restored: Restored) -> Task:
        """The task, built whole from what was restored (spillway.recovery.runtime.taskfactory)."""
        self.task = build_task(
            TaskSpec(
                self.plan,
                self.subtask,
                self.options,
                self.attempt,
                self.owned,
                self.state,
                self.operator,
            ),
            restored,
            Clients(
                self.settings,
                self.producer,
                self.out,
                self.store,
                self.progress,
                self._signals,
                self.dead_letters,
                lambda: AssignedConsumer(self.settings, self.subtask.group_id),
            ),
            Observers(self.lifecycle, self.live, self.result, self.events, self.crash),
            Hooks(self.observer.caught_up, self.observer.lap, self._should_stop),
        )
        return self.task

    def _skip(self, restored: Restored) -> None:
        """The subtask finished earlier: publish what its sink may not have, skip it."""
        ckpt = restored.checkpoint
        assert ckpt is not None
        sink = self.operator[2]
        if sink is not None:
            # The final commit may have happened without its files being published
            # (crash between commit and rename): publish them now.
            ctx = OperatorContext(self.subtask, self.state, self.settings, None)
            sink.open(ctx, restored.sink_position, self.out)
        self.lifecycle.to(Phase.FINISHED)
        self.observer.skipped(ckpt)

    def _stopped(self, task: Task) -> None:
        self.observer.stopped(task.checkpointer.seq.last, task.processor.aside)

    def _finished(self, task: Task) -> None:
        p = task.processor
        self.observer.finished(task.checkpointer.seq.last, p.aside, p.replay, p.source_replay)

    def _close(self) -> None:
        task = self.task
        if task is not None:
            task.checkpointer.close(self.settings.request_timeout_s)  # before its store closes
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
        if task is not None and task.processor.reader is not None:
            try:
                task.processor.reader.close()
            except Exception:
                log.warning("closing reader of %s failed", self.subtask, exc_info=True)
