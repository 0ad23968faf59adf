"""A seeded schedule of subtask crashes: which subtask dies at which point, on which
attempt; then live changes of the running job (``rescale OP N``, ``upgrade OP``), each
with a crash of one of the subtasks it starts.

Pure bookkeeping (no I/O): the same seed gives the same schedule, its
``SPILLWAY_CRASH_AT`` value and what the event log must show afterwards.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from spillway.recovery.runtime.faults import OCCASIONAL_POINTS, POINTS, CrashPoint

# Every point a running subtask passes again and again (the chaos job checkpoints on
# intervals; after-partial-commit has its own test in test_global_checkpoints.py).
CHAOS_POINTS = tuple(p for p in POINTS if p not in OCCASIONAL_POINTS)
CHANGES = ("rescale", "upgrade")
RESCALE_WIDTHS = (1, 3)  # a live rescale goes from the width it has to one of these


def _kills(crashes: Sequence[CrashPoint]) -> dict[str, int]:
    """Planned kills per subtask (``op[i]``) = the attempt number that finally runs."""
    out: dict[str, int] = {}
    for c in crashes:
        key = f"{c.operator}[{c.index}]"
        out[key] = out.get(key, 0) + 1
    return out


def _silent(crashes: Sequence[CrashPoint]) -> dict[str, set[int]]:
    """Attempts that die before announcing themselves (``started`` comes after restore)."""
    out: dict[str, set[int]] = {}
    for c in crashes:
        if c.point == "restore":
            out.setdefault(f"{c.operator}[{c.index}]", set()).add(c.attempt)
    return out


@dataclass(frozen=True)
class Change:
    """A live change of one operator while the job runs (``spillway rescale`` or
    ``spillway upgrade``): afterwards the operator has ``width`` subtasks, in generation
    ``generation`` of its Spark job, whose attempts die at ``crashes``."""

    kind: str  # "rescale" or "upgrade"
    operator: str
    width: int
    generation: int
    crashes: tuple[CrashPoint, ...] = ()

    def describe(self) -> str:
        """``rescale OP N`` or ``upgrade OP``."""
        if self.kind == "rescale":
            return f"rescale {self.operator} {self.width}"
        return f"upgrade {self.operator}"

    def kills(self) -> dict[str, int]:
        """Planned kills per new subtask (``op[i]``)."""
        return _kills(self.crashes)

    def silent_attempts(self) -> dict[str, set[int]]:
        """New subtasks' attempts planned to die before announcing themselves."""
        return _silent(self.crashes)


@dataclass(frozen=True)
class Schedule:
    """Planned crashes, at most one per attempt: attempt ``a`` of a subtask dies at
    ``crashes[a]`` (in the first generation of its operator's job); the attempt after its
    last crash runs to the end. Then ``changes``, in order, each with its own crashes."""

    crashes: tuple[CrashPoint, ...]
    changes: tuple[Change, ...] = ()

    def spec(self) -> str:
        """The ``SPILLWAY_CRASH_AT`` value (the changes' crashes included)."""
        every = [*self.crashes, *(c for ch in self.changes for c in ch.crashes)]
        return ",".join(
            f"{c.operator}:{c.index}:{c.point}:{c.attempt}:{c.nth}"
            + ("" if c.generation is None else f":{c.generation}")
            for c in every
        )

    def kills(self) -> dict[str, int]:
        """Planned kills per subtask (``op[i]``) = the attempt number that finally runs
        (first generation: before any change)."""
        return _kills(self.crashes)

    def widths(self, operators: Sequence[str], parallelism: int) -> dict[str, int]:
        """Each operator's width after every change."""
        out = dict.fromkeys(operators, parallelism)
        for ch in self.changes:
            out[ch.operator] = ch.width
        return out

    def slots(self, operators: Sequence[str], parallelism: int) -> int:
        """Task slots the job needs: its subtasks at the widest it gets."""
        widths = dict.fromkeys(operators, parallelism)
        most = sum(widths.values())
        for ch in self.changes:
            widths[ch.operator] = ch.width
            most = max(most, sum(widths.values()))
        return most

    def by_point(self) -> dict[str, int]:
        """Planned kills per crash point."""
        out = dict.fromkeys(CHAOS_POINTS, 0)
        for c in self.crashes:
            out[c.point] += 1
        return out

    def silent_attempts(self) -> dict[str, set[int]]:
        """Attempts that die before announcing themselves (``started`` comes after restore)."""
        return _silent(self.crashes)


def make_schedule(
    seed: int,
    kills: int,
    operators: Sequence[str],
    parallelism: int,
    max_per_subtask: int = 3,
    max_nth: int = 3,
    changes: Sequence[str] = (),
    rescalable: Sequence[str] = (),
    upgradable: Sequence[str] = (),
) -> Schedule:
    """``kills`` crashes over the subtasks of ``operators``, every point at least once,
    then one live change of each kind in ``changes`` (:data:`CHANGES`, in that order).

    A subtask dies at most ``max_per_subtask`` times (its Spark task needs one more
    attempt than that); a crash lands on the 1st..``max_nth``-th time its attempt reaches
    the point (``restore`` is reached once per attempt, so always the 1st). A rescale
    takes an operator of ``rescalable`` to a width of :data:`RESCALE_WIDTHS`, and one of
    its subtasks dies while it restores from the handover; an upgrade restarts an
    operator of ``upgradable``, and one of its subtasks dies at a seeded point.
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
        crashes.append(CrashPoint(op, i, point, per[(op, i)], nth, 0))
        per[(op, i)] += 1
    crashes.sort(key=lambda c: (operators.index(c.operator), c.index, c.attempt))
    planned = _plan_changes(rng, changes, rescalable, upgradable, parallelism, max_nth)
    return Schedule(tuple(crashes), planned)


def _plan_changes(
    rng: random.Random,
    kinds: Sequence[str],
    rescalable: Sequence[str],
    upgradable: Sequence[str],
    parallelism: int,
    max_nth: int,
) -> tuple[Change, ...]:
    widths: dict[str, int] = {}
    generations: dict[str, int] = {}
    out = []
    for kind in kinds:
        if kind == "rescale":
            op = rng.choice(rescalable)
            width = rng.choice([w for w in RESCALE_WIDTHS if w != widths.get(op, parallelism)])
            point, nth = "restore", 1  # a new subtask dies restoring from the handover
        elif kind == "upgrade":
            op = rng.choice(upgradable)
            width = widths.get(op, parallelism)
            point = rng.choice([p for p in CHAOS_POINTS if p != "restore"])
            nth = rng.randint(1, max_nth)
        else:
            raise ValueError(f"unknown change {kind!r}; choose from {', '.join(CHANGES)}")
        widths[op] = width
        generations[op] = generations.get(op, 0) + 1
        crash = CrashPoint(op, rng.randrange(width), point, 0, nth, generations[op])
        out.append(Change(kind, op, width, generations[op], (crash,)))
    return tuple(out)
