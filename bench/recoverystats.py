"""B3 figures from what the observers saw: records replayed, recovery time, dips. Pure.

Times are wall-clock seconds (the observers' and the producer's ``time.time()``); a
record is identified by its ``seq``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from bench.checkpoints import percentile


def replayed(
    inputs: Mapping[int, float],
    outputs: Mapping[int, float],
    kill: float,
    only: Callable[[int], bool] = lambda seq: True,
) -> int:
    """Records a killed hop must process again: readable in its input by ``kill``, but
    their result not yet committed (visible in its output) by then.

    ``inputs[seq]`` / ``outputs[seq]``: when ``seq`` became visible before / after the hop.
    ``only`` restricts the count to the records of the killed subtasks (a partition).
    """
    return sum(
        1
        for seq, t in inputs.items()
        if t <= kill and outputs.get(seq, kill + 1) > kill and only(seq)
    )


def window_quantiles(
    points: Sequence[tuple[float, float]], start: float, end: float, width: float, q: float = 0.5
) -> list[tuple[float, float]]:
    """``(window start, q-quantile of the values)`` of each ``width``-wide window of
    ``[start, end)`` that holds any point; ``points`` are ``(time, value)``."""
    if width <= 0:
        raise ValueError(f"window width must be positive, got {width!r}")
    buckets: dict[int, list[float]] = {}
    for t, v in points:
        if start <= t < end:
            buckets.setdefault(int((t - start) // width), []).append(v)
    return [(start + k * width, percentile(buckets[k], q)) for k in sorted(buckets)]


def back_within(
    points: Sequence[tuple[float, float]],
    kill: float,
    end: float,
    baseline: float,
    tolerance: float = 0.1,
    width: float = 2.0,
    q: float = 0.5,
) -> float | None:
    """Seconds from ``kill`` until the value is back within ``tolerance`` of ``baseline``
    for good: the end of the last window of ``[kill, end)`` whose ``q``-quantile is above
    ``(1 + tolerance) * baseline``. ``None`` if the last window is still above (not
    recovered within the measurement); 0.0 if none ever was.
    """
    limit = (1 + tolerance) * baseline
    windows = window_quantiles(points, kill, end, width, q)
    if windows and windows[-1][1] > limit:
        return None
    above = [t for t, value in windows if value > limit]
    return 0.0 if not above else above[-1] + width - kill


def dip(before: float, during: float) -> float:
    """Relative drop of a rate: 0.1 = 10 % lower during than before (negative: higher)."""
    if before <= 0:
        raise ValueError(f"the rate before must be positive, got {before!r}")
    return 1 - during / before


def count_between(
    times: Mapping[int, float], start: float, end: float, only: Callable[[int], bool]
) -> int:
    """How many of the selected records became visible in ``[start, end)``."""
    return sum(1 for seq, t in times.items() if start <= t < end and only(seq))
