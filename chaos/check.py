"""The chaos checker: what a run committed against what it must have, exactly.

Pure functions over records and events (reading them from Kafka is ``chaos.observe``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spillway.recovery.control.liverescale import ANSWERS

Row = tuple[str, int, int, int]  # (key, seq, n, total)


@dataclass
class OutputReport:
    """How the committed output differs from the batch reference."""

    expected: int = 0
    committed: int = 0
    lost: int = 0  # reference records missing from the output
    missing_seqs: int = 0  # (key, seq) of the reference with no output record at all
    duplicated: int = 0  # extra copies of reference records
    unexpected: int = 0  # records the reference does not have at all
    seq_gaps: int = 0  # per key, a seq more than one past the previous one
    seq_repeats: int = 0  # per key, a seq not past the previous one
    examples: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """Output equal to the reference, every key's seq dense and in order."""
        return not (
            self.lost
            or self.missing_seqs
            or self.duplicated
            or self.unexpected
            or self.seq_gaps
            or self.seq_repeats
        )


def check_output(committed: Iterable[Row], reference: Iterable[Row]) -> OutputReport:
    """Compare ``committed`` (per key in the order read) with ``reference`` exactly."""
    rep = OutputReport()
    want = Counter(reference)
    rep.expected = sum(want.values())
    got: Counter[Row] = Counter()
    last: dict[str, int] = {}
    seen: set[tuple[str, int]] = set()
    for row in committed:
        rep.committed += 1
        got[row] += 1
        seen.add((row[0], row[1]))
        key, seq = row[0], row[1]
        prev = last.get(key, -1)
        if seq <= prev:
            rep.seq_repeats += 1
            _example(rep, f"{key}: seq {seq} after {prev}")
        elif seq > prev + 1:
            rep.seq_gaps += 1
            _example(rep, f"{key}: seq {seq} after {prev} (gap)")
        last[key] = max(prev, seq)
    for row, n in got.items():
        w = want.get(row, 0)
        if w == 0:
            rep.unexpected += n
            _example(rep, f"unexpected {row}")
        elif n > w:
            rep.duplicated += n - w
            _example(rep, f"{row} {n} times")
    for row, w in want.items():
        n = got.get(row, 0)
        if n < w:
            rep.lost += w - n
            _example(rep, f"lost {row}")
        if (row[0], row[1]) not in seen:
            rep.missing_seqs += 1
    return rep


def _example(rep: OutputReport, what: str) -> None:
    if len(rep.examples) < 10:
        rep.examples.append(what)


def subtask_of(event: Mapping[str, Any]) -> str:
    """``op[i]`` of a subtask event."""
    return f"{event['operator']}[{event['index']}]"


def attempts_by_subtask(
    events: Iterable[Mapping[str, Any]], run: str, kind: str | None = None
) -> dict[str, set[int]]:
    """Per subtask, the attempts of run ``run`` that emitted an event (of ``kind``, if given)."""
    out: dict[str, set[int]] = {}
    for e in events:
        if e.get("run") == run and "operator" in e and kind in (None, e.get("event")):
            out.setdefault(subtask_of(e), set()).add(int(e["attempt"]))
    return out


def kill_mismatches(
    events: Iterable[Mapping[str, Any]],
    run: str,
    planned: Mapping[str, int],
    silent: Mapping[str, set[int]],
    subtasks: Iterable[str],
) -> list[str]:
    """Where the attempts of run ``run`` differ from the schedule (empty: every planned
    kill happened, and no other).

    A subtask with ``k`` planned kills must show attempts ``0..k`` (each announces itself
    with ``fencing`` first) and ``started`` events from all of them except those planned
    to die during restore (``silent``).
    """
    evs = list(events)
    seen = attempts_by_subtask(evs, run)
    started = attempts_by_subtask(evs, run, "started")
    problems = []
    for s in subtasks:
        want = set(range(planned.get(s, 0) + 1))
        if seen.get(s, set()) != want:
            problems.append(
                f"{s}: attempts {sorted(seen.get(s, set()))} seen, {sorted(want)} planned"
            )
        want_started = want - silent.get(s, set())
        if seen.get(s, set()) == want and started.get(s, set()) != want_started:
            problems.append(
                f"{s}: attempts {sorted(started.get(s, set()))} started, "
                f"{sorted(want_started)} expected (the others die while restoring)"
            )
    return problems


def replay_outside(
    events: Iterable[Mapping[str, Any]], inputs: Mapping[str, set[str]]
) -> list[str]:
    """Replays of partitions that are not the restarted subtask's own inputs (should be none).

    ``inputs`` maps ``op[i]`` to its input partitions as ``topic[partition]``.
    """
    bad = []
    for e in events:
        if e.get("event") != "started":
            continue
        s = subtask_of(e)
        for tp in e.get("replay") or {}:
            if tp not in inputs.get(s, set()):
                bad.append(f"{s} attempt {e['attempt']} replayed {tp}")
    return bad


def change_mismatches(
    events: Iterable[Mapping[str, Any]],
    run: str,
    request: str,
    operator: str,
    width: int,
    planned: Mapping[str, int],
    silent: Mapping[str, set[int]],
) -> list[str]:
    """Where the restarts around one live change differ from what it asked (empty: as
    asked). ``request``: the id of a rescale or upgrade of ``operator``, which has
    ``width`` subtasks after it.

    From the request to the driver's answer no subtask of run ``run`` starts (the
    operator's subtasks only stop). After the answer each of the operator's ``width``
    subtasks starts attempts ``0..k`` (``k``: its ``planned`` kills), announced as
    :func:`kill_mismatches` says, none reports a previous owner without the handed-over
    mark, and no subtask of another operator starts.
    """
    evs = list(events)
    asked = _index(evs, request, ("rescale-requested", "upgrade-requested"))
    answered = _index(evs, request, ANSWERS)
    if asked is None or answered is None:
        what = "no answer yet" if asked is not None else "not in the event log"
        return [f"request {request} ({operator}): {what}"]
    answer = evs[answered]
    if str(answer["event"]).endswith("-failed"):
        return [f"{answer['event']} ({operator}): {answer.get('error')}"]

    def starts(span: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        # A subtask attempt announces itself with "fencing"; a driver's own fencing of
        # old subtasks (spillway.recovery.control.rewind.fence_subtasks) carries no run.
        return [e for e in span if e.get("event") == "fencing" and e.get("run") == run]

    problems = [
        f"{subtask_of(e)} attempt {e['attempt']} started while {operator} was stopping"
        for e in starts(evs[asked:answered])
    ]
    after = evs[answered:]
    others = sorted({subtask_of(e) for e in starts(after) if e["operator"] != operator})
    problems += [f"{s} restarted during the {answer['event']} of {operator}" for s in others]
    own = [e for e in after if e.get("operator") == operator]
    subtasks = [f"{operator}[{i}]" for i in range(width)]
    problems += kill_mismatches(own, run, planned, silent, subtasks)
    beyond = sorted(set(attempts_by_subtask(own, run)) - set(subtasks))
    problems += [f"{s} started, but {operator} has {width} subtasks now" for s in beyond]
    # every old subtask stopped with its checkpoint marked (spillway.recovery.restore.handover)
    problems += [
        f"{subtask_of(e)} found no handed-over mark: {e['handover_unmarked']}"
        for e in own
        if e.get("event") == "started" and e.get("handover_unmarked")
    ]
    return problems


def _index(events: list[Mapping[str, Any]], request: str, kinds: Iterable[str]) -> int | None:
    kinds = tuple(kinds)
    found = (k for k, e in enumerate(events) if e.get("request") == request)
    return next((k for k in found if events[k].get("event") in kinds), None)
