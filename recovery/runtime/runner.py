"""Runs one subtask: fence, restore, run, checkpoint, finish.

Why a restart of one subtask is exactly-once: downstream subtasks only ever saw this
subtask's committed outputs, which match the state and input offsets of its last
committed checkpoint (one transaction holds all of them). A restart fences the previous
incarnation (its open transaction is aborted), rebuilds that state from the changelog,
and re-reads its inputs from those offsets. Upstream subtasks never notice: channels are
durable, and nothing they need comes from this subtask.

The runner opens the clients, restores, then has
:mod:`spillway.recovery.runtime.taskfactory` build the task whole from what was restored.
The parts each have one job (docs: STYLE "Runtime parts"):
:mod:`spillway.recovery.restore.restorer` finds what to continue from,
:mod:`spillway.recovery.runtime.processor` moves
records, :mod:`spillway.recovery.runtime.collector` is where outputs leave,
:mod:`spillway.recovery.runtime.checkpointer`
(with :mod:`spillway.recovery.runtime.cadence`) checkpoints, and
:mod:`spillway.recovery.runtime.taskloop` only loops, and alone asks for checkpoints.
"""

from __future__ import annotations

import logging
import time
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
from spillway.recovery.observe.phases import merge as merge_phases
from spillway.recovery.restore.ownership import owned_partitions, owned_state
from spillway.recovery.restore.progress import ProgressLog
from spillway.recovery.restore.restorer import Restored, Restorer
from spillway.recovery.runtime.cadence import GlobalCadence
from spillway.recovery.runtime.checkpointer import Observers
from spillway.recovery.runtime.collector import make_collector
from spillway.recovery.runtime.crashpoints import CrashPoints
from spillway.recovery.runtime.deadletter import PRODUCER_CONFIG, DeadLetters
from spillway.recovery.runtime.failures import failure_fields
from spillway.recovery.runtime.faults import Faults
from spillway.recovery.runtime.gcpolicy import streaming_collector
from spillway.recovery.runtime.lifecycle import Lifecycle, Phase
from spillway.recovery.runtime.livestats import LiveStats
from spillway.recovery.runtime.options import RunOptions, SubtaskResult
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
    ) -> None:
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
        self.result = SubtaskResult(str(subtask), attempt, "created")
        # Built once restored (spillway.recovery.runtime.taskfactory); None until then.
        self.task: Task | None = None
        self.events = EventLog(settings, subtask, attempt, options.run_id, extra=self._live_doc)
        # Partition ownership (recovery/restore/ownership.py): what this subtask reads and restores.
        self.owned = owned_partitions(plan, subtask)
        self.state = owned_state(plan, subtask, self.owned, options.channel)
        self.dead_letters = DeadLetters(self.producer, subtask) if options.dead_letter else None
        self.progress = ProgressLog(settings, subtask)
        self.crash = CrashPoints(
            Faults(subtask, attempt, generation=options.generation),
            [self.out.flush, self.producer.flush, self.progress.flush],
        )
        # The operator's objects, made from the plan; opened once restored.
        self.operator = (
            op.make_source() if op.make_source else None,
            op.make_logic() if op.make_logic else None,
            op.make_sink() if op.make_sink else None,
        )
        self._started = 0.0
        self.phases.lap("clients")

    def _live_doc(self) -> dict[str, Any]:
        """The heartbeat's figures (called from the heartbeat thread)."""
        task = self.task
        reader = task.processor.reader if task is not None else None
        return self.live.doc(self.result, reader, self.state, self.operator[0])

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

    def _restore(self) -> Task | None:
        """Fence, restore, then build the task from what was restored (None: the subtask
        finished earlier)."""
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
        if restored.finished:
            self._skip(restored)
            return None
        if self.state is not None:
            restorer.state(self.state, restored)
        self.phases.lap("state")
        self.crash.reached("restore")
        task = self._build(restored)
        self.result.restore_s = time.monotonic() - t0
        self._started = time.monotonic()
        self.phases.lap("opened")
        self.phases.mark("restored")
        p = task.processor
        self.result.replay, self.result.replay_basis = p.replay.figure, p.replay.basis
        self.result.source_replay = p.source_replay.span
        if not p.replay.pending and not p.source_replay.pending:
            self.result.catchup_s = 0.0 if ckpt else None
            if ckpt is not None:
                self.phases.mark("caught_up", self.phases.times["restored"])
        self._announce_started(restored, task)
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
            Hooks(self._caught_up, self.phases.lap, self._should_stop),
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
        self.result.status = "skipped"
        log.info("%s finished earlier (checkpoint %s); skipping", self.subtask, ckpt.checkpoint_id)
        self.events.emit("skipped", checkpoint=int(ckpt.checkpoint_id))

    def _announce_started(self, restored: Restored, task: Task) -> None:
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
            resumed_mid_message={str(tp): [o, d] for (tp, o), d in task.processor.resume.items()},
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

    def _stopped(self, task: Task) -> None:
        self.result.status = "stopped"
        self.result.set_aside = task.processor.aside.counts()
        self.events.emit(
            "stopped", checkpoint=task.checkpointer.seq.last, set_aside=self.result.set_aside
        )

    def _finished(self, task: Task) -> None:
        p = task.processor
        self.result.status = "finished"
        self.result.set_aside = p.aside.counts()
        if self.result.catchup_s is None and (p.replay.pending or p.source_replay.pending):
            self._caught_up()
        self.result.phases = self._phases()  # Spark's phases, if they came after caught_up
        self.events.emit(
            "finished",
            checkpoint=task.checkpointer.seq.last,
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
