"""B3 figures of one kill of the phase sweep, and their summary. Pure: no I/O, no clock.

A kill is judged three ways, each against what the benchmark saw or what Spillway wrote:

* **where it landed** in the killed subtask's checkpoint cycle: seconds since its last
  checkpoint became visible, over the spacing of its last two (0 = just after one,
  1 = about to take the next);
* **what was done twice**: the records the new attempt re-processed, from Spillway's own
  recovery record (the ``replay`` of its ``caught-up`` event: per input partition
  ``[from, to, records re-processed]``), cross-checked against the observers' upper
  bound (records readable in the subtask's input by the kill whose result was not yet
  visible downstream) and held against one checkpoint interval of its input (the
  records that became readable in its input during the spacing of its last two
  checkpoints, up to the kill);
* **what the others felt**: the p99 end-to-end latency of the records that do not pass
  through the killed subtask, over the ``span`` seconds after the kill vs the ``span``
  seconds before, and the highest p99 of a 100 ms window on either side.

Times are wall-clock seconds; a record is its ``seq``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from bench.checkpoints import percentile
from bench.recoverystats import replayed, window_quantiles
from bench.stats import spread

P99 = 0.99
WINDOW_S = 0.1


def phase_of(checkpoints: Sequence[float], kill: float) -> float | None:
    """Where ``kill`` fell in the cycle of the checkpoints visible at the (sorted) times
    ``checkpoints``: (kill − last before it) / (last − the one before). ``None`` without
    two checkpoints before the kill."""
    i = bisect.bisect_right(checkpoints, kill)
    if i < 2:
        return None
    last, previous = checkpoints[i - 1], checkpoints[i - 2]
    return (kill - last) / (last - previous) if last > previous else None


def interval_input(
    checkpoints: Sequence[float],
    kill: float,
    inputs: Mapping[int, float],
    mine: Callable[[int], bool],
) -> int | None:
    """One checkpoint interval of the killed subtask's input: its records that became
    readable in the last spacing of two checkpoints before ``kill``, measured back from the
    kill (``[kill − spacing, kill)``). ``None`` without two checkpoints before the kill."""
    i = bisect.bisect_right(checkpoints, kill)
    if i < 2:
        return None
    spacing = checkpoints[i - 1] - checkpoints[i - 2]
    return sum(1 for seq, t in inputs.items() if kill - spacing <= t < kill and mine(seq))


def runner_replayed(replay: Mapping[str, Sequence[int]] | None) -> int | None:
    """Records re-processed, summed over the partitions of a recovery record's ``replay``
    (``None`` if the attempt recorded none)."""
    if replay is None:
        return None
    return sum(int(v[2]) for v in replay.values())


def _p99(points: Sequence[tuple[float, float]], start: float, end: float) -> float | None:
    values = [v for t, v in points if start <= t < end]
    return percentile(values, P99) if values else None


def _rise(before: float | None, after: float | None) -> float | None:
    return after / before - 1 if before and after is not None else None


def p99_around(
    points: Sequence[tuple[float, float]], kill: float, span: float
) -> dict[str, float | None]:
    """p99 of the latencies ``(arrival, latency)`` arriving ``span`` seconds before and
    after ``kill``; its rise (after / before − 1); the highest p99 of a 100 ms window on
    each side; and the control: the rise from the ``span`` seconds before those to the
    ``span`` before the kill, with no kill between (what the windows move by themselves)."""
    p_control = _p99(points, kill - 2 * span, kill - span)
    p_before = _p99(points, kill - span, kill)
    p_after = _p99(points, kill, kill + span)
    w_before = window_quantiles(points, kill - span, kill, WINDOW_S, P99)
    w_after = window_quantiles(points, kill, kill + span, WINDOW_S, P99)
    return {
        "p99_before_s": p_before,
        "p99_after_s": p_after,
        "p99_rise": _rise(p_before, p_after),
        "p99_control_rise": _rise(p_control, p_before),
        "window_p99_max_before_s": max((v for _, v in w_before), default=None),
        "window_p99_max_after_s": max((v for _, v in w_after), default=None),
    }


def kill_figures(
    kill: float,
    phase_target: float,
    checkpoints: Sequence[float],
    seen: Sequence[Mapping[int, float]],
    sent: Mapping[int, float],
    mine: Callable[[int], bool],
    restart: Mapping[str, Any],
    caught_up_replay: Mapping[str, Sequence[int]] | None,
    span: float,
) -> dict[str, Any]:
    """Every figure of one kill of the count subtask. ``seen`` are the observers' first
    sightings per hop (source→parse, parse→count, count→sink channels, output); ``mine``
    selects the records through the killed subtask; ``restart`` is
    :func:`bench.restartstats.restart_of` of its new attempt."""
    arrived = seen[-1]
    unaffected = [
        (arrived[s], arrived[s] - t) for s, t in sent.items() if s in arrived and not mine(s)
    ]
    runner = runner_replayed(
        caught_up_replay if caught_up_replay is not None else restart.get("replay")
    )
    budget = interval_input(checkpoints, kill, seen[1], mine)
    return {
        "kill": kill,
        "phase_target": phase_target,
        "phase": phase_of(checkpoints, kill),
        "attempt": restart.get("attempt"),
        "kill_to_processing_s": restart.get("kill_to_processing_s"),
        "kill_to_caught_up_s": restart.get("kill_to_caught_up_s"),
        "replayed": runner,
        "replay_basis": restart.get("replay_basis"),
        "replayed_observer_bound": replayed(seen[1], seen[2], kill, mine),
        "interval_input": budget,
        "within_interval": runner is not None and budget is not None and runner <= budget,
        **p99_around(unaffected, kill, span),
    }


def _sp(values: Sequence[float | None]) -> dict[str, Any] | None:
    xs = [float(v) for v in values if v is not None]
    return asdict(spread(xs)) if xs else None


def summarise(kills: Sequence[Mapping[str, Any]], bins: int = 10) -> dict[str, Any]:
    """Medians (min–max) over the kills, how many kept within one interval of input, how
    many re-processed more than the observers' bound allows, and which tenths of the
    checkpoint cycle the kills covered."""
    covered = sorted(
        {min(bins - 1, int(k["phase"] * bins)) for k in kills if k["phase"] is not None}
    )
    keys = (
        "phase",
        "kill_to_processing_s",
        "kill_to_caught_up_s",
        "replayed",
        "replayed_observer_bound",
        "interval_input",
        "p99_before_s",
        "p99_after_s",
        "p99_rise",
        "p99_control_rise",
        "window_p99_max_before_s",
        "window_p99_max_after_s",
    )
    out: dict[str, Any] = {"kills": len(kills)}
    out.update({key: _sp([k.get(key) for k in kills]) for key in keys})
    out["within_interval"] = sum(bool(k["within_interval"]) for k in kills)
    # How many kills (and kill-free controls) moved the unaffected p99 by more than 10 %.
    out["p99_rise_above_10pct"] = sum((k["p99_rise"] or 0) > 0.1 for k in kills)
    controls = [k["p99_control_rise"] for k in kills if k.get("p99_control_rise") is not None]
    out["p99_control_above_10pct"] = sum(c > 0.1 for c in controls) if controls else None
    out["above_observer_bound"] = sum(
        k["replayed"] is not None and k["replayed"] > k["replayed_observer_bound"] for k in kills
    )
    out["phase_tenths_covered"] = covered
    out["replay_basis"] = sorted({str(k["replay_basis"]) for k in kills})
    return out
