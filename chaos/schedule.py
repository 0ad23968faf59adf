"""A seeded schedule of subtask crashes: which subtask dies at which point, on which attempt.

Pure bookkeeping (no I/O): the same seed gives the same schedule, its
``SPILLWAY_CRASH_AT`` value and what the event log must show afterwards.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from recovery.faults import OCCASIONAL_POINTS, POINTS, CrashPoint

# Every point a running subtask passes again and again (the chaos job checkpoints on
# intervals; after-partial-commit has its own test in test_global_checkpoints.py).
CHAOS_POINTS = tuple(p for p in POINTS if p not in OCCASIONAL_POINTS)


@dataclass(frozen=True)
class Schedule:
    """Planned crashes, at most one per attempt: attempt ``a`` of a subtask dies at
    ``crashes[a]``; the attempt after its last crash runs to the end."""

    crashes: tuple[CrashPoint, ...]

    def spec(self) -> str:
        """The ``SPILLWAY_CRASH_AT`` value."""
        return ",".join(
            f"{c.operator}:{c.index}:{c.point}:{c.attempt}:{c.nth}" for c in self.crashes
        )

    def kills(self) -> dict[str, int]:
        """Planned kills per subtask (``op[i]``) = the attempt number that finally runs."""
        out: dict[str, int] = {}
        for c in self.crashes:
            key = f"{c.operator}[{c.index}]"
            out[key] = out.get(key, 0) + 1
        return out

    def by_point(self) -> dict[str, int]:
        """Planned kills per crash point."""
        out = dict.fromkeys(CHAOS_POINTS, 0)
        for c in self.crashes:
            out[c.point] += 1
        return out

    def silent_attempts(self) -> dict[str, set[int]]:
        """Attempts that die before announcing themselves (``started`` comes after restore)."""
        out: dict[str, set[int]] = {}
        for c in self.crashes:
            if c.point == "restore":
                out.setdefault(f"{c.operator}[{c.index}]", set()).add(c.attempt)
        return out


def make_schedule(
    seed: int,
    kills: int,
    operators: Sequence[str],
    parallelism: int,
    max_per_subtask: int = 3,
    max_nth: int = 3,
) -> Schedule:
    """``kills`` crashes over the subtasks of ``operators``, every point at least once.

    A subtask dies at most ``max_per_subtask`` times (its Spark task needs one more
    attempt than that); a crash lands on the 1st..``max_nth``-th time its attempt reaches
    the point (``restore`` is reached once per attempt, so always the 1st).
    """
    subtasks = [(op, i) for op in operators for i in range(parallelism)]
    if kills < len(CHAOS_POINTS):
        raise ValueError(f"{kills} kills cannot hit all {len(CHAOS_POINTS)} crash points")
    if kills > len(subtasks) * max_per_subtask:
        raise ValueError(
            f"{kills} kills do not fit {len(subtasks)} subtasks at {max_per_subtask} each"
        )
    rng = random.Random(seed)
    points = list(CHAOS_POINTS) + [
        rng.choice(CHAOS_POINTS) for _ in range(kills - len(CHAOS_POINTS))
    ]
    rng.shuffle(points)
    per: dict[tuple[str, int], int] = dict.fromkeys(subtasks, 0)
    crashes = []
    for point in points:
        op, i = rng.choice([s for s in subtasks if per[s] < max_per_subtask])
        nth = 1 if point == "restore" else rng.randint(1, max_nth)
        crashes.append(CrashPoint(op, i, point, per[(op, i)], nth))
        per[(op, i)] += 1
    crashes.sort(key=lambda c: (operators.index(c.operator), c.index, c.attempt))
    return Schedule(tuple(crashes))
