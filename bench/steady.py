"""Steady-state cost from runs of different sizes: fixed cost apart from per-record cost.

An engine's whole run (start-up, processing, shut-down) is measured at two or more input
sizes. A straight line through ``(records, cost)`` splits the cost into what every run pays
whatever its size (the intercept: JVM and Spark start-up, imports, topic creation, planning,
JIT warm-up that does not grow with the input, shut-down) and what each further record adds
(the slope). The slope is what an engine costs in steady state; ``1 / slope`` is its records
per CPU-second (or per second of wall time). Pure, unit-tested.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Line:
    """``cost = fixed + per_record * records``, fitted by least squares."""

    fixed: float
    per_record: float

    @property
    def per_unit(self) -> float | None:
        """Records per unit of cost in steady state (``1 / per_record``); None if not > 0."""
        return 1.0 / self.per_record if self.per_record > 0 else None


def fit(points: Sequence[tuple[int, float]]) -> Line:
    """The least-squares line through ``(records, cost)`` points of >= 2 distinct sizes.

    Raises ``ValueError`` when fewer than two distinct sizes are given.
    """
    sizes = {n for n, _ in points}
    if len(sizes) < 2:
        raise ValueError(f"need runs of at least two input sizes, got sizes {sorted(sizes)}")
    k = len(points)
    mx = sum(n for n, _ in points) / k
    my = sum(c for _, c in points) / k
    sxx = sum((n - mx) ** 2 for n, _ in points)
    sxy = sum((n - mx) * (c - my) for n, c in points)
    slope = sxy / sxx
    return Line(my - slope * mx, slope)
