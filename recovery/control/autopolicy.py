"""What an autoscaler decides: a parallelism per operator, from measurements (pure, no I/O).

DS2's rule (Kalavri et al., OSDI 2018): an operator whose subtasks each process
``true_rate`` records per busy second needs ``ceil(input_rate / (true_rate * target))``
subtasks to keep up with ``input_rate`` while busy a ``target`` fraction of the time.
:meth:`AutoscalePolicy.observe` turns one measurement of an operator into at most one
:class:`Decision`, within the user's :class:`Bounds` and the operator's
``max_parallelism``; :mod:`spillway.spark_jobs.autoscale.loop` measures, records each
decision as an event and applies it by live rescale.

Against oscillation:

- **Cooldown.** After a decision on an operator, no other decision on it for
  ``cooldown_s`` (the rescale's pause and the refilling of the measurement window fall
  in it), so a decision is never reversed within the cooldown.
- **Up at once, down slowly.** A scale-up is decided on the first measurement that
  needs more subtasks. A scale-down only once every measurement for ``down_after_s``
  needed fewer subtasks and the backlog is under ``lag_target`` (a window that starts
  after the cooldown: the earliest scale-down after a decision comes
  ``cooldown_s + down_after_s`` later); it goes to the most any
  of those measurements needed, so a dip in demand does not shrink the operator below
  what the rest of the window asked for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Reason(StrEnum):
    """Why a decision was made."""

    SCALE_UP = "scale-up"  # the input rate needs more subtasks than it has
    SCALE_DOWN = "scale-down"  # fewer subtasks kept up for the whole scale-down window
    BOUNDS = "bounds"  # the current parallelism lies outside the user's bounds


@dataclass(frozen=True)
class Bounds:
    """The user's bounds on one operator's parallelism (inclusive)."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError(f"bounds {self.low}:{self.high} need 1 <= min <= max")

    @staticmethod
    def parse(text: str) -> tuple[str, Bounds]:
        """``OPERATOR=MIN:MAX`` → (operator, bounds); :class:`ValueError` if malformed."""
        name, sep, rng = text.partition("=")
        low, colon, high = rng.partition(":")
        if not sep or not colon or not name:
            raise ValueError(f"bounds {text!r} must look like OPERATOR=MIN:MAX")
        return name, Bounds(int(low), int(high))


@dataclass(frozen=True)
class Settings:
    """How the policy decides (defaults for a job checkpointing about once a second)."""

    target_utilisation: float = 0.7  # busy fraction each subtask should run at
    cooldown_s: float = 30.0  # no decision on an operator for this long after one
    down_after_s: float = 20.0  # a scale-down needs fewer subtasks for this long
    lag_target: int = 100  # backlog (channel offsets) under which a scale-down may happen

    def __post_init__(self) -> None:
        if not 0.0 < self.target_utilisation <= 1.0:
            raise ValueError("target utilisation must be in (0, 1]")


@dataclass(frozen=True)
class Measurement:
    """One operator over one measurement window.

    ``input_rate``: records per second arriving on its input channels; ``true_rate``:
    records per busy second of one subtask (its records processed over the seconds its
    subtasks spent processing them); ``backlog``: channel offsets not yet read
    (consumer lag); ``max_parallelism``: its key groups or slots (None: neither).
    """

    operator: str
    time: float
    parallelism: int
    input_rate: float
    true_rate: float
    backlog: int
    max_parallelism: int | None = None


@dataclass(frozen=True)
class Decision:
    """Set ``operator`` to ``parallelism`` (from ``previous``), with why and from what."""

    operator: str
    time: float
    previous: int
    parallelism: int
    reason: Reason
    needed: int  # what DS2's rule asked for, before the bounds
    inputs: Measurement

    def to_event(self) -> dict[str, Any]:
        """The fields of its ``autoscale-decided`` event (``target``: the operator, as in
        a rescale request — events with an ``operator`` key are a subtask's)."""
        inputs = asdict(self.inputs)
        del inputs["operator"], inputs["time"]
        return {
            "target": self.operator,
            "previous": self.previous,
            "parallelism": self.parallelism,
            "reason": str(self.reason),
            "needed": self.needed,
            "measured": {k: _rounded(v) for k, v in inputs.items()},
        }


def needed(m: Measurement, target_utilisation: float) -> int:
    """DS2's parallelism for ``m``: enough subtasks to process its input rate while each
    is busy ``target_utilisation`` of the time (at least 1)."""
    if m.true_rate <= 0:
        raise ValueError(f"{m.operator}: a true rate must be positive")
    return max(1, math.ceil(m.input_rate / (m.true_rate * target_utilisation) - 1e-9))


@dataclass
class _Operator:
    last_decision: float | None = None
    below_since: float | None = None  # first of the current run of "needs fewer"
    below_most: int = 0  # the most any measurement of that run needed


@dataclass
class AutoscalePolicy:
    """The bookkeeping of decisions for the operators with user bounds."""

    bounds: Mapping[str, Bounds]
    settings: Settings = field(default_factory=Settings)
    _ops: dict[str, _Operator] = field(default_factory=dict)

    def observe(self, m: Measurement) -> Decision | None:
        """The decision ``m`` leads to, if any (recorded: the cooldown starts at ``m.time``).

        An operator without bounds is never decided on; within a cooldown nothing is."""
        b = self.bounds.get(m.operator)
        if b is None:
            return None
        op = self._ops.setdefault(m.operator, _Operator())
        if op.last_decision is not None and m.time - op.last_decision < self.settings.cooldown_s:
            return None
        high = b.high if m.max_parallelism is None else min(b.high, m.max_parallelism)
        low = min(b.low, high)
        want = needed(m, self.settings.target_utilisation)
        target = min(max(want, low), high)
        if not low <= m.parallelism <= high:
            return self._decide(op, m, target, Reason.BOUNDS, want)
        if target > m.parallelism:
            return self._decide(op, m, target, Reason.SCALE_UP, want)
        if target == m.parallelism or m.backlog > self.settings.lag_target:
            op.below_since = None  # the run of "needs fewer" is broken
            return None
        if op.below_since is None:
            op.below_since, op.below_most = m.time, target
        op.below_most = max(op.below_most, target)
        if m.time - op.below_since < self.settings.down_after_s:
            return None
        return self._decide(op, m, op.below_most, Reason.SCALE_DOWN, want)

    def _decide(
        self, op: _Operator, m: Measurement, parallelism: int, reason: Reason, want: int
    ) -> Decision:
        op.last_decision, op.below_since = m.time, None
        return Decision(m.operator, m.time, m.parallelism, parallelism, reason, want, m)


def describe_decisions(events: Sequence[Mapping[str, Any]], last: int = 5) -> list[str]:
    """``spillway status`` lines for the newest ``last`` autoscaler decisions of a job."""
    lines = []
    for e in [e for e in events if e.get("event") == "autoscale-decided"][-last:]:
        m = e.get("measured", {})
        lines.append(
            f"autoscale: {e.get('target')} {e.get('previous')} -> {e.get('parallelism')} "
            f"({e.get('reason')}: input {m.get('input_rate')} rec/s, true rate "
            f"{m.get('true_rate')} rec/busy s per subtask, backlog {m.get('backlog')}, "
            f"needed {e.get('needed')}){_outcome(e, events)}"
        )
    return lines


def _outcome(decision: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> str:
    request = decision.get("request")
    for e in events:
        if request is not None and e.get("request") == request:
            if e.get("event") == "rescaled":
                return ", applied"
            if e.get("event") == "rescale-failed":
                return f", failed: {e.get('error')}"
    return ""


def _rounded(v: object) -> object:
    return round(v, 3) if isinstance(v, float) else v
