"""``status``: where every subtask and channel of a job stands.

Per subtask: state (from the event log), the attempt, host and pid of its current
incarnation, how long ago it was last seen alive, last checkpoint id and age, replay debt
per input partition (offsets between the checkpointed position and the partition's end —
what a restart would re-read; transaction markers count as offsets too, except that a
subtask that is not running owes nothing where only markers or aborted records are left,
:func:`unread`), changelog size, and restarts after failures apart from planned ones
(rescales, upgrades, rewinds, runs after a clean stop). A finished subtask has no debt: a
restart skips it. The table (:func:`render`) shows one debt per subtask, ``--json`` each
partition's.

The job's shape comes from the plan description the driver recorded when it submitted
the job (:mod:`spillway.recovery.job.plandoc`), so status imports no user code and needs nothing
from the job's environment. The bookkeeping (events → rows, the liveness rule) is pure
and lives apart from the reads in :func:`job_status`.

States: ``not started``, ``restoring`` (fenced, restoring), ``running``, ``finished``
(also a skipped re-run of a finished subtask), ``stopped``, ``failed`` and ``lost``: the
current incarnation was restoring or running but has given no sign of life (event or
heartbeat) for ``lost_after`` seconds — its process is gone (or frozen). Those seconds
are counted up to the time the heartbeats were read, not to when the row is made, so the
other reads (checkpoints, end offsets) never age a heartbeat.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import ConfigError
from spillway.channels.ids import JobId, Offset, OperatorName, TopicPartition
from spillway.channels.kafka.admin import Admin
from spillway.channels.kafka.consumer import AssignedConsumer
from spillway.offsets.checkpoint import Checkpoint
from spillway.offsets.store import CheckpointStore
from spillway.offsets.tracker import PositionTracker
from spillway.recovery.job.plandoc import PlanDoc
from spillway.recovery.observe.events import events_topic, read_events
from spillway.recovery.observe.heartbeat import LOST_AFTER_S, heartbeats_topic, read_heartbeats

# Events that set a subtask's state; any other event (checkpointed, ...) only shows it alive.
_STATES = {
    "redo": "restoring",  # redone within its attempt (spillway.recovery.runtime.redo)
    "fencing": "restoring",
    "started": "running",
    "caught-up": "running",  # re-read what its previous attempt had read
    "finished": "finished",
    "skipped": "finished",
    "failed": "failed",
    "stopped": "stopped",
}
LIVE_STATES = frozenset({"restoring", "running"})

# One incarnation (process) of a subtask: (run, attempt, pid, host).
Incarnation = tuple[Any, Any, Any, Any]


@dataclass
class SubtaskStatus:
    """One row of ``spillway status`` (``--json`` prints these fields)."""

    subtask: str
    state: str
    attempt: int | None
    checkpoint: int | None
    checkpoint_age_s: float | None
    replay_debt: dict[str, int] = field(default_factory=dict)  # per input partition
    changelog_records: int | None = None
    restarts: int = 0  # after failures
    planned_restarts: int = 0  # rescales, upgrades, rewinds, restarts after a clean stop
    host: str | None = None
    pid: int | None = None
    seen_age_s: float | None = None  # since the current incarnation's last event or heartbeat
    redos: int = 0  # redone from its checkpoint within an attempt: no restart


@dataclass
class SubtaskLog:
    """What the event log says about one subtask."""

    state: str = "not started"
    incarnation: Incarnation | None = None  # of the newest event that counts
    last_event: float | None = None  # wall time of that incarnation's newest event
    restarts: int = 0  # after failures
    planned_restarts: int = 0  # rescales, upgrades, rewinds, restarts after a clean stop
    redos: int = 0  # redone from its checkpoint within an attempt: no restart


def _incarnation(doc: Mapping[str, Any]) -> Incarnation:
    return (doc.get("run"), doc.get("attempt"), doc.get("pid"), doc.get("host"))


def fold_events(events: Iterable[Mapping[str, Any]]) -> dict[str, SubtaskLog]:
    """The event log (oldest first) per subtask ``operator[index]``.

    Every attempt emits ``fencing`` first; a later ``fencing`` by another incarnation
    supersedes the earlier ones, whose last words (a fenced zombie's ``failed``) no longer
    count. Restarts: incarnations that fenced, minus the first, not counting re-runs that
    found the subtask finished (``skipped``). A restart is *planned* (a rescale, an
    upgrade, a rewind, a run after a clean stop) if the incarnation before it had stopped
    or finished, or the driver fenced the subtask for a rescale or rewind (a ``fencing``
    event with ``by``, which is no incarnation of its own); any other restart follows a
    failure (a failed, killed or lost incarnation). Redos: ``redo`` events of the
    incarnations that count; a redo goes on in the same incarnation (its ``fencing``
    repeats one already seen), so it is never a restart.
    """
    logs: dict[str, SubtaskLog] = {}
    fenced: dict[str, list[Incarnation]] = {}
    skipped: dict[str, set[Incarnation]] = {}
    # The subtask's own incarnations in order, each with whether its start was planned.
    starts: dict[str, list[tuple[Incarnation, bool]]] = {}
    by_driver: set[str] = set()  # fenced by the driver since the last incarnation
    for e in events:
        if "operator" not in e or "index" not in e:
            continue  # job-level event (the driver's task-retried names its subtask elsewhere)
        key = f"{e['operator']}[{e['index']}]"
        log = logs.setdefault(key, SubtaskLog())
        inc = _incarnation(e)
        kind = e.get("event")
        order = fenced.setdefault(key, [])
        if kind == "fencing" and inc not in order:
            order.append(inc)
            if e.get("by") is not None:
                by_driver.add(key)
            else:
                planned = key in by_driver or log.state in ("stopped", "finished")
                starts.setdefault(key, []).append((inc, planned))
                by_driver.discard(key)
        elif inc in order[:-1]:
            continue  # a superseded incarnation
        if kind == "skipped":
            skipped.setdefault(key, set()).add(inc)
        if kind == "redo":  # the same incarnation goes on: counted apart from restarts
            log.redos += 1
        if isinstance(kind, str) and kind in _STATES:
            log.state = _STATES[kind]
        if log.incarnation != inc:
            log.incarnation, log.last_event = inc, None
        t = e.get("time")
        if isinstance(t, int | float):
            log.last_event = max(float(t), log.last_event or 0.0)
    for key, log in logs.items():
        ran = [p for i, p in starts.get(key, []) if i not in skipped.get(key, set())]
        log.planned_restarts = sum(ran[1:])
        log.restarts = len(ran[1:]) - log.planned_restarts
    return logs


def newest_heartbeats(
    heartbeats: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, Incarnation], float]:
    """Newest heartbeat time per (``operator[index]``, incarnation)."""
    out: dict[tuple[str, Incarnation], float] = {}
    for h in heartbeats:
        t = h.get("time")
        if "operator" not in h or not isinstance(t, int | float):
            continue
        k = (f"{h['operator']}[{h.get('index')}]", _incarnation(h))
        out[k] = max(float(t), out.get(k, 0.0))
    return out


def liveness(state: str, last_seen: float | None, now: float, lost_after: float) -> str:
    """``lost`` for a restoring or running subtask not seen for ``lost_after`` s, else ``state``."""
    if state in LIVE_STATES and (last_seen is None or now - last_seen > lost_after):
        return "lost"
    return state


def subtask_row(
    job: JobId,
    name: str,
    index: int,
    inputs: Iterable[str],
    log: SubtaskLog | None,
    ckpt: Checkpoint | None,
    ends: Mapping[TopicPartition, int],
    beats: Mapping[tuple[str, Incarnation], float] | None,
    now: float,
    lost_after: float = LOST_AFTER_S,
    owned: Iterable[TopicPartition] | None = None,
    read_at: float | None = None,
    drained: Iterable[TopicPartition] = (),
) -> SubtaskStatus:
    """One row from what was read. ``beats`` None: no heartbeats exist, liveness unknown.

    ``owned``: the input partitions the subtask reads (``PlanDoc`` ownership); None:
    partition ``index`` of each of ``inputs``. ``read_at``: the wall time up to which the
    heartbeats had been read (None: ``now``); liveness is judged at that time, ages are
    shown at ``now``. ``drained``: input partitions found to hold nothing left to read
    past the checkpointed position (only transaction markers or aborted records,
    :func:`unread`): no debt there.
    """
    log = log or SubtaskLog()
    key = f"{name}[{index}]"
    state = log.state
    seen = log.last_event
    if log.incarnation is not None and beats is not None:
        beat = beats.get((key, log.incarnation))
        if beat is not None:
            seen = max(beat, seen or 0.0)
    if ckpt is not None and ckpt.meta.finished:
        state = "finished"
    elif beats is not None:
        state = liveness(state, seen, now if read_at is None else read_at, lost_after)
    debt: dict[str, int] = {}
    if state != "finished":
        tps = list(owned) if owned is not None else [TopicPartition(t, index) for t in inputs]
        start = dict(ckpt.reader.inputs) if ckpt else {}
        owed = PositionTracker(tps, start).replay_debt(ends)
        empty = set(drained)
        debt = {str(tp): 0 if tp in empty else n for tp, n in owed.items()}
    _run, attempt, pid, host = log.incarnation or (None, None, None, None)
    return SubtaskStatus(
        subtask=f"{job}/{key}",
        state=state,
        attempt=attempt,
        checkpoint=int(ckpt.checkpoint_id) if ckpt else None,
        checkpoint_age_s=round(now - ckpt.meta.wall_time, 1) if ckpt else None,
        replay_debt=debt,
        changelog_records=_changelog_records(ckpt),
        restarts=log.restarts,
        planned_restarts=log.planned_restarts,
        redos=log.redos,
        host=host,
        pid=pid,
        seen_age_s=round(now - seen, 1) if seen is not None else None,
    )


def _changelog_records(ckpt: Checkpoint | None) -> int | None:
    """Offsets written to the subtask's changelog partitions (None: no state written)."""
    positions = ckpt.changelog_positions() if ckpt else {}
    return sum(map(int, positions.values())) if positions else None


def submission(settings: KafkaSettings, job: JobId) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The event log of ``job`` and its newest ``submitted`` event.

    :class:`ConfigError` ``job X was never submitted`` if there is neither; the event
    topic's existence is checked first (one metadata request; nothing is created).
    """
    never = ConfigError(
        f"job {job} was never submitted to {settings.bootstrap_servers}; "
        "check --job and --bootstrap"
    )
    if events_topic(job) not in Admin(settings).partition_counts():
        raise never
    events = list(read_events(settings, job))
    subs = [e for e in events if e.get("event") == "submitted"]
    if not subs:
        raise never
    return events, subs[-1]


def plan_of(job: JobId, submitted: Mapping[str, Any]) -> PlanDoc:
    """The plan description recorded in ``submitted``."""
    doc = submitted.get("plan")
    if not isinstance(doc, dict):
        raise ConfigError(
            f"job {job} was submitted by a Spillway version that did not record its plan; "
            "pass --pipeline MODULE:PIPELINE (in the job's environment)"
        )
    return PlanDoc.from_json(doc, f"the submitted event of job {job}")


def job_status(
    settings: KafkaSettings,
    job: JobId,
    plan: PlanDoc,
    events: Iterable[Mapping[str, Any]],
    lost_after: float = LOST_AFTER_S,
) -> list[SubtaskStatus]:
    """The status of every subtask of ``job`` (shaped as ``plan``), given its event log."""
    logs = fold_events(events)
    beats: dict[tuple[str, Incarnation], float] | None = None
    read_at: float | None = None
    if heartbeats_topic(job) in Admin(settings).partition_counts():
        # read_heartbeats reads up to the end it finds first: everything written before now
        read_at = time.time()
        beats = newest_heartbeats(read_heartbeats(settings, job, plan.subtask_count()))
    probe = AssignedConsumer(settings, f"spillway.{job}.status")
    rows: list[SubtaskStatus] = []
    positions: list[Mapping[TopicPartition, int]] = []  # each row's checkpointed inputs
    ends: dict[TopicPartition, int] = {}
    try:
        for op in plan.operators:
            store = CheckpointStore(settings, job, OperatorName(op.name), op.parallelism)
            try:
                ckpts = [store.latest(i) for i in range(op.parallelism)]
                # One batched query for the partitions of every unfinished subtask.
                ends.update(
                    probe.end_offsets(
                        [
                            tp
                            for i, ckpt in enumerate(ckpts)
                            if not (ckpt is not None and ckpt.meta.finished)
                            for tp in op.owned_inputs(i)
                        ]
                    )
                )
                for i, ckpt in enumerate(ckpts):
                    positions.append(dict(ckpt.reader.inputs) if ckpt else {})
                    rows.append(
                        subtask_row(
                            job,
                            op.name,
                            i,
                            [c.topic for c in op.inputs],
                            logs.get(f"{op.name}[{i}]"),
                            ckpt,
                            ends,
                            beats,
                            time.time(),
                            lost_after,
                            owned=op.owned_inputs(i),
                            read_at=read_at,
                        )
                    )
            finally:
                store.close()
    finally:
        probe.close()
    _settle_stopped(settings, job, rows, positions, ends)
    return rows


def _settle_stopped(
    settings: KafkaSettings,
    job: JobId,
    rows: list[SubtaskStatus],
    positions: list[Mapping[TopicPartition, int]],
    ends: Mapping[TopicPartition, int],
) -> None:
    """Zero the debt of partitions a subtask that is not running has nothing left to read
    in: past its position only transaction markers (or aborted records), which count as
    offsets. A running subtask's debt stays as counted: it moves anyway."""
    by_name = {str(tp): tp for tp in ends}  # a partition without a known end owes nothing
    owed: dict[TopicPartition, int] = {}
    for r, pos in zip(rows, positions, strict=True):
        if r.state not in LIVE_STATES:
            for name, n in r.replay_debt.items():
                if n > 0 and name in by_name:
                    owed[by_name[name]] = pos.get(by_name[name], 0)
    if not owed:
        return
    empty = {str(tp) for tp in unread(settings, job, owed, ends)}
    for r in rows:
        if r.state not in LIVE_STATES:
            r.replay_debt = {name: 0 if name in empty else n for name, n in r.replay_debt.items()}


def unread(
    settings: KafkaSettings,
    job: JobId,
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    timeout_s: float = 5.0,
) -> set[TopicPartition]:
    """Of the partitions in ``starts`` (each read from that offset), those holding no
    committed message from there up to their end in ``ends``: only transaction markers
    or aborted records, which a read_committed reader skips (its position passes them
    without a message). A partition not settled within ``timeout_s`` is left out."""
    consumer = AssignedConsumer(settings, f"spillway.{job}.status-probe")
    pending = {tp: ends[tp] for tp in starts if tp in ends}
    empty: set[TopicPartition] = set()
    try:
        consumer.assign({tp: Offset(starts[tp]) for tp in pending})
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for m in consumer.consume(100, 0.2):
                topic, partition = m.topic(), m.partition()
                if topic is not None and partition is not None:  # a message left to read
                    pending.pop(TopicPartition(topic, partition), None)
            for tp, end in list(pending.items()):
                pos = consumer.position(tp)
                if pos is not None and pos >= end:
                    empty.add(tp)
                    del pending[tp]
    finally:
        consumer.close()
    return empty


def render(rows: list[SubtaskStatus]) -> str:
    """A fixed-width table for people: one replay debt per subtask, the sum over its input
    partitions (``-`` for a subtask without inputs; per partition in ``--json``),
    restarts after failures apart from planned ones, and redos within an attempt."""
    lines = [
        f"{'subtask':40} {'state':12} {'attempt':>7} {'host:pid':24} {'seen s':>6} "
        f"{'ckpt':>6} {'age s':>7} {'restarts':>8} {'planned':>7} {'redos':>5} "
        f"{'replay debt':>11}"
    ]
    for r in rows:
        debt = str(sum(r.replay_debt.values())) if r.replay_debt else "-"
        where = f"{r.host}:{r.pid}" if r.host is not None else "-"
        lines.append(
            f"{r.subtask:40} {r.state:12} {_s(r.attempt):>7} {where:24} {_s(r.seen_age_s):>6} "
            f"{_s(r.checkpoint):>6} {_s(r.checkpoint_age_s):>7} {r.restarts:>8} "
            f"{r.planned_restarts:>7} {r.redos:>5} {debt:>11}"
        )
    return "\n".join(lines)


def as_json(rows: list[SubtaskStatus]) -> list[dict[str, Any]]:
    """Rows as plain dicts for ``--json``."""
    return [asdict(r) for r in rows]


def _s(v: object) -> str:
    return "-" if v is None else str(v)
