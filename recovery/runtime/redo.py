"""Whether a failed subtask is redone within its Spark attempt, and within which bounds.

A broker that dies mid-transaction moves partition leaders and the transaction and group
coordinators; the subtask's open transaction then cannot finish (an abortable error, a
commit that times out, ``send_offsets_to_transaction`` abandoned past its deadline) and
the runtime raises a *transient* :class:`~spillway.channels.errors.SpillwayError`. Before,
that error ended the Spark task and Spark retried it: a restart. Now the task body
(:func:`spillway.spark_jobs.spark.driver._task`) asks :class:`RedoBudget` first and, while
the bounds allow, builds a new :class:`~spillway.recovery.runtime.runner.SubtaskRunner`
for the same attempt: its ``init_transactions`` fences the failed producer (epoch bump,
its open transaction aborted) and it restores state and positions from the subtask's last
committed checkpoint, exactly as a Spark retry would; only the process stays.

This module is the decision alone (no I/O, the clock passed in): which errors are redone
(:func:`redoable`) and the bounds (:class:`RedoBounds`): at most ``max_redos`` redos, and
at most ``max_stall_s`` seconds of stall in all, where a redo's stall runs from the
failure until the next runner resumed processing (or, while it has not, until now). Past
either bound the error is raised as before and Spark retries the task.

The bounds hold per *episode*: a runner that resumed, committed a checkpoint and ran
``healthy_s`` seconds before it failed has shown the cluster works again, so its failure
starts a new episode with the bounds whole. Without that, a job running for days would
restart after its seventh broker loss however well each one went (a measured run of ten
kills gave one subtask a redo at four of them); a redo loop that gets nowhere never runs
healthy that long, and is stopped by the bounds.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from spillway.channels.errors import (
    BrokerUnavailableError,
    ProducerFencedError,
    SpillwayError,
    TransactionAbortedError,
    UndecidedTransactionError,
)
from spillway.channels.kafka.retry import is_retriable

# What a changing cluster raises to a subtask: its transaction was aborted (an abortable
# error, a timed-out commit, a call abandoned past its deadline, a flush that did not
# finish); a checkpoint partition's transaction left undecided; init_transactions timing
# out while the transaction coordinator moves.
REDONE_KINDS: tuple[type[SpillwayError], ...] = (
    TransactionAbortedError,
    UndecidedTransactionError,
    BrokerUnavailableError,
)


class Verdict(enum.StrEnum):
    """What the task body does with a failed runner."""

    REDO = "redo"  # a new runner for the same attempt: fence, restore, go on
    FAIL = "fail"  # raise as before: Spark retries the task (or the job stops)


@dataclass(frozen=True)
class RedoBounds:
    """How much redoing one Spark attempt may do before it fails as before.

    ``max_redos``: redos per episode. ``max_stall_s``: seconds of stall per episode, all
    its redos together. ``pause_s``: the first redo's pause before the new runner starts
    (doubling per redo, at most ``max_pause_s``): leaders and coordinators take seconds
    to move, and a runner started at once would mostly wait in ``init_transactions``.
    ``healthy_s``: a runner that committed a checkpoint and ran this long after it
    resumed ends the episode: its failure starts a new one.
    """

    max_redos: int = 6
    max_stall_s: float = 180.0
    pause_s: float = 0.5
    max_pause_s: float = 4.0
    healthy_s: float = 30.0


@dataclass(frozen=True)
class Decision:
    """The answer for one failure: the ``verdict``, why (``reason``, for the log and the
    event), the redo's number in this attempt (1 for the first; 0 with ``FAIL``), the
    attempt's stall so far in seconds, and the pause before the new runner starts."""

    verdict: Verdict
    reason: str
    redo: int
    stall_s: float
    pause_s: float


def redoable(error: BaseException) -> bool:
    """True if ``error`` is one a changing cluster raises and a redo from the last
    checkpoint can get past: a non-deterministic error of :data:`REDONE_KINDS`, or a
    plain :class:`SpillwayError` raised from a transient Kafka error (leader or
    coordinator moving, transport). Never a deterministic error, never fencing (a newer
    incarnation owns the subtask), never anything that is no :class:`SpillwayError`."""
    if not isinstance(error, SpillwayError) or error.deterministic:
        return False
    if isinstance(error, ProducerFencedError):
        return False
    if isinstance(error, REDONE_KINDS):
        return True
    if type(error) is SpillwayError and error.__cause__ is not None:
        return is_retriable(error.__cause__)
    return False


class RedoBudget:
    """The redos of one Spark attempt, decided failure by failure (:meth:`decide`).

    Times are wall-clock seconds (``time.time()``), passed in by the caller, so the
    decision is a pure function of what it was told.
    """

    def __init__(self, bounds: RedoBounds | None = None) -> None:
        self.bounds = bounds if bounds is not None else RedoBounds()
        self.redos = 0  # in this episode
        self.total = 0  # in the attempt, every episode
        self.stall_s = 0.0  # of the redos whose runner resumed processing
        self._open_since: float | None = None  # failure not yet followed by a resumed runner

    def decide(
        self, error: BaseException, now: float, resumed_at: float | None, committed: int = 0
    ) -> Decision:
        """What to do about runner failure ``error`` at ``now``; ``resumed_at``: when the
        failed runner had resumed processing (restored, task built), None if it never did;
        ``committed``: the checkpoints it committed.

        A redo counts from here; the stall of the previous redo closes at ``resumed_at``
        if its runner got that far, else it runs on to ``now``. A runner that ran healthy
        (:attr:`RedoBounds.healthy_s`) starts a new episode first.
        """
        healthy = resumed_at is not None and committed > 0
        if healthy and resumed_at is not None and now - resumed_at >= self.bounds.healthy_s:
            self.redos, self.stall_s, self._open_since = 0, 0.0, None
        since = self._open_since
        if since is not None and resumed_at is not None:
            self.stall_s += max(0.0, resumed_at - since)
            since = None
        start = since if since is not None else now
        stall = self.stall_s + max(0.0, now - start)
        b = self.bounds
        if not redoable(error):
            return self._fail(f"{type(error).__name__} is not redone within an attempt", stall)
        if self.redos >= b.max_redos:
            return self._fail(f"{self.redos} redos already (bound {b.max_redos})", stall)
        if stall > b.max_stall_s:
            return self._fail(f"stalled {stall:.1f}s (bound {b.max_stall_s:.0f}s)", stall)
        self.redos += 1
        self.total += 1
        self._open_since = start
        pause = min(b.max_pause_s, b.pause_s * 2 ** (self.redos - 1))
        return Decision(
            Verdict.REDO, f"{type(error).__name__}: redo {self.redos}", self.redos, stall, pause
        )

    def _fail(self, reason: str, stall: float) -> Decision:
        return Decision(Verdict.FAIL, reason, 0, stall, 0.0)
