"""What ``spillway ui`` shows, folded from what the job wrote to Kafka: pure bookkeeping.

Feed it the documents as they are read — the event log (:meth:`JobView.event`, oldest
first), heartbeats (:meth:`JobView.heartbeat`), checkpoint records of the per-operator
checkpoint topics (:meth:`JobView.checkpoint`), completed global checkpoints
(:meth:`JobView.global_checkpoint`) and the input partitions' ends (:meth:`JobView.ends`)
— then call :meth:`JobView.sample` about once a second and :meth:`JobView.snapshot` for
the page's JSON. No I/O here (the reader is :mod:`spillway.spark_jobs.ui.feed`).

The view follows one run: the newest ``submitted`` event names it; a newer submission
starts the view afresh. States, restarts, replay debt and lag are those of
:class:`spillway.recovery.observe.metrics.JobMetrics` (the figures ``--metrics-port`` serves), so
the page
and Prometheus agree. Replay debt and lag over time are sampled by :meth:`sample`, from
when the reader started: the partitions' past ends are not in Kafka.

A restart is an incarnation that fenced after the subtask's first one (as in
:func:`spillway.recovery.observe.status.fold_events`); its timeline holds the phases of
:mod:`spillway.recovery.observe.phases` that were recorded (the attempt's own in its ``started`` /
``caught-up`` / ``finished`` events, Spark's in the driver's ``task-retried`` event), and
the last sign of life of the attempt it replaced.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.observe.metrics import JobMetrics
from spillway.recovery.observe.phases import PHASES, merge, steps
from spillway.recovery.observe.status import Incarnation

# Bounds on what the page keeps: an hour of samples at one a second, the newest
# checkpoint records (every subtask checkpoints about once a second).
MAX_SAMPLES = 3600
MAX_CHECKPOINTS = 5000
MAX_GLOBAL = 1000

# Events whose ``phases`` describe their incarnation's restart; later ones know more.
_PHASE_EVENTS = ("started", "caught-up", "finished")


@dataclass
class _Restart:
    subtask: str
    attempt: Any
    incarnation: Incarnation
    previous: Incarnation | None
    phases: dict[str, float] = field(default_factory=dict)
    replay: dict[str, Any] = field(default_factory=dict)
    replay_basis: Any = None


def _inc(doc: Mapping[str, Any]) -> Incarnation:
    return (doc.get("run"), doc.get("attempt"), doc.get("pid"), doc.get("host"))


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def edges_of(job: str, plan: PlanDoc) -> list[dict[str, str]]:
    """The graph's edges ``{from, to, topic}`` from the input topics' names.

    Channel topics are ``spillway.<job>.ch.<upstream>.<downstream>`` and names hold no
    dot (:mod:`spillway.channels.naming`), so each names exactly one edge; a topic of another
    shape (a user's Kafka topic read by a source) is no edge of the graph.
    """
    prefix = f"spillway.{job}.ch."
    out = []
    for op in plan.operators:
        for c in op.inputs:
            if c.topic.startswith(prefix):
                up, _, down = c.topic[len(prefix) :].partition(".")
                if down == op.name:
                    out.append({"from": up, "to": op.name, "topic": c.topic})
    return out


class JobView:
    """The page's view of one job, folded from its Kafka topics."""

    def __init__(
        self, job: str, plan: PlanDoc, run_id: str | None, submitted: float | None
    ) -> None:
        self.job = job
        self.plan = plan
        self.run_id = run_id
        self.submitted = submitted
        self._reset()

    def _reset(self) -> None:
        self.metrics = JobMetrics(self.plan, self.run_id)
        self._fenced: dict[str, list[Incarnation]] = {}
        self._skipped: dict[str, set[Incarnation]] = {}
        self._seen: dict[tuple[str, Incarnation], float] = {}  # newest sign of life
        self._phases: dict[tuple[str, Incarnation], Mapping[str, Any]] = {}  # newest with phases
        self._spark: dict[tuple[str, int], dict[str, float]] = {}  # task-retried, by attempt
        self._ckpts: deque[dict[str, Any]] = deque(maxlen=MAX_CHECKPOINTS)
        self._global: deque[dict[str, Any]] = deque(maxlen=MAX_GLOBAL)
        self._samples: deque[dict[str, Any]] = deque(maxlen=MAX_SAMPLES)

    def _ours(self, doc: Mapping[str, Any]) -> bool:
        return self.run_id is None or doc.get("run") == self.run_id

    def event(self, e: Mapping[str, Any]) -> None:
        """Take one event-log document (oldest first); a newer ``submitted`` starts afresh."""
        kind = e.get("event")
        if kind == "submitted" and e.get("run") is not None and e.get("run") != self.run_id:
            t = _num(e.get("time"))
            if self.submitted is not None and (t is None or t <= self.submitted):
                return  # an earlier run's submission
            plan = e.get("plan")
            if isinstance(plan, dict):
                self.plan = PlanDoc.from_json(plan, f"the submitted event of job {self.job}")
            self.run_id, self.submitted = str(e["run"]), _num(e.get("time"))
            self._reset()
            return
        if not self._ours(e):
            return
        if kind == "task-retried" and isinstance(e.get("retried"), Mapping):
            r = e["retried"]
            if isinstance(r.get("index"), int) and isinstance(r.get("attempt"), int):
                spark = {
                    k: float(e[k])
                    for k in ("spark_noticed", "scheduled")
                    if _num(e.get(k)) is not None
                }
                self._spark[(f"{r.get('operator')}[{r['index']}]", r["attempt"])] = spark
            return
        self.metrics.event(e)
        if "operator" not in e or "index" not in e:
            return
        key, inc = f"{e['operator']}[{e['index']}]", _inc(e)
        self._alive(key, inc, e.get("time"))
        if kind == "fencing" and inc not in self._fenced.setdefault(key, []):
            self._fenced[key].append(inc)
        elif kind == "skipped":
            self._skipped.setdefault(key, set()).add(inc)
        elif kind in _PHASE_EVENTS and isinstance(e.get("phases"), Mapping):
            self._phases[(key, inc)] = e

    def heartbeat(self, h: Mapping[str, Any]) -> None:
        """Take one heartbeat document (any order)."""
        if not self._ours(h) or "operator" not in h:
            return
        self.metrics.heartbeat(h)
        self._alive(f"{h['operator']}[{h.get('index')}]", _inc(h), h.get("time"))

    def _alive(self, key: str, inc: Incarnation, t: object) -> None:
        v = _num(t)
        if v is not None:
            self._seen[(key, inc)] = max(v, self._seen.get((key, inc), v))

    def checkpoint(
        self,
        operator: str,
        index: int,
        checkpoint_id: int,
        wall_time: float,
        attempt: int,
        finished: bool,
        global_id: int | None,
    ) -> None:
        """Take one committed checkpoint record of subtask ``operator[index]``.

        Records older than the run's submission belong to an earlier run: left out.
        """
        if self.submitted is not None and wall_time < self.submitted:
            return
        self._ckpts.append(
            {
                "subtask": f"{operator}[{index}]",
                "id": checkpoint_id,
                "time": round(wall_time, 3),
                "attempt": attempt,
                "finished": finished,
                "global": global_id,
            }
        )

    def global_checkpoint(self, summary: Mapping[str, Any]) -> None:
        """Take one completed global checkpoint record (``id``, ``start``, ``end``, ...)."""
        self.metrics.global_checkpoint(summary)
        start, end = _num(summary.get("start")), _num(summary.get("end"))
        ours = start is not None and (self.submitted is None or start >= self.submitted)
        if "id" in summary and start is not None and end is not None and ours:
            self._global.append(
                {
                    "id": int(summary["id"]),
                    "start": start,
                    "end": end,
                    "duration_s": _num(summary.get("duration_s")),
                }
            )

    def ends(self, ends: Mapping[str, int]) -> None:
        """The current end offset of input partitions (``topic[partition]`` → offset)."""
        self.metrics.ends(ends)

    def read_until(self, t: float) -> None:
        """Everything written before wall time ``t`` has been taken; liveness is judged at
        that time (:meth:`spillway.recovery.observe.metrics.JobMetrics.read_until`)."""
        self.metrics.read_until(t)

    def sample(self, now: float) -> None:
        """Record every subtask's replay debt and lag (summed over its partitions) at ``now``."""
        snap = self.metrics.snapshot(now)
        self._samples.append(
            {
                "time": round(now, 3),
                "debt": {
                    s.name: sum(s.replay_debt.values()) for s in snap.subtasks if s.replay_debt
                },
                "lag": {s.name: sum(s.lag.values()) for s in snap.subtasks if s.lag},
            }
        )

    def restarts(self) -> list[dict[str, Any]]:
        """Every restart of the run, oldest first, with its phases and the replaced attempt's
        last sign of life."""
        out: list[_Restart] = []
        for key, order in self._fenced.items():
            ran = [i for i in order if i not in self._skipped.get(key, set())]
            for prev, inc in pairwise(ran):
                r = _Restart(key, inc[1], inc, prev)
                doc = self._phases.get((key, inc), {})
                spark = self._spark.get((key, inc[1])) if isinstance(inc[1], int) else None
                r.phases = merge(doc.get("phases"), spark)
                r.replay = dict(doc.get("replay") or {})
                r.replay_basis = doc.get("replay_basis")
                out.append(r)
        rows = [self._restart_doc(r) for r in out]
        return sorted(rows, key=lambda d: (d["start"] is None, d["start"] or 0.0, d["subtask"]))

    def _restart_doc(self, r: _Restart) -> dict[str, Any]:
        last = self._seen.get((r.subtask, r.previous)) if r.previous is not None else None
        known = [t for t in (last, *r.phases.values()) if t is not None]
        return {
            "subtask": r.subtask,
            "attempt": r.attempt,
            "pid": r.incarnation[2],
            "host": r.incarnation[3],
            "previous_attempt": r.previous[1] if r.previous else None,
            "previous_last_seen": last,
            "phases": r.phases,
            "steps": [[p, round(dt, 3)] for p, dt in steps(r.phases)],
            "caught_up": "caught_up" in r.phases,
            "replay": r.replay,
            "replay_basis": r.replay_basis,
            "start": min(known, default=None),
        }

    def snapshot(self, now: float) -> dict[str, Any]:
        """The page's JSON at wall time ``now``."""
        snap = self.metrics.snapshot(now)
        return {
            "job": self.job,
            "run": self.run_id,
            "submitted": self.submitted,
            "time": round(now, 3),
            "phases": list(PHASES),
            "graph": {
                "operators": [
                    {
                        "name": op.name,
                        "parallelism": op.parallelism,
                        "kind": op.kind,
                        "stateful": op.stateful,
                    }
                    for op in self.plan.operators
                ],
                "edges": edges_of(self.job, self.plan),
            },
            "subtasks": [
                {
                    "name": s.name,
                    "operator": s.operator,
                    "index": s.index,
                    "state": s.state,
                    "restarts": s.restarts,
                    "records_in": s.records_in,
                    "records_out": s.records_out,
                    "checkpoint": s.checkpoint,
                    "checkpoint_age_s": None
                    if s.checkpoint_age_s is None
                    else round(s.checkpoint_age_s, 1),
                    "replay_debt": sum(s.replay_debt.values()),
                    "lag": sum(s.lag.values()),
                    "replayed": sum(s.replayed.values()),
                }
                for s in snap.subtasks
            ],
            "checkpoints": list(self._ckpts),
            "global_checkpoints": list(self._global),
            "series": list(self._samples),
            "restarts": self.restarts(),
        }
