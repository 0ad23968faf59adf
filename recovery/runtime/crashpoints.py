"""Where a planned crash (spillway.recovery.runtime.faults) lands around a subtask's outputs and
commits.

Shared by the processor (``before-produce``, once per transaction) and the checkpointer
(``after-produce``, the commit's points, ``after-commit``). A crash lands with everything
produced so far on the broker, still uncommitted, so the tests see the worst case.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spillway.recovery.runtime.faults import Faults


class CrashPoints:
    """One incarnation's crash points; ``flushers`` put its output on the broker first."""

    def __init__(self, faults: Faults, flushers: Sequence[Callable[[], None]] = ()) -> None:
        self.faults = faults
        self._flushers = list(flushers)
        self._produced = False  # anything written in the open transaction

    @property
    def armed(self) -> bool:
        """True if any crash is planned for this incarnation (else every hook is free)."""
        return self.faults.armed

    def reached(self, point: str) -> None:
        """Die here if ``point`` is a planned crash."""
        self.faults.reached(point)

    def before_output(self) -> None:
        """The first output of a transaction is about to be written."""
        if not self._produced:
            self._produced = True
            self.faults.reached("before-produce")

    def transaction_opened(self) -> None:
        """A new transaction began: the next output is its first again."""
        self._produced = False

    def flush_and_reach(self, point: str) -> None:
        """Flush every output, then die here if ``point`` is a planned crash."""
        for flush in self._flushers:
            flush()
        self.faults.reached(point)

    def commit_point(self, point: str) -> None:
        """The hook of spillway.offsets.store.commit_checkpoint: ``during-commit`` dies while the
        commit call runs; the others with everything flushed."""
        if point == "during-commit":
            self.faults.reached_soon(point)
        else:
            self.flush_and_reach(point)
