"""The phases of a restart, from the kill to caught up: pure bookkeeping (and one /proc read).

A restart of one subtask passes these phases, in this order:

* ``killed`` — the old attempt died (known only to whoever killed it: a benchmark, the demo);
* ``spark_noticed`` — Spark's scheduler marked the old attempt failed;
* ``scheduled`` — Spark launched the next attempt;
* ``python_started`` — the new attempt's Python process began (forked by PySpark's daemon);
* ``imported`` — modules imported and the pipeline built;
* ``fenced`` — ``init_transactions`` returned: the old attempt is fenced, its transaction aborted;
* ``restored`` — state and positions restored: the attempt starts processing;
* ``caught_up`` — it has re-read what the old attempt had read.

Each phase is a wall-clock time (``time.time()``, seconds) recorded where it is known:
``spark_noticed`` and ``scheduled`` by the Spark driver (its task records), the next four
by the new attempt, which puts them in its ``started`` event, ``caught_up`` once it has
re-read what its predecessor had read. ``killed`` is known only to whoever killed it (a
benchmark, the demo). Wall clocks of one machine, or of a cluster kept in sync by NTP:
the steps are only as good as those clocks.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

PHASES = (
    "killed",
    "spark_noticed",
    "scheduled",
    "python_started",
    "imported",
    "fenced",
    "restored",
    "caught_up",
)
# Recorded by the new attempt itself (the rest come from Spark's driver or the killer).
ATTEMPT_PHASES = ("python_started", "imported", "fenced", "restored", "caught_up")
# Steps of a new attempt, from its process start to processing, worth telling apart when
# looking for where the time goes: the worker's set-up before the task body runs, building
# the plan, waiting for a live rescale's handover (a subtask launched ahead of it),
# creating the clients, init_transactions, the "fencing" event, reading the
# checkpoint, restoring state, assigning inputs and creating writers, opening operators.
STEPS = (
    "worker",
    "plan",
    "handover",
    "clients",
    "fence",
    "announce",
    "history",
    "state",
    "inputs",
    "opened",
)


@dataclass
class PhaseClock:
    """Wall times at which one attempt passed its phases, and how long its steps took."""

    times: dict[str, float] = field(default_factory=dict)
    steps: dict[str, float] = field(default_factory=dict)  # step -> seconds
    _lap: float = field(default_factory=time.monotonic, repr=False)

    def mark(self, phase: str, at: float | None = None) -> None:
        """Record ``phase`` at wall time ``at`` (default: now); ValueError for unknown phases."""
        if phase not in PHASES:
            raise ValueError(f"unknown restart phase {phase!r}; phases: {', '.join(PHASES)}")
        self.times[phase] = time.time() if at is None else at

    def step(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to step ``name`` (ValueError for unknown steps)."""
        if name not in STEPS:
            raise ValueError(f"unknown step {name!r}; steps: {', '.join(STEPS)}")
        self.steps[name] = self.steps.get(name, 0.0) + seconds

    def lap(self, name: str) -> None:
        """Add the time since the previous lap (or since this clock was made) to step ``name``."""
        now = time.monotonic()
        self.step(name, now - self._lap)
        self._lap = now

    def as_dict(self) -> dict[str, float]:
        """The recorded phases in phase order, to the millisecond (JSON-able)."""
        return {p: round(self.times[p], 3) for p in PHASES if p in self.times}

    def steps_dict(self) -> dict[str, float]:
        """The steps in step order, in seconds to the millisecond."""
        return {s: round(self.steps[s], 3) for s in STEPS if s in self.steps}


def merge(*records: Mapping[str, float] | None) -> dict[str, float]:
    """Phases from several sources (e.g. Spark's and the attempt's); the first one wins."""
    out: dict[str, float] = {}
    for r in records:
        for p, t in (r or {}).items():
            if p in PHASES and p not in out:
                out[p] = float(t)
    return {p: out[p] for p in PHASES if p in out}


def steps(times: Mapping[str, float]) -> list[tuple[str, float]]:
    """``(phase, seconds since the previous recorded phase)`` for every phase after the first."""
    known = [(p, float(times[p])) for p in PHASES if p in times]
    return [(p, t - prev) for (_, prev), (p, t) in pairwise(known)]


def out_of_order(times: Mapping[str, float]) -> list[str]:
    """Phases recorded earlier than a phase that comes before them (should be none)."""
    bad = []
    latest: tuple[str, float] | None = None
    for p in PHASES:
        if p not in times:
            continue
        t = float(times[p])
        if latest is not None and t < latest[1]:
            bad.append(f"{p} at {t:.3f} is before {latest[0]} at {latest[1]:.3f}")
        if latest is None or t >= latest[1]:
            latest = (p, t)
    return bad


def missing(times: Mapping[str, float], expected: Iterable[str] = PHASES) -> list[str]:
    """The ``expected`` phases not recorded."""
    return [p for p in expected if p not in times]


def render(times: Mapping[str, float], since: str | None = None) -> str:
    """One line for people: ``phase +0.123s`` per phase, each step from the previous one."""
    parts = [f"{p} +{dt:.3f}s" for p, dt in steps(times)]
    first = next((p for p in PHASES if p in times), None)
    head = f"{since or first}" if first is not None else "no phases"
    return " → ".join([head, *parts])


def process_start_time(pid: int | None = None, proc: Path = Path("/proc")) -> float | None:
    """Wall time at which process ``pid`` (default: this one) started, to 10 ms; ``None``
    where ``/proc`` is not available.

    The start is counted in clock ticks since boot (``/proc/<pid>/stat`` field 22); the
    time since boot comes from ``/proc/uptime`` on the same clock, so the difference is the
    process's age, independent of the whole-second boot time in ``/proc/stat``.
    """
    try:
        stat = (proc / str(pid or os.getpid()) / "stat").read_text()
        uptime = float((proc / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return start_time_from(stat, uptime, time.time(), os.sysconf("SC_CLK_TCK"))


def start_time_from(stat: str, uptime_s: float, now: float, ticks_per_s: int) -> float | None:
    """Wall start time of the process whose ``/proc/<pid>/stat`` line is ``stat``, given the
    seconds since boot ``uptime_s`` read at wall time ``now``. ``None`` if ``stat`` is malformed."""
    # The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    _, sep, tail = stat.rpartition(")")
    fields = tail.split()
    if not sep or len(fields) < 20:
        return None
    try:
        started_ticks = int(fields[19])  # field 22 of proc(5); tail starts at field 3
    except ValueError:
        return None
    return now - (uptime_s - started_ticks / ticks_per_s)
