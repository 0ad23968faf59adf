"""The task loop of one subtask (Kafka Streams' StreamThread): it only loops.

Each turn: poll inputs, process and emit (the task's :meth:`~Task.step`); let time pass
for timers and writers (:meth:`~Task.tick`); let the checkpointer's cadence act on a
global trigger; then, when every input has ended, finish with a final checkpoint, or, when
an interval checkpoint is due, take it, and stop after it if a stop was asked for.
What the parts do is theirs; the loop can be driven with fakes (tests/unit).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from typing import Protocol

from spillway.recovery.runtime.lifecycle import Lifecycle, Phase


class Outcome(enum.Enum):
    """How a loop ended."""

    FINISHED = "finished"  # every input ended; the final checkpoint committed
    STOPPED = "stopped"  # asked to stop; a checkpoint committed just before


class Task(Protocol):
    """What the loop drives (spillway.recovery.runtime.processor.Processor)."""

    def step(self) -> bool:
        """Poll input, process, emit; True when every input has ended."""
        ...

    def tick(self, ended: bool) -> None:
        """Let time act: timers, read marks, lingering batches."""

    def end(self) -> None:
        """Every input ended: emit the last outputs and end-of-stream."""


class LoopCadence(Protocol):
    """The cadence hooks the loop calls (spillway.recovery.runtime.cadence)."""

    def on_loop(self, reads_channels: bool) -> None:
        """Take a triggered global checkpoint if the mode says so."""

    def interval_waits(self, now: float) -> bool:
        """True if a due interval checkpoint should leave it to a global one."""
        ...


class LoopCheckpointer(Protocol):
    """The checkpointer as the loop sees it
    (spillway.recovery.runtime.checkpointer.Checkpointer)."""

    @property
    def cadence(self) -> LoopCadence: ...

    def due(self, now: float) -> bool:
        """True when an interval checkpoint is due."""
        ...

    def take(self, finished: bool, stopping: bool = False) -> object:
        """Build and commit a checkpoint."""
        ...


class TaskLoop:
    """Runs ``task`` until its inputs end or ``should_stop`` says so at a due checkpoint."""

    def __init__(
        self,
        task: Task,
        checkpointer: LoopCheckpointer,
        should_stop: Callable[[], bool],
        reads_channels: bool,
        lifecycle: Lifecycle,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._task = task
        self._ckpt = checkpointer
        self._should_stop = should_stop
        self._reads_channels = reads_channels
        self._lifecycle = lifecycle
        self._clock = clock

    def run(self) -> Outcome:
        """Loop; return once finished (final checkpoint taken) or stopped (checkpoint taken)."""
        while True:
            ended = self._task.step()
            self._task.tick(ended)
            if ended:
                self._lifecycle.to(Phase.FINISHING)
                self._task.end()
                self._ckpt.take(finished=True)
                self._lifecycle.to(Phase.FINISHED)
                return Outcome.FINISHED
            self._ckpt.cadence.on_loop(self._reads_channels)
            now = self._clock()
            if not self._ckpt.due(now):
                continue
            # Asked only when a checkpoint is due: a stop always follows a checkpoint.
            stopping = self._should_stop()
            if not stopping and self._ckpt.cadence.interval_waits(now):
                # the next global checkpoint will do; see spillway.recovery.runtime.cadence
                continue
            self._ckpt.take(finished=False, stopping=stopping)
            if stopping:
                return Outcome.STOPPED
