"""The task loop of one subtask (Kafka Streams' StreamThread): it only loops.

Each turn: poll inputs, process and emit (the task's :meth:`~Task.step`), and take the
global checkpoint the step asks for (at once, if it stopped inside a message for it);
let time pass for timers and writers (:meth:`~Task.tick`); take a global checkpoint the
cadence's trigger asks for; then, when every input has ended, finish with a final
checkpoint, or, when an interval checkpoint is due, take it, and stop after it if a stop
was asked for. The loop is the one caller of the checkpointer's ``take``. What the parts
do is theirs; the loop can be driven with fakes (tests/unit).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from typing import Protocol

from spillway.recovery.runtime.lifecycle import Lifecycle, Phase
from spillway.recovery.runtime.requests import AtBarrier, CheckpointRequest, Step


class Outcome(enum.Enum):
    """How a loop ended."""

    FINISHED = "finished"  # every input ended; the final checkpoint committed
    STOPPED = "stopped"  # asked to stop; a checkpoint committed just before


class Task(Protocol):
    """What the loop drives (spillway.recovery.runtime.processor.Processor)."""

    def step(self) -> Step:
        """Poll input, process, emit; say whether every input has ended and which
        checkpoint to take before the next step."""
        ...

    def tick(self, ended: bool) -> None:
        """Let time act: timers, read marks, lingering batches."""

    def end(self) -> None:
        """Every input ended: emit the last outputs and end-of-stream."""


class LoopCadence(Protocol):
    """The cadence hooks the loop calls (spillway.recovery.runtime.cadence)."""

    def on_loop(self, reads_channels: bool) -> int | None:
        """A triggered global checkpoint to take now, if the mode says so."""
        ...

    def interval_waits(self, now: float) -> bool:
        """True if a due interval checkpoint should leave it to a global one."""
        ...


class LoopCheckpointer(Protocol):
    """The checkpointer as the loop sees it
    (spillway.recovery.runtime.checkpointer.Checkpointer)."""

    def due(self, now: float) -> bool:
        """True when an interval checkpoint is due."""
        ...

    def take(
        self,
        finished: bool = False,
        stopping: bool = False,
        request: CheckpointRequest | None = None,
    ) -> object:
        """Build and commit a checkpoint: final, the last before a stop, global
        ``request``, or an interval one."""
        ...


class TaskLoop:
    """Runs ``task`` until its inputs end or ``should_stop`` says so at a due checkpoint."""

    def __init__(
        self,
        task: Task,
        checkpointer: LoopCheckpointer,
        cadence: LoopCadence,
        should_stop: Callable[[], bool],
        reads_channels: bool,
        lifecycle: Lifecycle,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._task = task
        self._ckpt = checkpointer
        self._cadence = cadence
        self._should_stop = should_stop
        self._reads_channels = reads_channels
        self._lifecycle = lifecycle
        self._clock = clock

    def run(self) -> Outcome:
        """Loop; return once finished (final checkpoint taken) or stopped (checkpoint taken)."""
        while True:
            step = self._task.step()
            if step.request is not None:
                self._ckpt.take(request=step.request)
                if step.inside_message:
                    continue  # the rest of the message first: nothing else may fall inside it
            self._task.tick(step.ended)
            if step.ended:
                self._lifecycle.to(Phase.FINISHING)
                self._task.end()
                self._ckpt.take(finished=True)
                self._lifecycle.to(Phase.FINISHED)
                return Outcome.FINISHED
            triggered = self._cadence.on_loop(self._reads_channels)
            if triggered is not None:
                self._ckpt.take(request=AtBarrier(triggered))
            now = self._clock()
            if not self._ckpt.due(now):
                continue
            # Asked only when a checkpoint is due: a stop always follows a checkpoint.
            stopping = self._should_stop()
            if not stopping and self._cadence.interval_waits(now):
                # the next global checkpoint will do; see spillway.recovery.runtime.cadence
                continue
            self._ckpt.take(finished=False, stopping=stopping)
            if stopping:
                return Outcome.STOPPED
