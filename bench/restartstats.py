"""Restart-latency figures from a job's events and the kill times. Pure: no I/O, no clock.

One kill gives one restart: the phases of :mod:`spillway.recovery.observe.phases`, joined from the
killer
(``killed``), Spark's driver (the ``task-retried`` event) and the new attempt (its
``started`` and ``caught-up`` events). The headline figure is kill → ``restored``: the new
attempt starts processing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from bench.stats import spread
from spillway.recovery.observe.phases import PHASES, merge, out_of_order, steps


def restart_of(
    events: Sequence[Mapping[str, Any]], operator: str, index: int, attempt: int, killed: float
) -> dict[str, Any]:
    """The record of the restart that made ``attempt`` of ``operator[index]`` after a kill
    at wall time ``killed``: its phases (merged), their steps and the restore steps."""

    def mine(kind: str) -> Mapping[str, Any] | None:
        found = [
            e
            for e in events
            if e.get("event") == kind
            and e.get("operator") == operator
            and e.get("index") == index
            and e.get("attempt") == attempt
        ]
        return found[-1] if found else None

    started, caught = mine("started"), mine("caught-up")
    key = {"operator": operator, "index": index, "attempt": attempt}
    retried = next((e for e in events if e.get("retried") == key), None)
    spark = (
        {k: retried[k] for k in ("spark_noticed", "scheduled") if retried.get(k) is not None}
        if retried
        else None
    )
    times = merge(
        {"killed": killed},
        spark,
        (started or {}).get("phases"),
        (caught or {}).get("phases"),
    )
    return {
        "attempt": attempt,
        "killed": killed,
        "phases": times,
        "steps": dict(steps(times)),
        "attempt_steps": dict((started or {}).get("steps") or {}),
        "kill_to_processing_s": times["restored"] - killed if "restored" in times else None,
        "kill_to_caught_up_s": times["caught_up"] - killed if "caught_up" in times else None,
        "out_of_order": out_of_order(times),
        # Spark's phases already in the started event (else they came with a later one).
        "spark_in_started": "spark_noticed" in ((started or {}).get("phases") or {}),
        "replay": (started or {}).get("replay"),
        "replay_basis": (started or {}).get("replay_basis"),
    }


def summarise(restarts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Median (min–max) of kill → processing, kill → caught up, every phase step and
    every step of the new attempt, over the restarts that have them; and the dominant phase."""
    rs = list(restarts)

    def sp(values: list[float]) -> dict[str, Any] | None:
        return asdict(spread(values)) if values else None

    out: dict[str, Any] = {"restarts": len(rs)}
    for key in ("kill_to_processing_s", "kill_to_caught_up_s"):
        out[key] = sp([float(r[key]) for r in rs if r.get(key) is not None])
    out["steps"] = {
        p: s
        for p in PHASES
        if (s := sp([float(r["steps"][p]) for r in rs if p in r.get("steps", {})])) is not None
    }
    names: list[str] = []
    for r in rs:
        names += [n for n in r.get("attempt_steps", {}) if n not in names]
    out["attempt_steps"] = {
        n: sp([float(r["attempt_steps"][n]) for r in rs if n in r["attempt_steps"]]) for n in names
    }
    # The dominant phase: the largest median step up to processing (caught_up depends on
    # how much there was to re-read, not on restart latency).
    up_to = {p: s for p, s in out["steps"].items() if p != "caught_up"}
    out["dominant"] = max(up_to, key=lambda p: up_to[p]["median"]) if up_to else None
    out["out_of_order"] = sum(bool(r.get("out_of_order")) for r in rs)
    out["spark_in_started"] = sum(bool(r.get("spark_in_started")) for r in rs)
    return out


def render(summary: Mapping[str, Any]) -> list[str]:
    """Lines for people: medians with min–max, seconds."""

    def cell(s: Mapping[str, Any] | None) -> str:
        if not s:
            return "n/a"
        return f"{s['median']:.3f} s ({s['low']:.3f}–{s['high']:.3f}, n={s['runs']})"

    lines = [
        f"restarts measured: {summary['restarts']}",
        f"kill → new attempt processing: {cell(summary['kill_to_processing_s'])}",
        f"kill → caught up:              {cell(summary['kill_to_caught_up_s'])}",
        "phase steps (each from the previous phase), median (min–max):",
    ]
    lines += [f"  {p:15} {cell(s)}" for p, s in summary["steps"].items()]
    lines.append(
        "steps of the new attempt (spillway.recovery.observe.phases.STEPS), median (min–max):"
    )
    lines += [f"  {n:15} {cell(s)}" for n, s in summary["attempt_steps"].items()]
    lines.append(f"dominant phase: {summary['dominant']}")
    lines.append(
        f"Spark's phases already in the started event: {summary.get('spark_in_started', 0)} of "
        f"{summary['restarts']} (the others: in the caught-up event)"
    )
    if summary["out_of_order"]:
        lines.append(f"WARNING: {summary['out_of_order']} restarts had phases out of order")
    return lines
