"""The figures of :mod:`bench.rescale`, from the job's events and sampled output counts.

Pure: no I/O, no clock. Times are Unix seconds as the job's events carry them.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from bench.stats import spread

# A window shorter than this would measure the sink's checkpoint steps (1 s apart), not
# its rate: the "during" window of a rescale is stretched to it.
MIN_WINDOW_S = 5.0


def first_starts(
    events: Sequence[dict[str, Any]], op: str, width: int, after: float
) -> dict[int, float]:
    """Per index ``< width`` of ``op``, the time of its first ``started`` event after ``after``."""
    firsts: dict[int, float] = {}
    for e in events:
        if (
            e.get("event") == "started"
            and e.get("operator") == op
            and float(e["time"]) > after
            and int(e["index"]) < width
        ):
            firsts.setdefault(int(e["index"]), float(e["time"]))
    return firsts


def all_started(events: Sequence[dict[str, Any]], op: str, width: int, after: float) -> bool:
    """True once each of ``op``'s ``width`` subtasks has started after ``after``."""
    return len(first_starts(events, op, width, after)) == width


def live_pause(events: Sequence[dict[str, Any]], op: str) -> dict[str, float]:
    """The first live rescale of ``op``: request → handed over (``rescaled``) and request →
    every new subtask processing (its first ``started`` after the handover). KeyError if
    the rescale is not complete in ``events``."""
    req = next(e for e in events if e.get("event") == "rescale-requested")
    done = next(
        e for e in events if e.get("event") == "rescaled" and e.get("request") == req["request"]
    )
    firsts = first_starts(events, op, int(done["parallelism"]), float(done["time"]))
    if len(firsts) < int(done["parallelism"]):
        raise KeyError(f"not every new {op} subtask has started yet")
    t0 = float(req["time"])
    return {
        "requested": t0,
        "handed_over_s": float(done["time"]) - t0,
        "pause_s": max(firsts.values()) - t0,
    }


def count_at(samples: Sequence[tuple[float, int]], t: float) -> float:
    """Records counted at time ``t``, interpolated linearly between the samples around it
    (``samples``: (time, count), time ascending). ValueError outside the samples."""
    times = [s[0] for s in samples]
    if not samples or t < times[0] or t > times[-1]:
        raise ValueError(f"no sample around t={t:.2f}")
    i = bisect.bisect_left(times, t)
    if times[i] == t:
        return float(samples[i][1])
    (t0, n0), (t1, n1) = samples[i - 1], samples[i]
    return n0 + (n1 - n0) * (t - t0) / (t1 - t0)


def dip(
    samples: Sequence[tuple[float, int]], start: float, end: float, before_s: float
) -> dict[str, float]:
    """Throughput in [start - before_s, start] vs in [start, max(end, start + MIN_WINDOW_S)],
    and the dip ``1 - during / before`` (negative: faster during)."""
    end = max(end, start + MIN_WINDOW_S)
    before = (count_at(samples, start) - count_at(samples, start - before_s)) / before_s
    during = (count_at(samples, end) - count_at(samples, start)) / (end - start)
    return {
        "before_per_s": before,
        "during_per_s": during,
        "window_s": end - start,
        "dip": 1.0 - during / before,
    }


def summarise(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median and min–max of each figure over the rounds, and the pause / whole-job ratio
    round by round."""
    pause = [r["live"]["pause_s"] for r in rounds]
    whole = [r["whole_job"]["pause_s"] for r in rounds]
    return {
        "live_pause_s": asdict(spread(pause)),
        "live_handed_over_s": asdict(spread([r["live"]["handed_over_s"] for r in rounds])),
        "dip": asdict(spread([r["dip"]["dip"] for r in rounds])),
        "whole_job_pause_s": asdict(spread(whole)),
        "whole_job_stop_s": asdict(spread([r["whole_job"]["stopped_s"] for r in rounds])),
        "pause_over_whole_job": asdict(spread([p / w for p, w in zip(pause, whole, strict=True)])),
    }


def render(summary: dict[str, Any]) -> list[str]:
    """Printable lines, one per figure: median (min–max)."""

    def fmt(key: str, unit: str, scale: float = 1.0) -> str:
        s = summary[key]
        return (
            f"{s['median'] * scale:.2f}{unit} ({s['low'] * scale:.2f}–{s['high'] * scale:.2f}, "
            f"{s['runs']} rounds)"
        )

    return [
        "live rescale pause (requested → every new subtask processing): "
        + fmt("live_pause_s", " s"),
        f"  of which requested → handed over: {fmt('live_handed_over_s', ' s')}",
        f"throughput dip of the unaffected operators: {fmt('dip', ' %', 100.0)}",
        f"whole job (stop → rescaled operator processing): {fmt('whole_job_pause_s', ' s')}",
        f"  of which stop requested → driver exited: {fmt('whole_job_stop_s', ' s')}",
        f"live pause / whole-job path: {fmt('pause_over_whole_job', '')}",
    ]
