"""State-size sweep figures (``make bench-statesweep``). Pure: no I/O, no clock.

Readiness comes from heartbeats (:mod:`spillway.recovery.runtime.livestats`: ``state_keys``,
``checkpoint``); one kill gives one restart record (:func:`bench.restartstats.restart_of`
plus the restore figures the sweep adds); :func:`summarise` turns the kills of each
state size into medians with min–max, and :func:`render` into a table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from bench.stats import spread

# Figures summarised per size: (record field, column title, unit, format).
FIGURES = (
    ("kill_to_processing_s", "kill→processing", "s", "{:.2f}"),
    ("kill_to_caught_up_s", "kill→caught up", "s", "{:.2f}"),
    ("restore_s", "restore", "s", "{:.2f}"),
    ("state_step_s", "state step", "s", "{:.2f}"),
    ("restored_records", "records restored", "", "{:.0f}"),
    ("changelog_records", "changelog records", "", "{:.0f}"),
    ("changelog_bytes", "changelog", "MB", "{:.2f}"),
)


def newest_beat(
    beats: Iterable[Mapping[str, Any]], operator: str, index: int
) -> Mapping[str, Any] | None:
    """The newest heartbeat of ``operator[index]`` (highest attempt, then latest time)."""
    mine = [b for b in beats if b.get("operator") == operator and b.get("index") == index]
    if not mine:
        return None
    return max(mine, key=lambda b: (int(b.get("attempt", 0)), float(b.get("time", 0.0))))


def state_keys(
    beats: Iterable[Mapping[str, Any]], operator: str, parallelism: int
) -> list[int | None]:
    """``state_keys`` of each subtask of ``operator`` in its newest heartbeat (None: no figure)."""
    bs = list(beats)
    out: list[int | None] = []
    for i in range(parallelism):
        b = newest_beat(bs, operator, i)
        v = b.get("state_keys") if b is not None else None
        out.append(int(v) if v is not None else None)
    return out


def filled(beats: Iterable[Mapping[str, Any]], operator: str, parallelism: int, keys: int) -> bool:
    """True once the subtasks of ``operator`` hold ``keys`` keys in total (every one reported)."""
    held = state_keys(beats, operator, parallelism)
    return all(v is not None for v in held) and sum(v or 0 for v in held) == keys


def checkpoint_of(
    beats: Iterable[Mapping[str, Any]], operator: str, index: int, attempt: int
) -> int | None:
    """The last checkpoint id ``operator[index]``'s ``attempt`` reported (None: none yet)."""
    mine = [
        b
        for b in beats
        if b.get("operator") == operator
        and b.get("index") == index
        and b.get("attempt") == attempt
        and b.get("checkpoint") is not None
    ]
    return max(int(b["checkpoint"]) for b in mine) if mine else None


def fill_finished(events: Iterable[Mapping[str, Any]], operator: str = "fill", n: int = 2) -> bool:
    """True once ``n`` subtasks of ``operator`` have a ``finished`` event."""
    done = {
        e.get("index")
        for e in events
        if e.get("event") == "finished" and e.get("operator") == operator
    }
    return len(done) >= n


def fill_times(
    events: Iterable[Mapping[str, Any]], full_at: float, operator: str = "fill"
) -> dict[str, float]:
    """``sources_s``: the first ``operator`` subtask's ``started`` → the last one's
    ``finished``; ``fill_s``: that first ``started`` → ``full_at`` (the count seen holding
    every key). ValueError if ``events`` lack either."""
    evs = list(events)
    started = [float(e["time"]) for e in evs if _is(e, "started", operator)]
    done = [float(e["time"]) for e in evs if _is(e, "finished", operator)]
    if not started or not done:
        raise ValueError(f"no started and finished events of {operator!r} to time the fill")
    return {"sources_s": max(done) - min(started), "fill_s": full_at - min(started)}


def _is(e: Mapping[str, Any], kind: str, operator: str) -> bool:
    return e.get("event") == kind and e.get("operator") == operator


def restored_records(log_lines: Iterable[str], subtask: str) -> list[tuple[int, int]]:
    """``(keys, changelog records)`` of each restore ``subtask`` (e.g. ``count[0]``) logged,
    in log order: the lines ``<subtask> restored K keys from N changelog records``."""
    out: list[tuple[int, int]] = []
    marker = f"{subtask} restored "
    for line in log_lines:
        at = line.find(marker)
        if at < 0:
            continue
        words = line[at + len(marker) :].split()
        # "K keys from N changelog records"
        if len(words) >= 6 and words[1] == "keys" and words[4] == "changelog":
            try:
                out.append((int(words[0]), int(words[3])))
            except ValueError:
                continue
    return out


def summarise(sizes: Mapping[int, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """Per state size (keys → its kill records): the number of kills, and the median
    (min–max) of every figure in :data:`FIGURES` over the kills that have it."""
    out: dict[str, Any] = {}
    for keys in sorted(sizes):
        kills = sizes[keys]
        row: dict[str, Any] = {"kills": len(kills)}
        for field, *_ in FIGURES:
            values = [float(k[field]) for k in kills if k.get(field) is not None]
            row[field] = asdict(spread(values)) if values else None
        out[str(keys)] = row
    return out


def render(summary: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A table for people: one row per state size, median (min–max) per figure."""

    def cell(s: Mapping[str, Any] | None, fmt: str, scale: float) -> str:
        if not s:
            return "n/a"
        m, lo, hi = (fmt.format(s[k] / scale) for k in ("median", "low", "high"))
        return f"{m} ({lo}–{hi})"

    heads = ["keys", "kills"] + [
        f"{title} ({unit})" if unit else title for _, title, unit, _ in FIGURES
    ]
    rows = []
    for keys, row in summary.items():
        cells = [f"{int(keys):,}", str(row["kills"])]
        for field, _, unit, fmt in FIGURES:
            cells.append(cell(row.get(field), fmt, 1e6 if unit == "MB" else 1.0))
        rows.append(cells)
    widths = [max(len(r[i]) for r in [heads, *rows]) for i in range(len(heads))]
    return [" | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [heads, *rows]]


def load_line(result: Mapping[str, Any]) -> str:
    """The load averages of a sweep: before, after and (1-min) at its kills."""
    lb, la = result["load_before"], result["load_after"]
    at = [float(r["load_at_kill"]) for s in result["sizes"] for r in s["restarts"]]
    kills = f"{min(at):.2f}–{max(at):.2f}" if at else "n/a"
    return (
        f"load average (1/5/15 min) before {'/'.join(f'{v:.2f}' for v in lb)}, "
        f"after {'/'.join(f'{v:.2f}' for v in la)}; 1-min at the kills {kills}"
    )
