"""Which Spark job runs which operator, and what the driver does when one ends (pure).

The driver runs every operator (a chain counts as one: the plan's operator) as a Spark
job of its own, so one operator's subtasks can be stopped and started while the others
keep running (rescaling and upgrades need that; a single job for every subtask could only
be cancelled as a whole). This module is the bookkeeping only; the Spark threads around
it are :mod:`spillway.spark_jobs.spark.opruns`.

An operator job's life::

    RUNNING --request_stop--> STOPPING --ended/failed--> HELD --start--> RUNNING
       |                                                   (a new generation)
       +--ended--> ENDED        +--failed--> FAILED        (+ CANCELLED: ended by a
                                                            cancel-all after a failure)

Each start is a new *generation* of the operator's job: its job group and its stop
requests carry the generation, so the subtasks of a restarted job never act on the stop
request that ended the previous one.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spillway.channels.errors import ConfigError
from spillway.channels.ids import JobId, OperatorName


class OpState(enum.Enum):
    """Where one operator's Spark job is (see the module's drawing)."""

    RUNNING = "running"
    STOPPING = "stopping"
    HELD = "held"  # stopped on request; waits for start_operator
    ENDED = "ended"  # its subtasks finished, were skipped or stopped with the whole job
    FAILED = "failed"
    CANCELLED = "cancelled"


_ALLOWED: dict[OpState, frozenset[OpState]] = {
    OpState.RUNNING: frozenset(
        {OpState.STOPPING, OpState.ENDED, OpState.FAILED, OpState.CANCELLED}
    ),
    OpState.STOPPING: frozenset({OpState.HELD, OpState.FAILED, OpState.CANCELLED}),
    OpState.HELD: frozenset({OpState.RUNNING}),
    OpState.ENDED: frozenset(),
    OpState.FAILED: frozenset(),
    OpState.CANCELLED: frozenset(),
}


class Action(enum.Enum):
    """What the driver must do after an operator job ended."""

    NOTHING = "nothing"
    CANCEL_ALL = "cancel-all"  # Spark gave up on it: a job with a dead operator cannot end


@dataclass
class OperatorJob:
    """One operator's Spark job: its subtasks (indices into the plan's subtask list)."""

    operator: OperatorName
    subtasks: tuple[int, ...]
    state: OpState = OpState.RUNNING
    generation: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)  # the last generation's results
    cancelled: bool = False  # its stop was forced by cancelling the Spark job


class OperatorJobs:
    """The operator jobs of one run and their states; decides when the run is over.

    Not thread-safe: the caller (:class:`spillway.spark_jobs.spark.opruns.OperatorRuns`) holds one
    lock
    around every call.
    """

    def __init__(
        self,
        job: JobId,
        operators: Sequence[tuple[OperatorName, Sequence[int]]],
        chained: Mapping[str, OperatorName] | None = None,
    ) -> None:
        """``operators``: the plan's, each with its subtasks; ``chained``: an operator fused
        into a chain -> the plan operator of that chain (its first)."""
        self.job = job
        self._jobs = {name: OperatorJob(name, tuple(idx)) for name, idx in operators}
        self._chained = dict(chained or {})
        self._stop_all = False
        self._cancelling = False
        self.failure: tuple[OperatorName, BaseException] | None = None  # the first, the cause

    def operators(self) -> list[OperatorName]:
        """Every operator, in the plan's order."""
        return list(self._jobs)

    def get(self, operator: str) -> OperatorJob:
        """The job of ``operator``, or of the chain it is in (a ConfigError naming the
        operators if there is none)."""
        try:
            return self._jobs[self._chained.get(operator, OperatorName(operator))]
        except KeyError:
            raise ConfigError(
                f"job {self.job} has no operator {operator!r}; its operators are "
                f"{', '.join(self._jobs)} (a chain is named after its first operator)"
            ) from None

    def group(self, operator: OperatorName) -> str:
        """The Spark job group of ``operator``'s current generation."""
        return f"spillway.{self.job}.{operator}.{self._jobs[operator].generation}"

    def _to(self, j: OperatorJob, state: OpState) -> None:
        if state not in _ALLOWED[j.state]:
            raise ConfigError(
                f"operator {j.operator} of job {self.job} is {j.state.value}; "
                f"it cannot become {state.value}"
            )
        j.state = state

    def reshape(self, operators: Sequence[tuple[OperatorName, Sequence[int]]]) -> None:
        """Each operator's subtasks after a live rescale changed the plan's subtask list
        (the jobs already running keep the indices they were launched with)."""
        for name, idx in operators:
            self._jobs[name].subtasks = tuple(idx)

    def request_stop(self, operator: str) -> int:
        """Mark ``operator``'s job stopping; returns the generation whose subtasks must stop."""
        j = self.get(operator)
        self._to(j, OpState.STOPPING)
        return j.generation

    def start(self, operator: str) -> int:
        """Mark a held ``operator`` running again; returns its new generation."""
        j = self.get(operator)
        if self._stop_all or self._cancelling:
            raise ConfigError(f"job {self.job} is stopping; operator {operator} stays stopped")
        self._to(j, OpState.RUNNING)
        j.generation += 1
        j.cancelled = False
        return j.generation

    def ended(self, operator: OperatorName, generation: int, rows: list[dict[str, Any]]) -> None:
        """The Spark job of ``operator``'s ``generation`` returned ``rows``."""
        j = self._jobs[operator]
        if generation != j.generation:
            return  # cannot happen: a generation starts only after the last one ended
        j.rows = rows
        if self._cancelling:
            self._to(j, OpState.CANCELLED)
        else:
            self._to(j, OpState.HELD if j.state is OpState.STOPPING else OpState.ENDED)

    def failed(self, operator: OperatorName, generation: int, error: BaseException) -> Action:
        """The Spark job of ``operator``'s ``generation`` raised ``error``; what to do."""
        j = self._jobs[operator]
        if generation != j.generation:
            return Action.NOTHING
        if j.state is OpState.STOPPING and j.cancelled:  # the cancel we asked for
            self._to(j, OpState.HELD)
            return Action.NOTHING
        if self._cancelling:  # cancelled because another one failed: not a cause
            self._to(j, OpState.CANCELLED)
            return Action.NOTHING
        self._to(j, OpState.FAILED)
        self.failure = (operator, error)
        self._cancelling = True
        return Action.CANCEL_ALL

    def force_stop(self, operator: str) -> str:
        """A stopping ``operator`` did not stop in time: its job group, to cancel (its
        subtasks restart from their last checkpoints, as after a kill)."""
        j = self.get(operator)
        if j.state is not OpState.STOPPING:
            raise ConfigError(f"operator {operator} of job {self.job} is {j.state.value}")
        j.cancelled = True
        return self.group(j.operator)

    def cancel_all(self) -> None:
        """Every job is being cancelled (e.g. a deterministic failure): the run ends."""
        self._cancelling = True

    def stop_all(self) -> None:
        """The whole job was asked to stop (SIGTERM): held operators stay stopped."""
        self._stop_all = True

    def done(self) -> bool:
        """True once no job runs and none waits to be started again."""
        live = {OpState.RUNNING, OpState.STOPPING}
        if any(j.state in live for j in self._jobs.values()):
            return False
        held = any(j.state is OpState.HELD for j in self._jobs.values())
        return not held or self._stop_all or self._cancelling

    def rows(self) -> list[dict[str, Any]]:
        """Every operator's last results, in the plan's subtask order."""
        return [r for j in self._jobs.values() for r in j.rows]

    def states(self) -> dict[OperatorName, OpState]:
        """Each operator's state now."""
        return {name: j.state for name, j in self._jobs.items()}


def operator_groups(
    operators: Sequence[tuple[OperatorName, int]],
) -> list[tuple[OperatorName, list[int]]]:
    """Each operator with the indices of its subtasks in the plan's subtask list (operators
    in plan order, ``(name, parallelism)``; the list is operator by operator)."""
    out: list[tuple[OperatorName, list[int]]] = []
    base = 0
    for name, parallelism in operators:
        out.append((name, list(range(base, base + parallelism))))
        base += parallelism
    return out
