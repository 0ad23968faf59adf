"""When a subtask checkpoints: one strategy object per checkpoint mode.

* :class:`IntervalCadence`: a subtask checkpoints on its own clock only.
* :class:`AlignedCadence`: numbered global checkpoints too; sources act on the
  coordinator's trigger, the others when their reader has aligned barrier ``n`` on every
  input channel (channels ahead of it are held back meanwhile).
* :class:`UnalignedCadence`: every subtask acts on the trigger, between any two channel
  messages and even inside one (between chunks of its records); barriers that arrive
  first are honoured too.

The checkpointer (:mod:`spillway.recovery.runtime.checkpointer`) owns the cadence; the task loop and
the
processor only call its hooks, so a new mode is a new class here, not a new boolean.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from spillway.channels.ids import TopicPartition
from spillway.recovery.job.plan import Record

# (partition, message offset, records of it done) for a checkpoint inside a message.
Partial = tuple[TopicPartition, int, int]
TakeGlobal = Callable[[int, Partial | None], None]
# one message's records: dicts, or spillway.channels.wire.batchread.ArrowRows
Rows = Sequence[Record]
Deliver = Callable[[Rows, TopicPartition, int], None]

MODES = ("interval", "aligned", "unaligned")


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
    """The hooks through which a checkpoint mode acts."""

    is_global: bool  # numbered global checkpoints (kept longer, announced)
    align: bool  # the reader holds channels back at barriers
    last_global: int | None  # the newest global checkpoint taken (or restored)

    def poll_shape(self, poll_messages: int) -> tuple[int, float, bool]:
        """(messages per poll, wait in seconds, stop after a barrier) for the reader."""
        ...

    def newer(self, n: int) -> bool:
        """True if global checkpoint ``n`` is newer than the last one taken."""
        ...

    def on_loop(self, reads_channels: bool) -> None:
        """Once per loop turn while running: take a triggered checkpoint if the mode says so."""

    def after_poll(self, reader: AligningReader, barrier: int | None) -> None:
        """After one poll of the reader; ``barrier``: a newer barrier the poll stopped at."""

    def deliver(
        self, records: Rows, tp: TopicPartition, offset: int, done: int, deliver: Deliver
    ) -> None:
        """Hand one message's records to ``deliver`` (the unaligned mode in chunks)."""

    def interval_waits(self, now: float) -> bool:
        """True if an interval checkpoint due now should leave it to a global one."""
        ...

    def taken(self, n: int) -> None:
        """Global checkpoint ``n`` committed."""


class IntervalCadence:
    """A subtask's own clock only; barriers are not looked at."""

    is_global = False
    align = False

    def __init__(self) -> None:
        self.last_global: int | None = None

    def poll_shape(self, poll_messages: int) -> tuple[int, float, bool]:
        """Several messages per poll, a 50 ms wait."""
        return poll_messages, 0.05, False

    def newer(self, n: int) -> bool:
        """Global checkpoints are never taken in this mode."""
        return False

    def on_loop(self, reads_channels: bool) -> None:
        """Interval checkpoints come from the loop's clock check alone."""

    def after_poll(self, reader: AligningReader, barrier: int | None) -> None:
        """Barriers play no part in this mode."""

    def deliver(
        self, records: Rows, tp: TopicPartition, offset: int, done: int, deliver: Deliver
    ) -> None:
        """The whole message at once."""
        deliver(records, tp, offset)

    def interval_waits(self, now: float) -> bool:
        """Never: the interval is this mode's only clock."""
        return False

    def taken(self, n: int) -> None:
        """Not called in this mode."""


class _GlobalCheckpoints:
    """What both global modes share: triggers, the last global id, its spacing."""

    is_global = True

    def __init__(self, triggers: Triggers, take: TakeGlobal) -> None:
        self.last_global: int | None = None
        self._triggers = triggers
        self._take = take
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

    def _check_trigger(self, partial: Partial | None = None) -> bool:
        n = self._triggers.trigger()
        if not self.newer(n):
            return False
        self._take(n, partial)
        return True


class AlignedCadence(_GlobalCheckpoints):
    """Global checkpoints at aligned barriers; sources act on the trigger."""

    align = True

    def poll_shape(self, poll_messages: int) -> tuple[int, float, bool]:
        """Several messages per poll: the reader holds channels back at barriers itself."""
        return poll_messages, 0.05, False

    def on_loop(self, reads_channels: bool) -> None:
        """Only sources look at the trigger; the others checkpoint at barriers."""
        if not reads_channels:
            self._check_trigger()

    def after_poll(self, reader: AligningReader, barrier: int | None) -> None:
        """Checkpoint at a barrier the poll stopped at, then at an aligned one."""
        if barrier is not None:
            self._take(barrier, None)
        n = reader.aligned()
        if n is not None:
            reader.consume_barrier(n)
            if self.newer(n):
                self._take(n, None)
            reader.release(n)

    def deliver(
        self, records: Rows, tp: TopicPartition, offset: int, done: int, deliver: Deliver
    ) -> None:
        """The whole message at once."""
        deliver(records, tp, offset)


class UnalignedCadence(_GlobalCheckpoints):
    """Global checkpoints on the trigger, between any two messages or inside one."""

    align = False

    def __init__(self, triggers: Triggers, take: TakeGlobal, chunk: int) -> None:
        super().__init__(triggers, take)
        self._chunk = chunk

    def poll_shape(self, poll_messages: int) -> tuple[int, float, bool]:
        """One message per poll, so a checkpoint can fall between any two, and a short
        wait, so an idle reader looks for a trigger every 10 ms (not every 50)."""
        return 1, 0.01, True

    def on_loop(self, reads_channels: bool) -> None:
        """Every subtask looks at the trigger."""
        self._check_trigger()

    def after_poll(self, reader: AligningReader, barrier: int | None) -> None:
        """A barrier that came before the trigger: checkpoint exactly at it."""
        if barrier is not None:
            self._take(barrier, None)

    def deliver(
        self, records: Rows, tp: TopicPartition, offset: int, done: int, deliver: Deliver
    ) -> None:
        """Take a triggered checkpoint between chunks of one message.

        The checkpoint then records ``offset`` as the input position and how many of the
        message's records are done (``partial``); a restore skips exactly those. The cut
        stays consistent: the message was committed upstream before the trigger.
        """
        for start in range(0, len(records), self._chunk):
            if start:
                self._check_trigger((tp, offset, done + start))
            deliver(records[start : start + self._chunk], tp, offset)


def make_cadence(
    mode: str, triggers: Triggers | None, take: TakeGlobal, chunk: int
) -> IntervalCadence | AlignedCadence | UnalignedCadence:
    """The cadence of ``mode``; interval checkpoints only without a job's triggers."""
    if triggers is None or mode not in ("aligned", "unaligned"):
        return IntervalCadence()
    if mode == "aligned":
        return AlignedCadence(triggers, take)
    return UnalignedCadence(triggers, take, chunk)
