"""The subtask state machine, with every allowed transition in one table.

::

    CREATED ──► RESTORING ──► RUNNING ◄──► CHECKPOINTING ──► STOPPED (asked to stop)
                    │            │               ▲
                    │            ▼               ▼
                    │        FINISHING ◄─────────┘ (final checkpoint)
                    │            │
                    │            ▼
                    └─────────► FINISHED  (directly: its final checkpoint already exists)
    any state except FINISHED/STOPPED ──► FAILED
"""

from __future__ import annotations

import enum

from spillway.channels.errors import SpillwayError


class Phase(enum.Enum):
    """Where a subtask is in its life."""

    CREATED = "created"
    RESTORING = "restoring"
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    FINISHING = "finishing"
    FINISHED = "finished"
    STOPPED = "stopped"
    FAILED = "failed"


ALLOWED: dict[Phase, frozenset[Phase]] = {
    Phase.CREATED: frozenset({Phase.RESTORING, Phase.FAILED}),
    Phase.RESTORING: frozenset({Phase.RUNNING, Phase.FINISHED, Phase.FAILED}),
    Phase.RUNNING: frozenset({Phase.CHECKPOINTING, Phase.FINISHING, Phase.FAILED}),
    Phase.CHECKPOINTING: frozenset({Phase.RUNNING, Phase.FINISHING, Phase.STOPPED, Phase.FAILED}),
    Phase.FINISHING: frozenset({Phase.CHECKPOINTING, Phase.FINISHED, Phase.FAILED}),
    Phase.FINISHED: frozenset(),
    Phase.STOPPED: frozenset(),
    Phase.FAILED: frozenset(),
}


class IllegalTransitionError(SpillwayError):
    """A transition outside :data:`ALLOWED`: a bug in the runtime."""


class Lifecycle:
    """Tracks one subtask's phase and refuses illegal transitions."""

    def __init__(self) -> None:
        self.phase = Phase.CREATED
        self._before_checkpoint = Phase.RUNNING

    def to(self, target: Phase) -> None:
        """Move to ``target``; :class:`IllegalTransitionError` if the table forbids it."""
        if target not in ALLOWED[self.phase]:
            raise IllegalTransitionError(
                f"subtask cannot go from {self.phase.name} to {target.name}"
            )
        if target is Phase.CHECKPOINTING:
            self._before_checkpoint = self.phase
        self.phase = target

    def fail(self) -> None:
        """Move to FAILED from any phase: an error may come after the last transition
        (while the end is reported), where the table allows none."""
        self.phase = Phase.FAILED

    def after_checkpoint(self) -> None:
        """Return from CHECKPOINTING to where the subtask was."""
        self.to(self._before_checkpoint)
