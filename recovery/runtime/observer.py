"""What one attempt of a subtask reports about itself, in one place.

A subtask's attempt is observed three ways: its restart phases (a
:class:`~spillway.recovery.observe.phases.PhaseClock`), its events on the job's event
topic (``redo``, ``fencing``, ``started``, ``caught-up``, ``stopped``, ``finished``,
``skipped``, ``failed``) and its result record
(:class:`~spillway.recovery.runtime.options.SubtaskResult`), which the Spark driver gets
back. The runner and the task's parts tell the
:class:`AttemptObserver` what happened (fenced, restored, caught up, stopped, finished,
failed); the observer alone decides what each of those records, so the runner does the
work and none of the bookkeeping.

The counters of the result (records in and out, checkpoints) are kept by the parts that
move records and commit, on :attr:`AttemptObserver.result`; the observer reads them when
it reports the end of the attempt.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from spillway.channels.ids import SubtaskId
from spillway.offsets.checkpoint import Checkpoint
from spillway.recovery.observe.phases import PhaseClock
from spillway.recovery.observe.phases import merge as merge_phases
from spillway.recovery.restore.progress import Replay, SourceReplay
from spillway.recovery.restore.restorer import Restored
from spillway.recovery.runtime.eventtime import SetAsides
from spillway.recovery.runtime.failures import failure_fields
from spillway.recovery.runtime.options import SubtaskResult

log = logging.getLogger("spillway.subtask")


class EventSink(Protocol):
    """Where an attempt's events go (:class:`spillway.recovery.observe.events.EventLog`)."""

    def emit(self, kind: str, **fields: Any) -> None:
        """Append one event of this attempt."""


class SparkPhases(Protocol):
    """The driver-side restart phases Spark saw for an attempt
    (:class:`spillway.recovery.observe.events.JobSignals`)."""

    def spark_phases(self, subtask: SubtaskId, attempt: int) -> dict[str, float] | None:
        """Spark's phases of ``subtask``'s attempt ``attempt`` (None: not known yet)."""
        ...


class AttemptObserver:
    """The phases, events and result record of attempt ``attempt`` of ``subtask``."""

    def __init__(
        self,
        subtask: SubtaskId,
        attempt: int,
        events: EventSink,
        phases: PhaseClock,
        spark: SparkPhases | None,
    ) -> None:
        """``spark``: where Spark's phases of a retried attempt are read (None: not
        known to this run, e.g. a replay by hand)."""
        self.subtask = subtask
        self.attempt = attempt
        self.events = events
        self.phases = phases
        self._spark = spark
        self.result = SubtaskResult(str(subtask), attempt, "created")
        self._t0 = time.monotonic()  # when restoring began
        self._started = 0.0  # when the task started processing

    def lap(self, name: str) -> None:
        """A restart step named ``name`` ended now."""
        self.phases.lap(name)

    # -- restoring ------------------------------------------------------------------------

    def redoing(self, redo: int, error: BaseException, stall_s: float, reason: str) -> None:
        """This runner redoes the attempt from its last checkpoint after ``error``
        (spillway.recovery.runtime.redo): redo number ``redo`` of its episode, whose stall
        so far is ``stall_s``. Recorded before fencing, so the event log shows a redo, not
        a new attempt: the attempt number stays."""
        log.warning("%s attempt %d: redo %d after %s", self.subtask, self.attempt, redo, error)
        self.events.emit(
            "redo",
            redo=redo,
            error=f"{type(error).__name__}: {error}",
            reason=reason,
            stall_s=round(stall_s, 3),
        )

    def fenced(self) -> None:
        """The previous incarnation is fenced (its open transaction aborted). The event
        tells a fenced older copy that it was replaced."""
        self.phases.mark("fenced")
        self.phases.lap("fence")
        self.events.emit("fencing")

    def restoring(self) -> None:
        """Restoring begins now (the restore time counts from here)."""
        self._t0 = time.monotonic()

    def found(self, checkpoint: Checkpoint | None) -> None:
        """The checkpoint the attempt continues from (None: a fresh start)."""
        if checkpoint is not None:
            self.result.restored_from = int(checkpoint.checkpoint_id)

    def skipped(self, checkpoint: Checkpoint) -> None:
        """The subtask had finished in an earlier attempt; this one does nothing."""
        self.result.status = "skipped"
        log.info(
            "%s finished earlier (checkpoint %s); skipping", self.subtask, checkpoint.checkpoint_id
        )
        self.events.emit("skipped", checkpoint=int(checkpoint.checkpoint_id))

    def started(
        self,
        restored: Restored,
        replay: Replay,
        source_replay: SourceReplay,
        resumed_mid_message: dict[str, list[int]],
    ) -> None:
        """The task is built and processing begins: record what it replays, and announce
        ``started`` (and, if the previous attempt died between committing a global
        checkpoint and announcing it, that checkpoint again)."""
        self.result.restore_s = time.monotonic() - self._t0
        self._started = time.monotonic()
        self.phases.lap("opened")
        self.phases.mark("restored")
        self.result.replay, self.result.replay_basis = replay.figure, replay.basis
        self.result.source_replay = source_replay.span
        ckpt = restored.checkpoint
        if not replay.pending and not source_replay.pending:
            self.result.catchup_s = 0.0 if ckpt else None
            if ckpt is not None:
                self.phases.mark("caught_up", self.phases.times["restored"])
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
            resumed_mid_message=resumed_mid_message,
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

    # -- running --------------------------------------------------------------------------

    def caught_up(self) -> None:
        """Everything the previous attempt had read is re-read: record it (once)."""
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

    # -- ending ---------------------------------------------------------------------------

    def stopped(self, checkpoint: int | None, aside: SetAsides) -> None:
        """Asked to stop, the attempt committed ``checkpoint`` and ended."""
        self.result.status = "stopped"
        self.result.set_aside = aside.counts()
        self.events.emit("stopped", checkpoint=checkpoint, set_aside=self.result.set_aside)

    def finished(
        self,
        checkpoint: int | None,
        aside: SetAsides,
        replay: Replay,
        source_replay: SourceReplay,
    ) -> None:
        """The input ended and the final checkpoint ``checkpoint`` committed."""
        self.result.status = "finished"
        self.result.set_aside = aside.counts()
        if self.result.catchup_s is None and (replay.pending or source_replay.pending):
            self.caught_up()
        self.result.phases = self._phases()  # Spark's phases, if they came after caught_up
        self.events.emit(
            "finished",
            checkpoint=checkpoint,
            records_in=self.result.records_in,
            records_out=self.result.records_out,
            replay=self.result.replay,
            replay_basis=self.result.replay_basis,
            source_replay=self.result.source_replay,
            catchup_s=self.result.catchup_s,
            set_aside=self.result.set_aside,
            phases=self.result.phases,
        )

    def failed(self, error: BaseException) -> None:
        """The attempt fails with ``error`` (which the caller re-raises): record it. The
        event is best-effort; the error itself is what matters."""
        self.result.status = "failed"
        log.exception("%s attempt %d failed", self.subtask, self.attempt)
        try:
            fields = failure_fields(self.subtask, error)
            self.events.emit("failed", error=f"{type(error).__name__}: {error}", **fields)
        except Exception:
            log.warning("could not record the failure of %s", self.subtask)

    def _phases(self) -> dict[str, float]:
        """This attempt's restart phases so far, with Spark's (driver-side) ones once known."""
        spark = None
        if self._spark is not None and self.attempt > 0:
            spark = self._spark.spark_phases(self.subtask, self.attempt)
        return merge_phases(spark, self.phases.as_dict())
