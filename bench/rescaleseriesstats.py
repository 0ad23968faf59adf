"""The figures of :mod:`bench.rescaleseries`: per direction of the rescales, the median
and min–max of each phase, of the pause and of the dip. Pure: no I/O, no clock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from bench.stats import spread
from spillway.recovery.observe.rescalephases import RESCALE_PHASES


def direction(r: dict[str, Any]) -> str:
    """``"2→4"``: the widths of one rescale."""
    return f"{r['previous']}→{r['parallelism']}"


def summarise(rescales: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per direction (in the order first seen), then over all: the pause, the dip, each
    phase's time from the request and each phase's step (seconds since the phase before
    it), as median / low / high / runs."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rescales:
        groups.setdefault(direction(r), []).append(r)
    groups["all"] = list(rescales)
    out: dict[str, Any] = {}
    for name, rs in groups.items():
        out[name] = {
            "pause_s": asdict(spread([r["pause_s"] for r in rs])),
            "dip": asdict(spread([r["dip"]["dip"] for r in rs])),
            # Each phase's time from the request: comparable whatever order the phases
            # came in (the new subtasks may start before the handover).
            "since_request_s": {
                p: asdict(spread([r["since_request"][p] for r in rs]))
                for p in RESCALE_PHASES[1:]
                if all(p in r["since_request"] for r in rs)
            },
            # Each phase's time since the phase before it (time order).
            "phases_s": {
                p: asdict(spread([r["durations"][p] for r in rs]))
                for p in RESCALE_PHASES[1:]
                if all(p in r["durations"] for r in rs)
            },
        }
    return out


def render(summary: dict[str, Any]) -> list[str]:
    """Printable lines: per direction the pause, the dip and each phase (from the request,
    and from the phase before it), median (min–max)."""

    def fmt(s: dict[str, Any], scale: float = 1.0, unit: str = " s") -> str:
        return f"{s['median'] * scale:.2f}{unit} ({s['low'] * scale:.2f}–{s['high'] * scale:.2f})"

    lines = []
    for name, g in summary.items():
        runs = g["pause_s"]["runs"]
        lines.append(
            f"{name} ({runs} rescales): pause {fmt(g['pause_s'])}, dip of the operators "
            f"not rescaled {fmt(g['dip'], 100.0, ' %')}"
        )
        for p, s in g["since_request_s"].items():
            step = g["phases_s"].get(p)
            lines.append(
                f"  {p}: {fmt(s)} after the request"
                + (f", +{fmt(step)} after the phase before" if step else "")
            )
    return lines
