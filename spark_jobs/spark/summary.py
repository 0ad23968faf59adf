"""The human summary at the end of ``spillway run``: pure, from what the driver collected.

From the subtasks' final results (:class:`~spillway.recovery.runtime.runner.SubtaskResult`,
the last incarnation of each) and, when the run had a metrics feed (the progress line or
``--metrics-port``), its last snapshot, whose counts add up every incarnation's: duration,
records read by the sources, rows written per sink, restarts and what each re-processed,
and the records set aside: late ones counted and dropped, or, with ``--dead-letter``, the
dead letters the job committed per stage (bad input, failing operator calls, late records).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from spillway.recovery.observe.metrics import Snapshot
from spillway.recovery.runtime.runner import SubtaskResult

OK_STATUSES = frozenset({"finished", "skipped", "stopped", "fenced"})


@dataclass
class RunSummary:
    """What a finished run did. ``sources`` and ``sinks``: the operators that read and write
    outside (a source or sink, or a chain that starts or ends with one); ``snapshot``: the
    metrics feed's last one (None: no feed); ``dead_letters``: with ``dead_letter``, the
    committed dead letters per stage since the job began (None: not read)."""

    job: str
    duration_s: float
    results: list[SubtaskResult]
    sources: list[str]
    sinks: list[str]
    snapshot: Snapshot | None = None
    dead_letter: bool = False
    log_file: str | None = None
    dead_letters: Mapping[str, int] | None = None


def _name(r: SubtaskResult) -> str:
    return r.subtask.split("/", 1)[-1]


def _operator(r: SubtaskResult) -> str:
    return _name(r).split("[", 1)[0]


def render(s: RunSummary) -> str:
    """The summary, a few lines for people (no trailing newline).

    Counts from the snapshot include every incarnation (a replayed record counts again);
    without one, each subtask's last incarnation only, which the text then says.
    """
    failed = [r for r in s.results if r.status not in OK_STATUSES]
    verdict = "failed" if failed else "finished"
    lines = [f"{s.job} {verdict} in {_duration(s.duration_s)}"]
    snap = s.snapshot
    if snap is not None:
        n_in = sum(m.records_in for m in snap.subtasks if m.source)
        lines.append(f"  records in:   {n_in:,} read by the sources")
        per_sink = {
            op: sum(m.records_out for m in snap.subtasks if m.operator == op) for op in s.sinks
        }
        note = ""
    else:
        n_in = sum(r.records_in for r in s.results if _operator(r) in s.sources)
        lines.append(f"  records in:   {n_in:,} read by the sources (last attempts)")
        per_sink = {
            op: sum(r.records_out for r in s.results if _operator(r) == op) for op in s.sinks
        }
        note = " (last attempts)"
    if per_sink:
        written = ", ".join(f"{op} {n:,}" for op, n in per_sink.items())
        lines.append(f"  rows written: {written}{note}")
    lines.extend(_restarts(s))
    lines.extend(_set_aside(s))
    for r in failed:
        lines.append(f"  {_name(r)} {r.status}: {r.error or 'see the log'}")
    if s.log_file:
        lines.append(f"  log:          {s.log_file}")
    return "\n".join(lines)


def _restarts(s: RunSummary) -> list[str]:
    counts: dict[str, int] = {}
    if s.snapshot is not None:
        counts = {m.name: m.restarts for m in s.snapshot.subtasks if m.restarts}
    else:
        counts = {_name(r): r.attempt for r in s.results if r.attempt > 0}
    total = sum(counts.values())
    if not total:
        return ["  restarts:     none"]
    out = [f"  restarts:     {total}"]
    replays = {_name(r): r for r in s.results}
    for name, n in sorted(counts.items()):
        r = replays.get(name)
        figures = r.replay if r is not None else {}
        records = sum(int(v[2]) for v in figures.values() if len(v) == 3)
        what = (
            f"re-processed {records:,} records of {len(figures)} partition"
            f"{'' if len(figures) == 1 else 's'}"
            if figures
            else "re-processed nothing from its input channels"
        )
        out.append(f"    {name}: {n} restart{'' if n == 1 else 's'}, the last one {what}")
    return out


def _set_aside(s: RunSummary) -> list[str]:
    if s.dead_letter and s.dead_letters is not None:
        if not any(s.dead_letters.values()):
            return ["  dead letters: none"]
        listed = ", ".join(f"{n:,} {stage}" for stage, n in sorted(s.dead_letters.items()))
        return [f"  dead letters: {listed} (in spillway.{s.job}.dlq, since the job began)"]
    kinds: dict[str, int] = {}
    for r in s.results:  # totals since the job began, kept in checkpoints
        for kind, n in r.set_aside.items():
            kinds[kind] = kinds.get(kind, 0) + int(n)
    if not any(kinds.values()):
        return ["  set aside:    none (no late records)"]
    where = (
        f"dead-lettered to spillway.{s.job}.dlq"
        if s.dead_letter
        else "counted and dropped; --dead-letter keeps them"
    )
    listed = ", ".join(f"{n:,} {kind}" for kind, n in sorted(kinds.items()))
    return [f"  set aside:    {listed} ({where})"]


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, sec = divmod(round(seconds), 60)
    return f"{m}m{sec:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m{sec:02d}s"
