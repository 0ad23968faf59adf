"""Pure offset bookkeeping: positions only move forward, checkpoint ids only grow.

No I/O here; the subtask runtime feeds it and asks it for what to checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from spillway.channels.errors import PositionRegressionError
from spillway.channels.ids import CheckpointId, Offset, TopicPartition


class OffsetRegressionError(PositionRegressionError):
    """A position moved backwards: a bug, never a condition to recover from."""


class PositionTracker:
    """Next offset to read per input partition, enforcing monotonic progress."""

    def __init__(
        self, partitions: Iterable[TopicPartition], start: Mapping[TopicPartition, Offset]
    ) -> None:
        self._pos: dict[TopicPartition, Offset] = {
            tp: start.get(tp, Offset(0)) for tp in partitions
        }

    def advance(self, tp: TopicPartition, next_offset: int) -> None:
        """Record that everything below ``next_offset`` on ``tp`` has been processed."""
        if next_offset < 0:
            raise OffsetRegressionError(f"{tp}: {next_offset} is a sentinel, not an offset")
        current = self._pos[tp]
        if next_offset < current:
            raise OffsetRegressionError(
                f"{tp}: position would move back from {current} to {next_offset}"
            )
        self._pos[tp] = Offset(next_offset)

    def snapshot(self) -> dict[TopicPartition, Offset]:
        """Current positions (a copy)."""
        return dict(self._pos)

    def replay_debt(self, ends: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Offsets between each position and the given end offsets (never negative)."""
        return {tp: max(0, ends.get(tp, pos) - pos) for tp, pos in self._pos.items()}


class CheckpointSequence:
    """Issues strictly increasing checkpoint ids, continuing after a restored one."""

    def __init__(self, last: CheckpointId | None) -> None:
        self._last = -1 if last is None else int(last)

    @property
    def last(self) -> CheckpointId | None:
        """The last id issued or restored."""
        return None if self._last < 0 else CheckpointId(self._last)

    def next(self) -> CheckpointId:
        """A fresh id, greater than every earlier one."""
        self._last += 1
        return CheckpointId(self._last)
