"""The phases of a live rescale, from the request to every new subtask processing: pure
bookkeeping over the job's events.

A live rescale of one operator passes these phases, in this order:

* ``requested`` — ``spillway rescale`` appended its ``rescale-requested`` event;
* ``stop_requested`` — the driver took the request and asked the old subtasks to stop;
* ``last_checkpoint`` — every old subtask committed its handed-over checkpoint and ended;
* ``handover`` — the old subtasks are fenced, the handover and the new shape recorded and
  the new writer count announced downstream: the new subtasks may start;
* ``scheduled`` — Spark accepted the new subtasks' job;
* ``python_started`` — the last new subtask's Python process began;
* ``restored`` — the last new subtask restored its state and positions;
* ``processing`` — the last new subtask announced ``started``: every new subtask processes.

The driver launches the new subtasks before it takes the handover (they wait for it,
:mod:`spillway.spark_jobs.spark.handoverwait`), so ``scheduled`` and ``python_started``
usually come before ``handover``: the steps (:meth:`RescalePhases.durations`) follow the
time order, and :meth:`RescalePhases.since_request` gives each phase's time from the
request whatever the order.

The driver records the first five in one ``rescale-phases`` event (with the request id);
the last three are the latest of the new subtasks' own phases (their ``started`` events,
:mod:`spillway.recovery.observe.phases`), since the pause ends with the slowest. Wall
clocks (``time.time()``), as for a restart's phases.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

RESCALE_PHASES = (
    "requested",
    "stop_requested",
    "last_checkpoint",
    "handover",
    "scheduled",
    "python_started",
    "restored",
    "processing",
)
# Recorded by the driver, in its rescale-phases event.
DRIVER_PHASES = RESCALE_PHASES[:5]
# Taken from the new subtasks' started events (the latest of them).
SUBTASK_PHASES = ("python_started", "restored")


@dataclass
class RescalePhases:
    """One live rescale's phases (wall times) and the driver's steps (seconds)."""

    request: str
    operator: str
    previous: int
    parallelism: int
    times: dict[str, float] = field(default_factory=dict)
    steps: dict[str, float] = field(default_factory=dict)
    started: int = 0  # new subtasks seen processing

    def complete(self) -> bool:
        """True once every phase is known (every new subtask is processing)."""
        return all(p in self.times for p in RESCALE_PHASES)

    def pause_s(self) -> float | None:
        """Request → every new subtask processing (None until complete)."""
        if not self.complete():
            return None
        return self.times["processing"] - self.times["requested"]

    def durations(self) -> dict[str, float]:
        """Per phase after the first in time order, the seconds since the one before it."""
        known = sorted(
            (self.times[p], RESCALE_PHASES.index(p), p) for p in RESCALE_PHASES if p in self.times
        )
        return {p: round(t - prev, 3) for (prev, _, _), (t, _, p) in pairwise(known)}

    def since_request(self) -> dict[str, float]:
        """Per phase after the request, the seconds since the request."""
        t0 = self.times.get("requested")
        if t0 is None:
            return {}
        return {p: round(self.times[p] - t0, 3) for p in RESCALE_PHASES[1:] if p in self.times}

    def to_json(self) -> dict[str, Any]:
        """JSON form (``spillway status --json``, benchmarks)."""
        return {
            "request": self.request,
            "operator": self.operator,
            "previous": self.previous,
            "parallelism": self.parallelism,
            "times": {p: round(self.times[p], 3) for p in RESCALE_PHASES if p in self.times},
            "durations": self.durations(),
            "since_request": self.since_request(),
            "steps": dict(self.steps),
            "pause_s": None if (s := self.pause_s()) is None else round(s, 3),
        }


def driver_phases(
    requested: float,
    stop_requested: float,
    last_checkpoint: float,
    handover: float,
    scheduled: float,
) -> dict[str, float]:
    """The driver's phases of one rescale by name, to the millisecond (JSON-able)."""
    times = (requested, stop_requested, last_checkpoint, handover, scheduled)
    return {p: round(t, 3) for p, t in zip(DRIVER_PHASES, times, strict=True)}


def fold_rescales(events: Iterable[Mapping[str, Any]]) -> list[RescalePhases]:
    """Every live rescale in ``events`` (oldest first) with its phases so far: the
    driver's ``rescale-phases`` event, then the latest ``python_started`` / ``restored``
    and ``started`` time over the new subtasks' first ``started`` events after the
    handover. A rescale is complete when each of its new subtasks has started."""
    events = list(events)
    out = [
        RescalePhases(
            str(e.get("request")),
            str(e.get("target")),
            int(e.get("previous", 0)),
            int(e.get("parallelism", 0)),
            {p: float(t) for p, t in e["phases"].items() if p in DRIVER_PHASES},
            {str(k): float(v) for k, v in (e.get("steps") or {}).items()},
        )
        for e in events
        if e.get("event") == "rescale-phases" and isinstance(e.get("phases"), Mapping)
    ]
    for i, r in enumerate(out):
        handover = r.times.get("handover")
        if handover is None:
            continue
        # A later rescale of the same operator ends this one's window.
        later = [o.times.get("handover") for o in out[i + 1 :] if o.operator == r.operator]
        end = min((t for t in later if t is not None), default=None)
        started: dict[int, Mapping[str, Any]] = {}
        for e in events:
            t = float(e.get("time", 0))
            if (
                e.get("event") == "started"
                and e.get("operator") == r.operator
                and int(e.get("index", -1)) < r.parallelism
                and t >= handover
                and (end is None or t < end)
            ):
                started.setdefault(int(e["index"]), e)
        r.started = len(started)
        if r.started < r.parallelism:
            continue
        for p in SUBTASK_PHASES:
            ts = [float(e["phases"][p]) for e in started.values() if p in (e.get("phases") or {})]
            if len(ts) == r.parallelism:
                r.times[p] = max(ts)
        r.times["processing"] = max(float(e["time"]) for e in started.values())
    return out


def render(r: RescalePhases) -> str:
    """One line for people: the operator, the widths, each phase's step and the pause."""
    steps = " → ".join(f"{p} +{dt:.2f}s" for p, dt in r.durations().items())
    pause = r.pause_s()
    tail = (
        f"pause {pause:.2f} s"
        if pause is not None
        else f"{r.started}/{r.parallelism} new subtasks processing"
    )
    return f"rescale {r.operator} {r.previous} → {r.parallelism}: requested → {steps}; {tail}"


def describe_rescales(events: Iterable[Mapping[str, Any]], last: int = 5) -> list[str]:
    """The ``last`` live rescales, one line each (:func:`render`), for ``spillway status``."""
    return [render(r) for r in fold_rescales(events)[-last:]]
