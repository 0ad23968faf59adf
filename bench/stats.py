"""Summary statistics for repeated benchmark runs. Pure: no I/O, no clock.

Throughput figures are summarised by their median and their full range (min–max) rather
than mean ± standard deviation: with a handful of runs on a shared machine, one slow run
(a GC pause, a log-segment roll on the broker) would drag a mean and inflate a standard
deviation, while the median stays put and the range still shows that it happened.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    """The median of some runs and the lowest and highest value among them."""

    median: float
    low: float
    high: float
    runs: int


def spread(values: Sequence[float]) -> Spread:
    """Median and min–max of ``values``.

    Raises ``ValueError`` for an empty sequence or a value that is NaN or infinite: a
    summary of nothing, or of a broken measurement, must not look like a result.
    """
    if not values:
        raise ValueError("no values to summarise")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"values must be finite numbers, got {list(values)!r}")
    return Spread(
        median=float(statistics.median(values)),
        low=float(min(values)),
        high=float(max(values)),
        runs=len(values),
    )


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """``numerators[i] / denominators[i]`` for each run ``i``.

    Ratios are taken run by run (both figures from the same run, so the same machine
    state) and summarised afterwards; the ratio of two medians could pair a fast run of
    one side with a slow run of the other. Raises ``ValueError`` if the sequences differ
    in length or a denominator is not positive.
    """
    if len(numerators) != len(denominators):
        raise ValueError(
            f"cannot pair {len(numerators)} numerators with {len(denominators)} denominators"
        )
    if any(d <= 0 for d in denominators):
        raise ValueError(f"denominators must be positive, got {list(denominators)!r}")
    return [n / d for n, d in zip(numerators, denominators, strict=True)]


def rate(amount: float, seconds: float) -> float:
    """``amount`` per second over ``seconds``; ``ValueError`` unless ``seconds`` is positive."""
    if not seconds > 0:
        raise ValueError(f"elapsed time must be positive, got {seconds!r} s")
    return amount / seconds
