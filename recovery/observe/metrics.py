"""Job metrics from what subtasks already report: the event log, heartbeats, global checkpoints.

Pure bookkeeping, no I/O: feed it the documents as they are read (:meth:`JobMetrics.event`,
:meth:`JobMetrics.heartbeat`, :meth:`JobMetrics.global_checkpoint`) and the input
partitions' ends (:meth:`JobMetrics.ends`); :meth:`JobMetrics.snapshot` gives the values.
The driver serves them to Prometheus (:mod:`spillway.spark_jobs.spark.metrics_http`) and the
progress
line renders them (:mod:`spillway.spark_jobs.spark.progress`).

Liveness is judged from fresh data only. The reader says how far it has read with
:meth:`JobMetrics.read_until` (it had caught up with the topics at wall time ``t``); a
subtask whose current incarnation gave no sign of life (event or heartbeat) for
:data:`~spillway.recovery.observe.heartbeat.LOST_AFTER_S` *before that time* is ``lost``,
as in ``spillway status``. How long the reader then took (an offsets query, a slow
machine) never ages a heartbeat. If the reader itself has not caught up for longer than
the limit (or never has), there is no verdict: a restoring or running subtask is
``unknown``, never ``lost``; :func:`as_of` applies the same rule to a snapshot shown later.
Counters survive restarts: an incarnation's counts start at zero again, so a subtask's
``records_in`` is the sum over its incarnations of the newest count each reported (a
replayed record counts again: it was processed again); so is ``busy_s``, the seconds a
subtask spent processing records. Restarts and states come from the
event log of this run (:func:`spillway.recovery.observe.status.fold_events`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from spillway.channels.ids import TopicPartition
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.observe.heartbeat import LOST_AFTER_S
from spillway.recovery.observe.status import (
    LIVE_STATES,
    Incarnation,
    SubtaskLog,
    fold_events,
    liveness,
)

# The state of a restoring or running subtask when the data to judge its liveness by is
# older than the liveness limit (the reader is behind or stopped): no verdict.
UNKNOWN = "unknown"


@dataclass
class SubtaskMetrics:
    """The metric values of one subtask ``operator[index]``."""

    operator: str
    index: int
    state: str = "not started"
    restarts: int = 0
    records_in: int = 0
    records_out: int = 0
    checkpoints: int = 0
    busy_s: float = 0.0  # seconds spent processing records, over incarnations
    checkpoint: int | None = None
    checkpoint_age_s: float | None = None
    checkpoint_s: float | None = None
    commit_s: float | None = None
    state_keys: int | None = None
    replay_debt: dict[str, int] = field(default_factory=dict)  # per input partition
    lag: dict[str, int] = field(default_factory=dict)  # per input partition
    replayed: dict[str, int] = field(default_factory=dict)  # records, over incarnations
    progress: tuple[int, int] | None = None  # a bounded source's (done, total)
    source: bool = False  # an operator without input channels
    # Wall time of the current incarnation's newest heartbeat (None: none yet): the
    # counters above are as of then, not as of the snapshot (rates divide by its change).
    beat_time: float | None = None

    @property
    def name(self) -> str:
        """``operator[index]``."""
        return f"{self.operator}[{self.index}]"


@dataclass
class Snapshot:
    """Every subtask's metrics and the job's completed global checkpoint durations."""

    subtasks: list[SubtaskMetrics]
    global_durations_s: list[float]
    time: float = 0.0  # wall time it was taken
    # Wall time up to which the reader had read events and heartbeats (None: never caught
    # up); states were judged at this time.
    read_at: float | None = None

    def total(self, attr: str) -> int:
        """Sum of an integer attribute (e.g. ``records_in``) over subtasks."""
        return sum(int(getattr(s, attr)) for s in self.subtasks)


@dataclass
class _Incarnation:
    counts: dict[str, int] = field(default_factory=dict)  # records_in, records_out, checkpoints
    replayed: dict[str, int] = field(default_factory=dict)
    busy_s: float = 0.0


class JobMetrics:
    """Folds one run's events and heartbeats into per-subtask metrics.

    ``run_id``: only documents of this run count (None: every run of the job).
    """

    def __init__(self, plan: PlanDoc, run_id: str | None = None) -> None:
        self.plan = plan
        self.run_id = run_id
        self._events: list[Mapping[str, Any]] = []
        self._logs: dict[str, SubtaskLog] = {}
        self._beat: dict[str, Mapping[str, Any]] = {}  # newest heartbeat of the current one
        self._incs: dict[str, dict[Incarnation, _Incarnation]] = {}
        self._finished: dict[str, Mapping[str, Any]] = {}
        self._ends: dict[str, int] = {}
        self._global: dict[int, float] = {}
        self._read_at: float | None = None

    def _ours(self, doc: Mapping[str, Any]) -> bool:
        return self.run_id is None or doc.get("run") == self.run_id

    def event(self, e: Mapping[str, Any]) -> None:
        """Take one event-log document (oldest first)."""
        if not self._ours(e) or "operator" not in e or e.get("event") == "checkpointed":
            return  # checkpointed: one per subtask per global checkpoint, and heartbeats
            # already show the subtask alive; kept, they would make every snapshot's fold
            # grow with the job's age
        self._events.append(e)
        key = f"{e['operator']}[{e.get('index')}]"
        if e.get("event") == "finished":
            self._finished[key] = e
            self._counts(key, e)
        elif e.get("event") == "started":
            self._counts(key, e)

    def heartbeat(self, h: Mapping[str, Any]) -> None:
        """Take one heartbeat document (any order)."""
        if not self._ours(h) or "operator" not in h:
            return
        key = f"{h['operator']}[{h.get('index')}]"
        old = self._beat.get(key)
        if old is None or float(h.get("time", 0)) >= float(old.get("time", 0)):
            self._beat[key] = h
        self._counts(key, h)

    def read_until(self, t: float) -> None:
        """Every event and heartbeat written before wall time ``t`` has been taken: the
        reader had caught up with the ends of the event and heartbeat topics at ``t``.
        Liveness is judged at the newest such ``t`` (it never moves back)."""
        if self._read_at is None or t > self._read_at:
            self._read_at = t

    def ends(self, ends: Mapping[str, int]) -> None:
        """The current end offset of input partitions (``topic[partition]`` → offset)."""
        self._ends.update(ends)

    def global_checkpoint(self, summary: Mapping[str, Any]) -> None:
        """Take one completed global checkpoint record (``id``, ``duration_s``)."""
        if "id" in summary and isinstance(summary.get("duration_s"), int | float):
            self._global[int(summary["id"])] = float(summary["duration_s"])

    def _counts(self, key: str, doc: Mapping[str, Any]) -> None:
        inc = self._incs.setdefault(key, {}).setdefault(_inc(doc), _Incarnation())
        for k in ("records_in", "records_out", "checkpoints"):
            v = doc.get(k)
            if isinstance(v, int):
                inc.counts[k] = max(v, inc.counts.get(k, 0))
        busy = doc.get("busy_s")
        if isinstance(busy, int | float):
            inc.busy_s = max(float(busy), inc.busy_s)
        replay = doc.get("replay")
        if isinstance(replay, Mapping):
            for tp, v in replay.items():
                if isinstance(v, list) and len(v) == 3 and isinstance(v[2], int):
                    inc.replayed[tp] = max(v[2], inc.replayed.get(tp, 0))

    def snapshot(self, now: float) -> Snapshot:
        """The metric values at wall time ``now``.

        States are judged at the last :meth:`read_until` time, not at ``now``: a subtask is
        ``lost`` only if it was silent for the liveness limit before the reader's newest
        catch-up. If that catch-up is older than the limit at ``now`` (or there was none),
        restoring and running subtasks are ``unknown``.
        """
        self._logs = fold_events(self._events)
        out = []
        for op in self.plan.operators:
            for i in range(op.parallelism):
                out.append(self._subtask(op.name, i, op.owned_inputs(i), now))
        snap = Snapshot(out, [self._global[n] for n in sorted(self._global)], now, self._read_at)
        return as_of(snap, now)

    def _subtask(
        self, name: str, index: int, inputs: list[TopicPartition], now: float
    ) -> SubtaskMetrics:
        key = f"{name}[{index}]"
        m = SubtaskMetrics(name, index, source=not inputs)
        log = self._logs.get(key)
        if log is not None:
            m.state, m.restarts = log.state, log.restarts
        for inc in self._incs.get(key, {}).values():
            m.records_in += inc.counts.get("records_in", 0)
            m.records_out += inc.counts.get("records_out", 0)
            m.checkpoints += inc.counts.get("checkpoints", 0)
            m.busy_s += inc.busy_s
            for tp, n in inc.replayed.items():
                m.replayed[tp] = m.replayed.get(tp, 0) + n
        beat = self._beat.get(key)
        if beat is not None and (log is None or _inc(beat) == log.incarnation):
            _from_beat(m, beat, now)
        else:
            beat = None  # an older incarnation's
        # "lost": restoring or running, but silent (spillway.recovery.observe.status) at
        # the time the reader had read up to; no time read: as_of makes it "unknown"
        if log is not None and self._read_at is not None:
            seen = [log.last_event] if log.last_event is not None else []
            if beat is not None and isinstance(beat.get("time"), int | float):
                seen.append(float(beat["time"]))
            m.state = liveness(m.state, max(seen, default=None), self._read_at, LOST_AFTER_S)
        finished = key in self._finished or m.state == "finished"
        for owned in inputs:
            tp = f"{owned.topic}[{owned.partition}]"
            end = self._ends.get(tp)
            if finished:
                m.replay_debt[tp], m.lag[tp] = 0, 0
            elif end is not None and beat is not None:
                ckpt = beat.get("checkpointed", {}).get(tp, 0)
                m.replay_debt[tp] = max(0, end - int(ckpt))
                pos = beat.get("positions", {}).get(tp)
                if isinstance(pos, int):
                    m.lag[tp] = max(0, end - pos)
        if finished and m.progress is not None:
            m.progress = (m.progress[1], m.progress[1])
        return m


def as_of(snap: Snapshot, now: float, limit: float = LOST_AFTER_S) -> Snapshot:
    """``snap`` as shown at wall time ``now``: itself while its data is fresh (read at most
    ``limit`` seconds before ``now``); else a copy in which every restoring, running or
    lost subtask is :data:`UNKNOWN` — stale data gives no liveness verdict."""
    if snap.read_at is not None and now - snap.read_at <= limit:
        return snap
    if not any(s.state in LIVE_STATES or s.state == "lost" for s in snap.subtasks):
        return snap
    subtasks = [
        replace(s, state=UNKNOWN) if s.state in LIVE_STATES or s.state == "lost" else s
        for s in snap.subtasks
    ]
    return replace(snap, subtasks=subtasks)


def _inc(doc: Mapping[str, Any]) -> Incarnation:
    return (doc.get("run"), doc.get("attempt"), doc.get("pid"), doc.get("host"))


def _from_beat(m: SubtaskMetrics, beat: Mapping[str, Any], now: float) -> None:
    m.beat_time = _float(beat.get("time"))
    ckpt = beat.get("checkpoint")
    if isinstance(ckpt, int):
        m.checkpoint = ckpt
        t = beat.get("checkpoint_time")
        if isinstance(t, int | float):
            m.checkpoint_age_s = max(0.0, now - float(t))
        m.checkpoint_s = _float(beat.get("checkpoint_s"))
        m.commit_s = _float(beat.get("commit_s"))
    keys = beat.get("state_keys")
    if isinstance(keys, int):
        m.state_keys = keys
    progress = beat.get("progress")
    if isinstance(progress, list) and len(progress) == 2:
        m.progress = (int(progress[0]), int(progress[1]))


def _float(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) else None
