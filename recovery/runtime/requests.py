"""What one step of a subtask reports to its task loop: whether its input ended, and
which global checkpoint, if any, must be taken before it goes on.

The processor decides nothing about committing: it reports a request, and the task loop
(:mod:`spillway.recovery.runtime.taskloop`) alone asks the checkpointer to take it.
"""

from __future__ import annotations

from dataclasses import dataclass

from spillway.channels.ids import TopicPartition

# (partition, message offset, records of it done) for a checkpoint inside a message.
Partial = tuple[TopicPartition, int, int]


@dataclass(frozen=True)
class AtBarrier:
    """Global checkpoint ``n`` between two messages: at a barrier the reader stopped at or
    aligned on every channel, or on the coordinator's trigger."""

    n: int


@dataclass(frozen=True)
class InsideMessage:
    """Global checkpoint ``n`` on the trigger, between two chunks of one message (the
    unaligned mode): ``at`` names the message and how many of its records are done.

    The step stopped there; the loop takes the checkpoint and steps again at once, so
    nothing else falls between the two halves of the message."""

    n: int
    at: Partial


CheckpointRequest = AtBarrier | InsideMessage


@dataclass(frozen=True)
class Step:
    """What one step did: ``ended`` when every input has ended; ``request``: the global
    checkpoint to take before the next step (None: none)."""

    ended: bool
    request: CheckpointRequest | None = None

    @property
    def inside_message(self) -> bool:
        """True if the step stopped inside a message for its checkpoint (resume at once)."""
        return isinstance(self.request, InsideMessage)
