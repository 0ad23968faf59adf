"""What the fault run must show, computed from the job's event log and output (pure).

The event log (:mod:`spillway.recovery.observe.events`) has one ``started`` event per attempt of
every
subtask, with the host it ran on (the container's host name), and a ``finished`` event
with what the last attempt replayed: ``{"<topic>[<partition>]": [from, to, records]}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spillway.recovery.job.plandoc import PlanDoc

# The example job (spillway/examples/clicks.py): operator -> its upstream operator.
CLICKS_UPSTREAM: dict[str, str | None] = {
    "clicks": None,
    "enrich": "clicks",
    "count": "enrich",
    "out": "count",
}

Event = Mapping[str, Any]


def subtasks(parallelism: int) -> list[str]:
    """``op[i]`` for every subtask of the example job."""
    return [f"{op}[{i}]" for op in CLICKS_UPSTREAM for i in range(parallelism)]


def name(event: Event) -> str:
    """``op[i]`` of a subtask event."""
    return f"{event['operator']}[{event['index']}]"


def own_partitions(plan: PlanDoc, subtask: str) -> set[str]:
    """The channel partitions ``subtask`` owns (``topic[p]``), by the recorded plan: with
    key groups, a keyed channel's subtask owns a range of partitions, not partition i."""
    op, _, rest = subtask.partition("[")
    doc = next((o for o in plan.operators if o.name == op), None)
    if doc is None:
        return set()
    return {str(tp) for tp in doc.owned_inputs(int(rest.rstrip("]")))}


def recorded_plan(events: Iterable[Event], job: str) -> PlanDoc | None:
    """The plan of the newest ``submitted`` event that records one (None: none does)."""
    plans = [e["plan"] for e in events if e.get("event") == "submitted" and "plan" in e]
    return PlanDoc.from_json(plans[-1], f"the submitted event of job {job}") if plans else None


def of_kind(events: Iterable[Event], kind: str) -> list[Event]:
    """Subtask events of one kind (job-level events have no operator)."""
    return [e for e in events if e.get("event") == kind and "operator" in e]


@dataclass(frozen=True)
class Recovery:
    """One restarted subtask: when it came back and what it replayed."""

    subtask: str
    attempt: int
    host: str
    started_after_s: float
    restored_from: int | None
    restore_s: float
    replay: dict[str, tuple[int, int, int]]
    caught_up_s: float | None
    finished: bool = True  # False: restarted again before it finished

    def describe(self) -> str:
        """One line for the report."""
        replay = ", ".join(
            f"{tp} offsets [{a}, {b}) = {n:,} records"
            if self.finished
            else f"{tp} from offset {a} (restarted again before it finished)"
            for tp, (a, b, n) in sorted(self.replay.items())
        )
        if not replay:
            replay = "nothing (a source)" if self.subtask.startswith("clicks") else "nothing"
        caught = "" if self.caught_up_s is None else f", caught up {self.caught_up_s:.2f} s later"
        return (
            f"{self.subtask}: attempt {self.attempt} on {self.host} started "
            f"{self.started_after_s:.2f} s after the kill (restored checkpoint "
            f"{self.restored_from} in {self.restore_s:.2f} s); replayed {replay}{caught}"
        )


def recoveries(
    events: Iterable[Event], killed_at: float, until: float = float("inf")
) -> list[Recovery]:
    """Restarted attempts that started in ``[killed_at, until)``, with what they replayed.

    The replay is the one the attempt's ``finished`` event reports (it had finished), else
    the one its ``started`` event announced.
    """
    listed = list(events)
    finals = {name(e): e for e in of_kind(listed, "finished")}
    found = []
    for e in attempt_starts(listed):
        if e["attempt"] == 0 or not killed_at <= float(e["time"]) < until:
            continue
        final = finals.get(name(e))
        same = final is not None and final["attempt"] == e["attempt"]
        replay = (final or {}).get("replay", {}) if same else e.get("replay", {})
        found.append(
            Recovery(
                subtask=name(e),
                attempt=int(e["attempt"]),
                host=str(e["host"]),
                started_after_s=float(e["time"]) - killed_at,
                restored_from=e.get("restored_from"),
                restore_s=float(e.get("restore_s") or 0.0),
                replay={tp: (int(a), int(b), int(n)) for tp, (a, b, n) in replay.items()},
                caught_up_s=(final or {}).get("catchup_s") if same else None,
                finished=same,
            )
        )
    return sorted(found, key=lambda r: (r.subtask, r.attempt))


def attempt_starts(events: Iterable[Event]) -> list[Event]:
    """The first ``started`` event of each attempt of each subtask, in log order.

    A subtask redone within its attempt (a broker died under its transaction:
    ``spillway.recovery.runtime.redo``) starts again with the same attempt number; that
    later ``started`` event is a redo, not a restart, and is left out.
    """
    seen: set[tuple[str, int]] = set()
    first = []
    for e in of_kind(events, "started"):
        attempt = (name(e), int(e["attempt"]))
        if attempt not in seen:
            seen.add(attempt)
            first.append(e)
    return first


def restarted_between(events: Iterable[Event], start: float, end: float) -> set[str]:
    """Subtasks with an attempt > 0 that started in ``[start, end)`` (wall times)."""
    return {
        name(e)
        for e in attempt_starts(events)
        if e["attempt"] > 0 and start <= float(e["time"]) < end
    }


def redone_between(events: Iterable[Event], start: float, end: float = float("inf")) -> list[str]:
    """One ``op[i] (attempt a)`` per ``redo`` event in ``[start, end)``, in log order:
    subtasks redone within their attempt, which are no restart."""
    return [
        f"{name(e)} (attempt {e['attempt']})"
        for e in of_kind(events, "redo")
        if start <= float(e["time"]) < end
    ]


def latest_hosts(events: Iterable[Event]) -> dict[str, str]:
    """Where each subtask's latest attempt runs: ``op[i]`` -> host name."""
    return {name(e): str(e["host"]) for e in of_kind(events, "started")}


@dataclass(frozen=True)
class Faults:
    """When the worker and then the broker were killed (wall times), and who was lost."""

    worker: str
    worker_killed_at: float
    lost: frozenset[str]
    broker_killed_at: float


def localized_problems(
    events: Iterable[Event], job: str, parallelism: int, faults: Faults
) -> list[str]:
    """What contradicts localized recovery; [] when it held.

    Nothing restarts before the worker kill. Between the worker kill and the broker kill,
    exactly the ``lost`` subtasks (the killed worker's unfinished ones) restart, on
    another host. Every restarted attempt, the broker loss's included, replays only its
    own partitions, and every subtask finishes.
    """
    listed = list(events)
    problems = []
    early = restarted_between(listed, 0.0, faults.worker_killed_at)
    if early:
        problems.append(f"restarted before any fault: {sorted(early)}")
    by_worker = restarted_between(listed, faults.worker_killed_at, faults.broker_killed_at)
    if by_worker != faults.lost:
        problems.append(
            f"restarted after the {faults.worker} kill: {sorted(by_worker)}; expected exactly "
            f"its unfinished subtasks {sorted(faults.lost)}"
        )
    plan = recorded_plan(listed, job)
    if plan is None:
        problems.append(f"no submitted event of job {job} records its plan")
    for r in recoveries(listed, 0.0):
        if r.subtask in by_worker and r.host == faults.worker:
            problems.append(f"{r.subtask} restarted on {r.host}, the worker that was killed")
        if plan is None:
            continue
        foreign = set(r.replay) - own_partitions(plan, r.subtask)
        if foreign:
            problems.append(f"{r.subtask} replayed partitions not its own: {sorted(foreign)}")
    finished = {name(e) for e in of_kind(listed, "finished")}
    if finished != set(subtasks(parallelism)):
        problems.append(f"not finished: {sorted(set(subtasks(parallelism)) - finished)}")
    return problems


def output_problems(
    rows: list[dict[str, Any]], reference: Mapping[str, tuple[str, int]]
) -> list[str]:
    """Differences between the job's output rows and the batch reference; [] if equal."""
    got: dict[str, tuple[str, int]] = {}
    duplicates = []
    for row in rows:
        if row["page"] in got:
            duplicates.append(row["page"])
        got[row["page"]] = (row["section"], row["views"])
    problems = []
    if duplicates:
        problems.append(f"{len(duplicates)} duplicate output rows, e.g. {duplicates[:3]}")
    missing = sorted(set(reference) - set(got))
    extra = sorted(set(got) - set(reference))
    wrong = sorted(p for p in set(got) & set(reference) if got[p] != reference[p])
    if missing or extra or wrong:
        problems.append(
            f"output differs from the reference: {len(missing)} pages missing (e.g. "
            f"{missing[:3]}), {len(extra)} unexpected, {len(wrong)} with other counts "
            f"(e.g. {[(p, got[p], reference[p]) for p in wrong[:3]]})"
        )
    return problems
