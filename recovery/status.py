"""``status``: where every subtask and channel of a job stands.

Per subtask: running / finished / failed (from the event log), last checkpoint id and
age, replay debt per input partition (offsets between the checkpointed position and the
partition's end — what a restart would re-read; transaction markers count as offsets
too) and changelog size. A finished subtask has no debt: a restart skips it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from channels.config import KafkaSettings
from channels.ids import JobId, TopicPartition
from channels.kafka.consumer import AssignedConsumer
from offsets.store import CheckpointStore
from offsets.tracker import PositionTracker
from recovery.events import read_events
from recovery.plan import JobPlan


@dataclass
class SubtaskStatus:
    """One row of ``spillway status``."""

    subtask: str
    state: str
    attempt: int | None
    checkpoint: int | None
    checkpoint_age_s: float | None
    replay_debt: dict[str, int] = field(default_factory=dict)
    changelog_records: int | None = None
    restarts: int = 0


def job_status(settings: KafkaSettings, plan: JobPlan) -> list[SubtaskStatus]:
    """The status of every subtask of ``plan``'s job."""
    last_event: dict[str, dict[str, Any]] = {}
    starts: dict[str, int] = {}
    for e in read_events(settings, plan.job):
        if "operator" not in e:
            continue
        key = f"{plan.job}/{e['operator']}[{e['index']}]"
        last_event[key] = e
        if e.get("event") == "started":
            starts[key] = starts.get(key, 0) + 1
    probe = AssignedConsumer(settings, f"spillway.{plan.job}.status")
    rows: list[SubtaskStatus] = []
    try:
        for op in plan.operators:
            store = CheckpointStore(settings, JobId(plan.job), op.name, op.parallelism)
            try:
                for i in range(op.parallelism):
                    key = f"{plan.job}/{op.name}[{i}]"
                    ev = last_event.get(key)
                    ckpt = store.latest(i)
                    state = _state_of(ev)
                    if ckpt is not None and ckpt.finished:
                        state = "finished"
                    debt: dict[str, int] = {}
                    if state != "finished":
                        tps = [
                            TopicPartition(plan.topic_of(edge), i)
                            for edge in plan.inputs_of(op.name)
                        ]
                        start = dict(ckpt.inputs) if ckpt else {}
                        ends = {tp: probe.watermarks(tp)[1] for tp in tps}
                        owed = PositionTracker(tps, start).replay_debt(ends)
                        debt = {str(tp): n for tp, n in owed.items()}
                    rows.append(
                        SubtaskStatus(
                            subtask=key,
                            state=state,
                            attempt=ev.get("attempt") if ev else None,
                            checkpoint=int(ckpt.checkpoint_id) if ckpt else None,
                            checkpoint_age_s=round(time.time() - ckpt.wall_time, 1)
                            if ckpt
                            else None,
                            replay_debt=debt,
                            changelog_records=(
                                int(ckpt.changelog) if ckpt and ckpt.changelog is not None else None
                            ),
                            restarts=max(0, starts.get(key, 0) - 1),
                        )
                    )
            finally:
                store.close()
    finally:
        probe.close()
    return rows


def _state_of(event: dict[str, Any] | None) -> str:
    if event is None:
        return "not started"
    return {
        "fencing": "restoring",
        "started": "running",
        "caught-up": "running",  # re-read what its previous attempt had read
        "finished": "finished",
        "skipped": "finished",
        "failed": "failed",
        "stopped": "stopped",
    }.get(str(event.get("event")), "unknown")


def render(rows: list[SubtaskStatus]) -> str:
    """A fixed-width table for people."""
    lines = [f"{'subtask':40} {'state':12} {'ckpt':>6} {'age s':>7} {'restarts':>8}  replay debt"]
    for r in rows:
        debt = ", ".join(f"{tp.rsplit('.', 1)[-1]}={n}" for tp, n in r.replay_debt.items()) or "-"
        lines.append(
            f"{r.subtask:40} {r.state:12} {_s(r.checkpoint):>6} {_s(r.checkpoint_age_s):>7} "
            f"{r.restarts:>8}  {debt}"
        )
    return "\n".join(lines)


def as_json(rows: list[SubtaskStatus]) -> list[dict[str, Any]]:
    """Rows as plain dicts for ``--json``."""
    return [asdict(r) for r in rows]


def _s(v: object) -> str:
    return "-" if v is None else str(v)
