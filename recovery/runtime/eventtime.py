"""Event-time chores of a subtask, apart from the runner's loop.

* :class:`SetAsides`: input records an operator did not use (late records) are counted
  per kind in the subtask's checkpoint and, with a dead-letter channel, dead-lettered
  in the same transaction; so a restart neither loses nor repeats a count or a letter.
* :class:`IdleAnnouncer`: when a subtask's input is idle, it tells its downstream
  subtasks (an in-band idle record) so they leave it out of their watermark; it repeats
  that while idle, because a restarted reader does not keep what it was told.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from spillway.channels.ids import SubtaskId
from spillway.recovery.job.origins import Origin
from spillway.recovery.job.plan import SetAside
from spillway.recovery.runtime.deadletter import DeadLetters

log = logging.getLogger("spillway.subtask")


class SetAsides:
    """Counts (and dead-letters, if there is a channel for it) one subtask's set-asides."""

    def __init__(self, subtask: SubtaskId, dead_letters: DeadLetters | None) -> None:
        self._subtask = subtask
        self._dead_letters = dead_letters
        self._counts: dict[str, int] = {}
        self._warned = False

    def restore(self, counts: Mapping[str, int]) -> None:
        """Continue the totals of the restored checkpoint."""
        self._counts = {k: int(v) for k, v in counts.items()}

    def take(self, items: list[SetAside], origin: Origin | None) -> None:
        """Count ``items`` (from the input message at ``origin``, if known) and
        dead-letter them in the open transaction, or drop them after saying so once."""
        if not items:
            return
        for a in items:
            self._counts[a.kind] = self._counts.get(a.kind, 0) + 1
            if self._dead_letters is not None:
                self._dead_letters.send(
                    stage=a.kind, error=a.reason, origin=origin, record=a.record
                )
        if self._dead_letters is None and not self._warned:
            self._warned = True
            log.warning(
                "%s: %s records are counted (in checkpoints, stopped/finished events) and "
                "dropped; run with --dead-letter to keep them. First: %s",
                self._subtask,
                items[0].kind,
                items[0].reason,
            )

    def counts(self) -> dict[str, int]:
        """Totals per kind since the job began (checkpointed)."""
        return dict(self._counts)


class IdleAnnouncer:
    """When to send an idle record: on becoming idle, then every ``repeat_s`` while idle."""

    def __init__(self, repeat_s: float = 1.0) -> None:
        self.repeat_s = repeat_s
        self._last: float | None = None  # when it was last announced; None: not idle

    def due(self, idle: bool, now: float) -> bool:
        """Whether to announce idleness now, given whether the input is idle at ``now``."""
        if not idle:
            self._last = None
            return False
        if self._last is None or now - self._last >= self.repeat_s:
            self._last = now
            return True
        return False
