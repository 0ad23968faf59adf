"""What an autoscaler measures, per operator, between two metric snapshots (pure, no I/O).

From the counters subtasks already report in their heartbeats
(:class:`spillway.recovery.observe.metrics.SubtaskMetrics`):

- **true rate**: the records its subtasks processed over the seconds they spent
  processing them (``busy_s``): records per busy second of one subtask;
- **input rate**: DS2's demand. Channels are Kafka topics, so a slow operator never slows
  its upstream down: a source's output rate is the demand it puts on its readers. An
  operator's input rate is the sum of its upstream operators' demand out, where an
  operator's demand out is its own input rate times its selectivity (records out per
  record in over the window; its observed output rate if it read nothing) — so an
  operator behind a bottleneck is sized for what the bottleneck will pass on once wide
  enough, not for what it passes now;
- **backlog**: the consumer lag of its input partitions (offsets not yet read).

Rates divide by the time the counters advanced over: a subtask's counters are as of its
newest heartbeat (one a second), so over a window of snapshots they cover the time
between the heartbeats they came from, which may be a second more or less than the
snapshots' (20 % over a 5 s window).

An operator is measured only if every one of its subtasks was running at both ends of
the window and processed something in it (no true rate without busy time).
"""

from __future__ import annotations

from collections.abc import Mapping

from spillway.recovery.control.autopolicy import Measurement
from spillway.recovery.job.plandoc import OperatorDoc, PlanDoc
from spillway.recovery.observe.metrics import Snapshot, SubtaskMetrics


def upstreams(job: str, plan: PlanDoc) -> dict[str, list[str]]:
    """Each operator's upstream operators, from its input channels' topic names
    (``spillway.<job>.ch.<upstream>.<downstream>``)."""
    names = {op.name for op in plan.operators}
    prefix = f"spillway.{job}.ch."
    out: dict[str, list[str]] = {}
    for op in plan.operators:
        ups = out.setdefault(op.name, [])
        for i in op.inputs:
            rest, tail = i.topic.removeprefix(prefix), f".{op.name}"
            if i.topic.startswith(prefix) and rest.endswith(tail) and rest[: -len(tail)] in names:
                ups.append(rest[: -len(tail)])
    return out


def measure(job: str, plan: PlanDoc, before: Snapshot, after: Snapshot) -> dict[str, Measurement]:
    """Every measurable operator's :class:`Measurement` over ``before`` → ``after``
    (taken of the same shape ``plan``); sources are never measured (no input channels)."""
    dt = after.time - before.time
    if dt <= 0:
        return {}
    b, a = _by_operator(before), _by_operator(after)
    ups = upstreams(job, plan)
    demand_out: dict[str, float] = {}
    out: dict[str, Measurement] = {}
    for op in plan.operators:  # sources first: upstream demand is known when needed
        d_in = _delta(b, a, op.name, "records_in")
        d_out = _delta(b, a, op.name, "records_out")
        span = _span(b, a, op.name, dt)
        if not op.inputs:
            demand_out[op.name] = d_out / span
            continue
        rate = sum(demand_out.get(u, 0.0) for u in ups[op.name])
        demand_out[op.name] = rate * d_out / d_in if d_in > 0 else d_out / span
        m = _measured(op, b, a, rate, d_in, after.time)
        if m is not None:
            out[op.name] = m
    return out


def _measured(
    op: OperatorDoc,
    b: Mapping[str, list[SubtaskMetrics]],
    a: Mapping[str, list[SubtaskMetrics]],
    rate: float,
    processed: float,
    now: float,
) -> Measurement | None:
    subtasks = b.get(op.name, []) + a.get(op.name, [])
    if len(subtasks) != 2 * op.parallelism or any(s.state != "running" for s in subtasks):
        return None  # restoring, lost, finished, or of another shape
    busy = _delta(b, a, op.name, "busy_s")
    if processed <= 0 or busy <= 0:
        return None
    return Measurement(
        operator=op.name,
        time=now,
        parallelism=op.parallelism,
        input_rate=rate,
        true_rate=processed / busy,
        backlog=sum(n for s in a[op.name] for n in s.lag.values()),
        max_parallelism=op.max_parallelism,
    )


def _span(
    b: Mapping[str, list[SubtaskMetrics]],
    a: Mapping[str, list[SubtaskMetrics]],
    op: str,
    dt: float,
) -> float:
    """The seconds ``op``'s counters advanced over between the snapshots: the mean time
    between each subtask's heartbeats at both ends; ``dt`` (the snapshots' own) unless
    every subtask has a later heartbeat at the end than at the start."""
    before = {s.index: s.beat_time for s in b.get(op, [])}
    spans = []
    for s in a.get(op, []):
        t0 = before.get(s.index)
        if s.beat_time is None or t0 is None or s.beat_time <= t0:
            return dt
        spans.append(s.beat_time - t0)
    return sum(spans) / len(spans) if spans else dt


def _by_operator(snap: Snapshot) -> dict[str, list[SubtaskMetrics]]:
    out: dict[str, list[SubtaskMetrics]] = {}
    for s in snap.subtasks:
        out.setdefault(s.operator, []).append(s)
    return out


def _delta(
    b: Mapping[str, list[SubtaskMetrics]],
    a: Mapping[str, list[SubtaskMetrics]],
    op: str,
    attr: str,
) -> float:
    after = sum(float(getattr(s, attr)) for s in a.get(op, []))
    before = sum(float(getattr(s, attr)) for s in b.get(op, []))
    return max(0.0, after - before)
