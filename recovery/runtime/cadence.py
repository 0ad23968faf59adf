"""When a subtask checkpoints: one strategy object per checkpoint mode.

* :class:`IntervalCadence`: a subtask checkpoints on its own clock only.
* :class:`AlignedCadence`: numbered global checkpoints too; sources act on the
  coordinator's trigger, the others when their reader has aligned barrier ``n`` on every
  input channel (channels ahead of it are held back meanwhile).
* :class:`UnalignedCadence`: every subtask acts on the trigger, between any two channel
  messages and even inside one (between chunks of its records); barriers that arrive
  first are honoured too.

A cadence decides and never commits: its hooks return the global checkpoint to take (or
None), the processor reports it in its step's result
(:mod:`spillway.recovery.runtime.requests`), and the task loop asks the checkpointer to take
it. The task loop and the processor only call these hooks, so a new mode is a new class
here, not a new boolean.
"""

from __future__ import annotations

import time
from typing import Protocol

from spillway.channels.modes import CheckpointMode


class Triggers(Protocol):
    """The coordinator's global checkpoint triggers
    (spillway.recovery.observe.events.JobSignals)."""

    def trigger(self) -> int:
        """The highest global checkpoint id triggered so far (-1: none)."""
        ...

    def seen_at(self, n: int) -> float | None:
        """Wall time trigger ``n`` was first seen (None: not seen)."""
        ...


class AligningReader(Protocol):
    """What the aligned cadence needs of a channel reader."""

    def aligned(self) -> int | None:
        """The barrier every input channel has reached, if any."""
        ...

    def consume_barrier(self, n: int) -> None:
        """Barrier ``n`` is being checkpointed."""

    def release(self, n: int) -> None:
        """Let the channels held back at barrier ``n`` go on."""


class GlobalCadence:
    """When the next global checkpoint is due, judged from the spacing of the last two.

    A subtask's own interval checkpoint falling just before a global trigger makes the
    global one wait for that commit; while global checkpoints keep coming, they are the
    subtask's checkpoints. If they stop (the coordinator died), interval checkpoints
    resume after 1.5 spacings.
    """

    def __init__(self) -> None:
        self._last: float | None = None
        self._gap: float | None = None

    def taken(self, now: float) -> None:
        """A global checkpoint was committed at ``now`` (monotonic seconds)."""
        if self._last is not None:
            self._gap = now - self._last
        self._last = now

    def expected_soon(self, now: float) -> bool:
        """True while the next global checkpoint is expected within 1.5 spacings."""
        if self._last is None or self._gap is None:
            return False
        return now - self._last < 1.5 * self._gap


class Cadence(Protocol):
    """The hooks through which a checkpoint mode acts; each returns the global checkpoint
    to take now (None: none), never takes it."""

    is_global: bool  # numbered global checkpoints (kept longer, announced)
    mode: CheckpointMode  # "aligned": the reader holds channels back at barriers

    @property
    def chunk(self) -> int | None:
        """Records per chunk of a message, a checkpoint may fall between two chunks (None:
        whole messages, and checkpoints only between messages)."""
        ...

    @property
    def last_global(self) -> int | None:
        """The newest global checkpoint taken (or restored)."""
        ...

    def poll_shape(self, poll_messages: int) -> tuple[int, float, bool]:
        """(messages per poll, wait in seconds, stop after a barrier) for the reader."""
        ...

    def newer(self, n: int) -> bool:
        """True if global checkpoint ``n`` is newer than the last one taken."""
        ...

    def on_loop(self, reads_channels: bool) -> int | None:
        """Once per loop turn while running: a triggered checkpoint if the mode says so."""
        ...

    def between_chunks(self) -> int | None:
        """Before the next chunk of a message (only when :attr:`chunk` is set): a
        triggered checkpoint to take inside the message."""
        ...

    def after_poll(self, reader: AligningReader, barrier: int | None) -> int | None:
        """After one poll of the reader (``barrier``: a newer barrier the poll stopped at):
        the checkpoint to take there."""
        ...

    def after_checkpoint(self, reader: AligningReader, n: int) -> None:
        """Checkpoint ``n`` that :meth:`after_poll` asked for is taken: the reader goes on."""

    def interval_waits(self, now: float) -> bool:
        """True if an interval checkpoint due now should leave it to a global one."""
        ...

    def taken(self, n: int) -> None:
        """Global checkpoint ``n`` committed."""


class IntervalCadence:
    """A subtask's own clock only; barriers are not looked at."""

    is_global = False
    mode: CheckpointMode = "interval"
    chunk = None

    def __init__(self, last_global: int | None = None) -> None:
        self.last_global = last_global

    def poll_shape(self, poll_messages: int) -> tuple[int, float, bool]:
        """Several messages per poll, a 50 ms wait."""
        return poll_messages, 0.05, False

    def newer(self, n: int) -> bool:
        """Global checkpoints are never taken in this mode."""
        return False

    def on_loop(self, reads_channels: bool) -> int | None:
        """Interval checkpoints come from the loop's clock check alone."""
        return None

    def between_chunks(self) -> int | None:
        """Messages are not cut in this mode."""
        return None

    def after_poll(self, reader: AligningReader, barrier: int | None) -> int | None:
        """Barriers play no part in this mode."""
        return None

    def after_checkpoint(self, reader: AligningReader, n: int) -> None:
        """Not called in this mode."""

    def interval_waits(self, now: float) -> bool:
        """Never: the interval is this mode's only clock."""
        return False

    def taken(self, n: int) -> None:
        """Not called in this mode."""


class _GlobalCheckpoints:
    """What both global modes share: triggers, the last global id, its spacing."""

    is_global = True

    def __init__(self, triggers: Triggers, last_global: int | None) -> None:
        self.last_global = last_global
        self._triggers = triggers
        self._spacing = GlobalCadence()

    def newer(self, n: int) -> bool:
        """True if ``n`` is a global checkpoint id above the last one taken."""
        return n >= 0 and (self.last_global is None or n > self.last_global)

    def interval_waits(self, now: float) -> bool:
        """True while global checkpoints keep coming (see :class:`GlobalCadence`)."""
        return self._spacing.expected_soon(now)

    def taken(self, n: int) -> None:
        """Global checkpoint ``n`` committed: remember it and its spacing."""
        self.last_global = n
        self._spacing.taken(time.monotonic())

    def _triggered(self) -> int | None:
        """The coordinator's trigger, if it asks for a checkpoint newer than the last."""
        n = self._triggers.trigger()
        return n if self.newer(n) else None


class AlignedCadence(_GlobalCheckpoints):
    """Global checkpoints at aligned barriers; sources act on the trigger."""

    mode: CheckpointMode = "aligned"
    chunk = None

    def poll_shape(self, poll_messages: int) -> tuple[int, float, bool]:
        """Several messages per poll: the reader holds channels back at barriers itself."""
        return poll_messages, 0.05, False

    def on_loop(self, reads_channels: bool) -> int | None:
        """Only sources look at the trigger; the others checkpoint at barriers."""
        return None if reads_channels else self._triggered()

    def between_chunks(self) -> int | None:
        """Messages are not cut in this mode."""
        return None

    def after_poll(self, reader: AligningReader, barrier: int | None) -> int | None:
        """Checkpoint at a barrier aligned on every channel (``barrier`` is always None
        here: an aligning reader returns no barriers, it holds their channels back)."""
        n = reader.aligned()
        if n is None:
            return None
        reader.consume_barrier(n)
        if self.newer(n):
            return n  # released once it is taken (after_checkpoint)
        reader.release(n)
        return None

    def after_checkpoint(self, reader: AligningReader, n: int) -> None:
        """Let the channels held back at barrier ``n`` go on."""
        reader.release(n)


class UnalignedCadence(_GlobalCheckpoints):
    """Global checkpoints on the trigger, between any two messages or inside one."""

    mode: CheckpointMode = "unaligned"

    def __init__(self, triggers: Triggers, chunk: int, last_global: int | None = None) -> None:
        super().__init__(triggers, last_global)
        self.chunk: int | None = chunk

    def poll_shape(self, poll_messages: int) -> tuple[int, float, bool]:
        """One message per poll, so a checkpoint can fall between any two, and a short
        wait, so an idle reader looks for a trigger every 10 ms (not every 50)."""
        return 1, 0.01, True

    def on_loop(self, reads_channels: bool) -> int | None:
        """Every subtask looks at the trigger."""
        return self._triggered()

    def between_chunks(self) -> int | None:
        """A triggered checkpoint between two chunks of one message.

        The checkpoint then records the message's offset as the input position and how
        many of its records are done (:class:`~spillway.recovery.runtime.requests.InsideMessage`);
        a restore skips exactly those. The cut stays consistent: the message was committed
        upstream before the trigger.
        """
        return self._triggered()

    def after_poll(self, reader: AligningReader, barrier: int | None) -> int | None:
        """A barrier that came before the trigger: checkpoint exactly at it."""
        return barrier

    def after_checkpoint(self, reader: AligningReader, n: int) -> None:
        """Nothing is held back in this mode."""


def make_cadence(
    mode: CheckpointMode, triggers: Triggers | None, chunk: int, last_global: int | None = None
) -> IntervalCadence | AlignedCadence | UnalignedCadence:
    """The cadence of ``mode``, continuing after global checkpoint ``last_global``;
    interval checkpoints only without a job's triggers."""
    if triggers is None or mode not in ("aligned", "unaligned"):
        return IntervalCadence(last_global)
    if mode == "aligned":
        return AlignedCadence(triggers, last_global)
    return UnalignedCadence(triggers, chunk, last_global)
