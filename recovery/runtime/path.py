"""The one protocol a subtask's records move through: its :class:`Path`.

A subtask runs record logic (lists of dict records, ``Logic.process``), batch logic
(Arrow record batches, ``BatchLogic.run_batch``, :mod:`spillway.recovery.runtime.batchpath`),
or no logic at all (a sink alone, a source alone). Which of these it is does not change
while it runs, so it is chosen once, when the task is built
(:func:`spillway.recovery.runtime.pathchoice.choose_path`), and the processor
(:mod:`spillway.recovery.runtime.processor`) calls the chosen path for every message and
every read without asking again what it holds.

What stays the processor's, whatever the path: reading (polls, decode dead letters,
positions, replay counting, mid-message resume slicing, chunks between which a
checkpoint may fall), and forwarding watermarks and idleness to the writers. What is the
path's: running the operator, taking what it set aside, and writing its outputs
(:class:`spillway.recovery.runtime.outputs.Outputs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from spillway.channels.ids import SubtaskId, TopicPartition
from spillway.recovery.job.origins import Origins
from spillway.recovery.job.plan import Logic, Record, Sink
from spillway.recovery.runtime.deadletter import DeadLetters
from spillway.recovery.runtime.eventtime import SetAsides
from spillway.recovery.runtime.outputs import Outputs


class Path(Protocol):
    """How one subtask's input reaches its outputs (records or Arrow batches)."""

    def message(self, records: Sequence[Record], tp: TopicPartition, offset: int) -> None:
        """Run and write one channel message's ``records`` from ``tp`` at ``offset``: all
        of them, the rest after a mid-message resume, or one chunk (unaligned
        checkpoints). A path that reads batches is given
        :class:`~spillway.channels.wire.batchread.ArrowRows` (the reader's form is
        :func:`~spillway.recovery.runtime.batchpath.reads_batches`, the same choice)."""
        ...

    def poll_done(self) -> None:
        """The poll is over: write anything held across its messages. Called before
        anything that may checkpoint, so a checkpoint never passes rows still held."""
        ...

    def rows(self, read: Sequence[Any]) -> int:
        """The number of rows in what the subtask's source read (``records_in``)."""
        ...

    def read(self, read: list[Any], origins: Origins) -> None:
        """Run and write what the subtask's source read (``origins``: each row's)."""
        ...

    def watermark(self, watermark: int) -> None:
        """The operator's outputs at a new ``watermark`` (before the writers forward it)."""
        ...

    def timers(self) -> None:
        """Processing-time timers fire: the operator's outputs at the clock's time now."""
        ...

    def end(self) -> None:
        """Every input ended: the operator's last outputs (before end-of-stream)."""
        ...


@dataclass(frozen=True)
class PathParts:
    """What every path is built from (each takes the parts it needs).

    ``input_of``: the name of the input a channel partition belongs to (None: no channel
    input, e.g. a source); ``dead_letters``: where failing rows go (None: they fail the
    subtask with an error naming them)."""

    subtask: SubtaskId
    operator: str
    logic: Logic | None
    sink: Sink | None
    outputs: Outputs
    aside: SetAsides
    dead_letters: DeadLetters | None
    input_of: Callable[[TopicPartition], str] | None


# A path's constructor: what :func:`spillway.recovery.runtime.pathchoice.choose_path` returns.
PathMaker = Callable[[PathParts], Path]
